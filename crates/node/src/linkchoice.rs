//! Which transport a new outgoing link uses (`docs/quic-links.md` §5):
//! QUIC when both ends offer it, TLS otherwise, and TLS again when a QUIC
//! attempt fails or takes longer than the fallback time. The one copy of
//! that rule: relays extending and clients reaching their first hop use it.
//!
//! [`QuicPeers`] remembers, per relay identity, the QUIC address learned
//! from a link that authenticated over QUIC and the QUIC addresses that
//! failed while TLS worked (that address gets no QUIC attempt until
//! [`RETRY_QUIC_AFTER`] has passed, so a blocked UDP path costs the
//! fallback time once, not on every link; another address for the same
//! relay is still tried, so a wrong address from an EXTEND2 hint cannot
//! shut the right one out). Both tables are bounded.

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::debug;

/// After a QUIC attempt failed (and TLS worked), TLS is used for that peer
/// for this long.
pub const RETRY_QUIC_AFTER: Duration = Duration::from_secs(600);

/// The transport of one attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// QUIC to this UDP address.
    Quic(SocketAddr),
    /// TLS to this TCP address (the ORPort).
    Tls(SocketAddr),
}

impl Via {
    /// `"quic"` or `"tls"`.
    pub fn name(&self) -> &'static str {
        match self {
            Via::Quic(_) => "quic",
            Via::Tls(_) => "tls",
        }
    }
}

/// What we know of other relays' QUIC links.
#[derive(Debug)]
pub struct QuicPeers {
    inner: Mutex<Inner>,
    max: usize,
}

#[derive(Debug, Default)]
struct Inner {
    addrs: HashMap<[u8; 20], SocketAddr>,
    /// The address whose QUIC attempt failed, and when.
    failed: HashMap<[u8; 20], (SocketAddr, Instant)>,
}

impl QuicPeers {
    /// Tables of at most `max` peers each.
    pub fn new(max: usize) -> Self {
        QuicPeers {
            inner: Mutex::new(Inner::default()),
            max: max.max(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `id` proved its identity over QUIC at `addr`.
    pub fn learn(&self, id: [u8; 20], addr: SocketAddr) {
        let mut g = self.lock();
        g.failed.remove(&id);
        if !g.addrs.contains_key(&id) && g.addrs.len() >= self.max {
            // Full: forget an arbitrary entry (it is only a hint).
            if let Some(k) = g.addrs.keys().next().copied() {
                g.addrs.remove(&k);
            }
        }
        g.addrs.insert(id, addr);
    }

    /// A QUIC attempt to `id` at `addr` failed where TLS then worked.
    pub fn failed(&self, id: [u8; 20], addr: SocketAddr, now: Instant) {
        let mut g = self.lock();
        if g.addrs.get(&id) == Some(&addr) {
            g.addrs.remove(&id);
        }
        if !g.failed.contains_key(&id) && g.failed.len() >= self.max {
            g.failed
                .retain(|_, (_, at)| now.saturating_duration_since(*at) < RETRY_QUIC_AFTER);
            if g.failed.len() >= self.max
                && let Some(k) = g
                    .failed
                    .iter()
                    .min_by_key(|(_, (_, at))| *at)
                    .map(|(k, _)| *k)
            {
                g.failed.remove(&k);
            }
        }
        g.failed.insert(id, (addr, now));
    }

    /// Where to try QUIC for `id`: `known` (an address from a source we
    /// trust, the directory) if given, else what we learned, else `hint`
    /// (an address nobody vouched for: an EXTEND2 link specifier); None
    /// when none or when QUIC failed at that address recently.
    pub fn target(
        &self,
        id: [u8; 20],
        known: Option<SocketAddr>,
        hint: Option<SocketAddr>,
        now: Instant,
    ) -> Option<SocketAddr> {
        let mut g = self.lock();
        let addr = known.or_else(|| g.addrs.get(&id).copied()).or(hint)?;
        if let Some((bad, at)) = g.failed.get(&id).copied() {
            if now.saturating_duration_since(at) >= RETRY_QUIC_AFTER {
                g.failed.remove(&id);
            } else if bad == addr {
                return None;
            }
        }
        Some(addr)
    }
}

/// Open a link to `id`: over QUIC to `quic` first when given (bounded by
/// `fallback`), over TLS to `tls` otherwise or when that fails. A QUIC
/// failure followed by a TLS success is remembered in `peers`.
pub async fn connect<T, E, F, Fut>(
    peers: &QuicPeers,
    id: [u8; 20],
    quic: Option<SocketAddr>,
    tls: SocketAddr,
    fallback: Duration,
    attempt: F,
) -> Result<T, E>
where
    F: Fn(Via) -> Fut,
    Fut: Future<Output = Result<T, E>>,
    E: std::fmt::Display,
{
    let Some(q) = quic else {
        return attempt(Via::Tls(tls)).await;
    };
    match tokio::time::timeout(fallback, attempt(Via::Quic(q))).await {
        Ok(Ok(t)) => {
            peers.learn(id, q);
            return Ok(t);
        }
        Ok(Err(e)) => debug!("QUIC link failed ({e}); falling back to TLS"),
        Err(_) => debug!("QUIC link not up within {fallback:?}; falling back to TLS"),
    }
    let t = attempt(Via::Tls(tls)).await?;
    peers.failed(id, q, Instant::now());
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn addr(p: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], p))
    }

    #[test]
    fn known_addresses_learned_addresses_hints_and_failures() {
        let p = QuicPeers::new(2);
        let t0 = Instant::now();
        let id = [1; 20];
        assert_eq!(p.target(id, None, None, t0), None);
        assert_eq!(p.target(id, None, Some(addr(9)), t0), Some(addr(9)));
        assert_eq!(
            p.target(id, Some(addr(7)), Some(addr(9)), t0),
            Some(addr(7))
        );
        p.learn(id, addr(5));
        assert_eq!(p.target(id, None, None, t0), Some(addr(5)));
        // What was learned wins over a hint, the directory over both.
        assert_eq!(p.target(id, None, Some(addr(9)), t0), Some(addr(5)));
        assert_eq!(
            p.target(id, Some(addr(7)), Some(addr(9)), t0),
            Some(addr(7))
        );
        // A failure at the learned address: forgotten, no QUIC there until
        // the retry time, while another address is still tried (a wrong
        // hint cannot shut out the right one).
        p.failed(id, addr(5), t0);
        assert_eq!(p.target(id, None, None, t0), None);
        assert_eq!(p.target(id, Some(addr(5)), None, t0), None);
        assert_eq!(p.target(id, Some(addr(7)), None, t0), Some(addr(7)));
        assert_eq!(p.target(id, None, Some(addr(9)), t0), Some(addr(9)));
        p.failed(id, addr(9), t0);
        assert_eq!(p.target(id, None, Some(addr(9)), t0), None);
        let later = t0 + RETRY_QUIC_AFTER;
        assert_eq!(p.target(id, None, Some(addr(9)), later), Some(addr(9)));
        // A failure elsewhere leaves the learned address alone.
        p.learn([2; 20], addr(6));
        p.failed([2; 20], addr(8), t0);
        assert_eq!(p.target([2; 20], None, None, t0), Some(addr(6)));
        // Bounded: the third peer pushes one out.
        for i in 2..=4u8 {
            p.learn([i; 20], addr(u16::from(i)));
            p.failed([i + 10; 20], addr(1), t0);
        }
        let g = p.lock();
        assert!(g.addrs.len() <= 2 && g.failed.len() <= 2);
    }

    #[tokio::test]
    async fn quic_first_then_tls_within_the_fallback_time() {
        const FB: Duration = Duration::from_millis(200);
        let peers = QuicPeers::new(8);
        let tries = AtomicUsize::new(0);
        // QUIC works: used, learned.
        let got = connect(&peers, [1; 20], Some(addr(1)), addr(2), FB, |v| {
            tries.fetch_add(1, Ordering::Relaxed);
            async move { Ok::<_, String>(v) }
        })
        .await;
        assert_eq!(got, Ok(Via::Quic(addr(1))));
        assert_eq!(
            peers.target([1; 20], None, None, Instant::now()),
            Some(addr(1))
        );
        // QUIC hangs: TLS after the fallback time, and QUIC is skipped
        // next time.
        let start = Instant::now();
        let got = connect(
            &peers,
            [2; 20],
            Some(addr(1)),
            addr(2),
            FB,
            |v| async move {
                if let Via::Quic(_) = v {
                    std::future::pending::<()>().await;
                }
                Ok::<_, String>(v)
            },
        )
        .await;
        assert_eq!(got, Ok(Via::Tls(addr(2))));
        assert!(start.elapsed() >= FB);
        assert_eq!(
            peers.target([2; 20], Some(addr(1)), None, Instant::now()),
            None
        );
        // Both fail: the error is TLS's, and QUIC is not marked failed.
        let got: Result<Via, String> = connect(
            &peers,
            [3; 20],
            Some(addr(1)),
            addr(2),
            FB,
            |v| async move { Err(format!("{} refused", v.name())) },
        )
        .await;
        assert_eq!(got, Err("tls refused".to_string()));
        assert_eq!(
            peers.target([3; 20], Some(addr(1)), None, Instant::now()),
            Some(addr(1))
        );
        // No QUIC address: TLS only, one attempt.
        tries.store(0, Ordering::Relaxed);
        let got = connect(&peers, [4; 20], None, addr(2), FB, |v| {
            tries.fetch_add(1, Ordering::Relaxed);
            async move { Ok::<_, String>(v) }
        })
        .await;
        assert_eq!(
            (got, tries.load(Ordering::Relaxed)),
            (Ok(Via::Tls(addr(2))), 1)
        );
    }
}
