//! The topology: nodes, their subnet and addresses, which profile applies where, and its resolution.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use super::{ConfigError, LinkProfile, MAX_NODE_NAME, MAX_NODES, NAMED_PROFILES, named_profile};

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
