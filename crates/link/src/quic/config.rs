//! The QUIC link's fixed choices (ALPN, error codes) and its bounded
//! limits, and how they become rustls and quinn configurations. The
//! numbers are the ones `docs/quic-links.md` specifies.

use std::sync::Arc;
use std::time::Duration;

use quinn::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn::{IdleTimeout, TransportConfig, VarInt};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::LinkError;
use crate::certpolicy::{TorCertVerifier, provider};

/// The ALPN protocol a QUIC link negotiates; a connection that did not
/// negotiate exactly this is closed.
pub const ALPN: &[u8] = b"onionmix-link/1";

/// The QUIC version links use (RFC 9000); no other is offered or accepted.
pub const QUIC_VERSION: u32 = 1;

/// Application error codes on CONNECTION_CLOSE, RESET_STREAM and
/// STOP_SENDING.
pub mod codes {
    /// Orderly close (channel closed).
    pub const NO_ERROR: u32 = 0;
    /// The peer broke the link mapping (wrong ALPN, control stream not
    /// stream 0, a cell on the wrong stream, a failed link handshake).
    pub const PROTOCOL: u32 = 1;
    /// The peer failed the in-protocol authentication (CERTS or
    /// AUTHENTICATE did not check out, wrong identity).
    pub const AUTH_FAILED: u32 = 2;
    /// A local limit (connections, memory pressure) ended the link.
    pub const RESOURCE: u32 = 3;
    /// A circuit stream is reset with `DESTROY_BASE + reason`: that is
    /// the DESTROY cell (tor-spec §5.4 reason byte) for its circuit.
    pub const DESTROY_BASE: u32 = 0x100;
    /// DESTROY reason PROTOCOL (tor-spec §5.4), for resets that carry no
    /// DESTROY reason.
    const REASON_PROTOCOL: u8 = 1;

    /// The RESET_STREAM / STOP_SENDING code that destroys a circuit with
    /// `reason`.
    pub fn destroy_code(reason: u8) -> u32 {
        DESTROY_BASE + u32::from(reason)
    }

    /// The DESTROY reason a circuit stream's reset code stands for. A code
    /// outside the DESTROY range is a peer bug: reason PROTOCOL.
    pub fn destroy_reason(code: u64) -> u8 {
        code.checked_sub(u64::from(DESTROY_BASE))
            .and_then(|r| u8::try_from(r).ok())
            .unwrap_or(REASON_PROTOCOL)
    }
}

/// The most circuit streams a link may ever allow (a sanity cap on
/// [`QuicLimits::max_circuit_streams`]).
pub const MAX_CIRCUIT_STREAMS_CAP: u32 = 1 << 20;

/// The congestion controller of a QUIC link's sending side (quinn's).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum QuicCongestion {
    /// The family of the host's TCP controller
    /// (`net.ipv4.tcp_congestion_control` of the node's network
    /// namespace), so that a relay's QUIC and TLS links back off alike:
    /// BBR where TCP uses BBR, NewReno for Reno, CUBIC otherwise.
    #[default]
    Auto,
    /// CUBIC (RFC 9438), quinn's default and Linux TCP's.
    Cubic,
    /// BBR (quinn's experimental BBRv1): paced at the measured bottleneck
    /// rate, not backed off by random loss.
    Bbr,
    /// NewReno (RFC 9002's reference controller).
    NewReno,
    /// CUBIC standing for one flow per circuit that sent lately (at most
    /// [`super::cc::MAX_WEIGHT`]): the link's circuits together get what
    /// separate connections would get, at the price of claiming more than
    /// one flow's share at a shared bottleneck ([`super::CubicPerCircuit`]).
    CubicPerCircuit,
}

impl std::str::FromStr for QuicCongestion {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(QuicCongestion::Auto),
            "cubic" => Ok(QuicCongestion::Cubic),
            "bbr" => Ok(QuicCongestion::Bbr),
            "newreno" => Ok(QuicCongestion::NewReno),
            "cubic-per-circuit" => Ok(QuicCongestion::CubicPerCircuit),
            other => Err(format!(
                "unknown QUIC congestion controller {other:?} \
                 (auto, cubic, bbr, newreno, cubic-per-circuit)"
            )),
        }
    }
}

/// Where the host's TCP controller is named (per network namespace).
const HOST_TCP_CONGESTION: &str = "/proc/sys/net/ipv4/tcp_congestion_control";

impl QuicCongestion {
    /// The QUIC controller that matches the TCP controller `tcp` (a name
    /// as in `net.ipv4.tcp_congestion_control`).
    pub fn like_tcp(tcp: &str) -> QuicCongestion {
        match tcp.trim() {
            t if t.starts_with("bbr") => QuicCongestion::Bbr,
            "reno" => QuicCongestion::NewReno,
            _ => QuicCongestion::Cubic,
        }
    }

    /// A concrete controller: [`QuicCongestion::Auto`] becomes the one
    /// like the host's TCP controller (CUBIC if that cannot be read).
    pub fn resolve(self) -> QuicCongestion {
        match self {
            QuicCongestion::Auto => std::fs::read_to_string(HOST_TCP_CONGESTION)
                .map(|t| QuicCongestion::like_tcp(&t))
                .unwrap_or(QuicCongestion::Cubic),
            other => other,
        }
    }

    /// The name the configuration uses.
    pub fn name(self) -> &'static str {
        match self {
            QuicCongestion::Auto => "auto",
            QuicCongestion::Cubic => "cubic",
            QuicCongestion::Bbr => "bbr",
            QuicCongestion::NewReno => "newreno",
            QuicCongestion::CubicPerCircuit => "cubic-per-circuit",
        }
    }
}

/// [`QuicLimits::max_udp_payload`] by default: 6 KiB, four times
/// Ethernet's packets, so a loopback or jumbo-frame transfer pays the
/// per-packet work (packet protection, frames, ACKs, system calls) a
/// quarter as often.
pub const DEFAULT_MAX_UDP_PAYLOAD: u16 = 6 * 1024;
/// [`QuicLimits::udp_socket_buffer`] by default: 1 MiB each way, about
/// 700 datagrams of 1452 bytes. Enough to absorb a burst that meets a
/// busy CPU (no drops in seed 004's scenario 3, where 208 KiB dropped);
/// 4 MiB did as well but let a CPU-bound loopback transfer queue so much
/// that it cost about 15% more CPU per MiB (`docs/quic-links.md` §8).
pub const DEFAULT_UDP_SOCKET_BUFFER: usize = 1024 * 1024;
/// The largest [`QuicLimits::udp_socket_buffer`] (the kernel takes an int).
pub const MAX_UDP_SOCKET_BUFFER: usize = 256 * 1024 * 1024;
/// The smallest UDP payload QUIC allows (RFC 9000 §14).
pub const MIN_UDP_PAYLOAD: u16 = 1200;
/// The largest [`QuicLimits::max_udp_payload`]: quinn hands the kernel up
/// to 10 packets of a connection as one segmented (GSO) send, whose total
/// must fit one IP datagram (65,535 bytes less the IPv4 and UDP headers);
/// with larger packets such sends fail and every packet in them is lost.
pub const MAX_UDP_PAYLOAD: u16 = 6550;

/// Every bound of a QUIC link. The defaults are what relays use; tests
/// shrink them.
#[derive(Debug, Clone)]
pub struct QuicLimits {
    /// Circuit streams the peer may have open towards us at once (the
    /// transport parameter is this plus one, for the control stream).
    pub max_circuit_streams: u32,
    /// Bytes one stream may have in flight towards us (flow control).
    pub stream_receive_window: u32,
    /// Bytes all streams together may have in flight towards us.
    pub receive_window: u32,
    /// Bytes we buffer for sending across all streams.
    pub send_window: u64,
    /// A connection silent this long is dropped (QUIC idle timeout).
    pub idle_timeout: Duration,
    /// The QUIC handshake, and the control stream's arrival after it, must
    /// each finish within this.
    pub handshake_timeout: Duration,
    /// Waiting for stream credit to open a circuit stream gives up after
    /// this.
    pub open_stream_timeout: Duration,
    /// Established plus handshaking connections per transport.
    pub max_connections: usize,
    /// Handshakes the endpoint keeps pending before refusing new ones.
    pub max_pending_handshakes: usize,
    /// Bytes queued towards the peer for one circuit stream (waiting for
    /// its flow-control credit or the connection) at most; a circuit whose
    /// queue would pass this is destroyed with RESOURCELIMIT, as tor closes
    /// a circuit whose cell queue is full.
    pub max_circuit_queue: usize,
    /// The congestion controller of our sending side.
    pub congestion: QuicCongestion,
    /// The largest UDP payload we accept and the ceiling of path MTU
    /// discovery (quinn's default, 1452, fits Ethernet; at most
    /// [`MAX_UDP_PAYLOAD`]). Packets start at 1200 bytes and grow only
    /// where probes of the larger size get through, so on a 1500-byte
    /// path this changes nothing; on loopback and jumbo-frame links fewer,
    /// larger packets cut the per-packet work (`docs/quic-links.md` §1,
    /// CPU per MiB). quinn sizes its receive buffers by it (32 datagrams
    /// of up to 64 segments, 12 MiB at 6 KiB, touched only as far as
    /// datagrams fill them).
    pub max_udp_payload: u16,
    /// The UDP socket's kernel receive and send buffers we ask for, bytes
    /// (SO_RCVBUF, SO_SNDBUF; the kernel caps them at
    /// `net.core.rmem_max`/`wmem_max` and doubles what it grants for its
    /// bookkeeping). Linux's default (208 KiB) overflows when a burst
    /// arrives while the endpoint's task waits for a CPU, and QUIC
    /// takes each datagram dropped there for congestion, where TCP's
    /// window would have held it (`docs/quic-links.md` §1). 0 leaves the
    /// system default.
    pub udp_socket_buffer: usize,
}

impl Default for QuicLimits {
    fn default() -> Self {
        QuicLimits {
            max_circuit_streams: 1024,
            stream_receive_window: 512 * 1024,
            receive_window: 8 * 1024 * 1024,
            send_window: 8 * 1024 * 1024,
            idle_timeout: Duration::from_secs(600),
            handshake_timeout: Duration::from_secs(10),
            open_stream_timeout: Duration::from_secs(30),
            max_connections: 4096,
            max_pending_handshakes: 256,
            max_circuit_queue: 8 * 1024 * 1024,
            congestion: QuicCongestion::Auto,
            max_udp_payload: DEFAULT_MAX_UDP_PAYLOAD,
            udp_socket_buffer: DEFAULT_UDP_SOCKET_BUFFER,
        }
    }
}

impl QuicLimits {
    fn check(&self) -> Result<(), LinkError> {
        if self.max_circuit_streams == 0
            || self.max_circuit_streams > MAX_CIRCUIT_STREAMS_CAP
            || self.stream_receive_window == 0
            || self.stream_receive_window > self.receive_window
            || self.max_connections == 0
            || self.max_pending_handshakes == 0
            || self.max_circuit_queue == 0
            || !(MIN_UDP_PAYLOAD..=MAX_UDP_PAYLOAD).contains(&self.max_udp_payload)
            || self.udp_socket_buffer > MAX_UDP_SOCKET_BUFFER
        {
            return Err(LinkError::Config("inconsistent QUIC limits"));
        }
        Ok(())
    }

    /// The transport parameters and local behaviour both sides use.
    pub(crate) fn transport(&self) -> Result<Arc<TransportConfig>, LinkError> {
        self.check()?;
        let idle = IdleTimeout::try_from(self.idle_timeout)
            .map_err(|_| LinkError::Config("QUIC idle timeout out of range"))?;
        let mut t = TransportConfig::default();
        t.max_concurrent_bidi_streams(VarInt::from_u32(self.max_circuit_streams + 1))
            .max_concurrent_uni_streams(VarInt::from_u32(0))
            .stream_receive_window(VarInt::from_u32(self.stream_receive_window))
            .receive_window(VarInt::from_u32(self.receive_window))
            .send_window(self.send_window)
            .max_idle_timeout(Some(idle))
            // Tor's own channel padding keeps links alive.
            .keep_alive_interval(None)
            // The spin bit shows the RTT to on-path observers.
            .allow_spin(false)
            // No DATAGRAM frames: the parameter is not advertised, so a
            // peer sending one commits a protocol violation.
            .datagram_receive_buffer_size(None)
            .datagram_send_buffer_size(0);
        let mut mtu = quinn::MtuDiscoveryConfig::default();
        mtu.upper_bound(self.max_udp_payload);
        t.mtu_discovery_config(Some(mtu));
        match self.congestion.resolve() {
            QuicCongestion::Auto | QuicCongestion::Cubic => {}
            QuicCongestion::Bbr => {
                t.congestion_controller_factory(Arc::new(quinn::congestion::BbrConfig::default()));
            }
            QuicCongestion::NewReno => {
                t.congestion_controller_factory(Arc::new(
                    quinn::congestion::NewRenoConfig::default(),
                ));
            }
            QuicCongestion::CubicPerCircuit => {
                t.congestion_controller_factory(Arc::new(super::cc::CubicPerCircuitConfig));
            }
        }
        Ok(Arc::new(t))
    }

    /// Client configuration: TLS 1.3 only, our ALPN, the shared
    /// certificate policy, no resumption and no 0-RTT.
    pub(crate) fn client_config(&self) -> Result<quinn::ClientConfig, LinkError> {
        self.client_config_with_alpn(ALPN)
    }

    /// [`Self::client_config`] offering another ALPN (tests).
    pub(crate) fn client_config_with_alpn(
        &self,
        alpn: &[u8],
    ) -> Result<quinn::ClientConfig, LinkError> {
        let mut tls = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .dangerous()
            .with_custom_certificate_verifier(TorCertVerifier::shared())
            .with_no_client_auth();
        tls.alpn_protocols = vec![alpn.to_vec()];
        tls.enable_early_data = false;
        // No tickets: resumption would link connections and skip the
        // certificate the CERTS cell binds.
        tls.resumption = rustls::client::Resumption::disabled();
        let quic = QuicClientConfig::try_from(tls)
            .map_err(|_| LinkError::Config("no QUIC initial cipher suite"))?;
        let mut cfg = quinn::ClientConfig::new(Arc::new(quic));
        cfg.transport_config(self.transport()?)
            .version(QUIC_VERSION);
        Ok(cfg)
    }

    /// The TLS half of a server configuration: the given certificate and
    /// PKCS#8 key, TLS 1.3 only, our ALPN, no tickets, no 0-RTT.
    pub(crate) fn server_crypto(
        &self,
        cert_der: Vec<u8>,
        key_pkcs8_der: Vec<u8>,
    ) -> Result<Arc<QuicServerConfig>, LinkError> {
        let mut tls = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13])?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert_der)],
                PrivateKeyDer::Pkcs8(key_pkcs8_der.into()),
            )?;
        tls.alpn_protocols = vec![ALPN.to_vec()];
        // 0-RTT off (QUIC allows only 0 or u32::MAX here), no tickets.
        tls.max_early_data_size = 0;
        tls.send_tls13_tickets = 0;
        tls.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        let quic = QuicServerConfig::try_from(tls)
            .map_err(|_| LinkError::Config("no QUIC initial cipher suite"))?;
        Ok(Arc::new(quic))
    }

    /// Server configuration for the given certificate and PKCS#8 key (with
    /// a fresh key for Retry tokens; later identities of the same endpoint
    /// keep it, see `QuicTransport::server_identity`).
    pub(crate) fn server_config(
        &self,
        cert_der: Vec<u8>,
        key_pkcs8_der: Vec<u8>,
    ) -> Result<quinn::ServerConfig, LinkError> {
        let mut cfg =
            quinn::ServerConfig::with_crypto(self.server_crypto(cert_der, key_pkcs8_der)?);
        cfg.transport_config(self.transport()?)
            .migration(false)
            .max_incoming(self.max_pending_handshakes);
        // No NEW_TOKEN tokens: a token handed to a client would link its
        // later connections to this one.
        cfg.validation_token.sent(0);
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_consistent() {
        let l = QuicLimits::default();
        assert!(l.transport().is_ok());
        assert!(l.client_config().is_ok());
        // The connection window bounds what one peer can make us buffer.
        assert!(l.stream_receive_window <= l.receive_window);
    }

    #[test]
    fn inconsistent_limits_are_refused() {
        let l = QuicLimits {
            stream_receive_window: 2,
            receive_window: 1,
            ..QuicLimits::default()
        };
        assert!(l.transport().is_err());
        let l = QuicLimits {
            max_circuit_streams: 0,
            ..QuicLimits::default()
        };
        assert!(l.transport().is_err());
        let l = QuicLimits {
            idle_timeout: Duration::from_secs(u64::MAX),
            ..QuicLimits::default()
        };
        assert!(l.transport().is_err());
        for max_udp_payload in [0, 1199, 6551, 16384] {
            let l = QuicLimits {
                max_udp_payload,
                ..QuicLimits::default()
            };
            assert!(l.transport().is_err(), "{max_udp_payload}");
        }
    }

    #[test]
    fn congestion_controllers_parse_and_build() {
        for (name, want) in [
            ("auto", QuicCongestion::Auto),
            ("cubic", QuicCongestion::Cubic),
            ("bbr", QuicCongestion::Bbr),
            ("newreno", QuicCongestion::NewReno),
            ("cubic-per-circuit", QuicCongestion::CubicPerCircuit),
        ] {
            assert_eq!(name.parse::<QuicCongestion>(), Ok(want));
            assert_eq!(want.name(), name);
            let l = QuicLimits {
                congestion: want,
                ..QuicLimits::default()
            };
            assert!(l.transport().is_ok(), "{name}");
        }
        for bad in ["", "Cubic", "bbr2", "reno"] {
            assert!(bad.parse::<QuicCongestion>().is_err(), "{bad:?}");
        }
        assert_eq!(QuicLimits::default().congestion, QuicCongestion::Auto);
        assert_ne!(QuicCongestion::Auto.resolve(), QuicCongestion::Auto);
        assert_eq!(QuicCongestion::Bbr.resolve(), QuicCongestion::Bbr);
    }

    #[test]
    fn auto_follows_the_tcp_controller_family() {
        for (tcp, want) in [
            ("bbr\n", QuicCongestion::Bbr),
            ("bbr3", QuicCongestion::Bbr),
            ("cubic\n", QuicCongestion::Cubic),
            ("reno", QuicCongestion::NewReno),
            ("dctcp", QuicCongestion::Cubic),
            ("", QuicCongestion::Cubic),
        ] {
            assert_eq!(QuicCongestion::like_tcp(tcp), want, "{tcp:?}");
        }
    }

    #[test]
    fn destroy_codes_round_trip() {
        for reason in [0u8, 1, 2, 5, 8, 9, 255] {
            let c = codes::destroy_code(reason);
            assert!((codes::DESTROY_BASE..codes::DESTROY_BASE + 256).contains(&c));
            assert_eq!(codes::destroy_reason(u64::from(c)), reason);
        }
        // Codes outside the range read as PROTOCOL, never panic.
        for c in [0u64, 3, 0xFF, 0x200, u64::MAX] {
            assert_eq!(codes::destroy_reason(c), 1);
        }
    }
}
