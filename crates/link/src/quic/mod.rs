//! QUIC links (quinn over rustls/ring): one QUIC connection carries one
//! Tor channel. The initiator's first bidirectional stream is the control
//! stream (the link handshake and every channel-level cell); each circuit
//! gets its own bidirectional stream, opened by the side that sends the
//! CREATE2. `docs/quic-links.md` is the specification; this module is
//! the transport half of it: connections, the control stream, circuit
//! streams, the bounds, and the facts the link handshake needs (the peer's
//! certificate and the RFC 5705 / TLS 1.3 exporter), exposed exactly as
//! the TLS transport exposes them ([`TlsInfo`]).

mod cc;
pub(crate) mod chan;
mod config;
mod stream;
#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use quinn::crypto::rustls::HandshakeData;
use quinn::{Connection, ConnectionError, Endpoint, EndpointConfig, VarInt};
use rustls::pki_types::CertificateDer;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use cc::{CubicPerCircuit, CubicPerCircuitConfig, MAX_WEIGHT as MAX_CIRCUIT_WEIGHT};
pub use chan::{STREAM_BACKPRESSURE_SHARE, spawn_quic_channel_io};
pub use config::{
    ALPN, DEFAULT_UDP_SOCKET_BUFFER, MAX_CIRCUIT_STREAMS_CAP, QUIC_VERSION, QuicCongestion,
    QuicLimits, codes,
};
pub use stream::{QuicStream, connection_lost, peer_reset_code};

use crate::LinkError;
use crate::certpolicy::SNI;
use crate::tls::TlsInfo;

/// The QUIC transport: one UDP socket (a quinn endpoint) that connects out
/// and, for a relay, accepts links.
#[derive(Clone)]
pub struct QuicTransport {
    endpoint: Endpoint,
    client: quinn::ClientConfig,
    /// What new incoming connections are served (a relay's current TLS
    /// certificate); None for a client-only transport.
    server: Arc<RwLock<Option<QuicServerIdentity>>>,
    limits: QuicLimits,
    connections: Arc<Semaphore>,
    socket_buffers: SocketBuffers,
}

/// The kernel buffers of a transport's UDP socket as the kernel reports
/// them (Linux reports twice what was set, the half it adds for its own
/// bookkeeping; None where the query failed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketBuffers {
    /// SO_RCVBUF, bytes.
    pub receive: Option<usize>,
    /// SO_SNDBUF, bytes.
    pub send: Option<usize>,
}

/// Ask for `bytes` of kernel buffer each way on `socket` (0: leave the
/// system default) and report what it got. Less than asked is not an
/// error: the kernel caps the request at `net.core.rmem_max` /
/// `wmem_max`, and the link works with smaller buffers, only losing more
/// datagrams when a burst meets a busy CPU; that is logged once per
/// transport with the setting to raise.
fn size_socket_buffers(socket: &std::net::UdpSocket, bytes: usize) -> SocketBuffers {
    let s = socket2::SockRef::from(socket);
    if bytes > 0 {
        if let Err(e) = s.set_recv_buffer_size(bytes) {
            tracing::debug!("QUIC UDP socket: SO_RCVBUF {bytes}: {e}");
        }
        if let Err(e) = s.set_send_buffer_size(bytes) {
            tracing::debug!("QUIC UDP socket: SO_SNDBUF {bytes}: {e}");
        }
    }
    let got = SocketBuffers {
        receive: s.recv_buffer_size().ok(),
        send: s.send_buffer_size().ok(),
    };
    // Linux reports double what was granted; other systems what was set.
    let granted = |v: usize| if cfg!(target_os = "linux") { v / 2 } else { v };
    let short = |v: Option<usize>| v.is_some_and(|v| granted(v) < bytes);
    if bytes > 0 && (short(got.receive) || short(got.send)) {
        tracing::info!(
            "QUIC UDP socket buffers are {} / {} KiB (receive / send), asked {} KiB each: \
             raise net.core.rmem_max and net.core.wmem_max for fewer drops under load",
            got.receive.unwrap_or(0) / 1024,
            got.send.unwrap_or(0) / 1024,
            bytes / 1024
        );
    }
    got
}

impl std::fmt::Debug for QuicTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicTransport")
            .field("server", &self.current_identity().is_some())
            .finish()
    }
}

/// A certificate and key a relay's endpoint serves, ready to use: the
/// server configuration of one TLS identity. Replaced on certificate
/// rotation ([`QuicTransport::set_server_identity`]); a handshake uses the
/// identity it was given from start to end
/// ([`QuicIncoming::handshake_with`]), so the CERTS cell sent afterwards
/// can cover exactly the certificate the peer saw.
#[derive(Clone)]
pub struct QuicServerIdentity {
    config: Arc<quinn::ServerConfig>,
    cert: Vec<u8>,
}

impl std::fmt::Debug for QuicServerIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicServerIdentity").finish()
    }
}

impl QuicServerIdentity {
    /// DER of the certificate served.
    pub fn cert(&self) -> &[u8] {
        &self.cert
    }
}

impl QuicTransport {
    /// A client-only transport on a UDP socket bound to `bind` (port 0
    /// for any).
    pub fn client(bind: SocketAddr, limits: QuicLimits) -> Result<Self, LinkError> {
        Self::build(bind, None, limits)
    }

    /// A transport that also accepts links on `bind` (the ORPort's port
    /// number, UDP, unless configured otherwise) with the given
    /// certificate and PKCS#8 key: the relay's TLS certificate, so the
    /// CERTS type 5 certificate covers both transports.
    pub fn server(
        bind: SocketAddr,
        cert_der: Vec<u8>,
        key_pkcs8_der: Vec<u8>,
        limits: QuicLimits,
    ) -> Result<Self, LinkError> {
        Self::build(bind, Some((cert_der, key_pkcs8_der)), limits)
    }

    fn build(
        bind: SocketAddr,
        server: Option<(Vec<u8>, Vec<u8>)>,
        limits: QuicLimits,
    ) -> Result<Self, LinkError> {
        let client = limits.client_config()?;
        let identity = match server {
            Some((cert, key)) => Some(QuicServerIdentity {
                config: Arc::new(limits.server_config(cert.clone(), key)?),
                cert,
            }),
            None => None,
        };
        let socket = std::net::UdpSocket::bind(bind)?;
        let socket_buffers = size_socket_buffers(&socket, limits.udp_socket_buffer);
        let mut ecfg = EndpointConfig::default();
        ecfg.supported_versions(vec![QUIC_VERSION]);
        // Checked by `limits.client_config()` above.
        ecfg.max_udp_payload_size(limits.max_udp_payload)
            .map_err(|_| LinkError::Config("QUIC max UDP payload out of range"))?;
        let endpoint = Endpoint::new(
            ecfg,
            identity.as_ref().map(|i| (*i.config).clone()),
            socket,
            Arc::new(quinn::TokioRuntime),
        )?;
        Ok(QuicTransport {
            endpoint,
            client,
            server: Arc::new(RwLock::new(identity)),
            connections: Arc::new(Semaphore::new(limits.max_connections)),
            limits,
            socket_buffers,
        })
    }

    /// The UDP socket's kernel buffers as set when the transport was made
    /// ([`QuicLimits::udp_socket_buffer`]).
    pub fn socket_buffers(&self) -> SocketBuffers {
        self.socket_buffers
    }

    /// The identity served to new connections (None: client only).
    pub fn identity(&self) -> Option<QuicServerIdentity> {
        self.current_identity()
    }

    fn current_identity(&self) -> Option<QuicServerIdentity> {
        self.server
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A server identity for another certificate and key of this
    /// (server) endpoint, keeping its Retry token key so tokens issued
    /// before a rotation stay valid.
    pub fn server_identity(
        &self,
        cert_der: Vec<u8>,
        key_pkcs8_der: Vec<u8>,
    ) -> Result<QuicServerIdentity, LinkError> {
        let base = self.current_identity().ok_or(LinkError::Config(
            "a client-only QUIC transport serves nothing",
        ))?;
        let mut config = (*base.config).clone();
        config.crypto = self.limits.server_crypto(cert_der.clone(), key_pkcs8_der)?;
        Ok(QuicServerIdentity {
            config: Arc::new(config),
            cert: cert_der,
        })
    }

    /// Serve `id` to connections that arrive from now on (certificate
    /// rotation). Handshakes already running keep theirs.
    pub fn set_server_identity(&self, id: &QuicServerIdentity) {
        self.endpoint.set_server_config(Some((*id.config).clone()));
        *self.server.write().unwrap_or_else(|e| e.into_inner()) = Some(id.clone());
    }

    /// The local UDP address.
    pub fn local_addr(&self) -> Result<SocketAddr, LinkError> {
        Ok(self.endpoint.local_addr()?)
    }

    /// The limits in force.
    pub fn limits(&self) -> &QuicLimits {
        &self.limits
    }

    /// Connections open or handshaking now.
    pub fn open_connections(&self) -> usize {
        self.limits
            .max_connections
            .saturating_sub(self.connections.available_permits())
    }

    /// Whether every connection slot is taken (a new link, either way,
    /// would be refused).
    pub fn is_full(&self) -> bool {
        self.connections.available_permits() == 0
    }

    /// Connect to a relay: QUIC handshake, then open the control stream.
    /// The caller runs the link handshake on it (VERSIONS first, which
    /// makes the stream visible to the peer).
    pub async fn connect(
        &self,
        addr: SocketAddr,
    ) -> Result<(QuicLink, QuicStream, TlsInfo), LinkError> {
        let permit = self
            .connections
            .clone()
            .try_acquire_owned()
            .map_err(|_| LinkError::Limit("QUIC connections"))?;
        let connecting = self.endpoint.connect_with(self.client.clone(), addr, SNI)?;
        let conn = tokio::time::timeout(self.limits.handshake_timeout, connecting)
            .await
            .map_err(|_| LinkError::Timeout("QUIC handshake"))??;
        let link = QuicLink::new(conn, &self.limits, permit);
        link.check_alpn()?;
        let peer_cert = link.peer_cert();
        if peer_cert.is_none() {
            link.close(codes::PROTOCOL);
            return Err(LinkError::Protocol("responder sent no certificate".into()));
        }
        // Credit for stream 0 is always there (the peer allows at least
        // one stream); the timeout covers a peer that allows none.
        let (send, recv) = tokio::time::timeout(self.limits.handshake_timeout, link.conn.open_bi())
            .await
            .map_err(|_| LinkError::Timeout("QUIC control stream"))??;
        let control = QuicStream::new(send, recv);
        if control.index() != 0 {
            link.close(codes::PROTOCOL);
            return Err(LinkError::Protocol("control stream is not stream 0".into()));
        }
        Ok((
            link,
            control,
            TlsInfo {
                peer_cert,
                own_cert: None,
            },
        ))
    }

    /// Wait for the next incoming connection attempt. Returns None once
    /// the endpoint is closed. A peer whose address is not validated yet
    /// is first sent a Retry (stateless, RFC 9000 §8.1.2), so every attempt
    /// returned comes from an address that answered: per-address limits
    /// cannot be spent by spoofed datagrams. Attempts over the connection
    /// limit are refused here; the caller runs [`QuicIncoming::handshake`]
    /// (in its own task, so a slow peer does not hold up the others).
    pub async fn accept(&self) -> Option<QuicIncoming> {
        loop {
            let incoming = self.endpoint.accept().await?;
            if !incoming.remote_address_validated() {
                if incoming.may_retry() {
                    // Fails only if a retry is not allowed, checked above.
                    let _ = incoming.retry();
                } else {
                    incoming.refuse();
                }
                continue;
            }
            let Some(identity) = self.current_identity() else {
                incoming.refuse();
                continue;
            };
            match self.connections.clone().try_acquire_owned() {
                Ok(permit) => {
                    return Some(QuicIncoming {
                        incoming,
                        permit,
                        identity,
                        limits: self.limits.clone(),
                    });
                }
                Err(_) => {
                    tracing::debug!("QUIC connection limit reached; refusing");
                    incoming.refuse();
                }
            }
        }
    }

    /// Close every connection and stop accepting.
    pub fn close(&self) {
        self.endpoint
            .close(VarInt::from_u32(codes::NO_ERROR), b"shutdown");
    }

    /// Wait (bounded by `limit`) until every connection has finished
    /// closing, so close frames reach the peers.
    pub async fn wait_idle(&self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.endpoint.wait_idle()).await;
    }
}

/// A connection attempt accepted by [`QuicTransport::accept`].
pub struct QuicIncoming {
    incoming: quinn::Incoming,
    permit: OwnedSemaphorePermit,
    identity: QuicServerIdentity,
    limits: QuicLimits,
}

impl std::fmt::Debug for QuicIncoming {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicIncoming").finish()
    }
}

impl QuicIncoming {
    /// The peer's UDP address.
    pub fn remote_address(&self) -> SocketAddr {
        self.incoming.remote_address()
    }

    /// Refuse the attempt (CONNECTION_REFUSED), e.g. over an admission
    /// limit.
    pub fn refuse(self) {
        self.incoming.refuse();
    }

    /// Run the QUIC handshake serving the endpoint's identity of the
    /// moment [`QuicTransport::accept`] returned, then wait for the
    /// initiator's control stream (its first bidirectional stream), each
    /// within the handshake timeout.
    pub async fn handshake(self) -> Result<(QuicLink, QuicStream, TlsInfo), LinkError> {
        let id = self.identity.clone();
        self.handshake_with(&id).await
    }

    /// [`Self::handshake`] serving `identity` (the certificate the caller's
    /// CERTS cell will certify).
    pub async fn handshake_with(
        self,
        identity: &QuicServerIdentity,
    ) -> Result<(QuicLink, QuicStream, TlsInfo), LinkError> {
        let limits = self.limits;
        let connecting = self.incoming.accept_with(identity.config.clone())?;
        let conn = tokio::time::timeout(limits.handshake_timeout, connecting)
            .await
            .map_err(|_| LinkError::Timeout("QUIC handshake"))??;
        let link = QuicLink::new(conn, &limits, self.permit);
        link.check_alpn()?;
        let (send, recv) = tokio::time::timeout(limits.handshake_timeout, link.conn.accept_bi())
            .await
            .map_err(|_| {
                link.close(codes::PROTOCOL);
                LinkError::Timeout("QUIC control stream")
            })??;
        let control = QuicStream::new(send, recv);
        if control.index() != 0 {
            // accept_bi yields the lowest-numbered new stream, so this is
            // only reachable if stream 0 was opened and already abandoned.
            link.close(codes::PROTOCOL);
            return Err(LinkError::Protocol("control stream is not stream 0".into()));
        }
        Ok((
            link,
            control,
            TlsInfo {
                peer_cert: None,
                own_cert: Some(identity.cert.clone()),
            },
        ))
    }
}

/// An established QUIC link: opens and accepts circuit streams, exports
/// keying material, closes. Clones share the connection; dropping the last
/// clone closes it (NO_ERROR) even if streams are still held, and closing
/// it frees its slot at once, so the transport's connection count matches
/// the links open.
#[derive(Clone)]
pub struct QuicLink {
    conn: Connection,
    open_timeout: Duration,
    /// The limits the channel over this link enforces (circuit queues).
    limits: Arc<QuicLimits>,
    guard: Arc<LinkGuard>,
}

/// One QUIC link's path counters ([`QuicLink::path_stats`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicPathStats {
    /// Smoothed round-trip time, microseconds.
    pub rtt_us: u64,
    /// Lowest round-trip time seen (without ACK delay), microseconds.
    pub min_rtt_us: u64,
    /// Congestion window, bytes.
    pub cwnd: u64,
    /// Congestion events (window reductions).
    pub congestion_events: u64,
    /// Packets sent.
    pub sent_packets: u64,
    /// Packets declared lost.
    pub lost_packets: u64,
    /// Largest UDP payload the path takes now.
    pub mtu: u16,
    /// UDP datagrams sent.
    pub udp_datagrams_sent: u64,
    /// UDP datagrams received.
    pub udp_datagrams_received: u64,
    /// How many flows the sending controller stands for
    /// ([`QuicLink::congestion_weight`]; None unless `cubic-per-circuit`).
    pub congestion_weight: Option<u32>,
}

/// Closes the connection and frees its slot when the last [`QuicLink`]
/// clone goes, or when the link is closed ([`QuicLink::close`]): a closed
/// link whose handles something still keeps (a channel registry) holds
/// no slot.
struct LinkGuard {
    conn: Connection,
    permit: std::sync::Mutex<Option<OwnedSemaphorePermit>>,
}

impl LinkGuard {
    fn release(&self) {
        let permit = self.permit.lock().unwrap_or_else(|e| e.into_inner()).take();
        drop(permit);
    }
}

impl Drop for LinkGuard {
    fn drop(&mut self) {
        // A no-op if the connection is closed already.
        self.conn.close(VarInt::from_u32(codes::NO_ERROR), b"");
    }
}

impl std::fmt::Debug for QuicLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicLink")
            .field("id", &self.conn.stable_id())
            .finish()
    }
}

impl QuicLink {
    fn new(conn: Connection, limits: &QuicLimits, permit: OwnedSemaphorePermit) -> Self {
        QuicLink {
            guard: Arc::new(LinkGuard {
                conn: conn.clone(),
                permit: std::sync::Mutex::new(Some(permit)),
            }),
            conn,
            open_timeout: limits.open_stream_timeout,
            limits: Arc::new(limits.clone()),
        }
    }

    fn check_alpn(&self) -> Result<(), LinkError> {
        let ok = self
            .conn
            .handshake_data()
            .and_then(|d| d.downcast::<HandshakeData>().ok())
            .and_then(|d| d.protocol)
            .is_some_and(|p| p == ALPN);
        if ok {
            Ok(())
        } else {
            self.close(codes::PROTOCOL);
            Err(LinkError::Protocol("QUIC ALPN mismatch".into()))
        }
    }

    /// DER of the certificate the peer presented (the responder's, seen
    /// by the initiator; initiators present none).
    pub fn peer_cert(&self) -> Option<Vec<u8>> {
        self.conn
            .peer_identity()
            .and_then(|id| id.downcast::<Vec<CertificateDer<'static>>>().ok())
            .and_then(|chain| chain.first().map(|c| c.as_ref().to_vec()))
    }

    /// The TLS 1.3 exporter (RFC 8446 §7.5, the RFC 5705 interface) of
    /// this connection's handshake, 32 bytes: AUTHENTICATE's TLSSECRETS.
    pub fn export(&self, label: &[u8], context: &[u8]) -> Result<[u8; 32], LinkError> {
        let mut out = [0u8; 32];
        self.conn
            .export_keying_material(&mut out, label, context)
            .map_err(|_| LinkError::Protocol("TLS exporter unavailable".into()))?;
        Ok(out)
    }

    /// The connection's path as quinn sees it (RTT, congestion window,
    /// losses): for `status` and measurements.
    pub fn path_stats(&self) -> QuicPathStats {
        let s = self.conn.stats();
        QuicPathStats {
            rtt_us: u64::try_from(s.path.rtt.as_micros()).unwrap_or(u64::MAX),
            min_rtt_us: u64::try_from(s.path.min_rtt.as_micros()).unwrap_or(u64::MAX),
            cwnd: s.path.cwnd,
            congestion_events: s.path.congestion_events,
            sent_packets: s.path.sent_packets,
            lost_packets: s.path.lost_packets,
            mtu: s.path.current_mtu,
            udp_datagrams_sent: s.udp_tx.datagrams,
            udp_datagrams_received: s.udp_rx.datagrams,
            congestion_weight: self.congestion_weight(),
        }
    }

    /// How many flows our sending side's controller stands for, with
    /// `quic_congestion = "cubic-per-circuit"` (the circuits that sent
    /// lately, 1 to [`MAX_CIRCUIT_WEIGHT`]); None with other controllers.
    pub fn congestion_weight(&self) -> Option<u32> {
        cc::weight_of(&self.conn).map(|w| w.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Make a `cubic-per-circuit` controller stand for `n` flows
    /// (clamped to 1..=[`MAX_CIRCUIT_WEIGHT`]); false with other
    /// controllers. A QUIC channel sets this itself from its busy circuits
    /// every quarter second; this is for tools that drive a link without
    /// a channel (`onionmix emulator fairness`). The controller acts on it
    /// from its next congestion event that finds no flow in recovery.
    pub fn set_congestion_weight(&self, n: u32) -> bool {
        match cc::weight_of(&self.conn) {
            Some(w) => {
                w.store(
                    n.clamp(1, MAX_CIRCUIT_WEIGHT),
                    std::sync::atomic::Ordering::Relaxed,
                );
                true
            }
            None => false,
        }
    }

    /// Open a stream for a new circuit (the side sending CREATE2 opens
    /// it; the CREATE2 cell must be the first thing written). Waits for
    /// stream credit when the peer's limit is reached, at most the open
    /// timeout.
    pub async fn open_circuit_stream(&self) -> Result<QuicStream, LinkError> {
        let (send, recv) = tokio::time::timeout(self.open_timeout, self.conn.open_bi())
            .await
            .map_err(|_| LinkError::Timeout("QUIC stream credit"))??;
        Ok(QuicStream::new(send, recv))
    }

    /// The next circuit stream the peer opened. `Ok(None)` when the link
    /// closed in order. This waits on peer activity, not on an answer:
    /// the QUIC idle timeout bounds it.
    pub async fn accept_circuit_stream(&self) -> Result<Option<QuicStream>, LinkError> {
        match self.conn.accept_bi().await {
            Ok((send, recv)) => Ok(Some(QuicStream::new(send, recv))),
            Err(ConnectionError::LocallyClosed) => Ok(None),
            Err(ConnectionError::ApplicationClosed(c))
                if c.error_code == VarInt::from_u32(codes::NO_ERROR) =>
            {
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Close the connection with an application error code (see
    /// [`codes`]); every stream ends with it, and its connection slot is
    /// free at once.
    pub fn close(&self, code: u32) {
        self.conn.close(VarInt::from_u32(code), b"");
        self.guard.release();
    }

    /// Wait until the connection is closed, by either side or by the idle
    /// timeout; returns why.
    pub async fn closed(&self) -> ConnectionError {
        self.conn.closed().await
    }

    /// Wait until the connection is closed; the application error code
    /// (see [`codes`]) when the peer closed it with one, None for any
    /// other end (local close, idle timeout, transport error).
    pub async fn closed_with_code(&self) -> Option<u32> {
        match self.conn.closed().await {
            ConnectionError::ApplicationClosed(c) => u32::try_from(c.error_code.into_inner()).ok(),
            _ => None,
        }
    }

    /// Why the connection closed, if it has.
    pub fn close_reason(&self) -> Option<ConnectionError> {
        self.conn.close_reason()
    }

    /// The peer's UDP address.
    pub fn remote_address(&self) -> SocketAddr {
        self.conn.remote_address()
    }

    /// A process-unique ID of this connection.
    pub fn stable_id(&self) -> usize {
        self.conn.stable_id()
    }
}
