//! A circuit as its origin (the client) sees it: the hops' crypto, the
//! streams multiplexed on it, and flow control. Sans-IO: the driver feeds
//! inbound RELAY/DESTROY cells and asks for outbound cells.

use std::collections::HashMap;

use rand::{RngCore, SeedableRng, rngs::StdRng};

use onionmix_cell::chan::{Created2, destroy_reason};
use onionmix_cell::relay::{
    self, Begin, End, Extend2, RelayCmd, RelayMsg, ResolvedAnswer, Sendme, end_reason,
};
use onionmix_cell::{CellBody, CellError, PAYLOAD_LEN, RELAY_DATA_LEN};

use crate::flow::{DeliverWindow, FlowError, PackageWindow};
use crate::layer::ClientLayer;

/// Most streams open at once on one circuit.
pub const MAX_STREAMS_PER_CIRCUIT: usize = 512;
/// RELAY_EARLY cells a client may send on one circuit (tor-spec §5.6).
pub const MAX_RELAY_EARLY: u8 = 8;

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
}

#[derive(Debug)]
struct StreamEntry {
    hop: usize,
    kind: StreamKind,
    pkg: PackageWindow,
    deliver: DeliverWindow,
}

struct Hop {
    layer: Box<dyn ClientLayer>,
    pkg: PackageWindow,
    deliver: DeliverWindow,
}

/// Something the driver must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CircEvent {
    /// Stream data arrived.
    Data {
        /// Stream.
        stream: u16,
        /// Bytes.
        data: Vec<u8>,
    },
    /// The exit connected the stream.
    Connected {
        /// Stream.
        stream: u16,
        /// Address it connected to, if reported.
        addr: Option<std::net::IpAddr>,
    },
    /// The stream ended (the entry is gone).
    End {
        /// Stream.
        stream: u16,
        /// END reason.
        reason: u8,
    },
    /// A RESOLVE was answered.
    Resolved {
        /// Stream.
        stream: u16,
        /// Answers.
        answers: Vec<ResolvedAnswer>,
    },
    /// The pending EXTEND2 was answered; finish the handshake with this
    /// server data and call [`ClientCircuit::add_hop`].
    Extended(Created2),
    /// A SENDME opened a package window: on the circuit (`stream` 0, by
    /// 100 cells) or on one stream (by 50 cells).
    Sendme {
        /// Stream ID, or 0 for the circuit.
        stream: u16,
    },
    /// The circuit is gone (DESTROY or TRUNCATED).
    Destroyed {
        /// Reason code.
        reason: u8,
    },
    /// An onion-service message (relay commands 32-40) on stream 0.
    Hs {
        /// The hop it came from.
        hop: usize,
        /// Its relay command.
        cmd: RelayCmd,
        /// Its body.
        data: Vec<u8>,
    },
    /// A BEGIN from the last hop on a circuit that accepts streams: accept
    /// with [`ClientCircuit::accept_stream`] or refuse with
    /// [`ClientCircuit::end_stream`].
    IncomingStream {
        /// Stream ID (chosen by the other end).
        stream: u16,
        /// The port it asked for.
        port: u16,
    },
}

/// The client side of one circuit.
pub struct ClientCircuit {
    hops: Vec<Hop>,
    streams: HashMap<u16, StreamEntry>,
    next_sid: u16,
    relay_early_left: u8,
    extending: bool,
    closed: bool,
    accept_incoming: bool,
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
    /// A circuit whose first hop answered CREATE2 with these keys.
    pub fn new(first_hop: Box<dyn ClientLayer>) -> Self {
        let mut rng = StdRng::from_entropy();
        let next_sid = (rng.next_u32() as u16).max(1);
        ClientCircuit {
            hops: vec![Hop {
                layer: first_hop,
                pkg: PackageWindow::circuit(),
                deliver: DeliverWindow::circuit(),
            }],
            streams: HashMap::new(),
            next_sid,
            relay_early_left: MAX_RELAY_EARLY,
            extending: false,
            closed: false,
            accept_incoming: false,
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

    /// Add the hop whose handshake just completed.
    pub fn add_hop(&mut self, layer: Box<dyn ClientLayer>) {
        self.extending = false;
        self.hops.push(Hop {
            layer,
            pkg: PackageWindow::circuit(),
            deliver: DeliverWindow::circuit(),
        });
    }

    fn alloc_sid(&mut self) -> Result<u16, CircError> {
        if self.streams.len() >= MAX_STREAMS_PER_CIRCUIT {
            return Err(CircError::TooManyStreams);
        }
        for _ in 0..=u16::MAX as u32 {
            let sid = self.next_sid;
            self.next_sid = self.next_sid.wrapping_add(1).max(1);
            if !self.streams.contains_key(&sid) {
                return Ok(sid);
            }
        }
        Err(CircError::TooManyStreams)
    }

    fn open_stream(
        &mut self,
        kind: StreamKind,
        cmd: RelayCmd,
        data: &[u8],
    ) -> Result<(u16, OutCell), CircError> {
        let sid = self.alloc_sid()?;
        let hop = self.hops.len() - 1;
        let cell = self.out(hop, cmd, sid, data, false)?;
        self.streams.insert(
            sid,
            StreamEntry {
                hop,
                kind,
                pkg: PackageWindow::stream(),
                deliver: DeliverWindow::stream(),
            },
        );
        Ok((sid, cell))
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

    /// Whether a DATA cell may be sent on this stream now.
    pub fn can_send(&self, sid: u16) -> bool {
        match self.streams.get(&sid) {
            Some(s) => {
                !self.closed && s.pkg.available() > 0 && self.hops[s.hop].pkg.available() > 0
            }
            None => false,
        }
    }

    /// Package up to 498 bytes of stream data. The caller checks
    /// [`Self::can_send`] first (or gets [`CircError::WindowClosed`]).
    pub fn send_data(&mut self, sid: u16, data: &[u8]) -> Result<OutCell, CircError> {
        let hop = match self.streams.get(&sid) {
            Some(s) => s.hop,
            None => return Err(CircError::NoSuchStream(sid)),
        };
        if !self.can_send(sid) {
            return Err(CircError::WindowClosed);
        }
        let (body, tag) = self.seal(hop, RelayCmd::DATA, sid, data)?;
        let triggers = self.hops[hop].pkg.next_triggers_sendme();
        self.hops[hop].pkg.on_sent(triggers.then_some(tag));
        if let Some(s) = self.streams.get_mut(&sid) {
            s.pkg.on_sent(None);
        }
        Ok(OutCell { early: false, body })
    }

    /// Close a stream from our side.
    pub fn end_stream(&mut self, sid: u16, reason: u8) -> Result<OutCell, CircError> {
        let s = self
            .streams
            .remove(&sid)
            .ok_or(CircError::NoSuchStream(sid))?;
        self.out(s.hop, RelayCmd::END, sid, &End::new(reason).encode(), false)
    }

    /// Forget a stream without sending anything (it already ended).
    pub fn forget_stream(&mut self, sid: u16) {
        self.streams.remove(&sid);
    }

    /// The application consumed data on `sid`: send a stream SENDME if due.
    pub fn stream_drained(&mut self, sid: u16) -> Result<Option<OutCell>, CircError> {
        let Some(s) = self.streams.get_mut(&sid) else {
            return Ok(None);
        };
        if !s.deliver.sendme_due() {
            return Ok(None);
        }
        s.deliver.on_sendme_sent();
        let hop = s.hop;
        self.out(hop, RelayCmd::SENDME, sid, &[], false).map(Some)
    }

    /// Handle an inbound RELAY cell body (still encrypted). Events and cells
    /// to send are appended to `events` and `out`.
    pub fn handle_relay(
        &mut self,
        body: &mut CellBody,
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
        match msg {
            RelayMsg::Data(d) => {
                self.hops[hop].deliver.on_received()?;
                if self.hops[hop].deliver.sendme_due() {
                    self.hops[hop].deliver.on_sendme_sent();
                    let m = Sendme::Authenticated(digest).encode();
                    out.push(self.out(hop, RelayCmd::SENDME, 0, &m, false)?);
                }
                if let Some(s) = self.streams.get_mut(&sid) {
                    if s.hop != hop || !matches!(s.kind, StreamKind::Open | StreamKind::Incoming) {
                        return Err(CircError::Protocol(
                            "DATA from wrong hop or before CONNECTED",
                        ));
                    }
                    s.deliver.on_received()?;
                    events.push(CircEvent::Data {
                        stream: sid,
                        data: d.to_vec(),
                    });
                }
            }
            RelayMsg::Sendme(m) => {
                let tag = match &m {
                    Sendme::Authenticated(t) => Some(t),
                    Sendme::Unauthenticated => None,
                };
                if sid == 0 {
                    self.hops[hop].pkg.on_sendme(tag)?;
                    events.push(CircEvent::Sendme { stream: 0 });
                } else if let Some(s) = self.streams.get_mut(&sid) {
                    s.pkg.on_sendme(None)?;
                    events.push(CircEvent::Sendme { stream: sid });
                }
            }
            RelayMsg::Connected(c) => {
                if let Some(s) = self.streams.get_mut(&sid) {
                    if s.kind != StreamKind::Connecting {
                        return Err(CircError::Protocol("unexpected CONNECTED"));
                    }
                    s.kind = StreamKind::Open;
                    events.push(CircEvent::Connected {
                        stream: sid,
                        addr: c.addr.map(|(a, _)| a),
                    });
                }
            }
            RelayMsg::End(e) => {
                if self.streams.remove(&sid).is_some() {
                    events.push(CircEvent::End {
                        stream: sid,
                        reason: e.reason,
                    });
                }
            }
            RelayMsg::Resolved(answers) => {
                if let Some(s) = self.streams.remove(&sid) {
                    if s.kind != StreamKind::Resolving {
                        return Err(CircError::Protocol("unexpected RESOLVED"));
                    }
                    events.push(CircEvent::Resolved {
                        stream: sid,
                        answers,
                    });
                }
            }
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
            | RelayMsg::BeginDir => {
                return Err(CircError::Protocol("forward-only relay command from a hop"));
            }
            RelayMsg::Unknown(..) => {}
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

#[path = "client_circ_hs.rs"]
mod hs;

/// END reason the client reports when a circuit dies under a stream.
pub const END_REASON_CIRCUIT_GONE: u8 = end_reason::DESTROY;
/// DESTROY reason a client puts in its own DESTROY cells.
pub const CLIENT_DESTROY_REASON: u8 = destroy_reason::NONE;
