//! What the SOCKS front end tells the control port about a stream (STREAM
//! events, `stream-status`, ATTACHSTREAM, CLOSESTREAM), and byte counting
//! on the application socket for BW, CIRC_BW and `traffic/*`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;

use onionmix_cell::relay::TargetHost;
use onionmix_frontend::control::events::{StreamStatus, stream_reason_name};
use onionmix_frontend::socks::{SocksCmd, SocksRequest, SocksVersion};

use super::hub::ControlHub;
use crate::client::circuit::Circuit;
use crate::control::counted::{Counted, Tally};

/// How long a stream waits for ATTACHSTREAM (tor closes unattached
/// streams after about two minutes).
pub const ATTACH_TIMEOUT: Duration = Duration::from_secs(120);

/// One SOCKS request as the control port sees it.
pub struct Tracked {
    hub: Arc<ControlHub>,
    /// The stream's controller id.
    pub id: u64,
    resolve: bool,
    close_rx: Option<oneshot::Receiver<u8>>,
    circ: Option<u64>,
    done: std::sync::atomic::AtomicBool,
}

impl Drop for Tracked {
    /// A stream whose handler ended without saying how (an error writing
    /// to the application) is reported closed, so no entry is left behind.
    fn drop(&mut self) {
        if !self.done.load(Ordering::Relaxed) {
            self.hub
                .stream_status(self.id, "CLOSED", None, Some("MISC"), None);
        }
    }
}

impl std::fmt::Debug for Tracked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tracked").field("id", &self.id).finish()
    }
}

fn target(req: &SocksRequest) -> String {
    match &req.host {
        TargetHost::Hostname(h) => format!("{h}:{}", req.port),
        TargetHost::Ip(std::net::IpAddr::V6(a)) => format!("[{a}]:{}", req.port),
        TargetHost::Ip(a) => format!("{a}:{}", req.port),
    }
}

impl Tracked {
    /// Announce a new request (STREAM NEW / NEWRESOLVE).
    pub fn new(hub: &Arc<ControlHub>, req: &SocksRequest, peer: SocketAddr, epoch: u64) -> Tracked {
        let resolve = matches!(req.cmd, SocksCmd::Resolve | SocksCmd::ResolvePtr);
        let status = StreamStatus {
            id: 0,
            status: if resolve { "NEWRESOLVE" } else { "NEW" },
            circ_id: 0,
            target: target(req),
            reason: None,
            remote_reason: None,
            source_addr: Some(peer.to_string()),
            purpose: Some(if resolve { "DNS_REQUEST" } else { "USER" }),
            socks_auth: req.auth.clone(),
            client_protocol: match req.version {
                SocksVersion::V4 => "SOCKS4",
                SocksVersion::V5 => "SOCKS5",
            },
            nym_epoch: epoch,
        };
        let id = hub.stream_new(status);
        let (tx, rx) = oneshot::channel();
        hub.with_stream(id, |e| e.close = Some(tx));
        Tracked {
            hub: hub.clone(),
            id,
            resolve,
            close_rx: Some(rx),
            circ: None,
            done: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether the controller attaches streams (`__LeaveStreamsUnattached`).
    pub fn controller_attaches(&self) -> bool {
        self.hub.leave_unattached.load(Ordering::Relaxed)
    }

    /// Wait for ATTACHSTREAM; None on timeout, if the stream is gone, or
    /// if CLOSESTREAM names it first (tor then fails the stream: the
    /// caller answers the application and reports FAILED and CLOSED).
    pub async fn wait_attach(&mut self) -> Option<Arc<Circuit>> {
        let (tx, rx) = oneshot::channel();
        self.hub.with_stream(self.id, |e| e.attach = Some(tx))?;
        self.hub.emit("STREAM", || {
            onionmix_frontend::control::reply::event(&format!(
                "STREAM {} CONTROLLER_WAIT 0 {}",
                self.id,
                self.hub
                    .with_stream(self.id, |e| e.status.target.clone())
                    .unwrap_or_default()
            ))
        });
        // The close request is only borrowed: an attached stream can still
        // be closed later (`close_requested`).
        let mut close = self.close_rx.take();
        let closed = async {
            match close.as_mut() {
                Some(c) => {
                    let _ = c.await;
                }
                None => std::future::pending::<()>().await,
            }
        };
        let attached = tokio::select! {
            r = tokio::time::timeout(ATTACH_TIMEOUT, rx) => Some(r.ok().and_then(|c| c.ok())),
            _ = closed => None,
        };
        match attached {
            Some(c) => {
                self.close_rx = close;
                c
            }
            None => None,
        }
    }

    /// The stream is sent on `circ` (SENTCONNECT / SENTRESOLVE).
    pub fn sent(&mut self, circ: &Arc<Circuit>) {
        self.hub.circ_handle(circ, false);
        self.circ = Some(circ.ctl_id);
        let st = if self.resolve {
            "SENTRESOLVE"
        } else {
            "SENTCONNECT"
        };
        self.hub
            .stream_status(self.id, st, Some(circ.ctl_id), None, None);
    }

    /// The exit answered.
    pub fn succeeded(&self) {
        self.hub
            .stream_status(self.id, "SUCCEEDED", None, None, None);
    }

    /// Retried on another circuit.
    pub fn detached(&self, end_reason: u8) {
        self.hub.stream_status(
            self.id,
            "DETACHED",
            Some(0),
            None,
            Some(stream_reason_name(end_reason)),
        );
    }

    /// Failed for good.
    pub fn failed(&self, end_reason: u8, remote: bool) {
        self.done.store(true, Ordering::Relaxed);
        let name = stream_reason_name(end_reason);
        let (r, rr) = if remote {
            (None, Some(name))
        } else {
            (Some(name), None)
        };
        self.hub.stream_status(self.id, "FAILED", None, r, rr);
    }

    /// Closed after success.
    pub fn closed(&self) {
        self.done.store(true, Ordering::Relaxed);
        self.hub
            .stream_status(self.id, "CLOSED", None, Some("DONE"), None);
    }

    /// A future that resolves when CLOSESTREAM names this stream.
    pub fn close_requested(&mut self) -> impl Future<Output = u8> + use<> {
        let rx = self.close_rx.take();
        async move {
            match rx {
                Some(rx) => rx.await.unwrap_or(0),
                None => std::future::pending().await,
            }
        }
    }

    /// Wrap the application socket so bytes are counted for this stream's
    /// circuit and the client.
    pub fn count<S>(&self, sock: S) -> Counted<S, StreamTally> {
        Counted::new(
            sock,
            StreamTally {
                hub: self.hub.clone(),
                circ: self.circ.and_then(|c| self.hub.circ_bw(c)),
            },
        )
    }
}

/// Counts a stream's bytes for the client and its circuit: what the
/// application writes is written to the network, what it reads was read
/// from the network.
pub struct StreamTally {
    hub: Arc<ControlHub>,
    circ: Option<Arc<(AtomicU64, AtomicU64)>>,
}

impl Tally for StreamTally {
    fn read(&self, n: u64) {
        self.hub.written.fetch_add(n, Ordering::Relaxed);
        if let Some(c) = &self.circ {
            c.1.fetch_add(n, Ordering::Relaxed);
        }
    }
    fn written(&self, n: u64) {
        self.hub.read.fetch_add(n, Ordering::Relaxed);
        if let Some(c) = &self.circ {
            c.0.fetch_add(n, Ordering::Relaxed);
        }
    }
}
