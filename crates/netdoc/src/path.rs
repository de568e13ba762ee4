//! Path selection (path-spec §2.2, §2.3).
//!
//! The exit is chosen first, then the guard, then the middle.  Every hop
//! must be Running and Valid (and Fast when `require_fast`, Stable when the
//! target port is long-lived); hops are distinct, not in the same family
//! (mutual `family` or shared `family-ids`), and not in the same IPv4 /16 or
//! IPv6 /32 unless `enforce_distinct_subnets` is off (test networks on
//! 127.0.0.1).  Choices are weighted by consensus bandwidth times the
//! position's bandwidth-weight; if every candidate weighs zero the choice is
//! uniform (as tor's `choose_array_element_by_weight`).

use std::time::SystemTime;

use rand::Rng;

use crate::guards::GuardSet;
use crate::netdir::{NetDir, Position, Relay};
use crate::types::RelayFlags;
use crate::{RelayId, RsaId};

/// tor's default `LongLivedPorts`.
pub const DEFAULT_LONG_LIVED_PORTS: &[u16] = &[
    21, 22, 706, 1863, 5050, 5190, 5222, 5223, 6523, 6667, 6697, 8300,
];

/// How many different exits to try when guard/middle constraints fail.
const MAX_EXIT_ATTEMPTS: usize = 8;

/// Path selection options.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PathConfig {
    /// Refuse two hops in the same /16 (IPv4) or /32 (IPv6).
    /// Turn off for test networks where every relay is on 127.0.0.1.
    pub enforce_distinct_subnets: bool,
    /// Ports that need Stable relays on every hop.
    pub long_lived_ports: Vec<u16>,
    /// Require the Fast flag on every hop (tor does for general circuits).
    pub require_fast: bool,
}

impl Default for PathConfig {
    fn default() -> Self {
        PathConfig {
            enforce_distinct_subnets: true,
            long_lived_ports: DEFAULT_LONG_LIVED_PORTS.to_vec(),
            require_fast: true,
        }
    }
}

impl PathConfig {
    /// Settings for a `TestingTorNetwork`: subnets not enforced.
    pub fn testing_network() -> Self {
        PathConfig {
            enforce_distinct_subnets: false,
            ..PathConfig::default()
        }
    }
}

/// What the circuit's last hop is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ExitTarget {
    /// Connect to this port: the exit's policy summary must accept it.
    Port(u16),
    /// Any exit whose policy accepts some port (e.g. DNS resolves).
    AnyPort,
    /// Internal circuit: last hop chosen like a middle, policy ignored.
    Internal,
    /// UDP to this port (proposal 339 as onionmix implements it): an exit
    /// that advertises `Datagram=1` and whose policy summary accepts the
    /// port (no separate UDP policy lines: the exit policy covers UDP).
    Datagram(u16),
}

/// Why no path could be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    /// No usable relay can be the exit for this target.
    #[error("no usable exit for {0:?}")]
    NoExit(ExitTarget),
    /// No usable guard compatible with the chosen exit.
    #[error("no usable guard")]
    NoGuard,
    /// No usable middle relay compatible with guard and exit.
    #[error("no usable middle relay")]
    NoMiddle,
    /// No relay (or guard) usable for a one-hop directory fetch.
    #[error("no usable directory relay")]
    NoDirectory,
}

/// Pick one element with probability proportional to `weight`; uniformly
/// if every weight is zero; `None` if `items` is empty.
pub fn choose_weighted<'a, T, R: Rng + ?Sized>(
    rng: &mut R,
    items: &[&'a T],
    weight: impl Fn(&T) -> u64,
) -> Option<&'a T> {
    if items.is_empty() {
        return None;
    }
    let weights: Vec<u64> = items.iter().map(|t| weight(t)).collect();
    let total: u128 = weights.iter().map(|w| u128::from(*w)).sum();
    if total == 0 {
        return Some(items[rng.gen_range(0..items.len())]);
    }
    let mut x = rng.gen_range(0..total);
    for (item, w) in items.iter().zip(weights) {
        let w = u128::from(w);
        if x < w {
            return Some(item);
        }
        x -= w;
    }
    items.last().copied()
}

/// Builds paths over one [`NetDir`].
#[derive(Debug, Clone)]
pub struct PathBuilder<'a> {
    netdir: &'a NetDir,
    config: &'a PathConfig,
    guards: Option<(&'a GuardSet, SystemTime)>,
    exclude: Option<&'a std::collections::HashSet<RsaId>>,
    only: &'a NodeRestrictions,
    layer2: Option<&'a [RsaId]>,
}

/// Relays a user pinned to positions (tor's `EntryNodes`, `MiddleNodes`,
/// `ExitNodes` with `StrictNodes 1`): an empty set means "any relay".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeRestrictions {
    /// First hop candidates (used instead of the guard set when non-empty).
    pub entry: std::collections::HashSet<RsaId>,
    /// Middle hop candidates.
    pub middle: std::collections::HashSet<RsaId>,
    /// Last hop candidates.
    pub exit: std::collections::HashSet<RsaId>,
}

static NO_RESTRICTIONS: std::sync::LazyLock<NodeRestrictions> =
    std::sync::LazyLock::new(NodeRestrictions::default);

fn allowed(set: &std::collections::HashSet<RsaId>, r: &Relay) -> bool {
    set.is_empty() || set.contains(&r.rsa_id)
}

impl<'a> PathBuilder<'a> {
    /// Without a guard set, the first hop is drawn by guard-position
    /// weight from Guard-flagged relays (like tor with `UseEntryGuards 0`).
    pub fn new(netdir: &'a NetDir, config: &'a PathConfig) -> Self {
        PathBuilder {
            netdir,
            config,
            guards: None,
            exclude: None,
            only: &NO_RESTRICTIONS,
            layer2: None,
        }
    }

    /// Only use the given relays in each position (strictly).
    #[must_use]
    pub fn restricted(mut self, only: &'a NodeRestrictions) -> Self {
        self.only = only;
        self
    }

    /// Never use these relays (e.g. ones that just failed).
    #[must_use]
    pub fn excluding(mut self, relays: &'a std::collections::HashSet<RsaId>) -> Self {
        self.exclude = Some(relays);
        self
    }

    fn excluded(&self, r: &Relay) -> bool {
        self.exclude.is_some_and(|e| e.contains(&r.rsa_id))
    }

    /// Onion-service paths with vanguards-lite: the middle (second) hop
    /// is drawn from these layer 2 guards ([`crate::vanguards`]), which
    /// need only differ from the guard and the last hop (tor applies no
    /// family or subnet rule to them). No member fits: no path.
    #[must_use]
    pub fn with_layer2(mut self, set: &'a [RsaId]) -> Self {
        self.layer2 = Some(set);
        self
    }

    /// Use the guard set: the first hop is its first usable primary guard
    /// compatible with the exit (see [`GuardSet::pick_guard`]).
    #[must_use]
    pub fn with_guards(mut self, guards: &'a GuardSet, now: SystemTime) -> Self {
        self.guards = Some((guards, now));
        self
    }

    /// True if the two relays may share a path.
    pub fn compatible(&self, a: &Relay, b: &Relay) -> bool {
        a.rsa_id != b.rsa_id
            && !a.in_same_family(b)
            && !(self.config.enforce_distinct_subnets && a.in_same_subnet(b))
    }

    /// For a position the user pinned: their choice overrides the Fast and
    /// Stable preferences (tor falls back the same way), not Running/Valid.
    fn pinned_ok(&self, r: &Relay) -> bool {
        !self.excluded(r)
            && r.flags
                .contains(RelayFlags::RUNNING.with(RelayFlags::VALID))
    }

    fn base_ok(&self, r: &Relay, need_stable: bool) -> bool {
        !self.excluded(r)
            && r.flags
                .contains(RelayFlags::RUNNING.with(RelayFlags::VALID))
            && (!self.config.require_fast || r.flags.contains(RelayFlags::FAST))
            && (!need_stable || r.flags.contains(RelayFlags::STABLE))
    }

    /// True if `r` may be the last hop for `target`.
    pub fn exit_ok(&self, r: &Relay, target: ExitTarget) -> bool {
        let need_stable = self.needs_stable(target);
        let ok = if self.only.exit.is_empty() {
            self.base_ok(r, need_stable)
        } else {
            self.only.exit.contains(&r.rsa_id) && self.pinned_ok(r)
        };
        if !ok {
            return false;
        }
        match target {
            ExitTarget::Internal => true,
            ExitTarget::Port(p) => {
                !r.flags.contains(RelayFlags::BAD_EXIT)
                    && !r.flags.contains(RelayFlags::MIDDLE_ONLY)
                    && r.ipv4_policy.allows_port(p)
            }
            ExitTarget::Datagram(p) => {
                !r.flags.contains(RelayFlags::BAD_EXIT)
                    && !r.flags.contains(RelayFlags::MIDDLE_ONLY)
                    && r.protocols.supports("Datagram", 1)
                    && r.ipv4_policy.allows_port(p)
            }
            ExitTarget::AnyPort => {
                !r.flags.contains(RelayFlags::BAD_EXIT)
                    && !r.flags.contains(RelayFlags::MIDDLE_ONLY)
                    && (r.ipv4_policy.allows_some_port() || r.ipv6_policy.allows_some_port())
            }
        }
    }

    fn needs_stable(&self, target: ExitTarget) -> bool {
        matches!(target, ExitTarget::Port(p) | ExitTarget::Datagram(p) if self.config.long_lived_ports.contains(&p))
    }

    /// A 3-hop path `[guard, middle, exit]` for `target`.
    pub fn exit_path<R: Rng + ?Sized>(
        &self,
        rng: &mut R,
        target: ExitTarget,
    ) -> Result<[RelayId; 3], PathError> {
        let need_stable = self.needs_stable(target);
        let exit_pos = match target {
            ExitTarget::Internal => Position::Middle,
            _ => Position::Exit,
        };
        let mut exits: Vec<&Relay> = self
            .netdir
            .relays()
            .filter(|r| self.exit_ok(r, target))
            .collect();
        if exits.is_empty() {
            return Err(PathError::NoExit(target));
        }
        let mut last_err = PathError::NoExit(target);
        for _ in 0..MAX_EXIT_ATTEMPTS {
            let Some(exit) =
                choose_weighted(rng, &exits, |r| self.netdir.relay_weight(r, exit_pos))
            else {
                break;
            };
            match self.guard_and_middle(rng, exit, need_stable) {
                Ok((g, m)) => return Ok([g.id(), m.id(), exit.id()]),
                Err(e) => {
                    last_err = e;
                    exits.retain(|r| r.rsa_id != exit.rsa_id);
                    if exits.is_empty() {
                        break;
                    }
                }
            }
        }
        Err(last_err)
    }

    fn guard_and_middle<R: Rng + ?Sized>(
        &self,
        rng: &mut R,
        exit: &Relay,
        need_stable: bool,
    ) -> Result<(&'a Relay, &'a Relay), PathError> {
        let guard = self.choose_guard(rng, exit, need_stable)?;
        if let Some(set) = self.layer2 {
            let l2: Vec<&Relay> = set
                .iter()
                .filter_map(|id| self.netdir.relay_by_rsa_id(id))
                .filter(|r| {
                    !self.excluded(r)
                        && r.flags
                            .contains(RelayFlags::RUNNING.with(RelayFlags::VALID))
                        && r.rsa_id != exit.rsa_id
                        && r.rsa_id != guard.rsa_id
                })
                .collect();
            let middle =
                choose_weighted(rng, &l2, |r| self.netdir.relay_weight(r, Position::Middle))
                    .ok_or(PathError::NoMiddle)?;
            return Ok((guard, middle));
        }
        let middles: Vec<&Relay> = self
            .netdir
            .relays()
            .filter(|r| {
                (if self.only.middle.is_empty() {
                    self.base_ok(r, need_stable)
                } else {
                    self.only.middle.contains(&r.rsa_id) && self.pinned_ok(r)
                }) && self.compatible(r, exit)
                    && self.compatible(r, guard)
            })
            .collect();
        let middle = choose_weighted(rng, &middles, |r| {
            self.netdir.relay_weight(r, Position::Middle)
        })
        .ok_or(PathError::NoMiddle)?;
        Ok((guard, middle))
    }

    fn choose_guard<R: Rng + ?Sized>(
        &self,
        rng: &mut R,
        exit: &Relay,
        need_stable: bool,
    ) -> Result<&'a Relay, PathError> {
        if !self.only.entry.is_empty() {
            // Pinned entries replace the guard set (tor's EntryNodes).
            let entries: Vec<&Relay> = self
                .netdir
                .relays()
                .filter(|r| {
                    allowed(&self.only.entry, r) && self.pinned_ok(r) && self.compatible(r, exit)
                })
                .collect();
            return choose_weighted(rng, &entries, |r| {
                self.netdir.relay_weight(r, Position::Guard)
            })
            .ok_or(PathError::NoGuard);
        }
        if let Some((gs, now)) = self.guards {
            let id = gs
                .pick_guard(self.netdir, now, |r| {
                    !self.excluded(r) && self.compatible(r, exit)
                })
                .ok_or(PathError::NoGuard)?;
            return self.netdir.relay(&id).ok_or(PathError::NoGuard);
        }
        let guards: Vec<&Relay> = self
            .netdir
            .relays()
            .filter(|r| {
                r.flags.contains(RelayFlags::GUARD)
                    && !r.flags.contains(RelayFlags::MIDDLE_ONLY)
                    && self.base_ok(r, need_stable)
                    && self.compatible(r, exit)
            })
            .collect();
        choose_weighted(rng, &guards, |r| {
            self.netdir.relay_weight(r, Position::Guard)
        })
        .ok_or(PathError::NoGuard)
    }

    /// A relay for a one-hop `BEGIN_DIR` fetch: with a guard set, one of
    /// the first 3 usable primary guards (V2Dir); otherwise a V2Dir relay
    /// drawn by BEGIN_DIR weight.
    pub fn one_hop_dir_path<R: Rng + ?Sized>(&self, rng: &mut R) -> Result<RelayId, PathError> {
        if let Some((gs, now)) = self.guards {
            return gs
                .pick_dir_guard(self.netdir, now, rng)
                .ok_or(PathError::NoDirectory);
        }
        let dirs: Vec<&Relay> = self
            .netdir
            .relays()
            .filter(|r| {
                r.flags.contains(
                    RelayFlags::V2DIR
                        .with(RelayFlags::RUNNING)
                        .with(RelayFlags::VALID),
                )
            })
            .collect();
        choose_weighted(rng, &dirs, |r| {
            self.netdir.relay_weight(r, Position::BeginDir)
        })
        .map(|r| r.id())
        .ok_or(PathError::NoDirectory)
    }
}
