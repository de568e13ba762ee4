//! The client's view of the network: a verified consensus joined with the
//! microdescriptors it lists.
//!
//! [`NetDir`] keeps every consensus entry; a relay becomes usable for
//! circuits (appears in [`NetDir::relays`]) once its microdescriptor, whose
//! SHA-256 digest must equal the consensus `m` line, has been added.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddrV4, SocketAddrV6};

use crate::consensus::{Consensus, ConsensusRelay, Lifetime};
use crate::microdesc::Microdesc;
use crate::srv::SharedRandom;
use crate::types::{PortPolicy, Protocols, RelayFlags};
use crate::{Ed25519Id, MdDigest, RelayId, RsaId};

/// Default fraction of bandwidth-weighted paths needed before building
/// circuits (path-spec §2.1.0, `PathsNeededToBuildCircuits`).
pub const DEFAULT_PATHS_NEEDED: f64 = 0.6;

/// The consensus `bandwidth-weights` (dir-spec §3.8.3, path-spec §2.2),
/// as integers on the `bwweightscale` scale (normally 10000).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(missing_docs)]
pub struct BandwidthWeights {
    pub wgg: i64,
    pub wgm: i64,
    pub wgd: i64,
    pub wmg: i64,
    pub wmm: i64,
    pub wme: i64,
    pub wmd: i64,
    pub weg: i64,
    pub wem: i64,
    pub wee: i64,
    pub wed: i64,
    pub wgb: i64,
    pub wmb: i64,
    pub web: i64,
    pub wdb: i64,
    /// `bwweightscale`.
    pub scale: i64,
}

impl Default for BandwidthWeights {
    /// Every weight equal to the scale (path-spec: "default value of 10000").
    fn default() -> Self {
        Self::uniform(10_000)
    }
}

/// The position a relay is being chosen for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Position {
    /// Entry guard / first hop.
    Guard,
    /// Middle hop.
    Middle,
    /// Exit hop.
    Exit,
    /// One-hop directory fetch (BEGIN_DIR).
    BeginDir,
}

impl BandwidthWeights {
    fn uniform(scale: i64) -> Self {
        BandwidthWeights {
            wgg: scale,
            wgm: scale,
            wgd: scale,
            wmg: scale,
            wmm: scale,
            wme: scale,
            wmd: scale,
            weg: scale,
            wem: scale,
            wee: scale,
            wed: scale,
            wgb: scale,
            wmb: scale,
            web: scale,
            wdb: scale,
            scale,
        }
    }

    /// From the `bandwidth-weights` map.  A missing or negative value, or a
    /// value above the scale, falls back to the scale.
    pub fn from_map(map: &BTreeMap<String, i32>, scale: i32) -> Self {
        let scale = i64::from(scale.max(1));
        let g = |k: &str| -> i64 {
            match map.get(k) {
                Some(v) if *v >= 0 && i64::from(*v) <= scale => i64::from(*v),
                _ => scale,
            }
        };
        BandwidthWeights {
            wgg: g("Wgg"),
            wgm: g("Wgm"),
            wgd: g("Wgd"),
            wmg: g("Wmg"),
            wmm: g("Wmm"),
            wme: g("Wme"),
            wmd: g("Wmd"),
            weg: g("Weg"),
            wem: g("Wem"),
            wee: g("Wee"),
            wed: g("Wed"),
            wgb: g("Wgb"),
            wmb: g("Wmb"),
            web: g("Web"),
            wdb: g("Wdb"),
            scale,
        }
    }

    /// The weight factor for a relay with `flags` in `pos`, as tor's
    /// `compute_weighted_bandwidths`: "exit" means Exit and not BadExit,
    /// "guard" means the Guard flag; an exit-only relay gets 0 in the guard
    /// position.
    pub fn factor(&self, flags: RelayFlags, pos: Position) -> i64 {
        let is_exit = flags.contains(RelayFlags::EXIT) && !flags.contains(RelayFlags::BAD_EXIT);
        let is_guard = flags.contains(RelayFlags::GUARD);
        let (wg, wm, we, wd) = match pos {
            Position::Guard => (self.wgg, self.wgm, 0, self.wgd),
            Position::Middle => (self.wmg, self.wmm, self.wme, self.wmd),
            Position::Exit => (self.weg, self.wem, self.wee, self.wed),
            Position::BeginDir => (self.wgb, self.wmb, self.web, self.wdb),
        };
        match (is_guard, is_exit) {
            (true, true) => wd,
            (true, false) => wg,
            (false, true) => we,
            (false, false) => wm,
        }
    }

    /// Weighted bandwidth: `bandwidth * factor` (never negative).
    pub fn weight(&self, flags: RelayFlags, bandwidth: u32, pos: Position) -> u64 {
        (u64::from(bandwidth)).saturating_mul(self.factor(flags, pos).max(0) as u64)
    }
}

/// A relay listed in the consensus whose microdescriptor we hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Relay {
    /// Nickname.
    pub nickname: String,
    /// RSA identity fingerprint.
    pub rsa_id: RsaId,
    /// Ed25519 identity (from the microdescriptor; `None` when the
    /// consensus says `NoEdConsensus`).
    pub ed_id: Option<Ed25519Id>,
    /// IPv4 ORPort address.
    pub ipv4: SocketAddrV4,
    /// IPv6 ORPort address, if any.
    pub ipv6: Option<SocketAddrV6>,
    /// DirPort (0 if none).
    pub dir_port: u16,
    /// Consensus flags.
    pub flags: RelayFlags,
    /// Consensus bandwidth weight (kilobytes/s).
    pub weight: u32,
    /// ntor onion key (curve25519).
    pub ntor_onion_key: [u8; 32],
    /// Declared family (RSA fingerprints).
    pub family: Vec<RsaId>,
    /// Family identifiers (`family-ids`).
    pub family_ids: Vec<String>,
    /// IPv4 exit policy summary.
    pub ipv4_policy: PortPolicy,
    /// IPv6 exit policy summary.
    pub ipv6_policy: PortPolicy,
    /// UDP port of onionmix QUIC links, if the relay offers them.
    pub quic_port: Option<u16>,
    /// Subprotocol versions (`pr`).
    pub protocols: Protocols,
    /// Microdescriptor digest.
    pub md_digest: MdDigest,
}

impl Relay {
    /// Join a consensus entry with its microdescriptor.
    pub fn from_parts(rs: &ConsensusRelay, md: &Microdesc) -> Relay {
        Relay {
            nickname: rs.nickname.clone(),
            rsa_id: rs.rsa_id,
            ed_id: if rs.flags.contains(RelayFlags::NO_ED_CONSENSUS) {
                None
            } else {
                Some(md.ed25519_id)
            },
            ipv4: rs.ipv4,
            ipv6: rs.ipv6,
            dir_port: rs.dir_port,
            flags: rs.flags,
            weight: rs.bandwidth,
            ntor_onion_key: md.ntor_onion_key,
            family: md.family.clone(),
            family_ids: md.family_ids.clone(),
            ipv4_policy: md.ipv4_policy.clone(),
            ipv6_policy: md.ipv6_policy.clone(),
            quic_port: md.quic_port,
            protocols: rs.protocols.clone(),
            md_digest: rs.md_digest,
        }
    }

    /// The relay's identity as a [`RelayId`].
    pub fn id(&self) -> RelayId {
        RelayId(self.rsa_id)
    }

    /// True if all of `flags` are set.
    pub fn has_flags(&self, flags: RelayFlags) -> bool {
        self.flags.contains(flags)
    }

    /// Same family: each lists the other in its `family` line (mutual), or
    /// they share a `family-ids` entry.
    pub fn in_same_family(&self, other: &Relay) -> bool {
        if self.rsa_id == other.rsa_id {
            return true;
        }
        let mutual = self.family.contains(&other.rsa_id) && other.family.contains(&self.rsa_id);
        mutual || self.family_ids.iter().any(|f| other.family_ids.contains(f))
    }

    /// Same IPv4 /16 or same IPv6 /32 (path-spec §2.2).
    pub fn in_same_subnet(&self, other: &Relay) -> bool {
        let a = self.ipv4.ip().octets();
        let b = other.ipv4.ip().octets();
        if a[..2] == b[..2] {
            return true;
        }
        match (self.ipv6, other.ipv6) {
            (Some(x), Some(y)) => x.ip().segments()[..2] == y.ip().segments()[..2],
            _ => false,
        }
    }

    /// True if the relay's exit policy summary accepts `port` on IPv4
    /// (or on IPv6 when `ipv6`).
    pub fn allows_exit_port(&self, port: u16, ipv6: bool) -> bool {
        if ipv6 {
            self.ipv6_policy.allows_port(port)
        } else {
            self.ipv4_policy.allows_port(port)
        }
    }

    /// The address to use for a direct connection (IPv4 ORPort).
    pub fn or_addr(&self) -> IpAddr {
        IpAddr::V4(*self.ipv4.ip())
    }
}

/// Consensus + microdescriptors.
#[derive(Debug, Clone)]
pub struct NetDir {
    consensus: Consensus,
    /// Parallel to `consensus.relays()`.
    relays: Vec<Option<Relay>>,
    by_rsa: HashMap<RsaId, usize>,
    by_md: HashMap<MdDigest, Vec<usize>>,
    mds: HashMap<MdDigest, Microdesc>,
    weights: BandwidthWeights,
}

impl NetDir {
    /// A directory from a verified consensus, with no microdescriptors yet.
    pub fn new(consensus: Consensus) -> NetDir {
        let n = consensus.relays().len();
        let mut by_rsa = HashMap::with_capacity(n);
        let mut by_md: HashMap<MdDigest, Vec<usize>> = HashMap::with_capacity(n);
        for (i, r) in consensus.relays().iter().enumerate() {
            // First entry wins if a (malformed) consensus repeats an identity.
            by_rsa.entry(r.rsa_id).or_insert(i);
            by_md.entry(r.md_digest).or_default().push(i);
        }
        let weights = consensus.bandwidth_weights();
        NetDir {
            consensus,
            relays: vec![None; n],
            by_rsa,
            by_md,
            mds: HashMap::new(),
            weights,
        }
    }

    /// A synthetic directory from complete relays (tests, simulations):
    /// builds the consensus entries and microdescriptors they imply.
    pub fn from_relays(
        lifetime: Lifetime,
        params: BTreeMap<String, i32>,
        bandwidth_weights: BTreeMap<String, i32>,
        relays: Vec<Relay>,
    ) -> NetDir {
        let mut entries = Vec::with_capacity(relays.len());
        let mut mds = Vec::with_capacity(relays.len());
        for r in &relays {
            entries.push(ConsensusRelay {
                nickname: r.nickname.clone(),
                rsa_id: r.rsa_id,
                md_digest: r.md_digest,
                ipv4: r.ipv4,
                ipv6: r.ipv6,
                dir_port: r.dir_port,
                flags: r.flags,
                bandwidth: r.weight,
                measured: true,
                protocols: r.protocols.clone(),
                version: None,
            });
            mds.push(Microdesc {
                digest: r.md_digest,
                ntor_onion_key: r.ntor_onion_key,
                ed25519_id: r.ed_id.unwrap_or([0; 32]),
                family: r.family.clone(),
                family_ids: r.family_ids.clone(),
                ipv4_policy: r.ipv4_policy.clone(),
                ipv6_policy: r.ipv6_policy.clone(),
                quic_port: r.quic_port,
            });
        }
        let consensus = Consensus::from_parts(lifetime, params, bandwidth_weights, entries);
        let mut nd = NetDir::new(consensus);
        nd.add_microdescs(mds);
        // Keep the exact Relay values given (e.g. ed_id None).
        for (i, r) in relays.into_iter().enumerate() {
            if let Some(slot) = nd.relays.get_mut(i) {
                *slot = Some(r);
            }
        }
        nd
    }

    /// A directory for a new consensus that keeps every microdescriptor of
    /// `self` still listed (the client's microdescriptor cache).
    pub fn with_new_consensus(&self, consensus: Consensus) -> NetDir {
        let mut nd = NetDir::new(consensus);
        nd.add_microdescs(self.mds.values().cloned());
        nd
    }

    /// Add microdescriptors; each is kept only if its digest is listed in
    /// the consensus (others are discarded).  Returns how many were new and
    /// listed.
    pub fn add_microdescs(&mut self, mds: impl IntoIterator<Item = Microdesc>) -> usize {
        let mut added = 0;
        for md in mds {
            let Some(idxs) = self.by_md.get(&md.digest) else {
                tracing::debug!("discarding microdescriptor not listed in the consensus");
                continue;
            };
            if self.mds.contains_key(&md.digest) {
                continue;
            }
            for &i in idxs {
                if let Some(rs) = self.consensus.relays().get(i) {
                    self.relays[i] = Some(Relay::from_parts(rs, &md));
                }
            }
            self.mds.insert(md.digest, md);
            added += 1;
        }
        added
    }

    /// Digests listed in the consensus whose microdescriptor we lack, in
    /// consensus order (feed to `DirRequest::microdesc_batches`).
    pub fn missing_microdescs(&self) -> Vec<MdDigest> {
        let mut seen = std::collections::HashSet::new();
        self.consensus
            .relays()
            .iter()
            .map(|r| r.md_digest)
            .filter(|d| !self.mds.contains_key(d) && seen.insert(*d))
            .collect()
    }

    /// The microdescriptors held (to cache them across restarts).
    pub fn microdescs(&self) -> impl Iterator<Item = &Microdesc> {
        self.mds.values()
    }

    /// The underlying consensus.
    pub fn consensus(&self) -> &Consensus {
        &self.consensus
    }

    /// Consensus lifetime.
    pub fn lifetime(&self) -> Lifetime {
        self.consensus.lifetime()
    }

    /// Network parameters.
    pub fn params(&self) -> &BTreeMap<String, i32> {
        self.consensus.params()
    }

    /// Bandwidth weights in force.
    pub fn weights(&self) -> &BandwidthWeights {
        &self.weights
    }

    /// Relays usable for circuits (listed and with a microdescriptor).
    pub fn relays(&self) -> impl Iterator<Item = &Relay> {
        self.relays.iter().flatten()
    }

    /// The consensus's current shared random value (`None`: the
    /// authorities agreed on none; onion-service code then uses
    /// [`crate::srv::disaster_srv`]).
    pub fn shared_rand_current(&self) -> Option<&SharedRandom> {
        self.consensus.shared_rand_current()
    }

    /// The consensus's previous shared random value.
    pub fn shared_rand_previous(&self) -> Option<&SharedRandom> {
        self.consensus.shared_rand_previous()
    }

    /// The relays that belong on the onion-service directory hash ring
    /// (rend-spec-v3 §2.2.3, tor's `hs_get_responsible_hsdirs`): the
    /// consensus gives them `HSDir`, their `pr` line has `HSDir=2`, and we
    /// hold their microdescriptor, hence their Ed25519 identity (not
    /// disowned by `NoEdConsensus`). In consensus order; the ring math
    /// sorts by its own index.
    pub fn hsdirs(&self) -> impl Iterator<Item = (&Relay, &Ed25519Id)> {
        self.relays().filter_map(|r| {
            let ed = r.ed_id.as_ref()?;
            (r.flags.contains(RelayFlags::HSDIR) && r.protocols.supports("HSDir", 2))
                .then_some((r, ed))
        })
    }

    /// Every consensus entry, with or without a microdescriptor.
    pub fn listed(&self) -> &[ConsensusRelay] {
        self.consensus.relays()
    }

    /// A usable relay by RSA identity.
    pub fn relay_by_rsa_id(&self, id: &RsaId) -> Option<&Relay> {
        self.by_rsa
            .get(id)
            .and_then(|&i| self.relays.get(i))
            .and_then(|r| r.as_ref())
    }

    /// A usable relay by [`RelayId`].
    pub fn relay(&self, id: &RelayId) -> Option<&Relay> {
        self.relay_by_rsa_id(&id.0)
    }

    /// A consensus entry by RSA identity (even without microdescriptor).
    pub fn listed_by_rsa_id(&self, id: &RsaId) -> Option<&ConsensusRelay> {
        self.by_rsa
            .get(id)
            .and_then(|&i| self.consensus.relays().get(i))
    }

    /// Weighted bandwidth of a relay for a position.
    pub fn relay_weight(&self, relay: &Relay, pos: Position) -> u64 {
        self.weights.weight(relay.flags, relay.weight, pos)
    }

    /// The fraction of bandwidth-weighted paths we could build with the
    /// microdescriptors we hold (path-spec §2.1.0): the product of the
    /// guard, middle and exit fractions.  A class with zero total weight is
    /// counted by number of relays instead; with no Exit-flagged relays the
    /// exit fraction is the middle fraction.
    pub fn usable_fraction(&self) -> f64 {
        let entries: Vec<(&ConsensusRelay, bool)> = self
            .consensus
            .relays()
            .iter()
            .zip(self.relays.iter())
            .filter(|(rs, _)| {
                rs.flags
                    .contains(RelayFlags::RUNNING.with(RelayFlags::VALID))
            })
            .map(|(rs, r)| (rs, r.is_some()))
            .collect();
        let frac = |pos: Position, filter: &dyn Fn(&ConsensusRelay) -> bool| -> Option<f64> {
            let mut total: u128 = 0;
            let mut have: u128 = 0;
            let mut n_total = 0u64;
            let mut n_have = 0u64;
            for (rs, present) in &entries {
                if !filter(rs) {
                    continue;
                }
                let w = u128::from(self.weights.weight(rs.flags, rs.bandwidth, pos));
                total += w;
                n_total += 1;
                if *present {
                    have += w;
                    n_have += 1;
                }
            }
            if n_total == 0 {
                None
            } else if total == 0 {
                Some(n_have as f64 / n_total as f64)
            } else {
                Some(have as f64 / total as f64)
            }
        };
        let g = frac(Position::Guard, &|rs| rs.flags.contains(RelayFlags::GUARD)).unwrap_or(0.0);
        let m = frac(Position::Middle, &|_| true).unwrap_or(0.0);
        let e = frac(Position::Exit, &|rs| {
            rs.flags.contains(RelayFlags::EXIT) && !rs.flags.contains(RelayFlags::BAD_EXIT)
        })
        .unwrap_or(m);
        g * m * e
    }

    /// The threshold in force: `configured` (torrc
    /// `PathsNeededToBuildCircuits`) if given, else the consensus parameter
    /// `min_paths_for_circs_pct`, else 0.6.  Clamped to [0.25, 0.95] as tor does.
    pub fn paths_needed(&self, configured: Option<f64>) -> f64 {
        let v = match configured {
            Some(f) if f.is_finite() => f,
            _ => self
                .consensus
                .params()
                .get("min_paths_for_circs_pct")
                .map(|p| f64::from(*p) / 100.0)
                .unwrap_or(DEFAULT_PATHS_NEEDED),
        };
        v.clamp(0.25, 0.95)
    }

    /// tor's "enough directory info to build circuits".
    pub fn has_enough_dir_info(&self, configured: Option<f64>) -> bool {
        self.usable_fraction() >= self.paths_needed(configured)
    }
}
