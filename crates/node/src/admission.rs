//! Who may open a connection to a listener: per-address concurrency and
//! rate limits with capacity reserved for known peers (dos-spec's
//! connection defences, applied to the ORPort and the DirPort).
//!
//! Sans-IO: the caller passes the time. An admitted connection holds a
//! [`Permit`] for its whole life; dropping it gives the slot back.
//!
//! - At most `max_total` connections at once; the last `reserved_for_known`
//!   of them only for peers the listener knows (authorities, relays it has
//!   seen authenticate), so a flood from unknown addresses cannot lock out
//!   the network's own traffic.
//! - Unknown addresses: at most `max_per_addr` connections each and a token
//!   bucket of `rate_per_addr` new connections per second (burst
//!   `burst_per_addr`). IPv6 addresses are grouped by /64.
//! - The address table is bounded (`max_tracked_addrs`); idle entries are
//!   dropped first, and when it is full of busy addresses, new unknown
//!   addresses are refused rather than the table growing.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Limits for one listener.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdmissionConfig {
    /// Connections open at once, all peers together.
    pub max_total: usize,
    /// Of `max_total`, slots only known peers may take.
    pub reserved_for_known: usize,
    /// Connections open at once from one unknown address (or IPv6 /64).
    pub max_per_addr: usize,
    /// New connections per second from one unknown address.
    pub rate_per_addr: f64,
    /// Burst of new connections from one unknown address.
    pub burst_per_addr: f64,
    /// Addresses tracked at once.
    pub max_tracked_addrs: usize,
}

impl AdmissionConfig {
    /// tor's connection defences for an ORPort (DoSConnectionMaxConcurrentCount
    /// 100, DoSConnectionConnectRate 20, burst 40) within `max_total`.
    pub fn orport(max_total: usize) -> Self {
        AdmissionConfig {
            max_total,
            reserved_for_known: max_total / 8,
            max_per_addr: 100,
            rate_per_addr: 20.0,
            burst_per_addr: 40.0,
            max_tracked_addrs: 65_536,
        }
    }

    /// An authority's DirPort: short plain-HTTP requests, so few at once
    /// per address; a quarter of the slots kept for relays and authorities.
    pub fn dirport(max_total: usize) -> Self {
        AdmissionConfig {
            max_total,
            reserved_for_known: max_total / 4,
            max_per_addr: 8,
            rate_per_addr: 10.0,
            burst_per_addr: 30.0,
            max_tracked_addrs: 65_536,
        }
    }
}

/// Why a connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Every slot (or every unreserved slot, for an unknown peer) is taken.
    #[error("listener full")]
    Full,
    /// This address has its share of connections open.
    #[error("too many connections from this address")]
    PerAddress,
    /// This address opens connections too fast.
    #[error("connection rate from this address exceeded")]
    Rate,
    /// The address table is full of busy addresses.
    #[error("too many addresses tracked")]
    Table,
}

#[derive(Debug, Clone, Copy)]
struct Addr {
    open: usize,
    tokens: f64,
    at: Instant,
}

#[derive(Debug, Default)]
struct State {
    total: usize,
    unknown: usize,
    addrs: HashMap<IpAddr, Addr>,
    /// When a full table was last swept: at most once per [`SWEEP_GAP`],
    /// so a flood from new addresses cannot make every accept a scan.
    swept: Option<Instant>,
}

/// The least time between two sweeps of a full address table.
pub const SWEEP_GAP: std::time::Duration = std::time::Duration::from_secs(1);

/// Counters of refusals (for logs and tests).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdmissionStats {
    /// Connections open now.
    pub open: usize,
    /// Of those, from unknown peers.
    pub open_unknown: usize,
    /// Refused because full.
    pub refused_full: u64,
    /// Refused by the per-address limit.
    pub refused_per_addr: u64,
    /// Refused by the per-address rate.
    pub refused_rate: u64,
    /// Refused because the address table was full.
    pub refused_table: u64,
}

/// The admission state of one listener.
#[derive(Debug)]
pub struct Admission {
    cfg: AdmissionConfig,
    st: Mutex<(State, AdmissionStats)>,
}

/// One admitted connection; the slot is released on drop.
#[derive(Debug)]
pub struct Permit {
    adm: Arc<Admission>,
    key: Option<IpAddr>,
}

impl Admission {
    /// A listener's admission state.
    pub fn new(cfg: AdmissionConfig) -> Arc<Self> {
        Arc::new(Admission {
            cfg,
            st: Mutex::new((State::default(), AdmissionStats::default())),
        })
    }

    /// The limits.
    pub fn config(&self) -> AdmissionConfig {
        self.cfg
    }

    /// Counters.
    pub fn stats(&self) -> AdmissionStats {
        self.st.lock().unwrap_or_else(|e| e.into_inner()).1
    }

    /// Admit a connection from `ip` at `now`; `known` peers skip the
    /// per-address limits and may use the reserved slots.
    pub fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        known: bool,
        now: Instant,
    ) -> Result<Permit, Refusal> {
        let mut g = self.st.lock().unwrap_or_else(|e| e.into_inner());
        let (st, stats) = &mut *g;
        let c = &self.cfg;
        let r = (|| {
            if st.total >= c.max_total {
                return Err(Refusal::Full);
            }
            if known {
                return Ok(None);
            }
            if st.unknown >= c.max_total.saturating_sub(c.reserved_for_known) {
                return Err(Refusal::Full);
            }
            let key = onionmix_proto::netaddr::limit_key(ip);
            if !st.addrs.contains_key(&key) && st.addrs.len() >= c.max_tracked_addrs {
                // Forget addresses with nothing open and a full bucket: they
                // would be admitted the same way if seen anew.
                if st
                    .swept
                    .is_some_and(|t| now.saturating_duration_since(t) < SWEEP_GAP)
                {
                    return Err(Refusal::Table);
                }
                st.swept = Some(now);
                st.addrs
                    .retain(|_, a| a.open > 0 || refill(a, now, c) < c.burst_per_addr);
                if st.addrs.len() >= c.max_tracked_addrs {
                    return Err(Refusal::Table);
                }
            }
            let a = st.addrs.entry(key).or_insert(Addr {
                open: 0,
                tokens: c.burst_per_addr,
                at: now,
            });
            a.tokens = refill(a, now, c);
            a.at = now;
            if a.open >= c.max_per_addr {
                return Err(Refusal::PerAddress);
            }
            if a.tokens < 1.0 {
                return Err(Refusal::Rate);
            }
            a.tokens -= 1.0;
            a.open += 1;
            Ok(Some(key))
        })();
        match r {
            Ok(key) => {
                st.total += 1;
                if key.is_some() {
                    st.unknown += 1;
                }
                stats.open = st.total;
                stats.open_unknown = st.unknown;
                Ok(Permit {
                    adm: self.clone(),
                    key,
                })
            }
            Err(e) => {
                match e {
                    Refusal::Full => stats.refused_full += 1,
                    Refusal::PerAddress => stats.refused_per_addr += 1,
                    Refusal::Rate => stats.refused_rate += 1,
                    Refusal::Table => stats.refused_table += 1,
                }
                Err(e)
            }
        }
    }

    fn release(&self, key: Option<IpAddr>) {
        let mut g = self.st.lock().unwrap_or_else(|e| e.into_inner());
        let (st, stats) = &mut *g;
        st.total = st.total.saturating_sub(1);
        if let Some(k) = key {
            st.unknown = st.unknown.saturating_sub(1);
            if let Some(a) = st.addrs.get_mut(&k) {
                a.open = a.open.saturating_sub(1);
            }
        }
        stats.open = st.total;
        stats.open_unknown = st.unknown;
    }
}

fn refill(a: &Addr, now: Instant, c: &AdmissionConfig) -> f64 {
    let dt = now.saturating_duration_since(a.at).as_secs_f64();
    (a.tokens + dt * c.rate_per_addr).min(c.burst_per_addr)
}

impl Permit {
    /// For a connection from an unknown address: the address (IPv6 by
    /// /64) and how many connections it has open now, this one included.
    /// None for a known peer's.
    pub fn unknown_addr(&self) -> Option<(IpAddr, usize)> {
        let key = self.key?;
        let g = self.adm.st.lock().unwrap_or_else(|e| e.into_inner());
        Some((key, g.0.addrs.get(&key).map_or(1, |a| a.open)))
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.adm.release(self.key);
    }
}

/// Addresses of peers a listener knows (authorities from its config,
/// relays that proved their identity), bounded: when full, the address
/// seen longest ago is forgotten.
#[derive(Debug)]
pub struct KnownAddrs {
    max: usize,
    fixed: Vec<IpAddr>,
    seen: Mutex<HashMap<IpAddr, Instant>>,
}

impl KnownAddrs {
    /// `fixed` addresses are always known; up to `max` more are learned.
    pub fn new(fixed: Vec<IpAddr>, max: usize) -> Self {
        KnownAddrs {
            max,
            fixed: fixed.into_iter().map(|ip| ip.to_canonical()).collect(),
            seen: Mutex::new(HashMap::new()),
        }
    }

    /// Whether `ip` is known (an IPv4 address mapped into IPv6, as a
    /// dual-stack socket reports it, is the IPv4 address).
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.fixed.contains(&ip)
            || self
                .seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains_key(&ip)
    }

    /// Learn (or refresh) `ip` at `now`.
    pub fn learn(&self, ip: IpAddr, now: Instant) {
        let ip = ip.to_canonical();
        if self.fixed.contains(&ip) || self.max == 0 {
            return;
        }
        let mut m = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if !m.contains_key(&ip)
            && m.len() >= self.max
            && let Some(oldest) = m.iter().min_by_key(|(_, t)| **t).map(|(k, _)| *k)
        {
            m.remove(&oldest);
        }
        m.insert(ip, now);
    }

    /// Addresses learned (not counting the fixed ones).
    pub fn learned(&self) -> usize {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).len()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::time::Duration;

    fn cfg() -> AdmissionConfig {
        AdmissionConfig {
            max_total: 10,
            reserved_for_known: 3,
            max_per_addr: 4,
            rate_per_addr: 2.0,
            burst_per_addr: 5.0,
            max_tracked_addrs: 3,
        }
    }

    fn ip(n: u8) -> IpAddr {
        IpAddr::from([127, 0, 0, n])
    }

    #[test]
    fn per_address_cap_and_release() {
        let a = Admission::new(cfg());
        let t = Instant::now();
        let held: Vec<_> = (0..4).map(|_| a.admit(ip(2), false, t).unwrap()).collect();
        assert_eq!(a.admit(ip(2), false, t).unwrap_err(), Refusal::PerAddress);
        // Another address is not affected.
        let other = a.admit(ip(3), false, t).unwrap();
        drop(held);
        assert_eq!(a.stats().open, 1);
        // The slots came back (the bucket still has one token).
        assert!(a.admit(ip(2), false, t).is_ok());
        drop(other);
    }

    #[test]
    fn rate_limit_refills_over_time() {
        let a = Admission::new(cfg());
        let t = Instant::now();
        for _ in 0..5 {
            drop(a.admit(ip(2), false, t).unwrap());
        }
        assert_eq!(a.admit(ip(2), false, t).unwrap_err(), Refusal::Rate);
        // Two per second: half a second gives one more.
        assert!(
            a.admit(ip(2), false, t + Duration::from_millis(500))
                .is_ok()
        );
        assert_eq!(
            a.admit(ip(2), false, t + Duration::from_millis(500))
                .unwrap_err(),
            Refusal::Rate
        );
        assert_eq!(a.stats().refused_rate, 2);
    }

    #[test]
    fn reserved_slots_are_for_known_peers() {
        let a = Admission::new(AdmissionConfig {
            max_per_addr: 100,
            burst_per_addr: 100.0,
            max_tracked_addrs: 100,
            ..cfg()
        });
        let t = Instant::now();
        let mut held = Vec::new();
        for n in 0..7 {
            held.push(a.admit(ip(10 + n), false, t).unwrap());
        }
        // Unknown peers have used their 7 of 10.
        assert_eq!(a.admit(ip(50), false, t).unwrap_err(), Refusal::Full);
        // Known peers get the reserved 3, then nobody.
        for _ in 0..3 {
            held.push(a.admit(ip(1), true, t).unwrap());
        }
        assert_eq!(a.admit(ip(1), true, t).unwrap_err(), Refusal::Full);
        assert_eq!(a.stats().open, 10);
        assert_eq!(a.stats().open_unknown, 7);
    }

    #[test]
    fn address_table_is_bounded() {
        let a = Admission::new(cfg());
        let t = Instant::now();
        let _busy: Vec<_> = (1..=3).map(|n| a.admit(ip(n), false, t).unwrap()).collect();
        // Three busy addresses fill the table: a fourth is refused.
        assert_eq!(a.admit(ip(4), false, t).unwrap_err(), Refusal::Table);
        // Known peers are not tracked, so not affected.
        assert!(a.admit(ip(9), true, t).is_ok());
    }

    #[test]
    fn idle_addresses_are_forgotten() {
        let a = Admission::new(cfg());
        let t = Instant::now();
        for n in 1..=3 {
            drop(a.admit(ip(n), false, t).unwrap());
        }
        // Their buckets refill within 0.5 s; then they are forgotten.
        let later = t + Duration::from_secs(1);
        assert!(a.admit(ip(4), false, later).is_ok());
    }

    #[test]
    fn a_full_table_is_swept_at_most_once_a_second() {
        let a = Admission::new(cfg());
        let t = Instant::now();
        let _busy: Vec<_> = (1..=2).map(|n| a.admit(ip(n), false, t).unwrap()).collect();
        drop(a.admit(ip(3), false, t).unwrap());
        // Full: the sweep finds ip(3)'s bucket not yet refilled.
        let at = |ms| t + Duration::from_millis(ms);
        assert_eq!(a.admit(ip(4), false, at(100)).unwrap_err(), Refusal::Table);
        // By 0.9 s it has refilled, but the table was swept 0.8 s ago.
        assert_eq!(a.admit(ip(4), false, at(900)).unwrap_err(), Refusal::Table);
        // At 1.2 s it is swept again and ip(3) forgotten.
        assert!(a.admit(ip(4), false, at(1200)).is_ok());
    }

    #[test]
    fn ipv6_is_grouped_by_64() {
        let a = Admission::new(AdmissionConfig {
            max_per_addr: 1,
            ..cfg()
        });
        let t = Instant::now();
        let _p = a.admit("2001:db8::1".parse().unwrap(), false, t).unwrap();
        assert_eq!(
            a.admit("2001:db8::2".parse().unwrap(), false, t)
                .unwrap_err(),
            Refusal::PerAddress
        );
        assert!(
            a.admit("2001:db8:0:1::1".parse().unwrap(), false, t)
                .is_ok()
        );
    }

    #[test]
    fn known_addresses_match_ipv4_mapped_into_ipv6() {
        let k = KnownAddrs::new(vec!["::ffff:192.0.2.1".parse().unwrap()], 4);
        assert!(k.contains("192.0.2.1".parse().unwrap()));
        k.learn("::ffff:198.51.100.2".parse().unwrap(), Instant::now());
        assert!(k.contains("198.51.100.2".parse().unwrap()));
        assert!(k.contains("::ffff:198.51.100.2".parse().unwrap()));
        assert!(!k.contains("198.51.100.3".parse().unwrap()));
    }

    #[test]
    fn known_addresses_are_bounded_and_forget_the_oldest() {
        let k = KnownAddrs::new(vec![ip(1)], 2);
        let t = Instant::now();
        assert!(k.contains(ip(1)));
        k.learn(ip(2), t);
        k.learn(ip(3), t + Duration::from_secs(1));
        k.learn(ip(2), t + Duration::from_secs(2));
        k.learn(ip(4), t + Duration::from_secs(3));
        // 3 was seen longest ago.
        assert!(k.contains(ip(2)) && k.contains(ip(4)) && !k.contains(ip(3)));
        assert_eq!(k.learned(), 2);
        k.learn(ip(1), t);
        assert_eq!(k.learned(), 2);
    }
}
