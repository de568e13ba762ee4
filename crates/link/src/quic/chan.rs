//! A Tor channel over a QUIC link (`docs/quic-links.md` §2): the reactor
//! sees the same [`ChannelIo`] as on TLS, while underneath channel-level
//! cells travel on the control stream and each circuit's cells on a QUIC
//! stream of its own.
//!
//! Outbound, [`ChannelWriter::send_now`] hands framed cells to [`Mux::sort`]:
//! circuit-ID-0 cells go to the control stream's queue; a CREATE2 /
//! CREATE_FAST for an unknown circuit opens a stream (a task waits for
//! stream credit, then writes); a DESTROY resets the circuit's stream with
//! `0x100 + reason` and drops what is queued for it; every other cell is
//! appended to its circuit's queue. Each circuit stream has its own writer
//! task, so a stream blocked by flow control (a stalled circuit) holds up
//! nobody else, and its queue counts towards the channel's back-pressure
//! only up to [`STREAM_BACKPRESSURE_SHARE`]. A queue that passes
//! [`QuicLimits::max_circuit_queue`] destroys its circuit (RESOURCELIMIT),
//! as tor closes a circuit whose cell queue is full.
//!
//! Inbound, every stream has its own reader task feeding the reactor's
//! queue: the control stream's (channel-level cells only) and one per
//! circuit stream, which checks the stream carries only its circuit's
//! cells in the right order and turns a reset from the peer into a
//! DESTROY cell for the reactor.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use quinn::{SendStream, VarInt, WriteError};
use tokio::sync::{Notify, mpsc, watch};
use tracing::debug;

use onionmix_cell::chan::destroy_reason;
use onionmix_cell::{CellCodec, ChanCmd, RawCell};

use super::cc;
use super::stream::{ChunkSource, connection_lost, peer_reset_code};
use super::{QuicLink, QuicStream, codes};
use crate::LinkError;
use crate::io::{
    CellSource, ChannelIo, ChannelWriter, InboundTx, ReadEnd, ReadOpts, hand_over, inbound_queue,
    read_cells, spawn_writer,
};

/// How much of one circuit stream's queue counts towards the channel's
/// back-pressure ([`ChannelWriter::queued_bytes`]): producers slow down
/// when many circuits back up (the link itself is the bottleneck), not
/// when a few are stalled by their own readers.
pub const STREAM_BACKPRESSURE_SHARE: usize = 64 * 1024;
/// How long an orderly close waits for the control stream's queue to be
/// delivered and acknowledged before it closes the connection anyway.
pub const CLOSE_FLUSH_TIMEOUT: Duration = Duration::from_secs(10);
/// Bytes gathered into one stream write at most.
const WRITE_COALESCE: usize = 256 * 1024;

/// Start the channel I/O tasks of an established QUIC link whose link
/// handshake ran on `control` (`leftover`: bytes read past it). With
/// `accept_circuits` false (we are a client) circuit streams the peer opens
/// are reset with DESTROY(PROTOCOL): a relay never extends towards a
/// client. The negotiated link protocol must use 4-byte circuit IDs.
pub fn spawn_quic_channel_io(
    link: QuicLink,
    control: QuicStream,
    codec: CellCodec,
    leftover: BytesMut,
    accept_circuits: bool,
) -> Result<ChannelIo, LinkError> {
    let limits = link.limits.clone();
    if codec.circ_id_len() != 4 {
        link.close(codes::PROTOCOL);
        return Err(LinkError::Protocol(
            "QUIC links need link protocol 4 or higher".into(),
        ));
    }
    let (in_tx, in_rx) = inbound_queue();
    let (control_writer, out_rx) = ChannelWriter::new();
    let (queued, drained) = control_writer.counters();
    let mux = Arc::new(Mux {
        link: link.clone(),
        codec: codec.clone(),
        state: Mutex::new(State::default()),
        in_tx: in_tx.clone(),
        queued,
        drained,
        stream_bytes: AtomicUsize::new(0),
        shared_bytes: AtomicUsize::new(0),
        held_bytes: AtomicUsize::new(0),
        max_circuit_queue: limits.max_circuit_queue,
        accept_circuits,
        weight: cc::weight_of(&link.conn),
    });
    let (send, recv) = control.into_split();
    // Resolves once the writer has finished the control stream and the
    // peer acknowledged all of it (or the stream or connection ended).
    let flushed = send.stopped();
    spawn_writer(send, control_writer.clone(), out_rx);
    let reader_link = link.clone();
    tokio::spawn(async move {
        let mut recv = ChunkSource::new(recv);
        let opts = ReadOpts::default();
        let end = read_cells(&mut recv, &codec, leftover, &in_tx, opts, |c| {
            if c.circ_id == 0 {
                Ok(())
            } else {
                Err("a circuit cell on the control stream".into())
            }
        })
        .await;
        match &end {
            ReadEnd::ReactorGone => return,
            ReadEnd::Refused(_) | ReadEnd::BadCell(_) => reader_link.close(codes::PROTOCOL),
            ReadEnd::Error(e) if peer_reset_code(e).is_some() => reader_link.close(codes::PROTOCOL),
            _ => {}
        }
        let _ = in_tx.send(Err(end.describe())).await;
    });
    tokio::spawn(lifecycle(mux.clone(), control_writer.clone(), flushed));
    Ok(ChannelIo {
        rx: in_rx,
        tx: control_writer.with_mux(mux),
    })
}

/// Accept the peer's circuit streams until the channel ends, then close
/// the connection and end every circuit stream. An orderly close (our
/// reactor closed the channel) first lets the control stream deliver what
/// was queued on it, for at most [`CLOSE_FLUSH_TIMEOUT`]: closing the
/// connection at once would discard it, where a TLS channel's queue
/// still reaches the peer before the FIN.
async fn lifecycle(
    mux: Arc<Mux>,
    control: ChannelWriter,
    flushed: impl Future<Output = Result<Option<VarInt>, quinn::StoppedError>>,
) {
    let mut recount = tokio::time::interval(cc::WEIGHT_INTERVAL);
    recount.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut flushed = std::pin::pin!(flushed);
    // Before our close, `flushed` ends only if the peer stopped the
    // control stream (a violation of the mapping) or the connection ended.
    let mut flush_seen = None;
    loop {
        tokio::select! {
            _ = control.closed() => break,
            r = &mut flushed => {
                flush_seen = Some(r);
                break;
            }
            _ = recount.tick(), if mux.weight.is_some() => mux.recount_weight(),
            s = mux.link.accept_circuit_stream() => match s {
                Ok(Some(mut stream)) => {
                    if mux.accept_circuits {
                        tokio::spawn(run_accepted(mux.clone(), stream));
                    } else {
                        debug!("peer opened a circuit stream towards a client; reset");
                        stream.destroy(destroy_reason::PROTOCOL);
                    }
                }
                Ok(None) | Err(_) => break,
            },
        }
    }
    let code = if control.is_aborted() {
        codes::RESOURCE
    } else if matches!(flush_seen, Some(Ok(Some(_)))) {
        debug!("peer stopped the control stream");
        codes::PROTOCOL
    } else {
        codes::NO_ERROR
    };
    // Circuits end first, their streams reset with CHANNEL_CLOSED (not
    // left to readers that would find the reactor gone).
    mux.end_circuits();
    if code == codes::NO_ERROR
        && flush_seen.is_none()
        && control.is_closed()
        && mux.link.close_reason().is_none()
    {
        let _ = tokio::time::timeout(CLOSE_FLUSH_TIMEOUT, flushed).await;
    }
    mux.link.close(code);
    // The reactor learns of a closed connection from the control stream;
    // make sure it does even if the peer closed it first.
    control.close();
}

/// The circuit streams of one QUIC link (shared by the channel's writer
/// handles and the stream tasks).
pub(crate) struct Mux {
    pub(crate) link: QuicLink,
    codec: CellCodec,
    state: Mutex<State>,
    /// The reactor's inbound queue (DESTROYs we make up go there too).
    in_tx: InboundTx,
    /// The channel writer's back-pressure counter (control queue plus each
    /// stream's share).
    queued: Arc<AtomicUsize>,
    drained: Arc<Notify>,
    /// Bytes in all circuit queues.
    stream_bytes: AtomicUsize,
    /// Of those, what counts in `queued`.
    shared_bytes: AtomicUsize,
    /// Bytes the circuit streams' readers hold while they wait for room in
    /// the reactor's queue.
    held_bytes: AtomicUsize,
    max_circuit_queue: usize,
    accept_circuits: bool,
    /// How many flows the connection's controller stands for, if it is
    /// [`super::CubicPerCircuit`]: the circuits that sent lately.
    weight: Option<Arc<AtomicU32>>,
}

impl std::fmt::Debug for Mux {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mux")
            .field("link", &self.link)
            .field("stream_bytes", &self.stream_bytes.load(Ordering::Relaxed))
            .finish()
    }
}

#[derive(Default)]
struct State {
    circuits: HashMap<u32, Entry>,
    next_gen: u64,
    closed: bool,
}

struct Entry {
    tx: mpsc::UnboundedSender<BytesMut>,
    circ: Arc<Circ>,
}

/// One circuit's stream state, shared by its writer and reader tasks.
struct Circ {
    id: u32,
    /// Tells a later circuit with the same ID apart.
    generation: u64,
    /// Bytes queued for the stream, not yet handed to QUIC.
    queued: AtomicUsize,
    /// 0 while the stream lives; the reset code once it is destroyed.
    reset: watch::Sender<u32>,
    /// Bytes handed to QUIC so far, and the count at the last recount of
    /// active circuits ([`Mux::recount_weight`]).
    written: AtomicU64,
    seen: AtomicU64,
}

impl Circ {
    fn destroy(&self, reason: u8) {
        self.reset.send_replace(codes::destroy_code(reason));
    }
}

/// A run of cells that will wait behind `queued` bytes, in an allocation
/// of its own ([`Mux::queue_run`]); one that will not, as it is.
pub(super) fn own_if_waiting(cells: BytesMut, queued: usize) -> BytesMut {
    if queued > 0 {
        BytesMut::from(&cells[..])
    } else {
        cells
    }
}

fn lock(m: &Mutex<State>) -> std::sync::MutexGuard<'_, State> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn share(n: usize) -> usize {
    n.min(STREAM_BACKPRESSURE_SHARE)
}

fn is_create(cmd: ChanCmd) -> bool {
    matches!(
        cmd,
        ChanCmd::CREATE2 | ChanCmd::CREATE_FAST | ChanCmd::CREATE
    )
}

fn is_created(cmd: ChanCmd) -> bool {
    matches!(
        cmd,
        ChanCmd::CREATED2 | ChanCmd::CREATED_FAST | ChanCmd::CREATED
    )
}

impl Mux {
    /// Sort framed outbound cells onto the circuit streams; returns the
    /// channel-level cells for the control stream.
    pub(crate) fn sort(self: &Arc<Self>, mut buf: BytesMut) -> Option<BytesMut> {
        let mut control = BytesMut::new();
        let mut overflowed = Vec::new();
        {
            let mut st = lock(&self.state);
            // Consecutive cells of one circuit go to its queue as one
            // buffer (they are adjacent in `buf`, so joining them copies
            // nothing): a bulk circuit's batch is one queue message, not
            // one per cell.
            let mut run: Option<(u32, BytesMut)> = None;
            while !buf.is_empty() {
                let (circ_id, cmd, len) = match self.codec.peek_frame(&buf) {
                    Ok(Some(f)) => f,
                    // Our own framing: a partial or bad cell is a bug.
                    Ok(None) | Err(_) => {
                        debug!("dropping {} bytes that are not whole cells", buf.len());
                        break;
                    }
                };
                let cell = buf.split_to(len);
                if circ_id == 0 {
                    control.extend_from_slice(&cell);
                    continue;
                }
                if st.closed {
                    continue;
                }
                if run.as_ref().is_some_and(|(id, _)| *id != circ_id) {
                    self.queue_run(&st, run.take());
                }
                if cmd == ChanCmd::DESTROY {
                    // The circuit's stream is reset: what it had queued
                    // (and the run) is discarded with it.
                    run = None;
                    let reason = cell.get(self.codec.circ_id_len() + 1).copied().unwrap_or(0);
                    if let Some(e) = st.circuits.remove(&circ_id) {
                        e.circ.destroy(reason);
                    }
                    continue;
                }
                if !st.circuits.contains_key(&circ_id) {
                    if !is_create(cmd) {
                        // The circuit is gone; so are its late cells.
                        continue;
                    }
                    if !self.open_circuit(&mut st, circ_id) {
                        overflowed.push(circ_id);
                        continue;
                    }
                }
                let Some(e) = st.circuits.get(&circ_id) else {
                    continue;
                };
                let pending = run.as_ref().map_or(0, |(_, b)| b.len());
                let now = e.circ.queued.load(Ordering::Relaxed);
                if now.saturating_add(pending).saturating_add(cell.len()) > self.max_circuit_queue {
                    debug!("a circuit's stream queue is full; destroying the circuit");
                    run = None;
                    if let Some(e) = st.circuits.remove(&circ_id) {
                        e.circ.destroy(destroy_reason::RESOURCELIMIT);
                    }
                    overflowed.push(circ_id);
                    continue;
                }
                match &mut run {
                    Some((_, b)) => b.unsplit(cell),
                    None => run = Some((circ_id, cell)),
                }
            }
            self.queue_run(&st, run);
        }
        for id in overflowed {
            self.tell_reactor(id, destroy_reason::RESOURCELIMIT);
        }
        (!control.is_empty()).then_some(control)
    }

    /// Queue a run of one circuit's cells on its stream (if the circuit is
    /// still there). The run is a view into the producer's buffer, which
    /// holds other circuits' cells too and stays allocated as long as any
    /// view into it does; so a run that has to wait behind others (the
    /// circuit's stream is backed up) is copied into an allocation of its
    /// own, and what the queue counts is what it holds. A circuit that
    /// keeps up hands its runs on uncopied.
    fn queue_run(&self, st: &State, run: Option<(u32, BytesMut)>) {
        let Some((circ_id, cells)) = run else { return };
        let Some(e) = st.circuits.get(&circ_id) else {
            return;
        };
        let cells = own_if_waiting(cells, e.circ.queued.load(Ordering::Relaxed));
        let n = cells.len();
        self.add(&e.circ, n);
        if e.tx.send(cells).is_err() {
            self.sub(&e.circ, n);
        }
    }

    /// A new entry for a circuit we create; its task opens the stream.
    fn open_circuit(self: &Arc<Self>, st: &mut State, circ_id: u32) -> bool {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        let (circ, rx) = self.insert(st, circ_id);
        rt.spawn(run_opened(self.clone(), circ, rx));
        true
    }

    fn insert(
        &self,
        st: &mut State,
        circ_id: u32,
    ) -> (Arc<Circ>, mpsc::UnboundedReceiver<BytesMut>) {
        let (tx, rx) = mpsc::unbounded_channel();
        st.next_gen = st.next_gen.wrapping_add(1);
        let circ = Arc::new(Circ {
            id: circ_id,
            generation: st.next_gen,
            queued: AtomicUsize::new(0),
            reset: watch::Sender::new(0),
            written: AtomicU64::new(0),
            seen: AtomicU64::new(0),
        });
        st.circuits.insert(
            circ_id,
            Entry {
                tx,
                circ: circ.clone(),
            },
        );
        (circ, rx)
    }

    /// An entry for a circuit the peer's new stream creates; None if the
    /// circuit ID is in use (or the channel is closing).
    fn register_accepted(
        &self,
        circ_id: u32,
    ) -> Option<(Arc<Circ>, mpsc::UnboundedReceiver<BytesMut>)> {
        let mut st = lock(&self.state);
        if st.closed || circ_id == 0 || st.circuits.contains_key(&circ_id) {
            return None;
        }
        Some(self.insert(&mut st, circ_id))
    }

    /// Remove `circ`'s entry if it is still the current one for its ID,
    /// setting its reset code (`reason`) while the entry, which holds the
    /// sender of the circuit's queue, is still alive: a writer that sees
    /// its queue closed must find the code, or it would end the stream
    /// with a FIN instead of a reset. Whether the entry was there.
    fn remove(&self, circ: &Circ, reason: u8) -> bool {
        let mut st = lock(&self.state);
        match st.circuits.get(&circ.id) {
            Some(e) if e.circ.generation == circ.generation => {
                circ.destroy(reason);
                st.circuits.remove(&circ.id);
                true
            }
            _ => false,
        }
    }

    /// The circuit ends from this side of the link for `reason` without
    /// the reactor having asked (the peer reset it, broke the mapping, or
    /// its stream could not be opened): reset the stream and hand the
    /// reactor a DESTROY.
    fn end_circuit(&self, circ: &Circ, reason: u8) {
        if self.remove(circ, reason) {
            self.tell_reactor(circ.id, reason);
        }
    }

    /// Hand the reactor a DESTROY cell for `circ_id`.
    fn tell_reactor(&self, circ_id: u32, reason: u8) {
        let Ok(cell) = RawCell::fixed(circ_id, ChanCmd::DESTROY, &[reason]) else {
            return;
        };
        match self.in_tx.try_send(Ok(vec![cell])) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(m)) => {
                let tx = self.in_tx.clone();
                if let Ok(rt) = tokio::runtime::Handle::try_current() {
                    rt.spawn(async move {
                        let _ = tx.send(m).await;
                    });
                }
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }

    fn add(&self, c: &Circ, n: usize) {
        let old = c.queued.fetch_add(n, Ordering::Relaxed);
        let d = share(old.saturating_add(n)) - share(old);
        self.stream_bytes.fetch_add(n, Ordering::Relaxed);
        self.shared_bytes.fetch_add(d, Ordering::Relaxed);
        self.queued.fetch_add(d, Ordering::Relaxed);
    }

    fn sub(&self, c: &Circ, n: usize) {
        let old = c.queued.fetch_sub(n, Ordering::Relaxed);
        let d = share(old) - share(old.saturating_sub(n));
        self.stream_bytes.fetch_sub(n, Ordering::Relaxed);
        self.shared_bytes.fetch_sub(d, Ordering::Relaxed);
        self.queued.fetch_sub(d, Ordering::Relaxed);
        self.drained.notify_waiters();
    }

    /// Set the controller's weight to the number of circuits that handed
    /// QUIC data since the last recount (at least 1, at most
    /// [`cc::MAX_WEIGHT`]).
    fn recount_weight(&self) {
        let Some(weight) = &self.weight else { return };
        let mut active = 0u32;
        for e in lock(&self.state).circuits.values() {
            let now = e.circ.written.load(Ordering::Relaxed);
            if e.circ.seen.swap(now, Ordering::Relaxed) != now {
                active = active.saturating_add(1);
            }
        }
        weight.store(active.clamp(1, cc::MAX_WEIGHT), Ordering::Relaxed);
    }

    /// Bytes queued for circuit `circ_id`'s stream.
    pub(crate) fn circuit_queued(&self, circ_id: u32) -> usize {
        lock(&self.state)
            .circuits
            .get(&circ_id)
            .map_or(0, |e| e.circ.queued.load(Ordering::Relaxed))
    }

    /// Memory beyond the back-pressure count: the rest of the circuit
    /// queues, and what circuit streams' readers hold while the reactor's
    /// queue is full. What quinn itself buffers is not counted: it reports no
    /// occupancy, and any guess (its send window whenever a queue waits)
    /// would close busy links under a cap they do not threaten; it is
    /// bounded per link by the send and receive windows, as a TLS link's
    /// kernel socket buffers are (`docs/quic-links.md` §5.2).
    pub(crate) fn extra_memory(&self) -> usize {
        let total = self.stream_bytes.load(Ordering::Relaxed);
        let shared = self.shared_bytes.load(Ordering::Relaxed);
        let held = self.held_bytes.load(Ordering::Relaxed);
        total.saturating_sub(shared).saturating_add(held)
    }

    /// Close the connection now (the memory-pressure handler).
    pub(crate) fn abort(&self) {
        self.shutdown(codes::RESOURCE);
    }

    /// Close the connection with `code` and end every circuit stream.
    fn shutdown(&self, code: u32) {
        self.link.close(code);
        self.end_circuits();
    }

    /// End every circuit stream (CHANNEL_CLOSED) and take no more.
    fn end_circuits(&self) {
        let entries: Vec<Entry> = {
            let mut st = lock(&self.state);
            st.closed = true;
            st.circuits.drain().map(|(_, e)| e).collect()
        };
        for e in entries {
            e.circ.destroy(destroy_reason::CHANNEL_CLOSED);
        }
    }
}

/// A circuit we create: open its stream (waiting for credit), then run its
/// reader and writer.
async fn run_opened(mux: Arc<Mux>, circ: Arc<Circ>, rx: mpsc::UnboundedReceiver<BytesMut>) {
    let mut reset = circ.reset.subscribe();
    let opened = tokio::select! {
        r = mux.link.open_circuit_stream() => r,
        _ = reset.wait_for(|c| *c != 0) => {
            drain(&mux, &circ, rx);
            return;
        }
    };
    match opened {
        Ok(stream) => {
            let (send, recv) = stream.into_split();
            tokio::spawn(read_circuit(
                mux.clone(),
                circ.clone(),
                ChunkSource::new(recv),
                BytesMut::new(),
                false,
            ));
            write_circuit(mux, circ, send, rx).await;
        }
        Err(e) => {
            debug!("cannot open a circuit stream: {e}");
            let reason = match e {
                LinkError::Timeout(_) | LinkError::Limit(_) => destroy_reason::RESOURCELIMIT,
                _ => destroy_reason::CHANNEL_CLOSED,
            };
            mux.end_circuit(&circ, reason);
            drain(&mux, &circ, rx);
        }
    }
}

/// A stream the peer opened: its first cell must create a circuit whose ID
/// is not in use on this link.
async fn run_accepted(mux: Arc<Mux>, stream: QuicStream) {
    let (send, recv) = stream.into_split();
    let mut recv = ChunkSource::new(recv);
    let mut buf = BytesMut::new();
    let limit = mux.link.open_timeout;
    let first = tokio::time::timeout(limit, async {
        loop {
            if mux
                .codec
                .frame_len(&buf)
                .is_some_and(|l| l != mux.codec.fixed_len())
            {
                return Err("a variable-length cell on a circuit stream".to_string());
            }
            match mux.codec.decode(&mut buf) {
                Ok(Some(cell)) => return Ok(cell),
                Ok(None) => {}
                Err(e) => return Err(e.to_string()),
            }
            match recv.fill(&mut buf).await {
                Ok(0) => return Err("stream ended before its first cell".to_string()),
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
    })
    .await;
    let code = VarInt::from_u32(codes::destroy_code(destroy_reason::PROTOCOL));
    let refuse = |mut send: SendStream, mut recv: ChunkSource, why: &str| {
        debug!("refusing a circuit stream: {why}");
        let _ = send.reset(code);
        recv.stop(code);
    };
    let cell = match first {
        Ok(Ok(c)) => c,
        Ok(Err(why)) => return refuse(send, recv, &why),
        Err(_) => return refuse(send, recv, "no first cell in time"),
    };
    if !is_create(cell.cmd) {
        return refuse(send, recv, "its first cell does not create a circuit");
    }
    let Some((circ, rx)) = mux.register_accepted(cell.circ_id) else {
        return refuse(send, recv, "circuit ID in use");
    };
    // Hand the CREATE over as the reader hands over cells (counted while
    // the reactor's queue is full), and give up if the circuit is
    // destroyed meanwhile: nothing else ends this stream yet.
    let mut reset = circ.reset.subscribe();
    let handed = tokio::select! {
        ok = hand_over(&mux.in_tx, vec![cell], &buf, Some(&mux.held_bytes)) => Some(ok),
        _ = reset.wait_for(|c| *c != 0) => None,
    };
    match handed {
        Some(true) => {}
        Some(false) => return,
        None => {
            let code = VarInt::from_u32(*reset.borrow());
            let (mut send, mut recv) = (send, recv);
            let _ = send.reset(code);
            recv.stop(code);
            drain(&mux, &circ, rx);
            return;
        }
    }
    tokio::spawn(write_circuit(mux.clone(), circ.clone(), send, rx));
    read_circuit(mux, circ, recv, buf, true).await;
}

/// Read one circuit's stream until it ends; `created` is whether its
/// CREATE was already read (the peer opened it), otherwise the first cell
/// must be the CREATED.
async fn read_circuit(
    mux: Arc<Mux>,
    circ: Arc<Circ>,
    mut recv: ChunkSource,
    buf: BytesMut,
    created: bool,
) {
    let mut reset = circ.reset.subscribe();
    let id = circ.id;
    let mut expect_created = !created;
    let check = |c: &RawCell| {
        if c.circ_id != id {
            return Err("a cell of another circuit".to_string());
        }
        let ok = if expect_created {
            is_created(c.cmd)
        } else {
            matches!(c.cmd, ChanCmd::RELAY | ChanCmd::RELAY_EARLY)
        };
        expect_created = false;
        if ok {
            Ok(())
        } else {
            Err(format!("unexpected {:?} on a circuit stream", c.cmd))
        }
    };
    let opts = ReadOpts {
        fixed_only: true,
        held: Some(&mux.held_bytes),
        ..ReadOpts::default()
    };
    let end = tokio::select! {
        e = read_cells(&mut recv, &mux.codec, buf, &mux.in_tx, opts, check) => Some(e),
        _ = reset.wait_for(|c| *c != 0) => None,
    };
    match end {
        None => {
            let code = *reset.borrow();
            recv.stop(VarInt::from_u32(code));
        }
        Some(ReadEnd::ReactorGone) => {}
        Some(ReadEnd::Error(e)) if connection_lost(&e) => {}
        Some(ReadEnd::Error(e)) if peer_reset_code(&e).is_some() => {
            let code = peer_reset_code(&e).unwrap_or(0);
            mux.end_circuit(&circ, codes::destroy_reason(code));
        }
        Some(other) => {
            debug!("circuit stream: {}", other.describe());
            mux.end_circuit(&circ, destroy_reason::PROTOCOL);
            recv.stop(VarInt::from_u32(codes::destroy_code(
                destroy_reason::PROTOCOL,
            )));
        }
    }
}

/// Write one circuit's queue to its stream until the circuit ends.
async fn write_circuit(
    mux: Arc<Mux>,
    circ: Arc<Circ>,
    mut send: SendStream,
    mut rx: mpsc::UnboundedReceiver<BytesMut>,
) {
    let mut reset = circ.reset.subscribe();
    loop {
        let first = tokio::select! {
            biased;
            _ = reset.wait_for(|c| *c != 0) => break,
            m = rx.recv() => m,
        };
        let Some(first) = first else { break };
        let mut n = first.len();
        let mut chunks: Vec<Bytes> = vec![first.freeze()];
        while n < WRITE_COALESCE {
            match rx.try_recv() {
                Ok(b) => {
                    n += b.len();
                    chunks.push(b.freeze());
                }
                Err(_) => break,
            }
        }
        let written = tokio::select! {
            r = send.write_all_chunks(&mut chunks) => Some(r),
            _ = reset.wait_for(|c| *c != 0) => None,
        };
        drop(chunks);
        mux.sub(&circ, n);
        if matches!(written, Some(Ok(()))) {
            circ.written.fetch_add(n as u64, Ordering::Relaxed);
        }
        match written {
            None => break,
            Some(Ok(())) => {}
            Some(Err(WriteError::Stopped(code))) => {
                mux.end_circuit(&circ, codes::destroy_reason(code.into_inner()));
                break;
            }
            Some(Err(_)) => break,
        }
    }
    let code = *reset.borrow();
    if code != 0 {
        let _ = send.reset(VarInt::from_u32(code));
    }
    drain(&mux, &circ, rx);
}

/// Free what is still queued for a circuit whose stream is gone.
fn drain(mux: &Mux, circ: &Circ, mut rx: mpsc::UnboundedReceiver<BytesMut>) {
    rx.close();
    while let Ok(b) = rx.try_recv() {
        mux.sub(circ, b.len());
    }
}
