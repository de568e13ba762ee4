//! Network specs (TOML). See `docs/testnet.md`.

use serde::{Deserialize, Serialize};

/// Built-in Loopix network specs (a different schema: see docs/loopix.md).
pub const BUILTIN_LOOPIX: &[(&str, &str)] = &[
    ("loopix", include_str!("../../../testnets/loopix.toml")),
    (
        "loopix-x25519",
        include_str!("../../../testnets/loopix-x25519.toml"),
    ),
    (
        "loopix-seed",
        include_str!("../../../testnets/loopix-seed.toml"),
    ),
];

/// Built-in specs, embedded in the binary.
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "tor-basic",
        include_str!("../../../testnets/tor-basic.toml"),
    ),
    (
        "tor-basic-onionmix-client",
        include_str!("../../../testnets/tor-basic-onionmix-client.toml"),
    ),
    ("mixed", include_str!("../../../testnets/mixed.toml")),
    (
        "tor-basic-20ms",
        include_str!("../../../testnets/tor-basic-20ms.toml"),
    ),
    (
        "mixed-20ms",
        include_str!("../../../testnets/mixed-20ms.toml"),
    ),
    (
        "onionmix-basic",
        include_str!("../../../testnets/onionmix-basic.toml"),
    ),
    (
        "tor-client-onionmix-network",
        include_str!("../../../testnets/tor-client-onionmix-network.toml"),
    ),
    (
        "stock-basic",
        include_str!("../../../testnets/stock-basic.toml"),
    ),
    (
        "onionmix-basic-20ms",
        include_str!("../../../testnets/onionmix-basic-20ms.toml"),
    ),
    (
        "onionmix-hs",
        include_str!("../../../testnets/onionmix-hs.toml"),
    ),
    ("stock-hs", include_str!("../../../testnets/stock-hs.toml")),
    (
        "onionmix-basic-quic",
        include_str!("../../../testnets/onionmix-basic-quic.toml"),
    ),
    (
        "onionmix-basic-quic-20ms",
        include_str!("../../../testnets/onionmix-basic-quic-20ms.toml"),
    ),
    (
        "mixed-quic",
        include_str!("../../../testnets/mixed-quic.toml"),
    ),
    ("mixed-hs", include_str!("../../../testnets/mixed-hs.toml")),
    (
        "onionmix-hs-20ms",
        include_str!("../../../testnets/onionmix-hs-20ms.toml"),
    ),
    (
        "stock-hs-20ms",
        include_str!("../../../testnets/stock-hs-20ms.toml"),
    ),
    (
        "mixed-hs-20ms",
        include_str!("../../../testnets/mixed-hs-20ms.toml"),
    ),
];

/// Which implementation runs a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Implementation {
    /// The stock `tor` binary on PATH.
    Tor,
    /// The onionmix binary.
    Onionmix,
}

/// A node's role.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Hash, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// Directory authority (also a relay).
    Authority,
    /// Non-exit relay.
    Relay,
    /// Exit relay (exits to 127.0.0.0/8).
    Exit,
    /// Client with a SOCKS port.
    Client,
    /// Loopix mix node.
    Mix,
    /// Loopix provider.
    Provider,
    /// Loopix client.
    MixClient,
    /// A v3 onion service in front of the sink's HTTP and echo ports.
    #[serde(rename = "onion-service")]
    OnionService,
}

impl Role {
    /// Short name used in node names.
    pub fn short(self) -> &'static str {
        match self {
            Role::Authority => "auth",
            Role::Relay => "relay",
            Role::Exit => "exit",
            Role::Client => "client",
            Role::Mix => "mix",
            Role::Provider => "provider",
            Role::MixClient => "mixclient",
            Role::OnionService => "hs",
        }
    }
    /// Whether nodes of this role appear in the consensus.
    pub fn is_relay(self) -> bool {
        matches!(self, Role::Authority | Role::Relay | Role::Exit)
    }
}

/// What carries the links between onionmix nodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Links {
    /// TLS over TCP, as stock tor (the default).
    #[default]
    Tls,
    /// QUIC between onionmix nodes that both run it (`docs/quic-links.md`):
    /// onionmix relays, exits and authorities accept and prefer QUIC links
    /// (falling back to TLS), onionmix clients reach their first hop over
    /// QUIC. Links with stock tor stay TLS.
    Quic,
}

/// A group of identical nodes.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeGroup {
    /// Implementation.
    #[serde(rename = "impl")]
    pub implementation: Implementation,
    /// Role.
    pub role: Role,
    /// How many.
    #[serde(default = "one")]
    pub count: usize,
    /// Extra torrc lines (stock tor nodes).
    #[serde(default)]
    pub torrc: Vec<String>,
    /// Extra TOML lines appended to an onionmix node's config.
    #[serde(default)]
    pub config: Vec<String>,
}

fn one() -> usize {
    1
}
fn default_timeout() -> u64 {
    120
}
fn yes() -> bool {
    true
}

/// A whole network.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Spec {
    /// Name.
    pub name: String,
    /// One-line description.
    #[serde(default)]
    pub description: String,
    /// Give up if the network is not ready after this many seconds.
    #[serde(default = "default_timeout")]
    pub bootstrap_timeout_secs: u64,
    /// Start the sink.
    #[serde(default = "yes")]
    pub sink: bool,
    /// Node groups.
    #[serde(rename = "nodes")]
    pub nodes: Vec<NodeGroup>,
    /// Link emulation (absent: every node on loopback, no impairment).
    /// The table is an `onionmix_emu::Topology` without `nodes` entries
    /// for addresses: `[[emulation.nodes]]` only sets access links by node
    /// name (see docs/emulator.md).
    #[serde(default)]
    pub emulation: Option<onionmix_emu::Topology>,
    /// The authorities' voting interval in seconds (default 20, tor's
    /// testing schedule); vote and distribution delays are a fifth of it,
    /// at least 3 s. The shared-random protocol runs 24 intervals, so 10
    /// gives an SRV every 4 minutes.
    #[serde(default)]
    pub voting_interval_secs: Option<u64>,
    /// `"tls"` (default) or `"quic"`: the transport of links between
    /// onionmix nodes, so one topology can be compared both ways.
    #[serde(default)]
    pub links: Links,
}

/// The voting interval of networks whose spec does not set one.
pub const DEFAULT_VOTING_INTERVAL: u64 = 20;

/// Spec problems.
#[derive(Debug, thiserror::Error)]
pub enum SpecError {
    /// Not a built-in name and not a readable file.
    #[error("no built-in spec named {name:?} and no such file ({err}); built-ins: {}", builtin_names().join(", "))]
    NotFound {
        /// What was asked for.
        name: String,
        /// File error.
        err: String,
    },
    /// TOML error.
    #[error("invalid spec {name}: {err}")]
    Parse {
        /// Spec.
        name: String,
        /// Error.
        err: String,
    },
    /// Semantic problem.
    #[error("invalid spec {name}: {why}")]
    Invalid {
        /// Spec.
        name: String,
        /// Why.
        why: String,
    },
}

/// Names of the built-in specs.
pub fn builtin_names() -> Vec<&'static str> {
    BUILTIN
        .iter()
        .chain(BUILTIN_LOOPIX.iter())
        .map(|(n, _)| *n)
        .collect()
}

/// A Loopix spec by built-in name or file, if `name_or_path` is one.
pub fn load_loopix(
    name_or_path: &str,
) -> Option<Result<onionmix_mix::testnet::LoopixSpec, SpecError>> {
    let text = match BUILTIN_LOOPIX.iter().find(|(n, _)| *n == name_or_path) {
        Some((_, t)) => t.to_string(),
        None => {
            let t = std::fs::read_to_string(name_or_path).ok()?;
            // Loopix specs are recognised by their topology keys.
            let v: toml::Value = toml::from_str(&t).ok()?;
            v.get("providers")?;
            t
        }
    };
    Some(
        onionmix_mix::testnet::LoopixSpec::from_toml(&text).map_err(|err| SpecError::Parse {
            name: name_or_path.into(),
            err,
        }),
    )
}

/// Most nodes in one network.
pub const MAX_NODES: usize = 64;

impl Spec {
    /// Load a built-in by name, or a TOML file by path.
    pub fn load(name_or_path: &str) -> Result<Spec, SpecError> {
        if let Some((_, text)) = BUILTIN.iter().find(|(n, _)| *n == name_or_path) {
            return Spec::parse(name_or_path, text);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|e| SpecError::NotFound {
            name: name_or_path.into(),
            err: e.to_string(),
        })?;
        Spec::parse(name_or_path, &text)
    }

    /// Parse and validate spec text.
    pub fn parse(name: &str, text: &str) -> Result<Spec, SpecError> {
        let s: Spec = toml::from_str(text).map_err(|e| SpecError::Parse {
            name: name.into(),
            err: e.to_string(),
        })?;
        s.validate()?;
        Ok(s)
    }

    fn invalid(&self, why: impl Into<String>) -> SpecError {
        SpecError::Invalid {
            name: self.name.clone(),
            why: why.into(),
        }
    }

    /// (voting interval, vote delay, distribution delay) in seconds.
    pub fn voting_schedule(&self) -> (u64, u64, u64) {
        let i = self.voting_interval_secs.unwrap_or(DEFAULT_VOTING_INTERVAL);
        let d = (i / 5).max(3);
        (i, d, d)
    }

    /// Check the spec makes a network that can work.
    pub fn validate(&self) -> Result<(), SpecError> {
        if let Some(i) = self.voting_interval_secs
            && (!(10..=3600).contains(&i) || 86400 % i != 0)
        {
            return Err(self.invalid(format!(
                "voting_interval_secs {i}: between 10 and 3600, dividing a day"
            )));
        }
        let count = |r: Role| -> usize {
            self.nodes
                .iter()
                .filter(|g| g.role == r)
                .map(|g| g.count)
                .sum()
        };
        let total: usize = self.nodes.iter().map(|g| g.count).sum();
        if total > MAX_NODES {
            return Err(self.invalid(format!("{total} nodes; at most {MAX_NODES}")));
        }
        if count(Role::Authority) == 0 {
            return Err(self.invalid("needs at least one authority"));
        }
        let auth_impls: Vec<Implementation> = self
            .nodes
            .iter()
            .filter(|g| g.role == Role::Authority && g.count > 0)
            .map(|g| g.implementation)
            .collect();
        if auth_impls.windows(2).any(|w| w[0] != w[1]) {
            return Err(self.invalid(
                "all authorities must have the same implementation (tor and onionmix authorities do not vote together)",
            ));
        }
        if count(Role::Client) > 0 && count(Role::Exit) == 0 {
            return Err(self.invalid("clients need at least one exit"));
        }
        if count(Role::OnionService) > 0 && (count(Role::Exit) == 0 || !self.sink) {
            return Err(self.invalid(
                "onion services need an exit (to bootstrap) and the sink (their target)",
            ));
        }
        if count(Role::Authority) + count(Role::Relay) + count(Role::Exit) < 3 {
            return Err(self.invalid("3-hop circuits need at least 3 relays (authorities count)"));
        }
        for g in &self.nodes {
            if matches!(g.role, Role::Mix | Role::Provider | Role::MixClient) {
                return Err(self.invalid("mix/provider/mixclient roles belong in a Loopix spec (see testnets/loopix.toml)"));
            }
            if g.count == 0 {
                return Err(self.invalid("a node group has count 0"));
            }
            if g.implementation == Implementation::Onionmix && !g.torrc.is_empty() {
                return Err(self.invalid("torrc lines given for onionmix nodes (use `config`)"));
            }
            if g.implementation == Implementation::Tor && !g.config.is_empty() {
                return Err(self.invalid("config lines given for tor nodes (use `torrc`)"));
            }
            for l in &g.torrc {
                if l.contains('\n') {
                    return Err(self.invalid("a torrc entry contains a newline"));
                }
            }
        }
        Ok(())
    }

    /// Config lines the spec's `links` switch gives an onionmix node of
    /// `role` (before the group's own `config` lines).
    pub fn link_config(&self, role: Role) -> Vec<String> {
        match (self.links, role) {
            (Links::Quic, Role::Authority | Role::Relay | Role::Exit | Role::Client) => {
                vec!["quic = true".to_string()]
            }
            _ => Vec::new(),
        }
    }

    /// The authorities' implementation.
    pub fn authority_impl(&self) -> Implementation {
        self.nodes
            .iter()
            .find(|g| g.role == Role::Authority)
            .map(|g| g.implementation)
            .unwrap_or(Implementation::Tor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_parse() {
        for (n, _) in BUILTIN {
            Spec::load(n).unwrap_or_else(|e| panic!("{n}: {e}"));
        }
    }

    /// The experiment specs kept under docs/ (not built in) parse too, and
    /// their client access profiles resolve.
    #[test]
    fn experiment_specs_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../docs/experiments/seed-000/specs");
        let mut n = 0;
        for e in std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display())) {
            let p = e.unwrap_or_else(|e| panic!("{e}")).path();
            let s = Spec::load(&p.to_string_lossy()).unwrap_or_else(|e| panic!("{p:?}: {e}"));
            let mut t = s
                .emulation
                .unwrap_or_else(|| panic!("{p:?}: no [emulation]"));
            assert_eq!(t.nodes.len(), 1, "{p:?}");
            // The access profiles name real profiles: resolve with the
            // client and a second node.
            let mut other = t.nodes[0].clone();
            other.name = "x".into();
            other.uplink = None;
            other.downlink = None;
            t.nodes.push(other);
            t.resolve().unwrap_or_else(|e| panic!("{p:?}: {e}"));
            n += 1;
        }
        assert_eq!(n, 8);
    }

    #[test]
    fn bad_specs() {
        let bad = [
            ("no nodes", "name='x'\nnodes=[]"),
            (
                "no authority",
                "name='x'\n[[nodes]]\nimpl='tor'\nrole='relay'\ncount=3",
            ),
            (
                "client without exit",
                "name='x'\n[[nodes]]\nimpl='tor'\nrole='authority'\ncount=3\n[[nodes]]\nimpl='tor'\nrole='client'",
            ),
            (
                "unknown role",
                "name='x'\n[[nodes]]\nimpl='tor'\nrole='bridge'",
            ),
            (
                "unknown impl",
                "name='x'\n[[nodes]]\nimpl='arti'\nrole='relay'",
            ),
            (
                "unknown field",
                "name='x'\nbogus=1\n[[nodes]]\nimpl='tor'\nrole='authority'\ncount=3",
            ),
            (
                "voting interval not dividing a day",
                "name='x'\nvoting_interval_secs=7\n[[nodes]]\nimpl='tor'\nrole='authority'\ncount=3",
            ),
            (
                "voting interval too short",
                "name='x'\nvoting_interval_secs=5\n[[nodes]]\nimpl='tor'\nrole='authority'\ncount=3",
            ),
            (
                "mixed authorities",
                "name='x'\n[[nodes]]\nimpl='tor'\nrole='authority'\ncount=2\n[[nodes]]\nimpl='onionmix'\nrole='authority'",
            ),
        ];
        for (what, text) in bad {
            assert!(
                Spec::parse(what, text).is_err(),
                "{what} should be rejected"
            );
        }
        assert_eq!(Spec::load("onionmix-basic").unwrap().links, Links::Tls);
        let q = Spec::load("onionmix-basic-quic").unwrap();
        assert_eq!(q.links, Links::Quic);
        assert_eq!(q.link_config(Role::Exit), ["quic = true"]);
        assert!(q.link_config(Role::OnionService).is_empty());
        assert!(
            Spec::parse(
                "x",
                "name='x'\nlinks='udp'\n[[nodes]]\nimpl='tor'\nrole='authority'\ncount=3"
            )
            .is_err()
        );
        let mut s = Spec::load("onionmix-basic").unwrap();
        assert_eq!(s.voting_schedule(), (20, 4, 4));
        s.voting_interval_secs = Some(10);
        assert_eq!(s.voting_schedule(), (10, 3, 3));
        s.voting_interval_secs = Some(60);
        assert_eq!(s.voting_schedule(), (60, 12, 12));
        let e = Spec::load("no-such-spec").unwrap_err().to_string();
        assert!(e.contains("tor-basic"), "{e}");
    }
}
