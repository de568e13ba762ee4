//! The `cfx_*` consensus parameters (proposal 329 §5), with the defaults
//! and bounds of tor 0.4.9's `conflux_params.c`.

use std::collections::BTreeMap;

use crate::cc::params::get_u32;

/// Conflux consensus parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfluxParams {
    /// `cfx_enabled` (default 1): the emergency off switch.
    pub enabled: bool,
    /// `cfx_low_exit_threshold` (default 6000 of 10000): below this
    /// fraction of exits with `Conflux=1`, a client pre-builds one set.
    pub low_exit_threshold: u32,
    /// `cfx_max_linked_set` (default 10): linked sets a client keeps.
    pub max_linked_set: u8,
    /// `cfx_max_prebuilt_set` (default 3): sets a client pre-builds.
    pub max_prebuilt_set: u8,
    /// `cfx_max_unlinked_leg_retry` (default 3): relaunches of a leg that
    /// failed to link.
    pub max_unlinked_leg_retry: u8,
    /// `cfx_num_legs_set` (default 2): legs a client links per set.
    pub num_legs_set: u8,
    /// `cfx_max_legs_set` (default 8, at least 3): legs an exit accepts
    /// in one set.
    pub max_legs_set: u8,
    /// `cfx_send_pct` (default 100; tor reads it but no algorithm in use
    /// consults it).
    pub send_pct: u8,
    /// `cfx_drain_pct` (default 0; only matters with switch rate limits,
    /// which tor leaves off).
    pub drain_pct: u8,
    /// `cfx_max_oooq_bytes` (default 2^31-1): bytes a set's reorder queue
    /// may hold before the circuit is closed.
    pub max_oooq_bytes: u32,
}

impl Default for ConfluxParams {
    fn default() -> Self {
        Self::from_consensus(&BTreeMap::new())
    }
}

impl ConfluxParams {
    /// Read the parameters from a consensus `params` line.
    pub fn from_consensus(p: &BTreeMap<String, i32>) -> Self {
        let u8p = |name: &str, dflt: u8, min: u8| {
            u8::try_from(get_u32(p, name, dflt.into(), min.into(), 255)).unwrap_or(dflt)
        };
        ConfluxParams {
            enabled: get_u32(p, "cfx_enabled", 1, 0, 1) == 1,
            low_exit_threshold: get_u32(p, "cfx_low_exit_threshold", 6000, 0, 10_000),
            max_linked_set: u8p("cfx_max_linked_set", 10, 0),
            max_prebuilt_set: u8p("cfx_max_prebuilt_set", 3, 0),
            max_unlinked_leg_retry: u8p("cfx_max_unlinked_leg_retry", 3, 0),
            num_legs_set: u8p("cfx_num_legs_set", 2, 0),
            max_legs_set: u8p("cfx_max_legs_set", 8, 3),
            send_pct: u8p("cfx_send_pct", 100, 0),
            drain_pct: u8p("cfx_drain_pct", 0, 0),
            max_oooq_bytes: get_u32(p, "cfx_max_oooq_bytes", i32::MAX as u32, 0, i32::MAX as u32),
        }
    }

    /// Sets a client pre-builds when `ratio_10000` of the consensus's
    /// exits (out of 10000) support conflux (tor's
    /// `conflux_params_get_max_prebuilt`): none without any, one below
    /// `cfx_low_exit_threshold`, else `cfx_max_prebuilt_set`.
    pub fn max_prebuilt(&self, ratio_10000: u32) -> u8 {
        if ratio_10000 == 0 {
            0
        } else if ratio_10000 < self.low_exit_threshold {
            1
        } else {
            self.max_prebuilt_set
        }
    }

    /// Legs a client may launch for one set, retries included.
    pub fn max_leg_launches(&self) -> u32 {
        u32::from(self.num_legs_set) + u32::from(self.max_unlinked_leg_retry)
    }
}
