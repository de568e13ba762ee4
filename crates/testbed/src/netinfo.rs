//! `network.json`: what a running network consists of.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::spec::{Implementation, Role};

/// One node of a running network.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NodeInfo {
    /// Node name (e.g. `auth0`, `omexit0`).
    pub name: String,
    /// Implementation.
    pub implementation: Implementation,
    /// Roles.
    pub roles: Vec<Role>,
    /// Address it listens on.
    pub address: String,
    /// ORPort (relays and authorities).
    pub or_port: Option<u16>,
    /// DirPort (authorities).
    pub dir_port: Option<u16>,
    /// SOCKS port (clients).
    pub socks_port: Option<u16>,
    /// Control port, if any.
    pub control_port: Option<u16>,
    /// RSA identity fingerprint (40 hex), for relays and authorities.
    pub fingerprint: Option<String>,
    /// v3 identity (authorities).
    pub v3ident: Option<String>,
    /// Process ID.
    pub pid: u32,
    /// Process start time (clock ticks after boot, /proc/<pid>/stat
    /// field 22) to recognise the process again.
    pub start_time: u64,
    /// Data directory.
    pub data_dir: PathBuf,
    /// Log file.
    pub log: PathBuf,
    /// The node's open links as it last reported them (onionmix relays and
    /// authorities; see [`NetworkInfo::refresh_links`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub links: Vec<LinkInfo>,
}

/// One open link of a node, from its `status.json`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct LinkInfo {
    /// The peer: a node name when it is one of the network's relays, its
    /// fingerprint when not, `client` for a client (no address is
    /// reported).
    pub peer: String,
    /// `tls` or `quic`.
    pub transport: String,
    /// Whether this node opened it.
    pub initiated: bool,
    /// Circuits on it.
    pub circuits: u64,
}

impl NodeInfo {
    /// The SOCKS address, if this is a client.
    pub fn socks_addr(&self) -> Option<SocketAddr> {
        self.socks_port
            .and_then(|p| format!("{}:{p}", self.address).parse().ok())
    }
    /// The DirPort address.
    pub fn dir_addr(&self) -> Option<SocketAddr> {
        self.dir_port
            .and_then(|p| format!("{}:{p}", self.address).parse().ok())
    }
    /// Whether the node has a role.
    pub fn has_role(&self, r: Role) -> bool {
        self.roles.contains(&r)
    }
}

/// The sink.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct SinkInfo {
    /// HTTP address.
    pub http: SocketAddr,
    /// Echo address.
    pub echo: SocketAddr,
    /// DNS (UDP) address.
    pub dns: SocketAddr,
    /// HTTPS (TLS 1.3) address, when the sink serves it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub https: Option<SocketAddr>,
    /// PEM of the CA that issued the sink's HTTPS certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls_ca: Option<PathBuf>,
    /// Hostname that resolves to the sink at exits.
    pub hostname: String,
    /// Process ID.
    pub pid: u32,
    /// Process start time.
    pub start_time: u64,
    /// Log file.
    pub log: PathBuf,
}

/// The whole network.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct NetworkInfo {
    /// Spec name.
    pub spec: String,
    /// State directory.
    pub dir: PathBuf,
    /// Unix time the network became ready.
    pub ready_unix: u64,
    /// Seconds from start to ready.
    pub bootstrap_secs: f64,
    /// Nodes.
    pub nodes: Vec<NodeInfo>,
    /// The sink, if started.
    pub sink: Option<SinkInfo>,
    /// The link emulator, if the network is emulated.
    #[serde(default)]
    pub emulator: Option<EmulatorInfo>,
    /// Onion services (nodes with the `onion-service` role).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub onion_services: Vec<OnionServiceInfo>,
}

/// An onion service of the network: its virtual ports lead to the sink.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OnionServiceInfo {
    /// Node name (e.g. `hs0`, `omhs0`).
    pub name: String,
    /// Which implementation runs it.
    pub implementation: Implementation,
    /// Its address (`<56 characters>.onion`).
    pub address: String,
    /// Virtual port of the sink's HTTP server.
    pub http_port: u16,
    /// Virtual port of the sink's echo server.
    pub echo_port: u16,
    /// Process ID (also in `nodes`).
    pub pid: u32,
}

/// The link emulator process of an emulated network.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EmulatorInfo {
    /// Its state directory (status file, log).
    pub state_dir: PathBuf,
    /// Process ID.
    pub pid: u32,
    /// Process start time.
    pub start_time: u64,
    /// The emulated subnet.
    pub subnet: String,
}

impl NetworkInfo {
    /// Path of network.json in a state dir.
    pub fn path(dir: &Path) -> PathBuf {
        dir.join("network.json")
    }
    /// Load from a state dir.
    pub fn load(dir: &Path) -> Result<Self, String> {
        let p = Self::path(dir);
        let text = std::fs::read_to_string(&p).map_err(|e| {
            format!(
                "no running network in {} ({}: {e})",
                dir.display(),
                p.display()
            )
        })?;
        serde_json::from_str(&text).map_err(|e| format!("{}: {e}", p.display()))
    }
    /// Save to its state dir.
    pub fn save(&self) -> Result<(), String> {
        let p = Self::path(&self.dir);
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        onionmix_fsutil::write_atomic(&p, text).map_err(|e| format!("{}: {e}", p.display()))
    }
    /// A node by name.
    pub fn node(&self, name: &str) -> Option<&NodeInfo> {
        self.nodes.iter().find(|n| n.name == name)
    }
    /// An onion service by node name.
    pub fn onion_service(&self, name: &str) -> Option<&OnionServiceInfo> {
        self.onion_services.iter().find(|s| s.name == name)
    }
    /// Read every onionmix relay's and authority's open links from its
    /// `status.json` (written about every second) into `links`. Nodes
    /// whose file is missing or unreadable keep what they had.
    pub fn refresh_links(&mut self) {
        let names: std::collections::HashMap<String, String> = self
            .nodes
            .iter()
            .filter_map(|n| Some((n.fingerprint.clone()?.to_ascii_uppercase(), n.name.clone())))
            .collect();
        for n in &mut self.nodes {
            if n.implementation != Implementation::Onionmix || !n.roles.iter().any(|r| r.is_relay())
            {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(n.data_dir.join("status.json")) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) else {
                continue;
            };
            let Some(links) = v["links"].as_array() else {
                continue;
            };
            n.links = links
                .iter()
                .map(|l| LinkInfo {
                    peer: match l["peer"].as_str() {
                        Some(fp) => names
                            .get(&fp.to_ascii_uppercase())
                            .cloned()
                            .unwrap_or_else(|| fp.to_string()),
                        None => "client".into(),
                    },
                    transport: l["transport"].as_str().unwrap_or("?").to_string(),
                    initiated: l["initiated"].as_bool().unwrap_or(false),
                    circuits: l["circuits"].as_u64().unwrap_or(0),
                })
                .collect();
        }
    }

    /// Clients of an implementation.
    pub fn clients(&self, imp: Option<Implementation>) -> Vec<&NodeInfo> {
        self.nodes
            .iter()
            .filter(|n| n.has_role(Role::Client) && imp.is_none_or(|i| n.implementation == i))
            .collect()
    }
}
