//! The client's connection to an onion service as a sans-IO state
//! machine (rend-spec-v3 §2.4, §3.2, §4.2; tor's `hs_client.c`): which
//! step comes next, given what the previous ones gave.
//!
//! [`ConnectPlan`] decides between fetching the descriptor (again),
//! introducing through one of its introduction points, and giving up with
//! the SOCKS5 extended error of [`HsClientError`]. [`FetchRound`] walks
//! the responsible HSDirs for one fetch. The driver (`onionmix-node`) does
//! the circuits, cells and timers and reports each outcome back; the
//! shared caches of [`cache`] carry what tor keeps between connections.
//!
//! As in tor: an introduction point that NACKs, errs or times out is not
//! tried again for two minutes, one that cannot be reached five times
//! likewise; when no point of the descriptor is usable the descriptor is
//! fetched again; a 404 moves on to the next HSDir; PoW effort starts at
//! the descriptor's suggestion and grows with the point's unreachable
//! count (proposal 327 §3.4.4).

pub mod cache;

use rand_core::RngCore;

use crate::desc::{DescError, DescriptorContent, IntroPointInfo};
use crate::error::{HsClientError, IntroFailure, RendFailure};
use cache::{IntroFailureKind, IntroStateCache};

/// Descriptor fetches (the first included) one connection may make.
pub const MAX_FETCHES: u32 = 3;

/// A uniformly random index below `n` (`n > 0`).
fn pick(rng: &mut dyn RngCore, n: usize) -> usize {
    // The modulo bias is below 2^-32 for any n that fits in memory.
    (rng.next_u64() % n as u64) as usize
}

/// Why one HSDir did not give a usable descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FetchFailure {
    /// 404, or an empty answer.
    NotFound,
    /// The circuit or the directory stream failed, or timed out.
    Unreachable,
    /// A descriptor came back but did not parse, verify or decrypt.
    Invalid(DescError),
}

/// One walk over the responsible HSDirs for a fetch, in random order,
/// skipping those asked too recently.
#[derive(Debug, Clone)]
pub struct FetchRound {
    order: Vec<usize>,
    pos: usize,
    invalid: Option<DescError>,
}

impl FetchRound {
    /// A round over HSDirs `0..n` for which `allowed` holds.
    pub fn new(n: usize, allowed: impl Fn(usize) -> bool, rng: &mut dyn RngCore) -> Self {
        let mut order: Vec<usize> = (0..n).filter(|i| allowed(*i)).collect();
        // Fisher-Yates.
        for i in (1..order.len()).rev() {
            let j = pick(rng, i + 1);
            order.swap(i, j);
        }
        Self {
            order,
            pos: 0,
            invalid: None,
        }
    }

    /// The next HSDir to ask, if any is left.
    pub fn next_hsdir(&mut self) -> Option<usize> {
        let i = self.order.get(self.pos).copied()?;
        self.pos += 1;
        Some(i)
    }

    /// The last HSDir asked failed.
    pub fn failed(&mut self, f: FetchFailure) {
        if let FetchFailure::Invalid(e) = f {
            self.invalid.get_or_insert(e);
        }
    }

    /// The error when no HSDir gave a descriptor: an invalid descriptor is
    /// reported as such (0xF1), otherwise "not found" (0xF0).
    pub fn error(&self) -> HsClientError {
        match &self.invalid {
            Some(e) => HsClientError::DescriptorInvalid(e.clone()),
            None => HsClientError::DescriptorNotFound,
        }
    }
}

/// How one introduction attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntroOutcome {
    /// The circuit to the introduction point failed or closed before
    /// INTRODUCE_ACK.
    Unreachable,
    /// INTRODUCE_ACK with a failure status.
    Nack(u16),
    /// No INTRODUCE_ACK in time.
    AckTimeout,
    /// The introduction point acknowledged, but no RENDEZVOUS2 came in time.
    RendTimeout,
    /// The rendezvous circuit failed (closed, or RENDEZVOUS2 did not verify).
    Rend(RendFailure),
}

impl IntroOutcome {
    /// The failure it records for the introduction point (tor's
    /// `hs_cache_client_intro_state_note` kinds), if any: a failed
    /// rendezvous circuit is not the point's fault.
    pub fn intro_failure(self) -> Option<IntroFailureKind> {
        match self {
            IntroOutcome::Unreachable => Some(IntroFailureKind::Unreachable),
            IntroOutcome::Nack(_) => Some(IntroFailureKind::Generic),
            IntroOutcome::AckTimeout | IntroOutcome::RendTimeout => Some(IntroFailureKind::Timeout),
            IntroOutcome::Rend(_) => None,
        }
    }

    /// The SOCKS-level error if this was the last attempt.
    pub fn error(self) -> HsClientError {
        match self {
            IntroOutcome::Unreachable => HsClientError::IntroFailed(IntroFailure::Unreachable),
            IntroOutcome::Nack(s) => HsClientError::IntroFailed(IntroFailure::Nack(s)),
            IntroOutcome::AckTimeout => HsClientError::IntroTimedOut,
            IntroOutcome::RendTimeout => HsClientError::RendFailed(RendFailure::TimedOut),
            IntroOutcome::Rend(r) => HsClientError::RendFailed(r),
        }
    }
}

/// What the driver does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Fetch the descriptor: forget any cached one, walk a [`FetchRound`],
    /// report with [`ConnectPlan::fetch_done`].
    Fetch,
    /// Introduce through introduction point `index` of the descriptor,
    /// solving a PoW puzzle at `effort` first if it is not 0; report a
    /// failure with [`ConnectPlan::intro_failed`] (success ends the plan).
    Introduce {
        /// Index into the descriptor's introduction points.
        index: usize,
        /// PoW effort (0: no puzzle).
        effort: u32,
    },
    /// Give up with this error.
    Fail(HsClientError),
}

/// One connection attempt to an onion service.
#[derive(Debug, Clone)]
pub struct ConnectPlan {
    service: [u8; 32],
    fetches: u32,
    max_fetches: u32,
    revision: Option<u64>,
    tried: Vec<[u8; 32]>,
    fetch_error: Option<HsClientError>,
    last_error: Option<HsClientError>,
}

impl ConnectPlan {
    /// A plan for the service with identity key `service`.
    pub fn new(service: [u8; 32]) -> Self {
        Self {
            service,
            fetches: 0,
            max_fetches: MAX_FETCHES,
            revision: None,
            tried: Vec::new(),
            fetch_error: None,
            last_error: None,
        }
    }

    /// Descriptor fetches made so far.
    pub fn fetches(&self) -> u32 {
        self.fetches
    }

    /// The next step, given the cached descriptor (if any) and the shared
    /// introduction-point failure records, at `now`.
    pub fn next(
        &mut self,
        desc: Option<&DescriptorContent>,
        intro_state: &IntroStateCache,
        now: u64,
        rng: &mut dyn RngCore,
    ) -> Step {
        self.next_preferring(desc, intro_state, now, rng, &|_| true)
    }

    /// [`Self::next`], picking the introduction point among the usable
    /// ones that `prefer` accepts when there are any (the driver prefers
    /// points a pre-built circuit can be extended to), else among all
    /// usable ones. Which points are tried, and how often, does not
    /// change: only the order.
    pub fn next_preferring(
        &mut self,
        desc: Option<&DescriptorContent>,
        intro_state: &IntroStateCache,
        now: u64,
        rng: &mut dyn RngCore,
        prefer: &dyn Fn(&IntroPointInfo) -> bool,
    ) -> Step {
        if let Some(e) = self.fetch_error.take() {
            return Step::Fail(e);
        }
        let Some(desc) = desc else {
            return self.fetch_or(HsClientError::DescriptorNotFound);
        };
        if self.revision != Some(desc.revision) {
            self.revision = Some(desc.revision);
            self.tried.clear();
        }
        let usable: Vec<usize> = desc
            .intro_points
            .iter()
            .enumerate()
            .filter(|(_, ip)| {
                !self.tried.contains(&ip.auth_key)
                    && intro_state.is_usable(&self.service, &ip.auth_key, now)
            })
            .map(|(i, _)| i)
            .collect();
        if usable.is_empty() {
            return self.fetch_or(HsClientError::IntroFailed(IntroFailure::NoUsableIntroPoint));
        }
        let preferred: Vec<usize> = usable
            .iter()
            .copied()
            .filter(|&i| desc.intro_points.get(i).is_some_and(prefer))
            .collect();
        let from = if preferred.is_empty() {
            &usable
        } else {
            &preferred
        };
        let index = from[pick(rng, from.len())];
        let Some(ip) = desc.intro_points.get(index) else {
            return Step::Fail(HsClientError::IntroFailed(IntroFailure::NoUsableIntroPoint));
        };
        self.tried.push(ip.auth_key);
        let unreachable = intro_state
            .get(&self.service, &ip.auth_key, now)
            .map(|s| s.unreachable_count)
            .unwrap_or(0);
        Step::Introduce {
            index,
            effort: effort(desc, unreachable),
        }
    }

    fn fetch_or(&mut self, fallback: HsClientError) -> Step {
        if self.fetches < self.max_fetches {
            self.fetches += 1;
            Step::Fetch
        } else {
            Step::Fail(self.last_error.clone().unwrap_or(fallback))
        }
    }

    /// The fetch ended: `Ok` if a descriptor is now cached, else the
    /// round's error (which ends the plan; client-authorization errors
    /// included).
    pub fn fetch_done(&mut self, res: Result<(), HsClientError>) {
        if let Err(e) = res {
            self.fetch_error = Some(e);
        }
    }

    /// An introduction through the point with `auth_key` failed; the
    /// failure is recorded in `intro_state` (shared with other connections).
    pub fn intro_failed(
        &mut self,
        auth_key: &[u8; 32],
        outcome: IntroOutcome,
        intro_state: &mut IntroStateCache,
        now: u64,
    ) {
        if let Some(kind) = outcome.intro_failure() {
            intro_state.note(&self.service, auth_key, kind, now);
        }
        self.last_error = Some(outcome.error());
    }

    /// The error to report when the overall time limit runs out during
    /// the current step: a fetch that never finished is "not found", an
    /// introduction that never finished "introduction timed out".
    pub fn timed_out(&self, fetching: bool) -> HsClientError {
        if fetching {
            HsClientError::DescriptorNotFound
        } else {
            HsClientError::IntroTimedOut
        }
    }
}

/// The PoW effort for an introduction point the client failed to reach
/// `unreachable` times: the descriptor's suggestion (capped), raised by
/// the retry rule once per failure; 0 without `pow-params`.
pub fn effort(desc: &DescriptorContent, unreachable: u32) -> u32 {
    #[cfg(feature = "pow")]
    {
        use crate::pow::{CLIENT_MAX_POW_EFFORT, next_retry_effort};
        let Some(p) = desc.pow_v1 else {
            return 0;
        };
        let mut e = p.suggested_effort.min(CLIENT_MAX_POW_EFFORT);
        for _ in 0..unreachable {
            if e >= CLIENT_MAX_POW_EFFORT {
                break;
            }
            e = next_retry_effort(e);
        }
        e
    }
    #[cfg(not(feature = "pow"))]
    {
        let _ = (desc, unreachable);
        0
    }
}

#[cfg(test)]
mod tests;
