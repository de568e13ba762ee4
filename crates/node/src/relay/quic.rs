//! The relay's QUIC links (`docs/quic-links.md`): a UDP listener next to
//! the ORPort (same port number unless `quic_listen` says otherwise) with
//! the ORPort's admission limits, the responder side of the link
//! handshake over the control stream, and what the relay knows of other
//! relays' QUIC links: learned from links ([`RelayQuic::peers`]) and from
//! the directory ([`RelayQuic::directory`]: the consensus and
//! microdescriptors for a relay, the uploaded descriptors for an
//! authority). Outgoing links choose their transport in
//! [`super::ChannelRegistry::get_or_connect`].

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use tracing::{debug, info};

use onionmix_link::quic::{QuicIncoming, codes};
use onionmix_link::tls::AUTH3_EXPORTER_LABEL;
use onionmix_link::{LinkConn, QuicStream, QuicTransport};
use onionmix_proto::channel::ResponderHandshake;

use super::link::start_accepted;
use super::netparams::MIN_FETCH_GAP;
use super::{LINK_HANDSHAKE_TIMEOUT, MAX_KNOWN_ADDRS, RelayCtx, rotate};
use crate::admission::Permit;
use crate::clock::now_unix;
use crate::linkchoice::QuicPeers;

/// How long an extension to a relay our directory does not list waits
/// for a fresher directory before it picks a transport: the directory
/// loop fetches at most every [`MIN_FETCH_GAP`], and the fetch itself
/// takes time, so a shorter wait could end before the relay is listed
/// and leave a TLS link open for good (CI 2026-12-07, `mixed_quic_network`:
/// two relays' links to an exit the consensus listed last were TLS with
/// a 3 s wait).
pub const DIRECTORY_WAIT: Duration = Duration::from_secs(MIN_FETCH_GAP.as_secs() + 5);
const _: () = assert!(DIRECTORY_WAIT.as_secs() > MIN_FETCH_GAP.as_secs());

/// The relay's QUIC state.
#[derive(Debug)]
pub struct RelayQuic {
    endpoint: OnceLock<QuicTransport>,
    /// Learned QUIC addresses and recent QUIC failures, by identity.
    pub peers: QuicPeers,
    /// How long a QUIC attempt may take before TLS is tried.
    pub fallback: Duration,
    /// What the directory says of relays' QUIC links.
    directory: Mutex<Directory>,
    /// A newer directory is installed.
    dir_updated: Notify,
    /// An extension met a relay the directory does not list.
    dir_wanted: Notify,
    /// A loop keeps the directory current and answers `dir_wanted`.
    dir_loop: std::sync::atomic::AtomicBool,
}

/// Relays' QUIC addresses as the directory gives them.
#[derive(Debug, Default)]
struct Directory {
    /// Relays the directory lists (with or without QUIC).
    listed: HashSet<[u8; 20]>,
    /// Their QUIC addresses, for those that advertise QUIC.
    quic: HashMap<[u8; 20], SocketAddr>,
}

/// What the directory says of one relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirQuic {
    /// It takes QUIC links here.
    Quic(SocketAddr),
    /// Listed, without QUIC.
    NoQuic,
    /// Not listed (yet).
    Unknown,
}

impl RelayQuic {
    pub(super) fn new(fallback: Duration) -> Self {
        RelayQuic {
            endpoint: OnceLock::new(),
            peers: QuicPeers::new(MAX_KNOWN_ADDRS),
            fallback,
            directory: Mutex::new(Directory::default()),
            dir_updated: Notify::new(),
            dir_wanted: Notify::new(),
            dir_loop: std::sync::atomic::AtomicBool::new(false),
        }
    }

    fn dir(&self) -> std::sync::MutexGuard<'_, Directory> {
        self.directory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the directory says of `id`.
    pub fn dir_lookup(&self, id: &[u8; 20]) -> DirQuic {
        let d = self.dir();
        match d.quic.get(id) {
            Some(a) => DirQuic::Quic(*a),
            None if d.listed.contains(id) => DirQuic::NoQuic,
            None => DirQuic::Unknown,
        }
    }

    /// Replace the directory's view (a relay's new consensus and
    /// microdescriptors): `relays` lists every relay with its QUIC address
    /// if it has one.
    pub fn set_directory(&self, relays: impl IntoIterator<Item = ([u8; 20], Option<SocketAddr>)>) {
        let mut d = Directory::default();
        for (id, q) in relays.into_iter().take(super::MAX_KNOWN_ADDRS) {
            d.listed.insert(id);
            if let Some(q) = q {
                d.quic.insert(id, q);
            }
        }
        *self.dir() = d;
        self.dir_updated.notify_waiters();
    }

    /// Add or update one relay (an authority's accepted descriptor).
    pub fn note_directory(&self, id: [u8; 20], quic: Option<SocketAddr>) {
        let mut d = self.dir();
        if !d.listed.contains(&id) && d.listed.len() >= super::MAX_KNOWN_ADDRS {
            return;
        }
        d.listed.insert(id);
        match quic {
            Some(q) => d.quic.insert(id, q),
            None => d.quic.remove(&id),
        };
    }

    /// Wait until an extension met a relay the directory does not list
    /// (the directory loop then fetches early). Calling this marks the
    /// directory as kept by a loop, so extensions wait for it.
    pub async fn directory_wanted(&self) {
        self.dir_loop
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.dir_wanted.notified().await;
    }

    /// Where to try QUIC for `id` (None: TLS): the caller's hint, else the
    /// directory, else what we learned; never while QUIC failed for `id`
    /// recently. A relay the directory does not list makes the directory
    /// loop fetch now, and this waits for it (at most
    /// [`DIRECTORY_WAIT`]).
    pub async fn target(&self, id: [u8; 20], hint: Option<SocketAddr>) -> Option<SocketAddr> {
        self.endpoint()?;
        if hint.is_some() {
            return self.peers.target(id, hint, Instant::now());
        }
        let mut dir = self.dir_lookup(&id);
        if dir == DirQuic::Unknown && self.dir_loop.load(std::sync::atomic::Ordering::Relaxed) {
            let updated = self.dir_updated.notified();
            self.dir_wanted.notify_one();
            let _ = tokio::time::timeout(DIRECTORY_WAIT, updated).await;
            dir = self.dir_lookup(&id);
        }
        match dir {
            DirQuic::Quic(a) => self.peers.target(id, Some(a), Instant::now()),
            DirQuic::NoQuic | DirQuic::Unknown => self.peers.target(id, None, Instant::now()),
        }
    }

    /// The endpoint, once QUIC runs.
    pub fn endpoint(&self) -> Option<&QuicTransport> {
        self.endpoint.get()
    }

    /// The UDP port we take QUIC links on (what the descriptor says).
    pub fn port(&self) -> Option<u16> {
        self.endpoint()
            .and_then(|t| t.local_addr().ok())
            .map(|a| a.port())
    }
}

/// Bind the QUIC endpoint on `bind`, serving the relay's current TLS
/// certificate, and accept links on it. Returns the bound address.
pub(super) fn start(ctx: &Arc<RelayCtx>, bind: SocketAddr) -> Result<SocketAddr, String> {
    // No rotation between reading the certificate and installing the
    // endpoint's identity for it.
    let _g = ctx.rotation.lock().unwrap_or_else(|e| e.into_inner());
    let mut set = ctx.link();
    let t = QuicTransport::server(
        bind,
        set.cert.cert_der.clone(),
        set.cert.key_pkcs8_der.to_vec(),
        ctx.cfg.quic_limits(),
    )
    .map_err(|e| format!("cannot start QUIC on {bind}: {e}"))?;
    let local = t.local_addr().map_err(|e| format!("QUIC endpoint: {e}"))?;
    set.quic = t.identity();
    ctx.endpoint_set(t.clone())?;
    ctx.install_link(set);
    info!(
        "QUIC links on udp/{local}, congestion control {}",
        ctx.cfg.quic_limits().congestion.name()
    );
    tokio::spawn(serve(ctx.clone(), t));
    Ok(local)
}

impl RelayCtx {
    fn endpoint_set(&self, t: QuicTransport) -> Result<(), String> {
        self.quic
            .endpoint
            .set(t)
            .map_err(|_| "QUIC already started".to_string())
    }
}

/// Accept QUIC links until the endpoint closes. Every attempt that
/// reaches us comes from a validated address (the transport sends Retry
/// first) and passes the ORPort's admission limits, shared with TLS.
async fn serve(ctx: Arc<RelayCtx>, t: QuicTransport) {
    while let Some(inc) = t.accept().await {
        let peer = inc.remote_address();
        match ctx.admit(peer) {
            Ok(permit) => {
                tokio::spawn(accept_one(ctx.clone(), inc, peer, permit));
            }
            Err(why) => {
                // The address is not logged (it may be a client's).
                debug!("refused a QUIC link: {why}");
                inc.refuse();
            }
        }
    }
}

/// One inbound QUIC link: QUIC handshake (serving the certificate the
/// CERTS cell covers), responder link handshake on the control stream,
/// reactor.
async fn accept_one(ctx: Arc<RelayCtx>, inc: QuicIncoming, peer: SocketAddr, permit: Permit) {
    rotate::ensure_link_fresh(&ctx);
    let links = ctx.link();
    let Some(identity) = links.quic.clone() else {
        inc.refuse();
        return;
    };
    let my_addrs = vec![ctx.cfg.advertised_ip()];
    let fut = async {
        let (link, mut control, _info) = inc
            .handshake_with(&identity)
            .await
            .map_err(|e| format!("QUIC accept failed: {e}"))?;
        let hs = ResponderHandshake::new(links.id.as_ref(), now_unix(), my_addrs, Some(peer.ip()));
        let l = link.clone();
        let exporter = move |_: &QuicStream, c: &[u8; 32]| l.export(AUTH3_EXPORTER_LABEL, c).ok();
        match crate::glue::drive_responder_handshake(
            &mut control,
            hs,
            exporter,
            LINK_HANDSHAKE_TIMEOUT,
        )
        .await
        {
            Ok((acc, leftover)) => Ok((acc, leftover, LinkConn::Quic(link, control))),
            Err(e) => {
                link.close(codes::AUTH_FAILED);
                Err(e.to_string())
            }
        }
    };
    match tokio::time::timeout(LINK_HANDSHAKE_TIMEOUT, fut).await {
        Ok(Ok((acc, leftover, conn))) => start_accepted(&ctx, acc, leftover, conn, peer, permit),
        Ok(Err(e)) => debug!("inbound QUIC link failed: {e}"),
        Err(_) => debug!("inbound QUIC link handshake timed out"),
    }
}
