//! Circuit-creation DoS defence (dos-spec §2.1, tor's `dos.c`): per
//! client address, a token bucket of CREATE cells (`DoSCircuitCreationRate`
//! per second, burst `DoSCircuitCreationBurst`). An address whose bucket
//! is empty while it holds at least `DoSCircuitCreationMinConnections`
//! connections is marked for `DoSCircuitCreationDefenseTimePeriod` plus up
//! to half again; while marked, its CREATE cells are refused (defence type
//! 2, DESTROY with RESOURCELIMIT). An address whose circuits hit the
//! outbound queue limit (`circ_max_cell_queue_size_out`)
//! `dos_num_circ_max_outq` times is marked too.
//!
//! Only connections from clients count (peers that did not authenticate
//! as relays). As in tor, the defence is off unless the consensus (or the
//! relay's own configuration) turns it on: the live network's consensus
//! does; private networks' usually do not, where every client shares one
//! address.
//!
//! Sans-IO: the caller passes the time, the address key (IPv6 grouped by
//! /64, as the connection defence does), the connection count and the
//! random offset. The table is bounded: when it is full, entries that are
//! neither marked nor short of tokens are dropped; if none is, a new
//! address is not tracked (and so not refused: the table must not become
//! a way to lock out clients).

use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::cc::params::get_u32;
use crate::netaddr::limit_key;

/// The defence's consensus parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DosCcParams {
    /// `DoSCircuitCreationEnabled` (default off).
    pub enabled: bool,
    /// `DoSCircuitCreationMinConnections` (default 3).
    pub min_connections: u32,
    /// `DoSCircuitCreationRate`, CREATE cells per second (default 3).
    pub rate: u32,
    /// `DoSCircuitCreationBurst` (default 90).
    pub burst: u32,
    /// `DoSCircuitCreationDefenseType`: true for 2 (refuse the cell), false
    /// for 1 (none: detect only).
    pub refuse: bool,
    /// `DoSCircuitCreationDefenseTimePeriod`, seconds (default 3600).
    pub defense_secs: u32,
    /// `dos_num_circ_max_outq` (default 3; 0: off).
    pub num_circ_max_outq: u32,
}

impl Default for DosCcParams {
    fn default() -> Self {
        DosCcParams {
            enabled: false,
            min_connections: 3,
            rate: 3,
            burst: 90,
            refuse: true,
            defense_secs: 3600,
            num_circ_max_outq: 3,
        }
    }
}

const I32_MAX: u32 = i32::MAX as u32;

impl DosCcParams {
    /// The parameters a consensus's `params` line sets (param-spec ranges).
    pub fn from_consensus(p: &BTreeMap<String, i32>) -> Self {
        let d = DosCcParams::default();
        DosCcParams {
            enabled: get_u32(p, "DoSCircuitCreationEnabled", 0, 0, 1) == 1,
            min_connections: get_u32(
                p,
                "DoSCircuitCreationMinConnections",
                d.min_connections,
                1,
                I32_MAX,
            ),
            rate: get_u32(p, "DoSCircuitCreationRate", d.rate, 1, I32_MAX),
            burst: get_u32(p, "DoSCircuitCreationBurst", d.burst, 1, I32_MAX),
            refuse: get_u32(p, "DoSCircuitCreationDefenseType", 2, 1, 2) == 2,
            defense_secs: get_u32(
                p,
                "DoSCircuitCreationDefenseTimePeriod",
                d.defense_secs,
                0,
                I32_MAX,
            ),
            num_circ_max_outq: get_u32(p, "dos_num_circ_max_outq", d.num_circ_max_outq, 0, I32_MAX),
        }
    }
}

/// What to do with a CREATE cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Handle it.
    Allow,
    /// Refuse it (DESTROY, RESOURCELIMIT): the address is marked.
    Refuse,
}

#[derive(Debug, Clone, Copy)]
struct Entry {
    tokens: u32,
    refilled: Instant,
    marked_until: Option<Instant>,
    outq_hits: u32,
}

/// Counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DosCcStats {
    /// Times an address was marked (first marking of each period).
    pub marked: u64,
    /// Of those, by the outbound queue limit.
    pub marked_by_outq: u64,
    /// CREATE cells refused.
    pub refused: u64,
    /// Addresses not tracked because the table was full.
    pub untracked: u64,
}

/// The per-address state.
#[derive(Debug)]
pub struct CircuitCreationDos {
    max_addrs: usize,
    addrs: HashMap<IpAddr, Entry>,
    stats: DosCcStats,
    /// When a full table was last swept (at most once per [`SWEEP_GAP`],
    /// so a flood of new addresses cannot make every CREATE a scan).
    swept: Option<Instant>,
}

/// The least time between two sweeps of a full table.
pub const SWEEP_GAP: Duration = Duration::from_secs(1);

impl CircuitCreationDos {
    /// An empty table holding at most `max_addrs` addresses.
    pub fn new(max_addrs: usize) -> Self {
        CircuitCreationDos {
            max_addrs,
            addrs: HashMap::new(),
            stats: DosCcStats::default(),
            swept: None,
        }
    }

    /// Counters.
    pub fn stats(&self) -> DosCcStats {
        self.stats
    }

    /// Addresses tracked.
    pub fn len(&self) -> usize {
        self.addrs.len()
    }

    /// Whether no address is tracked.
    pub fn is_empty(&self) -> bool {
        self.addrs.is_empty()
    }

    /// Whether `ip` is marked at `now`.
    pub fn is_marked(&self, ip: IpAddr, now: Instant) -> bool {
        self.addrs
            .get(&limit_key(ip))
            .and_then(|e| e.marked_until)
            .is_some_and(|t| now < t)
    }

    fn entry(&mut self, key: IpAddr, p: &DosCcParams, now: Instant) -> Option<&mut Entry> {
        if !self.addrs.contains_key(&key) && self.addrs.len() >= self.max_addrs {
            if self
                .swept
                .is_some_and(|t| now.saturating_duration_since(t) < SWEEP_GAP)
            {
                self.stats.untracked += 1;
                return None;
            }
            self.swept = Some(now);
            let burst = p.burst;
            self.addrs.retain(|_, e| {
                e.marked_until.is_some_and(|t| now < t) || e.outq_hits > 0 || {
                    refill(e, p, now);
                    e.tokens < burst
                }
            });
            if self.addrs.len() >= self.max_addrs {
                self.stats.untracked += 1;
                return None;
            }
        }
        Some(self.addrs.entry(key).or_insert(Entry {
            tokens: p.burst,
            refilled: now,
            marked_until: None,
            outq_hits: 0,
        }))
    }

    /// A CREATE (or CREATE_FAST) cell from a client at `ip`, which has
    /// `connections` connections open to us. `jitter` in [0, 1) picks the
    /// random part of a marking's length.
    pub fn on_create(
        &mut self,
        p: &DosCcParams,
        ip: IpAddr,
        connections: usize,
        now: Instant,
        jitter: f64,
    ) -> Verdict {
        if !p.enabled {
            return Verdict::Allow;
        }
        let Some(e) = self.entry(limit_key(ip), p, now) else {
            return Verdict::Allow;
        };
        refill(e, p, now);
        e.tokens = e.tokens.saturating_sub(1);
        let mut newly = false;
        if e.tokens == 0 && connections >= p.min_connections as usize {
            newly = e.marked_until.is_none_or(|t| now >= t);
            // As tor: a marked address that keeps going has its marking
            // renewed.
            e.marked_until = Some(now + mark_length(p, jitter));
        }
        let marked = e.marked_until.is_some_and(|t| now < t);
        if newly {
            self.stats.marked += 1;
        }
        if marked && p.refuse {
            self.stats.refused += 1;
            Verdict::Refuse
        } else {
            Verdict::Allow
        }
    }

    /// A circuit from the client at `ip` was closed for queueing more
    /// cells towards the next hop than `circ_max_cell_queue_size_out`.
    pub fn on_max_outq(&mut self, p: &DosCcParams, ip: IpAddr, now: Instant, jitter: f64) {
        if !p.enabled || p.num_circ_max_outq == 0 {
            return;
        }
        let Some(e) = self.entry(limit_key(ip), p, now) else {
            return;
        };
        if e.marked_until.is_some_and(|t| now < t) {
            return;
        }
        e.outq_hits = e.outq_hits.saturating_add(1);
        if e.outq_hits >= p.num_circ_max_outq {
            e.marked_until = Some(now + mark_length(p, jitter));
            e.outq_hits = 0;
            self.stats.marked += 1;
            self.stats.marked_by_outq += 1;
        }
    }
}

/// The defence period plus up to half again (tor adds a random 1 to
/// period/2 seconds so the end is less predictable).
fn mark_length(p: &DosCcParams, jitter: f64) -> Duration {
    let base = Duration::from_secs(u64::from(p.defense_secs));
    base + base.mul_f64(jitter.clamp(0.0, 1.0) / 2.0)
}

/// Add the whole seconds since the last refill at `rate` per second, up
/// to the burst (tor refills in whole seconds).
fn refill(e: &mut Entry, p: &DosCcParams, now: Instant) {
    let Some(elapsed) = now.checked_duration_since(e.refilled) else {
        return;
    };
    let secs = elapsed.as_secs();
    if secs == 0 {
        return;
    }
    let add = secs.saturating_mul(u64::from(p.rate));
    let tokens = u64::from(e.tokens)
        .saturating_add(add)
        .min(u64::from(p.burst));
    e.tokens = u32::try_from(tokens).unwrap_or(p.burst);
    e.refilled += Duration::from_secs(secs);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on() -> DosCcParams {
        DosCcParams {
            enabled: true,
            min_connections: 3,
            rate: 3,
            burst: 10,
            refuse: true,
            defense_secs: 100,
            num_circ_max_outq: 3,
        }
    }

    const A: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));
    const B: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 2));

    #[test]
    fn consensus_values_defaults_and_ranges() {
        let mut p = BTreeMap::new();
        assert_eq!(DosCcParams::from_consensus(&p), DosCcParams::default());
        assert!(!DosCcParams::default().enabled);
        // The live network's values (2025-2026).
        for (k, v) in [
            ("DoSCircuitCreationEnabled", 1),
            ("DoSCircuitCreationMinConnections", 2),
            ("DoSCircuitCreationRate", 2),
            ("DoSCircuitCreationBurst", 60),
            ("DoSCircuitCreationDefenseTimePeriod", 3600),
            ("dos_num_circ_max_outq", 5),
        ] {
            p.insert(k.to_string(), v);
        }
        let d = DosCcParams::from_consensus(&p);
        assert!(d.enabled && d.refuse);
        assert_eq!(
            (
                d.min_connections,
                d.rate,
                d.burst,
                d.defense_secs,
                d.num_circ_max_outq
            ),
            (2, 2, 60, 3600, 5)
        );
        p.insert("DoSCircuitCreationDefenseType".into(), 1);
        p.insert("DoSCircuitCreationRate".into(), 0);
        let d = DosCcParams::from_consensus(&p);
        assert!(!d.refuse, "type 1 detects only");
        assert_eq!(d.rate, 1, "clamped to the spec's minimum");
    }

    #[test]
    fn off_allows_everything() {
        let mut t = CircuitCreationDos::new(16);
        let p = DosCcParams::default();
        let now = Instant::now();
        for _ in 0..1000 {
            assert_eq!(t.on_create(&p, A, 100, now, 0.0), Verdict::Allow);
        }
        assert!(t.is_empty());
    }

    #[test]
    fn an_empty_bucket_marks_only_with_enough_connections() {
        let p = on();
        let now = Instant::now();
        // Two connections: the bucket empties but the address is not marked.
        let mut t = CircuitCreationDos::new(16);
        for _ in 0..50 {
            assert_eq!(t.on_create(&p, A, 2, now, 0.0), Verdict::Allow);
        }
        assert!(!t.is_marked(A, now));
        // Three: the tenth CREATE empties the bucket and is refused, and
        // so is everything after, for the defence period.
        let mut t = CircuitCreationDos::new(16);
        for _ in 0..9 {
            assert_eq!(t.on_create(&p, A, 3, now, 0.0), Verdict::Allow);
        }
        assert_eq!(t.on_create(&p, A, 3, now, 0.0), Verdict::Refuse);
        assert!(t.is_marked(A, now));
        assert_eq!(t.stats().marked, 1);
        // Another address is not affected.
        assert_eq!(t.on_create(&p, B, 3, now, 0.0), Verdict::Allow);
        // Still marked later, even with fewer connections and a refilled
        // bucket ...
        let later = now + Duration::from_secs(99);
        assert_eq!(t.on_create(&p, A, 1, later, 0.0), Verdict::Refuse);
        // ... and free after the period (jitter 0: exactly 100 s).
        let after = now + Duration::from_secs(101);
        assert_eq!(t.on_create(&p, A, 1, after, 0.0), Verdict::Allow);
        assert_eq!(t.stats().marked, 1);
        assert_eq!(t.stats().refused, 2);
    }

    #[test]
    fn the_bucket_refills_at_the_rate_in_whole_seconds() {
        let p = on();
        let now = Instant::now();
        let mut t = CircuitCreationDos::new(16);
        for _ in 0..9 {
            t.on_create(&p, A, 3, now, 0.0);
        }
        // 1 token left; after 0.9 s still 1, after 1 s 1 + 3.
        let t1 = now + Duration::from_millis(900);
        assert_eq!(t.on_create(&p, A, 3, t1, 0.0), Verdict::Refuse);
        let mut t = CircuitCreationDos::new(16);
        for _ in 0..9 {
            t.on_create(&p, A, 3, now, 0.0);
        }
        let t2 = now + Duration::from_secs(1);
        for _ in 0..3 {
            assert_eq!(t.on_create(&p, A, 3, t2, 0.0), Verdict::Allow);
        }
        assert_eq!(t.on_create(&p, A, 3, t2, 0.0), Verdict::Refuse);
    }

    #[test]
    fn detect_only_never_refuses() {
        let p = DosCcParams {
            refuse: false,
            ..on()
        };
        let now = Instant::now();
        let mut t = CircuitCreationDos::new(16);
        for _ in 0..100 {
            assert_eq!(t.on_create(&p, A, 5, now, 0.0), Verdict::Allow);
        }
        assert!(t.is_marked(A, now));
        assert_eq!(t.stats().refused, 0);
    }

    #[test]
    fn the_outbound_queue_limit_marks_after_n_hits() {
        let p = on();
        let now = Instant::now();
        let mut t = CircuitCreationDos::new(16);
        t.on_max_outq(&p, A, now, 0.5);
        t.on_max_outq(&p, A, now, 0.5);
        assert!(!t.is_marked(A, now));
        t.on_max_outq(&p, A, now, 0.5);
        assert!(t.is_marked(A, now));
        assert_eq!(t.stats().marked_by_outq, 1);
        // Even with one connection and a full bucket.
        assert_eq!(t.on_create(&p, A, 1, now, 0.0), Verdict::Refuse);
        // jitter 0.5: 100 s + 25 s.
        assert!(t.is_marked(A, now + Duration::from_secs(124)));
        assert!(!t.is_marked(A, now + Duration::from_secs(126)));
        // Off when the parameter is 0.
        let p0 = DosCcParams {
            num_circ_max_outq: 0,
            ..on()
        };
        for _ in 0..10 {
            t.on_max_outq(&p0, B, now, 0.0);
        }
        assert!(!t.is_marked(B, now));
    }

    #[test]
    fn ipv6_is_grouped_by_64_and_the_table_is_bounded() {
        let p = on();
        let now = Instant::now();
        let mut t = CircuitCreationDos::new(2);
        let v6 =
            |last: u16| IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, last));
        for i in 0..10 {
            t.on_create(&p, v6(i), 3, now, 0.0);
        }
        assert!(t.is_marked(v6(999), now), "one /64 shares one bucket");
        // A (busy, not yet marked) fills the second slot.
        for _ in 0..5 {
            t.on_create(&p, A, 3, now, 0.0);
        }
        assert_eq!(t.len(), 2);
        // A third address finds the table full of busy entries: not
        // tracked, and not refused.
        for _ in 0..20 {
            assert_eq!(t.on_create(&p, B, 3, now, 0.0), Verdict::Allow);
        }
        assert!(t.stats().untracked > 0);
        assert_eq!(t.len(), 2);
        // Once A's bucket is full again it may be dropped for B.
        let later = now + Duration::from_secs(10);
        assert_eq!(t.on_create(&p, B, 3, later, 0.0), Verdict::Allow);
        assert_eq!(t.len(), 2);
        assert!(t.is_marked(v6(1), later));
    }

    #[test]
    fn a_full_table_is_swept_at_most_once_a_second() {
        let p = on();
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut t = CircuitCreationDos::new(1);
        t.on_create(&p, A, 1, t0, 0.0);
        // A is busy (9 of 10 tokens): B is not tracked.
        t.on_create(&p, B, 1, ms(500), 0.0);
        assert_eq!(t.stats().untracked, 1);
        // At 1.2 s A's bucket is full again, but the last sweep was 0.7 s
        // ago: B is still not tracked, and nothing was scanned.
        t.on_create(&p, B, 1, ms(1200), 0.0);
        assert_eq!(t.stats().untracked, 2);
        // At 1.6 s a sweep may run: A goes, B is tracked.
        t.on_create(&p, B, 1, ms(1600), 0.0);
        assert_eq!(t.stats().untracked, 2);
        assert_eq!(t.len(), 1);
    }
}
