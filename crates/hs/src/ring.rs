//! The HSDir hash ring (rend-spec-v3 §2.2.3 `[HASHRING]`, §2.2.4
//! `[CLIENTFETCH]`, §2.2.5 `[SERVICEUPLOAD]`), as stock tor 0.4.9 computes
//! it (`hs_common.c`, `nodelist.c: node_set_hsdir_index`).
//!
//! Inputs are plain values the caller takes from the consensus: the
//! Ed25519 identities of the relays listed with the `HSDir` flag (and
//! `HSDir=2`), the shared random values (`shared-rand-current-value`,
//! `shared-rand-previous-value`, absent ones replaced by the disaster SRV),
//! the consensus parameters and the [`HsSchedule`]. Nothing here parses a
//! consensus.
//!
//! * `hs_index(replica) = SHA3-256("store-at-idx" | blinded | INT_8(replica)
//!   | INT_8(period_length) | INT_8(period_num))`
//! * `hsdir_index(node) = SHA3-256("node-idx" | ed25519_id | SRV |
//!   INT_8(period_num) | INT_8(period_length))`
//! * for each replica 1..=n_replicas, walk the ring from the first node
//!   whose index is `>= hs_index`, taking `spread` nodes not already taken,
//!   wrapping around, never more than once round.

use sha3::{Digest, Sha3_256};

use crate::time::{HsSchedule, TimeError, clamp_param};

/// Most HSDirs a ring is built from (the public network has ~8000 relays
/// with the flag; anything far above is refused, not truncated silently).
pub const MAX_RING_NODES: usize = 100_000;

/// `hsdir_n_replicas`, `hsdir_spread_fetch`, `hsdir_spread_store`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingParams {
    /// Replicas (default 2, range 1..=16).
    pub n_replicas: u32,
    /// HSDirs per replica a client may fetch from (default 3, 1..=128).
    pub spread_fetch: u32,
    /// HSDirs per replica a service uploads to (default 4, 1..=128).
    pub spread_store: u32,
}

impl Default for RingParams {
    fn default() -> Self {
        Self {
            n_replicas: 2,
            spread_fetch: 3,
            spread_store: 4,
        }
    }
}

impl RingParams {
    /// From the consensus parameters (absent: default; out of range:
    /// clamped, as tor's `networkstatus_get_param` does).
    pub fn from_params(get: impl Fn(&str) -> Option<i32>) -> Self {
        Self {
            n_replicas: clamp_param(get("hsdir_n_replicas"), 2, 1, 16),
            spread_fetch: clamp_param(get("hsdir_spread_fetch"), 3, 1, 128),
            spread_store: clamp_param(get("hsdir_spread_store"), 4, 1, 128),
        }
    }
}

/// `hs_index` of a blinded key for one replica.
pub fn hs_index(
    replica: u64,
    blinded: &[u8; 32],
    period_num: u64,
    period_len_min: u64,
) -> [u8; 32] {
    let mut h = Sha3_256::new();
    h.update(b"store-at-idx");
    h.update(blinded);
    h.update(replica.to_be_bytes());
    h.update(period_len_min.to_be_bytes());
    h.update(period_num.to_be_bytes());
    h.finalize().into()
}

/// `hsdir_index` of a relay.
pub fn hsdir_index(
    ed_id: &[u8; 32],
    srv: &[u8; 32],
    period_num: u64,
    period_len_min: u64,
) -> [u8; 32] {
    let mut h = Sha3_256::new();
    h.update(b"node-idx");
    h.update(ed_id);
    h.update(srv);
    h.update(period_num.to_be_bytes());
    h.update(period_len_min.to_be_bytes());
    h.finalize().into()
}

/// The SRV used when the consensus has none:
/// `SHA3-256("shared-random-disaster" | INT_8(period_length) | INT_8(period_num))`.
pub fn disaster_srv(period_num: u64, period_len_min: u64) -> [u8; 32] {
    let mut h = Sha3_256::new();
    h.update(b"shared-random-disaster");
    h.update(period_len_min.to_be_bytes());
    h.update(period_num.to_be_bytes());
    h.finalize().into()
}

/// The shared random values of a consensus.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SharedRandom {
    /// `shared-rand-current-value`, if present.
    pub current: Option<[u8; 32]>,
    /// `shared-rand-previous-value`, if present.
    pub previous: Option<[u8; 32]>,
}

/// Which ring a lookup uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingKind {
    /// Clients fetching (always the current time period).
    Fetch,
    /// A service uploading its first ("current") descriptor.
    StoreFirst,
    /// A service uploading its second ("next") descriptor.
    StoreSecond,
}

/// The time period and SRV one ring is built with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingSpec {
    /// Time period hashed into the relays' indices.
    pub period: u64,
    /// SRV hashed into the relays' indices.
    pub srv: [u8; 32],
}

/// The three rings of one consensus, chosen as tor's
/// `node_set_hsdir_index` does, plus the time periods of the service's two
/// descriptors (`build_descriptors_for_new_service`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingPlan {
    /// Ring for fetching (and the client's time period in `fetch.period`).
    pub fetch: RingSpec,
    /// Ring for the service's first descriptor.
    pub store_first: RingSpec,
    /// Ring for the service's second descriptor.
    pub store_second: RingSpec,
    /// Time period of the service's first ("current") descriptor.
    pub current_desc_period: u64,
    /// Time period of the service's second ("next") descriptor.
    pub next_desc_period: u64,
}

impl RingPlan {
    /// Plan for the consensus valid from `valid_after`.
    pub fn new(
        schedule: &HsSchedule,
        valid_after: u64,
        srvs: &SharedRandom,
    ) -> Result<Self, TimeError> {
        let len = schedule.period_length_minutes();
        let cur = schedule.period_num(valid_after)?;
        let next = cur.checked_add(1).ok_or(TimeError::Overflow)?;
        let prev = cur.checked_sub(1).ok_or(TimeError::TooEarly)?;
        let current_srv = |tp| srvs.current.unwrap_or_else(|| disaster_srv(tp, len));
        let previous_srv = |tp| srvs.previous.unwrap_or_else(|| disaster_srv(tp, len));
        let between = schedule.between_tp_and_srv(valid_after)?;
        let (fetch_srv, first_tp, second_tp) = if between {
            (current_srv(cur), prev, cur)
        } else {
            (previous_srv(cur), cur, next)
        };
        let fetch = RingSpec {
            period: cur,
            srv: fetch_srv,
        };
        let store_first = if between {
            RingSpec {
                period: first_tp,
                srv: previous_srv(first_tp),
            }
        } else {
            fetch
        };
        let store_second = if between {
            fetch
        } else {
            RingSpec {
                period: second_tp,
                srv: current_srv(second_tp),
            }
        };
        Ok(Self {
            fetch,
            store_first,
            store_second,
            current_desc_period: first_tp,
            next_desc_period: second_tp,
        })
    }

    /// The ring spec of one kind.
    pub fn spec(&self, kind: RingKind) -> RingSpec {
        match kind {
            RingKind::Fetch => self.fetch,
            RingKind::StoreFirst => self.store_first,
            RingKind::StoreSecond => self.store_second,
        }
    }
}

/// Why a ring cannot be built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum RingError {
    /// No relay with the HSDir flag and an Ed25519 identity.
    #[error("no HSDirs")]
    Empty,
    /// More nodes than [`MAX_RING_NODES`].
    #[error("{0} HSDirs is more than the ring accepts")]
    TooMany(usize),
}

/// One ring: relays sorted by their `hsdir_index`. Entries are indices
/// into the slice of identities the ring was built from.
#[derive(Debug, Clone)]
pub struct HashRing {
    sorted: Vec<([u8; 32], usize)>,
    period_len_min: u64,
}

impl HashRing {
    /// Build the ring of `hsdirs` (Ed25519 identities of relays with the
    /// HSDir flag, in any order; duplicates are kept once).
    pub fn build(
        hsdirs: &[[u8; 32]],
        spec: RingSpec,
        period_len_min: u64,
    ) -> Result<Self, RingError> {
        if hsdirs.is_empty() {
            return Err(RingError::Empty);
        }
        if hsdirs.len() > MAX_RING_NODES {
            return Err(RingError::TooMany(hsdirs.len()));
        }
        let mut sorted: Vec<([u8; 32], usize)> = hsdirs
            .iter()
            .enumerate()
            .map(|(i, id)| (hsdir_index(id, &spec.srv, spec.period, period_len_min), i))
            .collect();
        sorted.sort_unstable();
        sorted.dedup_by(|a, b| hsdirs.get(a.1) == hsdirs.get(b.1));
        Ok(Self {
            sorted,
            period_len_min,
        })
    }

    /// Number of relays on the ring.
    pub fn len(&self) -> usize {
        self.sorted.len()
    }

    /// True if the ring is empty (never, once built).
    pub fn is_empty(&self) -> bool {
        self.sorted.is_empty()
    }

    /// The relays responsible for `blinded` in time period `desc_period`:
    /// for each replica, `spread` relays from the first index at or after
    /// `hs_index`, skipping ones already chosen. Returns indices into the
    /// identity slice given to [`HashRing::build`], in selection order.
    pub fn responsible(
        &self,
        blinded: &[u8; 32],
        desc_period: u64,
        n_replicas: u32,
        spread: u32,
    ) -> Vec<usize> {
        let n = self.sorted.len();
        let mut out: Vec<usize> = Vec::new();
        if n == 0 {
            return out;
        }
        for replica in 1..=u64::from(n_replicas) {
            let idx = hs_index(replica, blinded, desc_period, self.period_len_min);
            let start = self.sorted.partition_point(|(k, _)| *k < idx) % n;
            let mut pos = start;
            let mut added = 0u32;
            while added < spread {
                let Some(&(_, node)) = self.sorted.get(pos) else {
                    break;
                };
                if !out.contains(&node) {
                    out.push(node);
                    added += 1;
                }
                pos = (pos + 1) % n;
                if pos == start {
                    break;
                }
            }
        }
        out
    }
}

/// Convenience: the HSDirs responsible for `blinded` of `desc_period` on
/// ring `kind` of this consensus.
pub fn responsible_hsdirs(
    hsdirs: &[[u8; 32]],
    plan: &RingPlan,
    kind: RingKind,
    schedule: &HsSchedule,
    params: &RingParams,
    blinded: &[u8; 32],
    desc_period: u64,
) -> Result<Vec<usize>, RingError> {
    let ring = HashRing::build(hsdirs, plan.spec(kind), schedule.period_length_minutes())?;
    let spread = match kind {
        RingKind::Fetch => params.spread_fetch,
        RingKind::StoreFirst | RingKind::StoreSecond => params.spread_store,
    };
    Ok(ring.responsible(blinded, desc_period, params.n_replicas, spread))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(n: u8) -> Vec<[u8; 32]> {
        (0..n).map(|i| [i; 32]).collect()
    }

    fn sched() -> HsSchedule {
        HsSchedule::from_interval(3600, None, false).expect("s")
    }

    #[test]
    fn c_tor_index_vectors() {
        // test_hs_common.c test_hs_indexes: key 0x42.., period 42, 1440 min.
        assert_eq!(
            hex::encode(hs_index(1, &[0x42; 32], 42, 1440)),
            "37e5cbbd56a22823714f18f1623ece5983a0d64c78495a8cfab854245e5f9a8a"
        );
        assert_eq!(
            hex::encode(hsdir_index(&[0x42; 32], &[0x43; 32], 42, 1440)),
            "db475361014a09965e7e5e4d4a25b8f8d4b8f16cb1d8a7e95eed50249cc1a2d5"
        );
        // test_disaster_srv: SHA3-256("shared-random-disaster" | INT_8(1440) | INT_8(1)).
        let mut h = Sha3_256::new();
        h.update(b"shared-random-disaster\0\0\0\0\0\0\x05\xA0\0\0\0\0\0\0\0\x01");
        let want: [u8; 32] = h.finalize().into();
        assert_eq!(disaster_srv(1, 1440), want);
    }

    #[test]
    fn index_layouts() {
        // The byte layouts, written out.
        let b = [7u8; 32];
        let mut h = Sha3_256::new();
        h.update(b"store-at-idx");
        h.update(b);
        h.update([0, 0, 0, 0, 0, 0, 0, 1]);
        h.update(1440u64.to_be_bytes());
        h.update(19000u64.to_be_bytes());
        let want: [u8; 32] = h.finalize().into();
        assert_eq!(hs_index(1, &b, 19000, 1440), want);
        assert_ne!(hs_index(2, &b, 19000, 1440), want);
        assert_ne!(
            hsdir_index(&b, &[0; 32], 19000, 1440),
            hsdir_index(&b, &[0; 32], 1440, 19000)
        );
        assert_ne!(disaster_srv(1, 1440), disaster_srv(1440, 1));
    }

    #[test]
    fn selection_walks_the_ring_and_skips_duplicates() {
        let nodes = ids(10);
        let spec = RingSpec {
            period: 100,
            srv: [9; 32],
        };
        let ring = HashRing::build(&nodes, spec, 1440).expect("ring");
        let blinded = [3u8; 32];
        let sel = ring.responsible(&blinded, 100, 2, 4);
        assert_eq!(sel.len(), 8);
        let mut d = sel.clone();
        d.sort_unstable();
        d.dedup();
        assert_eq!(d.len(), 8);
        // Replica 1's first choice: the first node at or after hs_index.
        let idx = hs_index(1, &blinded, 100, 1440);
        let mut all: Vec<([u8; 32], usize)> = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (hsdir_index(n, &spec.srv, 100, 1440), i))
            .collect();
        all.sort();
        let first = all.iter().find(|(k, _)| *k >= idx).unwrap_or(&all[0]).1;
        assert_eq!(sel[0], first);
        // Fewer nodes than asked for: every node once, no endless loop.
        let small = HashRing::build(&ids(3), spec, 1440).expect("ring");
        let s = small.responsible(&blinded, 100, 16, 128);
        assert_eq!(s.len(), 3);
        assert_eq!(
            HashRing::build(&[], spec, 1440).err(),
            Some(RingError::Empty)
        );
        // Duplicated identities count once.
        let dup = vec![[1u8; 32], [1u8; 32], [2u8; 32]];
        assert_eq!(HashRing::build(&dup, spec, 1440).expect("r").len(), 2);
    }

    #[test]
    fn plan_follows_tor_segments() {
        let s = sched();
        let srvs = SharedRandom {
            current: Some([1; 32]),
            previous: Some([2; 32]),
        };
        // 2016-04-13 11:00: between SRV and TP (period 16903).
        let p = RingPlan::new(&s, 1_460_545_200, &srvs).expect("plan");
        assert_eq!(
            p.fetch,
            RingSpec {
                period: 16903,
                srv: [2; 32]
            }
        );
        assert_eq!(p.store_first, p.fetch);
        assert_eq!(
            p.store_second,
            RingSpec {
                period: 16904,
                srv: [1; 32]
            }
        );
        assert_eq!((p.current_desc_period, p.next_desc_period), (16903, 16904));
        // 13:00: between TP (16904) and the next SRV.
        let p = RingPlan::new(&s, 1_460_545_200 + 7200, &srvs).expect("plan");
        assert_eq!(
            p.fetch,
            RingSpec {
                period: 16904,
                srv: [1; 32]
            }
        );
        assert_eq!(
            p.store_first,
            RingSpec {
                period: 16903,
                srv: [2; 32]
            }
        );
        assert_eq!(p.store_second, p.fetch);
        assert_eq!((p.current_desc_period, p.next_desc_period), (16903, 16904));
        // No SRVs: the disaster SRV of the ring's own period.
        let p = RingPlan::new(&s, 1_460_545_200, &SharedRandom::default()).expect("plan");
        assert_eq!(p.fetch.srv, disaster_srv(16903, 1440));
        assert_eq!(p.store_second.srv, disaster_srv(16904, 1440));
    }

    #[test]
    fn params_clamp() {
        let p = RingParams::from_params(|k| match k {
            "hsdir_n_replicas" => Some(99),
            "hsdir_spread_store" => Some(0),
            _ => None,
        });
        assert_eq!(
            p,
            RingParams {
                n_replicas: 16,
                spread_fetch: 3,
                spread_store: 1
            }
        );
        assert_eq!(RingParams::from_params(|_| None), RingParams::default());
    }

    #[test]
    fn client_and_service_agree() {
        // A service's first descriptor lands where a client fetches, in the
        // segment where both rings are the same.
        let s = sched();
        let srvs = SharedRandom {
            current: Some([1; 32]),
            previous: Some([2; 32]),
        };
        let plan = RingPlan::new(&s, 1_460_545_200, &srvs).expect("plan");
        let nodes = ids(50);
        let b = [42u8; 32];
        let params = RingParams::default();
        let fetch = responsible_hsdirs(
            &nodes,
            &plan,
            RingKind::Fetch,
            &s,
            &params,
            &b,
            plan.fetch.period,
        )
        .expect("f");
        let store = responsible_hsdirs(
            &nodes,
            &plan,
            RingKind::StoreFirst,
            &s,
            &params,
            &b,
            plan.current_desc_period,
        )
        .expect("s");
        assert_eq!(fetch.len(), 6);
        assert_eq!(store.len(), 8);
        assert!(fetch.iter().all(|f| store.contains(f)));
    }
}
