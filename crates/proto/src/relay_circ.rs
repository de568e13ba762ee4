//! A circuit as a relay sees it (sans-IO): the forward layer, what to do
//! with each cell travelling away from the client, and — when this relay is
//! the exit — the streams and flow-control windows.
//!
//! The backward layer lives separately (see `onionmix-node`'s relay) because
//! cells travelling towards the client are encrypted by whichever task
//! receives them; this machine only decides.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use onionmix_cell::chan::destroy_reason;
use onionmix_cell::relay::{Begin, ConnectUdp, Extend2, RelayCmd, RelayMsg, Sendme};
use onionmix_cell::{CellBody, CellError};

use crate::cc::CcParams;
use crate::flow::{DeliverWindow, FlowError};
use crate::layer::RelayLayer;
use crate::xonxoff::{FlowRx, StreamFlowMsg, StreamRx};

/// Most RELAY_EARLY cells accepted on one circuit (tor-spec §5.6).
pub const MAX_RELAY_EARLY_IN: u8 = 8;
/// Most streams on one exit circuit.
pub const MAX_EXIT_STREAMS: usize = 512;

/// What to do with a cell that came from the client side.
#[derive(Debug)]
pub enum Inbound<'a> {
    /// Not for us: pass it to the next hop (already decrypted one layer).
    Forward {
        /// Keep it a RELAY_EARLY cell.
        early: bool,
    },
    /// EXTEND2: connect to the next relay and send CREATE2.
    Extend(Extend2),
    /// BEGIN: open an exit connection.
    Begin {
        /// Stream.
        stream: u16,
        /// Target.
        begin: Begin,
    },
    /// BEGIN_DIR: open a directory stream to ourselves.
    BeginDir {
        /// Stream.
        stream: u16,
    },
    /// RESOLVE a name.
    Resolve {
        /// Stream.
        stream: u16,
        /// Name.
        name: String,
    },
    /// CONNECT_UDP: open a UDP socket connected to the target (an exit
    /// that advertises `Datagram=1`; proposal 339).
    ConnectUdp {
        /// Stream.
        stream: u16,
        /// Target.
        connect: ConnectUdp,
    },
    /// One datagram for a UDP stream (counted in the circuit's window,
    /// not a stream's).
    Datagram {
        /// Stream.
        stream: u16,
        /// The datagram (borrowed from the cell).
        data: &'a [u8],
    },
    /// Stream data to deliver.
    Data {
        /// Stream.
        stream: u16,
        /// Bytes (borrowed from the cell).
        data: &'a [u8],
    },
    /// The client ended a stream.
    End {
        /// Stream.
        stream: u16,
        /// Reason.
        reason: u8,
    },
    /// A SENDME: for the circuit (stream 0; check it against the digests
    /// we recorded, see [`crate::cc::CircSender::on_sendme`]) or for a
    /// stream's package window (only without congestion control).
    Sendme {
        /// Stream (0: circuit).
        stream: u16,
        /// The message.
        msg: Sendme,
    },
    /// XOFF: stop sending on a stream (congestion control).
    Xoff {
        /// Stream.
        stream: u16,
    },
    /// XON: resume a stream, at most at this rate.
    Xon {
        /// Stream.
        stream: u16,
        /// Advised rate (1000 bytes/s; 0: unlimited).
        kbps: u32,
    },
    /// TRUNCATE: destroy the next hop and answer TRUNCATED.
    Truncate,
    /// An onion-service message (relay commands 32-40: ESTABLISH_INTRO,
    /// INTRODUCE1, ESTABLISH_RENDEZVOUS, RENDEZVOUS1, ...) for this relay
    /// as introduction or rendezvous point; `onionmix_cell::hs` parses it.
    OnionService {
        /// The relay command.
        cmd: RelayCmd,
        /// Stream ID (0 for every onion-service message tor sends).
        stream: u16,
        /// The message data (borrowed from the cell).
        data: &'a [u8],
    },
    /// Nothing to do (DROP, unknown commands, data for closed streams).
    Nothing,
}

/// Errors that tear the circuit down.
#[derive(Debug, thiserror::Error)]
pub enum RelayCircError {
    /// Bad message.
    #[error("malformed relay message: {0}")]
    Cell(#[from] CellError),
    /// Flow control broken.
    #[error("flow control: {0}")]
    Flow(#[from] FlowError),
    /// Other violation.
    #[error("protocol violation: {0}")]
    Protocol(&'static str),
}

impl RelayCircError {
    /// DESTROY reason to send.
    pub fn destroy_reason(&self) -> u8 {
        destroy_reason::PROTOCOL
    }
}

/// The outcome of handling one inbound cell.
#[derive(Debug)]
pub struct Handled<'a> {
    /// What to do.
    pub action: Inbound<'a>,
    /// A circuit-level SENDME v1 is due with this digest (every 100 DATA
    /// cells, or every `sendme_inc` with congestion control): send it
    /// towards the client.
    pub circ_sendme: Option<[u8; 20]>,
}

#[derive(Debug)]
struct ExitStream {
    rx: StreamRx,
    /// A UDP stream (DATAGRAM, no stream window).
    udp: bool,
}

/// The relay-side, client-facing half of a circuit.
pub struct RelayCircuit {
    fwd: Box<dyn RelayLayer>,
    relay_early_seen: u8,
    has_next: bool,
    extending: bool,
    deliver: DeliverWindow,
    cc: Option<Arc<CcParams>>,
    streams: HashMap<u16, ExitStream>,
}

impl std::fmt::Debug for RelayCircuit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayCircuit")
            .field("has_next", &self.has_next)
            .field("streams", &self.streams.len())
            .finish()
    }
}

impl RelayCircuit {
    /// A new circuit whose forward layer is `fwd`; `cc` holds the
    /// parameters and negotiated SENDME increment when the client asked
    /// for congestion control and we agreed.
    pub fn new(fwd: Box<dyn RelayLayer>, cc: Option<(Arc<CcParams>, u8)>) -> Self {
        let (deliver, cc) = match cc {
            Some((p, inc)) => (DeliverWindow::circuit_with_inc(inc.into()), Some(p)),
            None => (DeliverWindow::circuit(), None),
        };
        RelayCircuit {
            fwd,
            relay_early_seen: 0,
            has_next: false,
            extending: false,
            deliver,
            cc,
            streams: HashMap::new(),
        }
    }

    /// Whether congestion control runs on this circuit.
    pub fn is_cc(&self) -> bool {
        self.cc.is_some()
    }

    /// Whether this relay has extended the circuit.
    pub fn has_next(&self) -> bool {
        self.has_next
    }
    /// Record that the extension finished (or failed: `ok` false).
    pub fn extended(&mut self, ok: bool) {
        self.extending = false;
        self.has_next = ok;
    }
    /// The next hop went away.
    pub fn next_gone(&mut self) {
        self.has_next = false;
        self.extending = false;
    }

    /// Handle a RELAY / RELAY_EARLY cell from the client side. The body is
    /// decrypted in place by one layer.
    pub fn handle_inbound<'a>(
        &mut self,
        early: bool,
        body: &'a mut CellBody,
    ) -> Result<Handled<'a>, RelayCircError> {
        if early {
            self.relay_early_seen = self.relay_early_seen.saturating_add(1);
            if self.relay_early_seen > MAX_RELAY_EARLY_IN {
                return Err(RelayCircError::Protocol("too many RELAY_EARLY cells"));
            }
        }
        let Some(digest) = self.fwd.decrypt_forward(body) else {
            if self.has_next {
                return Ok(Handled {
                    action: Inbound::Forward { early },
                    circ_sendme: None,
                });
            }
            return Err(RelayCircError::Protocol(
                "unrecognized cell on a circuit that ends here",
            ));
        };
        let body: &'a CellBody = body;
        let (sid, msg) = RelayMsg::decode(body)?;
        let mut circ_sendme = None;
        let action = match msg {
            RelayMsg::Extend2(e) => {
                if !early {
                    return Err(RelayCircError::Protocol("EXTEND2 not in RELAY_EARLY"));
                }
                if self.has_next || self.extending {
                    return Err(RelayCircError::Protocol("circuit already extended"));
                }
                if !self.streams.is_empty() {
                    return Err(RelayCircError::Protocol(
                        "EXTEND2 on a circuit with streams",
                    ));
                }
                self.extending = true;
                Inbound::Extend(e)
            }
            RelayMsg::ConnectUdp(c) => {
                self.check_new_stream(sid)?;
                if let Some(s) = self.streams.get_mut(&sid) {
                    s.udp = true;
                }
                Inbound::ConnectUdp {
                    stream: sid,
                    connect: c,
                }
            }
            RelayMsg::Datagram(d) => {
                if sid == 0 {
                    return Err(RelayCircError::Protocol("DATAGRAM with stream 0"));
                }
                self.deliver.on_received()?;
                if self.deliver.sendme_due() {
                    self.deliver.on_sendme_sent();
                    circ_sendme = Some(digest);
                }
                match self.streams.get(&sid) {
                    Some(s) if s.udp => Inbound::Datagram {
                        stream: sid,
                        data: d,
                    },
                    Some(_) => {
                        return Err(RelayCircError::Protocol("DATAGRAM on a TCP stream"));
                    }
                    None => Inbound::Nothing,
                }
            }
            RelayMsg::Begin(b) => {
                self.check_new_stream(sid)?;
                Inbound::Begin {
                    stream: sid,
                    begin: b,
                }
            }
            RelayMsg::BeginDir => {
                self.check_new_stream(sid)?;
                Inbound::BeginDir { stream: sid }
            }
            RelayMsg::Resolve(name) => {
                if sid == 0 {
                    return Err(RelayCircError::Protocol("RESOLVE with stream 0"));
                }
                Inbound::Resolve { stream: sid, name }
            }
            RelayMsg::Data(d) => {
                if sid == 0 {
                    return Err(RelayCircError::Protocol("DATA with stream 0"));
                }
                self.deliver.on_received()?;
                if self.deliver.sendme_due() {
                    self.deliver.on_sendme_sent();
                    circ_sendme = Some(digest);
                }
                if let Some(s) = self.streams.get_mut(&sid) {
                    if s.udp {
                        return Err(RelayCircError::Protocol("DATA on a UDP stream"));
                    }
                    s.rx.on_data()?;
                    Inbound::Data {
                        stream: sid,
                        data: d,
                    }
                } else {
                    Inbound::Nothing
                }
            }
            RelayMsg::End(e) => {
                self.streams.remove(&sid);
                Inbound::End {
                    stream: sid,
                    reason: e.reason,
                }
            }
            RelayMsg::Sendme(m) => {
                if sid != 0 && self.cc.is_some() {
                    // tor: "Congestion control got stream sendme".
                    return Err(FlowError::StreamSendmeWithCc.into());
                }
                Inbound::Sendme {
                    stream: sid,
                    msg: m,
                }
            }
            RelayMsg::Xoff | RelayMsg::Xon(_) => {
                if self.cc.is_none() || sid == 0 {
                    return Err(FlowError::UnexpectedXonXoff.into());
                }
                if !self.streams.contains_key(&sid) {
                    Inbound::Nothing
                } else if let RelayMsg::Xon(x) = msg {
                    Inbound::Xon {
                        stream: sid,
                        kbps: x.kbps_ewma,
                    }
                } else {
                    Inbound::Xoff { stream: sid }
                }
            }
            RelayMsg::Truncate => Inbound::Truncate,
            RelayMsg::Unknown(cmd, data) if is_onion_service_cmd(cmd) => Inbound::OnionService {
                cmd,
                stream: sid,
                data,
            },
            RelayMsg::Drop | RelayMsg::Unknown(..) => Inbound::Nothing,
            RelayMsg::Connected(_)
            | RelayMsg::ConnectedUdp(_)
            | RelayMsg::Resolved(_)
            | RelayMsg::Extended2(_)
            | RelayMsg::Truncated(_) => {
                return Err(RelayCircError::Protocol(
                    "backward-only command from client",
                ));
            }
        };
        Ok(Handled {
            action,
            circ_sendme,
        })
    }

    /// A stream ended from the exit side (connect failed, target closed).
    pub fn stream_closed(&mut self, sid: u16) {
        self.streams.remove(&sid);
    }

    /// Data for `sid` was queued towards its target: `buffered` bytes wait.
    /// With congestion control this may call for an XOFF.
    pub fn stream_buffered(
        &mut self,
        sid: u16,
        buffered: usize,
        now: Instant,
    ) -> Option<StreamFlowMsg> {
        self.streams
            .get_mut(&sid)
            .and_then(|s| s.rx.on_buffered(buffered, now))
    }

    /// The target took `cells` cells (`bytes` bytes) of `sid`; `buffered`
    /// bytes remain. Stream SENDMEs or XONs to send are appended to `out`.
    pub fn stream_drained(
        &mut self,
        sid: u16,
        cells: u32,
        bytes: usize,
        buffered: usize,
        now: Instant,
        out: &mut Vec<StreamFlowMsg>,
    ) {
        if let Some(s) = self.streams.get_mut(&sid) {
            s.rx.on_drained(cells, bytes, buffered, now, out);
        }
    }

    /// Number of open exit streams.
    pub fn n_streams(&self) -> usize {
        self.streams.len()
    }

    fn check_new_stream(&mut self, sid: u16) -> Result<(), RelayCircError> {
        if sid == 0 {
            return Err(RelayCircError::Protocol("stream ID 0"));
        }
        if self.has_next {
            return Err(RelayCircError::Protocol(
                "BEGIN on a circuit that continues",
            ));
        }
        if self.streams.contains_key(&sid) {
            return Err(RelayCircError::Protocol("duplicate stream ID"));
        }
        if self.streams.len() >= MAX_EXIT_STREAMS {
            return Err(RelayCircError::Protocol("too many streams"));
        }
        let rx = match &self.cc {
            Some(p) => StreamRx::Flow(FlowRx::new(p, false)),
            None => StreamRx::window(),
        };
        self.streams.insert(sid, ExitStream { rx, udp: false });
        Ok(())
    }
}

/// Whether `cmd` is one of the onion-service relay commands (32-40).
pub fn is_onion_service_cmd(cmd: RelayCmd) -> bool {
    (RelayCmd::ESTABLISH_INTRO.0..=RelayCmd::INTRODUCE_ACK.0).contains(&cmd.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionmix_cell::PAYLOAD_LEN;
    use onionmix_cell::relay;

    /// A layer that recognizes every cell (plaintext bodies).
    struct Clear;
    impl RelayLayer for Clear {
        fn decrypt_forward(&mut self, _body: &mut CellBody) -> Option<[u8; 20]> {
            Some([0; 20])
        }
        fn originate_backward(&mut self, _body: &mut CellBody) -> [u8; 20] {
            [0; 20]
        }
        fn encrypt_backward(&mut self, _body: &mut CellBody) {}
    }

    fn body(cmd: RelayCmd, sid: u16, data: &[u8]) -> CellBody {
        let mut b = [0u8; PAYLOAD_LEN];
        relay::write(&mut b, cmd, sid, data, |p| p.fill(0)).unwrap();
        b
    }

    #[test]
    fn onion_service_commands_reach_the_driver() {
        let mut c = RelayCircuit::new(Box::new(Clear), None);
        for cmd in 32..=40u8 {
            let mut b = body(RelayCmd(cmd), 0, &[cmd; 20]);
            let h = c.handle_inbound(false, &mut b).unwrap();
            match h.action {
                Inbound::OnionService {
                    cmd: got,
                    stream,
                    data,
                } => {
                    assert_eq!(got, RelayCmd(cmd));
                    assert_eq!(stream, 0);
                    assert_eq!(data, &[cmd; 20]);
                }
                other => panic!("{cmd}: {other:?}"),
            }
        }
        // Other unknown commands are still ignored.
        for cmd in [31u8, 41, 200] {
            let mut b = body(RelayCmd(cmd), 0, b"x");
            let h = c.handle_inbound(false, &mut b).unwrap();
            assert!(matches!(h.action, Inbound::Nothing), "{cmd}");
        }
    }

    #[test]
    fn udp_streams_take_datagrams_counted_by_the_circuit() {
        use onionmix_cell::relay::TargetHost;
        let mut c = RelayCircuit::new(Box::new(Clear), None);
        let connect = ConnectUdp {
            flags: 0,
            host: TargetHost::Hostname("echo.example".into()),
            port: 7,
        };
        let mut b = body(RelayCmd::CONNECT_UDP, 5, &connect.encode().unwrap());
        match c.handle_inbound(false, &mut b).unwrap().action {
            Inbound::ConnectUdp {
                stream,
                connect: got,
            } => {
                assert_eq!((stream, got), (5, connect.clone()));
            }
            other => panic!("{other:?}"),
        }
        // 100 datagrams make a circuit SENDME due, as 100 DATA cells do.
        let mut sendmes = 0;
        for _ in 0..100 {
            let mut d = body(RelayCmd::DATAGRAM, 5, b"ping");
            let h = c.handle_inbound(false, &mut d).unwrap();
            assert!(matches!(h.action, Inbound::Datagram { stream: 5, data } if data == b"ping"));
            sendmes += usize::from(h.circ_sendme.is_some());
        }
        assert_eq!(sendmes, 1);
        // DATA on a UDP stream, DATAGRAM on a TCP one: protocol errors.
        let mut d = body(RelayCmd::DATA, 5, b"x");
        assert!(c.handle_inbound(false, &mut d).is_err());
        let mut c = RelayCircuit::new(Box::new(Clear), None);
        let begin = onionmix_cell::relay::Begin {
            host: TargetHost::Hostname("a.b".into()),
            port: 80,
            flags: 0,
        };
        let mut b = body(RelayCmd::BEGIN, 6, &begin.encode());
        c.handle_inbound(false, &mut b).unwrap();
        let mut d = body(RelayCmd::DATAGRAM, 6, b"x");
        assert!(c.handle_inbound(false, &mut d).is_err());
        // For a stream that is gone: nothing (but still counted).
        let mut c = RelayCircuit::new(Box::new(Clear), None);
        let mut d = body(RelayCmd::DATAGRAM, 9, b"x");
        assert!(matches!(
            c.handle_inbound(false, &mut d).unwrap().action,
            Inbound::Nothing
        ));
    }

    #[test]
    fn unrecognized_cells_end_here_unless_the_circuit_continues() {
        struct Opaque;
        impl RelayLayer for Opaque {
            fn decrypt_forward(&mut self, _body: &mut CellBody) -> Option<[u8; 20]> {
                None
            }
            fn originate_backward(&mut self, _body: &mut CellBody) -> [u8; 20] {
                [0; 20]
            }
            fn encrypt_backward(&mut self, _body: &mut CellBody) {}
        }
        let mut c = RelayCircuit::new(Box::new(Opaque), None);
        let mut b = [0u8; PAYLOAD_LEN];
        assert!(c.handle_inbound(false, &mut b).is_err());
        // A joined rendezvous circuit is "extended" for this machine: its
        // unrecognized cells are forwarded (to the other circuit).
        c.extended(true);
        assert!(matches!(
            c.handle_inbound(false, &mut b).unwrap().action,
            Inbound::Forward { early: false }
        ));
    }
}
