//! Relay configuration (TOML). Documented in `docs/relay.md`.

use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::client::config::AuthorityEntry;
use onionmix_proto::exitpolicy::ExitPolicy;

/// `onionmix relay` configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RelayConfig {
    /// Where keys and state live.
    pub data_dir: PathBuf,
    /// Relay nickname (1-19 alphanumeric characters).
    pub nickname: String,
    /// Address to listen on for ORPort connections.
    pub or_listen: SocketAddr,
    /// Address advertised in the descriptor (defaults to `or_listen`'s IP).
    #[serde(default)]
    pub address: Option<IpAddr>,
    /// Act as an exit.
    #[serde(default)]
    pub exit: bool,
    /// As an exit, also carry UDP streams (CONNECT_UDP/DATAGRAM, proposal
    /// 339 as docs/udp-over-tor.md describes; advertised as `Datagram=1`).
    /// The exit policy applies to UDP targets as to TCP ones. Off by
    /// default.
    #[serde(default)]
    pub exit_udp: bool,
    /// Exit policy lines in tor syntax (used when `exit` is set). As in
    /// tor, a policy that does not end in `accept *:*` or `reject *:*` is
    /// followed by tor's default exit policy; empty means the default.
    #[serde(default)]
    pub exit_policy: Vec<String>,
    /// Accept BEGIN on a circuit whose previous hop is a client (an
    /// unauthenticated connection), i.e. act as a one-hop proxy. Off, as
    /// in stock tor (which refuses such streams with END TORPROTOCOL; its
    /// old `AllowSingleHopExits`): a one-hop exit gives its users no
    /// anonymity and attracts abuse. Benchmarks turn it on.
    #[serde(default)]
    pub allow_single_hop_exits: bool,
    /// Reject private/local addresses before the policy (tor's
    /// ExitPolicyRejectPrivate, on by default).
    #[serde(default = "yes")]
    pub exit_policy_reject_private: bool,
    /// Trusted directory authorities (descriptors are uploaded to each).
    #[serde(rename = "authority", default)]
    pub authorities: Vec<AuthorityEntry>,
    /// Serve directory documents over BEGIN_DIR as a cache of the
    /// authorities (advertised as `tunnelled-dir-server`; needed for the
    /// V2Dir flag, which tor clients require of guards). On by default.
    #[serde(default = "yes")]
    pub dir_cache: bool,
    /// Contact info for the descriptor.
    #[serde(default)]
    pub contact: Option<String>,
    /// Advertised bandwidth in bytes/s (rate, burst, observed).
    #[serde(default = "default_bw")]
    pub bandwidth: u64,
    /// Private network: allow extending to private addresses, short
    /// publication intervals.
    #[serde(default)]
    pub testing_network: bool,
    /// Most circuits one connection (peer) may have open.
    #[serde(default = "default_circs_per_chan")]
    pub max_circuits_per_channel: usize,
    /// CREATE2 cells per second allowed per connection (burst = 2x).
    #[serde(default = "default_create_rate")]
    pub create_rate_per_channel: u32,
    /// Most circuits overall.
    #[serde(default = "default_max_circs")]
    pub max_circuits: usize,
    /// Most bytes all channels' outbound queues may hold together (tor's
    /// `MaxMemInQueues`); over it the largest queues are dropped first and
    /// their channels closed. Default: 40% of physical memory, at most
    /// 8 GiB, at least 256 MiB.
    #[serde(default)]
    pub max_mem_in_queues: Option<u64>,
    /// Most open connections (channels).
    #[serde(default = "default_max_chans")]
    pub max_channels: usize,
    /// Seconds a channel from a client (a peer that did not authenticate
    /// as a relay) may stay open without circuits; each channel waits
    /// this long plus up to half again, chosen at random (tor: 3-4.5 min).
    #[serde(default = "default_idle_client")]
    pub idle_client_channel_secs: u64,
    /// The same for channels to and from relays (tor: about an hour).
    #[serde(default = "default_idle_relay")]
    pub idle_relay_channel_secs: u64,
    /// The circuit-creation DoS defence (tor's `DoSCircuitCreationEnabled`):
    /// unset follows the consensus (`DoSCircuitCreationEnabled`, off when
    /// absent), true or false overrides it. Its other values always come
    /// from the consensus.
    #[serde(default)]
    pub dos_circuit_creation: Option<bool>,
    /// Connections open at once from one address that is not a known relay
    /// or authority (tor's DoSConnectionMaxConcurrentCount).
    #[serde(default = "default_conns_per_addr")]
    pub max_conns_per_addr: usize,
    /// Worker threads (0: one per core).
    #[serde(default)]
    pub threads: usize,
    /// Prometheus metrics over HTTP (tor's `MetricsPort`); loopback
    /// unless `allow_public_metrics`.
    #[serde(default)]
    pub metrics_port: Option<std::net::SocketAddr>,
    /// Allow the metrics port on a non-loopback address.
    #[serde(default)]
    pub allow_public_metrics: bool,
    /// Seconds between descriptor uploads.
    #[serde(default = "default_publish")]
    pub publish_interval_secs: u64,
    /// Onion key (ntor and TAP) lifetime before rotation (default 28 days,
    /// tor's `onion-key-rotation-days`).
    #[serde(default = "default_onion_rotation")]
    pub onion_key_rotation_secs: u64,
    /// How long the previous ntor key is still accepted after a rotation
    /// (default 7 days, tor's `onion-key-grace-period-days`).
    #[serde(default = "default_onion_grace")]
    pub onion_key_grace_secs: u64,
    /// Family members (hex fingerprints, `$`-prefixed or not).
    #[serde(default)]
    pub family: Vec<String>,
    /// DNS server the exit asks (UDP, A/AAAA queries) instead of the
    /// system resolver; testbeds point it at the sink's DNS responder.
    #[serde(default)]
    pub nameserver: Option<SocketAddr>,
    /// Most introduction circuits this relay serves as introduction point
    /// (one per service auth key).
    #[serde(default = "default_hs_table")]
    pub hs_max_intro_circuits: usize,
    /// Most rendezvous cookies waiting for a service at once.
    #[serde(default = "default_hs_table")]
    pub hs_max_rend_cookies: usize,
    /// Seconds a rendezvous circuit waits for the service's RENDEZVOUS1
    /// before it is closed (stock clients give up after at most about
    /// three circuit-build timeouts).
    #[serde(default = "default_rend_lifetime")]
    pub hs_rend_cookie_lifetime_secs: u64,
    /// Most onion-service descriptors held as HSDir.
    #[serde(default = "default_hsdir_descs")]
    pub hsdir_max_descriptors: usize,
    /// Most bytes of onion-service descriptors held as HSDir.
    #[serde(default = "default_hsdir_bytes")]
    pub hsdir_max_bytes: usize,
    /// Rate-limit INTRODUCE2 on introduction circuits whose service sent
    /// no DoS extension (tor's consensus parameter
    /// `HiddenServiceEnableIntroDoSDefense`, default off).
    #[serde(default)]
    pub hs_intro_dos_defense: bool,
    /// ... at this rate (`HiddenServiceEnableIntroDoSRatePerSec`, 25).
    #[serde(default = "default_intro_rate")]
    pub hs_intro_dos_rate_per_sec: u32,
    /// ... with this burst (`HiddenServiceEnableIntroDoSBurstPerSec`, 200).
    #[serde(default = "default_intro_burst")]
    pub hs_intro_dos_burst_per_sec: u32,
    /// Seconds between writes of `<data_dir>/stats.json` (the relay's
    /// counters); 0: never.
    #[serde(default = "default_stats_interval")]
    pub stats_interval_secs: u64,
    /// Control port (tor's `ControlPort`), e.g. `"127.0.0.1:9051"`;
    /// loopback unless `allow_public_control`.
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
    /// Accepted control passwords, hashed (`onionmix hash-password`).
    #[serde(default)]
    pub hashed_control_password: Vec<String>,
    /// Most simultaneous control connections.
    #[serde(default = "default_max_control")]
    pub max_control_connections: usize,
    /// Allow the control port on a non-loopback address.
    #[serde(default)]
    pub allow_public_control: bool,
    /// Exit when this process is gone (tor's `__OwningControllerProcess`).
    #[serde(default)]
    pub owning_controller_process: Option<u32>,
    /// After `SIGNAL SHUTDOWN`, seconds to stop accepting connections
    /// before exiting (tor's `ShutdownWaitLength`, default 30).
    #[serde(default = "default_shutdown_wait")]
    pub shutdown_wait_secs: u64,
    /// The file this was loaded from (`GETINFO config-file`).
    #[serde(skip)]
    pub config_path: Option<PathBuf>,
    /// `config_path` is an authority's file (the embedded relay's).
    #[serde(skip)]
    pub config_is_authority: bool,
    /// Conflux (proposal 329) at this exit: link a client's circuits into
    /// sets and advertise `Conflux=1` (tor's `ConfluxEnabled`; the
    /// consensus's `cfx_enabled` can still turn it off).
    #[serde(default = "yes")]
    pub conflux: bool,
    /// Most bytes one conflux set's reorder queue may hold; a message past
    /// it closes the circuit it came on (tor's `cfx_max_oooq_bytes`,
    /// which is unlimited by default; the lower of the two applies).
    #[serde(default = "default_conflux_ooo")]
    pub conflux_max_ooo_bytes: usize,
    /// Accept and open QUIC links to other onionmix relays
    /// (`docs/quic-links.md`), advertised in the descriptor
    /// (`onionmix-quic`). Off by default: links are TLS only, as stock
    /// tor's.
    #[serde(default)]
    pub quic: bool,
    /// UDP address of the QUIC listener (default: `or_listen`'s address and
    /// port, on UDP). The advertised port is this one's.
    #[serde(default)]
    pub quic_listen: Option<SocketAddr>,
    /// Seconds a QUIC attempt (QUIC handshake and link handshake) may take
    /// before the link falls back to TLS.
    #[serde(default = "default_quic_fallback")]
    pub quic_fallback_secs: u64,
    /// Congestion controller of the QUIC links' sending side: `auto`
    /// (default: BBR if the host's TCP uses BBR, else CUBIC), `cubic`,
    /// `bbr`, `newreno` or `cubic-per-circuit` (CUBIC taking one flow's
    /// share per active circuit, up to 4; `docs/quic-links.md` §8).
    #[serde(default = "default_quic_congestion")]
    pub quic_congestion: String,
}

fn default_max_control() -> usize {
    64
}
fn default_shutdown_wait() -> u64 {
    30
}

fn default_conflux_ooo() -> usize {
    8 << 20
}

fn default_quic_congestion() -> String {
    "auto".into()
}

fn default_quic_fallback() -> u64 {
    5
}

fn default_hs_table() -> usize {
    16_384
}
fn default_rend_lifetime() -> u64 {
    600
}
fn default_hsdir_descs() -> usize {
    32_768
}
fn default_hsdir_bytes() -> usize {
    128 << 20
}
fn default_intro_rate() -> u32 {
    super::hs::dos::DEFAULT_RATE_PER_SEC
}
fn default_intro_burst() -> u32 {
    super::hs::dos::DEFAULT_BURST_PER_SEC
}
fn default_stats_interval() -> u64 {
    5
}

fn yes() -> bool {
    true
}
fn default_bw() -> u64 {
    10 * 1024 * 1024
}
fn default_circs_per_chan() -> usize {
    1024
}
fn default_create_rate() -> u32 {
    100
}
fn default_max_circs() -> usize {
    65536
}
fn default_max_chans() -> usize {
    4096
}
fn default_idle_client() -> u64 {
    180
}
fn default_idle_relay() -> u64 {
    3600
}
fn default_conns_per_addr() -> usize {
    100
}
fn default_onion_rotation() -> u64 {
    28 * 86400
}
fn default_onion_grace() -> u64 {
    7 * 86400
}
fn default_publish() -> u64 {
    18 * 3600
}

/// Tor's default exit policy after the private-address rejections.
pub const TOR_DEFAULT_EXIT_POLICY: &[&str] = &[
    "reject *:25",
    "reject *:119",
    "reject *:135-139",
    "reject *:445",
    "reject *:563",
    "reject *:1214",
    "reject *:4661-4666",
    "reject *:6346-6429",
    "reject *:6699",
    "reject *:6881-6999",
    "accept *:*",
];

impl RelayConfig {
    /// Load and validate.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut c = Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        c.config_path = Some(std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned()));
        Ok(c)
    }

    /// The control-port settings.
    pub fn control_settings(&self) -> crate::control::server::ControlSettings {
        crate::control::server::ControlSettings {
            port: self.control_port,
            socket: self.control_socket.clone(),
            cookie_authentication: self.cookie_authentication,
            cookie_auth_file: self.cookie_auth_file.clone(),
            hashed_control_password: self.hashed_control_password.clone(),
            max_connections: self.max_control_connections,
            data_dir: self.data_dir.clone(),
        }
    }

    /// Parse and validate.
    pub fn parse(text: &str) -> Result<Self, String> {
        let c: RelayConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        if c.nickname.is_empty()
            || c.nickname.len() > 19
            || !c.nickname.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            return Err(format!(
                "nickname {:?} must be 1-19 alphanumeric characters",
                c.nickname
            ));
        }
        c.exit_policy()?;
        c.control_settings().check(c.allow_public_control)?;
        if let Some(m) = c.metrics_port
            && !m.ip().is_loopback()
            && !c.allow_public_metrics
        {
            return Err(format!(
                "metrics_port {m} is not a loopback address; set allow_public_metrics = true if you mean it"
            ));
        }
        if c.hs_intro_dos_rate_per_sec > c.hs_intro_dos_burst_per_sec
            || c.hs_intro_dos_burst_per_sec > i32::MAX as u32
        {
            return Err(
                "hs_intro_dos_burst_per_sec must be at least the rate and at most 2^31-1".into(),
            );
        }
        if c.quic_fallback_secs == 0 || c.quic_fallback_secs > 120 {
            return Err("quic_fallback_secs must be between 1 and 120".into());
        }
        c.quic_congestion
            .parse::<onionmix_link::quic::QuicCongestion>()
            .map_err(|e| format!("quic_congestion: {e}"))?;
        if c.onion_key_rotation_secs < 60 || c.onion_key_grace_secs >= c.onion_key_rotation_secs {
            return Err(
                "onion_key_rotation_secs must be >= 60 and longer than onion_key_grace_secs".into(),
            );
        }
        Ok(c)
    }

    /// The effective exit policy.
    pub fn exit_policy(&self) -> Result<ExitPolicy, String> {
        if !self.exit {
            return Ok(ExitPolicy::reject_all());
        }
        let mut p = if self.exit_policy.is_empty() {
            ExitPolicy::parse(TOR_DEFAULT_EXIT_POLICY)
        } else {
            ExitPolicy::parse(&self.exit_policy)
        }
        .map_err(|e| e.to_string())?;
        if self.exit_policy_reject_private {
            // As tor: private networks, and our own published address.
            p = p
                .with_private_rejected()
                .with_addresses_rejected(&[self.advertised_ip()]);
        }
        // As in tor: a policy that does not end in a catch-all
        // (`accept *:*` / `reject *:*`) augments the default exit policy,
        // which is appended.
        let catch_all = p.rules.last().is_some_and(|r| {
            r.addr.is_none()
                && r.family == onionmix_proto::exitpolicy::Family::Any
                && r.ports == (1, 65535)
        });
        if !catch_all {
            let default = ExitPolicy::parse(TOR_DEFAULT_EXIT_POLICY).map_err(|e| e.to_string())?;
            p.rules.extend(default.rules);
        }
        Ok(p)
    }

    /// Limits of the onion-service roles.
    pub fn hs_limits(&self) -> super::hs::HsLimits {
        super::hs::HsLimits {
            max_intro_circuits: self.hs_max_intro_circuits,
            max_rend_cookies: self.hs_max_rend_cookies,
            rend_cookie_lifetime: self.hs_rend_cookie_lifetime_secs,
            hsdir_max_descriptors: self.hsdir_max_descriptors,
            hsdir_max_bytes: self.hsdir_max_bytes,
            intro_dos: super::hs::dos::IntroDosDefaults {
                enabled: self.hs_intro_dos_defense,
                rate_per_sec: self.hs_intro_dos_rate_per_sec,
                burst_per_sec: self.hs_intro_dos_burst_per_sec,
            },
        }
    }

    /// Advertised address.
    pub fn advertised_ip(&self) -> IpAddr {
        self.address.unwrap_or(self.or_listen.ip())
    }

    /// Where the QUIC listener binds when QUIC is on; port 0 means "the
    /// ORPort's number" (resolved once the ORPort is bound).
    pub fn quic_bind(&self) -> Option<SocketAddr> {
        self.quic
            .then(|| self.quic_listen.unwrap_or(self.or_listen))
    }

    /// The bounds of this relay's QUIC links: the defaults, with as many
    /// circuit streams per link as circuits per channel, and room for as
    /// many links as channels each way: inbound links are held to
    /// `max_channels` by the ORPort's admission (which keeps slots for
    /// known relays), outgoing ones by the channel registry, and one
    /// shared cap of `max_channels` let unknown peers' inbound links and
    /// our outgoing ones together shut known relays out.
    pub fn quic_limits(&self) -> onionmix_link::QuicLimits {
        let d = onionmix_link::QuicLimits::default();
        onionmix_link::QuicLimits {
            max_circuit_streams: u32::try_from(self.max_circuits_per_channel)
                .unwrap_or(u32::MAX)
                .clamp(1, onionmix_link::quic::MAX_CIRCUIT_STREAMS_CAP),
            max_connections: self.max_channels.max(1).saturating_mul(2),
            // Checked when the configuration was read.
            congestion: self
                .quic_congestion
                .parse::<onionmix_link::quic::QuicCongestion>()
                .unwrap_or_default()
                .resolve(),
            ..d
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quic_congestion_is_checked() {
        let base = "data_dir='/x'\nnickname='r'\nor_listen='127.0.0.1:1'\nquic=true\n";
        let c = RelayConfig::parse(base).unwrap();
        assert_eq!(
            c.quic_limits().congestion,
            onionmix_link::quic::QuicCongestion::Auto.resolve()
        );
        // Room for inbound links up to the admission cap and as many
        // outgoing ones.
        assert_eq!(c.quic_limits().max_connections, 2 * c.max_channels);
        let c = RelayConfig::parse(&format!("{base}quic_congestion='bbr'")).unwrap();
        assert_eq!(
            c.quic_limits().congestion,
            onionmix_link::quic::QuicCongestion::Bbr
        );
        let c = RelayConfig::parse(&format!("{base}quic_congestion='cubic-per-circuit'")).unwrap();
        assert_eq!(
            c.quic_limits().congestion,
            onionmix_link::quic::QuicCongestion::CubicPerCircuit
        );
        let e = RelayConfig::parse(&format!("{base}quic_congestion='vegas'")).unwrap_err();
        assert!(e.contains("quic_congestion"), "{e}");
    }

    #[test]
    fn parse_and_policy() {
        let c = RelayConfig::parse(
            r#"
data_dir = "/tmp/r"
nickname = "relay0"
or_listen = "127.0.0.1:5000"
exit = true
exit_policy = ["accept 127.0.0.0/8:*"]
exit_policy_reject_private = false
"#,
        )
        .unwrap();
        let p = c.exit_policy().unwrap();
        assert!(p.allows(&"127.0.0.1".parse().unwrap(), 80));
        // No final catch-all: tor's default exit policy follows, as in tor.
        assert!(p.allows(&"8.8.8.8".parse().unwrap(), 80));
        assert!(!p.allows(&"8.8.8.8".parse().unwrap(), 25));
        assert!(p.summary(false).allows(443));
        // Ending in "reject *:*" replaces the default.
        let strict = RelayConfig::parse(
            "data_dir='/x'\nnickname='r'\nor_listen='127.0.0.1:1'\nexit=true\nexit_policy_reject_private=false\nexit_policy=['accept 127.0.0.0/8:*','reject *:*']",
        )
        .unwrap()
        .exit_policy()
        .unwrap();
        assert!(strict.allows(&"127.0.0.1".parse().unwrap(), 80));
        assert!(!strict.allows(&"8.8.8.8".parse().unwrap(), 80));
        assert!(
            RelayConfig::parse("data_dir='/x'\nnickname='bad name'\nor_listen='127.0.0.1:1'")
                .is_err()
        );
        let non_exit =
            RelayConfig::parse("data_dir='/x'\nnickname='r'\nor_listen='127.0.0.1:1'").unwrap();
        assert!(
            !non_exit
                .exit_policy()
                .unwrap()
                .allows(&"8.8.8.8".parse().unwrap(), 80)
        );
    }
}
