//! A circuit as its origin (the client) sees it: the hops' crypto, the
//! streams multiplexed on it, and flow control. Sans-IO: the driver feeds
//! inbound RELAY/DESTROY cells and asks for outbound cells.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{RngCore, SeedableRng, rngs::StdRng};

use onionmix_cell::chan::destroy_reason;
use onionmix_cell::relay::{
    self, Begin, ConfluxLink, End, Extend2, RelayCmd, RelayMsg, Sendme, end_reason,
};
use onionmix_cell::{CellBody, CellError, PAYLOAD_LEN, RELAY_DATA_LEN};

use crate::cc::{CcParams, CcPath, CcSnapshot, ChanSignal, CircSender};
use crate::flow::{
    DeliverWindow, FlowError, PackageWindow, STREAM_WINDOW_INC, STREAM_WINDOW_START,
};
use crate::halfclosed::{HalfClosed, HalfInit};
use crate::layer::ClientLayer;
use crate::xonxoff::{FlowRx, FlowTx, StreamFlowMsg, StreamRx, StreamTx};

/// Most streams open at once on one circuit.
pub const MAX_STREAMS_PER_CIRCUIT: usize = 512;
/// RELAY_EARLY cells a client may send on one circuit (tor-spec §5.6).
pub const MAX_RELAY_EARLY: u8 = 8;
/// With congestion control, how long after our END cells for a stream
/// stay valid at least (tor uses the larger of the circuit's largest RTT
/// and its circuit build timeout, initially 60 s).
pub const HALF_CLOSED_CC_GRACE: Duration = Duration::from_secs(60);

/// Errors that end the circuit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CircError {
    /// A cell no hop recognized.
    #[error("relay cell not recognized by any hop")]
    Unrecognized,
    /// A cell we cannot decode.
    #[error("malformed relay message: {0}")]
    Cell(#[from] CellError),
    /// Flow control violated.
    #[error("flow control: {0}")]
    Flow(#[from] FlowError),
    /// The peer broke the protocol in some other way.
    #[error("protocol violation: {0}")]
    Protocol(&'static str),
    /// The circuit is closed.
    #[error("circuit closed")]
    Closed,
    /// No stream IDs (or stream slots) left.
    #[error("too many streams on this circuit")]
    TooManyStreams,
    /// The stream does not exist.
    #[error("no such stream {0}")]
    NoSuchStream(u16),
    /// The windows are closed; wait for a SENDME.
    #[error("flow-control window closed")]
    WindowClosed,
}

/// An outbound relay cell, already encrypted for the first hop.
#[derive(Clone)]
pub struct OutCell {
    /// Send as RELAY_EARLY (true) or RELAY.
    pub early: bool,
    /// The encrypted body.
    pub body: CellBody,
}

impl std::fmt::Debug for OutCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OutCell")
            .field("early", &self.early)
            .finish()
    }
}

/// What a stream is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamKind {
    /// BEGIN or BEGIN_DIR sent; waiting for CONNECTED.
    Connecting,
    /// Open for data.
    Open,
    /// RESOLVE sent; waiting for RESOLVED.
    Resolving,
    /// BEGIN received from the last hop on a circuit that accepts streams
    /// (an onion service's rendezvous circuit); waiting for the driver to
    /// accept (CONNECTED) or refuse (END). DATA may already arrive.
    Incoming,
    /// CONNECT_UDP sent; waiting for CONNECTED_UDP (datagrams may go).
    ConnectingUdp,
    /// A UDP stream: DATAGRAM both ways.
    OpenUdp,
}

#[derive(Debug)]
struct StreamEntry {
    hop: usize,
    kind: StreamKind,
    rx: StreamRx,
    tx: StreamTx,
}

struct Hop {
    layer: Box<dyn ClientLayer>,
    send: CircSender,
    deliver: DeliverWindow,
}

impl Hop {
    fn new(
        layer: Box<dyn ClientLayer>,
        params: &CcParams,
        path: CcPath,
        cc_sendme_inc: Option<u8>,
    ) -> Self {
        match cc_sendme_inc {
            Some(inc) => Hop {
                layer,
                send: CircSender::vegas(params, path, inc),
                deliver: DeliverWindow::circuit_with_inc(inc.into()),
            },
            None => Hop {
                layer,
                send: CircSender::fixed(params.sendme_accept_min_version),
                deliver: DeliverWindow::circuit(),
            },
        }
    }
}

pub use events::{CircEvent, CircStats};

/// The client side of one circuit.
pub struct ClientCircuit {
    hops: Vec<Hop>,
    streams: HashMap<u16, StreamEntry>,
    half: HalfClosed,
    params: Arc<CcParams>,
    stats: CircStats,
    next_sid: u16,
    relay_early_left: u8,
    extending: bool,
    closed: bool,
    accept_incoming: bool,
    conflux: conflux::LegState,
    rng: StdRng,
}

impl std::fmt::Debug for ClientCircuit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientCircuit")
            .field("hops", &self.hops.len())
            .field("streams", &self.streams.len())
            .field("closed", &self.closed)
            .finish()
    }
}

impl ClientCircuit {
    /// A circuit whose first hop answered CREATE2 with these keys, under
    /// the consensus parameters `params` (SENDME versions, congestion and
    /// flow control).
    pub fn new(first_hop: Box<dyn ClientLayer>, params: Arc<CcParams>) -> Self {
        let mut rng = StdRng::from_entropy();
        let next_sid = (rng.next_u32() as u16).max(1);
        ClientCircuit {
            hops: vec![Hop::new(first_hop, &params, CcPath::Exit, None)],
            streams: HashMap::new(),
            half: HalfClosed::default(),
            params,
            stats: CircStats::default(),
            next_sid,
            relay_early_left: MAX_RELAY_EARLY,
            extending: false,
            closed: false,
            accept_incoming: false,
            conflux: conflux::LegState::None,
            rng,
        }
    }

    /// Number of hops built so far.
    pub fn n_hops(&self) -> usize {
        self.hops.len()
    }
    /// Number of open streams.
    pub fn n_streams(&self) -> usize {
        self.streams.len()
    }
    /// Whether the circuit was closed.
    pub fn is_closed(&self) -> bool {
        self.closed
    }
    /// Mark closed (the driver sent or got DESTROY).
    pub fn close(&mut self) {
        self.closed = true;
        self.streams.clear();
    }

    fn seal(
        &mut self,
        hop: usize,
        cmd: RelayCmd,
        sid: u16,
        data: &[u8],
    ) -> Result<(CellBody, [u8; 20]), CircError> {
        if self.closed {
            return Err(CircError::Closed);
        }
        let mut body = [0u8; PAYLOAD_LEN];
        let rng = &mut self.rng;
        relay::write(&mut body, cmd, sid, data, |p| rng.fill_bytes(p))?;
        let tag = self.hops[hop].layer.originate_forward(&mut body);
        for h in self.hops[..=hop].iter_mut().rev() {
            h.layer.encrypt_forward(&mut body);
        }
        Ok((body, tag))
    }

    fn out(
        &mut self,
        hop: usize,
        cmd: RelayCmd,
        sid: u16,
        data: &[u8],
        early: bool,
    ) -> Result<OutCell, CircError> {
        let (body, _) = self.seal(hop, cmd, sid, data)?;
        Ok(OutCell { early, body })
    }

    /// Build the EXTEND2 cell to add a hop at the end (sent as RELAY_EARLY).
    pub fn extend(&mut self, msg: &Extend2) -> Result<OutCell, CircError> {
        if self.extending {
            return Err(CircError::Protocol("extend already in progress"));
        }
        if self.relay_early_left == 0 {
            return Err(CircError::Protocol("no RELAY_EARLY cells left"));
        }
        let data = msg.encode()?;
        let last = self.hops.len() - 1;
        let cell = self.out(last, RelayCmd::EXTEND2, 0, &data, true)?;
        self.relay_early_left -= 1;
        self.extending = true;
        Ok(cell)
    }

    /// Add the hop whose handshake just completed; `cc_sendme_inc` is set
    /// when it agreed to congestion control with that SENDME increment.
    pub fn add_hop(&mut self, layer: Box<dyn ClientLayer>, cc_sendme_inc: Option<u8>) {
        self.extending = false;
        self.hops
            .push(Hop::new(layer, &self.params, CcPath::Exit, cc_sendme_inc));
    }

    /// Add an onion-service virtual hop (rend-spec-v3 §4.2: the end-to-end
    /// layer after RENDEZVOUS1/2). With `cc_sendme_inc`, congestion control
    /// runs on it with tor's onion-service Vegas thresholds (proposal 324
    /// §9: both ends agreed through the descriptor's `flow-control` line
    /// and INTRODUCE's congestion-control request); without, the fixed
    /// SENDME windows.
    pub fn add_onion_hop(&mut self, layer: Box<dyn ClientLayer>, cc_sendme_inc: Option<u8>) {
        self.hops
            .push(Hop::new(layer, &self.params, CcPath::Onion, cc_sendme_inc));
    }

    /// The consensus parameters the circuit runs under.
    pub fn params(&self) -> &CcParams {
        &self.params
    }

    /// Whether the last hop runs congestion control.
    pub fn is_cc(&self) -> bool {
        self.hops.last().is_some_and(|h| h.send.is_cc())
    }

    /// The last hop's congestion-control state, if it runs.
    pub fn cc_snapshot(&self) -> Option<CcSnapshot> {
        self.hops.last().and_then(|h| h.send.snapshot())
    }

    /// Flow-control counters.
    pub fn stats(&self) -> CircStats {
        self.stats
    }

    /// Streams in the half-closed state.
    pub fn n_half_closed(&self) -> usize {
        self.half.len()
    }

    fn alloc_sid(&mut self) -> Result<u16, CircError> {
        if self.streams.len() >= MAX_STREAMS_PER_CIRCUIT {
            return Err(CircError::TooManyStreams);
        }
        for _ in 0..=u16::MAX as u32 {
            let sid = self.next_sid;
            self.next_sid = self.next_sid.wrapping_add(1).max(1);
            if !self.streams.contains_key(&sid) && !self.half.contains(sid) {
                return Ok(sid);
            }
        }
        Err(CircError::TooManyStreams)
    }

    pub(super) fn open_stream(
        &mut self,
        kind: StreamKind,
        cmd: RelayCmd,
        data: &[u8],
    ) -> Result<(u16, OutCell), CircError> {
        let sid = self.alloc_sid()?;
        let hop = self.hops.len() - 1;
        let cell = self.out(hop, cmd, sid, data, false)?;
        self.insert_stream(sid, hop, kind);
        Ok((sid, cell))
    }

    /// Track stream `sid` at `hop`: XON/XOFF when that hop runs congestion
    /// control, stream windows otherwise.
    pub(super) fn insert_stream(&mut self, sid: u16, hop: usize, kind: StreamKind) {
        let (rx, tx) = if self.hops[hop].send.is_cc() {
            (
                StreamRx::Flow(FlowRx::new(&self.params, true)),
                StreamTx::Flow(FlowTx::new(&self.params, true)),
            )
        } else {
            (
                StreamRx::window(),
                StreamTx::Window(PackageWindow::stream()),
            )
        };
        self.streams.insert(sid, StreamEntry { hop, kind, rx, tx });
    }

    /// Open a stream to a host and port at the last hop.
    pub fn begin(&mut self, begin: &Begin) -> Result<(u16, OutCell), CircError> {
        self.open_stream(StreamKind::Connecting, RelayCmd::BEGIN, &begin.encode())
    }

    /// Open a directory stream to the last hop.
    pub fn begin_dir(&mut self) -> Result<(u16, OutCell), CircError> {
        self.open_stream(StreamKind::Connecting, RelayCmd::BEGIN_DIR, &[])
    }

    /// Ask the last hop to resolve a name (or an in-addr.arpa name).
    pub fn resolve(&mut self, name: &str) -> Result<(u16, OutCell), CircError> {
        let mut d = name.as_bytes().to_vec();
        d.push(0);
        if d.len() > RELAY_DATA_LEN {
            return Err(CircError::Cell(CellError::DoesNotFit("RESOLVE")));
        }
        self.open_stream(StreamKind::Resolving, RelayCmd::RESOLVE, &d)
    }

    /// Whether a DATA cell may be sent on this stream now: the circuit's
    /// window (or congestion window) is open, and the stream's window if
    /// it has one. An XOFF does not stop cells already queued, as in tor:
    /// it stops the stream's source (see `onionmix-node`).
    pub fn can_send(&self, sid: u16) -> bool {
        match self.streams.get(&sid) {
            Some(s) => {
                !self.closed
                    && !matches!(s.kind, StreamKind::ConnectingUdp | StreamKind::OpenUdp)
                    && self.hops[s.hop].send.can_send()
                    && match &s.tx {
                        StreamTx::Window(w) => w.available() > 0,
                        StreamTx::Flow(_) => true,
                    }
            }
            None => false,
        }
    }

    /// Package up to 498 bytes of stream data sent at `now`. The caller
    /// checks [`Self::can_send`] first (or gets [`CircError::WindowClosed`]).
    pub fn send_data(&mut self, sid: u16, data: &[u8], now: Instant) -> Result<OutCell, CircError> {
        let hop = match self.streams.get(&sid) {
            Some(s) => s.hop,
            None => return Err(CircError::NoSuchStream(sid)),
        };
        if !self.can_send(sid) {
            return Err(CircError::WindowClosed);
        }
        let (body, tag) = self.seal(hop, RelayCmd::DATA, sid, data)?;
        self.hops[hop].send.on_sent(tag, now);
        if let Some(s) = self.streams.get_mut(&sid) {
            s.tx.on_sent(data.len());
        }
        Ok(OutCell { early: false, body })
    }

    /// Close a stream from our side at `now`; it stays half-closed until
    /// the exit's END.
    pub fn end_stream(&mut self, sid: u16, reason: u8, now: Instant) -> Result<OutCell, CircError> {
        let s = self
            .streams
            .remove(&sid)
            .ok_or(CircError::NoSuchStream(sid))?;
        let cc_deadline = match &s.rx {
            StreamRx::Flow(_) => {
                let rtt = Duration::from_micros(self.hops[s.hop].send.max_rtt_usec());
                Some(now + rtt.max(HALF_CLOSED_CC_GRACE))
            }
            StreamRx::Window { .. } => None,
        };
        let data_pending = match (&s.rx, s.kind) {
            (_, StreamKind::Resolving) => 0,
            (StreamRx::Window { deliver, .. }, _) => deliver.window(),
            (StreamRx::Flow(_), _) => 0,
        };
        let sendmes_pending = match &s.tx {
            StreamTx::Window(w) => (STREAM_WINDOW_START - w.available()) / STREAM_WINDOW_INC,
            StreamTx::Flow(_) => 0,
        };
        self.half.add(
            sid,
            HalfInit {
                connected_pending: s.kind == StreamKind::Connecting,
                data_pending,
                sendmes_pending,
                cc_deadline,
            },
        );
        self.out(s.hop, RelayCmd::END, sid, &End::new(reason).encode(), false)
    }

    /// Forget a stream without sending anything (it already ended).
    pub fn forget_stream(&mut self, sid: u16) {
        self.streams.remove(&sid);
    }

    fn flow_cell(&mut self, sid: u16, msg: StreamFlowMsg) -> Result<OutCell, CircError> {
        let hop = self
            .streams
            .get(&sid)
            .map(|s| s.hop)
            .ok_or(CircError::NoSuchStream(sid))?;
        match msg {
            StreamFlowMsg::Xoff => self.stats.xoff_sent += 1,
            StreamFlowMsg::Xon(_) => self.stats.xon_sent += 1,
            StreamFlowMsg::Sendme => {}
        }
        let (cmd, body) = msg.encode();
        self.out(hop, cmd, sid, &body, false)
    }

    /// Stream data was queued for the application: `buffered` bytes now
    /// wait on `sid`. With congestion control this may send XOFF.
    pub fn stream_buffered(
        &mut self,
        sid: u16,
        buffered: usize,
        now: Instant,
    ) -> Result<Option<OutCell>, CircError> {
        let Some(s) = self.streams.get_mut(&sid) else {
            return Ok(None);
        };
        match s.rx.on_buffered(buffered, now) {
            Some(m) => self.flow_cell(sid, m).map(Some),
            None => Ok(None),
        }
    }

    /// The application consumed `cells` cells (`bytes` bytes) of `sid`;
    /// `buffered` bytes remain. Stream SENDMEs (windows) or XON
    /// (congestion control) to send are appended to `out`.
    pub fn stream_drained(
        &mut self,
        sid: u16,
        cells: u32,
        bytes: usize,
        buffered: usize,
        now: Instant,
        out: &mut Vec<OutCell>,
    ) -> Result<(), CircError> {
        let Some(s) = self.streams.get_mut(&sid) else {
            return Ok(());
        };
        let mut msgs = Vec::new();
        s.rx.on_drained(cells, bytes, buffered, now, &mut msgs);
        for m in msgs {
            out.push(self.flow_cell(sid, m)?);
        }
        Ok(())
    }

    /// Count a cell for a stream that is neither open nor half-closed, or
    /// beyond what a half-closed one could carry.
    pub(super) fn note_half(&mut self, verdict: Option<bool>) {
        match verdict {
            Some(true) => self.stats.half_closed_valid += 1,
            _ => self.stats.invalid_cells += 1,
        }
    }

    /// Handle an inbound RELAY cell body (still encrypted) received at
    /// `now`; `chan` is the state of our channel (a congestion signal).
    /// Events and cells to send are appended to `events` and `out`.
    pub fn handle_relay(
        &mut self,
        body: &mut CellBody,
        now: Instant,
        chan: ChanSignal,
        events: &mut Vec<CircEvent>,
        out: &mut Vec<OutCell>,
    ) -> Result<(), CircError> {
        if self.closed {
            return Ok(());
        }
        let mut hop = None;
        for (i, h) in self.hops.iter_mut().enumerate() {
            if let Some(d) = h.layer.decrypt_backward(body) {
                hop = Some((i, d));
                break;
            }
        }
        let (hop, digest) = hop.ok_or(CircError::Unrecognized)?;
        if self.accept_incoming && relay::header(body).cmd == RelayCmd::BEGIN {
            return self.incoming_begin(hop, body, events, out);
        }
        let (sid, msg) = RelayMsg::decode(body)?;
        if self.conflux_intercept(hop, sid, &msg, relay::data(body)?, digest, events, out)? {
            return Ok(());
        }
        match msg {
            RelayMsg::Data(_) => {
                if sid == 0 {
                    return Err(CircError::Protocol("DATA on stream 0"));
                }
                self.count_data(hop, digest, out)?;
                self.stream_msg(hop, sid, msg, now, events)?;
            }
            RelayMsg::Datagram(d) => {
                if sid == 0 {
                    return Err(CircError::Protocol("DATAGRAM on stream 0"));
                }
                self.hops[hop].deliver.on_received()?;
                if self.hops[hop].deliver.sendme_due() {
                    self.hops[hop].deliver.on_sendme_sent();
                    let m = Sendme::Authenticated(digest).encode();
                    out.push(self.out(hop, RelayCmd::SENDME, 0, &m, false)?);
                }
                self.on_datagram(sid, d, events)?;
            }
            RelayMsg::ConnectedUdp(c) => self.on_connected_udp(sid, c, events)?,
            RelayMsg::Sendme(m) => {
                if sid == 0 {
                    self.hops[hop].send.on_sendme(&m, now, chan)?;
                    events.push(CircEvent::Sendme { stream: 0 });
                } else if let Some(s) = self.streams.get_mut(&sid) {
                    if s.hop != hop {
                        return Err(CircError::Protocol("stream cell from the wrong hop"));
                    }
                    s.tx.on_sendme()?;
                    events.push(CircEvent::Sendme { stream: sid });
                } else {
                    let v = self.half.on_sendme(sid);
                    self.note_half(v);
                }
            }
            RelayMsg::Xoff
            | RelayMsg::Xon(_)
            | RelayMsg::Connected(_)
            | RelayMsg::End(_)
            | RelayMsg::Resolved(_) => self.stream_msg(hop, sid, msg, now, events)?,
            RelayMsg::Extended2(c) => {
                if !self.extending || hop != self.hops.len() - 1 {
                    return Err(CircError::Protocol("unexpected EXTENDED2"));
                }
                events.push(CircEvent::Extended(c));
            }
            RelayMsg::Truncated(r) => {
                self.close();
                events.push(CircEvent::Destroyed { reason: r });
            }
            RelayMsg::Drop => {}
            RelayMsg::Unknown(cmd, d) if sid == 0 && hs::is_hs_cmd(cmd) => {
                events.push(CircEvent::Hs {
                    hop,
                    cmd,
                    data: d.to_vec(),
                });
            }
            RelayMsg::Begin(_)
            | RelayMsg::Extend2(_)
            | RelayMsg::Truncate
            | RelayMsg::Resolve(_)
            | RelayMsg::BeginDir
            | RelayMsg::ConnectUdp(_)
            | RelayMsg::ConfluxLink(_)
            | RelayMsg::ConfluxLinkedAck => {
                return Err(CircError::Protocol("forward-only relay command from a hop"));
            }
            RelayMsg::ConfluxLinked(_) | RelayMsg::ConfluxSwitch(_) => {
                // (conflux_intercept took the valid ones.)
                return Err(CircError::Protocol("unexpected conflux message"));
            }
            RelayMsg::Unknown(..) => {}
        }
        Ok(())
    }

    /// A DATA cell from `hop` counts for its deliver window; a circuit
    /// SENDME (authenticated with `digest`) may be due.
    fn count_data(
        &mut self,
        hop: usize,
        digest: [u8; 20],
        out: &mut Vec<OutCell>,
    ) -> Result<(), CircError> {
        self.hops[hop].deliver.on_received()?;
        if self.hops[hop].deliver.sendme_due() {
            self.hops[hop].deliver.on_sendme_sent();
            let m = Sendme::Authenticated(digest).encode();
            out.push(self.out(hop, RelayCmd::SENDME, 0, &m, false)?);
        }
        Ok(())
    }

    /// Handle an inbound DESTROY.
    pub fn handle_destroy(&mut self, reason: u8, events: &mut Vec<CircEvent>) {
        self.close();
        events.push(CircEvent::Destroyed { reason });
    }

    /// The streams currently open (their IDs).
    pub fn stream_ids(&self) -> Vec<u16> {
        self.streams.keys().copied().collect()
    }
}

#[path = "client_circ_events.rs"]
mod events;
#[path = "client_circ_hs.rs"]
mod hs;
#[path = "client_circ_udp.rs"]
mod udp;

#[path = "client_circ_conflux.rs"]
mod conflux;

#[path = "client_circ_streams.rs"]
mod streams;

#[cfg(test)]
#[path = "client_circ_testutil.rs"]
mod testutil;

/// END reason the client reports when a circuit dies under a stream.
pub const END_REASON_CIRCUIT_GONE: u8 = end_reason::DESTROY;
/// DESTROY reason a client puts in its own DESTROY cells.
pub const CLIENT_DESTROY_REASON: u8 = destroy_reason::NONE;
