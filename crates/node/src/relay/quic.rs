//! The relay's QUIC links (`docs/quic-links.md`): a UDP listener next to
//! the ORPort (same port number unless `quic_listen` says otherwise) with
//! the ORPort's admission limits, the responder side of the link
//! handshake over the control stream, and what the relay knows of other
//! relays' QUIC links: learned from links ([`RelayQuic::peers`]) and from
//! the directory ([`RelayQuic::directory`]: the consensus and
//! microdescriptors for a relay, the uploaded descriptors for an
//! authority). Outgoing links choose their transport in
//! [`super::ChannelRegistry::get_or_connect`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use tracing::{debug, info};

use onionmix_link::quic::QuicIncoming;
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

/// Early directory fetches that extensions to relays the directory does
/// not list may cause, at most, per [`UNLISTED_WINDOW`] (outside test
/// networks): a client naming made-up relays in EXTEND2 cells cannot make
/// the relay fetch the consensus every [`MIN_FETCH_GAP`]. A relay new to
/// the public network is listed within the hour; until then it gets TLS.
/// A test network, whose relays join the consensus within its first
/// minutes and which no stranger uses, keeps fetching as often as
/// extensions ask (at most every [`MIN_FETCH_GAP`]).
pub const UNLISTED_FETCHES: usize = 3;
/// See [`UNLISTED_FETCHES`].
pub const UNLISTED_WINDOW: Duration = Duration::from_secs(600);

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
    /// An extension met a relay the directory does not describe yet.
    dir_wanted: Notify,
    /// A loop keeps the directory current and answers `dir_wanted`.
    dir_loop: std::sync::atomic::AtomicBool,
    /// When relays the directory does not list last made it fetch early.
    unlisted_fetches: Mutex<VecDeque<Instant>>,
    /// A test network: early fetches for unlisted relays are not limited.
    testing: bool,
}

/// Relays' QUIC addresses as the directory gives them.
#[derive(Debug, Default)]
struct Directory {
    /// Relays the directory lists, with the address it gives each.
    listed: HashMap<[u8; 20], IpAddr>,
    /// Those it describes (a microdescriptor held, or a descriptor
    /// uploaded to an authority), with or without QUIC.
    described: HashSet<[u8; 20]>,
    /// Their QUIC addresses, for those that advertise QUIC.
    quic: HashMap<[u8; 20], SocketAddr>,
    /// A directory was installed (a consensus, or an authority's
    /// descriptors): relays it does not list are not relays we know.
    kept: bool,
}

/// What the directory says of one relay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirQuic {
    /// It takes QUIC links here.
    Quic(SocketAddr),
    /// Described without QUIC, at this address.
    NoQuic(IpAddr),
    /// Listed at this address; its description is not fetched yet.
    Pending(IpAddr),
    /// Not listed (or no directory is kept).
    Unlisted,
}

/// One relay as the directory gives it ([`RelayQuic::set_directory`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DirRelay {
    /// RSA identity.
    pub id: [u8; 20],
    /// The address the directory gives (the consensus's IPv4).
    pub ip: IpAddr,
    /// Whether its description (hence whether it takes QUIC) is known.
    pub described: bool,
    /// The UDP port of its QUIC links, at `ip`, if it advertises them.
    pub quic_port: Option<u16>,
}

impl RelayQuic {
    pub(super) fn new(fallback: Duration, testing: bool) -> Self {
        RelayQuic {
            endpoint: OnceLock::new(),
            peers: QuicPeers::new(MAX_KNOWN_ADDRS),
            fallback,
            directory: Mutex::new(Directory::default()),
            dir_updated: Notify::new(),
            dir_wanted: Notify::new(),
            dir_loop: std::sync::atomic::AtomicBool::new(false),
            unlisted_fetches: Mutex::new(VecDeque::new()),
            testing,
        }
    }

    fn dir(&self) -> std::sync::MutexGuard<'_, Directory> {
        self.directory.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the directory says of `id`.
    pub fn dir_lookup(&self, id: &[u8; 20]) -> DirQuic {
        let d = self.dir();
        if let Some(a) = d.quic.get(id) {
            return DirQuic::Quic(*a);
        }
        match d.listed.get(id) {
            Some(ip) if d.described.contains(id) => DirQuic::NoQuic(*ip),
            Some(ip) => DirQuic::Pending(*ip),
            None => DirQuic::Unlisted,
        }
    }

    /// Whether a directory is kept (relays it does not list are unknown
    /// to us, and an EXTEND2 hint for one is not followed).
    fn keeps_directory(&self) -> bool {
        self.dir_loop.load(std::sync::atomic::Ordering::Relaxed) || self.dir().kept
    }

    /// Replace the directory's view (a relay's new consensus and
    /// microdescriptors): every relay the consensus lists (at most
    /// [`super::MAX_KNOWN_ADDRS`]).
    pub fn set_directory(&self, relays: impl IntoIterator<Item = DirRelay>) {
        let mut d = Directory {
            kept: true,
            ..Directory::default()
        };
        for r in relays.into_iter().take(super::MAX_KNOWN_ADDRS) {
            d.listed.insert(r.id, r.ip);
            if r.described {
                d.described.insert(r.id);
                if let Some(p) = r.quic_port.filter(|p| *p != 0) {
                    d.quic.insert(r.id, SocketAddr::new(r.ip, p));
                }
            }
        }
        *self.dir() = d;
        self.dir_updated.notify_waiters();
    }

    /// Add or update one relay (an authority's accepted descriptor).
    pub fn note_directory(&self, r: DirRelay) {
        let mut d = self.dir();
        d.kept = true;
        if !d.listed.contains_key(&r.id) && d.listed.len() >= super::MAX_KNOWN_ADDRS {
            return;
        }
        d.listed.insert(r.id, r.ip);
        if r.described {
            d.described.insert(r.id);
        } else {
            d.described.remove(&r.id);
        }
        match r.quic_port.filter(|p| *p != 0 && r.described) {
            Some(p) => d.quic.insert(r.id, SocketAddr::new(r.ip, p)),
            None => d.quic.remove(&r.id),
        };
    }

    /// Whether an extension to a relay the directory does not list may
    /// make the directory loop fetch early now (and counts it).
    fn may_fetch_for_unlisted(&self, now: Instant) -> bool {
        if self.testing {
            return true;
        }
        let mut q = self
            .unlisted_fetches
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        while q
            .front()
            .is_some_and(|t| now.saturating_duration_since(*t) >= UNLISTED_WINDOW)
        {
            q.pop_front();
        }
        if q.len() >= UNLISTED_FETCHES {
            return false;
        }
        q.push_back(now);
        true
    }

    /// Wait until an extension met a relay the directory does not list
    /// (the directory loop then fetches early). Calling this marks the
    /// directory as kept by a loop, so extensions wait for it.
    pub async fn directory_wanted(&self) {
        self.dir_loop
            .store(true, std::sync::atomic::Ordering::Relaxed);
        self.dir_wanted.notified().await;
    }

    /// Where to try QUIC for `id` (None: TLS), never at an address where
    /// QUIC failed recently:
    ///
    /// - the directory's QUIC address for `id`, when it gives one;
    /// - else what we learned from an earlier QUIC link with `id`;
    /// - else `hint` (an EXTEND2 link specifier, which nobody vouches for):
    ///   only for a relay the directory lists at the hint's address, or
    ///   when no directory is kept. So a client cannot make the relay send
    ///   QUIC packets to an address that is not a relay's.
    ///
    /// A relay the consensus lists whose description is not fetched yet
    /// makes the directory loop fetch now, and this waits for it (at most
    /// [`DIRECTORY_WAIT`]); so may one the consensus does not list, at
    /// most [`UNLISTED_FETCHES`] times per [`UNLISTED_WINDOW`] outside a
    /// test network.
    pub async fn target(&self, id: [u8; 20], hint: Option<SocketAddr>) -> Option<SocketAddr> {
        if self.endpoint()?.is_full() {
            // Our own limit: TLS, and nothing remembered against `id`.
            return None;
        }
        let mut dir = self.dir_lookup(&id);
        let wait = match dir {
            DirQuic::Pending(_) => true,
            DirQuic::Unlisted => {
                self.dir_loop.load(std::sync::atomic::Ordering::Relaxed)
                    && self.may_fetch_for_unlisted(Instant::now())
            }
            DirQuic::Quic(_) | DirQuic::NoQuic(_) => false,
        };
        if wait && self.dir_loop.load(std::sync::atomic::Ordering::Relaxed) {
            let updated = self.dir_updated.notified();
            self.dir_wanted.notify_one();
            let _ = tokio::time::timeout(DIRECTORY_WAIT, updated).await;
            dir = self.dir_lookup(&id);
        }
        let now = Instant::now();
        match dir {
            DirQuic::Quic(a) => self.peers.target(id, Some(a), None, now),
            DirQuic::NoQuic(ip) | DirQuic::Pending(ip) => {
                let hint = hint.filter(|h| h.ip().to_canonical() == ip.to_canonical());
                self.peers.target(id, None, hint, now)
            }
            DirQuic::Unlisted => {
                let hint = hint.filter(|_| !self.keeps_directory());
                self.peers.target(id, None, hint, now)
            }
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
        if ctx
            .control
            .closing
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            // SIGNAL SHUTDOWN: no new links until we exit (as the ORPort).
            inc.refuse();
            continue;
        }
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
    // One deadline for both handshakes. A link handshake that fails or
    // runs out of time closes the connection with the code its failure
    // gives (AUTH_FAILED, PROTOCOL), not the NO_ERROR of a dropped handle.
    let deadline = tokio::time::Instant::now() + LINK_HANDSHAKE_TIMEOUT;
    let (link, mut control, _info) =
        match tokio::time::timeout_at(deadline, inc.handshake_with(&identity)).await {
            Ok(Ok(x)) => x,
            Ok(Err(e)) => {
                debug!("inbound QUIC link failed: QUIC accept failed: {e}");
                return;
            }
            Err(_) => {
                debug!("inbound QUIC link handshake timed out");
                return;
            }
        };
    let hs = ResponderHandshake::new(links.id.as_ref(), now_unix(), my_addrs, Some(peer.ip()));
    let l = link.clone();
    let exporter = move |_: &QuicStream, c: &[u8; 32]| l.export(AUTH3_EXPORTER_LABEL, c).ok();
    let left = deadline.saturating_duration_since(tokio::time::Instant::now());
    match crate::glue::drive_responder_handshake(&mut control, hs, exporter, left).await {
        Ok((acc, leftover)) => start_accepted(
            &ctx,
            acc,
            leftover,
            LinkConn::Quic(link, control),
            peer,
            permit,
        ),
        Err(e) => {
            debug!("inbound QUIC link failed: {e}");
            link.close(e.quic_close_code());
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::sync::atomic::Ordering;

    fn relay(id: u8, described: bool, quic_port: Option<u16>) -> DirRelay {
        DirRelay {
            id: [id; 20],
            ip: "192.0.2.1".parse().unwrap(),
            described,
            quic_port,
        }
    }

    #[test]
    fn the_directory_describes_lists_or_does_not_know() {
        let q = RelayQuic::new(Duration::from_secs(5), false);
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(q.dir_lookup(&[1; 20]), DirQuic::Unlisted);
        assert!(!q.keeps_directory());
        q.set_directory([
            relay(1, true, Some(9001)),
            relay(2, true, None),
            relay(3, false, Some(9001)),
        ]);
        assert!(q.keeps_directory());
        assert_eq!(
            q.dir_lookup(&[1; 20]),
            DirQuic::Quic(SocketAddr::new(ip, 9001))
        );
        assert_eq!(q.dir_lookup(&[2; 20]), DirQuic::NoQuic(ip));
        // Listed, its microdescriptor not held: what it takes is unknown.
        assert_eq!(q.dir_lookup(&[3; 20]), DirQuic::Pending(ip));
        assert_eq!(q.dir_lookup(&[4; 20]), DirQuic::Unlisted);
        // An authority's descriptors, one at a time.
        q.note_directory(relay(4, true, Some(443)));
        assert_eq!(
            q.dir_lookup(&[4; 20]),
            DirQuic::Quic(SocketAddr::new(ip, 443))
        );
        q.note_directory(relay(4, true, None));
        assert_eq!(q.dir_lookup(&[4; 20]), DirQuic::NoQuic(ip));
    }

    #[test]
    fn relays_nobody_lists_make_few_early_fetches() {
        let t = RelayQuic::new(Duration::from_secs(5), true);
        for _ in 0..=UNLISTED_FETCHES {
            assert!(t.may_fetch_for_unlisted(Instant::now()), "a test network");
        }
        let q = RelayQuic::new(Duration::from_secs(5), false);
        let t0 = Instant::now();
        for _ in 0..UNLISTED_FETCHES {
            assert!(q.may_fetch_for_unlisted(t0));
        }
        assert!(!q.may_fetch_for_unlisted(t0));
        assert!(!q.may_fetch_for_unlisted(t0 + UNLISTED_WINDOW / 2));
        assert!(q.may_fetch_for_unlisted(t0 + UNLISTED_WINDOW));
    }

    /// With a directory loop running, an extension to a relay the
    /// consensus does not list waits for a fresh directory only the first
    /// few times; after that it picks TLS at once, so made-up identities
    /// in EXTEND2 cells do not make the relay fetch the consensus and
    /// stall each extension.
    #[tokio::test(start_paused = true)]
    async fn unlisted_relays_wait_for_the_directory_a_few_times_only() {
        let q = RelayQuic::new(Duration::from_secs(5), false);
        let t = QuicTransport::client(
            "127.0.0.1:0".parse().unwrap(),
            onionmix_link::QuicLimits::default(),
        )
        .unwrap();
        q.endpoint.set(t).unwrap();
        q.set_directory([relay(1, true, None)]);
        q.dir_loop.store(true, Ordering::Relaxed);
        let hint = Some(SocketAddr::from(([198, 51, 100, 7], 9001)));
        for i in 0..=UNLISTED_FETCHES {
            let start = tokio::time::Instant::now();
            // Nobody answers the wish for a directory: the wait runs out.
            let got = q.target([0x40 + i as u8; 20], hint).await;
            assert_eq!(got, None, "no hint followed");
            let waited = start.elapsed();
            if i < UNLISTED_FETCHES {
                assert!(waited >= DIRECTORY_WAIT, "{i}: {waited:?}");
            } else {
                assert!(waited < DIRECTORY_WAIT, "{i}: {waited:?}");
            }
        }
    }
}
