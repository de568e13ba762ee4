//! One QUIC bidirectional stream as a byte stream (the control stream or a
//! circuit's stream).

use std::pin::{Pin, pin};
use std::task::{Context, Poll, Waker};

use bytes::{Bytes, BytesMut};
use quinn::{ReadError, RecvStream, SendStream, VarInt};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::io::CellSource;

/// Received chunks (usually one packet's STREAM frame each) appended by
/// one [`CellSource::fill`] at most.
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
/// most the start of one cell, not a 32 KiB read buffer. One fill takes
/// at most [`FILL_BUDGET`] bytes in at most [`FILL_CHUNKS`] chunks
/// (quinn may hand over a chunk as long as the stream's window when it
/// merged a peer's many small frames; it is split here), so a reader that
/// then waits for the reactor holds little.
#[derive(Debug)]
pub(crate) struct ChunkSource {
    recv: RecvStream,
    /// An error met after some bytes were taken: returned by the next
    /// fill, so the peer's reset code is not lost.
    pending: Option<ReadError>,
    /// The stream's end was met after some bytes were taken.
    ended: bool,
}

impl ChunkSource {
    pub(crate) fn new(recv: RecvStream) -> Self {
        ChunkSource {
            recv,
            pending: None,
            ended: false,
        }
    }

    /// STOP_SENDING with `code` (see [`super::codes`]).
    pub(crate) fn stop(&mut self, code: VarInt) {
        // Fails only if the stream is already finished or reset.
        let _ = self.recv.stop(code);
    }

    /// A chunk of at most `max` bytes if one is there without waiting.
    fn ready_chunk(&mut self, max: usize) -> Poll<Result<Option<Bytes>, ReadError>> {
        let mut cx = Context::from_waker(Waker::noop());
        let mut read = pin!(self.recv.read_chunk(max, true));
        read.as_mut()
            .poll(&mut cx)
            .map(|r| r.map(|c| c.map(|c| c.bytes)))
    }
}

/// Bytes one [`CellSource::fill`] of a QUIC stream takes at most.
pub(crate) const FILL_BUDGET: usize = 64 * 1024;

impl CellSource for ChunkSource {
    async fn fill(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        if let Some(e) = self.pending.take() {
            return Err(e.into());
        }
        if self.ended {
            return Ok(0);
        }
        if buf.is_empty() {
            *buf = BytesMut::new();
        } else if buf.len() <= COMPACT_MAX {
            *buf = BytesMut::from(&buf[..]);
        }
        // Wait for the first chunk; `Ok(0)` means the end, so an empty
        // chunk (quinn gives none) must not be taken for it.
        let first = loop {
            match self.recv.read_chunk(FILL_BUDGET, true).await? {
                None => return Ok(0),
                Some(c) if c.bytes.is_empty() => continue,
                Some(c) => break c.bytes,
            }
        };
        let mut parts: [Bytes; FILL_CHUNKS] = Default::default();
        let mut n = first.len();
        parts[0] = first;
        let mut k = 1;
        // Then take what else is there, within the budget.
        while k < FILL_CHUNKS && n < FILL_BUDGET {
            match self.ready_chunk(FILL_BUDGET - n) {
                Poll::Ready(Ok(Some(c))) => {
                    n += c.len();
                    if let Some(slot) = parts.get_mut(k) {
                        *slot = c;
                    }
                    k += 1;
                }
                Poll::Ready(Ok(None)) => {
                    self.ended = true;
                    break;
                }
                Poll::Ready(Err(e)) => {
                    self.pending = Some(e);
                    break;
                }
                Poll::Pending => break,
            }
        }
        buf.reserve(n);
        for p in parts.iter().take(k) {
            buf.extend_from_slice(p);
        }
        Ok(n)
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
