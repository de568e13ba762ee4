//! Entry guards: a simplified guard-spec.
//!
//! What is kept from guard-spec:
//! - a persistent *sampled* set, drawn by guard-position bandwidth weight
//!   from relays with the Guard flag, expanded until it holds
//!   `min_filtered_sample` usable guards (bounded by `max_sample`);
//! - *confirmed* guards (a circuit through them succeeded), remembered in
//!   confirmation order;
//! - *primary* guards: the first `n_primary` (3) usable guards, confirmed
//!   ones first (in confirmation order), then the rest of the sample in
//!   sampling order;
//! - circuits use the **first** primary guard that is usable and not
//!   waiting for a retry (tor's `NUM_USABLE_PRIMARY_GUARDS` = 1), falling
//!   back along the primary list, then to confirmed and other sampled
//!   guards; directory fetches pick uniformly among the first 3 usable
//!   primary guards (`NUM_USABLE_PRIMARY_DIRECTORY_GUARDS` = 3);
//! - failed guards are retried on guard-spec's schedules (primary: every
//!   10 min for 6 h, 90 min for 4 days, 4 h for 3 days, then 9 h; others:
//!   1 h, 4 h, 18 h, 36 h over the same periods);
//! - guards that left the consensus (or lost Guard/Running/Valid, or have no
//!   microdescriptor) are unusable; unlisted for 20 days they are dropped;
//!   sampled guards expire after 120 days unless confirmed in the last 60.
//!
//! Left out: the "pending"/"waiting for better guard" circuit states,
//! restricted/bridge guard selections, and path-bias accounting.
//!
//! Persistence: [`GuardSet::to_json`] / [`GuardSet::from_json`]; the caller
//! does the file IO.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rand::Rng;

use crate::netdir::{NetDir, Position, Relay};
use crate::types::RelayFlags;
use crate::{RelayId, RsaId};

/// Version number written into the JSON state.
pub const GUARD_STATE_VERSION: u32 = 1;
/// Largest accepted state text.
pub const MAX_GUARD_STATE_LEN: usize = 1024 * 1024;
/// Most guards accepted in a state file.
pub const MAX_GUARD_ENTRIES: usize = 1000;

const HOUR: u64 = 3600;
const DAY: u64 = 24 * HOUR;

/// Tunables (guard-spec defaults).
#[derive(Debug, Clone, PartialEq)]
pub struct GuardParams {
    /// Number of primary guards (3).
    pub n_primary: usize,
    /// Directory fetches use one of this many usable primary guards (3).
    pub n_primary_dir: usize,
    /// Keep sampling until this many sampled guards are usable (20).
    pub min_filtered_sample: usize,
    /// Hard cap on the sample size (60).
    pub max_sample: usize,
    /// Sample at most this fraction of all Guard-flagged relays (0.2),
    /// but never fewer than `min_filtered_sample`.
    pub max_sample_fraction: f64,
    /// Unconfirmed guards are dropped this long after sampling (120 days).
    pub lifetime: Duration,
    /// Confirmed guards are kept at least this long after confirmation (60 days).
    pub confirmed_lifetime: Duration,
    /// Guards unlisted this long are dropped (20 days).
    pub remove_unlisted_after: Duration,
}

impl Default for GuardParams {
    fn default() -> Self {
        GuardParams {
            n_primary: 3,
            n_primary_dir: 3,
            min_filtered_sample: 20,
            max_sample: 60,
            max_sample_fraction: 0.2,
            lifetime: Duration::from_secs(120 * DAY),
            confirmed_lifetime: Duration::from_secs(60 * DAY),
            remove_unlisted_after: Duration::from_secs(20 * DAY),
        }
    }
}

/// Errors loading guard state.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardStateError {
    /// The JSON text did not parse or had the wrong shape.
    #[error("malformed guard state: {0}")]
    Malformed(String),
    /// Unknown state version.
    #[error("unsupported guard state version {0}")]
    Version(u32),
    /// Too large or too many entries.
    #[error("guard state too large")]
    TooLarge,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct GuardEntry {
    #[serde(with = "crate::hex20")]
    rsa_id: RsaId,
    #[serde(default)]
    nickname: String,
    /// Unix seconds.
    added_at: u64,
    #[serde(default)]
    confirmed_at: Option<u64>,
    #[serde(default)]
    confirmed_idx: Option<u64>,
    #[serde(default)]
    unlisted_since: Option<u64>,
    #[serde(default)]
    failing_since: Option<u64>,
    #[serde(default)]
    last_tried: Option<u64>,
    /// Derived from the current NetDir; not persisted.
    #[serde(skip)]
    usable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
struct GuardState {
    version: u32,
    next_confirmed_idx: u64,
    guards: Vec<GuardEntry>,
}

/// The guard set.
#[derive(Debug, Clone)]
pub struct GuardSet {
    state: GuardState,
    params: GuardParams,
    primary: Vec<RsaId>,
}

fn secs(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

fn retry_interval(failing_for: u64, primary: bool) -> u64 {
    let six_h = 6 * HOUR;
    let four_d = 4 * DAY;
    let seven_d = 7 * DAY;
    if primary {
        if failing_for < six_h {
            10 * 60
        } else if failing_for < six_h + four_d {
            90 * 60
        } else if failing_for < six_h + seven_d {
            4 * HOUR
        } else {
            9 * HOUR
        }
    } else if failing_for < six_h {
        HOUR
    } else if failing_for < six_h + four_d {
        4 * HOUR
    } else if failing_for < six_h + seven_d {
        18 * HOUR
    } else {
        36 * HOUR
    }
}

impl Default for GuardSet {
    fn default() -> Self {
        GuardSet::new(GuardParams::default())
    }
}

impl GuardSet {
    /// An empty guard set.
    pub fn new(params: GuardParams) -> Self {
        GuardSet {
            state: GuardState {
                version: GUARD_STATE_VERSION,
                next_confirmed_idx: 0,
                guards: Vec::new(),
            },
            params,
            primary: Vec::new(),
        }
    }

    /// Load state written by [`GuardSet::to_json`].  Call
    /// [`GuardSet::update`] with the current directory before use.
    pub fn from_json(text: &str, params: GuardParams) -> Result<Self, GuardStateError> {
        if text.len() > MAX_GUARD_STATE_LEN {
            return Err(GuardStateError::TooLarge);
        }
        let state: GuardState =
            serde_json::from_str(text).map_err(|e| GuardStateError::Malformed(e.to_string()))?;
        if state.version != GUARD_STATE_VERSION {
            return Err(GuardStateError::Version(state.version));
        }
        if state.guards.len() > MAX_GUARD_ENTRIES {
            return Err(GuardStateError::TooLarge);
        }
        let mut seen = std::collections::HashSet::new();
        if !state.guards.iter().all(|g| seen.insert(g.rsa_id)) {
            return Err(GuardStateError::Malformed("duplicate guard".into()));
        }
        Ok(GuardSet {
            state,
            params,
            primary: Vec::new(),
        })
    }

    /// Serialize the persistent state (sample, confirmations, failures).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.state).unwrap_or_default()
    }

    /// Parameters in force.
    pub fn params(&self) -> &GuardParams {
        &self.params
    }

    fn usable_relay<'a>(netdir: &'a NetDir, id: &RsaId) -> Option<&'a Relay> {
        netdir.relay_by_rsa_id(id).filter(|r| {
            r.flags.contains(
                RelayFlags::GUARD
                    .with(RelayFlags::RUNNING)
                    .with(RelayFlags::VALID),
            ) && !r.flags.contains(RelayFlags::MIDDLE_ONLY)
        })
    }

    /// Bring the set up to date with a new directory: mark guards listed or
    /// unlisted, drop expired ones, sample new guards if too few are usable,
    /// and recompute the primary guards.
    pub fn update<R: Rng + ?Sized>(&mut self, netdir: &NetDir, now: SystemTime, rng: &mut R) {
        let now_s = secs(now);
        let p = &self.params;
        for g in &mut self.state.guards {
            let listed = netdir.listed_by_rsa_id(&g.rsa_id).is_some();
            if listed {
                g.unlisted_since = None;
            } else if g.unlisted_since.is_none() {
                g.unlisted_since = Some(now_s);
            }
            g.usable = Self::usable_relay(netdir, &g.rsa_id).is_some();
            if let Some(r) = netdir.relay_by_rsa_id(&g.rsa_id) {
                g.nickname.clone_from(&r.nickname);
            }
        }
        let lifetime = p.lifetime.as_secs();
        let conf_lifetime = p.confirmed_lifetime.as_secs();
        let unlisted_max = p.remove_unlisted_after.as_secs();
        self.state.guards.retain(|g| {
            if g.unlisted_since
                .is_some_and(|u| now_s >= u.saturating_add(unlisted_max))
            {
                return false;
            }
            let mut expires = g.added_at.saturating_add(lifetime);
            if let Some(c) = g.confirmed_at {
                expires = expires.max(c.saturating_add(conf_lifetime));
            }
            now_s < expires
        });

        // Expand the sample.
        let n_guards = netdir
            .relays()
            .filter(|r| Self::usable_relay(netdir, &r.rsa_id).is_some())
            .count();
        let frac_cap = (n_guards as f64 * self.params.max_sample_fraction).ceil() as usize;
        let limit = frac_cap
            .max(self.params.min_filtered_sample)
            .min(self.params.max_sample);
        loop {
            let usable = self.state.guards.iter().filter(|g| g.usable).count();
            if usable >= self.params.min_filtered_sample || self.state.guards.len() >= limit {
                break;
            }
            let candidates: Vec<&Relay> = netdir
                .relays()
                .filter(|r| Self::usable_relay(netdir, &r.rsa_id).is_some())
                .filter(|r| !self.state.guards.iter().any(|g| g.rsa_id == r.rsa_id))
                .collect();
            let Some(pick) = crate::path::choose_weighted(rng, &candidates, |r| {
                netdir.relay_weight(r, Position::Guard)
            }) else {
                break;
            };
            self.state.guards.push(GuardEntry {
                rsa_id: pick.rsa_id,
                nickname: pick.nickname.clone(),
                added_at: now_s,
                confirmed_at: None,
                confirmed_idx: None,
                unlisted_since: None,
                failing_since: None,
                last_tried: None,
                usable: true,
            });
        }
        self.recompute_primary();
    }

    fn recompute_primary(&mut self) {
        let mut confirmed: Vec<&GuardEntry> = self
            .state
            .guards
            .iter()
            .filter(|g| g.usable && g.confirmed_idx.is_some())
            .collect();
        confirmed.sort_by_key(|g| g.confirmed_idx);
        let mut primary: Vec<RsaId> = confirmed
            .iter()
            .map(|g| g.rsa_id)
            .take(self.params.n_primary)
            .collect();
        for g in &self.state.guards {
            if primary.len() >= self.params.n_primary {
                break;
            }
            if g.usable && !primary.contains(&g.rsa_id) {
                primary.push(g.rsa_id);
            }
        }
        self.primary = primary;
    }

    /// The primary guards, best first.
    pub fn primary_guards(&self) -> Vec<RelayId> {
        self.primary.iter().map(|id| RelayId(*id)).collect()
    }

    /// Every sampled guard, in sampling order.
    pub fn sampled_guards(&self) -> Vec<RelayId> {
        self.state
            .guards
            .iter()
            .map(|g| RelayId(g.rsa_id))
            .collect()
    }

    /// Confirmed guards, in confirmation order.
    pub fn confirmed_guards(&self) -> Vec<RelayId> {
        let mut c: Vec<&GuardEntry> = self
            .state
            .guards
            .iter()
            .filter(|g| g.confirmed_idx.is_some())
            .collect();
        c.sort_by_key(|g| g.confirmed_idx);
        c.iter().map(|g| RelayId(g.rsa_id)).collect()
    }

    fn entry(&self, id: &RsaId) -> Option<&GuardEntry> {
        self.state.guards.iter().find(|g| &g.rsa_id == id)
    }

    /// True if the guard is not marked failing, or its retry time came.
    pub fn is_reachable_or_due(&self, id: &RelayId, now: SystemTime) -> bool {
        let Some(g) = self.entry(&id.0) else {
            return false;
        };
        let Some(fs) = g.failing_since else {
            return true;
        };
        let now_s = secs(now);
        let primary = self.primary.contains(&id.0);
        let interval = retry_interval(now_s.saturating_sub(fs), primary);
        now_s >= g.last_tried.unwrap_or(fs).saturating_add(interval)
    }

    /// The guard to use for a new circuit: the first usable primary guard
    /// that passes `filter` (e.g. "not in the exit's family") and is not
    /// waiting for a retry; then confirmed, then other sampled guards.
    pub fn pick_guard(
        &self,
        netdir: &NetDir,
        now: SystemTime,
        filter: impl Fn(&Relay) -> bool,
    ) -> Option<RelayId> {
        let ok = |id: &RsaId| -> bool {
            Self::usable_relay(netdir, id).is_some_and(&filter)
                && self.is_reachable_or_due(&RelayId(*id), now)
        };
        if let Some(id) = self.primary.iter().find(|id| ok(id)) {
            return Some(RelayId(*id));
        }
        let confirmed = self.confirmed_guards();
        if let Some(id) = confirmed.iter().find(|id| ok(&id.0)) {
            return Some(*id);
        }
        self.state
            .guards
            .iter()
            .map(|g| g.rsa_id)
            .find(|id| ok(id))
            .map(RelayId)
    }

    /// A guard for a one-hop directory fetch: uniformly among the first
    /// `n_primary_dir` usable, reachable primary guards with the V2Dir flag.
    pub fn pick_dir_guard<R: Rng + ?Sized>(
        &self,
        netdir: &NetDir,
        now: SystemTime,
        rng: &mut R,
    ) -> Option<RelayId> {
        let usable: Vec<RelayId> = self
            .primary
            .iter()
            .filter(|id| {
                Self::usable_relay(netdir, id).is_some_and(|r| r.flags.contains(RelayFlags::V2DIR))
                    && self.is_reachable_or_due(&RelayId(**id), now)
            })
            .take(self.params.n_primary_dir)
            .map(|id| RelayId(*id))
            .collect();
        if usable.is_empty() {
            return None;
        }
        Some(usable[rng.gen_range(0..usable.len())])
    }

    /// A circuit (or channel) through this guard succeeded: mark it
    /// reachable and confirm it.
    pub fn record_success(&mut self, id: &RelayId, now: SystemTime) {
        let now_s = secs(now);
        let next = self.state.next_confirmed_idx;
        let mut used_idx = false;
        if let Some(g) = self.state.guards.iter_mut().find(|g| g.rsa_id == id.0) {
            g.failing_since = None;
            g.last_tried = Some(now_s);
            if g.confirmed_idx.is_none() {
                g.confirmed_idx = Some(next);
                g.confirmed_at = Some(now_s);
                used_idx = true;
            }
        }
        if used_idx {
            self.state.next_confirmed_idx = next.saturating_add(1);
            self.recompute_primary();
        }
    }

    /// Connecting to this guard failed: mark it failing until its retry time.
    pub fn record_failure(&mut self, id: &RelayId, now: SystemTime) {
        let now_s = secs(now);
        if let Some(g) = self.state.guards.iter_mut().find(|g| g.rsa_id == id.0) {
            g.failing_since.get_or_insert(now_s);
            g.last_tried = Some(now_s);
        }
    }

    /// Forget all failures (e.g. the network came back after being down).
    pub fn mark_all_retry(&mut self) {
        for g in &mut self.state.guards {
            g.failing_since = None;
        }
    }
}
