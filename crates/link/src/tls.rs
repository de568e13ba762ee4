//! TLS 1.2+/1.3 over TCP with rustls, the way Tor uses it: certificates are
//! not checked by TLS (there is no PKI); the in-protocol CERTS exchange
//! binds the TLS certificate to the relay's identity keys. We still verify
//! that the peer owns the key in the certificate it presented (the TLS
//! handshake signature), so the SHA-256 of that certificate is meaningful.
//! The policy lives in `certpolicy`, shared with the QUIC transport.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use sha2::{Digest, Sha256};
use tokio::net::TcpStream;
use tokio_rustls::{TlsAcceptor, TlsConnector};

use crate::LinkError;
use crate::certpolicy::{SNI, TorCertVerifier, provider};

/// RFC 5705 exporter label for LinkAuth=3 (tor-spec §4.4.2).
pub const AUTH3_EXPORTER_LABEL: &[u8] = b"EXPORTER FOR TOR TLS CLIENT BINDING AUTH0003";

/// Facts about an established TLS session that the Tor handshake needs.
#[derive(Debug, Clone)]
pub struct TlsInfo {
    /// DER of the responder's TLS certificate.
    pub peer_cert: Option<Vec<u8>>,
    /// DER of our own TLS certificate (when we are the responder).
    pub own_cert: Option<Vec<u8>>,
}

impl TlsInfo {
    /// SHA-256 of the responder's certificate (what CERTS type 5 certifies).
    pub fn responder_cert_digest(&self) -> Option<[u8; 32]> {
        self.peer_cert
            .as_ref()
            .or(self.own_cert.as_ref())
            .map(|c| Sha256::digest(c).into())
    }
}

/// A TLS stream, client or server side.
pub enum TlsStream {
    /// We initiated.
    Client(Box<tokio_rustls::client::TlsStream<TcpStream>>),
    /// We accepted.
    Server(Box<tokio_rustls::server::TlsStream<TcpStream>>),
}

impl TlsStream {
    /// RFC 5705 keying material exporter.
    pub fn export(&self, label: &[u8], context: &[u8]) -> Result<[u8; 32], LinkError> {
        let mut out = [0u8; 32];
        match self {
            TlsStream::Client(s) => {
                s.get_ref()
                    .1
                    .export_keying_material(&mut out, label, Some(context))?;
            }
            TlsStream::Server(s) => {
                s.get_ref()
                    .1
                    .export_keying_material(&mut out, label, Some(context))?;
            }
        }
        Ok(out)
    }
    /// Peer's TCP address.
    pub fn peer_addr(&self) -> std::io::Result<SocketAddr> {
        match self {
            TlsStream::Client(s) => s.get_ref().0.peer_addr(),
            TlsStream::Server(s) => s.get_ref().0.peer_addr(),
        }
    }
}

impl tokio::io::AsyncRead for TlsStream {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            TlsStream::Client(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
            TlsStream::Server(s) => std::pin::Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl tokio::io::AsyncWrite for TlsStream {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            TlsStream::Client(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
            TlsStream::Server(s) => std::pin::Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }
    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            TlsStream::Client(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
            TlsStream::Server(s) => std::pin::Pin::new(s.as_mut()).poll_flush(cx),
        }
    }
    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match self.get_mut() {
            TlsStream::Client(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
            TlsStream::Server(s) => std::pin::Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        match self.get_mut() {
            TlsStream::Client(s) => std::pin::Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
            TlsStream::Server(s) => std::pin::Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }
    fn is_write_vectored(&self) -> bool {
        match self {
            TlsStream::Client(s) => s.is_write_vectored(),
            TlsStream::Server(s) => s.is_write_vectored(),
        }
    }
}

/// The TLS transport: connects and accepts Tor links.
#[derive(Clone)]
pub struct TlsTransport {
    connector: TlsConnector,
    acceptor: Option<TlsAcceptor>,
    own_cert: Option<Vec<u8>>,
    connect_timeout: Duration,
}

impl std::fmt::Debug for TlsTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsTransport")
            .field("server", &self.acceptor.is_some())
            .finish()
    }
}

impl TlsTransport {
    /// A client-only transport.
    pub fn client() -> Result<Self, LinkError> {
        let config = rustls::ClientConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .dangerous()
            .with_custom_certificate_verifier(TorCertVerifier::shared())
            .with_no_client_auth();
        Ok(TlsTransport {
            connector: TlsConnector::from(Arc::new(config)),
            acceptor: None,
            own_cert: None,
            connect_timeout: Duration::from_secs(10),
        })
    }

    /// A transport that can also accept connections with the given TLS
    /// certificate and private key (PKCS#8 DER).
    pub fn server(cert_der: Vec<u8>, key_pkcs8_der: Vec<u8>) -> Result<Self, LinkError> {
        let mut t = Self::client()?;
        let config = rustls::ServerConfig::builder_with_provider(provider())
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert_der.clone())],
                PrivateKeyDer::Pkcs8(key_pkcs8_der.into()),
            )?;
        t.acceptor = Some(TlsAcceptor::from(Arc::new(config)));
        t.own_cert = Some(cert_der);
        Ok(t)
    }

    /// Set the TCP+TLS connect timeout.
    pub fn with_connect_timeout(mut self, d: Duration) -> Self {
        self.connect_timeout = d;
        self
    }

    /// Open a TCP connection and run the TLS handshake as a client.
    pub async fn connect(&self, addr: SocketAddr) -> Result<(TlsStream, TlsInfo), LinkError> {
        self.connect_from(None, addr).await
    }

    /// [`connect`](Self::connect) from the local address `local` (any port)
    /// when given.
    pub async fn connect_from(
        &self,
        local: Option<std::net::IpAddr>,
        addr: SocketAddr,
    ) -> Result<(TlsStream, TlsInfo), LinkError> {
        let fut = async {
            let tcp = match local {
                None => TcpStream::connect(addr).await?,
                Some(ip) => {
                    let sock = if addr.is_ipv4() {
                        tokio::net::TcpSocket::new_v4()?
                    } else {
                        tokio::net::TcpSocket::new_v6()?
                    };
                    sock.bind(SocketAddr::new(ip, 0))?;
                    sock.connect(addr).await?
                }
            };
            tcp.set_nodelay(true)?;
            // Tor does not check SNI; send a plausible one.
            let name = ServerName::try_from(SNI).map_err(|e| LinkError::Protocol(e.to_string()))?;
            let tls = self.connector.connect(name, tcp).await?;
            let peer_cert = tls
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .map(|c| c.as_ref().to_vec());
            Ok::<_, LinkError>((
                TlsStream::Client(Box::new(tls)),
                TlsInfo {
                    peer_cert,
                    own_cert: None,
                },
            ))
        };
        tokio::time::timeout(self.connect_timeout, fut)
            .await
            .map_err(|_| LinkError::Timeout("TCP/TLS connect"))?
    }

    /// Run the server side of TLS on an accepted TCP connection.
    pub async fn accept(&self, tcp: TcpStream) -> Result<(TlsStream, TlsInfo), LinkError> {
        let acceptor = self
            .acceptor
            .as_ref()
            .ok_or_else(|| LinkError::Protocol("transport has no server certificate".into()))?;
        tcp.set_nodelay(true)?;
        let tls = tokio::time::timeout(self.connect_timeout, acceptor.accept(tcp))
            .await
            .map_err(|_| LinkError::Timeout("TLS accept"))??;
        Ok((
            TlsStream::Server(Box::new(tls)),
            TlsInfo {
                peer_cert: None,
                own_cert: self.own_cert.clone(),
            },
        ))
    }
}
