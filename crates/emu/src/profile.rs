//! Link profiles (what one directed link does to packets) and the topology
//! (which nodes exist, their addresses, and which profile applies where).
//!
//! Everything here is plain data with serde (TOML) and validation; nothing
//! touches the system.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

/// Largest number of nodes a topology may have (namespaces are not free, and
/// the per-pair link table grows with the square of this).
pub const MAX_NODES: usize = 1000;
/// Largest node name (it becomes part of a namespace name).
pub const MAX_NODE_NAME: usize = 32;
/// Largest configurable one-way delay, jitter or reorder extra delay.
pub const MAX_DELAY_MS: f64 = 10_000.0;
/// Largest configurable queue (bytes).
pub const MAX_QUEUE_BYTES: u64 = 1 << 30;
/// Largest configurable rate (Mbit/s).
pub const MAX_RATE_MBIT: f64 = 100_000.0;

/// Distribution of the jitter added to the one-way delay. Both are bounded:
/// a sample never exceeds `jitter_ms` in either direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum JitterDist {
    /// Uniform in [-jitter, +jitter].
    #[default]
    Uniform,
    /// Normal with sigma = jitter/2, truncated (resampled) to [-jitter, +jitter].
    Normal,
}

/// Gilbert-Elliott two-state burst loss model. The state changes before each
/// packet (Good->Bad with probability `p`, Bad->Good with `r`), then the
/// packet is lost with the loss probability of the state it is in.
/// Mean loss = (r*loss_good + p*loss_bad)/(p+r); mean burst length in the bad
/// state = 1/r packets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GilbertElliott {
    /// P(Good -> Bad) per packet.
    pub p: f64,
    /// P(Bad -> Good) per packet.
    pub r: f64,
    /// Loss probability in the Good state (1-k in the literature). Default 0.
    #[serde(default)]
    pub loss_good: f64,
    /// Loss probability in the Bad state (1-h in the literature). Default 1.
    #[serde(default = "one")]
    pub loss_bad: f64,
}

fn one() -> f64 {
    1.0
}

impl GilbertElliott {
    /// Long-run mean loss rate of the model.
    pub fn mean_loss(&self) -> f64 {
        if self.p + self.r <= 0.0 {
            return self.loss_good;
        }
        (self.r * self.loss_good + self.p * self.loss_bad) / (self.p + self.r)
    }
}

/// Optional reordering: with `probability`, a packet is held back an extra
/// `extra_delay_ms`, and packets behind it may overtake it. Without this
/// section a link never reorders.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reorder {
    pub probability: f64,
    pub extra_delay_ms: f64,
}

/// What one directed link does to the packets that cross it.
///
/// Order of operations for each packet: loss (random or Gilbert-Elliott) ->
/// token bucket with a drop-tail queue limited in bytes -> one-way delay plus
/// bounded jitter (never reordering) -> optional reordering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct LinkProfile {
    /// One-way propagation delay in milliseconds.
    pub delay_ms: f64,
    /// Jitter bound in milliseconds (<= delay_ms).
    pub jitter_ms: f64,
    /// Shape of the jitter distribution.
    pub jitter_dist: JitterDist,
    /// Independent random loss probability per packet, in [0, 1).
    pub loss: f64,
    /// Burst loss model (exclusive with `loss`).
    pub gilbert_elliott: Option<GilbertElliott>,
    /// Bandwidth in Mbit/s (10^6 bit/s of IP packet bytes); None = unlimited.
    pub rate_mbit: Option<f64>,
    /// Token bucket depth in bytes (default: 3000, two full-size packets).
    pub burst_bytes: Option<u32>,
    /// Drop-tail queue limit in bytes in front of the token bucket (default:
    /// 100 ms worth of `rate_mbit`, at least 32 KiB).
    pub queue_bytes: Option<u64>,
    /// Optional reordering.
    pub reorder: Option<Reorder>,
}

/// Default token bucket depth.
pub const DEFAULT_BURST_BYTES: u32 = 3000;

/// A validation error in a profile or topology, with the place it occurred.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("{place}: {field} must be {expected}, got {got}")]
    OutOfRange {
        place: String,
        field: &'static str,
        expected: &'static str,
        got: String,
    },
    #[error("{place}: {msg}")]
    Invalid { place: String, msg: String },
    #[error("unknown profile name `{name}` (known: {known})")]
    UnknownProfile { name: String, known: String },
    #[error("unknown node `{0}` in a pair override")]
    UnknownNode(String),
    #[error("bad subnet `{0}`: expected a.b.c.d/len with len in 8..=30")]
    BadSubnet(String),
    #[error("TOML: {0}")]
    Toml(String),
}

impl ConfigError {
    fn invalid(place: &str, msg: impl Into<String>) -> Self {
        ConfigError::Invalid {
            place: place.to_string(),
            msg: msg.into(),
        }
    }
}

fn check_range(
    place: &str,
    field: &'static str,
    v: f64,
    lo: f64,
    hi: f64,
    hi_inclusive: bool,
    expected: &'static str,
) -> Result<(), ConfigError> {
    let ok = v.is_finite() && v >= lo && if hi_inclusive { v <= hi } else { v < hi };
    if ok {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            place: place.to_string(),
            field,
            expected,
            got: v.to_string(),
        })
    }
}

impl LinkProfile {
    /// A profile that only delays.
    pub fn delay(ms: f64) -> Self {
        LinkProfile {
            delay_ms: ms,
            ..Default::default()
        }
    }

    /// True if the profile changes nothing.
    pub fn is_transparent(&self) -> bool {
        self.delay_ms == 0.0
            && self.jitter_ms == 0.0
            && self.loss == 0.0
            && self.gilbert_elliott.is_none()
            && self.rate_mbit.is_none()
            && self.reorder.is_none()
    }

    /// Effective queue limit in bytes (only meaningful with a rate).
    pub fn effective_queue_bytes(&self) -> u64 {
        match (self.queue_bytes, self.rate_mbit) {
            (Some(q), _) => q,
            (None, Some(r)) => ((r * 1e6 / 8.0 * 0.100) as u64).max(32 * 1024),
            (None, None) => 0,
        }
    }

    /// Effective token bucket depth in bytes.
    pub fn effective_burst_bytes(&self) -> u32 {
        self.burst_bytes.unwrap_or(DEFAULT_BURST_BYTES)
    }

    /// Check every field; `place` names the profile in the error.
    pub fn validate(&self, place: &str) -> Result<(), ConfigError> {
        check_range(
            place,
            "delay_ms",
            self.delay_ms,
            0.0,
            MAX_DELAY_MS,
            true,
            "in [0, 10000]",
        )?;
        check_range(
            place,
            "jitter_ms",
            self.jitter_ms,
            0.0,
            MAX_DELAY_MS,
            true,
            "in [0, 10000]",
        )?;
        if self.jitter_ms > self.delay_ms {
            return Err(ConfigError::invalid(
                place,
                format!(
                    "jitter_ms ({}) must not exceed delay_ms ({}): the delay would go negative",
                    self.jitter_ms, self.delay_ms
                ),
            ));
        }
        check_range(
            place,
            "loss",
            self.loss,
            0.0,
            1.0,
            false,
            "a probability in [0, 1)",
        )?;
        if let Some(ge) = &self.gilbert_elliott {
            if self.loss != 0.0 {
                return Err(ConfigError::invalid(
                    place,
                    "set either `loss` or `gilbert_elliott`, not both",
                ));
            }
            check_range(
                place,
                "gilbert_elliott.p",
                ge.p,
                0.0,
                1.0,
                true,
                "a probability in [0, 1]",
            )?;
            check_range(
                place,
                "gilbert_elliott.r",
                ge.r,
                0.0,
                1.0,
                true,
                "a probability in [0, 1]",
            )?;
            check_range(
                place,
                "gilbert_elliott.loss_good",
                ge.loss_good,
                0.0,
                1.0,
                true,
                "a probability in [0, 1]",
            )?;
            check_range(
                place,
                "gilbert_elliott.loss_bad",
                ge.loss_bad,
                0.0,
                1.0,
                true,
                "a probability in [0, 1]",
            )?;
            if ge.p + ge.r <= 0.0 {
                return Err(ConfigError::invalid(
                    place,
                    "gilbert_elliott: p + r must be > 0 (otherwise the chain never moves)",
                ));
            }
            if ge.mean_loss() >= 1.0 {
                return Err(ConfigError::invalid(
                    place,
                    "gilbert_elliott: mean loss must be < 1",
                ));
            }
        }
        if let Some(r) = self.rate_mbit {
            check_range(
                place,
                "rate_mbit",
                r,
                0.001,
                MAX_RATE_MBIT,
                true,
                "in [0.001, 100000]",
            )?;
        }
        if let Some(b) = self.burst_bytes
            && !(1600..=(64 << 20)).contains(&b)
        {
            return Err(ConfigError::OutOfRange {
                place: place.to_string(),
                field: "burst_bytes",
                expected: "in [1600, 64 MiB] (at least one full-size packet)",
                got: b.to_string(),
            });
        }
        if let Some(q) = self.queue_bytes
            && !(1600..=MAX_QUEUE_BYTES).contains(&q)
        {
            return Err(ConfigError::OutOfRange {
                place: place.to_string(),
                field: "queue_bytes",
                expected: "in [1600, 1 GiB] (at least one full-size packet)",
                got: q.to_string(),
            });
        }
        if (self.burst_bytes.is_some() || self.queue_bytes.is_some()) && self.rate_mbit.is_none() {
            return Err(ConfigError::invalid(
                place,
                "burst_bytes/queue_bytes need rate_mbit (a queue without a rate never fills)",
            ));
        }
        if let Some(ro) = &self.reorder {
            check_range(
                place,
                "reorder.probability",
                ro.probability,
                0.0,
                1.0,
                true,
                "a probability in [0, 1]",
            )?;
            check_range(
                place,
                "reorder.extra_delay_ms",
                ro.extra_delay_ms,
                0.0,
                MAX_DELAY_MS,
                true,
                "in [0, 10000]",
            )?;
        }
        Ok(())
    }
}

/// Built-in named profiles. Values and their sources are documented in
/// `docs/emulator.md` ("Named profiles"); one-way values per direction.
pub fn named_profile(name: &str) -> Option<LinkProfile> {
    let p = match name {
        // No impairment at all.
        "none" | "loopback" => LinkProfile::default(),
        // Switched gigabit Ethernet LAN.
        "lan" => LinkProfile {
            delay_ms: 0.25,
            rate_mbit: Some(1000.0),
            queue_bytes: Some(1_000_000),
            ..Default::default()
        },
        // Home Wi-Fi hop (client to access point), 802.11ac class.
        "wifi" => LinkProfile {
            delay_ms: 3.0,
            jitter_ms: 2.0,
            jitter_dist: JitterDist::Normal,
            loss: 0.001,
            rate_mbit: Some(100.0),
            queue_bytes: Some(250_000),
            ..Default::default()
        },
        // Busy Wi-Fi (many stations, contention), per Sui et al. 2016.
        "wifi-busy" => LinkProfile {
            delay_ms: 10.0,
            jitter_ms: 10.0,
            jitter_dist: JitterDist::Normal,
            loss: 0.01,
            rate_mbit: Some(20.0),
            queue_bytes: Some(250_000),
            ..Default::default()
        },
        // Home fixed broadband access (cable/fibre), asymmetric.
        "broadband-down" => LinkProfile {
            delay_ms: 7.5,
            jitter_ms: 1.0,
            loss: 0.001,
            rate_mbit: Some(100.0),
            queue_bytes: Some(500_000),
            ..Default::default()
        },
        "broadband-up" => LinkProfile {
            delay_ms: 7.5,
            jitter_ms: 1.0,
            loss: 0.001,
            rate_mbit: Some(20.0),
            queue_bytes: Some(250_000),
            ..Default::default()
        },
        // 4G/LTE mobile access, asymmetric.
        "4g-down" => LinkProfile {
            delay_ms: 25.0,
            jitter_ms: 8.0,
            jitter_dist: JitterDist::Normal,
            loss: 0.005,
            rate_mbit: Some(20.0),
            queue_bytes: Some(250_000),
            ..Default::default()
        },
        "4g-up" => LinkProfile {
            delay_ms: 25.0,
            jitter_ms: 8.0,
            jitter_dist: JitterDist::Normal,
            loss: 0.005,
            rate_mbit: Some(10.0),
            queue_bytes: Some(125_000),
            ..Default::default()
        },
        // Same continent, between data centres (e.g. Frankfurt-Amsterdam).
        "continental" => LinkProfile {
            delay_ms: 10.0,
            jitter_ms: 0.5,
            ..Default::default()
        },
        // Transatlantic (e.g. New York-London).
        "transatlantic" => LinkProfile {
            delay_ms: 37.5,
            jitter_ms: 1.0,
            ..Default::default()
        },
        // Intercontinental long haul (e.g. Europe-East Asia).
        "intercontinental" => LinkProfile {
            delay_ms: 100.0,
            jitter_ms: 2.0,
            loss: 0.001,
            ..Default::default()
        },
        _ => return None,
    };
    Some(p)
}

/// Names accepted by [`named_profile`].
pub const NAMED_PROFILES: &[&str] = &[
    "none",
    "loopback",
    "lan",
    "wifi",
    "wifi-busy",
    "broadband-down",
    "broadband-up",
    "4g-down",
    "4g-up",
    "continental",
    "transatlantic",
    "intercontinental",
];

/// A profile given by name (built-in or from `[profiles]`) or inline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ProfileRef {
    Named(String),
    Inline(LinkProfile),
}

impl Default for ProfileRef {
    fn default() -> Self {
        ProfileRef::Named("none".to_string())
    }
}

impl From<LinkProfile> for ProfileRef {
    fn from(p: LinkProfile) -> Self {
        ProfileRef::Inline(p)
    }
}

/// An IPv4 subnet such as 10.77.0.0/16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subnet {
    pub network: Ipv4Addr,
    pub prefix: u8,
}

impl Subnet {
    pub fn mask(&self) -> u32 {
        if self.prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(self.prefix))
        }
    }
    pub fn contains(&self, a: Ipv4Addr) -> bool {
        (u32::from(a) & self.mask()) == u32::from(self.network)
    }
    pub fn overlaps(&self, other: &Subnet) -> bool {
        let m = self.mask() & other.mask();
        (u32::from(self.network) & m) == (u32::from(other.network) & m)
    }
    /// Number of usable host addresses (excluding network and broadcast).
    pub fn host_count(&self) -> u32 {
        (1u32 << (32 - u32::from(self.prefix))) - 2
    }
    /// The n-th address (1-based offset from the network address).
    pub fn nth(&self, n: u32) -> Option<Ipv4Addr> {
        if n == 0 || n > self.host_count() {
            return None;
        }
        Some(Ipv4Addr::from(u32::from(self.network) + n))
    }
    fn offset_of(&self, a: Ipv4Addr) -> u32 {
        u32::from(a) - u32::from(self.network)
    }
}

impl fmt::Display for Subnet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl FromStr for Subnet {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        let bad = || ConfigError::BadSubnet(s.to_string());
        let (a, p) = s.split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = a.trim().parse().map_err(|_| bad())?;
        let prefix: u8 = p.trim().parse().map_err(|_| bad())?;
        if !(8..=30).contains(&prefix) {
            return Err(bad());
        }
        let sn = Subnet {
            network: addr,
            prefix,
        };
        if u32::from(addr) & !sn.mask() != 0 {
            return Err(bad());
        }
        Ok(sn)
    }
}

impl Serialize for Subnet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Subnet {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

fn default_subnet() -> Subnet {
    Subnet {
        network: Ipv4Addr::new(10, 77, 0, 0),
        prefix: 16,
    }
}

/// One node of the emulated network.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Node name: [a-z0-9_-], 1..=32 characters, unique.
    pub name: String,
    /// Address inside the subnet; default: assigned in order from .2 on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<Ipv4Addr>,
    /// Access link for everything this node sends (shared by all its flows).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uplink: Option<ProfileRef>,
    /// Access link for everything this node receives.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub downlink: Option<ProfileRef>,
}

impl NodeSpec {
    pub fn new(name: impl Into<String>) -> Self {
        NodeSpec {
            name: name.into(),
            address: None,
            uplink: None,
            downlink: None,
        }
    }
}

/// A per-pair override of the default (core) link profile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PairOverride {
    pub from: String,
    pub to: String,
    pub profile: ProfileRef,
    /// Also apply to `to -> from` (default true).
    #[serde(default = "yes")]
    pub symmetric: bool,
}

fn yes() -> bool {
    true
}

/// The emulated network: nodes, addresses, and which profile applies to
/// each packet. A packet from A to B crosses, in order: A's uplink (if any),
/// the A->B core link (pair override, else `default`), B's downlink (if any).
/// The host endpoint (the root namespace) is never impaired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Topology {
    /// Seed for every random choice (loss, jitter, reordering).
    #[serde(default)]
    pub seed: u64,
    /// Address space; the host endpoint gets the first address.
    #[serde(default = "default_subnet")]
    pub subnet: Subnet,
    /// Core link profile between any two nodes.
    #[serde(default)]
    pub default: ProfileRef,
    /// User-defined named profiles (may shadow nothing built in).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub profiles: BTreeMap<String, LinkProfile>,
    #[serde(default)]
    pub nodes: Vec<NodeSpec>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pairs: Vec<PairOverride>,
}

impl Default for Topology {
    fn default() -> Self {
        Topology {
            seed: 0,
            subnet: default_subnet(),
            default: ProfileRef::default(),
            profiles: BTreeMap::new(),
            nodes: Vec::new(),
            pairs: Vec::new(),
        }
    }
}

/// Check a node name for use in namespace and file names.
pub fn validate_node_name(name: &str) -> Result<(), ConfigError> {
    let ok_chars = name
        .chars()
        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if name.is_empty() || name.len() > MAX_NODE_NAME || !ok_chars {
        return Err(ConfigError::invalid(
            &format!("node `{name}`"),
            "name must be 1..=32 characters of [a-z0-9_-]",
        ));
    }
    if name == "host" {
        return Err(ConfigError::invalid(
            "node `host`",
            "`host` is reserved for the root-namespace endpoint",
        ));
    }
    Ok(())
}

/// A node after address assignment and profile resolution.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedNode {
    pub name: String,
    pub address: Ipv4Addr,
    pub uplink: Option<LinkProfile>,
    pub downlink: Option<LinkProfile>,
}

/// A validated topology with every profile reference resolved.
#[derive(Debug, Clone, PartialEq)]
pub struct Resolved {
    pub seed: u64,
    pub subnet: Subnet,
    pub host_address: Ipv4Addr,
    pub default: LinkProfile,
    pub nodes: Vec<ResolvedNode>,
    /// (from index, to index) -> profile.
    pub pairs: BTreeMap<(usize, usize), LinkProfile>,
}

impl Resolved {
    pub fn node_index(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.name == name)
    }
    /// Core profile for the directed pair (override or default).
    pub fn core_profile(&self, from: usize, to: usize) -> &LinkProfile {
        self.pairs.get(&(from, to)).unwrap_or(&self.default)
    }
}

impl Topology {
    /// Parse from TOML text.
    pub fn from_toml(s: &str) -> Result<Self, ConfigError> {
        toml::from_str(s).map_err(|e| ConfigError::Toml(e.to_string()))
    }

    /// A topology with the given nodes, all connected by `default`.
    pub fn uniform(names: &[&str], default: LinkProfile, seed: u64) -> Self {
        Topology {
            seed,
            default: ProfileRef::Inline(default),
            nodes: names.iter().map(|n| NodeSpec::new(*n)).collect(),
            ..Default::default()
        }
    }

    fn lookup(&self, r: &ProfileRef, place: &str) -> Result<LinkProfile, ConfigError> {
        let p = match r {
            ProfileRef::Inline(p) => p.clone(),
            ProfileRef::Named(n) => match self.profiles.get(n) {
                Some(p) => p.clone(),
                None => named_profile(n).ok_or_else(|| {
                    let mut known: Vec<String> =
                        NAMED_PROFILES.iter().map(|s| s.to_string()).collect();
                    known.extend(self.profiles.keys().cloned());
                    ConfigError::UnknownProfile {
                        name: n.clone(),
                        known: known.join(", "),
                    }
                })?,
            },
        };
        p.validate(place)?;
        Ok(p)
    }

    /// Validate everything and resolve names and addresses.
    pub fn resolve(&self) -> Result<Resolved, ConfigError> {
        for (name, p) in &self.profiles {
            p.validate(&format!("profile `{name}`"))?;
        }
        if self.nodes.len() > MAX_NODES {
            return Err(ConfigError::invalid(
                "topology",
                format!("at most {MAX_NODES} nodes, got {}", self.nodes.len()),
            ));
        }
        let subnet = self.subnet;
        let host_address = subnet
            .nth(1)
            .ok_or(ConfigError::BadSubnet(subnet.to_string()))?;
        let default = self.lookup(&self.default, "default profile")?;
        let mut names = HashSet::new();
        let mut used: HashSet<Ipv4Addr> = HashSet::new();
        used.insert(host_address);
        // Explicit addresses first, so automatic ones avoid them.
        for n in &self.nodes {
            validate_node_name(&n.name)?;
            if !names.insert(n.name.as_str()) {
                return Err(ConfigError::invalid(
                    &format!("node `{}`", n.name),
                    "duplicate node name",
                ));
            }
            if let Some(a) = n.address {
                let off_ok = subnet.contains(a) && {
                    let off = subnet.offset_of(a);
                    off >= 2 && off <= subnet.host_count()
                };
                if !off_ok {
                    return Err(ConfigError::invalid(
                        &format!("node `{}`", n.name),
                        format!(
                            "address {a} must be inside {subnet}, not its network, broadcast or first (host) address"
                        ),
                    ));
                }
                if !used.insert(a) {
                    return Err(ConfigError::invalid(
                        &format!("node `{}`", n.name),
                        format!("address {a} used twice"),
                    ));
                }
            }
        }
        let mut next = 2u32;
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for n in &self.nodes {
            let address = match n.address {
                Some(a) => a,
                None => loop {
                    let a = subnet.nth(next).ok_or_else(|| {
                        ConfigError::invalid(
                            "topology",
                            format!("subnet {subnet} too small for {} nodes", self.nodes.len()),
                        )
                    })?;
                    next += 1;
                    if used.insert(a) {
                        break a;
                    }
                },
            };
            let uplink = match &n.uplink {
                Some(r) => Some(self.lookup(r, &format!("node `{}` uplink", n.name))?),
                None => None,
            };
            let downlink = match &n.downlink {
                Some(r) => Some(self.lookup(r, &format!("node `{}` downlink", n.name))?),
                None => None,
            };
            nodes.push(ResolvedNode {
                name: n.name.clone(),
                address,
                uplink,
                downlink,
            });
        }
        let idx = |name: &str| -> Result<usize, ConfigError> {
            nodes
                .iter()
                .position(|n| n.name == name)
                .ok_or_else(|| ConfigError::UnknownNode(name.to_string()))
        };
        let mut pairs = BTreeMap::new();
        for po in &self.pairs {
            let a = idx(&po.from)?;
            let b = idx(&po.to)?;
            if a == b {
                return Err(ConfigError::invalid(
                    &format!("pair {} -> {}", po.from, po.to),
                    "a pair needs two different nodes",
                ));
            }
            let p = self.lookup(&po.profile, &format!("pair {} -> {}", po.from, po.to))?;
            pairs.insert((a, b), p.clone());
            if po.symmetric {
                pairs.insert((b, a), p);
            }
        }
        Ok(Resolved {
            seed: self.seed,
            subnet,
            host_address,
            default,
            nodes,
            pairs,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_profiles_are_valid() {
        for n in NAMED_PROFILES {
            let p = named_profile(n).expect("listed");
            p.validate(n).expect("valid");
        }
        assert!(named_profile("nope").is_none());
    }

    #[test]
    fn toml_round_trip_and_resolution() {
        let t = Topology::from_toml(
            r#"
            seed = 7
            subnet = "10.78.0.0/24"
            default = { delay_ms = 20.0 }
            [profiles.slow]
            delay_ms = 50.0
            rate_mbit = 5.0
            [[nodes]]
            name = "client"
            uplink = "4g-up"
            downlink = "4g-down"
            [[nodes]]
            name = "guard"
            address = "10.78.0.9"
            [[nodes]]
            name = "exit"
            [[pairs]]
            from = "guard"
            to = "exit"
            profile = "slow"
            symmetric = false
            "#,
        )
        .expect("parses");
        let r = t.resolve().expect("resolves");
        assert_eq!(r.host_address, Ipv4Addr::new(10, 78, 0, 1));
        assert_eq!(r.nodes[0].address, Ipv4Addr::new(10, 78, 0, 2));
        assert_eq!(r.nodes[1].address, Ipv4Addr::new(10, 78, 0, 9));
        assert_eq!(r.nodes[2].address, Ipv4Addr::new(10, 78, 0, 3));
        assert_eq!(r.core_profile(1, 2).delay_ms, 50.0);
        assert_eq!(r.core_profile(2, 1).delay_ms, 20.0);
        assert_eq!(r.core_profile(0, 1).delay_ms, 20.0);
        assert_eq!(
            r.nodes[0].uplink.as_ref().and_then(|p| p.rate_mbit),
            Some(10.0)
        );
        let s = toml::to_string(&t).expect("serializes");
        let t2 = Topology::from_toml(&s).expect("re-parses");
        assert_eq!(t, t2);
    }

    #[test]
    fn clear_errors() {
        let e = LinkProfile {
            loss: 1.5,
            ..Default::default()
        }
        .validate("p")
        .expect_err("bad");
        assert!(e.to_string().contains("loss"), "{e}");
        let e = LinkProfile {
            delay_ms: 1.0,
            jitter_ms: 2.0,
            ..Default::default()
        }
        .validate("p")
        .expect_err("bad");
        assert!(e.to_string().contains("jitter"), "{e}");
        let e = LinkProfile {
            queue_bytes: Some(10_000),
            ..Default::default()
        }
        .validate("p")
        .expect_err("bad");
        assert!(e.to_string().contains("rate_mbit"), "{e}");
        let e = Topology::from_toml("default = \"marsnet\"\n")
            .expect("parses")
            .resolve()
            .expect_err("unknown");
        assert!(e.to_string().contains("marsnet"), "{e}");
        let e = Topology::from_toml("default = { delay = 3 }\n").expect_err("unknown field");
        assert!(e.to_string().contains("TOML"), "{e}");
        assert!("10.77.0.1/16".parse::<Subnet>().is_err());
        assert!("10.77.0.0/31".parse::<Subnet>().is_err());
        let mut t = Topology::uniform(&["a", "a"], LinkProfile::default(), 0);
        assert!(t.resolve().is_err());
        t.nodes[1].name = "Bad Name".into();
        assert!(t.resolve().is_err());
        t.nodes[1].name = "b".into();
        t.nodes[1].address = Some(Ipv4Addr::new(10, 77, 0, 1));
        assert!(t.resolve().is_err(), "host address reserved");
    }

    #[test]
    fn subnet_math() {
        let s: Subnet = "10.77.4.0/24".parse().expect("ok");
        assert!(s.contains(Ipv4Addr::new(10, 77, 4, 200)));
        assert!(!s.contains(Ipv4Addr::new(10, 77, 5, 1)));
        assert_eq!(s.host_count(), 254);
        assert_eq!(s.nth(254), Some(Ipv4Addr::new(10, 77, 4, 254)));
        assert_eq!(s.nth(255), None);
        let big: Subnet = "10.77.0.0/16".parse().expect("ok");
        assert!(big.overlaps(&s));
        assert!(s.overlaps(&big));
        let other: Subnet = "10.78.0.0/16".parse().expect("ok");
        assert!(!other.overlaps(&s));
    }

    #[test]
    fn ge_mean_loss() {
        let ge = GilbertElliott {
            p: 0.01,
            r: 0.3,
            loss_good: 0.0,
            loss_bad: 1.0,
        };
        assert!((ge.mean_loss() - 0.01 / 0.31).abs() < 1e-12);
    }
}
