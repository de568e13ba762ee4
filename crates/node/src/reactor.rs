//! The client-side channel reactor: one task per channel owns every
//! circuit on it (entries in a table, not tasks), decrypts inbound cells,
//! routes stream data to bounded per-stream queues, and batches outbound
//! cells into one write.
//!
//! Flow control towards the network is credit based: a stream writer
//! acquires one permit from its stream's semaphore (the stream package
//! window, 500) and one from its circuit's (the circuit package window,
//! 1000) per DATA cell; the reactor adds permits when SENDMEs arrive. So
//! the reactor never has to buffer data that the windows do not allow.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::{Bytes, BytesMut};
use rand::Rng;
use tokio::sync::{Semaphore, mpsc, oneshot};
use tracing::{debug, trace};

use onionmix_cell::chan::{ChanCmd as Cmd, Create2, Created2, destroy_reason};
use onionmix_cell::relay::{Begin, Extend2, ResolvedAnswer, end_reason};
use onionmix_cell::{CellCodec, RawCell};
use onionmix_link::ChannelIo;
use onionmix_proto::client_circ::{CircEvent, ClientCircuit, OutCell};
use onionmix_proto::flow::{
    CIRC_WINDOW_INC, CIRC_WINDOW_START, STREAM_WINDOW_INC, STREAM_WINDOW_START,
};
use onionmix_proto::layer::ClientLayer;

pub mod hs;

/// Most circuits one client channel carries.
pub const MAX_CIRCUITS_PER_CHANNEL: usize = 4096;
/// Depth of the command queue into a reactor.
const CMD_QUEUE: usize = 1024;
/// Depth of a stream's inbound event queue: more than a full stream window
/// plus the control events, so a peer that respects flow control never
/// finds it full.
pub const STREAM_EVENT_QUEUE: usize = STREAM_WINDOW_START as usize + 16;

/// Errors reported to callers of a channel.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ReactorError {
    /// The channel is closed.
    #[error("channel closed: {0}")]
    ChannelClosed(String),
    /// The circuit was destroyed.
    #[error("circuit destroyed ({})", destroy_reason::name(*.0))]
    CircuitDestroyed(u8),
    /// Something the circuit machine refused.
    #[error("circuit error: {0}")]
    Circuit(String),
    /// Too many circuits on this channel.
    #[error("too many circuits on this channel")]
    TooManyCircuits,
}

/// What the application side of a stream receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// CONNECTED.
    Connected(Option<IpAddr>),
    /// Data.
    Data(Bytes),
    /// END (or the circuit died: reason DESTROY).
    End(u8),
    /// RESOLVED.
    Resolved(Vec<ResolvedAnswer>),
}

/// How to open a stream.
#[derive(Debug, Clone)]
pub enum StreamRequest {
    /// RELAY_BEGIN.
    Begin(Begin),
    /// RELAY_BEGIN_DIR.
    BeginDir,
    /// RELAY_RESOLVE of a name (or an in-addr.arpa name).
    Resolve(String),
}

type Reply<T> = oneshot::Sender<Result<T, ReactorError>>;

/// Commands into a reactor.
pub enum ChanCommand {
    /// Send CREATE2 on a new circuit ID; reply with the ID and CREATED2.
    Create {
        /// The handshake.
        create2: Create2,
        /// Reply.
        reply: Reply<(u32, Created2)>,
    },
    /// Install the first hop's crypto on a created circuit.
    Install {
        /// Circuit.
        circ_id: u32,
        /// First hop.
        layer: Box<dyn ClientLayer>,
        /// Circuit-level send credits (shared with stream writers).
        credits: Arc<Semaphore>,
    },
    /// Send EXTEND2; reply with EXTENDED2's body.
    Extend {
        /// Circuit.
        circ_id: u32,
        /// The message.
        msg: Extend2,
        /// Reply.
        reply: Reply<Created2>,
    },
    /// Add a hop after EXTENDED2.
    AddHop {
        /// Circuit.
        circ_id: u32,
        /// The hop's crypto.
        layer: Box<dyn ClientLayer>,
    },
    /// Open a stream at the last hop.
    OpenStream {
        /// Circuit.
        circ_id: u32,
        /// What to open.
        req: StreamRequest,
        /// Where to deliver the stream's events.
        events: mpsc::Sender<StreamEvent>,
        /// Stream-level send credits.
        credits: Arc<Semaphore>,
        /// Reply with the stream ID.
        reply: Reply<u16>,
    },
    /// Send stream data (at most 498 bytes; credits already acquired).
    Data {
        /// Circuit.
        circ_id: u32,
        /// Stream.
        stream: u16,
        /// Bytes.
        data: Bytes,
    },
    /// The application consumed 50 cells of data on a stream.
    Drained {
        /// Circuit.
        circ_id: u32,
        /// Stream.
        stream: u16,
    },
    /// Close a stream.
    EndStream {
        /// Circuit.
        circ_id: u32,
        /// Stream.
        stream: u16,
        /// END reason.
        reason: u8,
    },
    /// Tear the circuit down.
    Destroy {
        /// Circuit.
        circ_id: u32,
    },
    /// Onion-service messages and streams (see [`hs`]).
    Hs(hs::HsCommand),
}

/// A cloneable handle to a channel's reactor.
#[derive(Clone, Debug)]
pub struct ChannelHandle {
    tx: mpsc::Sender<ChanCommand>,
    closed: Arc<AtomicBool>,
    /// RSA identity of the peer.
    pub peer_rsa_id: [u8; 20],
    /// Ed25519 identity of the peer, if it proved one.
    pub peer_ed_id: Option<[u8; 32]>,
}

impl ChannelHandle {
    /// Whether the reactor has exited.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed) || self.tx.is_closed()
    }
    /// Send a command to the reactor.
    pub async fn send(&self, cmd: ChanCommand) -> Result<(), ReactorError> {
        self.tx
            .send(cmd)
            .await
            .map_err(|_| ReactorError::ChannelClosed("reactor gone".into()))
    }
    /// Send a command without waiting (for Drop paths).
    pub fn try_send(&self, cmd: ChanCommand) {
        let _ = self.tx.try_send(cmd);
    }
    /// Send a command and await its reply.
    pub async fn request<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> ChanCommand,
    ) -> Result<T, ReactorError> {
        let (tx, rx) = oneshot::channel();
        self.send(make(tx)).await?;
        rx.await
            .map_err(|_| ReactorError::ChannelClosed("reactor dropped the request".into()))?
    }
}

struct StreamSink {
    events: mpsc::Sender<StreamEvent>,
    credits: Arc<Semaphore>,
}

struct CircEntry {
    circ: ClientCircuit,
    credits: Arc<Semaphore>,
    pending_extend: Option<Reply<Created2>>,
    streams: HashMap<u16, StreamSink>,
    hs: Option<mpsc::Sender<hs::HsEvent>>,
}

struct Reactor {
    io: ChannelIo,
    codec: CellCodec,
    pending_creates: HashMap<u32, Reply<(u32, Created2)>>,
    created: HashMap<u32, Created2>,
    circuits: HashMap<u32, CircEntry>,
    out: BytesMut,
    events: Vec<CircEvent>,
    out_cells: Vec<OutCell>,
}

/// Start a reactor for an established client channel.
pub fn spawn_client_reactor(
    io: ChannelIo,
    codec: CellCodec,
    peer_rsa_id: [u8; 20],
    peer_ed_id: Option<[u8; 32]>,
) -> ChannelHandle {
    let (tx, rx) = mpsc::channel(CMD_QUEUE);
    let closed = Arc::new(AtomicBool::new(false));
    let reactor = Reactor {
        io,
        codec,
        pending_creates: HashMap::new(),
        created: HashMap::new(),
        circuits: HashMap::new(),
        out: BytesMut::with_capacity(64 * 1024),
        events: Vec::new(),
        out_cells: Vec::new(),
    };
    let c2 = closed.clone();
    tokio::spawn(async move {
        let why = reactor.run(rx).await;
        debug!("channel reactor ended: {why}");
        c2.store(true, Ordering::Relaxed);
    });
    ChannelHandle {
        tx,
        closed,
        peer_rsa_id,
        peer_ed_id,
    }
}

impl Reactor {
    async fn run(mut self, mut rx: mpsc::Receiver<ChanCommand>) -> String {
        let why = loop {
            tokio::select! {
                batch = self.io.rx.recv() => match batch {
                    Some(Ok(cells)) => {
                        for cell in cells {
                            self.handle_cell(cell);
                        }
                    }
                    Some(Err(e)) => break e,
                    None => break "reader gone".to_string(),
                },
                cmd = rx.recv() => match cmd {
                    Some(cmd) => {
                        self.handle_cmd(cmd);
                        // Batch whatever else is queued.
                        for _ in 0..256 {
                            match rx.try_recv() {
                                Ok(c) => self.handle_cmd(c),
                                Err(_) => break,
                            }
                        }
                    }
                    None => break "all handles dropped".to_string(),
                },
            }
            if !self.out.is_empty() {
                let chunk = self.out.split();
                if !self.io.tx.send_now(chunk) {
                    break "writer gone".to_string();
                }
                // Backpressure: stop taking work while the link is saturated.
                self.io
                    .tx
                    .wait_below(onionmix_link::io::DEFAULT_HIGH_WATER)
                    .await;
            }
        };
        self.shutdown(&why);
        why
    }

    fn shutdown(&mut self, why: &str) {
        for (_, r) in self.pending_creates.drain() {
            let _ = r.send(Err(ReactorError::ChannelClosed(why.to_string())));
        }
        let ids: Vec<u32> = self.circuits.keys().copied().collect();
        for id in ids {
            self.kill_circuit(id, destroy_reason::CHANNEL_CLOSED, false);
        }
    }

    fn send_fixed(&mut self, circ_id: u32, cmd: Cmd, body: &[u8; onionmix_cell::PAYLOAD_LEN]) {
        self.codec.encode_fixed(circ_id, cmd, body, &mut self.out);
    }

    fn send_out_cells(&mut self, circ_id: u32) {
        let cells = std::mem::take(&mut self.out_cells);
        for c in &cells {
            let cmd = if c.early {
                Cmd::RELAY_EARLY
            } else {
                Cmd::RELAY
            };
            self.send_fixed(circ_id, cmd, &c.body);
        }
        self.out_cells = cells;
        self.out_cells.clear();
    }

    fn send_destroy(&mut self, circ_id: u32, reason: u8) {
        let mut body = [0u8; onionmix_cell::PAYLOAD_LEN];
        body[0] = reason;
        self.send_fixed(circ_id, Cmd::DESTROY, &body);
    }

    /// Remove a circuit, tell everyone waiting on it, optionally send DESTROY.
    fn kill_circuit(&mut self, circ_id: u32, reason: u8, send_destroy: bool) {
        if let Some(mut e) = self.circuits.remove(&circ_id) {
            e.circ.close();
            e.credits.close();
            if let Some(r) = e.pending_extend.take() {
                let _ = r.send(Err(ReactorError::CircuitDestroyed(reason)));
            }
            for (_, s) in e.streams.drain() {
                s.credits.close();
                let _ = s.events.try_send(StreamEvent::End(end_reason::DESTROY));
            }
            if send_destroy {
                self.send_destroy(circ_id, destroy_reason::NONE);
            }
        }
        if let Some(r) = self.pending_creates.remove(&circ_id) {
            let _ = r.send(Err(ReactorError::CircuitDestroyed(reason)));
            if send_destroy {
                self.send_destroy(circ_id, destroy_reason::NONE);
            }
        }
        self.created.remove(&circ_id);
    }

    fn alloc_circ_id(&self) -> Option<u32> {
        let mut rng = rand::thread_rng();
        for _ in 0..64 {
            // Initiator-created IDs have the high bit set (tor-spec §5.1.1).
            let id = rng.r#gen::<u32>() | 0x8000_0000;
            if !self.circuits.contains_key(&id)
                && !self.pending_creates.contains_key(&id)
                && !self.created.contains_key(&id)
            {
                return Some(id);
            }
        }
        None
    }

    fn handle_cmd(&mut self, cmd: ChanCommand) {
        match cmd {
            ChanCommand::Create { create2, reply } => {
                if self.circuits.len() + self.pending_creates.len() >= MAX_CIRCUITS_PER_CHANNEL {
                    let _ = reply.send(Err(ReactorError::TooManyCircuits));
                    return;
                }
                let Some(id) = self.alloc_circ_id() else {
                    let _ = reply.send(Err(ReactorError::TooManyCircuits));
                    return;
                };
                match RawCell::fixed(id, Cmd::CREATE2, &create2.encode()) {
                    Ok(cell) => {
                        if let Some(b) = cell.body() {
                            let b = *b;
                            self.send_fixed(id, Cmd::CREATE2, &b);
                        }
                        self.pending_creates.insert(id, reply);
                    }
                    Err(e) => {
                        let _ = reply.send(Err(ReactorError::Circuit(e.to_string())));
                    }
                }
            }
            ChanCommand::Install {
                circ_id,
                layer,
                credits,
            } => {
                if self.created.remove(&circ_id).is_some() {
                    self.circuits.insert(
                        circ_id,
                        CircEntry {
                            circ: ClientCircuit::new(layer),
                            credits,
                            pending_extend: None,
                            streams: HashMap::new(),
                            hs: None,
                        },
                    );
                }
            }
            ChanCommand::Extend {
                circ_id,
                msg,
                reply,
            } => {
                let Some(e) = self.circuits.get_mut(&circ_id) else {
                    let _ = reply.send(Err(ReactorError::CircuitDestroyed(destroy_reason::NONE)));
                    return;
                };
                match e.circ.extend(&msg) {
                    Ok(cell) => {
                        e.pending_extend = Some(reply);
                        self.out_cells.push(cell);
                        self.send_out_cells(circ_id);
                    }
                    Err(err) => {
                        let _ = reply.send(Err(ReactorError::Circuit(err.to_string())));
                    }
                }
            }
            ChanCommand::AddHop { circ_id, layer } => {
                if let Some(e) = self.circuits.get_mut(&circ_id) {
                    e.circ.add_hop(layer);
                }
            }
            ChanCommand::OpenStream {
                circ_id,
                req,
                events,
                credits,
                reply,
            } => {
                let Some(e) = self.circuits.get_mut(&circ_id) else {
                    let _ = reply.send(Err(ReactorError::CircuitDestroyed(destroy_reason::NONE)));
                    return;
                };
                let res = match &req {
                    StreamRequest::Begin(b) => e.circ.begin(b),
                    StreamRequest::BeginDir => e.circ.begin_dir(),
                    StreamRequest::Resolve(n) => e.circ.resolve(n),
                };
                match res {
                    Ok((sid, cell)) => {
                        e.streams.insert(sid, StreamSink { events, credits });
                        let _ = reply.send(Ok(sid));
                        self.out_cells.push(cell);
                        self.send_out_cells(circ_id);
                    }
                    Err(err) => {
                        let _ = reply.send(Err(ReactorError::Circuit(err.to_string())));
                    }
                }
            }
            ChanCommand::Data {
                circ_id,
                stream,
                data,
            } => {
                let Some(e) = self.circuits.get_mut(&circ_id) else {
                    return;
                };
                match e.circ.send_data(stream, &data) {
                    Ok(cell) => {
                        self.out_cells.push(cell);
                        self.send_out_cells(circ_id);
                    }
                    Err(err) => {
                        // Credits mirror the windows, so this means the
                        // stream is already gone; drop the data.
                        trace!("dropping stream data: {err}");
                    }
                }
            }
            ChanCommand::Drained { circ_id, stream } => {
                let Some(e) = self.circuits.get_mut(&circ_id) else {
                    return;
                };
                if let Ok(Some(cell)) = e.circ.stream_drained(stream) {
                    self.out_cells.push(cell);
                    self.send_out_cells(circ_id);
                }
            }
            ChanCommand::EndStream {
                circ_id,
                stream,
                reason,
            } => {
                let Some(e) = self.circuits.get_mut(&circ_id) else {
                    return;
                };
                if let Some(s) = e.streams.remove(&stream) {
                    s.credits.close();
                }
                if let Ok(cell) = e.circ.end_stream(stream, reason) {
                    self.out_cells.push(cell);
                    self.send_out_cells(circ_id);
                }
            }
            ChanCommand::Destroy { circ_id } => {
                self.kill_circuit(circ_id, destroy_reason::NONE, true);
            }
            ChanCommand::Hs(c) => self.handle_hs_cmd(c),
        }
    }

    fn handle_cell(&mut self, mut cell: RawCell) {
        let id = cell.circ_id;
        match cell.cmd {
            Cmd::CREATED2 => {
                if let Some(reply) = self.pending_creates.remove(&id) {
                    match Created2::parse(&cell.payload) {
                        Ok(c) => {
                            self.created.insert(id, c.clone());
                            if reply.send(Ok((id, c))).is_err() {
                                // The builder gave up (timeout): tear it down.
                                self.created.remove(&id);
                                self.send_destroy(id, destroy_reason::NONE);
                            }
                        }
                        Err(e) => {
                            let _ = reply.send(Err(ReactorError::Circuit(e.to_string())));
                            self.send_destroy(id, destroy_reason::NONE);
                        }
                    }
                }
            }
            Cmd::RELAY => {
                let Some(e) = self.circuits.get_mut(&id) else {
                    return;
                };
                let Some(body) = cell.body_mut() else {
                    return;
                };
                let mut events = std::mem::take(&mut self.events);
                let res = e.circ.handle_relay(body, &mut events, &mut self.out_cells);
                if let Err(err) = res {
                    debug!("closing circuit after protocol error: {err}");
                    self.events = events;
                    self.events.clear();
                    self.out_cells.clear();
                    self.kill_circuit(id, destroy_reason::PROTOCOL, true);
                    return;
                }
                self.send_out_cells(id);
                for ev in events.drain(..) {
                    self.dispatch(id, ev);
                }
                self.events = events;
            }
            Cmd::DESTROY => {
                let reason = cell.payload.first().copied().unwrap_or(0);
                debug!(
                    "circuit destroyed by peer: {}",
                    destroy_reason::name(reason)
                );
                self.kill_circuit(id, reason, false);
            }
            Cmd::RELAY_EARLY => {
                // Clients never accept RELAY_EARLY from relays.
                self.kill_circuit(id, destroy_reason::PROTOCOL, true);
            }
            Cmd::PADDING
            | Cmd::VPADDING
            | Cmd::NETINFO
            | Cmd::VERSIONS
            | Cmd::PADDING_NEGOTIATE => {}
            Cmd::CREATE2 | Cmd::CREATE | Cmd::CREATE_FAST => {
                // We are a client: refuse circuits from the other side.
                self.send_destroy(id, destroy_reason::PROTOCOL);
            }
            other => trace!("ignoring {:?} on client channel", other),
        }
    }

    fn dispatch(&mut self, circ_id: u32, ev: CircEvent) {
        let Some(e) = self.circuits.get_mut(&circ_id) else {
            return;
        };
        match ev {
            CircEvent::Data { stream, data } => {
                if let Some(s) = e.streams.get(&stream)
                    && s.events
                        .try_send(StreamEvent::Data(Bytes::from(data)))
                        .is_err()
                {
                    // The application is gone (or ignored flow control).
                    if let Some(s) = e.streams.remove(&stream) {
                        s.credits.close();
                    }
                    if let Ok(cell) = e.circ.end_stream(stream, end_reason::MISC) {
                        self.out_cells.push(cell);
                        self.send_out_cells(circ_id);
                    }
                }
            }
            CircEvent::Connected { stream, addr } => {
                if let Some(s) = e.streams.get(&stream) {
                    let _ = s.events.try_send(StreamEvent::Connected(addr));
                }
            }
            CircEvent::End { stream, reason } => {
                if let Some(s) = e.streams.remove(&stream) {
                    s.credits.close();
                    let _ = s.events.try_send(StreamEvent::End(reason));
                }
            }
            CircEvent::Resolved { stream, answers } => {
                if let Some(s) = e.streams.remove(&stream) {
                    let _ = s.events.try_send(StreamEvent::Resolved(answers));
                }
            }
            CircEvent::Extended(c) => {
                if let Some(r) = e.pending_extend.take() {
                    let _ = r.send(Ok(c));
                }
            }
            CircEvent::Sendme { stream: 0 } => e.credits.add_permits(CIRC_WINDOW_INC as usize),
            CircEvent::Sendme { stream } => {
                if let Some(s) = e.streams.get(&stream) {
                    s.credits.add_permits(STREAM_WINDOW_INC as usize);
                }
            }
            CircEvent::Destroyed { reason } => {
                self.kill_circuit(circ_id, reason, true);
            }
            ev @ (CircEvent::Hs { .. } | CircEvent::IncomingStream { .. }) => {
                self.dispatch_hs(circ_id, ev);
            }
        }
    }
}

/// Fresh credits for a circuit (its package window).
pub fn circuit_credits() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(CIRC_WINDOW_START as usize))
}

/// Fresh credits for a stream (its package window).
pub fn stream_credits() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(STREAM_WINDOW_START as usize))
}
