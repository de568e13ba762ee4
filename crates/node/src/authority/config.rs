//! The authority's configuration file and keys.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::UNIX_EPOCH;

use serde::Deserialize;
use tracing::info;

use onionmix_crypto::keys::{AUTHORITY_IDENTITY_BITS, AuthorityKeys};
use onionmix_netdoc::AuthCertificate;

use super::CERT_LIFETIME;
use crate::client::config::AuthorityEntry;
use crate::clock::now_unix;
use crate::relay::config::RelayConfig;

/// `onionmix authority` configuration (TOML; docs/authority.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorityConfig {
    /// Keys and state.
    pub data_dir: PathBuf,
    /// Nickname (also the embedded relay's).
    pub nickname: String,
    /// ORPort listen address (the embedded relay).
    pub or_listen: SocketAddr,
    /// DirPort listen address (HTTP).
    pub dir_listen: SocketAddr,
    /// Advertised address (default: `or_listen`'s IP).
    #[serde(default)]
    pub address: Option<IpAddr>,
    /// Contact line in votes.
    #[serde(default = "default_contact")]
    pub contact: String,
    /// Private network: testing flag thresholds, private addresses.
    #[serde(default)]
    pub testing_network: bool,
    /// Voting interval (default 3600 s; 20 s suits test networks).
    #[serde(default = "default_interval")]
    pub voting_interval_secs: u64,
    /// Vote delay (default 300 s).
    #[serde(default = "default_delay")]
    pub vote_delay_secs: u64,
    /// Distribution delay (default 300 s).
    #[serde(default = "default_delay")]
    pub dist_delay_secs: u64,
    /// How often each relay's reachability is tested (default 60 s).
    #[serde(default = "default_reach")]
    pub reachability_interval_secs: u64,
    /// Most relays tracked.
    #[serde(default = "default_max_relays")]
    pub max_relays: usize,
    /// DirPort connections open at once (a quarter kept for other
    /// authorities and reachable relays; 8 at once per other address).
    #[serde(default = "default_dirport_conns")]
    pub dirport_max_conns: usize,
    /// QUIC links for the embedded relay (see the relay's `quic`).
    #[serde(default)]
    pub quic: bool,
    /// Its QUIC listener (see the relay's `quic_listen`).
    #[serde(default)]
    pub quic_listen: Option<SocketAddr>,
    /// Its QUIC congestion controller (see the relay's `quic_congestion`).
    #[serde(default)]
    pub quic_congestion: Option<String>,
    /// Every authority of the network, this one included.
    #[serde(rename = "authority", default)]
    pub authorities: Vec<AuthorityEntry>,
    /// Consensus parameters this authority votes for.
    #[serde(default)]
    pub params: BTreeMap<String, i32>,
    /// Run the shared-random protocol (tor's `AuthDirSharedRandomness`,
    /// default on): vote `shared-rand-*` lines and put the agreed SRVs in
    /// the consensus.
    #[serde(default = "yes")]
    pub shared_randomness: bool,
    /// Uptime a relay needs for the HSDir flag (tor's
    /// `MinUptimeHidServDirectoryV2`; default 96 hours, 0 with
    /// `testing_network`).
    #[serde(default)]
    pub min_uptime_hsdir_secs: Option<u64>,
    /// Testing networks only: relays (`*`, nicknames, fingerprints) voted
    /// HSDir whatever their descriptor says (tor's
    /// `TestingDirAuthVoteHSDir`).
    #[serde(default)]
    pub testing_vote_hsdir: Vec<String>,
    /// Testing networks only: no HSDir flag for relays not in
    /// `testing_vote_hsdir` (tor's `TestingDirAuthVoteHSDirIsStrict`).
    #[serde(default)]
    pub testing_vote_hsdir_is_strict: bool,
    /// Control port, as a relay's (`docs/relay.md`): the relay commands
    /// and GETINFO keys, answered by the embedded relay.
    #[serde(default)]
    pub control_port: Option<SocketAddr>,
    /// Control port on a unix socket (mode 0600).
    #[serde(default)]
    pub control_socket: Option<PathBuf>,
    /// Cookie authentication; default: on unless a password is set.
    #[serde(default)]
    pub cookie_authentication: Option<bool>,
    /// Where the cookie goes (default `<data_dir>/control_auth_cookie`).
    #[serde(default)]
    pub cookie_auth_file: Option<PathBuf>,
    /// Accepted control passwords, hashed (`onionmix hash-password`).
    #[serde(default)]
    pub hashed_control_password: Vec<String>,
    /// Most simultaneous control connections.
    #[serde(default = "default_max_control")]
    pub max_control_connections: usize,
    /// Allow the control port on a non-loopback address.
    #[serde(default)]
    pub allow_public_control: bool,
    /// Exit when this process is gone (`__OwningControllerProcess`).
    #[serde(default)]
    pub owning_controller_process: Option<u32>,
    /// After `SIGNAL SHUTDOWN`, seconds before exiting (default 30).
    #[serde(default = "default_shutdown_wait")]
    pub shutdown_wait_secs: u64,
    /// The file this was loaded from.
    #[serde(skip)]
    pub config_path: Option<PathBuf>,
}

fn default_max_control() -> usize {
    64
}
fn default_shutdown_wait() -> u64 {
    30
}

fn yes() -> bool {
    true
}

fn default_contact() -> String {
    "onionmix authority".into()
}
fn default_interval() -> u64 {
    3600
}
fn default_delay() -> u64 {
    300
}
fn default_reach() -> u64 {
    60
}
fn default_dirport_conns() -> usize {
    1024
}
fn default_max_relays() -> usize {
    8192
}

impl AuthorityConfig {
    /// Load and validate.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut c = Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        c.config_path = Some(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned()));
        Ok(c)
    }

    /// Parse and validate.
    pub fn parse(text: &str) -> Result<Self, String> {
        let c: AuthorityConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        if c.nickname.is_empty()
            || c.nickname.len() > 19
            || !c.nickname.chars().all(|ch| ch.is_ascii_alphanumeric())
        {
            return Err(format!(
                "nickname {:?}: 1 to 19 letters and digits",
                c.nickname
            ));
        }
        let i = c.voting_interval_secs;
        if !(10..=86400).contains(&i) || 86400 % i != 0 {
            return Err(format!(
                "voting_interval_secs {i}: between 10 and 86400, dividing a day"
            ));
        }
        if c.vote_delay_secs == 0
            || c.dist_delay_secs == 0
            || c.vote_delay_secs + c.dist_delay_secs >= i
        {
            return Err("vote_delay_secs and dist_delay_secs must be > 0 and together shorter than the voting interval".into());
        }
        if c.reachability_interval_secs == 0 {
            return Err("reachability_interval_secs must be > 0".into());
        }
        Ok(c)
    }

    pub(super) fn address_v4(&self) -> Ipv4Addr {
        match self.address.unwrap_or(self.or_listen.ip()) {
            IpAddr::V4(a) => a,
            IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
        }
    }

    /// The embedded relay's configuration.
    pub fn relay_config(&self) -> Result<RelayConfig, String> {
        let mut s = format!(
            "data_dir = {:?}\nnickname = {:?}\nor_listen = \"{}\"\ntesting_network = {}\n",
            self.data_dir.display().to_string(),
            self.nickname,
            self.or_listen,
            self.testing_network
        );
        if let Some(a) = self.address {
            s.push_str(&format!("address = \"{a}\"\n"));
        }
        if self.quic {
            s.push_str("quic = true\n");
        }
        if let Some(q) = self.quic_listen {
            s.push_str(&format!("quic_listen = \"{q}\"\n"));
        }
        if let Some(c) = &self.quic_congestion {
            s.push_str(&format!("quic_congestion = {c:?}\n"));
        }
        for a in &self.authorities {
            s.push_str(&format!(
                "\n[[authority]]\nnickname = {:?}\nv3ident = {:?}\nfingerprint = {:?}\ndir_addr = \"{}\"\nor_addr = \"{}\"\n",
                a.nickname, a.v3ident, a.fingerprint, a.dir_addr, a.or_addr
            ));
        }
        let mut r = RelayConfig::parse(&s)?;
        r.control_port = self.control_port;
        r.control_socket = self.control_socket.clone();
        r.cookie_authentication = self.cookie_authentication;
        r.cookie_auth_file = self.cookie_auth_file.clone();
        r.hashed_control_password = self.hashed_control_password.clone();
        r.max_control_connections = self.max_control_connections;
        r.allow_public_control = self.allow_public_control;
        r.owning_controller_process = self.owning_controller_process;
        r.shutdown_wait_secs = self.shutdown_wait_secs;
        r.config_path = self.config_path.clone();
        r.config_is_authority = true;
        r.control_settings().check(r.allow_public_control)?;
        Ok(r)
    }
}
/// Load the authority keys from `<data_dir>/keys`, generating them (and
/// the certificate) on first start.
pub fn load_or_generate_keys(cfg: &AuthorityConfig) -> Result<AuthorityKeys, String> {
    let dir = cfg.data_dir.join("keys");
    if dir.join("authority_identity_key").exists() {
        let k = AuthorityKeys::load(&dir).map_err(|e| e.to_string())?;
        let now = now_unix();
        let cert = AuthCertificate::parse(&k.certificate, crate::clock::now());
        let expiring = match &cert {
            Ok(c) => {
                c.expires()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
                    < now + 30 * 86400
            }
            Err(_) => true,
        };
        if expiring {
            let mut k = k;
            k.rotate_signing_key(
                &mut rand::rngs::OsRng,
                now,
                CERT_LIFETIME,
                Some(&format!("{}:{}", cfg.address_v4(), cfg.dir_listen.port())),
            )
            .map_err(|e| e.to_string())?;
            k.save(&dir).map_err(|e| e.to_string())?;
            info!("rotated the authority signing key");
            return Ok(k);
        }
        Ok(k)
    } else {
        let k = AuthorityKeys::generate(
            &mut rand::rngs::OsRng,
            AUTHORITY_IDENTITY_BITS,
            now_unix(),
            CERT_LIFETIME,
            Some(&format!("{}:{}", cfg.address_v4(), cfg.dir_listen.port())),
        )
        .map_err(|e| e.to_string())?;
        k.save(&dir).map_err(|e| e.to_string())?;
        info!("generated new authority keys");
        Ok(k)
    }
}

/// Generate (or load) keys and return `(relay fingerprint, v3ident)`.
pub fn list_fingerprint(cfg: &AuthorityConfig) -> Result<(String, String), String> {
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| format!("cannot create {}: {e}", cfg.data_dir.display()))?;
    let ak = load_or_generate_keys(cfg)?;
    let rk = crate::relay::load_or_generate_keys(&cfg.data_dir)?;
    Ok((hex::encode_upper(rk.rsa_id()), ak.v3ident()))
}
