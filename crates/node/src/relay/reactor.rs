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
use tokio::sync::{Semaphore, mpsc};
use tracing::{debug, trace};

use onionmix_cell::chan::{
    ChanCmd as Cmd, Create2, Created2, HTYPE_NTOR, HTYPE_NTOR_V3, destroy_reason,
};
use onionmix_cell::relay::{self, RelayCmd, Sendme, end_reason};
use onionmix_cell::{CellBody, CellCodec, PAYLOAD_LEN, RawCell};
use onionmix_crypto::Tor1Layer;
use onionmix_link::{ChannelIo, ChannelWriter};
use onionmix_proto::channel::ProvenIds;
use onionmix_proto::flow::{CIRC_WINDOW_INC, CIRC_WINDOW_START, PackageWindow, STREAM_WINDOW_INC};
use onionmix_proto::layer::RelayLayer;
use onionmix_proto::relay_circ::{Inbound, RelayCircuit};

use super::RelayCtx;
use super::exit;
use super::idle::{idle_timeout_for, sleep_until_opt};

/// Depth of a reactor's command queue.
const CMD_QUEUE: usize = 4096;
/// How long a reactor waits for a full channel (its own or a forwarding
/// destination) to drain before giving up on it. Every circuit of this
/// channel waits meanwhile, so a destination that stays full this long is
/// closed rather than stalling them all.
pub const DRAIN_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// The part of a circuit shared by its two reactors and its exit streams.
pub struct Shared {
    /// tor1 state (both directions).
    pub layer: Tor1Layer,
    /// Exit side: the circuit package window towards the client.
    pub pkg: PackageWindow,
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
        /// The next hop.
        next: NextLink,
        /// The next hop's reply.
        created: Created2,
    },
    /// (to the origin channel) The extension failed.
    ExtendFailed {
        /// Origin circuit ID.
        circ_id: u32,
        /// DESTROY reason.
        reason: u8,
    },
    /// (to the origin channel) The next hop destroyed the circuit.
    NextGone {
        /// Origin circuit ID.
        circ_id: u32,
    },
    /// (to the next channel) The origin side destroyed the circuit.
    PrevGone {
        /// Next-side circuit ID.
        circ_id: u32,
    },
    /// (to the origin channel) An exit stream's app side consumed a window.
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
    /// Close the channel.
    Close,
}

/// A handle to a relay channel's reactor.
#[derive(Clone)]
pub struct RelayChanHandle {
    tx: mpsc::Sender<RCmd>,
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
    /// Queue a command (never blocks; drops if the reactor is overloaded or
    /// gone, which only happens when the channel is dying).
    pub fn send(&self, cmd: RCmd) {
        if self.tx.try_send(cmd).is_err() {
            debug!("relay reactor command queue full or closed");
        }
    }
    /// Whether the reactor has stopped.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed) || self.tx.is_closed()
    }
}

/// An exit stream as the origin reactor sees it.
pub struct StreamTx {
    /// Data from the client to the target (bounded by the stream window).
    pub data: mpsc::Sender<Bytes>,
    /// Stream package-window credits (exit -> client).
    pub credits: Arc<Semaphore>,
}

struct Origin {
    circ: RelayCircuit,
    shared: SharedCirc,
    next: Option<NextLink>,
    streams: HashMap<u16, StreamTx>,
    circ_credits: Arc<Semaphore>,
}

struct Next {
    prev: PrevLink,
    open: bool,
}

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
    let handle = RelayChanHandle {
        tx,
        writer: io.tx.clone(),
        codec,
        peer: peer.clone(),
        closed: Arc::new(AtomicBool::new(false)),
        n_circuits: Arc::new(AtomicUsize::new(0)),
    };
    let queue = ctx.queues.register(io.tx.clone());
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
    tokio::spawn(reactor.run(rx));
    handle
}

impl Reactor {
    async fn run(mut self, mut rx: mpsc::Receiver<RCmd>) {
        let ctx = self.ctx.clone();
        ctx.stats.channels.fetch_add(1, Ordering::Relaxed);
        let mut idle_since = Some(tokio::time::Instant::now());
        let why = loop {
            let idle_deadline = idle_since.map(|t| t + self.idle_timeout);
            tokio::select! {
                _ = sleep_until_opt(idle_deadline) => {
                    break "idle without circuits".to_string();
                }
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
                cmd = rx.recv() => match cmd {
                    Some(RCmd::Close) | None => break "closed".to_string(),
                    Some(c) => {
                        self.handle_cmd(c);
                        for _ in 0..256 {
                            match rx.try_recv() {
                                Ok(RCmd::Close) => break,
                                Ok(c) => self.handle_cmd(c),
                                Err(_) => break,
                            }
                        }
                    }
                },
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
            for (w, _) in std::mem::take(&mut self.fwd) {
                if w.queued_bytes() >= hw
                    && tokio::time::timeout(DRAIN_WAIT, w.wait_below(hw))
                        .await
                        .is_err()
                {
                    // That channel's reactor sees its writer closed and
                    // tears its circuits down (DESTROY back to us).
                    debug!("closing a forwarding destination that stayed full");
                    w.close();
                }
            }
            let busy = !self.origins.is_empty() || !self.nexts.is_empty();
            match (busy, idle_since) {
                (true, _) => idle_since = None,
                (false, None) => idle_since = Some(tokio::time::Instant::now()),
                (false, Some(_)) => {}
            }
        };
        debug!("relay channel closed: {why}");
        self.shutdown();
        self.me.closed.store(true, Ordering::Relaxed);
        self.me.writer.close();
        ctx.stats.channels.fetch_sub(1, Ordering::Relaxed);
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
        let idx = match self.fwd.iter().position(|(x, _)| x.same_channel(w)) {
            Some(i) => i,
            None => {
                self.fwd
                    .push((w.clone(), BytesMut::with_capacity(16 * 1024)));
                self.fwd.len() - 1
            }
        };
        &mut self.fwd[idx].1
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

    /// Remove an origin circuit; tell the next hop; close exit streams.
    fn drop_origin(&mut self, id: u32, send_destroy_back: bool) {
        if let Some(o) = self.origins.remove(&id) {
            self.circuit_gone();
            o.circ_credits.close();
            for (_, s) in o.streams {
                s.credits.close();
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

    fn refill_tokens(&mut self) {
        let rate = self.ctx.cfg.create_rate_per_channel as f64;
        let now = Instant::now();
        let dt = now.duration_since(self.last_refill).as_secs_f64();
        self.last_refill = now;
        self.create_tokens = (self.create_tokens + dt * rate).min((rate * 2.0).max(1.0));
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

    /// DoS limits for a new circuit: per-channel count, creation rate,
    /// global count. False (and DESTROY sent) when over a limit.
    fn admit_circuit(&mut self, id: u32) -> bool {
        if id == 0 || self.origins.contains_key(&id) || self.nexts.contains_key(&id) {
            self.send_destroy(id, destroy_reason::PROTOCOL);
            return false;
        }
        self.refill_tokens();
        let per_chan = self.me.n_circuits.load(Ordering::Relaxed);
        let global = self.ctx.stats.circuits.load(Ordering::Relaxed);
        if per_chan >= self.ctx.cfg.max_circuits_per_channel
            || global >= self.ctx.cfg.max_circuits
            || self.create_tokens < 1.0
        {
            self.ctx
                .stats
                .creates_refused
                .fetch_add(1, Ordering::Relaxed);
            self.send_destroy(id, destroy_reason::RESOURCELIMIT);
            return false;
        }
        self.create_tokens -= 1.0;
        true
    }

    /// CREATE_FAST (tor-spec 5.1.1): tor clients use it for one-hop
    /// directory circuits to relays whose onion key they do not know yet
    /// (e.g. fetching microdescriptors from a directory guard).
    fn handle_create_fast(&mut self, id: u32, payload: &[u8]) {
        if !self.admit_circuit(id) {
            return;
        }
        let Some(x) = payload.get(..20).and_then(|x| <[u8; 20]>::try_from(x).ok()) else {
            self.send_destroy(id, destroy_reason::PROTOCOL);
            return;
        };
        let mut y = [0u8; 20];
        rand::RngCore::fill_bytes(&mut rand::rngs::OsRng, &mut y);
        let ckeys = onionmix_crypto::CircuitKeys::from_create_fast(&x, &y);
        let mut reply = Vec::with_capacity(40);
        reply.extend_from_slice(&y);
        reply.extend_from_slice(&ckeys.kh);
        self.install_origin(id, Cmd::CREATED_FAST, &reply, &ckeys);
    }

    fn handle_create2(&mut self, id: u32, payload: &[u8]) {
        if !self.admit_circuit(id) {
            return;
        }
        let Ok(c) = Create2::parse(payload) else {
            self.send_destroy(id, destroy_reason::PROTOCOL);
            return;
        };
        let keys = self.ctx.ntor_keys();
        let res = match c.htype {
            HTYPE_NTOR => onionmix_crypto::ntor_server(
                &self.ctx.rsa_id,
                &keys,
                &c.hdata,
                &mut rand::rngs::OsRng,
            )
            .map(|(r, k)| (r.to_vec(), k)),
            HTYPE_NTOR_V3 => {
                // No extensions are accepted yet (no congestion control, so
                // no CC_RESPONSE: the client keeps using SENDME windows).
                let mut answer =
                    |_client_msg: &[u8]| Some(onionmix_crypto::ntor_v3::encode_extensions(&[]));
                onionmix_crypto::ntor_v3::ntor3_server(
                    &self.ctx.ed_id,
                    &keys,
                    &c.hdata,
                    onionmix_crypto::ntor_v3::NTOR3_CIRC_VERIFICATION,
                    &mut answer,
                    &mut rand::rngs::OsRng,
                )
                .map(|(r, ks)| (r, ks.circuit_keys()))
            }
            _ => {
                self.send_destroy(id, destroy_reason::PROTOCOL);
                return;
            }
        };
        let (reply, ckeys) = match res {
            Ok(x) => x,
            Err(e) => {
                debug!("CREATE2 handshake failed: {e}");
                self.send_destroy(id, destroy_reason::PROTOCOL);
                return;
            }
        };
        let created = Created2 { hdata: reply };
        self.install_origin(id, Cmd::CREATED2, &created.encode(), &ckeys);
    }

    /// Answer a CREATE*/CREATE_FAST with `cmd`/`payload` and start the
    /// circuit with `ckeys`.
    fn install_origin(
        &mut self,
        id: u32,
        cmd: Cmd,
        payload: &[u8],
        ckeys: &onionmix_crypto::CircuitKeys,
    ) {
        let shared = Arc::new(Mutex::new(Shared {
            layer: Tor1Layer::new(ckeys),
            pkg: PackageWindow::circuit(),
        }));
        if let Ok(cell) = RawCell::fixed(id, cmd, payload)
            && let Some(b) = cell.body()
        {
            let b = *b;
            self.me.codec.encode_fixed(id, cmd, &b, &mut self.out);
        }
        self.origins.insert(
            id,
            Origin {
                circ: RelayCircuit::new(Box::new(SharedFwd(shared.clone()))),
                shared,
                next: None,
                streams: HashMap::new(),
                circ_credits: Arc::new(Semaphore::new(CIRC_WINDOW_START as usize)),
            },
        );
        self.circuit_added();
        self.ctx
            .stats
            .circuits_created
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Originate a relay cell towards the client on an origin circuit.
    fn originate(&mut self, id: u32, cmd: RelayCmd, sid: u16, data: &[u8]) {
        let Some(o) = self.origins.get(&id) else {
            return;
        };
        // Keep everything queued so far ahead of this cell.
        let pending = self.out.split();
        self.me.writer.send_now(pending);
        originate_backward(&o.shared, &self.me, id, cmd, sid, data);
    }

    fn origin_relay(&mut self, id: u32, early: bool, body: &mut CellBody) {
        let Some(o) = self.origins.get_mut(&id) else {
            return;
        };
        let handled = match o.circ.handle_inbound(early, body) {
            Ok(h) => h,
            Err(e) => {
                debug!("closing circuit: {e}");
                self.drop_origin(id, true);
                return;
            }
        };
        let circ_sendme = handled.circ_sendme;
        match handled.action {
            Inbound::Forward { early } => {
                if let Some(n) = o.next.clone() {
                    let cmd = if early { Cmd::RELAY_EARLY } else { Cmd::RELAY };
                    let b: [u8; PAYLOAD_LEN] = *body;
                    let buf = self.fwd_buf(&n.writer);
                    n.codec.encode_fixed(n.circ_id, cmd, &b, buf);
                    self.ctx
                        .stats
                        .cells_forwarded
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            Inbound::Extend(e) => {
                let prev = PrevLink {
                    writer: self.me.writer.clone(),
                    codec: self.me.codec.clone(),
                    circ_id: id,
                    chan: self.me.clone(),
                    shared: o.shared.clone(),
                };
                let ctx = self.ctx.clone();
                tokio::spawn(async move {
                    super::extend::extend(ctx, prev, e).await;
                });
            }
            Inbound::Begin { stream, begin } => {
                if self.me.peer.is_none() && !self.ctx.cfg.allow_single_hop_exits {
                    // As stock tor: no exit streams on a client's first hop
                    // (BEGIN_DIR and RESOLVE are still served).
                    debug!("refused BEGIN on the first hop of a client's circuit");
                    self.ctx
                        .stats
                        .single_hop_begins_refused
                        .fetch_add(1, Ordering::Relaxed);
                    o.circ.stream_closed(stream);
                    self.originate(id, RelayCmd::END, stream, &[end_reason::TORPROTOCOL]);
                } else {
                    self.open_exit_stream(id, stream, exit::Request::Connect(begin));
                }
            }
            Inbound::BeginDir { stream } => {
                self.open_exit_stream(id, stream, exit::Request::Dir);
            }
            Inbound::Resolve { stream, name } => {
                self.open_exit_stream(id, stream, exit::Request::Resolve(name));
            }
            Inbound::Data { stream, data } => {
                let data = Bytes::copy_from_slice(data);
                if let Some(s) = o.streams.get(&stream)
                    && s.data.try_send(data).is_err()
                {
                    // Flow control guarantees room; a full queue means
                    // the client ignored the stream window.
                    o.circ.stream_closed(stream);
                    if let Some(s) = o.streams.remove(&stream) {
                        s.credits.close();
                    }
                    self.originate(id, RelayCmd::END, stream, &[end_reason::TORPROTOCOL]);
                }
            }
            Inbound::End { stream, .. } => {
                if let Some(s) = o.streams.remove(&stream) {
                    s.credits.close();
                }
            }
            Inbound::Sendme { stream: 0, tag } => {
                let ok = lock(&o.shared).pkg.on_sendme(tag.as_ref()).is_ok();
                if ok {
                    o.circ_credits.add_permits(CIRC_WINDOW_INC as usize);
                } else {
                    debug!("bad circuit SENDME; closing circuit");
                    self.drop_origin(id, true);
                    return;
                }
            }
            Inbound::Sendme { stream, .. } => {
                if let Some(s) = o.streams.get(&stream) {
                    s.credits.add_permits(STREAM_WINDOW_INC as usize);
                }
            }
            Inbound::Truncate => {
                if let Some(n) = o.next.take() {
                    o.circ.next_gone();
                    let mut b = [0u8; PAYLOAD_LEN];
                    b[0] = destroy_reason::NONE;
                    let buf = self.fwd_buf(&n.writer);
                    n.codec.encode_fixed(n.circ_id, Cmd::DESTROY, &b, buf);
                    n.chan.send(RCmd::PrevGone { circ_id: n.circ_id });
                }
                self.originate(id, RelayCmd::TRUNCATED, 0, &[destroy_reason::REQUESTED]);
            }
            Inbound::Nothing => {}
        }
        if let Some(d) = circ_sendme {
            let m = Sendme::Authenticated(d).encode();
            self.originate(id, RelayCmd::SENDME, 0, &m);
        }
    }

    fn open_exit_stream(&mut self, id: u32, sid: u16, req: exit::Request) {
        let Some(o) = self.origins.get_mut(&id) else {
            return;
        };
        let (tx, rx) = mpsc::channel(exit::STREAM_QUEUE);
        let credits = Arc::new(Semaphore::new(
            onionmix_proto::flow::STREAM_WINDOW_START as usize,
        ));
        o.streams.insert(
            sid,
            StreamTx {
                data: tx,
                credits: credits.clone(),
            },
        );
        let s = exit::ExitStream {
            ctx: self.ctx.clone(),
            origin: self.me.clone(),
            circ_id: id,
            stream: sid,
            shared: o.shared.clone(),
            circ_credits: o.circ_credits.clone(),
            credits,
            data: rx,
        };
        tokio::spawn(exit::run(s, req));
    }

    fn next_relay(&mut self, id: u32, body: &mut CellBody) {
        let Some(n) = self.nexts.get(&id) else { return };
        if !n.open {
            return;
        }
        let prev = n.prev.clone();
        lock(&prev.shared).layer.encrypt_backward(body);
        let b: [u8; PAYLOAD_LEN] = *body;
        let buf = self.fwd_buf(&prev.writer);
        prev.codec.encode_fixed(prev.circ_id, Cmd::RELAY, &b, buf);
        self.ctx
            .stats
            .cells_forwarded
            .fetch_add(1, Ordering::Relaxed);
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
                });
            } else {
                n.prev.chan.send(RCmd::ExtendFailed {
                    circ_id: n.prev.circ_id,
                    reason: destroy_reason::DESTROYED,
                });
            }
        }
    }

    fn handle_created2(&mut self, id: u32, payload: &[u8]) {
        let Some(n) = self.nexts.get_mut(&id) else {
            return;
        };
        if n.open {
            self.kill_next(id, true);
            return;
        }
        let Ok(created) = Created2::parse(payload) else {
            self.kill_next(id, true);
            return;
        };
        n.open = true;
        let next = NextLink {
            writer: self.me.writer.clone(),
            codec: self.me.codec.clone(),
            circ_id: id,
            chan: self.me.clone(),
        };
        n.prev.chan.send(RCmd::ExtendDone {
            circ_id: n.prev.circ_id,
            next,
            created,
        });
    }

    fn alloc_circ_id(&self) -> Option<u32> {
        let mut rng = rand::thread_rng();
        for _ in 0..64 {
            // The initiator of a link uses IDs with the high bit set, the
            // responder without (tor-spec §5.1.1).
            let raw = rng.r#gen::<u32>();
            let id = if self.initiated {
                raw | 0x8000_0000
            } else {
                raw & 0x7FFF_FFFF
            };
            if id != 0 && !self.origins.contains_key(&id) && !self.nexts.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }

    fn handle_cmd(&mut self, cmd: RCmd) {
        match cmd {
            RCmd::CreateFor { create2, prev } => {
                let Some(id) = self.alloc_circ_id() else {
                    prev.chan.send(RCmd::ExtendFailed {
                        circ_id: prev.circ_id,
                        reason: destroy_reason::RESOURCELIMIT,
                    });
                    return;
                };
                match RawCell::fixed(id, Cmd::CREATE2, &create2.encode()) {
                    Ok(cell) => {
                        if let Some(b) = cell.body() {
                            let b = *b;
                            self.me
                                .codec
                                .encode_fixed(id, Cmd::CREATE2, &b, &mut self.out);
                        }
                        self.nexts.insert(id, Next { prev, open: false });
                        self.circuit_added();
                    }
                    Err(_) => prev.chan.send(RCmd::ExtendFailed {
                        circ_id: prev.circ_id,
                        reason: destroy_reason::PROTOCOL,
                    }),
                }
            }
            RCmd::ExtendDone {
                circ_id,
                next,
                created,
            } => {
                let Some(o) = self.origins.get_mut(&circ_id) else {
                    // The client went away meanwhile: undo the extension.
                    let mut b = [0u8; PAYLOAD_LEN];
                    b[0] = destroy_reason::DESTROYED;
                    let mut buf = BytesMut::new();
                    next.codec
                        .encode_fixed(next.circ_id, Cmd::DESTROY, &b, &mut buf);
                    next.writer.send_now(buf);
                    next.chan.send(RCmd::PrevGone {
                        circ_id: next.circ_id,
                    });
                    return;
                };
                o.next = Some(next);
                o.circ.extended(true);
                self.originate(circ_id, RelayCmd::EXTENDED2, 0, &created.encode());
            }
            RCmd::ExtendFailed { circ_id, reason } => {
                if let Some(o) = self.origins.get_mut(&circ_id) {
                    o.circ.extended(false);
                }
                // tor-spec recommends DESTROY towards the client.
                if self.origins.contains_key(&circ_id) {
                    self.drop_origin(circ_id, false);
                    self.send_destroy(circ_id, reason);
                }
            }
            RCmd::NextGone { circ_id } => {
                if self.origins.contains_key(&circ_id) {
                    // DESTROY towards the client was already queued by the
                    // next channel's reactor; just forget the circuit.
                    if let Some(o) = self.origins.get_mut(&circ_id) {
                        o.next = None;
                    }
                    self.drop_origin(circ_id, false);
                }
            }
            RCmd::PrevGone { circ_id } => {
                if self.nexts.remove(&circ_id).is_some() {
                    self.circuit_gone();
                }
            }
            RCmd::StreamDrained { circ_id, stream } => {
                let due = match self.origins.get_mut(&circ_id) {
                    Some(o) => o.circ.stream_drained(stream),
                    None => false,
                };
                if due {
                    self.originate(circ_id, RelayCmd::SENDME, stream, &[]);
                }
            }
            RCmd::StreamClosed { circ_id, stream } => {
                if let Some(o) = self.origins.get_mut(&circ_id) {
                    o.circ.stream_closed(stream);
                    if let Some(s) = o.streams.remove(&stream) {
                        s.credits.close();
                    }
                }
            }
            RCmd::Close => {}
        }
    }
}

/// Encrypt a cell originated at this relay towards the client and queue it
/// on the client-side channel, inside the circuit lock so that cells from
/// the reactor and from exit streams keep the order they were encrypted in.
/// Returns the digest (SENDME tag) and whether the channel took it.
pub fn originate_backward(
    shared: &SharedCirc,
    chan: &RelayChanHandle,
    circ_id: u32,
    cmd: RelayCmd,
    sid: u16,
    data: &[u8],
) -> bool {
    let mut body = [0u8; PAYLOAD_LEN];
    let mut rng = rand::thread_rng();
    if relay::write(&mut body, cmd, sid, data, |p| rng.fill(p)).is_err() {
        return false;
    }
    let mut buf = BytesMut::with_capacity(onionmix_cell::CELL_LEN);
    let mut g = lock(shared);
    let tag = g.layer.originate_backward(&mut body);
    if cmd == RelayCmd::DATA {
        let trig = g.pkg.next_triggers_sendme();
        g.pkg.on_sent(trig.then_some(tag));
    }
    chan.codec
        .encode_fixed(circ_id, Cmd::RELAY, &body, &mut buf);
    chan.writer.send_now(buf)
}
