//! The service's introduction points as a sans-IO state machine (tor's
//! `hs_service.c`: `build_intro_points`, `cleanup_intro_points`,
//! `intro_point_should_expire`).
//!
//! The set wants `count` points (tor's `HiddenServiceNumIntroductionPoints`,
//! 3 by default). The driver asks [`IntroPointSet::wanted`] how many to
//! add, picks relays (never two on one relay) and keys, [`IntroPointSet::add`]s
//! them and launches circuits; it reports circuits that opened
//! ([`IntroPointSet::established`]), failed or closed
//! ([`IntroPointSet::circuit_failed`]: the same point is retried up to
//! [`MAX_ATTEMPTS`] times, as tor does, then replaced) and INTRODUCE2 cells
//! ([`IntroPointSet::introduce2`]). Points expire after a random lifetime
//! or a random number of introductions, as in tor, and are replaced.
//! [`IntroPointSet::version`] changes whenever the set the descriptor
//! lists changes, which makes the upload scheduler publish again.

use std::collections::VecDeque;

use rand_core::RngCore;

/// Circuit attempts per introduction point before it is replaced (tor's
/// `MAX_INTRO_POINT_CIRCUIT_RETRIES`).
pub const MAX_ATTEMPTS: u32 = 3;
/// Most introduction points a service may want (tor's `NUM_INTRO_POINTS_MAX`).
pub const MAX_INTRO_POINTS: usize = 10;
/// Launches allowed per [`LAUNCH_WINDOW`] (tor's `MAX_INTRO_CIRCS_PER_PERIOD`).
pub const MAX_LAUNCHES_PER_WINDOW: usize = 10;
/// tor's `INTRO_CIRC_RETRY_PERIOD` (seconds).
pub const LAUNCH_WINDOW: u64 = 300;
/// How long the first descriptor waits for every point to be established
/// before it is published with those that are.
pub const FIRST_PUBLISH_GRACE: u64 = 30;

/// Lifetime and use limits of introduction points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntroParams {
    /// How many points to keep (1..=10).
    pub count: usize,
    /// A point's lifetime is drawn from this range (seconds; tor: 18 to
    /// 24 hours, `hs_intro_min_lifetime`/`hs_intro_max_lifetime`).
    pub lifetime: (u64, u64),
    /// A point is replaced after a number of INTRODUCE2 drawn from this
    /// range (tor: 16384 to 32768).
    pub max_introduce2: (u64, u64),
    /// Limit launches to [`MAX_LAUNCHES_PER_WINDOW`] per [`LAUNCH_WINDOW`]
    /// (tor does, except on testing networks).
    pub rate_limit: bool,
}

impl Default for IntroParams {
    fn default() -> Self {
        Self {
            count: 3,
            lifetime: (18 * 3600, 24 * 3600),
            max_introduce2: (16_384, 32_768),
            rate_limit: true,
        }
    }
}

impl IntroParams {
    /// The parameters on a testing network: no launch rate limit. (Stock
    /// tor also shortens lifetimes to 10-30 s there; onionmix keeps the
    /// normal ones so clients' cached descriptors stay useful.)
    pub fn testing(count: usize) -> Self {
        Self {
            count,
            rate_limit: false,
            ..Self::default()
        }
    }
}

/// Where a point's circuit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PointState {
    /// A circuit is being built or ESTABLISH_INTRO awaits its answer.
    Launching,
    /// INTRO_ESTABLISHED arrived; the point can be in a descriptor.
    Established,
}

/// One introduction point with the driver's keys `K`.
#[derive(Debug, Clone)]
pub struct IntroPoint<K> {
    /// Handle for reporting.
    pub id: u64,
    /// The relay (RSA identity).
    pub relay: [u8; 20],
    /// The driver's data (keys, link specifiers).
    pub keys: K,
    /// Circuit state.
    pub state: PointState,
    attempts: u32,
    ever_established: bool,
    expires_at: u64,
    introduce2: u64,
    max_introduce2: u64,
}

impl<K> IntroPoint<K> {
    /// Circuit attempts so far.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }
}

/// What to do after a circuit failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Build a circuit to the same point again (same keys).
    Same,
    /// The point is gone; [`IntroPointSet::wanted`] will ask for another.
    Replace,
}

/// The service's introduction points.
#[derive(Debug, Clone)]
pub struct IntroPointSet<K> {
    params: IntroParams,
    points: Vec<IntroPoint<K>>,
    next_id: u64,
    launches: VecDeque<u64>,
    version: u64,
    started: Option<u64>,
}

fn draw(rng: &mut dyn RngCore, (lo, hi): (u64, u64)) -> u64 {
    if hi <= lo {
        return lo;
    }
    lo + rng.next_u64() % (hi - lo + 1)
}

impl<K> IntroPointSet<K> {
    /// An empty set.
    pub fn new(mut params: IntroParams) -> Self {
        params.count = params.count.clamp(1, MAX_INTRO_POINTS);
        Self {
            params,
            points: Vec::new(),
            next_id: 1,
            launches: VecDeque::new(),
            version: 0,
            started: None,
        }
    }

    /// Changes whenever the points a descriptor would list change.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Every point.
    pub fn points(&self) -> &[IntroPoint<K>] {
        &self.points
    }

    /// A point by handle.
    pub fn get(&self, id: u64) -> Option<&IntroPoint<K>> {
        self.points.iter().find(|p| p.id == id)
    }

    /// The relays in use (not to be picked again).
    pub fn relays(&self) -> Vec<[u8; 20]> {
        self.points.iter().map(|p| p.relay).collect()
    }

    /// The established points (what a descriptor lists).
    pub fn established(&self) -> impl Iterator<Item = &IntroPoint<K>> {
        self.points
            .iter()
            .filter(|p| p.state == PointState::Established)
    }

    fn prune_launches(&mut self, now: u64) {
        while self
            .launches
            .front()
            .is_some_and(|t| t.saturating_add(LAUNCH_WINDOW) <= now)
        {
            self.launches.pop_front();
        }
    }

    /// How many circuit launches the rate limit allows now.
    fn launch_budget(&mut self, now: u64) -> usize {
        if !self.params.rate_limit {
            return usize::MAX;
        }
        self.prune_launches(now);
        MAX_LAUNCHES_PER_WINDOW.saturating_sub(self.launches.len())
    }

    /// How many new points to add now.
    pub fn wanted(&mut self, now: u64) -> usize {
        let missing = self.params.count.saturating_sub(self.points.len());
        missing.min(self.launch_budget(now))
    }

    /// Whether a circuit for an existing point may be launched now (rate
    /// limit); the driver calls [`IntroPointSet::launched`] when it does.
    pub fn may_launch(&mut self, now: u64) -> bool {
        self.launch_budget(now) > 0
    }

    /// Record a circuit launch (new point or retry).
    pub fn launched(&mut self, now: u64) {
        self.started.get_or_insert(now);
        if self.params.rate_limit {
            self.launches.push_back(now);
        }
    }

    /// Add a point on `relay` with `keys`; its circuit is being launched
    /// (counted against the rate limit). Returns its handle.
    pub fn add(&mut self, relay: [u8; 20], keys: K, now: u64, rng: &mut dyn RngCore) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.launched(now);
        self.points.push(IntroPoint {
            id,
            relay,
            keys,
            state: PointState::Launching,
            attempts: 1,
            ever_established: false,
            expires_at: now.saturating_add(draw(rng, self.params.lifetime)),
            introduce2: 0,
            max_introduce2: draw(rng, self.params.max_introduce2),
        });
        id
    }

    /// INTRO_ESTABLISHED arrived for point `id`.
    pub fn established_ok(&mut self, id: u64) {
        if let Some(p) = self.points.iter_mut().find(|p| p.id == id) {
            p.state = PointState::Established;
            if !p.ever_established {
                p.ever_established = true;
                self.version += 1;
            }
        }
    }

    /// Point `id`'s circuit failed to build, was refused, or closed. The
    /// same point is retried (new circuit, same keys) until it has had
    /// [`MAX_ATTEMPTS`], then dropped.
    pub fn circuit_failed(&mut self, id: u64) -> Retry {
        let Some(pos) = self.points.iter().position(|p| p.id == id) else {
            return Retry::Replace;
        };
        let p = &mut self.points[pos];
        if p.attempts < MAX_ATTEMPTS {
            p.attempts += 1;
            p.state = PointState::Launching;
            Retry::Same
        } else {
            let was = p.ever_established;
            self.points.remove(pos);
            if was {
                self.version += 1;
            }
            Retry::Replace
        }
    }

    /// An INTRODUCE2 arrived at point `id`; returns false when the point
    /// has had its share and should be replaced (tor keeps serving it
    /// until the replacement is published; so does the driver).
    pub fn introduce2(&mut self, id: u64) -> bool {
        match self.points.iter_mut().find(|p| p.id == id) {
            Some(p) => {
                p.introduce2 = p.introduce2.saturating_add(1);
                p.introduce2 < p.max_introduce2
            }
            None => false,
        }
    }

    /// Remove the points whose lifetime or introduction count ran out;
    /// returns their handles (the driver closes their circuits).
    pub fn expire(&mut self, now: u64) -> Vec<u64> {
        let mut gone = Vec::new();
        self.points.retain(|p| {
            let keep = now < p.expires_at && p.introduce2 < p.max_introduce2;
            if !keep {
                gone.push(p.id);
            }
            keep
        });
        if !gone.is_empty() {
            self.version += 1;
        }
        gone
    }

    /// Whether a descriptor may be published: every wanted point is
    /// established, or at least one is and [`FIRST_PUBLISH_GRACE`] passed
    /// since the first launch.
    pub fn ready(&self, now: u64) -> bool {
        let n = self.established().count();
        n >= self.params.count
            || (n > 0
                && self
                    .started
                    .is_some_and(|t| t.saturating_add(FIRST_PUBLISH_GRACE) <= now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    fn rng() -> StdRng {
        StdRng::seed_from_u64(3)
    }

    #[test]
    fn fills_to_count_and_publishes_when_established() {
        let mut s: IntroPointSet<u8> = IntroPointSet::new(IntroParams::default());
        let mut r = rng();
        assert_eq!(s.wanted(0), 3);
        let ids: Vec<u64> = (0..3).map(|i| s.add([i; 20], i, 0, &mut r)).collect();
        assert_eq!(s.wanted(0), 0);
        assert!(!s.ready(0));
        let v0 = s.version();
        s.established_ok(ids[0]);
        assert!(s.version() > v0);
        assert!(!s.ready(1), "one of three, within the grace period");
        assert!(s.ready(FIRST_PUBLISH_GRACE), "one of three after the grace");
        s.established_ok(ids[1]);
        s.established_ok(ids[2]);
        assert!(s.ready(2));
        assert_eq!(s.established().count(), 3);
        assert_eq!(s.relays().len(), 3);
    }

    #[test]
    fn failures_retry_the_same_point_then_replace_it() {
        let mut s: IntroPointSet<u8> = IntroPointSet::new(IntroParams::testing(2));
        let mut r = rng();
        let a = s.add([1; 20], 1, 0, &mut r);
        let b = s.add([2; 20], 2, 0, &mut r);
        s.established_ok(a);
        s.established_ok(b);
        let v = s.version();
        // An established circuit closes: rebuilt to the same point, the
        // descriptor does not change.
        assert_eq!(s.circuit_failed(a), Retry::Same);
        assert_eq!(s.get(a).map(|p| p.state), Some(PointState::Launching));
        assert_eq!(s.version(), v);
        s.established_ok(a);
        assert_eq!(s.version(), v, "re-established, same keys");
        assert_eq!(s.circuit_failed(a), Retry::Same);
        assert_eq!(s.get(a).map(|p| p.attempts()), Some(3));
        assert_eq!(s.circuit_failed(a), Retry::Replace);
        assert!(s.get(a).is_none());
        assert!(s.version() > v, "the descriptor must change");
        assert_eq!(s.wanted(1), 1);
        // Unknown handles.
        assert_eq!(s.circuit_failed(999), Retry::Replace);
        assert!(!s.introduce2(999));
    }

    #[test]
    fn points_expire_by_lifetime_and_use() {
        let params = IntroParams {
            count: 2,
            lifetime: (100, 100),
            max_introduce2: (3, 3),
            rate_limit: false,
        };
        let mut s: IntroPointSet<u8> = IntroPointSet::new(params);
        let mut r = rng();
        let a = s.add([1; 20], 1, 0, &mut r);
        let b = s.add([2; 20], 2, 50, &mut r);
        assert!(s.introduce2(b));
        assert!(s.introduce2(b));
        assert!(!s.introduce2(b), "third INTRODUCE2 is its last");
        let v = s.version();
        assert_eq!(s.expire(60), vec![b]);
        assert!(s.version() > v);
        assert_eq!(s.expire(99), Vec::<u64>::new());
        assert_eq!(s.expire(100), vec![a]);
        assert_eq!(s.wanted(100), 2);
    }

    #[test]
    fn launches_are_rate_limited_outside_testing_networks() {
        let mut s: IntroPointSet<u8> = IntroPointSet::new(IntroParams::default());
        let mut r = rng();
        for i in 0..3u8 {
            s.add([i; 20], i, 0, &mut r);
        }
        // Every point fails for good: 3 + 2 * 3 retries would be 9 launches.
        for id in 1..=3 {
            while s.circuit_failed(id) == Retry::Same {
                assert!(s.may_launch(0) || s.launches.len() >= MAX_LAUNCHES_PER_WINDOW);
                s.launched(0);
            }
        }
        assert_eq!(s.launches.len(), 9);
        assert_eq!(s.wanted(0), 1, "only one launch left in the window");
        assert_eq!(s.wanted(LAUNCH_WINDOW), 3, "the window moved on");
        let mut t: IntroPointSet<u8> = IntroPointSet::new(IntroParams::testing(3));
        for _ in 0..50 {
            t.launched(0);
        }
        assert!(t.may_launch(0));
        assert_eq!(
            IntroPointSet::<u8>::new(IntroParams::testing(99)).wanted(0),
            MAX_INTRO_POINTS
        );
    }
}
