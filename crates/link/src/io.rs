//! Channel I/O tasks: one reader and one writer per transport.
//!
//! The reader frames cells and hands them to the channel's reactor in
//! batches over a bounded queue. The writer side is a [`ChannelWriter`]:
//! any task (this channel's reactor, another channel's reactor forwarding a
//! relay cell, an exit stream) can append framed cells without awaiting, so
//! a cell can be encrypted and queued inside one critical section and cell
//! order per circuit is preserved. The queue is bounded by accounting:
//! producers check [`ChannelWriter::queued_bytes`] and wait with
//! [`ChannelWriter::wait_below`] before reading more from their own source.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};

use onionmix_cell::{CellCodec, RawCell};

/// Cells per batch handed from the reader to the reactor at most.
const MAX_BATCH: usize = 64;
/// Queue depth (batches) between reader and reactor.
const READ_QUEUE: usize = 32;
/// Idle time after which a silent channel is considered dead.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// A write that makes no progress for this long kills the channel.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(120);
/// Read buffer growth step.
const READ_CHUNK: usize = 32 * 1024;
/// An empty read buffer larger than this is released.
const READ_BUF_KEEP: usize = 64 * 1024;
/// Bytes gathered into one write at most (more if one chunk is larger).
const WRITE_COALESCE: usize = 256 * 1024;
/// Default high-water mark for a channel's outbound queue.
pub const DEFAULT_HIGH_WATER: usize = 2 * 1024 * 1024;

/// The sending side of a channel, shareable across tasks.
#[derive(Clone, Debug)]
pub struct ChannelWriter {
    tx: mpsc::UnboundedSender<BytesMut>,
    queued: Arc<AtomicUsize>,
    drained: Arc<Notify>,
    closed: Arc<AtomicBool>,
    /// Set by [`ChannelWriter::abort`]: drop what is queued, stop now.
    aborted: Arc<AtomicBool>,
    /// Notified when the writer closes or is aborted.
    closing: Arc<Notify>,
    /// Notified by [`ChannelWriter::abort`] only.
    abort_signal: Arc<Notify>,
}

impl ChannelWriter {
    /// Append framed cells. Never blocks; returns false if the channel is
    /// closed.
    pub fn send_now(&self, buf: BytesMut) -> bool {
        if buf.is_empty() {
            return true;
        }
        if self.closed.load(Ordering::Relaxed) {
            return false;
        }
        let n = buf.len();
        self.queued.fetch_add(n, Ordering::Relaxed);
        if self.tx.send(buf).is_err() {
            self.queued.fetch_sub(n, Ordering::Relaxed);
            self.closed.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }
    /// Bytes queued and not yet written.
    pub fn queued_bytes(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
    /// Whether the writer has stopped.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed) || self.tx.is_closed()
    }
    /// Wait until fewer than `limit` bytes are queued (or the channel closed).
    pub async fn wait_below(&self, limit: usize) {
        loop {
            let notified = self.drained.notified();
            if self.queued_bytes() < limit || self.is_closed() {
                return;
            }
            notified.await;
        }
    }
    /// Whether two writers feed the same channel.
    pub fn same_channel(&self, other: &ChannelWriter) -> bool {
        Arc::ptr_eq(&self.queued, &other.queued)
    }
    /// Stop the writer (after flushing what is queued).
    pub fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.drained.notify_waiters();
        self.closing.notify_waiters();
    }
    /// Stop the writer at once and free what is queued, even in the middle
    /// of a write to a peer that stopped reading (the memory-pressure
    /// handler's tool). The channel is dead afterwards.
    pub fn abort(&self) {
        self.aborted.store(true, Ordering::Relaxed);
        self.abort_signal.notify_waiters();
        self.close();
    }
    /// Whether [`ChannelWriter::abort`] was called.
    pub fn is_aborted(&self) -> bool {
        self.aborted.load(Ordering::Relaxed)
    }
    /// Wait until the writer has stopped (closed, aborted or failed).
    pub async fn closed(&self) {
        loop {
            let notified = self.closing.notified();
            if self.is_closed() {
                return;
            }
            notified.await;
        }
    }
}

/// The reactor's view of a channel after the handshake.
#[derive(Debug)]
pub struct ChannelIo {
    /// Batches of inbound cells; `Err` carries the reason the channel closed.
    pub rx: mpsc::Receiver<Result<Vec<RawCell>, String>>,
    /// Outbound side.
    pub tx: ChannelWriter,
}

/// Spawn the reader and writer tasks for an established channel.
/// `leftover` holds bytes already read past the handshake.
pub fn spawn_channel_io<S>(stream: S, codec: CellCodec, leftover: BytesMut) -> ChannelIo
where
    S: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut rd, mut wr) = tokio::io::split(stream);
    let (in_tx, in_rx) = mpsc::channel::<Result<Vec<RawCell>, String>>(READ_QUEUE);
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<BytesMut>();
    let writer = ChannelWriter {
        tx: out_tx,
        queued: Arc::new(AtomicUsize::new(0)),
        drained: Arc::new(Notify::new()),
        closed: Arc::new(AtomicBool::new(false)),
        aborted: Arc::new(AtomicBool::new(false)),
        closing: Arc::new(Notify::new()),
        abort_signal: Arc::new(Notify::new()),
    };

    tokio::spawn(async move {
        let mut buf = leftover;
        loop {
            let mut batch = Vec::new();
            loop {
                match codec.decode(&mut buf) {
                    Ok(Some(cell)) => {
                        batch.push(cell);
                        if batch.len() >= MAX_BATCH {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let _ = in_tx.send(Err(format!("bad cell: {e}"))).await;
                        return;
                    }
                }
            }
            if !batch.is_empty() {
                if in_tx.send(Ok(batch)).await.is_err() {
                    return;
                }
                continue;
            }
            if buf.is_empty() && buf.capacity() > READ_BUF_KEEP {
                // A burst grew the buffer: give the memory back while idle.
                buf = BytesMut::new();
            }
            if buf.capacity() - buf.len() < READ_CHUNK / 2 {
                buf.reserve(READ_CHUNK);
            }
            match tokio::time::timeout(IDLE_TIMEOUT, rd.read_buf(&mut buf)).await {
                Ok(Ok(0)) => {
                    let _ = in_tx.send(Err("closed by peer".into())).await;
                    return;
                }
                Ok(Ok(_)) => {}
                Ok(Err(e)) => {
                    let _ = in_tx.send(Err(format!("read error: {e}"))).await;
                    return;
                }
                Err(_) => {
                    let _ = in_tx.send(Err("idle timeout".into())).await;
                    return;
                }
            }
        }
    });

    let w = writer.clone();
    tokio::spawn(async move {
        loop {
            // `close()` with nothing queued must end the writer too (other
            // tasks may still hold senders), so wait on both.
            let closing = w.closing.notified();
            let next = if w.closed.load(Ordering::Relaxed) {
                out_rx.try_recv().ok()
            } else {
                tokio::select! {
                    m = out_rx.recv() => m,
                    _ = closing => out_rx.try_recv().ok(),
                }
            };
            let Some(mut pending) = next else {
                break;
            };
            // Coalesce everything already queued into one write. The buffer
            // lives only for this write, so an idle channel holds none.
            while pending.len() < WRITE_COALESCE {
                match out_rx.try_recv() {
                    Ok(more) => pending.extend_from_slice(&more),
                    Err(_) => break,
                }
            }
            let n = pending.len();
            // Register for the abort signal before checking the flag, so an
            // abort between the two is not missed.
            let abort = w.abort_signal.notified();
            let written = if w.is_aborted() {
                false
            } else {
                tokio::select! {
                    r = tokio::time::timeout(WRITE_STALL_TIMEOUT, async {
                        wr.write_all(&pending).await?;
                        wr.flush().await
                    }) => matches!(r, Ok(Ok(()))),
                    _ = abort => false,
                }
            };
            drop(pending);
            w.queued.fetch_sub(n, Ordering::Relaxed);
            w.drained.notify_waiters();
            if !written {
                break;
            }
            if w.closed.load(Ordering::Relaxed) && out_rx.is_empty() {
                break;
            }
        }
        w.closed.store(true, Ordering::Relaxed);
        out_rx.close();
        // Free what is still queued (an abort, or a send that raced the
        // close) now, not when the last sender goes.
        while let Ok(b) = out_rx.try_recv() {
            w.queued.fetch_sub(b.len(), Ordering::Relaxed);
        }
        w.drained.notify_waiters();
        w.closing.notify_waiters();
        let _ = wr.shutdown().await;
    });

    ChannelIo {
        rx: in_rx,
        tx: writer,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn chunk(n: usize, byte: u8) -> BytesMut {
        BytesMut::from(&vec![byte; n][..])
    }

    /// A peer that stops reading: abort frees the queue at once, even with
    /// a write in progress, and the channel refuses more.
    #[tokio::test]
    async fn abort_frees_the_queue_of_a_stuck_channel() {
        let (ours, _theirs) = tokio::io::duplex(4096);
        let io = spawn_channel_io(ours, CellCodec::new(), BytesMut::new());
        for _ in 0..64 {
            assert!(io.tx.send_now(chunk(16 * 1024, 1)));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            io.tx.queued_bytes() > 900 * 1024,
            "{}",
            io.tx.queued_bytes()
        );
        io.tx.abort();
        tokio::time::timeout(Duration::from_secs(5), io.tx.closed())
            .await
            .expect("writer stops");
        tokio::time::timeout(Duration::from_secs(5), async {
            while io.tx.queued_bytes() != 0 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("queue freed");
        assert!(!io.tx.send_now(chunk(10, 2)));
        assert_eq!(io.tx.queued_bytes(), 0);
    }

    /// `close` is not `abort`: everything queued still reaches a slow
    /// reader, in order.
    #[tokio::test]
    async fn close_flushes_everything_queued() {
        let (ours, mut theirs) = tokio::io::duplex(4096);
        let io = spawn_channel_io(ours, CellCodec::new(), BytesMut::new());
        let mut want = Vec::new();
        for i in 0..32u8 {
            assert!(io.tx.send_now(chunk(8 * 1024, i)));
            want.extend(std::iter::repeat_n(i, 8 * 1024));
        }
        io.tx.close();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), theirs.read_to_end(&mut got))
            .await
            .expect("reader finishes")
            .unwrap();
        assert_eq!(got, want);
        assert_eq!(io.tx.queued_bytes(), 0);
    }

    /// `close` with nothing queued ends the writer and shuts the transport
    /// down even while other tasks still hold clones of the writer (an idle
    /// channel closed by its reactor).
    #[tokio::test]
    async fn close_of_an_idle_channel_reaches_the_peer() {
        let (ours, mut theirs) = tokio::io::duplex(4096);
        let io = spawn_channel_io(ours, CellCodec::new(), BytesMut::new());
        let other_holder = io.tx.clone();
        tokio::time::sleep(Duration::from_millis(20)).await;
        io.tx.close();
        let mut got = Vec::new();
        tokio::time::timeout(Duration::from_secs(10), theirs.read_to_end(&mut got))
            .await
            .expect("the peer sees EOF")
            .unwrap();
        assert!(got.is_empty());
        assert!(other_holder.is_closed());
        assert!(!other_holder.send_now(chunk(10, 1)));
        assert_eq!(other_holder.queued_bytes(), 0);
    }
}
