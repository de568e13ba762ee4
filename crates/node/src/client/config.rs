//! Client configuration (TOML). The testnet launcher writes this schema;
//! `docs/client.md` documents it.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// One directory authority the client trusts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorityEntry {
    /// Nickname (for logs).
    pub nickname: String,
    /// Hex fingerprint of the authority's v3 identity key (signs key certificates).
    pub v3ident: String,
    /// Hex RSA identity fingerprint of the authority's relay.
    pub fingerprint: String,
    /// DirPort address.
    pub dir_addr: SocketAddr,
    /// ORPort address.
    pub or_addr: SocketAddr,
}

/// `onionmix client` configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClientConfig {
    /// Where state (guards, cached directory) lives.
    pub data_dir: PathBuf,
    /// SOCKS5 listen address (loopback by default).
    #[serde(default = "default_socks")]
    pub socks_listen: SocketAddr,
    /// Relax rules for private loopback networks (distinct subnets, private
    /// addresses, short timeouts).
    #[serde(default)]
    pub testing_network: bool,
    /// Fraction of weighted paths that must have descriptors before we
    /// build circuits.
    #[serde(default = "default_paths_needed")]
    pub paths_needed_to_build_circuits: f64,
    /// Trusted directory authorities.
    #[serde(rename = "authority", default)]
    pub authorities: Vec<AuthorityEntry>,
    /// Give up building a circuit after this many seconds when the
    /// timeout is not learned (tor's `CircuitBuildTimeout`).
    #[serde(default = "default_cbt")]
    pub circuit_build_timeout_secs: u64,
    /// Learn the build timeout from observed build times (path-spec §2.4,
    /// tor's `LearnCircuitBuildTimeout`, on by default). The histogram is
    /// kept in `<data_dir>/state`.
    #[serde(default = "default_true")]
    pub learn_circuit_build_timeout: bool,
    /// Keep clean exit circuits built ahead of need for recently used ports
    /// (path-spec §2.1.1; tor's `DisablePredictedCircuits 0`).
    #[serde(default = "default_true")]
    pub preemptive_circuits: bool,
    /// How long ports stay predicted without use: a random time between
    /// this and twice this (tor's `CircuitsAvailableTimeout`).
    #[serde(default = "default_available")]
    pub circuits_available_timeout_secs: u64,
    /// Go dormant after this long without user activity (tor's
    /// `DormantClientTimeout`: 24 hours, at least 10 minutes; any
    /// positive value in a testing network).
    #[serde(default = "default_dormant_timeout")]
    pub dormant_client_timeout_secs: u64,
    /// Whether idleness makes the client dormant at all (tor's
    /// `DormantTimeoutEnabled`).
    #[serde(default = "default_true")]
    pub dormant_timeout_enabled: bool,
    /// Open streams count as activity (tor's
    /// `DormantTimeoutDisabledByIdleStreams`).
    #[serde(default = "default_true")]
    pub dormant_timeout_disabled_by_idle_streams: bool,
    /// Vanguards-lite (proposal 333; tor's `VanguardsLiteEnabled`, on by
    /// default): the second hop of onion-service circuits comes from a
    /// small set of layer 2 guards kept for days.
    #[serde(default = "default_true")]
    pub vanguards_lite: bool,
    /// Send the application's first bytes right after BEGIN, before
    /// CONNECTED, to exits that support it (proposal 181).
    #[serde(default = "default_true")]
    pub optimistic_data: bool,
    /// Pre-build conflux sets (proposal 329: two circuits to one exit
    /// through different guards and middles, linked) to exits that
    /// advertise `Conflux=1`, and prefer them for streams, as tor 0.4.9
    /// does (its `ConfluxEnabled`); the consensus's `cfx_enabled=0` turns
    /// it off.
    #[serde(default = "default_true")]
    pub conflux: bool,
    /// Answer SOCKS CONNECT with success at once, before the exit
    /// connects, so that applications that wait for the reply send data
    /// early too (proposal 309's `OptimisticData` SocksPort flag). A
    /// stream that then fails is hung up on. Off by default.
    #[serde(default)]
    pub socks_optimistic_reply: bool,
    /// Stop attaching new streams to a circuit this long after first use.
    #[serde(default = "default_dirtiness")]
    pub max_circuit_dirtiness_secs: u64,
    /// Give up waiting for CONNECTED/RESOLVED after this many seconds.
    #[serde(default = "default_stream_timeout")]
    pub stream_timeout_secs: u64,
    /// Allow SOCKS on a non-loopback address (off by default).
    #[serde(default)]
    pub allow_public_socks: bool,
    /// Refuse SOCKS requests for internal destinations (private, loopback
    /// and link-local addresses, `localhost` and `*.local`) and close
    /// streams whose exit reports an internal address, as tor's
    /// `ClientRejectInternalAddresses` and `ClientDNSRejectInternalAddresses`:
    /// an exit would reach its own network, and a hostile one could answer
    /// a name with an address on the user's. Unset: on, except with
    /// `testing_network` (as tor's `TestingTorNetwork`).
    #[serde(default)]
    pub client_reject_internal_addresses: Option<bool>,
    /// Answer with tor's extended SOCKS5 error codes (0xF0-0xF7, for onion
    /// services) where they apply, like tor's `SocksPort ... ExtendedErrors`
    /// flag. Off by default, as in tor.
    #[serde(default)]
    pub socks_extended_errors: bool,
    /// Maximum simultaneous SOCKS connections.
    #[serde(default = "default_max_socks")]
    pub max_socks_connections: usize,
    /// Only use these relays (hex RSA fingerprints, optional `$`) as the
    /// first hop, instead of the guard set (tor's `EntryNodes` with
    /// `StrictNodes 1`). Empty: no restriction.
    #[serde(default)]
    pub entry_nodes: Vec<String>,
    /// Only use these relays as middle hops (tor's `MiddleNodes`).
    #[serde(default)]
    pub middle_nodes: Vec<String>,
    /// Only use these relays as exits (tor's `ExitNodes`, strictly).
    #[serde(default)]
    pub exit_nodes: Vec<String>,
    /// Control port (tor's `ControlPort`), e.g. `"127.0.0.1:9051"`.
    #[serde(default)]
    pub control_port: Option<SocketAddr>,
    /// Control port on a unix socket (mode 0600).
    #[serde(default)]
    pub control_socket: Option<PathBuf>,
    /// Cookie authentication (tor's `CookieAuthentication`); default: on
    /// unless a hashed password is configured.
    #[serde(default)]
    pub cookie_authentication: Option<bool>,
    /// Where the cookie goes (default `<data_dir>/control_auth_cookie`).
    #[serde(default)]
    pub cookie_auth_file: Option<PathBuf>,
    /// Accepted passwords, hashed as `onionmix hash-password` (or
    /// `tor --hash-password`) prints them: `16:...`.
    #[serde(default)]
    pub hashed_control_password: Vec<String>,
    /// Most simultaneous control connections.
    #[serde(default = "default_max_control")]
    pub max_control_connections: usize,
    /// Exit when this process is gone (tor's `__OwningControllerProcess`).
    #[serde(default)]
    pub owning_controller_process: Option<u32>,
    /// Let the controller attach every stream (`__LeaveStreamsUnattached`).
    #[serde(default)]
    pub leave_streams_unattached: bool,
    /// Allow the control port on a non-loopback address.
    #[serde(default)]
    pub allow_public_control: bool,
    /// Prometheus metrics over HTTP (tor's `MetricsPort`).
    #[serde(default)]
    pub metrics_port: Option<SocketAddr>,
    /// Allow the metrics port on a non-loopback address.
    #[serde(default)]
    pub allow_public_metrics: bool,
    /// The file this was loaded from (`GETINFO config-file`, RELOAD).
    #[serde(skip)]
    pub config_path: Option<PathBuf>,
    /// Directory of client-authorization keys for onion services, one
    /// `<name>.auth_private` file each in tor's format (tor's
    /// `ClientOnionAuthDir`).
    #[serde(default)]
    pub client_onion_auth_dir: Option<PathBuf>,
    /// Give up connecting to an onion service (descriptor, introduction,
    /// rendezvous) after this many seconds.
    #[serde(default = "default_onion_connect_timeout")]
    pub onion_connect_timeout_secs: u64,
    /// Solve onion services' PoW puzzles (when their descriptor offers
    /// one) at least at this effort, even if they suggest less (tor always
    /// follows the suggestion; for tests and under attack). 0: follow it.
    #[serde(default)]
    pub onion_pow_min_effort: u32,
    /// Onion services this process hosts (tor's `HiddenServiceDir` /
    /// `HiddenServicePort`; see `docs/onion-services.md`).
    #[serde(rename = "onion_service", default)]
    pub onion_services: Vec<crate::service::config::OnionServiceConfig>,
    /// onionmix QUIC links (`docs/quic-links.md`): reach a first hop that
    /// advertises QUIC (`onionmix-quic` in its microdescriptor) over QUIC,
    /// falling back to TLS, and tell the relays that extend our circuits
    /// which next hops advertise it (a link specifier in EXTEND2, which
    /// stock relays ignore but see). Off by default: the client then
    /// behaves exactly as without QUIC.
    #[serde(default)]
    pub quic: bool,
    /// Seconds a QUIC attempt may take before the client falls back to TLS.
    #[serde(default = "default_quic_fallback")]
    pub quic_fallback_secs: u64,
    /// Congestion controller of the client's QUIC sending side (its
    /// uploads to the guard): `auto` (default: like the host's TCP
    /// controller), `cubic`, `bbr`, `newreno` or `cubic-per-circuit`, as the relay option of
    /// the same name.
    #[serde(default = "default_quic_congestion")]
    pub quic_congestion: String,
}

fn default_quic_fallback() -> u64 {
    5
}

fn default_quic_congestion() -> String {
    "auto".into()
}

/// Parse a relay fingerprint as written in configs: 40 hex digits,
/// optionally prefixed with `$`, spaces allowed.
pub fn parse_fingerprint(s: &str) -> Option<[u8; 20]> {
    let t: String = s
        .trim()
        .trim_start_matches('$')
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    let v = hex::decode(&t).ok()?;
    v.try_into().ok()
}

fn default_socks() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 9050))
}
fn default_paths_needed() -> f64 {
    0.6
}
fn default_cbt() -> u64 {
    60
}
fn default_true() -> bool {
    true
}
fn default_available() -> u64 {
    30 * 60
}
fn default_dormant_timeout() -> u64 {
    24 * 3600
}
/// Tor's least `DormantClientTimeout` outside testing networks.
const MIN_DORMANT_TIMEOUT_SECS: u64 = 600;
fn default_dirtiness() -> u64 {
    600
}
fn default_stream_timeout() -> u64 {
    60
}
fn default_max_socks() -> usize {
    4096
}
fn default_max_control() -> usize {
    64
}

fn default_onion_connect_timeout() -> u64 {
    120
}

/// Configuration errors.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// File could not be read.
    #[error("cannot read {path}: {err}")]
    Read {
        /// Path.
        path: PathBuf,
        /// Error.
        err: std::io::Error,
    },
    /// TOML did not parse.
    #[error("invalid client config {path}: {err}")]
    Parse {
        /// Path.
        path: PathBuf,
        /// Error.
        err: Box<toml::de::Error>,
    },
    /// Semantically invalid.
    #[error("invalid client config: {0}")]
    Invalid(String),
}

impl ClientConfig {
    /// The bounds of the client's QUIC endpoint: the defaults, with the
    /// configured congestion controller.
    pub fn quic_limits(&self) -> Result<onionmix_link::QuicLimits, ConfigError> {
        let congestion = self
            .quic_congestion
            .parse::<onionmix_link::quic::QuicCongestion>()
            .map_err(|e| ConfigError::Invalid(format!("quic_congestion: {e}")))?
            .resolve();
        Ok(onionmix_link::QuicLimits {
            congestion,
            ..onionmix_link::QuicLimits::default()
        })
    }

    /// Load and validate a config file.
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
            path: path.to_owned(),
            err,
        })?;
        let mut c = Self::parse(&text).map_err(|e| match e {
            ConfigError::Parse { err, .. } => ConfigError::Parse {
                path: path.to_owned(),
                err,
            },
            other => other,
        })?;
        c.config_path = Some(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned()));
        Ok(c)
    }

    /// Parse and validate config text.
    pub fn parse(text: &str) -> Result<Self, ConfigError> {
        let c: ClientConfig = toml::from_str(text).map_err(|err| ConfigError::Parse {
            path: PathBuf::new(),
            err: Box::new(err),
        })?;
        c.validate()?;
        Ok(c)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.authorities.is_empty() {
            return Err(ConfigError::Invalid("no [[authority]] configured".into()));
        }
        for a in &self.authorities {
            for (what, v) in [("v3ident", &a.v3ident), ("fingerprint", &a.fingerprint)] {
                if v.len() != 40 || hex::decode(v).is_err() {
                    return Err(ConfigError::Invalid(format!(
                        "authority {}: {what} must be 40 hex digits",
                        a.nickname
                    )));
                }
            }
        }
        if self.quic_fallback_secs == 0 || self.quic_fallback_secs > 120 {
            return Err(ConfigError::Invalid(
                "quic_fallback_secs must be between 1 and 120".into(),
            ));
        }
        self.quic_limits()?;
        if !(0.0..=1.0).contains(&self.paths_needed_to_build_circuits) {
            return Err(ConfigError::Invalid(
                "paths_needed_to_build_circuits must be within 0..1".into(),
            ));
        }
        if !self.socks_listen.ip().is_loopback() && !self.allow_public_socks {
            return Err(ConfigError::Invalid(format!(
                "socks_listen {} is not a loopback address; set allow_public_socks = true if you mean it",
                self.socks_listen
            )));
        }
        for (what, list) in [
            ("entry_nodes", &self.entry_nodes),
            ("middle_nodes", &self.middle_nodes),
            ("exit_nodes", &self.exit_nodes),
        ] {
            if let Some(bad) = list.iter().find(|f| parse_fingerprint(f).is_none()) {
                return Err(ConfigError::Invalid(format!(
                    "{what}: {bad:?} is not a relay fingerprint (40 hex digits)"
                )));
            }
        }
        if let Some(a) = self.metrics_port
            && !a.ip().is_loopback()
            && !self.allow_public_metrics
        {
            return Err(ConfigError::Invalid(format!(
                "metrics_port {a} is not a loopback address; set allow_public_metrics = true if you mean it"
            )));
        }
        crate::client::control::settings(self)
            .check(self.allow_public_control)
            .map_err(ConfigError::Invalid)?;
        for (i, svc) in self.onion_services.iter().enumerate() {
            svc.validate()
                .map_err(|e| ConfigError::Invalid(format!("onion_service #{}: {e}", i + 1)))?;
            if self.onion_services[..i].iter().any(|o| o.dir == svc.dir) {
                return Err(ConfigError::Invalid(format!(
                    "two onion services share the directory {}",
                    svc.dir.display()
                )));
            }
        }
        if self.circuit_build_timeout_secs == 0
            || self.stream_timeout_secs == 0
            || self.circuits_available_timeout_secs == 0
            || self.onion_connect_timeout_secs == 0
        {
            return Err(ConfigError::Invalid("timeouts must be positive".into()));
        }
        let least = if self.testing_network {
            1
        } else {
            MIN_DORMANT_TIMEOUT_SECS
        };
        if self.dormant_client_timeout_secs < least
            || self.dormant_client_timeout_secs > u64::from(u32::MAX)
        {
            return Err(ConfigError::Invalid(format!(
                "dormant_client_timeout_secs must be at least {least} (10 minutes outside testing networks)"
            )));
        }
        Ok(())
    }

    /// When idleness makes the client dormant.
    pub fn dormancy(&self) -> super::dormancy::DormancyConfig {
        super::dormancy::DormancyConfig {
            enabled: self.dormant_timeout_enabled,
            timeout: Duration::from_secs(self.dormant_client_timeout_secs),
            streams_keep_awake: self.dormant_timeout_disabled_by_idle_streams,
        }
    }

    /// The pinned relays per position.
    pub fn node_restrictions(&self) -> onionmix_netdoc::NodeRestrictions {
        let set = |l: &[String]| l.iter().filter_map(|f| parse_fingerprint(f)).collect();
        onionmix_netdoc::NodeRestrictions {
            entry: set(&self.entry_nodes),
            middle: set(&self.middle_nodes),
            exit: set(&self.exit_nodes),
        }
    }

    /// Whether internal destinations are refused
    /// (`client_reject_internal_addresses`; unset: unless a testing
    /// network).
    pub fn rejects_internal_addresses(&self) -> bool {
        self.client_reject_internal_addresses
            .unwrap_or(!self.testing_network)
    }
    /// Circuit build timeout.
    pub fn circuit_build_timeout(&self) -> Duration {
        Duration::from_secs(self.circuit_build_timeout_secs)
    }
    /// Stream timeout.
    pub fn stream_timeout(&self) -> Duration {
        Duration::from_secs(self.stream_timeout_secs)
    }
    /// Dirtiness limit.
    pub fn max_dirtiness(&self) -> Duration {
        Duration::from_secs(self.max_circuit_dirtiness_secs)
    }
    /// Onion-service connect timeout.
    pub fn onion_connect_timeout(&self) -> Duration {
        Duration::from_secs(self.onion_connect_timeout_secs)
    }
}

/// A testing-network client configuration with one made-up authority,
/// data in `data_dir`, and `extra` lines added at the top level.
#[cfg(test)]
pub(crate) fn test_config(data_dir: &std::path::Path, extra: &str) -> ClientConfig {
    let text = format!(
        "data_dir = \"{}\"\n{extra}\n{TEST_BASE}",
        data_dir.display()
    );
    match ClientConfig::parse(&text) {
        Ok(c) => c,
        Err(e) => panic!("test configuration: {e}"),
    }
}

#[cfg(test)]
const TEST_BASE: &str = r#"
socks_listen = "127.0.0.1:0"
testing_network = true
[[authority]]
nickname = "auth0"
v3ident = "0123456789ABCDEF0123456789ABCDEF01234567"
fingerprint = "0123456789ABCDEF0123456789ABCDEF01234567"
dir_addr = "127.0.0.1:7000"
or_addr = "127.0.0.1:5000"
"#;

#[cfg(test)]
mod tests {
    use super::*;

    fn good() -> String {
        format!("data_dir = \"/tmp/x\"\npaths_needed_to_build_circuits = 0.67\n{TEST_BASE}")
            .replace("127.0.0.1:0", "127.0.0.1:9999")
    }

    #[test]
    fn parses_launcher_schema() {
        let c = ClientConfig::parse(&good()).unwrap();
        assert_eq!(c.authorities.len(), 1);
        assert!(c.testing_network);
        assert_eq!(c.socks_listen.port(), 9999);
    }

    #[test]
    fn rejects_bad_configs() {
        assert!(ClientConfig::parse("data_dir = \"/x\"").is_err());
        let bad = good().replace(
            "0123456789ABCDEF0123456789ABCDEF01234567\"\nfingerprint",
            "XYZ\"\nfingerprint",
        );
        assert!(ClientConfig::parse(&bad).is_err());
        let public = good().replace("127.0.0.1:9999", "0.0.0.0:9999");
        assert!(ClientConfig::parse(&public).is_err());
        let unknown = format!("{}\nbogus = 1\n", good());
        assert!(ClientConfig::parse(&unknown).is_err());
    }

    #[test]
    fn dormancy_options_follow_tor() {
        let c = ClientConfig::parse(&good()).unwrap();
        let d = c.dormancy();
        assert!(d.enabled && d.streams_keep_awake);
        assert_eq!(d.timeout, Duration::from_secs(24 * 3600));
        // Short timeouts only in testing networks (tor: at least 10 minutes).
        let short = format!("dormant_client_timeout_secs = 5\n{}", good());
        assert!(ClientConfig::parse(&short).is_ok());
        let real = short.replace("testing_network = true", "testing_network = false");
        assert!(ClientConfig::parse(&real).is_err());
        let ten = real.replace("= 5\n", "= 600\n");
        assert!(ClientConfig::parse(&ten).is_ok());
        let zero = format!("dormant_client_timeout_secs = 0\n{}", good());
        assert!(ClientConfig::parse(&zero).is_err());
    }

    #[test]
    fn quic_congestion_is_checked() {
        let c = ClientConfig::parse(&good()).unwrap();
        assert_eq!(
            c.quic_limits().unwrap().congestion,
            onionmix_link::quic::QuicCongestion::Auto.resolve()
        );
        let bbr = format!("quic_congestion = \"bbr\"\n{}", good());
        let c = ClientConfig::parse(&bbr).unwrap();
        assert_eq!(
            c.quic_limits().unwrap().congestion,
            onionmix_link::quic::QuicCongestion::Bbr
        );
        let bad = format!("quic_congestion = \"vegas\"\n{}", good());
        let e = ClientConfig::parse(&bad).unwrap_err().to_string();
        assert!(e.contains("quic_congestion"), "{e}");
    }
}
