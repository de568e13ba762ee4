//! Who sent a packet, for per-app isolation: the uid that owns the
//! application's socket, read from the namespace's socket tables
//! (`/proc/net/{tcp,tcp6,udp,udp6}`). On Android every app has its own
//! uid, which is what Orbot-style per-app isolation keys on; in a
//! namespace, programs run as different users get different circuits.
//!
//! The tables are per network namespace, so a thread of ours enters the
//! tunnel's namespace (`setns`) once and answers lookups from there
//! (`/proc/thread-self/net/...` shows the thread's namespace). Lookups
//! happen only for packets that start a flow.

use super::super::SysError;
use super::super::netns::Namespace;
use super::super::procnet::uid_in;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::AsRawFd;
use std::time::Duration;
use tokio::sync::oneshot;

/// Lookups queued at once (more are answered "unknown").
const QUEUE: usize = 64;
/// Longest a lookup may take.
const TIMEOUT: Duration = Duration::from_secs(2);

struct Req {
    tcp: bool,
    src: SocketAddr,
    reply: oneshot::Sender<Option<u32>>,
}

/// Looks up the uid owning a socket in the tunnel's namespace.
#[derive(Debug, Clone)]
pub struct AppLookup {
    tx: std::sync::mpsc::SyncSender<Req>,
}

impl std::fmt::Debug for Req {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Req").field("src", &self.src).finish()
    }
}

#[allow(unsafe_code)]
fn enter(ns: &std::fs::File) -> std::io::Result<()> {
    // SAFETY: setns takes a descriptor we own (borrowed for the call) and
    // a constant namespace type; it changes only the calling thread,
    // which was made for this and never runs anything else.
    let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl AppLookup {
    /// Start the lookup thread inside `ns`. It ends when the last
    /// [`AppLookup`] is dropped.
    pub fn start(ns: &Namespace) -> Result<AppLookup, SysError> {
        let f = std::fs::File::open(std::path::Path::new("/run/netns").join(ns.name()))?;
        let (tx, rx) = std::sync::mpsc::sync_channel::<Req>(QUEUE);
        let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::io::Result<()>>();
        std::thread::Builder::new()
            .name("tunnel-apps".into())
            .spawn(move || {
                let r = enter(&f);
                let ok = r.is_ok();
                let _ = ready_tx.send(r);
                if !ok {
                    return;
                }
                while let Ok(req) = rx.recv() {
                    let _ = req.reply.send(lookup(req.tcp, req.src));
                }
            })?;
        match ready_rx.recv() {
            Ok(Ok(())) => Ok(AppLookup { tx }),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => Err(SysError::Io(std::io::Error::other(
                "app lookup thread ended",
            ))),
        }
    }

    /// The uid owning the socket `src` (`proto` 6: TCP, 17: UDP), if
    /// found.
    pub async fn uid(&self, proto: u8, src: SocketAddr) -> Option<u32> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .try_send(Req {
                tcp: proto == 6,
                src,
                reply,
            })
            .ok()?;
        tokio::time::timeout(TIMEOUT, rx).await.ok()?.ok()?
    }
}

fn lookup(tcp: bool, src: SocketAddr) -> Option<u32> {
    let base = if tcp { "tcp" } else { "udp" };
    let read = |v6: bool| {
        let name = if v6 {
            format!("{base}6")
        } else {
            base.to_string()
        };
        std::fs::read_to_string(format!("/proc/thread-self/net/{name}")).unwrap_or_default()
    };
    match src.ip() {
        IpAddr::V4(v4) => uid_in(&read(false), src).or_else(|| {
            // A dual-stack socket lists IPv4 peers as mapped addresses.
            let mapped = SocketAddr::new(IpAddr::V6(v4.to_ipv6_mapped()), src.port());
            uid_in(&read(true), mapped)
        }),
        IpAddr::V6(_) => uid_in(&read(true), src),
    }
}
