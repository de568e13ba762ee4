//! One QUIC bidirectional stream as a byte stream (the control stream or a
//! circuit's stream).

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use quinn::{RecvStream, SendStream, VarInt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::io::CellSource;

/// Received chunks (each at most one packet's STREAM frame, so at most
/// `max_udp_payload`) appended by one [`CellSource::fill`] at most.
const FILL_CHUNKS: usize = 8;
/// A partial cell at most this long is moved to an allocation of its own
/// before a circuit stream waits, so an idle stream does not pin the
/// buffer its earlier cells were cut from.
const COMPACT_MAX: usize = 1024;

/// A bidirectional QUIC stream: `AsyncRead` + `AsyncWrite`, so the cell
/// framing and the channel I/O tasks run over it unchanged. Shutting the
/// write side down sends FIN; [`QuicStream::reset`] abandons the stream in
/// both directions.
#[derive(Debug)]
pub struct QuicStream {
    send: SendStream,
    recv: RecvStream,
}

impl QuicStream {
    pub(crate) fn new(send: SendStream, recv: RecvStream) -> Self {
        QuicStream { send, recv }
    }
    /// The QUIC stream ID (0 is the initiator's first bidirectional
    /// stream, the control stream).
    pub fn id(&self) -> u64 {
        self.send.id().into()
    }
    /// The stream's index among the bidirectional streams its opener
    /// opened (0 for the first).
    pub fn index(&self) -> u64 {
        self.send.id().index()
    }
    /// Abandon the stream: RESET_STREAM our sending side and STOP_SENDING
    /// theirs, both with `code` (see [`super::codes`]). Queued and unread
    /// data is discarded.
    pub fn reset(&mut self, code: u32) {
        let code = VarInt::from_u32(code);
        // Both fail only if that side is already closed, which is fine.
        let _ = self.send.reset(code);
        let _ = self.recv.stop(code);
    }
    /// Destroy this stream's circuit: reset both directions with
    /// `DESTROY_BASE + reason` (the DESTROY cell of `docs/quic-links.md`).
    pub fn destroy(&mut self, reason: u8) {
        self.reset(super::codes::destroy_code(reason));
    }
    /// Finish our sending side (FIN) after what was written so far.
    pub fn finish(&mut self) {
        let _ = self.send.finish();
    }
    /// Split into the sending and receiving halves.
    pub fn into_split(self) -> (SendStream, RecvStream) {
        (self.send, self.recv)
    }
}

/// The application code of the peer's RESET_STREAM (seen reading) or
/// STOP_SENDING (seen writing) behind an I/O error from a [`QuicStream`],
/// if that is what ended it. For a circuit stream,
/// [`super::codes::destroy_reason`] turns it into the DESTROY reason.
pub fn peer_reset_code(e: &std::io::Error) -> Option<u64> {
    let inner = e.get_ref()?;
    if let Some(quinn::ReadError::Reset(code)) = inner.downcast_ref::<quinn::ReadError>() {
        return Some(code.into_inner());
    }
    if let Some(quinn::WriteError::Stopped(code)) = inner.downcast_ref::<quinn::WriteError>() {
        return Some(code.into_inner());
    }
    None
}

/// Whether an I/O error from a [`QuicStream`] means the whole connection
/// is gone (closed by either side, timed out, reset).
pub fn connection_lost(e: &std::io::Error) -> bool {
    let Some(inner) = e.get_ref() else {
        return false;
    };
    matches!(
        inner.downcast_ref::<quinn::ReadError>(),
        Some(quinn::ReadError::ConnectionLost(_))
    ) || matches!(
        inner.downcast_ref::<quinn::WriteError>(),
        Some(quinn::WriteError::ConnectionLost(_))
    )
}

/// A QUIC stream's receiving side as a source of cells. Unlike a byte
/// stream it reserves no buffer before it waits: quinn hands over the
/// received chunks, which are copied into `buf` once they are there. An
/// idle circuit stream (a relay may hold tens of thousands) so keeps at
/// most the start of one cell, not a 32 KiB read buffer.
impl CellSource for RecvStream {
    async fn fill(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        if buf.is_empty() {
            *buf = BytesMut::new();
        } else if buf.len() <= COMPACT_MAX {
            *buf = BytesMut::from(&buf[..]);
        }
        loop {
            let mut parts: [Bytes; FILL_CHUNKS] = Default::default();
            let Some(k) = self.read_chunks(&mut parts).await? else {
                return Ok(0);
            };
            let parts = parts.get(..k).unwrap_or_default();
            let n = parts.iter().map(Bytes::len).sum();
            // `Ok(0)` means the end: an empty chunk (quinn gives none)
            // must not be taken for it.
            if n == 0 {
                continue;
            }
            buf.reserve(n);
            for p in parts {
                buf.extend_from_slice(p);
            }
            return Ok(n);
        }
    }
}

impl AsyncRead for QuicStream {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().recv).poll_read(cx, buf)
    }
}

impl AsyncWrite for QuicStream {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        AsyncWrite::poll_write(Pin::new(&mut self.get_mut().send), cx, buf)
    }
    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        AsyncWrite::poll_flush(Pin::new(&mut self.get_mut().send), cx)
    }
    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        AsyncWrite::poll_shutdown(Pin::new(&mut self.get_mut().send), cx)
    }
}
