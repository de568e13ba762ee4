//! Learning when to give up on circuit construction (path-spec §2.4,
//! tor's `circuitstats.c`), sans-IO.
//!
//! The driver reports each 3-hop build time, each circuit that passed the
//! learned timeout (it keeps building as a measurement circuit) and each
//! one abandoned at the close timeout. The estimator keeps the last 1000
//! outcomes, fits a Pareto distribution (Xm from the weighted average of
//! the 10 most frequent 10 ms bins, alpha by maximum likelihood) once
//! `cbtmincircs` are known, and answers with the timeout at the
//! `cbtquantile` (80%) and the close time at `cbtclosequantile` (99%).
//! Until then both are `cbtinitialtimeout` (60 s). When most recent
//! circuits time out after their first hop, the history is discarded and
//! learning starts again. The histogram persists in tor's state-file
//! lines ([`CbtState`]).

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use rand::Rng;

/// Outcomes kept (`CBT_NCIRCUITS_TO_OBSERVE`).
pub const NCIRCUITS_TO_OBSERVE: usize = 1000;
/// Histogram bin width in milliseconds.
pub const BIN_WIDTH_MS: u32 = 10;
/// Largest build time accepted, in milliseconds (tor's `INT32_MAX`).
pub const BUILD_TIME_MAX_MS: u32 = i32::MAX as u32;
/// Most build times a state file may claim (tor writes at most 1000).
pub const MAX_STATE_TIMES: u32 = 100_000;
/// The circuit length whose build times are recorded.
pub const RECORDED_HOPS: usize = 3;

/// The consensus parameters of path-spec §2.4.6, with tor's defaults.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CbtParams {
    /// `cbtdisabled`: no learning, always the initial timeout.
    pub disabled: bool,
    /// `cbtnummodes`: modes averaged for Xm (1-20, default 10).
    pub num_modes: u32,
    /// `cbtrecentcount`: recent outcomes watched for network change
    /// (3-1000, default 20).
    pub recent_count: u32,
    /// `cbtmaxtimeouts`: timeouts among the recent ones that reset the
    /// history (3-10000, default 18).
    pub max_timeouts: u32,
    /// `cbtmincircs`: build times needed before a timeout is computed
    /// (1-10000, default 100).
    pub min_circs: u32,
    /// `cbtquantile`: percentile used as the timeout (10-99, default 80).
    pub quantile: u32,
    /// `cbtclosequantile`: percentile after which circuits are abandoned
    /// (`quantile`-99, default 99).
    pub close_quantile: u32,
    /// `cbttestfreq`: seconds between learning circuits (default 10).
    pub test_freq_secs: u32,
    /// `cbtmintimeout`: lowest timeout in ms (default 10).
    pub min_timeout_ms: u32,
    /// `cbtinitialtimeout`: timeout before enough data, ms (default 60000).
    pub initial_timeout_ms: u32,
    /// `cbtlearntimeout`: seconds an unused circuit is kept while
    /// learning (10-60000, default 180).
    pub learn_timeout_secs: u32,
    /// `cbtmaxopencircs`: clean circuits open at once while learning
    /// (0-14, default 10).
    pub max_open_circs: u32,
}

impl Default for CbtParams {
    fn default() -> Self {
        CbtParams {
            disabled: false,
            num_modes: 10,
            recent_count: 20,
            max_timeouts: 18,
            min_circs: 100,
            quantile: 80,
            close_quantile: 99,
            test_freq_secs: 10,
            min_timeout_ms: 10,
            initial_timeout_ms: 60_000,
            learn_timeout_secs: 180,
            max_open_circs: 10,
        }
    }
}

impl CbtParams {
    /// The parameters a consensus sets (`get` looks one up by name),
    /// clamped to path-spec's bounds; missing ones take the defaults.
    pub fn from_consensus(get: impl Fn(&str) -> Option<i32>) -> Self {
        let d = CbtParams::default();
        let imax = i32::MAX as u32;
        let p = |name: &str, def: u32, lo: u32, hi: u32| -> u32 {
            match get(name) {
                Some(v) => (v.max(0) as u32).clamp(lo, hi),
                None => def,
            }
        };
        let quantile = p("cbtquantile", d.quantile, 10, 99);
        let min_timeout_ms = p("cbtmintimeout", d.min_timeout_ms, 10, imax);
        CbtParams {
            disabled: p("cbtdisabled", 0, 0, 1) == 1,
            num_modes: p("cbtnummodes", d.num_modes, 1, 20),
            recent_count: p("cbtrecentcount", d.recent_count, 3, 1000),
            max_timeouts: p("cbtmaxtimeouts", d.max_timeouts, 3, 10_000),
            min_circs: p("cbtmincircs", d.min_circs, 1, 10_000),
            quantile,
            close_quantile: p("cbtclosequantile", d.close_quantile, quantile, 99),
            test_freq_secs: p("cbttestfreq", d.test_freq_secs, 1, imax),
            min_timeout_ms,
            initial_timeout_ms: p(
                "cbtinitialtimeout",
                d.initial_timeout_ms,
                min_timeout_ms,
                imax,
            ),
            learn_timeout_secs: p("cbtlearntimeout", d.learn_timeout_secs, 10, 60_000),
            max_open_circs: p("cbtmaxopencircs", d.max_open_circs, 0, 14),
        }
    }
}

/// One recorded outcome.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sample {
    /// Built in this many milliseconds.
    Built(u32),
    /// Abandoned at the close timeout.
    Abandoned,
}

/// The circuit build time estimator.
#[derive(Debug, Clone)]
pub struct BuildTimeEstimator {
    params: CbtParams,
    samples: VecDeque<Sample>,
    timeout_ms: f64,
    close_ms: f64,
    have_computed: bool,
    xm: u32,
    alpha: f64,
    /// Recent outcomes after the first hop: true = timed out.
    recent: Vec<bool>,
    recent_idx: usize,
    network_last_live: Option<Instant>,
    nonlive_timeouts: u32,
    last_circ_at: Option<Instant>,
    resets: u64,
}

impl BuildTimeEstimator {
    /// A fresh estimator (timeouts at `cbtinitialtimeout`).
    pub fn new(params: CbtParams) -> Self {
        let initial = f64::from(params.initial_timeout_ms);
        let recent = vec![false; params.recent_count as usize];
        BuildTimeEstimator {
            params,
            samples: VecDeque::with_capacity(NCIRCUITS_TO_OBSERVE),
            timeout_ms: initial,
            close_ms: initial,
            have_computed: false,
            xm: 0,
            alpha: 0.0,
            recent,
            recent_idx: 0,
            network_last_live: None,
            nonlive_timeouts: 0,
            last_circ_at: None,
            resets: 0,
        }
    }

    /// The parameters in force.
    pub fn params(&self) -> &CbtParams {
        &self.params
    }

    /// Take new parameters (a new consensus). Disabling discards the
    /// history; a new `cbtrecentcount` resizes the recent-outcome window.
    pub fn set_params(&mut self, params: CbtParams) {
        if params == self.params {
            return;
        }
        if params.recent_count != self.params.recent_count {
            self.recent = vec![false; params.recent_count as usize];
            self.recent_idx = 0;
        }
        let disabled = params.disabled;
        self.params = params;
        if disabled {
            self.reset();
            self.set_initial();
        } else {
            self.set_timeout();
        }
    }

    fn initial_ms(&self) -> f64 {
        f64::from(self.params.initial_timeout_ms)
    }

    fn set_initial(&mut self) {
        self.timeout_ms = self.initial_ms();
        self.close_ms = self.initial_ms();
    }

    /// Forget every build time (tor's `circuit_build_times_reset`); the
    /// current timeouts stay until recomputed.
    pub fn reset(&mut self) {
        self.samples.clear();
        self.have_computed = false;
    }

    /// How long a 3-hop circuit may take before it is given up on (and kept
    /// building only to measure it).
    pub fn timeout(&self) -> Duration {
        ms_duration(self.timeout_ms)
    }

    /// How long a timed-out circuit keeps building before it is abandoned.
    pub fn close_timeout(&self) -> Duration {
        ms_duration(self.close_ms)
    }

    /// (timeout, close timeout) for a circuit of `hops` hops: the 3-hop
    /// values scaled by Actions(n)/Actions(3), Actions(n) = n(n+1)/2
    /// (path-spec §2.4.3).
    pub fn timeouts_for_hops(&self, hops: usize) -> (Duration, Duration) {
        let actions = |n: usize| (n as f64) * (n as f64 + 1.0) / 2.0;
        let f = actions(hops.max(1)) / actions(RECORDED_HOPS);
        (
            ms_duration(self.timeout_ms * f),
            ms_duration(self.close_ms * f),
        )
    }

    /// Whether a timeout has been computed from the data.
    pub fn has_computed_timeout(&self) -> bool {
        self.have_computed
    }

    /// The fitted Pareto parameters (Xm in ms, alpha), once computed.
    pub fn pareto(&self) -> Option<(u32, f64)> {
        self.have_computed.then_some((self.xm, self.alpha))
    }

    /// Recorded outcomes (build times and abandoned circuits).
    pub fn total_build_times(&self) -> usize {
        self.samples.len()
    }

    /// How many times the history was discarded because most recent
    /// circuits timed out.
    pub fn resets(&self) -> u64 {
        self.resets
    }

    /// Whether enough outcomes are known to compute a timeout.
    pub fn enough_to_compute(&self) -> bool {
        self.samples.len() >= self.params.min_circs as usize
    }

    /// Whether more circuits should be built to learn (fewer than
    /// `cbtmincircs` known and learning enabled).
    pub fn needs_circuits(&self) -> bool {
        !self.params.disabled && !self.enough_to_compute()
    }

    /// Whether a learning circuit should be launched now: more are needed
    /// and none was launched in the last `cbttestfreq` seconds.
    pub fn needs_circuits_now(&self, now: Instant) -> bool {
        self.needs_circuits()
            && match self.last_circ_at {
                None => true,
                Some(t) => {
                    now.saturating_duration_since(t)
                        > Duration::from_secs(u64::from(self.params.test_freq_secs))
                }
            }
    }

    /// A circuit was launched (for `cbttestfreq`).
    pub fn note_circuit_launched(&mut self, now: Instant) {
        self.last_circ_at = Some(now);
    }

    /// The network showed signs of life (a cell arrived, a hop completed).
    pub fn network_is_live(&mut self, now: Instant) {
        self.network_last_live = Some(now);
        self.nonlive_timeouts = 0;
    }

    /// Whether outcomes are being recorded (no circuit was abandoned
    /// since the network last showed life).
    pub fn network_check_live(&self) -> bool {
        self.nonlive_timeouts == 0
    }

    /// A circuit reached 3 hops after `elapsed`. `timed_out`: it had
    /// already passed the timeout (a measurement circuit), so it does not
    /// count as a success among the recent outcomes. Returns whether the
    /// time was recorded.
    pub fn record_build(&mut self, elapsed: Duration, timed_out: bool) -> bool {
        if self.params.disabled {
            return false;
        }
        let ms = elapsed.as_secs_f64() * 1e3;
        // Far beyond the close time: a suspended machine or a clock jump.
        if ms > 2.0 * self.close_ms + 1000.0 {
            return false;
        }
        let mut recorded = false;
        if self.network_check_live() {
            let ms = (ms.round() as u32).clamp(1, BUILD_TIME_MAX_MS);
            self.add_sample(Sample::Built(ms));
            self.set_timeout();
            recorded = true;
        }
        if !timed_out {
            self.push_recent(false);
        }
        recorded
    }

    /// A circuit passed the timeout (`did_onehop`: its first hop had
    /// completed). Returns true when this reset the history because the
    /// network seems to have changed.
    pub fn count_timeout(&mut self, did_onehop: bool) -> bool {
        if self.params.disabled {
            self.set_initial();
            return false;
        }
        if did_onehop {
            self.push_recent(true);
        }
        self.check_changed()
    }

    /// A measurement circuit launched at `started` reached the close
    /// timeout and was abandoned. If the network showed no life since it
    /// started, recording pauses until it does (tor's "network not
    /// live"). Returns whether it was recorded.
    pub fn count_close(&mut self, started: Instant) -> bool {
        if self.params.disabled {
            self.set_initial();
            return false;
        }
        let live_since_start = self.network_last_live.is_some_and(|t| t >= started);
        if !live_since_start {
            self.nonlive_timeouts = self.nonlive_timeouts.saturating_add(1);
        }
        if !self.network_check_live() {
            return false;
        }
        self.add_sample(Sample::Abandoned);
        true
    }

    fn push_recent(&mut self, timed_out: bool) {
        if let Some(slot) = self.recent.get_mut(self.recent_idx) {
            *slot = timed_out;
            self.recent_idx = (self.recent_idx + 1) % self.recent.len();
        }
    }

    fn check_changed(&mut self) -> bool {
        let timeouts = self.recent.iter().filter(|t| **t).count();
        if timeouts < self.params.max_timeouts as usize {
            return false;
        }
        self.reset();
        self.resets += 1;
        self.recent.iter_mut().for_each(|t| *t = false);
        self.recent_idx = 0;
        let max = f64::from(i32::MAX / 2);
        if self.timeout_ms >= self.initial_ms() {
            if self.timeout_ms <= max && self.close_ms <= max {
                self.timeout_ms *= 2.0;
                self.close_ms *= 2.0;
            }
        } else {
            self.set_initial();
        }
        true
    }

    fn add_sample(&mut self, s: Sample) {
        if self.samples.len() >= NCIRCUITS_TO_OBSERVE {
            self.samples.pop_front();
        }
        self.samples.push_back(s);
    }

    fn max_build_time(&self) -> u32 {
        self.samples
            .iter()
            .filter_map(|s| match s {
                Sample::Built(ms) => Some(*ms),
                Sample::Abandoned => None,
            })
            .max()
            .unwrap_or(0)
    }

    /// Build times per 10 ms bin (bin index -> count).
    fn histogram(&self) -> BTreeMap<u32, u32> {
        let mut h = BTreeMap::new();
        for s in &self.samples {
            if let Sample::Built(ms) = s {
                *h.entry(ms / BIN_WIDTH_MS).or_insert(0u32) += 1;
            }
        }
        h
    }

    /// Xm: the count-weighted average of the midpoints of the
    /// `cbtnummodes` fullest bins (ties go to the shorter times).
    fn compute_xm(&self) -> u32 {
        let mut h = self.histogram();
        let mut total: u64 = 0;
        let mut counts: u64 = 0;
        for _ in 0..self.params.num_modes {
            let mut best: Option<(u32, u32)> = None;
            for (&bin, &n) in &h {
                if n > 0 && best.is_none_or(|(_, bn)| n > bn) {
                    best = Some((bin, n));
                }
            }
            let Some((bin, n)) = best else { break };
            total += u64::from(bin_to_ms(bin)) * u64::from(n);
            counts += u64::from(n);
            h.insert(bin, 0);
        }
        if counts == 0 {
            return 0;
        }
        u32::try_from(total / counts).unwrap_or(BUILD_TIME_MAX_MS)
    }

    fn update_alpha(&mut self) -> bool {
        self.xm = self.compute_xm();
        if self.xm == 0 {
            return false;
        }
        let ln_xm = f64::from(self.xm).ln();
        let mut sum = 0.0;
        let mut n = 0u32;
        for s in &self.samples {
            if let Sample::Built(ms) = s {
                sum += if *ms < self.xm {
                    ln_xm
                } else {
                    f64::from(*ms).ln()
                };
                n += 1;
            }
        }
        let n = f64::from(n);
        self.alpha = n / (sum - n * ln_xm);
        true
    }

    /// The Pareto quantile function at `q` (0..1), in ms, at most
    /// `i32::MAX`.
    fn quantile_ms(&self, q: f64) -> f64 {
        let mut ret = f64::from(i32::MAX);
        if self.alpha > 0.0 {
            let p = (1.0 - q).powf(1.0 / self.alpha);
            if p > 0.0 {
                ret = f64::from(self.xm) / p;
            }
        }
        ret.min(f64::from(i32::MAX))
    }

    fn set_timeout_worker(&mut self) -> bool {
        if !self.enough_to_compute() || !self.update_alpha() {
            return false;
        }
        self.timeout_ms = self.quantile_ms(f64::from(self.params.quantile) / 100.0);
        self.close_ms = self.quantile_ms(f64::from(self.params.close_quantile) / 100.0);
        let max = f64::from(self.max_build_time());
        if self.timeout_ms > max {
            self.timeout_ms = max;
        }
        if max < f64::from(i32::MAX / 2) && self.close_ms > 2.0 * max {
            self.close_ms = 2.0 * max;
        }
        self.close_ms = self.close_ms.max(self.initial_ms());
        self.have_computed = true;
        true
    }

    fn set_timeout(&mut self) {
        if self.params.disabled || !self.set_timeout_worker() {
            return;
        }
        let min = f64::from(self.params.min_timeout_ms);
        if self.timeout_ms < min {
            self.timeout_ms = min;
            if self.close_ms < self.timeout_ms {
                self.close_ms = self.initial_ms();
            }
        }
    }

    /// The share of recorded build times at or above the timeout.
    pub fn timeout_rate(&self) -> f64 {
        if self.samples.is_empty() {
            return 0.0;
        }
        let n = self
            .samples
            .iter()
            .filter(|s| match s {
                Sample::Built(ms) => f64::from(*ms) >= self.timeout_ms,
                Sample::Abandoned => true,
            })
            .count();
        n as f64 / self.samples.len() as f64
    }

    /// The histogram to persist.
    pub fn to_state(&self) -> CbtState {
        CbtState {
            total_build_times: self.samples.len() as u32,
            abandoned: self
                .samples
                .iter()
                .filter(|s| **s == Sample::Abandoned)
                .count() as u32,
            bins: self
                .histogram()
                .into_iter()
                .map(|(bin, n)| (bin_to_ms(bin), n))
                .collect(),
        }
    }

    /// Load a persisted histogram: its times are shuffled (so old ones
    /// still expire first after a restart, on average) and at most 1000
    /// kept, then the timeout is computed. Replaces the current history.
    pub fn load_state<R: Rng + ?Sized>(&mut self, state: &CbtState, rng: &mut R) {
        self.reset();
        if self.params.disabled {
            return;
        }
        let mut all: Vec<Sample> = Vec::with_capacity(state.total_build_times as usize);
        for &(ms, n) in &state.bins {
            for _ in 0..n {
                all.push(Sample::Built(ms.clamp(1, BUILD_TIME_MAX_MS)));
            }
        }
        for _ in 0..state.abandoned {
            all.push(Sample::Abandoned);
        }
        // Fisher-Yates.
        for i in (1..all.len()).rev() {
            let k = rng.gen_range(0..=i);
            all.swap(i, k);
        }
        for s in all.into_iter().take(NCIRCUITS_TO_OBSERVE) {
            self.add_sample(s);
        }
        self.set_timeout();
    }
}

fn bin_to_ms(bin: u32) -> u32 {
    bin.saturating_mul(BIN_WIDTH_MS)
        .saturating_add(BIN_WIDTH_MS / 2)
}

fn ms_duration(ms: f64) -> Duration {
    if ms.is_finite() && ms > 0.0 {
        Duration::from_secs_f64(ms.min(f64::from(u32::MAX)) / 1e3)
    } else {
        Duration::from_millis(1)
    }
}

mod state;
pub use state::{CbtState, CbtStateError};

#[cfg(test)]
mod tests;
