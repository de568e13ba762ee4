//! Loopix parameters (the reference's names and units) and node config files.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::codec::ProfileKind;

/// Loopix parameters. Names and units follow the reference's `config.json`:
/// every `EXP_PARAMS_*` value is the **mean interval in seconds** of an
/// exponential distribution (numpy's `exponential(scale)`), not a rate.
/// A mean of 0 disables that stream (delays of 0 mean "no delay").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LoopixParams {
    /// Client real-message stream mean interval λP⁻¹ (s); a drop message is
    /// sent when nothing is queued.
    #[serde(rename = "EXP_PARAMS_PAYLOAD")]
    pub exp_params_payload: f64,
    /// Loop cover mean interval λL⁻¹ (clients) or λM⁻¹ (mixes, providers), s.
    #[serde(rename = "EXP_PARAMS_LOOPS")]
    pub exp_params_loops: f64,
    /// Drop cover mean interval λD⁻¹ (s).
    #[serde(rename = "EXP_PARAMS_DROP")]
    pub exp_params_drop: f64,
    /// Mean per-hop delay 1/μ (s), drawn by the sender for each hop.
    #[serde(rename = "EXP_PARAMS_DELAY")]
    pub exp_params_delay: f64,
    /// Interval between SUBSCRIBE and PULL (s); at a provider, the interval
    /// its clients use (it sets the automatic CONTROL_RATE).
    #[serde(rename = "TIME_PULL")]
    pub time_pull: f64,
    /// Bytes of noise in loop ("HT" + noise) and drop messages.
    #[serde(rename = "NOISE_LENGTH")]
    pub noise_length: usize,
    /// Packets a provider returns per PULL (stored first, then dummies).
    #[serde(rename = "MAX_RETRIEVE")]
    pub max_retrieve: usize,
    /// Provider forwards to subscribed clients at once instead of storing.
    #[serde(rename = "PUSH_MESSAGES")]
    pub push_messages: bool,
    /// Number of mix layers a client path crosses (the reference uses all).
    #[serde(rename = "PATH_LENGTH")]
    pub path_length: usize,
    // ---- onionmix bounds (not in the reference) ----
    /// Stored packets per client inbox at a provider; newer ones are dropped.
    #[serde(rename = "MAX_STORED_PER_CLIENT")]
    pub max_stored_per_client: usize,
    /// Packets a node holds in its delay queue; beyond it packets drop.
    #[serde(rename = "MAX_QUEUE")]
    pub max_queue: usize,
    /// Replay tags remembered per key period.
    #[serde(rename = "REPLAY_CACHE")]
    pub replay_cache: usize,
    /// Cap on any per-hop delay (s).
    #[serde(rename = "MAX_DELAY")]
    pub max_delay: f64,
    /// Messages a client queues for sending.
    #[serde(rename = "SEND_QUEUE")]
    pub send_queue: usize,
    /// Authenticated SUBSCRIBE/PULL requests a provider accepts per client
    /// per second (token bucket rate); 0 = automatic, twice what an honest
    /// client sends (2 requests per TIME_PULL): `4 / TIME_PULL`.
    #[serde(rename = "CONTROL_RATE")]
    pub control_rate: f64,
    /// Burst of the per-client control bucket.
    #[serde(rename = "CONTROL_BURST")]
    pub control_burst: f64,
    /// Largest difference (s) between a request's timestamp and the
    /// provider's clock.
    #[serde(rename = "CONTROL_MAX_SKEW")]
    pub control_max_skew: f64,
}

impl Default for LoopixParams {
    fn default() -> Self {
        LoopixParams {
            exp_params_payload: 2.0,
            exp_params_loops: 2.0,
            exp_params_drop: 2.0,
            exp_params_delay: 0.001,
            time_pull: 10.0,
            noise_length: 500,
            max_retrieve: 50,
            push_messages: false,
            path_length: 3,
            max_stored_per_client: 10_000,
            max_queue: 200_000,
            replay_cache: 1_000_000,
            max_delay: 3600.0,
            send_queue: 100,
            control_rate: 0.0,
            control_burst: 20.0,
            control_max_skew: 120.0,
        }
    }
}

impl LoopixParams {
    /// The pull interval clients use (TIME_PULL, or 10 s when it is 0).
    pub fn effective_time_pull(&self) -> f64 {
        if self.time_pull > 0.0 {
            self.time_pull
        } else {
            10.0
        }
    }

    /// Per-client control requests per second a provider accepts.
    pub fn effective_control_rate(&self) -> f64 {
        if self.control_rate > 0.0 {
            self.control_rate
        } else {
            4.0 / self.effective_time_pull().max(0.001)
        }
    }
}

/// Node role.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Mix,
    Provider,
    Client,
}

/// Where the directory comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct DirectorySource {
    /// The reference's SQLite database (`example.db`).
    pub sqlite: Option<PathBuf>,
    /// Our signed directory document.
    pub signed: Option<PathBuf>,
    /// Hex Ed25519 key trusted to sign it (required with `signed` unless
    /// `insecure_any_signer = true`).
    pub signing_key: Option<String>,
    #[serde(default)]
    pub insecure_any_signer: bool,
}

/// A node configuration file (TOML).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeConfig {
    pub role: Role,
    pub name: String,
    /// UDP address to bind.
    pub listen: SocketAddr,
    pub profile: ProfileKind,
    /// `secret*.prv` (petlib Bn) for sphinxmix; 32 raw bytes for x25519.
    pub secret_key_file: PathBuf,
    pub directory: DirectorySource,
    /// Client only: name of its provider.
    pub provider: Option<String>,
    /// JSON counters, rewritten every `stats_interval` seconds.
    pub stats_file: Option<PathBuf>,
    #[serde(default = "default_stats_interval")]
    pub stats_interval: f64,
    /// Client only: delivered messages are appended here (JSON lines).
    pub inbox_file: Option<PathBuf>,
    /// Client only: spool directory `mix-client send` writes into.
    pub outbox_dir: Option<PathBuf>,
    /// Threads for Sphinx processing at mixes/providers (0 = all cores).
    #[serde(default)]
    pub workers: usize,
    /// Seconds to wait before processing starts (the reference waits 20 s).
    #[serde(default)]
    pub start_delay: f64,
    #[serde(default)]
    pub params: LoopixParams,
}

fn default_stats_interval() -> f64 {
    0.5
}

impl NodeConfig {
    pub fn load(path: &Path) -> Result<NodeConfig, String> {
        let text =
            std::fs::read_to_string(path).map_err(|e| format!("read {}: {e}", path.display()))?;
        let mut c: NodeConfig =
            toml::from_str(&text).map_err(|e| format!("parse {}: {e}", path.display()))?;
        // Relative paths are relative to the config file.
        let base = path.parent().unwrap_or(Path::new("."));
        let fix = |p: &mut PathBuf| {
            if p.is_relative() {
                *p = base.join(&*p);
            }
        };
        fix(&mut c.secret_key_file);
        if let Some(p) = c.directory.sqlite.as_mut() {
            fix(p);
        }
        if let Some(p) = c.directory.signed.as_mut() {
            fix(p);
        }
        for p in [&mut c.stats_file, &mut c.inbox_file, &mut c.outbox_dir]
            .into_iter()
            .flatten()
        {
            fix(p);
        }
        c.validate()?;
        Ok(c)
    }

    pub fn validate(&self) -> Result<(), String> {
        let p = &self.params;
        for (n, v) in [
            ("EXP_PARAMS_PAYLOAD", p.exp_params_payload),
            ("EXP_PARAMS_LOOPS", p.exp_params_loops),
            ("EXP_PARAMS_DROP", p.exp_params_drop),
            ("EXP_PARAMS_DELAY", p.exp_params_delay),
            ("TIME_PULL", p.time_pull),
            ("MAX_DELAY", p.max_delay),
            ("CONTROL_RATE", p.control_rate),
            ("CONTROL_BURST", p.control_burst),
            ("CONTROL_MAX_SKEW", p.control_max_skew),
        ] {
            if !v.is_finite() || v < 0.0 {
                return Err(format!(
                    "{n} must be a finite number >= 0 (mean seconds), got {v}"
                ));
            }
        }
        if p.max_retrieve > 10_000
            || p.noise_length > 60_000
            || p.max_queue == 0
            || p.send_queue == 0
            || p.control_burst < 1.0
        {
            return Err(
                "MAX_RETRIEVE, NOISE_LENGTH, MAX_QUEUE, SEND_QUEUE or CONTROL_BURST out of range"
                    .into(),
            );
        }
        if self.role == Role::Client && self.provider.is_none() {
            return Err("a client needs `provider`".into());
        }
        if self.directory.sqlite.is_none() && self.directory.signed.is_none() {
            return Err("directory needs `sqlite` or `signed`".into());
        }
        if self.directory.signed.is_some()
            && self.directory.signing_key.is_none()
            && !self.directory.insecure_any_signer
        {
            return Err(
                "a signed directory needs `signing_key` (or insecure_any_signer = true)".into(),
            );
        }
        Ok(())
    }
}
