//! One QUIC bidirectional stream as a byte stream (the control stream or a
//! circuit's stream).

use std::pin::Pin;
use std::task::{Context, Poll};

use quinn::{RecvStream, SendStream, VarInt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

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
