//! Vanguards-lite (proposal 333, on by default in tor since 0.4.7): the
//! second hop of every onion-service circuit is drawn from a small set of
//! "layer 2 guards" kept for one to twelve days, so an adversary who makes
//! a client or service build many circuits (to an introduction point, a
//! rendezvous point, an HSDir) sees the same few second hops and cannot
//! walk from the last hop back to the guard quickly.
//!
//! As in tor: `guard-hs-l2-number` relays (default 4, at most 19), each
//! Stable, Running and Valid, drawn by middle-position bandwidth weight,
//! no two in the same family; each kept for `max(X, Y)` seconds with X and
//! Y uniform in [`guard-hs-l2-lifetime-min`, `guard-hs-l2-lifetime-max`]
//! (defaults one and twelve days, about a week on average); dropped early
//! when it leaves the consensus or loses Stable. The set lives in memory
//! only: a restart draws a new one (tor does not write it to disk either).
//! Paths using it: `guard -> L2 -> last` (a client's rendezvous circuit)
//! or `guard -> L2 -> middle` extended to the target; the L2 hop only has
//! to differ from the other hops (tor applies no family or subnet rule to
//! it, so that small sets never make paths impossible).

use std::collections::BTreeMap;

use rand::Rng;

use crate::RsaId;
use crate::netdir::{NetDir, Position, Relay};
use crate::path::choose_weighted;
use crate::types::RelayFlags;

/// Consensus parameters of the layer 2 set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VanguardParams {
    /// `guard-hs-l2-number`: size of the set (1..=19, default 4).
    pub number: usize,
    /// `guard-hs-l2-lifetime-min`, seconds (default 86400).
    pub lifetime_min: u64,
    /// `guard-hs-l2-lifetime-max`, seconds (default 1036800); never below
    /// the minimum.
    pub lifetime_max: u64,
}

impl Default for VanguardParams {
    fn default() -> Self {
        VanguardParams {
            number: 4,
            lifetime_min: 86_400,
            lifetime_max: 1_036_800,
        }
    }
}

impl VanguardParams {
    /// From a consensus's `params` line, out-of-range values clamped.
    pub fn from_consensus(params: &BTreeMap<String, i32>) -> Self {
        let d = Self::default();
        let get = |k: &str, lo: i64, hi: i64, def: i64| -> i64 {
            params.get(k).map_or(def, |v| i64::from(*v).clamp(lo, hi))
        };
        let number = get("guard-hs-l2-number", 1, 19, d.number as i64);
        let lifetime_min = get(
            "guard-hs-l2-lifetime-min",
            1,
            i64::from(i32::MAX),
            d.lifetime_min as i64,
        );
        let lifetime_max = get(
            "guard-hs-l2-lifetime-max",
            1,
            i64::from(i32::MAX),
            d.lifetime_max as i64,
        );
        VanguardParams {
            number: usize::try_from(number).unwrap_or(d.number),
            lifetime_min: u64::try_from(lifetime_min).unwrap_or(d.lifetime_min),
            lifetime_max: u64::try_from(lifetime_max.max(lifetime_min)).unwrap_or(d.lifetime_max),
        }
    }

    /// A lifetime for a new member: `max(X, Y)`, X and Y uniform in
    /// `[lifetime_min, lifetime_max]`.
    pub fn draw_lifetime<R: Rng + ?Sized>(&self, rng: &mut R) -> u64 {
        let hi = self.lifetime_max.max(self.lifetime_min);
        let x = rng.gen_range(self.lifetime_min..=hi);
        let y = rng.gen_range(self.lifetime_min..=hi);
        x.max(y)
    }
}

/// One member of the set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layer2Guard {
    /// RSA identity.
    pub rsa_id: RsaId,
    /// Unix time after which it is replaced.
    pub expires: u64,
}

/// The layer 2 guard set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Layer2Set {
    guards: Vec<Layer2Guard>,
}

/// Whether `r` may be (or stay) a layer 2 guard.
fn eligible(r: &Relay) -> bool {
    r.flags.contains(
        RelayFlags::RUNNING
            .with(RelayFlags::VALID)
            .with(RelayFlags::STABLE),
    )
}

impl Layer2Set {
    /// A set with these members (state carried over, tests).
    pub fn from_guards(guards: Vec<Layer2Guard>) -> Self {
        Layer2Set { guards }
    }

    /// The members.
    pub fn guards(&self) -> &[Layer2Guard] {
        &self.guards
    }

    /// Their identities.
    pub fn ids(&self) -> Vec<RsaId> {
        self.guards.iter().map(|g| g.rsa_id).collect()
    }

    /// Bring the set up to date at `now` (Unix seconds): drop members that
    /// expired, left the consensus or are no longer eligible, and the
    /// newest beyond `params.number`; then draw new members until the set
    /// is full or no eligible relay outside the members' families is left.
    pub fn maintain<R: Rng + ?Sized>(
        &mut self,
        nd: &NetDir,
        now: u64,
        params: &VanguardParams,
        rng: &mut R,
    ) {
        self.guards
            .retain(|g| g.expires > now && nd.relay_by_rsa_id(&g.rsa_id).is_some_and(eligible));
        self.guards.truncate(params.number);
        while self.guards.len() < params.number {
            let members: Vec<&Relay> = self
                .guards
                .iter()
                .filter_map(|g| nd.relay_by_rsa_id(&g.rsa_id))
                .collect();
            let candidates: Vec<&Relay> = nd
                .relays()
                .filter(|r| {
                    eligible(r)
                        && members
                            .iter()
                            .all(|m| m.rsa_id != r.rsa_id && !m.in_same_family(r))
                })
                .collect();
            let Some(pick) =
                choose_weighted(rng, &candidates, |r| nd.relay_weight(r, Position::Middle))
            else {
                break;
            };
            self.guards.push(Layer2Guard {
                rsa_id: pick.rsa_id,
                expires: now.saturating_add(params.draw_lifetime(rng)),
            });
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn params_defaults_and_clamping() {
        let mut p = BTreeMap::new();
        assert_eq!(
            VanguardParams::from_consensus(&p),
            VanguardParams::default()
        );
        p.insert("guard-hs-l2-number".into(), 40);
        p.insert("guard-hs-l2-lifetime-min".into(), 500);
        p.insert("guard-hs-l2-lifetime-max".into(), 100);
        let v = VanguardParams::from_consensus(&p);
        assert_eq!(v.number, 19);
        assert_eq!((v.lifetime_min, v.lifetime_max), (500, 500));
        p.insert("guard-hs-l2-number".into(), -3);
        assert_eq!(VanguardParams::from_consensus(&p).number, 1);
    }

    #[test]
    fn lifetimes_are_max_of_two_uniform_draws() {
        let p = VanguardParams::default();
        let mut rng = StdRng::seed_from_u64(7);
        let n = 20_000;
        let draws: Vec<u64> = (0..n).map(|_| p.draw_lifetime(&mut rng)).collect();
        assert!(
            draws
                .iter()
                .all(|d| (p.lifetime_min..=p.lifetime_max).contains(d))
        );
        // E[max(X, Y)] = min + 2/3 (max - min): about 7.7 days.
        let mean = draws.iter().sum::<u64>() as f64 / n as f64;
        let want = p.lifetime_min as f64 + 2.0 / 3.0 * (p.lifetime_max - p.lifetime_min) as f64;
        assert!((mean - want).abs() / want < 0.02, "mean {mean} want {want}");
    }
}
