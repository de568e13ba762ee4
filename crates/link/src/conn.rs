//! An established connection of either transport, before and after the
//! link handshake: the handshake runs over it as a byte stream (the TLS
//! stream, or a QUIC link's control stream), then it becomes the channel's
//! I/O tasks. Callers choose the transport; nothing after that needs to.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::BytesMut;
use onionmix_cell::CellCodec;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::LinkError;
use crate::io::{ChannelIo, spawn_channel_io};
use crate::quic::{QuicLink, QuicStream, spawn_quic_channel_io};
use crate::tls::TlsStream;

/// A connection carrying one channel.
pub enum LinkConn {
    /// TLS over TCP.
    Tls(Box<TlsStream>),
    /// A QUIC link and its control stream.
    Quic(QuicLink, QuicStream),
}

impl std::fmt::Debug for LinkConn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.transport())
    }
}

impl LinkConn {
    /// `"tls"` or `"quic"`.
    pub fn transport(&self) -> &'static str {
        match self {
            LinkConn::Tls(_) => "tls",
            LinkConn::Quic(..) => "quic",
        }
    }

    /// The connection's RFC 5705 / TLS 1.3 exporter, 32 bytes
    /// (AUTHENTICATE's TLSSECRETS).
    pub fn export(&self, label: &[u8], context: &[u8]) -> Result<[u8; 32], LinkError> {
        match self {
            LinkConn::Tls(t) => t.export(label, context),
            LinkConn::Quic(l, _) => l.export(label, context),
        }
    }

    /// Close a connection whose link handshake failed (QUIC: with the
    /// given application code; TLS: dropping it closes it).
    pub fn fail(self, quic_code: u32) {
        if let LinkConn::Quic(l, _) = self {
            l.close(quic_code);
        }
    }

    /// Start the channel's I/O tasks after the link handshake (`leftover`:
    /// bytes read past it). `accept_circuits`: whether the peer may create
    /// circuits towards us (false for a client's channel; only a QUIC link
    /// checks it, as on TLS the reactor never sees such a peer create).
    pub fn into_channel_io(
        self,
        codec: CellCodec,
        leftover: BytesMut,
        accept_circuits: bool,
    ) -> Result<ChannelIo, LinkError> {
        match self {
            LinkConn::Tls(t) => Ok(spawn_channel_io(*t, codec, leftover)),
            LinkConn::Quic(l, c) => spawn_quic_channel_io(l, c, codec, leftover, accept_circuits),
        }
    }
}

impl AsyncRead for LinkConn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            LinkConn::Tls(t) => Pin::new(t.as_mut()).poll_read(cx, buf),
            LinkConn::Quic(_, c) => Pin::new(c).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for LinkConn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            LinkConn::Tls(t) => Pin::new(t.as_mut()).poll_write(cx, buf),
            LinkConn::Quic(_, c) => Pin::new(c).poll_write(cx, buf),
        }
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            LinkConn::Tls(t) => Pin::new(t.as_mut()).poll_flush(cx),
            LinkConn::Quic(_, c) => Pin::new(c).poll_flush(cx),
        }
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            LinkConn::Tls(t) => Pin::new(t.as_mut()).poll_shutdown(cx),
            LinkConn::Quic(_, c) => Pin::new(c).poll_shutdown(cx),
        }
    }
}
