//! The one wall clock of the node drivers.
//!
//! Every key and certificate lifetime, descriptor date, consensus validity
//! check and vote schedule reads the time here. The sans-IO crates take the
//! time as a parameter (their unit tests pass any time they like); tests of
//! whole networks move this clock for every process at once by running the
//! nodes under libfaketime (`onionmix testnet start --clock-file`), which
//! this module sees as the system clock. Timers and timeouts use the
//! monotonic clock, which a moved wall clock does not disturb; loops that
//! wait for a wall-clock moment therefore wake at least every
//! [`WALL_CLOCK_RECHECK`] to notice a jump.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Longest a driver sleeps before looking at the wall clock again.
pub const WALL_CLOCK_RECHECK: Duration = Duration::from_secs(30);

/// Now, as a `SystemTime`.
pub fn now() -> SystemTime {
    SystemTime::now()
}

/// Now, in seconds since the Unix epoch (0 if the clock is before 1970).
pub fn now_unix() -> u64 {
    to_unix(now())
}

/// A `SystemTime` in Unix seconds (0 before 1970).
pub fn to_unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// Unix seconds as a `SystemTime`.
pub fn from_unix(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// How long to sleep to reach the wall-clock moment `at`, at most
/// [`WALL_CLOCK_RECHECK`] (so that a jumped clock is noticed), at least 1 ms.
pub fn sleep_towards(at: SystemTime) -> Duration {
    at.duration_since(now())
        .unwrap_or(Duration::ZERO)
        .clamp(Duration::from_millis(1), WALL_CLOCK_RECHECK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conversions_and_sleep_bounds() {
        assert_eq!(to_unix(from_unix(1_795_428_000)), 1_795_428_000);
        assert_eq!(to_unix(UNIX_EPOCH - Duration::from_secs(5)), 0);
        let far = now() + Duration::from_secs(86_400);
        assert_eq!(sleep_towards(far), WALL_CLOCK_RECHECK);
        let past = now() - Duration::from_secs(10);
        assert_eq!(sleep_towards(past), Duration::from_millis(1));
        assert!(now_unix() > 1_700_000_000);
    }
}
