//! Circuit RTT from SENDME timing (proposal 324 §2.1): the time between
//! sending the cell that makes the other end send a SENDME and that
//! SENDME's arrival, with tor's N-EWMA smoothing, minimum and maximum, and
//! its clock stall/jump heuristics (§2.1.1).

/// A new RTT this many times larger or smaller than the EWMA is a clock
/// jump or stall, not a measurement (tor's `DELTA_DISCREPENCY_RATIO_MAX`).
pub const DELTA_DISCREPANCY_RATIO_MAX: u64 = 5000;

/// `N_EWMA = (2*curr + (N-1)*prev) / (N+1)`, in that order so rounding
/// matches other implementations (§2.1.2); the first value is taken as is.
pub fn n_count_ewma(curr: u64, prev: u64, n: u64) -> u64 {
    if prev == 0 {
        curr
    } else {
        curr.saturating_mul(2)
            .saturating_add(n.saturating_sub(1).saturating_mul(prev))
            / n.saturating_add(1)
    }
}

/// tor's `percent_max_mix`: `pct_max` percent of the larger value plus the
/// rest of the smaller one.
pub fn percent_max_mix(a: u64, b: u64, pct_max: u64) -> u64 {
    let (max, min) = if a > b { (a, b) } else { (b, a) };
    let pct = pct_max.min(100);
    pct.saturating_mul(max) / 100 + (100 - pct).saturating_mul(min) / 100
}

/// RTT state of one circuit, in microseconds.
#[derive(Debug, Clone, Default)]
pub struct RttEstimator {
    /// Smoothed RTT (0: none yet).
    pub ewma_usec: u64,
    /// Minimum (of the EWMA), 0 until the first measurement.
    pub min_usec: u64,
    /// Maximum raw RTT seen.
    pub max_usec: u64,
    /// Whether the last heuristic said the clock stalled (tor keeps this
    /// process-wide; here it is per circuit).
    pub clock_broken: bool,
    /// RTT samples refused as stalls or jumps.
    pub stalls: u64,
    /// Times the minimum was raised because the window sat at its minimum.
    pub min_resets: u64,
}

/// What the estimator needs to know about the congestion window.
#[derive(Debug, Clone, Copy)]
pub struct RttContext {
    /// In slow start.
    pub in_slow_start: bool,
    /// N of the EWMA to use now.
    pub ewma_n: u64,
    /// The window is at its minimum (and not in slow start): raise the
    /// minimum RTT towards the EWMA.
    pub at_cwnd_min: bool,
    /// `cc_rtt_reset_pct`.
    pub rtt_reset_pct: u64,
}

impl RttEstimator {
    /// Whether `new` (µs) looks like a clock stall or jump relative to the
    /// EWMA (tor's `time_delta_stalled_or_jumped`).
    fn stalled_or_jumped(&mut self, new: u64, in_slow_start: bool) -> bool {
        if new == 0 {
            self.clock_broken = true;
            return true;
        }
        // Heuristics only once out of slow start with an EWMA.
        if in_slow_start || self.ewma_usec == 0 {
            return false;
        }
        let old = self.ewma_usec;
        if old > new.saturating_mul(DELTA_DISCREPANCY_RATIO_MAX) {
            // A sudden drop: a stall only if one was seen before.
            return self.clock_broken;
        }
        if new > old.saturating_mul(DELTA_DISCREPANCY_RATIO_MAX) {
            return true;
        }
        self.clock_broken = false;
        false
    }

    /// Take one RTT sample (µs). Returns it, or 0 when it was refused as a
    /// stall or jump (tor's `congestion_control_update_circuit_rtt`).
    pub fn update(&mut self, rtt_usec: u64, ctx: RttContext) -> u64 {
        if self.stalled_or_jumped(rtt_usec, ctx.in_slow_start) {
            self.stalls = self.stalls.saturating_add(1);
            return 0;
        }
        self.ewma_usec = n_count_ewma(rtt_usec, self.ewma_usec, ctx.ewma_n.max(2));
        self.max_usec = self.max_usec.max(rtt_usec);
        if self.min_usec == 0 {
            self.min_usec = self.ewma_usec;
        } else if ctx.at_cwnd_min && !ctx.in_slow_start {
            // Out of a wedge where an abnormally low RTT pinned the window
            // at its minimum.
            self.min_usec = percent_max_mix(self.ewma_usec, self.min_usec, ctx.rtt_reset_pct);
            self.min_resets = self.min_resets.saturating_add(1);
        } else if self.ewma_usec < self.min_usec {
            self.min_usec = self.ewma_usec;
        }
        rtt_usec
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(ss: bool, n: u64) -> RttContext {
        RttContext {
            in_slow_start: ss,
            ewma_n: n,
            at_cwnd_min: false,
            rtt_reset_pct: 100,
        }
    }

    #[test]
    fn ewma_rounds_as_specified() {
        assert_eq!(n_count_ewma(100, 0, 2), 100);
        // (2*100 + 1*200)/3 = 133 (integer division).
        assert_eq!(n_count_ewma(100, 200, 2), 133);
        assert_eq!(n_count_ewma(50, 100, 10), (100 + 9 * 100) / 11);
        assert_eq!(percent_max_mix(10, 30, 100), 30);
        assert_eq!(percent_max_mix(10, 30, 0), 10);
        assert_eq!(percent_max_mix(10, 30, 50), 20);
    }

    #[test]
    fn min_max_and_ewma() {
        let mut r = RttEstimator::default();
        assert_eq!(r.update(40_000, ctx(true, 2)), 40_000);
        assert_eq!(
            (r.ewma_usec, r.min_usec, r.max_usec),
            (40_000, 40_000, 40_000)
        );
        r.update(100_000, ctx(true, 2));
        assert_eq!(r.ewma_usec, (200_000 + 40_000) / 3);
        assert_eq!(r.min_usec, 40_000);
        assert_eq!(r.max_usec, 100_000);
        r.update(10_000, ctx(true, 2));
        assert!(r.min_usec < 40_000);
    }

    #[test]
    fn stalls_and_jumps_are_refused() {
        let mut r = RttEstimator::default();
        assert_eq!(r.update(0, ctx(true, 2)), 0);
        assert!(r.clock_broken);
        assert_eq!(r.stalls, 1);
        // In slow start no heuristics beyond 0.
        r.update(1_000, ctx(true, 2));
        assert_eq!(r.update(1_000 * 6000, ctx(true, 2)), 6_000_000);
        // Out of slow start: a 5000x jump is refused, the EWMA unchanged.
        let mut r = RttEstimator::default();
        r.update(1_000, ctx(false, 2));
        let before = r.ewma_usec;
        assert_eq!(r.update(1_000 * 5001, ctx(false, 2)), 0);
        assert_eq!(r.ewma_usec, before);
        // A sudden drop is accepted unless a stall was seen before.
        let mut r = RttEstimator::default();
        r.update(10_000_000, ctx(false, 2));
        assert_eq!(r.update(1_000, ctx(false, 2)), 1_000);
        let mut r = RttEstimator::default();
        r.update(10_000_000, ctx(false, 2));
        assert_eq!(r.update(0, ctx(false, 2)), 0);
        assert_eq!(r.update(1_000, ctx(false, 2)), 0);
        // A normal sample clears the stall.
        assert_eq!(r.update(9_000_000, ctx(false, 2)), 9_000_000);
        assert!(!r.clock_broken);
    }

    #[test]
    fn min_raised_when_window_is_pinned() {
        let mut r = RttEstimator::default();
        r.update(10_000, ctx(false, 2));
        r.update(30_000, ctx(false, 2));
        let ewma = r.ewma_usec;
        let c = RttContext {
            at_cwnd_min: true,
            ..ctx(false, 2)
        };
        r.update(30_000, c);
        assert!(r.min_usec > 10_000);
        assert_eq!(r.min_resets, 1);
        assert!(r.min_usec >= ewma);
    }
}
