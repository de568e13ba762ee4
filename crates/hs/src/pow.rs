//! Proof of work for introductions (proposal 327, `v1`: Equi-X with a
//! Blake2b effort check), on Arti's `tor-hscrypto` 0.47 `pow::v1`
//! (feature `hs-pow-full`, which uses Arti's `equix` 0.8 crate).
//!
//! * client: [`solve`] a puzzle for a service's blinded key and seed at an
//!   effort, giving the INTRODUCE1 extension ([`PowSolution`]);
//!   [`next_retry_effort`] is the spec's retry rule;
//! * service: [`PowVerifier`] runs the "top half" checks (seed by its
//!   4-byte head among the current and previous seed, nonce replay cache
//!   per seed, effort check `R * E <= u32::MAX`, Equi-X verification) and
//!   returns the verified effort for the introduction queue's priority;
//!   [`EffortEstimator`] is the AIMD update of the suggested effort that
//!   goes into the descriptor's `pow-params v1` line.
//!
//! The `equix` and `hashx` crates are LGPL-3.0-only; this module (and the
//! parsing of `pow-params v1`) is behind this crate's `pow` feature.

use std::collections::{HashSet, VecDeque};

use onionmix_cell::hs::PowSolution;
use rand_core::CryptoRngCore;
use tor_hscrypto::pk::HsBlindId;
use tor_hscrypto::pow::v1::{
    Effort, Instance, Nonce, Seed, SeedHead, Solution, SolverInput, Verifier,
};

/// Below this effort a retry doubles it.
pub const CLIENT_POW_EFFORT_DOUBLE_UNTIL: u32 = 1000;
/// Smallest effort after a retry.
pub const CLIENT_MIN_RETRY_POW_EFFORT: u32 = 8;
/// Largest effort a client spends.
pub const CLIENT_MAX_POW_EFFORT: u32 = 10_000;
/// Nonces remembered per seed (older ones are forgotten first; tor's
/// replay cache is similarly bounded).
pub const REPLAY_CACHE_MAX: usize = 65_536;

/// PoW failures.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PowError {
    /// No current or previous seed starts with the solution's seed head.
    #[error("unknown seed")]
    UnknownSeed,
    /// The (seed, nonce) pair was seen before.
    #[error("replayed nonce")]
    Replay,
    /// The solution does not verify (effort check or Equi-X).
    #[error("incorrect solution")]
    BadSolution,
    /// The solver failed.
    #[error("solver failed: {0}")]
    Solver(String),
}

/// The client's effort after a failed attempt at `prev` (proposal 327
/// §3.4.4: double below 1000, else ×1.5; clamp to [8, 10000]).
pub fn next_retry_effort(prev: u32) -> u32 {
    let next = if prev < CLIENT_POW_EFFORT_DOUBLE_UNTIL {
        prev.saturating_mul(2)
    } else {
        prev.saturating_add(prev / 2)
    };
    next.clamp(CLIENT_MIN_RETRY_POW_EFFORT, CLIENT_MAX_POW_EFFORT)
}

fn instance(blinded: &[u8; 32], seed: &[u8; 32]) -> Instance {
    Instance::new(HsBlindId::from(*blinded), Seed::from(*seed))
}

/// Client: solve the puzzle of the service with blinded key `blinded` and
/// descriptor seed `seed` at `effort`. Effort 0 is allowed (any solution
/// passes the effort check). This takes CPU time roughly proportional to
/// the effort; drivers run it off the async runtime.
pub fn solve(
    blinded: &[u8; 32],
    seed: &[u8; 32],
    effort: u32,
    rng: &mut dyn CryptoRngCore,
) -> Result<PowSolution, PowError> {
    let mut nonce = [0u8; 16];
    rng.fill_bytes(&mut nonce);
    solve_with_nonce(blinded, seed, effort, nonce)
}

/// [`solve`] from a given starting nonce (tests).
pub fn solve_with_nonce(
    blinded: &[u8; 32],
    seed: &[u8; 32],
    effort: u32,
    nonce: [u8; 16],
) -> Result<PowSolution, PowError> {
    let mut solver = SolverInput::new(instance(blinded, seed), Effort::new(effort))
        .solve_with_nonce(&Nonce::from(nonce));
    let sol = solver.run().map_err(|e| PowError::Solver(e.to_string()))?;
    let head_v = sol.seed_head();
    let head: &[u8; 4] = head_v.as_ref();
    let n: &[u8; 16] = sol.nonce().as_ref();
    Ok(PowSolution {
        nonce: *n,
        effort: u32::from(sol.effort()),
        seed_head: *head,
        solution: sol.proof_to_bytes(),
    })
}

/// Service: verifies solutions against the current and previous seed.
pub struct PowVerifier {
    blinded: [u8; 32],
    /// (seed, verifier, nonces seen in order, set of nonces).
    seeds: VecDeque<SeedState>,
}

struct SeedState {
    seed: [u8; 32],
    verifier: Verifier,
    order: VecDeque<[u8; 16]>,
    seen: HashSet<[u8; 16]>,
}

impl std::fmt::Debug for PowVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PowVerifier {{ seeds: {} }}", self.seeds.len())
    }
}

impl PowVerifier {
    /// A verifier for the service with blinded key `blinded`, current seed `seed`.
    pub fn new(blinded: [u8; 32], seed: [u8; 32]) -> Self {
        let mut v = Self {
            blinded,
            seeds: VecDeque::with_capacity(2),
        };
        v.rotate_seed(seed);
        v
    }

    /// A new seed: the previous one stays acceptable, older ones (and their
    /// replay caches) are dropped.
    pub fn rotate_seed(&mut self, seed: [u8; 32]) {
        self.seeds.push_front(SeedState {
            seed,
            verifier: Verifier::new(instance(&self.blinded, &seed)),
            order: VecDeque::new(),
            seen: HashSet::new(),
        });
        self.seeds.truncate(2);
    }

    /// The current seed.
    pub fn current_seed(&self) -> Option<[u8; 32]> {
        self.seeds.front().map(|s| s.seed)
    }

    /// Check a solution from INTRODUCE2; returns its effort (the request's
    /// priority). A verified nonce is remembered, so a replay fails.
    pub fn check(&mut self, sol: &PowSolution) -> Result<u32, PowError> {
        let st = self
            .seeds
            .iter_mut()
            .find(|s| s.seed[..4] == sol.seed_head)
            .ok_or(PowError::UnknownSeed)?;
        if st.seen.contains(&sol.nonce) {
            return Err(PowError::Replay);
        }
        let s = Solution::try_from_bytes(
            Nonce::from(sol.nonce),
            Effort::new(sol.effort),
            SeedHead::from(sol.seed_head),
            &sol.solution,
        )
        .map_err(|_| PowError::BadSolution)?;
        st.verifier.check(&s).map_err(|_| PowError::BadSolution)?;
        if st.order.len() >= REPLAY_CACHE_MAX
            && let Some(old) = st.order.pop_front()
        {
            st.seen.remove(&old);
        }
        st.order.push_back(sol.nonce);
        st.seen.insert(sol.nonce);
        Ok(sol.effort)
    }
}

/// The service's suggested-effort estimator (proposal 327 §3.4.3: AIMD
/// once per update period, 300 s in tor).
#[derive(Debug, Clone, Default)]
pub struct EffortEstimator {
    suggested: u32,
    total_effort: u64,
    rend_handled: u64,
    had_queue: bool,
    max_trimmed: u32,
}

impl EffortEstimator {
    /// Start at `suggested` (0: no PoW suggested).
    pub fn new(suggested: u32) -> Self {
        Self {
            suggested,
            ..Self::default()
        }
    }

    /// The current internal suggestion.
    pub fn suggested(&self) -> u32 {
        self.suggested
    }

    /// A request with verified `effort` was enqueued.
    pub fn enqueued(&mut self, effort: u32) {
        self.total_effort = self.total_effort.saturating_add(u64::from(effort));
    }

    /// A rendezvous was launched for a dequeued request.
    pub fn handled(&mut self) {
        self.rend_handled = self.rend_handled.saturating_add(1);
    }

    /// A request with `effort` was discarded (too old, or culled).
    pub fn trimmed(&mut self, effort: u32) {
        self.max_trimmed = self.max_trimmed.max(effort);
    }

    /// The queue held more work than a quarter second's worth.
    pub fn saw_queue(&mut self) {
        self.had_queue = true;
    }

    /// End of the update period. `queue_has_suggested` is whether the queue
    /// still holds a request with effort >= the previous suggestion,
    /// `queue_small` whether it is below a quarter second's worth of work.
    /// Returns the new suggestion; the period's counters restart.
    pub fn end_period(&mut self, queue_has_suggested: bool, queue_small: bool) -> u32 {
        let prev = self.suggested;
        let increase = self.max_trimmed > prev || (self.had_queue && queue_has_suggested);
        if increase {
            let avg = self
                .total_effort
                .checked_div(self.rend_handled)
                .unwrap_or(0);
            let avg = u32::try_from(avg).unwrap_or(u32::MAX);
            self.suggested = prev.saturating_add(1).max(avg);
        } else if queue_small {
            self.suggested = u32::try_from(u64::from(prev) * 2 / 3).unwrap_or(0);
        }
        let s = self.suggested;
        *self = Self::new(s);
        s
    }
}

/// Should a changed suggestion be published (a new descriptor)? Not when
/// it moved by less than 15 % (proposal 327 §3.4.3.5).
pub fn should_republish(published: u32, suggested: u32) -> bool {
    let (a, b) = (u64::from(published), u64::from(suggested));
    let diff = a.abs_diff(b);
    diff * 100 >= a * 15 && diff > 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn solve_and_verify_with_replay_and_seed_rotation() {
        let blinded = [7u8; 32];
        let seed = [9u8; 32];
        let sol = solve_with_nonce(&blinded, &seed, 16, [1; 16]).expect("solves");
        assert_eq!(sol.effort, 16);
        assert_eq!(sol.seed_head, [9, 9, 9, 9]);
        let mut v = PowVerifier::new(blinded, seed);
        assert_eq!(v.check(&sol), Ok(16));
        assert_eq!(v.check(&sol), Err(PowError::Replay));
        // A claimed higher effort than the proof carries fails.
        let mut cheat = solve_with_nonce(&blinded, &seed, 0, [2; 16]).expect("solves");
        cheat.effort = 1_000_000;
        assert_eq!(v.check(&cheat), Err(PowError::BadSolution));
        // Another service's blinded key.
        let other = solve_with_nonce(&[8u8; 32], &seed, 1, [3; 16]).expect("solves");
        assert_eq!(v.check(&other), Err(PowError::BadSolution));
        // After a rotation the previous seed still works, two back does not.
        let fresh = solve_with_nonce(&blinded, &seed, 1, [4; 16]).expect("solves");
        v.rotate_seed([10u8; 32]);
        assert_eq!(v.check(&fresh), Ok(1));
        v.rotate_seed([11u8; 32]);
        let stale = solve_with_nonce(&blinded, &seed, 1, [5; 16]).expect("solves");
        assert_eq!(v.check(&stale), Err(PowError::UnknownSeed));
        assert_eq!(v.current_seed(), Some([11u8; 32]));
    }

    #[test]
    fn retry_effort_rule() {
        assert_eq!(next_retry_effort(0), 8);
        assert_eq!(next_retry_effort(100), 200);
        assert_eq!(next_retry_effort(999), 1998);
        assert_eq!(next_retry_effort(1000), 1500);
        assert_eq!(next_retry_effort(9000), 10_000);
    }

    #[test]
    fn aimd_estimator() {
        let mut e = EffortEstimator::new(0);
        // Requests were dropped above the suggestion: increase to the mean.
        for eff in [100, 200, 300] {
            e.enqueued(eff);
            e.handled();
        }
        e.trimmed(50);
        assert_eq!(e.end_period(false, false), 200);
        // A sustained queue holding suggested-effort work: +1 at least.
        e.saw_queue();
        assert_eq!(e.end_period(true, false), 201);
        // Idle: decrease by a third.
        assert_eq!(e.end_period(false, true), 134);
        // Neither: unchanged.
        assert_eq!(e.end_period(false, false), 134);
        assert!(should_republish(100, 120));
        assert!(!should_republish(100, 110));
        assert!(should_republish(0, 5));
        assert!(!should_republish(7, 7));
    }
}
