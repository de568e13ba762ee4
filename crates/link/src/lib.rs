//! Link layer: the transports that carry Tor channels and the I/O tasks
//! that move cells between a transport and a channel reactor.
//!
//! Two transports: TLS over TCP ([`tls`]) and QUIC ([`quic`], one stream
//! per circuit plus a control stream). A transport yields a bidirectional byte stream plus the facts the
//! in-protocol handshake needs (the peer's TLS certificate, an RFC 5705
//! exporter). Everything above this crate sees [`ChannelIo`], a pair of
//! bounded queues of cells, and never knows which transport carries it.

mod certpolicy;
pub mod circq;
pub mod conn;
pub mod io;
pub mod quic;
pub mod tls;

pub use conn::LinkConn;
pub use io::{ChannelIo, ChannelWriter, spawn_channel_io};
pub use quic::{
    QuicIncoming, QuicLimits, QuicLink, QuicPathStats, QuicServerIdentity, QuicStream,
    QuicTransport, spawn_quic_channel_io,
};
pub use tls::{TlsInfo, TlsTransport};

/// Errors from link transports.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// TCP or TLS I/O failed.
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// TLS failed.
    #[error("TLS error: {0}")]
    Tls(#[from] rustls::Error),
    /// The peer did not answer in time.
    #[error("timed out during {0}")]
    Timeout(&'static str),
    /// The peer sent something that is not a valid Tor handshake.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// A cell could not be decoded.
    #[error("cell error: {0}")]
    Cell(#[from] onionmix_cell::CellError),
    /// A QUIC connection could not be started.
    #[error("QUIC connect error: {0}")]
    QuicConnect(#[from] quinn::ConnectError),
    /// A QUIC connection failed or was closed.
    #[error("QUIC connection: {0}")]
    QuicConnection(#[from] quinn::ConnectionError),
    /// A local bound was reached.
    #[error("limit reached: {0}")]
    Limit(&'static str),
    /// The transport's configuration is unusable.
    #[error("configuration: {0}")]
    Config(&'static str),
}
