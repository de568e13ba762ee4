//! Going dormant on its own, as tor's client does (`DormantClientTimeout`,
//! `DormantTimeoutEnabled`, `DormantTimeoutDisabledByIdleStreams`): a
//! client that has seen no user activity for the timeout (24 hours by
//! default) stops building circuits ahead of need and fetching directory
//! information, exactly as after `SIGNAL DORMANT`, until a new stream or
//! `SIGNAL ACTIVE` wakes it. Open streams count as activity (unless
//! configured otherwise), and a client hosting an onion service never
//! sleeps, as in tor (`check_network_participation_callback`).

use std::time::Duration;

/// Tor checks every five minutes.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(300);

/// What the dormancy check is told to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DormancyConfig {
    /// `DormantTimeoutEnabled`: whether idleness ever puts the client to
    /// sleep.
    pub enabled: bool,
    /// `DormantClientTimeout`.
    pub timeout: Duration,
    /// `DormantTimeoutDisabledByIdleStreams`: an open stream is activity.
    pub streams_keep_awake: bool,
}

/// What one check concludes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Something counts as activity now (an open stream, a hosted
    /// service): the idle clock restarts.
    Active,
    /// Nothing to do.
    Idle,
    /// Idle for the whole timeout: go dormant.
    FallAsleep,
}

/// One check: `dormant` whether the client already sleeps, `idle` the time
/// since the last activity, `open_streams` the application streams open,
/// `services` the onion services hosted.
pub fn check(
    cfg: &DormancyConfig,
    dormant: bool,
    idle: Duration,
    open_streams: usize,
    services: usize,
) -> Verdict {
    if services > 0 || (cfg.streams_keep_awake && open_streams > 0) {
        return Verdict::Active;
    }
    if !cfg.enabled || dormant || idle < cfg.timeout {
        return Verdict::Idle;
    }
    Verdict::FallAsleep
}

/// How often to check: tor's five minutes, or often enough for a short
/// timeout (testing networks allow them) to be noticed within a quarter
/// of it.
pub fn interval(cfg: &DormancyConfig) -> Duration {
    (cfg.timeout / 4).clamp(Duration::from_secs(1), CHECK_INTERVAL)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> DormancyConfig {
        DormancyConfig {
            enabled: true,
            timeout: Duration::from_secs(600),
            streams_keep_awake: true,
        }
    }

    #[test]
    fn sleeps_after_the_whole_timeout_only() {
        let c = cfg();
        assert_eq!(
            check(&c, false, Duration::from_secs(599), 0, 0),
            Verdict::Idle
        );
        assert_eq!(
            check(&c, false, Duration::from_secs(600), 0, 0),
            Verdict::FallAsleep
        );
        // Already dormant: nothing more to do.
        assert_eq!(
            check(&c, true, Duration::from_secs(9999), 0, 0),
            Verdict::Idle
        );
    }

    #[test]
    fn streams_and_services_are_activity() {
        let c = cfg();
        let long = Duration::from_secs(100_000);
        assert_eq!(check(&c, false, long, 1, 0), Verdict::Active);
        assert_eq!(check(&c, true, long, 1, 0), Verdict::Active);
        assert_eq!(check(&c, false, long, 0, 1), Verdict::Active);
        let c = DormancyConfig {
            streams_keep_awake: false,
            ..cfg()
        };
        assert_eq!(check(&c, false, long, 3, 0), Verdict::FallAsleep);
        // A hosted service keeps the client awake whatever the options.
        assert_eq!(check(&c, false, long, 0, 1), Verdict::Active);
    }

    #[test]
    fn disabled_never_sleeps() {
        let c = DormancyConfig {
            enabled: false,
            ..cfg()
        };
        assert_eq!(
            check(&c, false, Duration::from_secs(u64::from(u32::MAX)), 0, 0),
            Verdict::Idle
        );
    }

    #[test]
    fn check_interval_follows_the_timeout() {
        let mut c = cfg();
        c.timeout = Duration::from_secs(86_400);
        assert_eq!(interval(&c), CHECK_INTERVAL);
        c.timeout = Duration::from_secs(8);
        assert_eq!(interval(&c), Duration::from_secs(2));
        c.timeout = Duration::from_secs(1);
        assert_eq!(interval(&c), Duration::from_secs(1));
    }
}
