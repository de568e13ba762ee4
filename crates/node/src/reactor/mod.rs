//! The client-side channel reactor: one task per channel owns every
//! circuit on it (entries in a table, not tasks), decrypts inbound cells,
//! routes stream data to bounded per-stream queues, and batches outbound
//! cells into one write.
//!
//! Flow control towards the network: a stream writer first passes its
//! stream's [`StreamGate`] (the 500-cell stream window, or XON/XOFF with
//! congestion control), then takes one of its circuit's queue slots
//! ([`CIRC_QUEUE_SLOTS`]) per DATA cell. The reactor queues the cell and
//! packages it when the circuit's window allows (the fixed 1000-cell
//! window, or the congestion window), returning the slot. So a circuit
//! never buffers more than its slots here, whatever its window.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use rand::Rng;
use tokio::sync::{Semaphore, mpsc};
use tracing::{debug, trace};

use onionmix_cell::chan::{ChanCmd as Cmd, Created2, destroy_reason};
use onionmix_cell::relay::end_reason;
use onionmix_cell::{CellCodec, RawCell};
use onionmix_link::ChannelIo;
use onionmix_proto::cc::ChanSignal;
use onionmix_proto::client_circ::{CircEvent, CircStats, ClientCircuit, OutCell};

use crate::gate::StreamGate;

mod conflux;
mod handle;
pub mod hs;
pub use handle::*;

struct StreamSink {
    events: mpsc::Sender<StreamEvent>,
    gate: Arc<StreamGate>,
    /// Bytes delivered to `events` and not yet reported drained.
    buffered: usize,
    /// DATA cells delivered to `events` and not yet reported drained.
    queued: usize,
    /// The application ended the stream (END with this reason) while some
    /// of its DATA still waited for the circuit's window: END follows the
    /// last of it, so nothing the application wrote is lost.
    end_after_flush: Option<u8>,
}

struct CircEntry {
    circ: ClientCircuit,
    /// Queue slots (stream writers take one per cell).
    credits: Arc<Semaphore>,
    /// DATA cells waiting for the circuit's window, oldest first.
    pending: VecDeque<(u16, Bytes)>,
    pending_extend: Option<Reply<Created2>>,
    streams: HashMap<u16, StreamSink>,
    /// Flow counters already added to the process-wide ones.
    reported: CircStats,
    hs: Option<mpsc::Sender<hs::HsEvent>>,
    /// Waiting for CONFLUX_LINKED.
    pending_link: Option<Reply<onionmix_cell::relay::ConfluxLink>>,
    /// The conflux set this circuit is a leg of.
    leg: Option<crate::client::conflux::ClientLeg>,
}

struct Reactor {
    io: ChannelIo,
    stats: Arc<ClientFlowStats>,
    codec: CellCodec,
    pending_creates: HashMap<u32, Reply<(u32, Created2)>>,
    created: HashMap<u32, Created2>,
    circuits: HashMap<u32, CircEntry>,
    out: BytesMut,
    events: Vec<CircEvent>,
    out_cells: Vec<OutCell>,
    conflux_wake: Arc<tokio::sync::Notify>,
}

/// Start a reactor for an established client channel; its flow counters
/// go to `stats`.
pub fn spawn_client_reactor(
    io: ChannelIo,
    codec: CellCodec,
    peer_rsa_id: [u8; 20],
    peer_ed_id: Option<[u8; 32]>,
    stats: Arc<ClientFlowStats>,
) -> ChannelHandle {
    let (tx, rx) = mpsc::channel(CMD_QUEUE);
    let closed = Arc::new(AtomicBool::new(false));
    let conflux_wake = Arc::new(tokio::sync::Notify::new());
    let queue = Some(io.tx.clone());
    let reactor = Reactor {
        io,
        stats,
        codec,
        pending_creates: HashMap::new(),
        created: HashMap::new(),
        circuits: HashMap::new(),
        out: BytesMut::with_capacity(64 * 1024),
        events: Vec::new(),
        out_cells: Vec::new(),
        conflux_wake: conflux_wake.clone(),
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
        hub: None,
        conflux_wake,
        queue,
    }
}

impl Reactor {
    async fn run(mut self, mut rx: mpsc::Receiver<ChanCommand>) -> String {
        let wake = self.conflux_wake.clone();
        let why = loop {
            tokio::select! {
                () = wake.notified() => self.conflux_drain_all(),
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
            report_stats(&self.stats, &mut e);
            e.circ.close();
            e.credits.close();
            if let Some(r) = e.pending_extend.take() {
                let _ = r.send(Err(ReactorError::CircuitDestroyed(reason)));
            }
            for (_, s) in e.streams.drain() {
                s.gate.close();
                let _ = s.events.try_send(StreamEvent::End(end_reason::DESTROY));
            }
            if let Some(r) = e.pending_link.take() {
                let _ = r.send(Err(ReactorError::CircuitDestroyed(reason)));
            }
            if let Some(leg) = e.leg.take() {
                leg.set.teardown(circ_id);
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
                params,
                credits,
            } => {
                if self.created.remove(&circ_id).is_some() {
                    self.circuits.insert(
                        circ_id,
                        CircEntry {
                            circ: ClientCircuit::new(layer, params),
                            credits,
                            pending: VecDeque::new(),
                            pending_extend: None,
                            streams: HashMap::new(),
                            reported: CircStats::default(),
                            hs: None,
                            pending_link: None,
                            leg: None,
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
            ChanCommand::AddHop {
                circ_id,
                layer,
                cc_sendme_inc,
            } => {
                if let Some(e) = self.circuits.get_mut(&circ_id) {
                    e.circ.add_hop(layer, cc_sendme_inc);
                    if cc_sendme_inc.is_some() {
                        self.stats.cc_circuits.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            ChanCommand::OpenStream {
                circ_id,
                req,
                events,
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
                    StreamRequest::ConnectUdp(c) => e.circ.connect_udp(c),
                };
                match res {
                    Ok((sid, cell)) => {
                        let gate = Arc::new(StreamGate::for_circuit(e.circ.is_cc()));
                        e.streams.insert(
                            sid,
                            StreamSink {
                                events,
                                gate: gate.clone(),
                                buffered: 0,
                                queued: 0,
                                end_after_flush: None,
                            },
                        );
                        let _ = reply.send(Ok((sid, gate)));
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
                if e.streams.contains_key(&stream) {
                    e.pending.push_back((stream, data));
                    self.flush_pending(circ_id);
                } else {
                    // The stream is gone: drop the data, return the slot.
                    trace!("dropping data for a closed stream");
                    e.credits.add_permits(1);
                }
            }
            ChanCommand::Datagram {
                circ_id,
                stream,
                data,
            } => {
                let Some(e) = self.circuits.get_mut(&circ_id) else {
                    return;
                };
                match e.circ.send_datagram(stream, &data, Instant::now()) {
                    Ok(Some(cell)) => {
                        self.out_cells.push(cell);
                        self.send_out_cells(circ_id);
                    }
                    Ok(None) => {
                        self.stats.datagrams_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(err) => trace!("dropping a datagram: {err}"),
                }
            }
            ChanCommand::Drained {
                circ_id,
                stream,
                cells,
                bytes,
            } => {
                let Some(e) = self.circuits.get_mut(&circ_id) else {
                    return;
                };
                let Some(s) = e.streams.get_mut(&stream) else {
                    return;
                };
                s.buffered = s.buffered.saturating_sub(bytes);
                s.queued = s.queued.saturating_sub(cells as usize);
                let buffered = s.buffered;
                let res = e.circ.stream_drained(
                    stream,
                    cells,
                    bytes,
                    buffered,
                    Instant::now(),
                    &mut self.out_cells,
                );
                if res.is_ok() {
                    self.send_out_cells(circ_id);
                } else {
                    self.out_cells.clear();
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
                // A clean end (DONE) waits for the stream's queued DATA;
                // an abort drops it.
                let queued = e.pending.iter().any(|(sid, _)| *sid == stream);
                if reason == end_reason::DONE
                    && queued
                    && let Some(s) = e.streams.get_mut(&stream)
                {
                    s.gate.close();
                    s.end_after_flush = Some(reason);
                    return;
                }
                if let Some(s) = e.streams.remove(&stream) {
                    s.gate.close();
                }
                if let Ok(cell) = e.circ.end_stream(stream, reason, Instant::now()) {
                    self.out_cells.push(cell);
                    self.send_out_cells(circ_id);
                }
                // Its queued cells (if any) go with it.
                self.flush_pending(circ_id);
            }
            ChanCommand::CcStatus { circ_id, reply } => {
                let st = self.circuits.get(&circ_id).map(|e| CircCcStatus {
                    cc: e.circ.cc_snapshot(),
                    stats: e.circ.stats(),
                });
                let _ = reply.send(st);
            }
            ChanCommand::Destroy { circ_id } => {
                self.kill_circuit(circ_id, destroy_reason::NONE, true);
            }
            ChanCommand::Hs(c) => self.handle_hs_cmd(c),
            ChanCommand::ConfluxLink {
                circ_id,
                link,
                reply,
            } => self.conflux_send_link(circ_id, link, reply),
            ChanCommand::ConfluxAttach { circ_id, leg } => self.conflux_attach(circ_id, leg),
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
                let queued = self.io.tx.circuit_queued_bytes(id);
                let chan = ChanSignal {
                    blocked: queued > e.circ.params().chan_blocked_bytes(),
                    queued_cells: (queued / onionmix_cell::CELL_LEN) as u64,
                };
                let res = e.circ.handle_relay(
                    body,
                    Instant::now(),
                    chan,
                    &mut events,
                    &mut self.out_cells,
                );
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
                if let Some(e) = self.circuits.get_mut(&id) {
                    report_stats(&self.stats, e);
                }
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

    /// Package queued DATA cells while the circuit's window allows, and
    /// return their queue slots.
    fn flush_pending(&mut self, circ_id: u32) {
        let Some(e) = self.circuits.get_mut(&circ_id) else {
            return;
        };
        let now = Instant::now();
        let mut released = 0;
        while let Some(&(sid, _)) = e.pending.front() {
            if !e.streams.contains_key(&sid) {
                e.pending.pop_front();
                released += 1;
                continue;
            }
            if !e.circ.can_send(sid) {
                break;
            }
            let Some((sid, data)) = e.pending.pop_front() else {
                break;
            };
            released += 1;
            match e.circ.send_data(sid, &data, now) {
                Ok(cell) => self.out_cells.push(cell),
                Err(err) => trace!("dropping stream data: {err}"),
            }
            // The last queued cell of a stream the application ended:
            // END goes right after it.
            let ending = e.streams.get(&sid).and_then(|s| s.end_after_flush);
            if let Some(reason) = ending
                && !e.pending.iter().any(|(q, _)| *q == sid)
            {
                e.streams.remove(&sid);
                if let Ok(cell) = e.circ.end_stream(sid, reason, now) {
                    self.out_cells.push(cell);
                }
            }
        }
        if released > 0 {
            e.credits.add_permits(released);
        }
        self.send_out_cells(circ_id);
    }

    fn dispatch(&mut self, circ_id: u32, ev: CircEvent) {
        let Some(e) = self.circuits.get_mut(&circ_id) else {
            return;
        };
        match ev {
            CircEvent::Data { stream, data } => {
                let Some(s) = e.streams.get_mut(&stream) else {
                    return;
                };
                if s.end_after_flush.is_some() {
                    // The application ended it; only our END is due.
                    return;
                }
                let len = data.len();
                let why = if !stream_may_queue(s.queued, e.leg.is_some()) {
                    Some("the exit ignored flow control")
                } else if s
                    .events
                    .try_send(StreamEvent::Data(Bytes::from(data)))
                    .is_err()
                {
                    Some("its application is gone")
                } else {
                    None
                };
                if let Some(why) = why {
                    debug!(
                        "ending a stream: {why} ({} bytes, {} cells queued)",
                        s.buffered, s.queued
                    );
                    if let Some(s) = e.streams.remove(&stream) {
                        s.gate.close();
                    }
                    if let Ok(cell) = e.circ.end_stream(stream, end_reason::MISC, Instant::now()) {
                        self.out_cells.push(cell);
                        self.send_out_cells(circ_id);
                    }
                    return;
                }
                s.buffered = s.buffered.saturating_add(len);
                s.queued = s.queued.saturating_add(1);
                let buffered = s.buffered;
                if let Ok(Some(cell)) = e.circ.stream_buffered(stream, buffered, Instant::now()) {
                    debug!("flow control for a stream with {buffered} bytes buffered");
                    self.out_cells.push(cell);
                    self.send_out_cells(circ_id);
                }
            }
            CircEvent::Connected { stream, addr } => {
                if let Some(s) = e.streams.get(&stream) {
                    let _ = s.events.try_send(StreamEvent::Connected(addr));
                }
            }
            CircEvent::End { stream, reason } => {
                if let Some(s) = e.streams.remove(&stream) {
                    s.gate.close();
                    let _ = s.events.try_send(StreamEvent::End(reason));
                }
            }
            CircEvent::ConnectedUdp { stream, theirs, .. } => {
                if let Some(s) = e.streams.get(&stream) {
                    let _ = s.events.try_send(StreamEvent::Connected(Some(theirs.ip())));
                }
            }
            CircEvent::Datagram { stream, data } => {
                // UDP: a datagram the application is too slow for is lost,
                // the stream lives on.
                if let Some(s) = e.streams.get(&stream)
                    && s.events
                        .try_send(StreamEvent::Datagram(Bytes::from(data)))
                        .is_err()
                {
                    self.stats.datagrams_dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            CircEvent::Resolved { stream, answers } => {
                if let Some(s) = e.streams.remove(&stream) {
                    s.gate.close();
                    let _ = s.events.try_send(StreamEvent::Resolved(answers));
                }
            }
            CircEvent::Extended(c) => {
                if let Some(r) = e.pending_extend.take() {
                    let _ = r.send(Ok(c));
                }
            }
            CircEvent::Sendme { stream: 0 } => self.flush_pending(circ_id),
            CircEvent::Sendme { stream } => {
                // The circuit machine already checked it against the window.
                if let Some(s) = e.streams.get(&stream) {
                    let _ = s.gate.on_sendme();
                }
            }
            CircEvent::Xoff { stream } => {
                debug!("XOFF from the exit");
                if let Some(s) = e.streams.get(&stream) {
                    s.gate.on_xoff();
                }
            }
            CircEvent::Xon { stream, kbps } => {
                debug!("XON from the exit ({kbps} kB/s)");
                if let Some(s) = e.streams.get(&stream) {
                    s.gate.on_xon(kbps);
                }
            }
            CircEvent::Destroyed { reason } => {
                self.kill_circuit(circ_id, reason, true);
            }
            ev @ (CircEvent::Hs { .. } | CircEvent::IncomingStream { .. }) => {
                self.dispatch_hs(circ_id, ev);
            }
            CircEvent::ConfluxLinked(l) => {
                if let Some(r) = e.pending_link.take() {
                    let _ = r.send(Ok(l));
                }
            }
            CircEvent::ConfluxSwitch(seq) => self.conflux_switch(circ_id, seq),
            CircEvent::Multiplexed { cmd, stream, data } => {
                self.conflux_multiplexed(circ_id, cmd, stream, data);
            }
        }
    }
}

/// Add what a circuit counted since the last report to the channel's
/// (process-wide) counters.
fn report_stats(stats: &ClientFlowStats, e: &mut CircEntry) {
    let now = e.circ.stats();
    let was = std::mem::replace(&mut e.reported, now);
    let add = |c: &AtomicU64, a: u64, b: u64| {
        if a > b {
            c.fetch_add(a - b, Ordering::Relaxed);
        }
    };
    add(&stats.xoff_sent, now.xoff_sent, was.xoff_sent);
    add(&stats.xon_sent, now.xon_sent, was.xon_sent);
    add(&stats.xoff_received, now.xoff_received, was.xoff_received);
    add(&stats.xon_received, now.xon_received, was.xon_received);
    add(
        &stats.half_closed_cells,
        now.half_closed_valid,
        was.half_closed_valid,
    );
    add(&stats.invalid_cells, now.invalid_cells, was.invalid_cells);
    add(
        &stats.early_xon_xoff,
        now.early_xon_xoff,
        was.early_xon_xoff,
    );
}

/// Fresh queue slots for a circuit.
pub fn circuit_credits() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(CIRC_QUEUE_SLOTS))
}
