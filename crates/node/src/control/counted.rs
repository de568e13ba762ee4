//! Byte counting on a socket for the control and metrics ports (`BW`,
//! `CIRC_BW`, `traffic/read|written`): a wrapper that tells a [`Tally`]
//! how many bytes each read and write moved, and nothing else.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Where a [`Counted`] socket's byte counts go.
pub trait Tally {
    /// `n` bytes were read from the socket.
    fn read(&self, n: u64);
    /// `n` bytes were written to the socket.
    fn written(&self, n: u64);
}

/// Bytes read and written (a relay's links).
#[derive(Debug, Default)]
pub struct Traffic {
    /// Bytes read.
    pub read: AtomicU64,
    /// Bytes written.
    pub written: AtomicU64,
}

impl Tally for Arc<Traffic> {
    fn read(&self, n: u64) {
        self.read.fetch_add(n, Ordering::Relaxed);
    }
    fn written(&self, n: u64) {
        self.written.fetch_add(n, Ordering::Relaxed);
    }
}

/// A socket whose reads and writes are counted.
pub struct Counted<S, T> {
    inner: S,
    tally: T,
}

impl<S, T> Counted<S, T> {
    /// Count `inner`'s bytes in `tally`.
    pub fn new(inner: S, tally: T) -> Self {
        Counted { inner, tally }
    }
    /// The socket inside.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin, T: Tally + Unpin> AsyncRead for Counted<S, T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        let n = buf.filled().len().saturating_sub(before) as u64;
        if n > 0 {
            self.tally.read(n);
        }
        r
    }
}

impl<S: AsyncWrite + Unpin, T: Tally + Unpin> AsyncWrite for Counted<S, T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = &r {
            self.tally.written(*n as u64);
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test]
    async fn counts_both_directions() {
        let (a, mut b) = tokio::io::duplex(64);
        let t = Arc::new(Traffic::default());
        let mut c = Counted::new(a, t.clone());
        c.write_all(b"hello").await.unwrap();
        b.write_all(b"abc").await.unwrap();
        let mut got = [0u8; 3];
        c.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"abc");
        assert_eq!(t.written.load(Ordering::Relaxed), 5);
        assert_eq!(t.read.load(Ordering::Relaxed), 3);
    }
}
