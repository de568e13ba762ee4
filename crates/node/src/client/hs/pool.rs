//! Internal circuits built ahead of need for onion-service use (tor's
//! predicted internal circuits, which it then "cannibalizes"): three hops
//! ending at a relay that can be a rendezvous point. A client's
//! rendezvous circuit is taken as it is (its last hop is the point); a
//! circuit to an introduction point, a service's rendezvous point or an
//! HSDir is a pooled circuit extended by one hop. A new rendezvous then
//! waits for one extension instead of two four-hop builds (client and
//! service side), about half a second on 20 ms links.
//!
//! Prediction as in tor: the pool is kept filled only while onion
//! services were used within the last hour (a service process uses them
//! all the time); a pooled circuit unused for [`MAX_AGE`] is closed, like
//! tor's unused circuits after `CircuitIdleTimeout`. Bounded: at most
//! [`TARGET`] ready plus the ones building.

use std::collections::VecDeque;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Ready circuits kept: one for a rendezvous circuit, one to extend to an
/// introduction point (what one new connection uses), and a spare, since
/// a circuit that already passes through the target (or its family)
/// cannot be extended to it: on small networks that is a third of them.
pub const TARGET: usize = 3;
/// An unused pooled circuit is closed after this long.
pub const MAX_AGE: Duration = Duration::from_secs(10 * 60);
/// The pool is refilled while onion services were used this recently.
pub const PREDICTION: Duration = Duration::from_secs(60 * 60);

/// Counters (in `status.json`, `onion_pool`).
#[derive(Debug, Default)]
pub struct PoolCounters {
    /// Circuits built for the pool.
    pub built: AtomicU64,
    /// Taken as they are (rendezvous circuits).
    pub taken: AtomicU64,
    /// Taken and extended by one hop.
    pub extended: AtomicU64,
    /// Extensions that failed (the caller then built a fresh circuit or
    /// gave up, as for a failed build).
    pub extend_failed: AtomicU64,
    /// Closed unused (too old, or their channel closed).
    pub expired: AtomicU64,
}

/// The pool of items (circuits in the node; anything in unit tests).
#[derive(Debug)]
pub struct Pool<T> {
    st: Mutex<State<T>>,
    /// Counters.
    pub counters: PoolCounters,
}

#[derive(Debug)]
struct State<T> {
    ready: VecDeque<(Instant, T)>,
    building: usize,
    last_use: Option<Instant>,
}

impl<T> Default for Pool<T> {
    fn default() -> Self {
        Pool {
            st: Mutex::new(State {
                ready: VecDeque::new(),
                building: 0,
                last_use: None,
            }),
            counters: PoolCounters::default(),
        }
    }
}

impl<T> Pool<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, State<T>> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Onion services are in use (starts or extends the prediction).
    pub fn note_use(&self, now: Instant) {
        self.lock().last_use = Some(now);
    }

    /// Take the oldest ready item that `fits`, dropping the ones that are
    /// `dead` or older than [`MAX_AGE`] on the way (they are returned to
    /// the caller's drop, i.e. closed).
    pub fn take(
        &self,
        now: Instant,
        dead: impl Fn(&T) -> bool,
        fits: impl Fn(&T) -> bool,
    ) -> Option<T> {
        self.take_sparing(now, dead, fits, |_| false)
    }

    /// [`Self::take`], except that an item that is `spared` is taken only
    /// when no other one fits: the caller (or the one that comes right
    /// after it) needs such items for something only they can serve.
    pub fn take_sparing(
        &self,
        now: Instant,
        dead: impl Fn(&T) -> bool,
        fits: impl Fn(&T) -> bool,
        spared: impl Fn(&T) -> bool,
    ) -> Option<T> {
        let mut expired = Vec::new();
        let got = {
            let mut st = self.lock();
            let mut keep = VecDeque::with_capacity(st.ready.len());
            while let Some((at, item)) = st.ready.pop_front() {
                if dead(&item) || now.saturating_duration_since(at) > MAX_AGE {
                    expired.push(item);
                } else {
                    keep.push_back((at, item));
                }
            }
            let fitting = |spare_ok: bool| {
                keep.iter()
                    .position(|(_, item)| fits(item) && (spare_ok || !spared(item)))
            };
            let got = fitting(false)
                .or_else(|| fitting(true))
                .and_then(|i| keep.remove(i))
                .map(|(_, item)| item);
            st.ready = keep;
            got
        };
        self.counters
            .expired
            .fetch_add(expired.len() as u64, Ordering::Relaxed);
        drop(expired);
        got
    }

    /// Whether a ready item that is not `dead` nor older than [`MAX_AGE`]
    /// `fits` (nothing is taken).
    pub fn any(&self, now: Instant, dead: impl Fn(&T) -> bool, fits: impl Fn(&T) -> bool) -> bool {
        self.lock().ready.iter().any(|(at, item)| {
            now.saturating_duration_since(*at) <= MAX_AGE && !dead(item) && fits(item)
        })
    }

    /// How many builds to start now: enough to reach [`TARGET`] while the
    /// prediction holds (counted as building until [`Self::built`] or
    /// [`Self::build_failed`]).
    pub fn builds_wanted(&self, now: Instant) -> usize {
        let mut st = self.lock();
        let predicted = st
            .last_use
            .is_some_and(|t| now.saturating_duration_since(t) <= PREDICTION);
        if !predicted {
            return 0;
        }
        let have = st.ready.len().saturating_add(st.building);
        let n = TARGET.saturating_sub(have);
        st.building = st.building.saturating_add(n);
        n
    }

    /// A build finished: keep the item (or drop it if the pool is full).
    pub fn built(&self, now: Instant, item: T) {
        let extra = {
            let mut st = self.lock();
            st.building = st.building.saturating_sub(1);
            if st.ready.len() < TARGET {
                st.ready.push_back((now, item));
                None
            } else {
                Some(item)
            }
        };
        self.counters.built.fetch_add(1, Ordering::Relaxed);
        drop(extra);
    }

    /// A build failed.
    pub fn build_failed(&self) {
        let mut st = self.lock();
        st.building = st.building.saturating_sub(1);
    }

    /// Ready items.
    pub fn ready(&self) -> usize {
        self.lock().ready.len()
    }

    /// Close everything (new identity).
    pub fn clear(&self) {
        let items: Vec<_> = self.lock().ready.drain(..).collect();
        drop(items);
    }

    /// A snapshot for `status.json`.
    pub fn status(&self) -> serde_json::Value {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let c = &self.counters;
        serde_json::json!({
            "ready": self.ready(),
            "built": g(&c.built),
            "taken": g(&c.taken),
            "extended": g(&c.extended),
            "extend_failed": g(&c.extend_failed),
            "expired": g(&c.expired),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fills_only_while_predicted() {
        let p: Pool<u32> = Pool::default();
        let t0 = Instant::now();
        assert_eq!(p.builds_wanted(t0), 0, "never used: nothing built");
        p.note_use(t0);
        assert_eq!(p.builds_wanted(t0), TARGET);
        assert_eq!(p.builds_wanted(t0), 0, "builds in flight count");
        p.built(t0, 1);
        p.build_failed();
        assert_eq!(p.ready(), 1);
        assert_eq!(p.builds_wanted(t0), 1);
        for i in 2..=TARGET as u32 {
            p.built(t0, i);
        }
        assert_eq!(p.ready(), TARGET);
        // An extra build beyond the target is dropped, not kept.
        p.built(t0, 99);
        assert_eq!(p.ready(), TARGET);
        // The prediction runs out.
        let later = t0 + PREDICTION + Duration::from_secs(1);
        let _ = p.take(t0, |_| false, |_| true);
        assert_eq!(p.builds_wanted(later), 0);
    }

    #[test]
    fn take_sparing_leaves_spared_items_while_others_fit() {
        let p: Pool<u32> = Pool::default();
        let t0 = Instant::now();
        p.note_use(t0);
        assert_eq!(p.builds_wanted(t0), TARGET);
        // 1 is the oldest, and the only one the next caller can use.
        for i in 1..=TARGET as u32 {
            p.built(t0, i);
        }
        let spared = |x: &u32| *x == 1;
        assert_eq!(p.take_sparing(t0, |_| false, |_| true, spared), Some(2));
        assert_eq!(p.take(t0, |_| false, |x| *x == 1), Some(1), "left for it");
        // With nothing else fitting, a spared item is still taken.
        assert_eq!(
            p.take_sparing(t0, |_| false, |x| *x != 2, |_| true),
            Some(3)
        );
        assert_eq!(p.ready(), 0);
    }

    #[test]
    fn any_looks_without_taking() {
        let p: Pool<u32> = Pool::default();
        let t0 = Instant::now();
        p.note_use(t0);
        assert_eq!(p.builds_wanted(t0), TARGET);
        p.built(t0, 1);
        p.built(t0, 2);
        assert!(p.any(t0, |_| false, |x| *x == 2));
        assert!(!p.any(t0, |_| false, |x| *x == 3));
        assert!(
            !p.any(t0, |x| *x == 2, |x| *x == 2),
            "dead items do not count"
        );
        let late = t0 + MAX_AGE + Duration::from_secs(1);
        assert!(!p.any(late, |_| false, |_| true), "old items do not count");
        assert_eq!(p.ready(), 2, "nothing was taken");
    }

    #[test]
    fn take_skips_unfit_and_drops_dead_and_old() {
        let p: Pool<u32> = Pool::default();
        let t0 = Instant::now();
        p.note_use(t0);
        assert_eq!(p.builds_wanted(t0), TARGET);
        p.built(t0, 10);
        p.built(t0 + Duration::from_secs(60), 11);
        for _ in 2..TARGET {
            p.build_failed();
        }
        // Fits only 11: 10 stays.
        assert_eq!(p.take(t0, |_| false, |x| *x == 11), Some(11));
        assert_eq!(p.ready(), 1);
        assert_eq!(p.take(t0, |_| false, |x| *x == 99), None);
        assert_eq!(p.ready(), 1);
        // Dead items are dropped and counted.
        assert_eq!(p.take(t0, |x| *x == 10, |_| true), None);
        assert_eq!(p.ready(), 0);
        assert_eq!(p.counters.expired.load(Ordering::Relaxed), 1);
        // Old items too.
        assert_eq!(p.builds_wanted(t0), TARGET);
        p.built(t0, 12);
        for _ in 1..TARGET {
            p.build_failed();
        }
        let old = t0 + MAX_AGE + Duration::from_secs(1);
        assert_eq!(p.take(old, |_| false, |_| true), None);
        assert_eq!(p.counters.expired.load(Ordering::Relaxed), 2);
        p.clear();
        assert_eq!(p.ready(), 0);
    }
}
