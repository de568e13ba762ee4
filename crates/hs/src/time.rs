//! Time periods and the shared-random schedule as onion services see them
//! (rend-spec-v3 §2.2.1 `[TIME-PERIODS]`, §2.2.2 `[WHEN-HSDESC]`), computed
//! exactly as stock tor 0.4.9 does (`hs_common.c`,
//! `shared_random_client.c`), from inputs the caller takes from the
//! consensus: its valid-after and fresh-until times and the
//! `hsdir_interval` parameter.
//!
//! Two details of stock tor matter for interop and are easy to miss:
//! * the consensus parameter is spelt `hsdir_interval` (rend-spec-v3
//!   writes `hsdir-interval`; param-spec and tor's code use the
//!   underscore), default 1440 minutes, clamped to [30, 14400];
//! * on a `TestingTorNetwork` the period length ignores the parameter and
//!   is one shared-random protocol run, `24 * voting_interval / 60`
//!   minutes, and the rotation offset (12 voting intervals in both cases)
//!   follows the consensus's own voting interval (`fresh-until -
//!   valid-after`).
//!
//! All times are seconds since the Unix epoch.

use tor_hscrypto::time::TimePeriod;

/// Default time-period length in minutes (`hsdir_interval`).
pub const HSDIR_INTERVAL_DEFAULT: u32 = 1440;
/// Smallest accepted `hsdir_interval`.
pub const HSDIR_INTERVAL_MIN: u32 = 30;
/// Largest accepted `hsdir_interval` (ten days).
pub const HSDIR_INTERVAL_MAX: u32 = 14400;
/// Rounds per shared-random phase (srv-spec).
pub const SR_N_ROUNDS: u64 = 12;
/// Phases per shared-random protocol run (commit, reveal).
pub const SR_N_PHASES: u64 = 2;

/// A descriptor's `descriptor-lifetime` as stock tor services set it, in
/// minutes (`HS_DESC_DEFAULT_LIFETIME`, 3 hours).
pub const DESC_LIFETIME_MIN: u16 = 180;
/// The longest `descriptor-lifetime` tor accepts, in minutes (12 hours).
pub const DESC_MAX_LIFETIME_MIN: u16 = 720;
/// Lifetime of the descriptor-signing-key certificate and of the
/// introduction-point certificates (`HS_DESC_CERT_LIFETIME`, 54 hours).
pub const DESC_CERT_LIFETIME_S: u64 = 54 * 3600;

/// Why the schedule cannot be computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    /// `fresh-until` is not after `valid-after`.
    #[error("consensus voting interval is not positive")]
    BadInterval,
    /// The voting interval is too long or too short to make a time period
    /// (a testing network's run must be longer than a minute).
    #[error("voting interval {0} s gives no usable time period")]
    UnusableInterval(u64),
    /// The time is before the first time period.
    #[error("time is before the first time period")]
    TooEarly,
    /// An arithmetic overflow (absurd times).
    #[error("time out of range")]
    Overflow,
}

/// The time-period schedule derived from one consensus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HsSchedule {
    /// Voting interval in seconds (`fresh-until - valid-after`).
    voting_interval: u64,
    /// Time-period length in minutes.
    period_len_min: u64,
}

impl HsSchedule {
    /// The schedule of a consensus: `valid_after`/`fresh_until` from its
    /// header, `hsdir_interval` its parameter if present, `testing` whether
    /// this is a `TestingTorNetwork`.
    pub fn new(
        valid_after: u64,
        fresh_until: u64,
        hsdir_interval: Option<i32>,
        testing: bool,
    ) -> Result<Self, TimeError> {
        let voting_interval = fresh_until
            .checked_sub(valid_after)
            .filter(|v| *v > 0)
            .ok_or(TimeError::BadInterval)?;
        Self::from_interval(voting_interval, hsdir_interval, testing)
    }

    /// The schedule for a known voting interval (seconds).
    pub fn from_interval(
        voting_interval: u64,
        hsdir_interval: Option<i32>,
        testing: bool,
    ) -> Result<Self, TimeError> {
        if voting_interval == 0 || voting_interval > 86_400 {
            return Err(TimeError::UnusableInterval(voting_interval));
        }
        let period_len_min = if testing {
            let run = SR_N_ROUNDS * SR_N_PHASES * voting_interval;
            if run <= 60 {
                return Err(TimeError::UnusableInterval(voting_interval));
            }
            run / 60
        } else {
            u64::from(clamp_param(
                hsdir_interval,
                HSDIR_INTERVAL_DEFAULT,
                HSDIR_INTERVAL_MIN,
                HSDIR_INTERVAL_MAX,
            ))
        };
        Ok(Self {
            voting_interval,
            period_len_min,
        })
    }

    /// Time-period length in minutes (what key blinding and the hash ring
    /// hash in).
    pub fn period_length_minutes(&self) -> u64 {
        self.period_len_min
    }

    /// The voting interval in seconds.
    pub fn voting_interval(&self) -> u64 {
        self.voting_interval
    }

    /// Length of one shared-random phase in seconds (the time-period
    /// rotation offset).
    pub fn phase_duration(&self) -> u64 {
        SR_N_ROUNDS * self.voting_interval
    }

    /// Length of one shared-random protocol run in seconds.
    pub fn run_duration(&self) -> u64 {
        SR_N_ROUNDS * SR_N_PHASES * self.voting_interval
    }

    /// The time-period number at `now` (tor's `hs_get_time_period_num`;
    /// tor passes the consensus's valid-after as `now`).
    pub fn period_num(&self, now: u64) -> Result<u64, TimeError> {
        let offset_min = self.phase_duration() / 60;
        let minutes = (now / 60)
            .checked_sub(offset_min)
            .filter(|m| *m > 0)
            .ok_or(TimeError::TooEarly)?;
        Ok(minutes / self.period_len_min)
    }

    /// When time period `num` starts.
    pub fn period_start(&self, num: u64) -> Result<u64, TimeError> {
        num.checked_mul(self.period_len_min)
            .and_then(|m| m.checked_mul(60))
            .and_then(|s| s.checked_add(self.phase_duration()))
            .ok_or(TimeError::Overflow)
    }

    /// When the time period after the one containing `now` starts.
    pub fn next_period_start(&self, now: u64) -> Result<u64, TimeError> {
        let n = self
            .period_num(now)?
            .checked_add(1)
            .ok_or(TimeError::Overflow)?;
        // tor: next_num * length minutes * 60 + phase duration (not divided
        // by 60 first, unlike period_num).
        self.period_start(n)
    }

    /// Start of the shared-random protocol run that the consensus valid
    /// from `valid_after` belongs to.
    pub fn srv_run_start(&self, valid_after: u64) -> u64 {
        let rounds = SR_N_ROUNDS * SR_N_PHASES;
        let slot = (valid_after / self.voting_interval) % rounds;
        valid_after.saturating_sub(slot * self.voting_interval)
    }

    /// Start of the protocol run before that one.
    pub fn previous_srv_run_start(&self, valid_after: u64) -> u64 {
        self.srv_run_start(valid_after)
            .saturating_sub(self.run_duration())
    }

    /// tor's `hs_in_period_between_tp_and_srv`: true when the consensus
    /// falls between the start of a time period and the next shared random
    /// value (12:00 to 00:00 UTC on the public network).
    pub fn between_tp_and_srv(&self, valid_after: u64) -> Result<bool, TimeError> {
        let srv_start = self.srv_run_start(valid_after);
        let tp_start = self.next_period_start(srv_start)?;
        Ok(!(valid_after >= srv_start && valid_after < tp_start))
    }

    /// Arti's time-period value for period `num` (key blinding hashes only
    /// the number and the length).
    pub fn time_period(&self, num: u64) -> Result<TimePeriod, TimeError> {
        let len = u32::try_from(self.period_len_min).map_err(|_| TimeError::Overflow)?;
        let off = u32::try_from(self.phase_duration()).map_err(|_| TimeError::Overflow)?;
        Ok(TimePeriod::from_parts(len, num, off))
    }
}

/// A consensus parameter as tor's `networkstatus_get_param` reads it:
/// absent means the default, out-of-range values are clamped.
pub fn clamp_param(value: Option<i32>, default: u32, min: u32, max: u32) -> u32 {
    match value {
        None => default,
        Some(v) => {
            let v = i64::from(v).clamp(i64::from(min), i64::from(max));
            u32::try_from(v).unwrap_or(default)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // 2016-04-13 11:00:00 UTC and rend-spec-v3's §2.2.1 example: with a
    // 1440-minute period and a 12 h offset the time period number is 16903.
    const APR_13_11H: u64 = 1_460_545_200;

    fn public() -> HsSchedule {
        HsSchedule::new(APR_13_11H, APR_13_11H + 3600, None, false).expect("schedule")
    }

    #[test]
    fn spec_example_period_number() {
        let s = public();
        assert_eq!(s.period_length_minutes(), 1440);
        assert_eq!(s.period_num(APR_13_11H), Ok(16903));
        // test_hs_common.c test_time_period: 11:59:59 is still 16903,
        // 12:00:00 starts 16904.
        assert_eq!(s.period_num(1_460_548_799), Ok(16903));
        assert_eq!(s.period_num(1_460_548_800), Ok(16904));
        assert_eq!(s.next_period_start(APR_13_11H), Ok(1_460_548_800));
        assert_eq!(s.period_start(16904), Ok(1_460_548_800));
    }

    #[test]
    fn parameter_is_clamped_like_tor() {
        let mk = |v| HsSchedule::from_interval(3600, v, false).expect("s");
        assert_eq!(mk(Some(10)).period_length_minutes(), 30);
        assert_eq!(mk(Some(-5)).period_length_minutes(), 30);
        assert_eq!(mk(Some(100_000)).period_length_minutes(), 14400);
        assert_eq!(mk(Some(60)).period_length_minutes(), 60);
    }

    #[test]
    fn testing_network_uses_one_srv_run() {
        // V3AuthVotingInterval 20 s (tor's testing default): a run is
        // 480 s, so periods are 8 minutes and the offset is 240 s.
        let s = HsSchedule::new(1_000_020, 1_000_040, Some(1440), true).expect("s");
        assert_eq!(s.period_length_minutes(), 8);
        assert_eq!(s.phase_duration(), 240);
        assert!(HsSchedule::from_interval(2, None, true).is_err());
    }

    #[test]
    fn c_tor_testing_network_schedule() {
        // test_hs_common.c test_start_time_of_next_time_period: with a
        // 10 s voting interval periods last 4 minutes and start 120 s
        // after the run boundary.
        let s = HsSchedule::from_interval(10, None, true).expect("s");
        assert_eq!(s.period_length_minutes(), 4);
        let apr13 = 1_460_505_600;
        assert_eq!(s.next_period_start(apr13), Ok(apr13 + 120));
        assert_eq!(s.next_period_start(apr13 + 120), Ok(apr13 + 360));
    }

    #[test]
    fn c_tor_between_tp_and_srv() {
        // test_hs_common.c test_time_between_tp_and_srv (1985-10-26).
        let s = HsSchedule::from_interval(3600, None, false).expect("s");
        let day = 499_132_800;
        for (h, want) in [(0, false), (11, false), (12, true), (23, true)] {
            assert_eq!(s.between_tp_and_srv(day + h * 3600), Ok(want), "{h}:00");
        }
    }

    #[test]
    fn srv_run_and_tp_segments() {
        let s = public();
        // 2016-04-13 00:00 is an SRV run start (24 one-hour rounds).
        let midnight = 1_460_505_600;
        assert_eq!(s.srv_run_start(APR_13_11H), midnight);
        assert_eq!(s.previous_srv_run_start(APR_13_11H), midnight - 86_400);
        // 11:00 lies between SRV (00:00) and TP (12:00): not "between TP and SRV".
        assert_eq!(s.between_tp_and_srv(APR_13_11H), Ok(false));
        // 13:00 lies between TP (12:00) and the next SRV (00:00).
        assert_eq!(s.between_tp_and_srv(APR_13_11H + 7200), Ok(true));
        assert_eq!(s.between_tp_and_srv(midnight), Ok(false));
    }

    #[test]
    fn too_early_and_bad_interval() {
        assert_eq!(public().period_num(100), Err(TimeError::TooEarly));
        assert_eq!(
            HsSchedule::new(10, 10, None, false),
            Err(TimeError::BadInterval)
        );
    }
}
