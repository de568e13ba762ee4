//! The relay channel reactor.
//!
//! One task per channel. Circuits are table entries in the reactor of the
//! channel they arrived on ("origin" entries, towards the client) and, once
//! extended, in the reactor of the next channel ("next" entries). Cells
//! are forwarded by writing them straight into the other channel's
//! [`ChannelWriter`], so a relay cell crosses exactly one task and the two
//! directions of a circuit run on whichever cores their channels' reactors
//! run on. The tor1 state of a circuit is shared between the two entries
//! behind a mutex (forward ops from one reactor, backward from the other;
//! uncontended in practice).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use rand::Rng;
use tokio::sync::{Notify, mpsc};
use tracing::{debug, trace};

use onionmix_cell::chan::{
    ChanCmd as Cmd, Create2, Created2, HTYPE_NTOR, HTYPE_NTOR_V3, destroy_reason,
};
use onionmix_cell::relay::{self, RelayCmd, Sendme, end_reason};
use onionmix_cell::{CellBody, CellCodec, PAYLOAD_LEN, RawCell};
use onionmix_crypto::Tor1Layer;
use onionmix_link::circq::CircQueue;
use onionmix_link::{ChannelIo, ChannelWriter};
use onionmix_proto::cc::{CcParams, CircSender};
use onionmix_proto::channel::ProvenIds;
use onionmix_proto::layer::RelayLayer;
use onionmix_proto::relay_circ::{Inbound, RelayCircuit};
use onionmix_proto::xonxoff::StreamFlowMsg;

use crate::gate::StreamGate;

use super::RelayCtx;
use super::exit;
use super::idle::{idle_timeout_for, sleep_until_opt};

mod cmd;
pub(crate) mod conflux;
mod create;
mod hs;
mod origin;
mod originate;
pub(crate) mod streams;

pub use hs::HsCmd;
pub use originate::{
    DataSend, chan_signal, new_sender, originate_backward, try_originate_counted,
    try_originate_data,
};

/// Depth of a reactor's queue of CREATE2s to send for extensions (the
/// one command a client can multiply at will; past it an extension fails
/// with RESOURCELIMIT). Every other command goes to a second queue that
/// never drops: each is owed once per circuit or (`StreamDrained`, see
/// [`super::exit::DrainTally`]) is pending at most once per stream, so
/// that queue is bounded by the reactor's circuits and streams. A dropped
/// one would leak a circuit entry or stall a stream.
const CMD_QUEUE: usize = 4096;
/// How long a reactor waits for its own channel's full outbound queue to
/// drain (reading nothing more from that peer meanwhile) before closing
/// the channel: the peer sends but does not read.
pub const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The part of a circuit shared by its two reactors and its exit streams.
pub struct Shared {
    /// tor1 state (both directions).
    pub layer: Tor1Layer,
    /// Exit side: what may be sent towards the client (the fixed circuit
    /// window, or congestion control) and the SENDME digests.
    pub sender: CircSender,
    /// The circuit is gone: exit streams stop.
    pub closed: bool,
}

/// A shared circuit state handle.
pub type SharedCirc = Arc<Mutex<Shared>>;

/// Lock a shared circuit (poisoning cannot leave it inconsistent: every
/// critical section is a complete crypt+queue step).
pub fn lock(s: &SharedCirc) -> std::sync::MutexGuard<'_, Shared> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

struct SharedFwd(SharedCirc);

impl RelayLayer for SharedFwd {
    fn decrypt_forward(&mut self, body: &mut CellBody) -> Option<[u8; 20]> {
        lock(&self.0).layer.decrypt_forward(body)
    }
    fn originate_backward(&mut self, body: &mut CellBody) -> [u8; 20] {
        lock(&self.0).layer.originate_backward(body)
    }
    fn encrypt_backward(&mut self, body: &mut CellBody) {
        lock(&self.0).layer.encrypt_backward(body)
    }
}

/// Where the previous hop (towards the client) of a circuit is.
#[derive(Clone)]
pub struct PrevLink {
    /// Writer of the channel towards the client.
    pub writer: ChannelWriter,
    /// Codec of that channel.
    pub codec: CellCodec,
    /// Circuit ID on that channel.
    pub circ_id: u32,
    /// That channel's reactor.
    pub chan: RelayChanHandle,
    /// Shared circuit state.
    pub shared: SharedCirc,
}

/// Where the next hop of a circuit is.
#[derive(Clone)]
pub struct NextLink {
    /// Writer of the channel towards the next hop.
    pub writer: ChannelWriter,
    /// Codec of that channel.
    pub codec: CellCodec,
    /// Circuit ID on that channel.
    pub circ_id: u32,
    /// That channel's reactor.
    pub chan: RelayChanHandle,
}

/// Commands into a relay reactor.
pub enum RCmd {
    /// (to the next channel) Create a circuit for an EXTEND2.
    CreateFor {
        /// The handshake to forward.
        create2: Create2,
        /// The origin side.
        prev: PrevLink,
    },
    /// (to the origin channel) The extension succeeded.
    ExtendDone {
        /// Origin circuit ID.
        circ_id: u32,
        /// The origin circuit's shared state: the reply is for that
        /// circuit only, not for a later one that reuses its ID.
        shared: SharedCirc,
        /// The next hop.
        next: NextLink,
        /// The next hop's reply.
        created: Created2,
    },
    /// (to the origin channel) The extension failed.
    ExtendFailed {
        /// Origin circuit ID.
        circ_id: u32,
        /// The origin circuit's shared state (as in `ExtendDone`).
        shared: SharedCirc,
        /// DESTROY reason.
        reason: u8,
    },
    /// (to the origin channel) The next hop destroyed the circuit.
    NextGone {
        /// Origin circuit ID.
        circ_id: u32,
        /// The origin circuit's shared state: a client that reused the ID
        /// meanwhile keeps its new circuit.
        shared: SharedCirc,
    },
    /// (to the next channel) The origin side destroyed the circuit.
    PrevGone {
        /// Next-side circuit ID.
        circ_id: u32,
    },
    /// (to the origin channel) An exit stream wrote data to its target
    /// (how much: its [`super::exit::DrainTally`]).
    StreamDrained {
        /// Circuit.
        circ_id: u32,
        /// Stream.
        stream: u16,
    },
    /// (to the origin channel) An exit stream finished (END already sent).
    StreamClosed {
        /// Circuit.
        circ_id: u32,
        /// Stream.
        stream: u16,
    },
    /// Onion-service circuits (rendezvous joins and expiry).
    Hs(HsCmd),
    /// (to a conflux leg's origin channel) The leg's set was torn down:
    /// close the circuit with DESTROY `reason`.
    ConfluxTeardown {
        /// Circuit.
        circ_id: u32,
        /// DESTROY reason.
        reason: u8,
    },
    /// Close the channel.
    Close,
}

/// A handle to a relay channel's reactor.
#[derive(Clone)]
pub struct RelayChanHandle {
    tx: mpsc::Sender<RCmd>,
    /// Every command but `CreateFor` (see [`CMD_QUEUE`]).
    ctl: mpsc::UnboundedSender<RCmd>,
    /// Outbound cells.
    pub writer: ChannelWriter,
    /// The channel's codec.
    pub codec: CellCodec,
    /// The peer's proven identity (None: an unauthenticated client).
    pub peer: Option<ProvenIds>,
    closed: Arc<AtomicBool>,
    /// Circuits on this channel (both roles).
    pub n_circuits: Arc<AtomicUsize>,
}

impl RelayChanHandle {
    /// Queue a command (never blocks). A `CreateFor` the reactor has no
    /// room for fails the extension (RESOURCELIMIT); other commands are
    /// only lost with the reactor (the channel closed).
    pub fn send(&self, cmd: RCmd) {
        match cmd {
            c @ RCmd::CreateFor { .. } => {
                if let Err(mpsc::error::TrySendError::Full(RCmd::CreateFor { prev, .. })) =
                    self.tx.try_send(c)
                {
                    debug!("relay reactor has too many extensions queued");
                    prev.chan.send(RCmd::ExtendFailed {
                        circ_id: prev.circ_id,
                        shared: prev.shared.clone(),
                        reason: destroy_reason::RESOURCELIMIT,
                    });
                }
            }
            c => {
                let _ = self.ctl.send(c);
            }
        }
    }
    /// Whether the reactor has stopped.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed) || self.tx.is_closed()
    }
}

/// An exit stream as the origin reactor sees it.
pub struct StreamTx {
    /// Data from the client to the target (bounded: the stream window, or
    /// the XOFF threshold plus what a client may have in flight).
    pub data: mpsc::Sender<Bytes>,
    /// The stream's send gate (exit -> client).
    pub gate: Arc<StreamGate>,
    /// What the stream wrote to its target, not yet accounted (on one
    /// circuit; a conflux set's streams report directly).
    pub tally: Arc<super::exit::DrainTally>,
    /// Bytes queued in `data` not yet reported written.
    pub buffered: usize,
}

struct Origin {
    circ: RelayCircuit,
    shared: SharedCirc,
    next: Option<NextLink>,
    streams: HashMap<u16, StreamTx>,
    /// Onion-service role (introduction / rendezvous point).
    hs: hs::HsState,
    /// Woken when the circuit's window opens (or it closes); a conflux
    /// leg's is its set's.
    window_open: Arc<Notify>,
    params: Arc<CcParams>,
    /// The conflux set this circuit is a leg of.
    leg: Option<conflux::LegRef>,
    /// This circuit's cells queued on the next hop's channel (or, when
    /// joined at a rendezvous point, on the other circuit's).
    outq: CircQueue,
}

struct Next {
    prev: PrevLink,
    /// This circuit's cells queued on the previous hop's channel.
    outq: CircQueue,
    open: bool,
    /// When CREATE2 was sent (for a pending one's deadline).
    since: Instant,
}

/// A CREATE2 we forwarded for an EXTEND2 that has no CREATED2 after this
/// long is given up (DESTROY forward, the extension failed): a next hop
/// that never answers cannot hold circuit slots.
pub const CREATED2_DEADLINE: std::time::Duration = std::time::Duration::from_secs(60);
/// How often pending extensions are checked (their origin gone, their
/// deadline passed).
const PENDING_SWEEP: std::time::Duration = std::time::Duration::from_secs(5);

struct Reactor {
    ctx: Arc<RelayCtx>,
    me: RelayChanHandle,
    io_rx: mpsc::Receiver<Result<Vec<RawCell>, String>>,
    origins: HashMap<u32, Origin>,
    nexts: HashMap<u32, Next>,
    out: BytesMut,
    /// Pending writes to other channels, flushed after each batch.
    fwd: Vec<(ChannelWriter, BytesMut)>,
    create_tokens: f64,
    last_refill: Instant,
    initiated: bool,
    /// The channel's admission slot (inbound channels), released on close.
    _permit: Option<crate::admission::Permit>,
    /// How long the channel may stay open without circuits.
    idle_timeout: std::time::Duration,
    /// Keeps this channel's queue registered with the memory-pressure handler.
    _queue: super::oom::QueueGuard,
}

/// Start a reactor for an established relay channel.
pub fn spawn_relay_reactor(
    ctx: Arc<RelayCtx>,
    io: ChannelIo,
    codec: CellCodec,
    peer: Option<ProvenIds>,
    initiated: bool,
    permit: Option<crate::admission::Permit>,
) -> RelayChanHandle {
    let (tx, rx) = mpsc::channel(CMD_QUEUE);
    let (ctl, ctl_rx) = mpsc::unbounded_channel();
    let handle = RelayChanHandle {
        tx,
        ctl,
        writer: io.tx.clone(),
        codec,
        peer: peer.clone(),
        closed: Arc::new(AtomicBool::new(false)),
        n_circuits: Arc::new(AtomicUsize::new(0)),
    };
    let queue = ctx.queues.register(
        io.tx.clone(),
        super::oom::LinkMeta {
            peer: peer.as_ref().map(|p| p.rsa_id),
            initiated,
            circuits: handle.n_circuits.clone(),
        },
    );
    let burst = (ctx.cfg.create_rate_per_channel as f64 * 2.0).max(1.0);
    let idle_timeout = idle_timeout_for(
        &ctx.cfg,
        peer.is_some() || initiated,
        &mut rand::thread_rng(),
    );
    let reactor = Reactor {
        ctx,
        me: handle.clone(),
        io_rx: io.rx,
        origins: HashMap::new(),
        nexts: HashMap::new(),
        out: BytesMut::new(),
        fwd: Vec::new(),
        create_tokens: burst,
        last_refill: Instant::now(),
        initiated,
        _permit: permit,
        idle_timeout,
        _queue: queue,
    };
    tokio::spawn(reactor.run(rx, ctl_rx));
    handle
}

impl Reactor {
    async fn run(mut self, mut rx: mpsc::Receiver<RCmd>, mut ctl: mpsc::UnboundedReceiver<RCmd>) {
        let ctx = self.ctx.clone();
        ctx.stats.channels.fetch_add(1, Ordering::Relaxed);
        let mut idle_since = Some(tokio::time::Instant::now());
        let mut next_sweep = tokio::time::Instant::now() + PENDING_SWEEP;
        let why = loop {
            let idle_deadline = idle_since.map(|t| t + self.idle_timeout);
            tokio::select! {
                _ = sleep_until_opt(idle_deadline) => {
                    break "idle without circuits".to_string();
                }
                // Every few seconds, not per batch: the sweep walks the
                // channel's circuits.
                _ = tokio::time::sleep_until(next_sweep) => {}
                _ = self.me.writer.closed() => {
                    break if self.me.writer.is_aborted() {
                        "closed under memory pressure".to_string()
                    } else {
                        "writer closed".to_string()
                    };
                }
                batch = self.io_rx.recv() => match batch {
                    Some(Ok(cells)) => {
                        for cell in cells {
                            self.handle_cell(cell);
                        }
                    }
                    Some(Err(e)) => break e,
                    None => break "reader gone".into(),
                },
                cmd = ctl.recv() => match cmd {
                    Some(c) => {
                        if !self.handle_cmds(c, || ctl.try_recv().ok()) {
                            break "closed".to_string();
                        }
                    }
                    None => break "closed".to_string(),
                },
                cmd = rx.recv() => match cmd {
                    Some(c) => {
                        if !self.handle_cmds(c, || rx.try_recv().ok()) {
                            break "closed".to_string();
                        }
                    }
                    None => break "closed".to_string(),
                },
            }
            if tokio::time::Instant::now() >= next_sweep {
                next_sweep = tokio::time::Instant::now() + PENDING_SWEEP;
                self.sweep_pending_nexts(Instant::now());
            }
            if self.flush().is_err() {
                break "writer gone".into();
            }
            // Backpressure: don't take more input while a destination is
            // saturated.
            let hw = onionmix_link::io::DEFAULT_HIGH_WATER;
            if self.me.writer.queued_bytes() >= hw
                && tokio::time::timeout(DRAIN_WAIT, self.me.writer.wait_below(hw))
                    .await
                    .is_err()
            {
                break "peer stopped reading".into();
            }
            // Forwarding destinations are not waited for: one that is
            // full would hold up every circuit of this channel, the ones
            // going elsewhere too. Each circuit's queue there is bounded
            // instead (see `onionmix_link::circq`), and all queues
            // together by the memory-pressure handler.
            self.fwd.clear();
            let busy = !self.origins.is_empty() || !self.nexts.is_empty();
            match (busy, idle_since) {
                (true, _) => idle_since = None,
                (false, None) => idle_since = Some(tokio::time::Instant::now()),
                (false, Some(_)) => {}
            }
        };
        debug!("relay channel closed: {why}");
        self.shutdown();
        // DESTROYs queued for other channels by the teardown (next hops,
        // joined rendezvous circuits) must still leave.
        let _ = self.flush();
        self.me.closed.store(true, Ordering::Relaxed);
        self.me.writer.close();
        ctx.stats.channels.fetch_sub(1, Ordering::Relaxed);
        if let Some(p) = &self.me.peer {
            ctx.control.orconn(p.rsa_id, "CLOSED", Some("DONE"));
        }
    }

    /// Handle `first` and up to 256 more commands `next` has at once;
    /// false on `Close`.
    fn handle_cmds(&mut self, first: RCmd, mut next: impl FnMut() -> Option<RCmd>) -> bool {
        let mut c = first;
        for _ in 0..=256 {
            if matches!(c, RCmd::Close) {
                return false;
            }
            self.handle_cmd(c);
            match next() {
                Some(n) => c = n,
                None => break,
            }
        }
        true
    }

    fn flush(&mut self) -> Result<(), ()> {
        if !self.out.is_empty() {
            let chunk = self.out.split();
            if !self.me.writer.send_now(chunk) {
                return Err(());
            }
        }
        for (w, buf) in self.fwd.iter_mut() {
            if !buf.is_empty() {
                w.send_now(buf.split());
            }
        }
        Ok(())
    }

    fn fwd_buf(&mut self, w: &ChannelWriter) -> &mut BytesMut {
        fwd_buf_in(&mut self.fwd, w)
    }

    fn send_destroy(&mut self, circ_id: u32, reason: u8) {
        let mut body = [0u8; PAYLOAD_LEN];
        body[0] = reason;
        self.me
            .codec
            .encode_fixed(circ_id, Cmd::DESTROY, &body, &mut self.out);
    }

    fn shutdown(&mut self) {
        let ids: Vec<u32> = self.origins.keys().copied().collect();
        for id in ids {
            self.drop_origin(id, false);
        }
        let ids: Vec<u32> = self.nexts.keys().copied().collect();
        for id in ids {
            if let Some(n) = self.nexts.remove(&id) {
                self.circuit_gone();
                // Tell the client side the circuit died.
                let mut body = [0u8; PAYLOAD_LEN];
                body[0] = destroy_reason::CHANNEL_CLOSED;
                let mut buf = BytesMut::new();
                n.prev
                    .codec
                    .encode_fixed(n.prev.circ_id, Cmd::DESTROY, &body, &mut buf);
                n.prev.writer.send_now(buf);
                n.prev.chan.send(RCmd::NextGone {
                    circ_id: n.prev.circ_id,
                    shared: n.prev.shared.clone(),
                });
            }
        }
    }

    fn circuit_added(&self) {
        self.ctx.stats.circuits.fetch_add(1, Ordering::Relaxed);
        self.me.n_circuits.fetch_add(1, Ordering::Relaxed);
    }
    fn circuit_gone(&self) {
        self.ctx.stats.circuits.fetch_sub(1, Ordering::Relaxed);
        self.me.n_circuits.fetch_sub(1, Ordering::Relaxed);
    }

    /// Remove an origin circuit; tell the next hop (or the joined
    /// rendezvous circuit); close exit streams.
    fn drop_origin(&mut self, id: u32, send_destroy_back: bool) {
        if let Some(o) = self.origins.remove(&id) {
            self.circuit_gone();
            self.hs_circuit_gone(o.hs);
            lock(&o.shared).closed = true;
            o.window_open.notify_waiters();
            for (_, s) in o.streams {
                s.gate.close();
            }
            if let Some(leg) = o.leg {
                self.conflux_leg_gone(&o.shared, leg);
            }
            if let Some(n) = o.next {
                let mut body = [0u8; PAYLOAD_LEN];
                body[0] = destroy_reason::DESTROYED;
                let buf = self.fwd_buf(&n.writer);
                n.codec.encode_fixed(n.circ_id, Cmd::DESTROY, &body, buf);
                n.chan.send(RCmd::PrevGone { circ_id: n.circ_id });
            }
            if send_destroy_back {
                self.send_destroy(id, destroy_reason::DESTROYED);
            }
        }
    }

    fn handle_cell(&mut self, mut cell: RawCell) {
        let id = cell.circ_id;
        match cell.cmd {
            Cmd::CREATE2 => self.handle_create2(id, &cell.payload),
            Cmd::CREATE_FAST => self.handle_create_fast(id, &cell.payload),
            Cmd::CREATE => {
                // TAP is gone in tor 0.4.9.
                self.send_destroy(id, destroy_reason::PROTOCOL);
            }
            Cmd::RELAY | Cmd::RELAY_EARLY => {
                let early = cell.cmd == Cmd::RELAY_EARLY;
                let Some(body) = cell.body_mut() else { return };
                if self.origins.contains_key(&id) {
                    self.origin_relay(id, early, body);
                } else if self.nexts.contains_key(&id) {
                    if early {
                        // RELAY_EARLY never travels towards the client.
                        self.kill_next(id, true);
                        return;
                    }
                    self.next_relay(id, body);
                }
            }
            Cmd::CREATED2 => self.handle_created2(id, &cell.payload),
            Cmd::DESTROY => {
                if self.origins.contains_key(&id) {
                    self.drop_origin(id, false);
                } else if self.nexts.contains_key(&id) {
                    self.kill_next(id, false);
                }
            }
            Cmd::PADDING
            | Cmd::VPADDING
            | Cmd::PADDING_NEGOTIATE
            | Cmd::NETINFO
            | Cmd::VERSIONS => {}
            other => trace!("ignoring {other:?} on relay channel"),
        }
    }

    fn next_relay(&mut self, id: u32, body: &mut CellBody) {
        let Some(n) = self.nexts.get_mut(&id) else {
            return;
        };
        if !n.open {
            return;
        }
        // Borrowed, not cloned: this runs for every backward cell, and a
        // clone costs a dozen atomic reference counts.
        let prev = &n.prev;
        lock(&prev.shared).layer.encrypt_backward(body);
        let b: [u8; PAYLOAD_LEN] = *body;
        let buf = fwd_buf_in(&mut self.fwd, &prev.writer);
        prev.codec.encode_fixed(prev.circ_id, Cmd::RELAY, &b, buf);
        let queued = n.outq.push(&prev.writer, prev.circ_id, buf.len());
        let limit = self.ctx.queue_limits().toward_client;
        if forwarded(&self.ctx, queued, limit, "its client") {
            self.kill_next(id, true);
        }
    }

    /// Give up the pending extensions whose origin circuit is gone (its
    /// client sent DESTROY while we waited for CREATED2) or whose next hop
    /// did not answer within [`CREATED2_DEADLINE`].
    fn sweep_pending_nexts(&mut self, now: Instant) {
        let stale: Vec<(u32, bool)> = self
            .nexts
            .iter()
            .filter(|(_, n)| !n.open)
            .filter_map(|(id, n)| {
                if lock(&n.prev.shared).closed {
                    Some((*id, false))
                } else if now.saturating_duration_since(n.since) >= CREATED2_DEADLINE {
                    Some((*id, true))
                } else {
                    None
                }
            })
            .collect();
        for (id, late) in stale {
            if late {
                debug!("a next hop did not answer CREATE2 in time");
                self.kill_next(id, true);
            } else {
                self.drop_orphan_next(id);
            }
        }
    }

    /// Forget a next-hop entry whose origin circuit is gone, telling only
    /// the next hop (DESTROY): the origin side has nothing to hear.
    fn drop_orphan_next(&mut self, id: u32) {
        if self.nexts.remove(&id).is_some() {
            self.circuit_gone();
            self.send_destroy(id, destroy_reason::DESTROYED);
        }
    }

    fn kill_next(&mut self, id: u32, send_destroy_forward: bool) {
        if let Some(n) = self.nexts.remove(&id) {
            self.circuit_gone();
            if send_destroy_forward {
                self.send_destroy(id, destroy_reason::PROTOCOL);
            }
            if n.open {
                // Propagate towards the client (tor >= 0.4.5 behaviour).
                let mut b = [0u8; PAYLOAD_LEN];
                b[0] = destroy_reason::DESTROYED;
                let buf = self.fwd_buf(&n.prev.writer);
                n.prev
                    .codec
                    .encode_fixed(n.prev.circ_id, Cmd::DESTROY, &b, buf);
                n.prev.chan.send(RCmd::NextGone {
                    circ_id: n.prev.circ_id,
                    shared: n.prev.shared.clone(),
                });
            } else {
                n.prev.chan.send(RCmd::ExtendFailed {
                    circ_id: n.prev.circ_id,
                    shared: n.prev.shared.clone(),
                    reason: destroy_reason::DESTROYED,
                });
            }
        }
    }
}

/// Count a forwarded cell whose circuit now has `queued` cells on the
/// destination channel (towards `whom`). True when that is past the
/// consensus limit `max`: the caller closes the circuit, as tor does.
fn forwarded(ctx: &RelayCtx, queued: usize, max: u32, whom: &str) -> bool {
    ctx.stats.cells_forwarded.fetch_add(1, Ordering::Relaxed);
    let over = usize::try_from(max).is_ok_and(|m| queued > m);
    if over {
        debug!("closing a circuit with {queued} cells queued towards {whom}");
        ctx.stats.queue_limit_kills.fetch_add(1, Ordering::Relaxed);
    }
    over
}

/// The pending-writes buffer for channel `w` in `fwd` (one per destination
/// channel per batch).
fn fwd_buf_in<'a>(
    fwd: &'a mut Vec<(ChannelWriter, BytesMut)>,
    w: &ChannelWriter,
) -> &'a mut BytesMut {
    let idx = match fwd.iter().position(|(x, _)| x.same_channel(w)) {
        Some(i) => i,
        None => {
            fwd.push((w.clone(), BytesMut::with_capacity(16 * 1024)));
            fwd.len() - 1
        }
    };
    &mut fwd[idx].1
}
