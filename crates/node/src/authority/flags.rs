//! The flags this authority votes for a relay (dir-spec §3.4.2, stock tor
//! 0.4.9's `dirauth/voteflags.c` where we have its inputs).

use std::collections::BTreeSet;
use std::time::Duration;

use onionmix_netdoc::Protocols;

use super::{Authority, Stored};
use crate::clock::now_unix;

/// `MinUptimeHidServDirectoryV2` outside testing networks: 96 hours.
pub(super) const DEFAULT_MIN_UPTIME_HSDIR: u64 = 96 * 3600;

impl Authority {
    fn running_window(&self) -> Duration {
        Duration::from_secs(self.cfg.reachability_interval_secs * 3 + 10)
    }

    /// `MinUptimeHidServDirectoryV2`: configured, else 0 in testing
    /// networks (tor's TestingTorNetwork default) and 96 hours otherwise.
    pub(super) fn min_uptime_hsdir(&self) -> u64 {
        self.cfg
            .min_uptime_hsdir_secs
            .unwrap_or(if self.cfg.testing_network {
                0
            } else {
                DEFAULT_MIN_UPTIME_HSDIR
            })
    }

    /// The relay's uptime as tor's `dirserv_thinks_router_is_hs_dir` sees
    /// it: what the descriptor says plus the time since it was published;
    /// once this authority has itself run longer than 1.1 x the HSDir
    /// uptime threshold, no more than it has seen the relay reachable
    /// without a failed test.
    fn hsdir_uptime(&self, s: &Stored) -> u64 {
        let now = now_unix();
        let real = s
            .desc
            .uptime
            .saturating_add(now.saturating_sub(s.desc.published));
        let min = self.min_uptime_hsdir();
        if self.started.elapsed().as_secs_f64() > min as f64 * 1.1 {
            let seen = s.reachable_since.map_or(0, |t| t.elapsed().as_secs());
            real.min(seen)
        } else {
            real
        }
    }

    /// Whether `s` matches a `testing_vote_hsdir` entry: `*`, a nickname,
    /// or an RSA fingerprint (40 hex digits, `$` optional).
    fn testing_vote_hsdir(&self, s: &Stored) -> bool {
        let fp = hex::encode_upper(s.desc.rsa_id);
        self.cfg.testing_vote_hsdir.iter().any(|e| {
            let e = e.trim();
            e == "*"
                || e.trim_start_matches('$').eq_ignore_ascii_case(&fp)
                || e.eq_ignore_ascii_case(&s.desc.nickname)
        })
    }

    pub(super) fn flags_for(&self, s: &Stored) -> BTreeSet<String> {
        let mut f = BTreeSet::new();
        let running = s
            .reachable_at
            .is_some_and(|t| t.elapsed() <= self.running_window());
        let testing = self.cfg.testing_network;
        let bw = s.desc.bandwidth.0.min(s.desc.bandwidth.2);
        let fast = testing || bw >= 100 * 1000;
        let stable = testing || s.desc.uptime >= 5 * 86400;
        let v2dir = s.desc.tunnelled_dir_server;
        let summary = onionmix_proto::exitpolicy::PortSummary::parse(&s.policy_summary).ok();
        let exit = summary.is_some_and(|p| p.allows(80) && p.allows(443));
        // tor's router_is_active: running, valid, not hibernating, an
        // observed bandwidth (not required in testing networks).
        let active = running && !s.desc.hibernating && (testing || s.desc.bandwidth.2 > 0);
        // HSDir (dirserv_thinks_router_is_hs_dir): the relay wants it
        // (`hidden-service-dir`), serves BEGIN_DIR, is Stable and Fast,
        // has been up MinUptimeHidServDirectoryV2 and is active. We also
        // require `HSDir=2` in its `proto` line: clients put only such
        // relays on the v3 hash ring, and onionmix relays, which store no
        // onion-service descriptors yet, advertise neither.
        let hsdir_v3 = s
            .desc
            .protocols
            .parse::<Protocols>()
            .is_ok_and(|p| p.supports("HSDir", 2));
        let mut hsdir = s.desc.hidden_service_dir
            && hsdir_v3
            && v2dir
            && stable
            && fast
            && self.hsdir_uptime(s) >= self.min_uptime_hsdir()
            && active;
        // TestingDirAuthVoteHSDir[IsStrict] (testing networks only).
        if testing {
            if self.testing_vote_hsdir(s) {
                hsdir = true;
            } else if self.cfg.testing_vote_hsdir_is_strict {
                hsdir = false;
            }
        }
        let mut add = |c: bool, n: &str| {
            if c {
                f.insert(n.to_string());
            }
        };
        add(running, "Running");
        add(true, "Valid");
        add(fast, "Fast");
        add(stable, "Stable");
        add(v2dir, "V2Dir");
        add(fast && stable && v2dir, "Guard");
        add(exit, "Exit");
        add(hsdir, "HSDir");
        add(self.is_authority_relay(&s.desc.rsa_id), "Authority");
        f
    }
}
