//! The manager's state as seen and changed from outside the build path:
//! forgetting circuits and relays, counts and paths for status and the
//! control port, NEWNYM, dormancy, `status.json`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::super::circuit::Circuit;
use super::{CircMgr, CleanCirc};

impl CircMgr {
    /// Forget a circuit (e.g. its stream failed at the circuit level).
    pub fn retire(&self, c: &Arc<Circuit>) {
        let mut st = self.lock_state();
        for p in st.pools.values_mut() {
            p.circs.retain(|x| !Arc::ptr_eq(x, c));
        }
        st.clean.retain(|x| !Arc::ptr_eq(&x.circ, c));
    }

    /// Mark a relay as failing (e.g. its channel died under a stream).
    pub fn note_relay_failed(&self, rsa_id: [u8; 20]) {
        self.inner
            .failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(rsa_id, Instant::now());
    }

    /// Build times of 3-hop circuits, from the first CREATE2 to the last
    /// EXTENDED2 (the most recent [`MAX_RECENT_BUILD_TIMES`]).
    pub fn build_times(&self) -> Vec<Duration> {
        self.inner
            .recent_times
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .copied()
            .collect()
    }

    /// Circuits open: pooled by isolation key, and clean.
    pub fn open_circuits(&self) -> usize {
        let mut st = self.lock_state();
        st.clean.retain(|c| !c.circ.is_closed());
        let clean = st.clean.len();
        clean
            + st.pools
                .values_mut()
                .map(|p| {
                    p.circs.retain(|c| !c.is_closed());
                    p.circs.len()
                })
                .sum::<usize>()
    }

    /// Clean pre-built circuits open now.
    pub fn clean_circuits(&self) -> usize {
        let mut st = self.lock_state();
        st.clean.retain(|c| !c.circ.is_closed());
        st.clean.len()
    }

    /// Pre-built circuits being built now.
    pub fn pending_preemptive(&self) -> usize {
        self.lock_state().pending.len()
    }

    /// The relay nicknames of every open circuit given to streams (by
    /// isolation key), like tor's `GETINFO circuit-status` without the
    /// clean ones (local state, never logged).
    pub fn open_circuit_paths(&self) -> Vec<Vec<String>> {
        let st = self.lock_state();
        st.pools
            .values()
            .flat_map(|p| p.circs.iter())
            .filter(|c| !c.is_closed())
            .map(|c| c.path().iter().map(|h| h.nickname.clone()).collect())
            .collect()
    }

    /// The relay nicknames of the clean pre-built circuits.
    pub fn clean_circuit_paths(&self) -> Vec<Vec<String>> {
        let st = self.lock_state();
        st.clean
            .iter()
            .filter(|c| !c.circ.is_closed())
            .map(|c| c.circ.path().iter().map(|h| h.nickname.clone()).collect())
            .collect()
    }

    /// NEWNYM, as tor does it: circuits that carried streams are let go
    /// (their streams finish on them); clean pre-built circuits, which
    /// never carried one, stay unless their exit is in `old_exits` (the
    /// exits the old circuits used, which the next circuits avoid). The
    /// onion-service pool (unused internal circuits) stays too.
    pub fn newnym(&self, old_exits: &std::collections::HashSet<[u8; 20]>) {
        let mut st = self.lock_state();
        st.pools.clear();
        let keep = |c: &CleanCirc| {
            !c.circ.is_closed()
                && c.circ
                    .path()
                    .last()
                    .is_none_or(|h| !old_exits.contains(&h.rsa_id))
        };
        st.clean.retain(keep);
        st.conflux_clean.retain(keep);
        drop(st);
        self.inner.clean_done.notify_waiters();
    }

    /// Drop every pooled and clean circuit (new identity / directory
    /// change).
    pub fn clear(&self) {
        let mut st = self.lock_state();
        st.pools.clear();
        st.clean.clear();
        st.conflux_clean.clear();
        drop(st);
        self.inner.hs_pool.clear();
    }

    /// Go dormant (`true`) or wake up. A dormant manager builds nothing
    /// ahead of need (no pre-built exit circuits or conflux sets); circuits
    /// for streams are still built, and a new stream wakes it (the SOCKS
    /// front end and the embedding API call this with `false`).
    pub fn set_dormant(&self, dormant: bool) {
        if !dormant {
            self.note_activity();
        }
        let was = self.inner.dormant.swap(dormant, Ordering::Relaxed);
        if was && !dormant {
            self.inner.wake.notify_one();
        }
    }

    /// User activity now: the idle time that makes the client dormant
    /// (`client::dormancy`) starts again.
    pub fn note_activity(&self) {
        *self
            .inner
            .last_activity
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Instant::now();
    }

    /// Time since the last user activity.
    pub fn idle_for(&self) -> Duration {
        self.inner
            .last_activity
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .elapsed()
    }

    /// Whether the manager is dormant.
    pub fn is_dormant(&self) -> bool {
        self.inner.dormant.load(Ordering::Relaxed)
    }

    /// Internal circuits built ahead of need for onion services.
    pub fn hs_pool(&self) -> &super::super::hs::pool::Pool<Circuit> {
        &self.inner.hs_pool
    }

    /// A snapshot for `status.json`.
    pub fn status(&self) -> serde_json::Value {
        let c = &self.inner.counters;
        let predicted = self.lock_state().predictor.predicted_ports(Instant::now());
        serde_json::json!({
            "built": c.built.load(Ordering::Relaxed),
            "on_demand": c.on_demand.load(Ordering::Relaxed),
            "preemptive": c.preemptive.load(Ordering::Relaxed),
            "clean_taken": c.clean_taken.load(Ordering::Relaxed),
            "waited_for_pending": c.waited_for_pending.load(Ordering::Relaxed),
            "clean_expired": c.clean_expired.load(Ordering::Relaxed),
            "clean_open": self.clean_circuits(),
            "preemptive_pending": self.pending_preemptive(),
            "predicted_ports": predicted,
            "build_timeout": self.inner.cbt.status(),
            "onion_pool": self.inner.hs_pool.status(),
            "conflux": self.conflux_status(),
        })
    }
}
