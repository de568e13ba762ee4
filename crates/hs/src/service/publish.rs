//! When a service uploads which descriptor to which HSDir, as a sans-IO
//! scheduler (tor's `hs_service.c`: `should_service_upload_descriptor`,
//! `upload_descriptor_to_all`, `service_desc_hsdirs_changed`).
//!
//! One [`UploadSchedule`] per descriptor (time period). A fresh descriptor
//! (new revision counter) is built and sent to every responsible HSDir
//! when the introduction points change, when the scheduled time comes
//! (tor: a random 60 to 120 minutes after the last upload; testing
//! networks here: 60 to 120 seconds) or on the first upload; HSDirs that
//! join the responsible set get the current descriptor, failed uploads
//! are retried after [`UploadSchedule::retry_after`].

use std::collections::HashMap;

use rand_core::RngCore;

/// tor's `HS_SERVICE_NEXT_UPLOAD_TIME_MIN` / `_MAX` (seconds).
pub const UPLOAD_INTERVAL: (u64, u64) = (60 * 60, 120 * 60);
/// The same on testing networks.
pub const UPLOAD_INTERVAL_TESTING: (u64, u64) = (60, 120);
/// An upload without an answer this long counts as failed.
pub const UPLOAD_TIMEOUT: u64 = 120;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Pending(u64),
    Done,
    Failed(u64),
}

/// What to upload now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadPlan {
    /// Build a new descriptor (new revision) first.
    pub rebuild: bool,
    /// The HSDirs to send it to.
    pub targets: Vec<[u8; 20]>,
}

/// The upload schedule of one descriptor.
#[derive(Debug, Clone)]
pub struct UploadSchedule {
    period: u64,
    interval: (u64, u64),
    retry_after: u64,
    responsible: Vec<[u8; 20]>,
    state: HashMap<[u8; 20], State>,
    built_for: Option<u64>,
    next_rebuild: u64,
}

impl UploadSchedule {
    /// The schedule of the descriptor for time period `period`.
    pub fn new(period: u64, testing: bool) -> Self {
        Self {
            period,
            interval: if testing {
                UPLOAD_INTERVAL_TESTING
            } else {
                UPLOAD_INTERVAL
            },
            retry_after: if testing { 10 } else { 60 },
            responsible: Vec::new(),
            state: HashMap::new(),
            built_for: None,
            next_rebuild: 0,
        }
    }

    /// The descriptor's time period.
    pub fn period(&self) -> u64 {
        self.period
    }

    /// How long a failed upload waits before it is tried again (seconds).
    pub fn retry_after(&self) -> u64 {
        self.retry_after
    }

    /// The HSDirs responsible for this descriptor in the latest consensus.
    pub fn set_responsible(&mut self, hsdirs: Vec<[u8; 20]>) {
        self.state.retain(|k, _| hsdirs.contains(k));
        self.responsible = hsdirs;
    }

    /// What to upload at `now`, given the introduction-point set's
    /// version and whether it is ready for a descriptor. Targets returned
    /// are marked in flight; report each with [`UploadSchedule::result`].
    pub fn due(
        &mut self,
        now: u64,
        intro_version: u64,
        intros_ready: bool,
        rng: &mut dyn RngCore,
    ) -> Option<UploadPlan> {
        if !intros_ready || self.responsible.is_empty() {
            return None;
        }
        let rebuild = self.built_for != Some(intro_version) || now >= self.next_rebuild;
        if rebuild {
            self.built_for = Some(intro_version);
            let (lo, hi) = self.interval;
            let span = hi.saturating_sub(lo).saturating_add(1);
            self.next_rebuild = now.saturating_add(lo + rng.next_u64() % span);
            self.state.clear();
        }
        let mut targets = Vec::new();
        for h in &self.responsible {
            let go = match self.state.get(h) {
                None => true,
                Some(State::Done) => false,
                Some(State::Pending(t)) => t.saturating_add(UPLOAD_TIMEOUT) <= now,
                Some(State::Failed(t)) => t.saturating_add(self.retry_after) <= now,
            };
            if go {
                targets.push(*h);
                self.state.insert(*h, State::Pending(now));
            }
        }
        (rebuild || !targets.is_empty()).then_some(UploadPlan { rebuild, targets })
    }

    /// An upload to `hsdir` succeeded or failed at `now`.
    pub fn result(&mut self, hsdir: &[u8; 20], ok: bool, now: u64) {
        if let Some(s) = self.state.get_mut(hsdir) {
            *s = if ok { State::Done } else { State::Failed(now) };
        }
    }

    /// HSDirs that hold the current descriptor.
    pub fn done(&self) -> usize {
        self.state.values().filter(|s| **s == State::Done).count()
    }

    /// When the descriptor is next rebuilt and uploaded everywhere.
    pub fn next_rebuild(&self) -> u64 {
        self.next_rebuild
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn dirs(n: u8) -> Vec<[u8; 20]> {
        (0..n).map(|i| [i; 20]).collect()
    }

    #[test]
    fn first_upload_waits_for_intro_points_then_goes_everywhere() {
        let mut r = StdRng::seed_from_u64(1);
        let mut s = UploadSchedule::new(5, false);
        assert_eq!(s.period(), 5);
        assert_eq!(s.due(0, 1, true, &mut r), None, "no HSDirs known yet");
        s.set_responsible(dirs(4));
        assert_eq!(s.due(0, 1, false, &mut r), None, "intro points not ready");
        let p = s.due(10, 1, true, &mut r).expect("due");
        assert!(p.rebuild);
        assert_eq!(p.targets, dirs(4));
        let next = s.next_rebuild();
        assert!((10 + UPLOAD_INTERVAL.0..=10 + UPLOAD_INTERVAL.1).contains(&next));
        // In flight: nothing more.
        assert_eq!(s.due(11, 1, true, &mut r), None);
        for d in dirs(4) {
            s.result(&d, true, 12);
        }
        assert_eq!(s.done(), 4);
        assert_eq!(s.due(100, 1, true, &mut r), None);
        // The scheduled time: a new descriptor everywhere.
        let p = s.due(next, 1, true, &mut r).expect("scheduled");
        assert!(p.rebuild && p.targets.len() == 4);
    }

    #[test]
    fn intro_point_changes_rebuild_and_new_hsdirs_get_the_current_one() {
        let mut r = StdRng::seed_from_u64(2);
        let mut s = UploadSchedule::new(5, true);
        s.set_responsible(dirs(3));
        let p = s.due(0, 1, true, &mut r).expect("first");
        for d in &p.targets {
            s.result(d, true, 1);
        }
        // A new HSDir in the ring: only it gets the same descriptor.
        let mut more = dirs(3);
        more.push([9; 20]);
        s.set_responsible(more);
        assert_eq!(
            s.due(2, 1, true, &mut r),
            Some(UploadPlan {
                rebuild: false,
                targets: vec![[9; 20]]
            })
        );
        s.result(&[9; 20], true, 3);
        // Intro points changed: rebuild, everywhere.
        let p = s.due(4, 2, true, &mut r).expect("changed");
        assert!(p.rebuild);
        assert_eq!(p.targets.len(), 4);
        assert!(s.next_rebuild() <= 4 + UPLOAD_INTERVAL_TESTING.1);
    }

    #[test]
    fn failures_and_lost_answers_are_retried() {
        let mut r = StdRng::seed_from_u64(3);
        let mut s = UploadSchedule::new(5, false);
        s.set_responsible(dirs(2));
        let _ = s.due(0, 1, true, &mut r).expect("first");
        s.result(&[0; 20], false, 1);
        // [1;20] never answers.
        assert_eq!(s.due(30, 1, true, &mut r), None, "retry not yet due");
        let p = s.due(1 + s.retry_after(), 1, true, &mut r).expect("retry");
        assert_eq!((p.rebuild, p.targets), (false, vec![[0; 20]]));
        let p = s.due(UPLOAD_TIMEOUT, 1, true, &mut r).expect("lost answer");
        assert_eq!(p.targets, vec![[1; 20]]);
        // An HSDir leaving the ring is forgotten.
        s.set_responsible(vec![[0; 20]]);
        s.result(&[1; 20], true, 200);
        assert_eq!(s.done(), 0);
    }
}
