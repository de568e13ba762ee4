//! Generates a Loopix test network in a state directory: keys (reference
//! `.prv`/`.bin` files), node configs, the directory (the reference's SQLite
//! database or our signed document), and the list of processes to start.
//!
//! The launcher (`onionmix testnet start --spec loopix`) or a test starts
//! each [`ProcessSpec`] as `onionmix <argv...>` and waits for its
//! [`Readiness`] condition.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::directory::{ClientInfo, Directory, MixInfo, NodeInfo, public_file_bytes};
use crate::loopix::codec::{ProfileKind, SecretKey};
use crate::loopix::config::{DirectorySource, LoopixParams, NodeConfig, Role};

/// Which directory the network uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DirectoryKind {
    /// The reference's `example.db` (SQLite).
    Sqlite,
    /// Our signed directory document.
    Signed,
}

/// A Loopix network description (`testnets/loopix*.toml`).
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoopixSpec {
    #[serde(default = "d_providers")]
    pub providers: usize,
    #[serde(default = "d_layers")]
    pub layers: usize,
    #[serde(default = "d_mpl")]
    pub mixes_per_layer: usize,
    #[serde(default = "d_clients")]
    pub clients: usize,
    #[serde(default = "d_profile")]
    pub profile: ProfileKind,
    #[serde(default = "d_dir")]
    pub directory: DirectoryKind,
    #[serde(default = "d_host")]
    pub host: String,
    /// Parameters for clients (reference names, mean seconds).
    #[serde(default)]
    pub client_params: LoopixParams,
    /// Parameters for mixes and providers.
    #[serde(default)]
    pub mix_params: LoopixParams,
}

fn d_providers() -> usize {
    4
}
fn d_layers() -> usize {
    3
}
fn d_mpl() -> usize {
    2
}
fn d_clients() -> usize {
    20
}
fn d_profile() -> ProfileKind {
    ProfileKind::Sphinxmix
}
fn d_dir() -> DirectoryKind {
    DirectoryKind::Sqlite
}
fn d_host() -> String {
    "127.0.0.1".into()
}

impl Default for LoopixSpec {
    fn default() -> Self {
        LoopixSpec {
            providers: 4,
            layers: 3,
            mixes_per_layer: 2,
            clients: 20,
            profile: ProfileKind::Sphinxmix,
            directory: DirectoryKind::Sqlite,
            host: d_host(),
            client_params: LoopixParams::default(),
            mix_params: LoopixParams::default(),
        }
    }
}

impl LoopixSpec {
    pub fn from_toml(text: &str) -> Result<LoopixSpec, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }
}

/// When a started process counts as ready.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Readiness {
    /// The node writes its stats file right after binding its socket.
    FileExists(PathBuf),
}

/// One process of the network: run `onionmix <argv>`.
#[derive(Clone, Debug)]
pub struct ProcessSpec {
    pub name: String,
    pub role: Role,
    pub argv: Vec<String>,
    pub config: PathBuf,
    pub log: PathBuf,
    pub stats: PathBuf,
    pub inbox: Option<PathBuf>,
    pub outbox: Option<PathBuf>,
    pub ready: Readiness,
}

/// A generated network in memory.
pub struct Generated {
    pub directory: Directory,
    pub keys: BTreeMap<String, SecretKey>,
}

/// Builds names, ports, keys and the directory. `port` supplies one UDP
/// port per node.
pub fn build(spec: &LoopixSpec, port: &mut dyn FnMut() -> u16) -> Generated {
    let mut rng = rand::thread_rng();
    let mut keys = BTreeMap::new();
    let mut node = |name: String, keys: &mut BTreeMap<String, SecretKey>| {
        let sk = SecretKey::generate(spec.profile, &mut rng);
        let n = NodeInfo {
            name: name.clone(),
            host: spec.host.clone(),
            port: port(),
            key: sk.public(),
        };
        keys.insert(name, sk);
        n
    };
    let providers: Vec<NodeInfo> = (0..spec.providers)
        .map(|i| node(format!("provider{i}"), &mut keys))
        .collect();
    let mut mixes = Vec::new();
    for l in 0..spec.layers {
        for j in 0..spec.mixes_per_layer {
            mixes.push(MixInfo {
                node: node(format!("mix{l}_{j}"), &mut keys),
                layer: l as u32,
            });
        }
    }
    let clients: Vec<ClientInfo> = (0..spec.clients)
        .map(|i| ClientInfo {
            node: node(format!("client{i}"), &mut keys),
            provider: providers[i % providers.len().max(1)].name.clone(),
        })
        .collect();
    Generated {
        directory: Directory {
            profile: spec.profile,
            mixes,
            providers,
            clients,
        },
        keys,
    }
}

/// A free UDP port on 127.0.0.1 from the host-wide port allocator
/// (`onionmix-testsupport::ports`: a locked block per process, so
/// concurrent networks and tests never get the same port).
pub fn free_udp_port() -> Result<u16, String> {
    onionmix_testsupport::ports::free_port("127.0.0.1")
        .map_err(|e| format!("no free UDP port on 127.0.0.1: {e}"))
}

/// Writes the network into `state_dir` and returns the processes to start.
pub fn generate(
    spec: &LoopixSpec,
    state_dir: &Path,
) -> Result<(Generated, Vec<ProcessSpec>), String> {
    if spec.providers == 0 || spec.layers == 0 || spec.mixes_per_layer == 0 {
        return Err("a Loopix network needs providers and at least one mix per layer".into());
    }
    let io = |e: std::io::Error| e.to_string();
    std::fs::create_dir_all(state_dir).map_err(io)?;
    let mut err = None;
    let mut port = || match free_udp_port() {
        Ok(p) => p,
        Err(e) => {
            err.get_or_insert(e);
            0
        }
    };
    let g = build(spec, &mut port);
    if let Some(e) = err {
        return Err(e);
    }
    let dir = &g.directory;

    let (source, dir_note) = match spec.directory {
        DirectoryKind::Sqlite => {
            let p = state_dir.join("example.db");
            dir.to_sqlite(&p).map_err(|e| e.to_string())?;
            (
                DirectorySource {
                    sqlite: Some(p),
                    ..Default::default()
                },
                "example.db",
            )
        }
        DirectoryKind::Signed => {
            let mut seed = [0u8; 32];
            rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut seed);
            let sk = ed25519_dalek::SigningKey::from_bytes(&seed);
            let p = state_dir.join("directory.json");
            std::fs::write(&p, dir.sign(&sk).map_err(|e| e.to_string())?).map_err(io)?;
            (
                DirectorySource {
                    signed: Some(p),
                    signing_key: Some(hex::encode(sk.verifying_key().to_bytes())),
                    ..Default::default()
                },
                "directory.json",
            )
        }
    };
    tracing::debug!("loopix testnet directory: {dir_note}");

    let mut procs = Vec::new();
    let mut add = |name: &str,
                   role: Role,
                   n: &NodeInfo,
                   public_bin: Vec<u8>,
                   provider: Option<String>,
                   params: &LoopixParams|
     -> Result<(), String> {
        let nd = state_dir.join(name);
        std::fs::create_dir_all(&nd).map_err(io)?;
        let (prv, bin) = match role {
            Role::Mix => ("secretMixnode.prv", "publicMixnode.bin"),
            Role::Provider => ("secretProvider.prv", "publicProvider.bin"),
            Role::Client => ("secretClient.prv", "publicClient.bin"),
        };
        let sk = g.keys.get(name).ok_or("missing key")?;
        std::fs::write(nd.join(prv), sk.to_file_bytes()).map_err(io)?;
        std::fs::write(nd.join(bin), public_bin).map_err(io)?;
        let stats = nd.join("stats.json");
        let (inbox, outbox) = if role == Role::Client {
            let ob = nd.join("outbox");
            std::fs::create_dir_all(&ob).map_err(io)?;
            (Some(nd.join("inbox.jsonl")), Some(ob))
        } else {
            (None, None)
        };
        let cfg = NodeConfig {
            role,
            name: name.to_string(),
            listen: format!("{}:{}", n.host, n.port)
                .parse()
                .map_err(|e| format!("listen address: {e}"))?,
            profile: spec.profile,
            secret_key_file: nd.join(prv),
            directory: source.clone(),
            provider,
            stats_file: Some(stats.clone()),
            stats_interval: 0.25,
            inbox_file: inbox.clone(),
            outbox_dir: outbox.clone(),
            workers: if role == Role::Client { 1 } else { 0 },
            start_delay: 0.0,
            params: params.clone(),
        };
        let cfg_path = nd.join("node.toml");
        std::fs::write(&cfg_path, toml::to_string(&cfg).map_err(|e| e.to_string())?).map_err(io)?;
        let argv = match role {
            Role::Mix => vec![
                "mix".into(),
                "--config".into(),
                cfg_path.display().to_string(),
            ],
            Role::Provider => vec![
                "provider".into(),
                "--config".into(),
                cfg_path.display().to_string(),
            ],
            Role::Client => vec![
                "mix-client".into(),
                "run".into(),
                "--config".into(),
                cfg_path.display().to_string(),
            ],
        };
        procs.push(ProcessSpec {
            name: name.to_string(),
            role,
            argv,
            config: cfg_path,
            log: nd.join("node.log"),
            ready: Readiness::FileExists(stats.clone()),
            stats,
            inbox,
            outbox,
        });
        Ok(())
    };
    // Providers expect their clients' pull interval (it sets the automatic
    // per-client control rate limit).
    let provider_params = LoopixParams {
        time_pull: spec.client_params.time_pull,
        ..spec.mix_params.clone()
    };
    for p in &dir.providers {
        add(
            &p.name,
            Role::Provider,
            p,
            public_file_bytes("provider", p, None, None),
            None,
            &provider_params,
        )?;
    }
    for m in &dir.mixes {
        add(
            &m.node.name,
            Role::Mix,
            &m.node,
            public_file_bytes("mixnode", &m.node, Some(m.layer), None),
            None,
            &spec.mix_params,
        )?;
    }
    for c in &dir.clients {
        add(
            &c.node.name,
            Role::Client,
            &c.node,
            public_file_bytes("client", &c.node, None, Some(&c.provider)),
            Some(c.provider.clone()),
            &spec.client_params,
        )?;
    }
    Ok((g, procs))
}
