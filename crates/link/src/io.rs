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
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
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
/// Read buffer growth step, and the most one read appends.
pub(crate) const READ_CHUNK: usize = 32 * 1024;
/// An empty read buffer larger than this is released.
const READ_BUF_KEEP: usize = 64 * 1024;
/// Bytes gathered into one write at most (more if one chunk is larger).
const WRITE_COALESCE: usize = 256 * 1024;
/// Default high-water mark for a channel's outbound queue.
pub const DEFAULT_HIGH_WATER: usize = 2 * 1024 * 1024;

/// The sending side of a channel, shareable across tasks.
///
/// On a QUIC link ([`crate::quic::spawn_quic_channel_io`]) the framed
/// cells are sorted by circuit: channel-level cells go to the control
/// stream through the queue below, each circuit's cells to its own stream's
/// queue. [`ChannelWriter::queued_bytes`] then counts the control queue
/// plus at most [`crate::quic::STREAM_BACKPRESSURE_SHARE`] of each circuit
/// stream's queue, so one stalled circuit cannot make its producers (other
/// channels' reactors) stop for everyone; [`ChannelWriter::memory_bytes`]
/// counts everything.
#[derive(Clone, Debug)]
pub struct ChannelWriter {
    tx: mpsc::UnboundedSender<BytesMut>,
    queued: Arc<AtomicUsize>,
    /// Bytes ever accepted into the transport queue, and ever taken off
    /// it (written, or freed by an abort): a cell queued when the first
    /// read `p` has left once the second reaches `p` (see
    /// [`crate::circq::CircQueue`]).
    enqueued: Arc<AtomicU64>,
    dequeued: Arc<AtomicU64>,
    drained: Arc<Notify>,
    closed: Arc<AtomicBool>,
    /// Set by [`ChannelWriter::abort`]: drop what is queued, stop now.
    aborted: Arc<AtomicBool>,
    /// Notified when the writer closes or is aborted.
    closing: Arc<Notify>,
    /// Notified by [`ChannelWriter::abort`] only.
    abort_signal: Arc<Notify>,
    /// The circuit streams of a QUIC link.
    mux: Option<Arc<crate::quic::chan::Mux>>,
}

impl ChannelWriter {
    /// A writer with its queue's receiving end (for [`spawn_writer`]).
    pub(crate) fn new() -> (ChannelWriter, mpsc::UnboundedReceiver<BytesMut>) {
        let (tx, rx) = mpsc::unbounded_channel::<BytesMut>();
        let w = ChannelWriter {
            tx,
            queued: Arc::new(AtomicUsize::new(0)),
            enqueued: Arc::new(AtomicU64::new(0)),
            dequeued: Arc::new(AtomicU64::new(0)),
            drained: Arc::new(Notify::new()),
            closed: Arc::new(AtomicBool::new(false)),
            aborted: Arc::new(AtomicBool::new(false)),
            closing: Arc::new(Notify::new()),
            abort_signal: Arc::new(Notify::new()),
            mux: None,
        };
        (w, rx)
    }

    /// This writer sorting cells onto `mux`'s circuit streams.
    pub(crate) fn with_mux(mut self, mux: Arc<crate::quic::chan::Mux>) -> Self {
        self.mux = Some(mux);
        self
    }

    /// The back-pressure counter and its wake-up (shared with a QUIC
    /// link's circuit streams).
    pub(crate) fn counters(&self) -> (Arc<AtomicUsize>, Arc<Notify>) {
        (self.queued.clone(), self.drained.clone())
    }

    /// Append framed cells. Never blocks; returns false if the channel is
    /// closed.
    pub fn send_now(&self, buf: BytesMut) -> bool {
        match &self.mux {
            Some(m) => {
                if self.closed.load(Ordering::Relaxed) {
                    return false;
                }
                match m.sort(buf) {
                    Some(control) => self.send_control(control),
                    None => true,
                }
            }
            None => self.send_control(buf),
        }
    }

    /// Append framed cells to the queue of the transport's byte stream
    /// (the TLS stream, or a QUIC link's control stream).
    fn send_control(&self, buf: BytesMut) -> bool {
        if buf.is_empty() {
            return true;
        }
        if self.closed.load(Ordering::Relaxed) {
            return false;
        }
        let n = buf.len();
        self.queued.fetch_add(n, Ordering::Relaxed);
        // The position must be taken before the bytes can be written, so
        // that `dequeued` never passes `enqueued`.
        self.enqueued.fetch_add(n as u64, Ordering::Relaxed);
        if self.tx.send(buf).is_err() {
            self.queued.fetch_sub(n, Ordering::Relaxed);
            self.dequeued.fetch_add(n as u64, Ordering::Relaxed);
            self.closed.store(true, Ordering::Relaxed);
            return false;
        }
        true
    }
    /// Bytes ever queued on the transport's byte stream (TLS stream, or
    /// a QUIC link's control stream).
    pub fn enqueued_total(&self) -> u64 {
        self.enqueued.load(Ordering::Relaxed)
    }
    /// Bytes ever taken off that queue (written, or freed).
    pub fn dequeued_total(&self) -> u64 {
        self.dequeued.load(Ordering::Relaxed)
    }
    /// Whether circuits' cells go to their own streams (a QUIC link), so
    /// [`Self::circuit_queued_bytes`] counts one circuit only.
    pub fn per_circuit_queues(&self) -> bool {
        self.mux.is_some()
    }
    /// Bytes queued and not yet written, as back-pressure counts them
    /// (on a QUIC link: each circuit stream's queue only up to its share).
    pub fn queued_bytes(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
    /// Memory this channel's queues hold (the memory-pressure handler's
    /// measure): on TLS [`Self::queued_bytes`]; on a QUIC link the control
    /// queue, every circuit stream's whole queue and what its readers hold
    /// while they wait for room in the reactor's queue.
    pub fn memory_bytes(&self) -> usize {
        let extra = self.mux.as_ref().map_or(0, |m| m.extra_memory());
        self.queued_bytes().saturating_add(extra)
    }
    /// Bytes queued towards the peer for circuit `circ_id`: its stream's
    /// queue on a QUIC link, the whole channel's queue on TLS.
    pub fn circuit_queued_bytes(&self, circ_id: u32) -> usize {
        match &self.mux {
            Some(m) => m.circuit_queued(circ_id),
            None => self.queued_bytes(),
        }
    }
    /// Wait until fewer than `limit` bytes are queued for circuit
    /// `circ_id` (see [`Self::circuit_queued_bytes`]) or the channel
    /// closed.
    pub async fn wait_circuit_below(&self, circ_id: u32, limit: usize) {
        loop {
            let notified = self.drained.notified();
            if self.circuit_queued_bytes(circ_id) < limit || self.is_closed() {
                return;
            }
            notified.await;
        }
    }
    /// The transport carrying this channel: `"tls"` or `"quic"`.
    pub fn transport(&self) -> &'static str {
        if self.mux.is_some() { "quic" } else { "tls" }
    }
    /// The QUIC link's path counters (None on TLS).
    pub fn quic_stats(&self) -> Option<crate::quic::QuicPathStats> {
        self.mux.as_ref().map(|m| m.link.path_stats())
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
        if let Some(m) = &self.mux {
            m.abort();
        }
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
    let (rd, wr) = tokio::io::split(stream);
    let (in_tx, in_rx) = mpsc::channel::<Result<Vec<RawCell>, String>>(READ_QUEUE);
    let (writer, out_rx) = ChannelWriter::new();
    tokio::spawn(async move {
        let why = match read_cells(
            &mut ByteSource(rd),
            &codec,
            leftover,
            &in_tx,
            ReadOpts {
                idle: Some(IDLE_TIMEOUT),
                ..ReadOpts::default()
            },
            |_| Ok(()),
        )
        .await
        {
            ReadEnd::ReactorGone => return,
            end => end.describe(),
        };
        let _ = in_tx.send(Err(why)).await;
    });
    spawn_writer(wr, writer.clone(), out_rx);
    ChannelIo {
        rx: in_rx,
        tx: writer,
    }
}

/// The reactor's end of the inbound queue.
pub(crate) type InboundTx = mpsc::Sender<Result<Vec<RawCell>, String>>;

/// A new inbound queue (reader tasks to a reactor).
pub(crate) fn inbound_queue() -> (InboundTx, mpsc::Receiver<Result<Vec<RawCell>, String>>) {
    mpsc::channel(READ_QUEUE)
}

/// Why [`read_cells`] stopped.
#[derive(Debug)]
pub(crate) enum ReadEnd {
    /// The peer finished its sending side.
    Eof,
    /// Reading failed.
    Error(std::io::Error),
    /// Bytes that are not a cell.
    BadCell(onionmix_cell::CellError),
    /// The check refused a cell.
    Refused(String),
    /// Nothing arrived within the idle timeout.
    Idle,
    /// The reactor dropped its receiver.
    ReactorGone,
}

impl ReadEnd {
    /// The reason handed to the reactor.
    pub(crate) fn describe(&self) -> String {
        match self {
            ReadEnd::Eof => "closed by peer".into(),
            ReadEnd::Error(e) => format!("read error: {e}"),
            ReadEnd::BadCell(e) => format!("bad cell: {e}"),
            ReadEnd::Refused(why) => why.clone(),
            ReadEnd::Idle => "idle timeout".into(),
            ReadEnd::ReactorGone => "reactor gone".into(),
        }
    }
}

/// Where [`read_cells`] gets its bytes: a byte stream (TLS, the QUIC
/// control stream) or a QUIC circuit stream
/// ([`crate::quic::chan`]'s source, which holds no read buffer while it
/// waits).
pub(crate) trait CellSource: Send {
    /// Wait until bytes arrive and append them to `buf` (about
    /// [`READ_CHUNK`] at most); `Ok(0)` when the peer finished sending.
    fn fill(&mut self, buf: &mut BytesMut) -> impl Future<Output = std::io::Result<usize>> + Send;
}

/// A byte stream as a [`CellSource`]: reads into `buf`'s spare capacity,
/// keeping up to [`READ_BUF_KEEP`] of it between reads.
pub(crate) struct ByteSource<R>(pub R);

impl<R: AsyncRead + Unpin + Send> CellSource for ByteSource<R> {
    async fn fill(&mut self, buf: &mut BytesMut) -> std::io::Result<usize> {
        if buf.is_empty() && buf.capacity() > READ_BUF_KEEP {
            // A burst grew the buffer: give the memory back while idle.
            *buf = BytesMut::new();
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 2 {
            buf.reserve(READ_CHUNK);
        }
        self.0.read_buf(buf).await
    }
}

/// How [`read_cells`] reads.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct ReadOpts<'a> {
    /// Give up when nothing arrives for this long.
    pub idle: Option<Duration>,
    /// The stream carries fixed-size cells only (a QUIC circuit stream),
    /// so a variable-length header is refused as soon as it arrives rather
    /// than after up to 64 KiB of its body were buffered.
    pub fixed_only: bool,
    /// Where to count the bytes the reader holds (its batch and read
    /// buffer) while it waits for room in the reactor's queue: a QUIC
    /// link has a reader per circuit stream, so a reactor that falls
    /// behind leaves up to one batch and one fill waiting in each, which
    /// the memory-pressure handler must see.
    pub held: Option<&'a AtomicUsize>,
}

/// Bytes counted in a [`ReadOpts::held`] counter for as long as this
/// lives (a reader waiting for the reactor may be dropped, when its
/// circuit is destroyed, without returning).
struct Held<'a> {
    counter: &'a AtomicUsize,
    bytes: usize,
}

impl<'a> Held<'a> {
    fn new(counter: &'a AtomicUsize, bytes: usize) -> Self {
        counter.fetch_add(bytes, Ordering::Relaxed);
        Held { counter, bytes }
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// Hand `batch` to the reactor; false when the reactor is gone. With
/// room in the queue this costs no accounting; otherwise what the reader
/// holds (`batch` and `buf`) is counted in `held` while it waits.
pub(crate) async fn hand_over(
    in_tx: &InboundTx,
    batch: Vec<RawCell>,
    buf: &BytesMut,
    held: Option<&AtomicUsize>,
) -> bool {
    let batch = match in_tx.try_send(Ok(batch)) {
        Ok(()) => return true,
        Err(mpsc::error::TrySendError::Closed(_)) => return false,
        Err(mpsc::error::TrySendError::Full(b)) => b,
    };
    let _held = held.map(|h| {
        let cells: usize = match &batch {
            Ok(cells) => cells
                .iter()
                .map(|c| c.payload.capacity().saturating_add(CELL_OVERHEAD))
                .sum(),
            Err(_) => 0,
        };
        Held::new(h, cells.saturating_add(buf.capacity()))
    });
    in_tx.send(batch).await.is_ok()
}

/// A [`RawCell`]'s memory besides its payload, about (circuit ID, command,
/// the `BytesMut` handle).
const CELL_OVERHEAD: usize = 40;

/// Read cells from `rd` (after `buf`, bytes already read) and hand them to
/// the reactor in batches until the stream ends or `check` refuses one
/// (see [`ReadOpts`] for the options).
pub(crate) async fn read_cells<S: CellSource>(
    rd: &mut S,
    codec: &CellCodec,
    mut buf: BytesMut,
    in_tx: &InboundTx,
    opts: ReadOpts<'_>,
    mut check: impl FnMut(&RawCell) -> Result<(), String>,
) -> ReadEnd {
    let ReadOpts {
        idle,
        fixed_only,
        held,
    } = opts;
    loop {
        let mut batch = Vec::new();
        loop {
            if fixed_only
                && codec
                    .frame_len(&buf)
                    .is_some_and(|l| l != codec.fixed_len())
            {
                if !batch.is_empty() {
                    let _ = in_tx.send(Ok(batch)).await;
                }
                return ReadEnd::Refused("a variable-length cell on a circuit stream".into());
            }
            match codec.decode(&mut buf) {
                Ok(Some(cell)) => {
                    if let Err(why) = check(&cell) {
                        // What came before the refused cell still counts.
                        if !batch.is_empty() {
                            let _ = in_tx.send(Ok(batch)).await;
                        }
                        return ReadEnd::Refused(why);
                    }
                    batch.push(cell);
                    if batch.len() >= MAX_BATCH {
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => return ReadEnd::BadCell(e),
            }
        }
        if !batch.is_empty() {
            if !hand_over(in_tx, batch, &buf, held).await {
                return ReadEnd::ReactorGone;
            }
            continue;
        }
        let read = match idle {
            Some(d) => match tokio::time::timeout(d, rd.fill(&mut buf)).await {
                Ok(r) => r,
                Err(_) => return ReadEnd::Idle,
            },
            None => rd.fill(&mut buf).await,
        };
        match read {
            Ok(0) => return ReadEnd::Eof,
            Ok(_) => {}
            Err(e) => return ReadEnd::Error(e),
        }
    }
}

/// The writer task: drains `out_rx` into `wr` until the writer is closed
/// or aborted, then shuts `wr` down.
pub(crate) fn spawn_writer<W>(
    mut wr: W,
    w: ChannelWriter,
    mut out_rx: mpsc::UnboundedReceiver<BytesMut>,
) where
    W: AsyncWrite + Unpin + Send + 'static,
{
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
            w.dequeued.fetch_add(n as u64, Ordering::Relaxed);
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
            w.dequeued.fetch_add(b.len() as u64, Ordering::Relaxed);
        }
        w.drained.notify_waiters();
        w.closing.notify_waiters();
        let _ = wr.shutdown().await;
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt;

    fn chunk(n: usize, byte: u8) -> BytesMut {
        BytesMut::from(&vec![byte; n][..])
    }

    /// A hand-over that finds room costs no accounting; one that waits
    /// counts the batch and the read buffer until it ends, by delivery or
    /// by being dropped.
    #[tokio::test]
    async fn a_waiting_hand_over_is_counted_until_it_ends() {
        let (tx, mut rx) = inbound_queue();
        let held = AtomicUsize::new(0);
        let buf = BytesMut::with_capacity(1000);
        let cell = || RawCell {
            circ_id: 7,
            cmd: onionmix_cell::ChanCmd::RELAY,
            payload: BytesMut::from(&[0u8; 509][..]),
        };
        for _ in 0..READ_QUEUE {
            assert!(hand_over(&tx, vec![cell()], &buf, Some(&held)).await);
        }
        assert_eq!(held.load(Ordering::Relaxed), 0);

        // Full: the next one waits, counted; dropped, it is not.
        let wait = hand_over(&tx, vec![cell(), cell()], &buf, Some(&held));
        assert!(
            tokio::time::timeout(Duration::from_millis(20), wait)
                .await
                .is_err()
        );
        assert_eq!(held.load(Ordering::Relaxed), 0);
        let wait = hand_over(&tx, vec![cell(), cell()], &buf, Some(&held));
        tokio::pin!(wait);
        tokio::select! {
            biased;
            _ = &mut wait => panic!("the queue is full"),
            _ = tokio::task::yield_now() => {}
        }
        let counted = held.load(Ordering::Relaxed);
        assert!(counted >= 2 * 509 + 1000, "{counted}");
        // Room again: it is delivered and the count goes.
        assert!(rx.recv().await.is_some());
        assert!(wait.await);
        assert_eq!(held.load(Ordering::Relaxed), 0);
        // The reactor gone: false, nothing counted.
        drop(rx);
        assert!(!hand_over(&tx, vec![cell()], &buf, None).await);
        assert_eq!(held.load(Ordering::Relaxed), 0);
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
