//! A circuit as a relay sees it (sans-IO): the forward layer, what to do
//! with each cell travelling away from the client, and — when this relay is
//! the exit — the streams and flow-control windows.
//!
//! The backward layer lives separately (see `onionmix-node`'s relay) because
//! cells travelling towards the client are encrypted by whichever task
//! receives them; this machine only decides.

use std::sync::Arc;

use onionmix_cell::chan::destroy_reason;
use onionmix_cell::relay::{
    self, Begin, ConfluxLink, ConnectUdp, Extend2, RelayCmd, RelayMsg, Sendme,
};
use onionmix_cell::{CellBody, CellError};

use crate::cc::CcParams;
use crate::conflux::should_multiplex;
use crate::flow::{DeliverWindow, FlowError};
use crate::layer::RelayLayer;

#[path = "exit_streams.rs"]
mod exit_streams;
pub use exit_streams::{ExitStreams, MAX_EXIT_STREAMS};

/// Most RELAY_EARLY cells accepted on one circuit (tor-spec §5.6).
pub const MAX_RELAY_EARLY_IN: u8 = 8;

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
    /// CONFLUX_LINK (proposal 329): link this circuit into the set its
    /// nonce names (this circuit ends here, has congestion control and no
    /// streams, and saw no LINK before).
    ConfluxLink(ConfluxLink),
    /// CONFLUX_LINKED_ACK on a conflux leg.
    ConfluxLinkedAck,
    /// CONFLUX_SWITCH on a conflux leg, with its relative sequence number.
    ConfluxSwitch(u32),
    /// A stream message on a conflux leg: it belongs to the set, not to
    /// this circuit. `sequenced` ones (the multiplexed commands) go
    /// through the set's sequence numbers and reorder queue, then to the
    /// set's [`ExitStreams::handle`]; BEGIN_DIR (circuit-specific in tor)
    /// goes there at once. A DATA cell was already counted in this
    /// circuit's deliver window.
    Multiplexed {
        /// Relay command.
        cmd: RelayCmd,
        /// Stream.
        stream: u16,
        /// The message data (borrowed from the cell).
        data: &'a [u8],
        /// Whether it carries a sequence number.
        sequenced: bool,
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

/// The relay-side, client-facing half of a circuit.
pub struct RelayCircuit {
    fwd: Box<dyn RelayLayer>,
    relay_early_seen: u8,
    has_next: bool,
    extending: bool,
    deliver: DeliverWindow,
    cc: Option<Arc<CcParams>>,
    streams: ExitStreams,
    /// A CONFLUX_LINK arrived (at most one per circuit).
    link_seen: bool,
    /// The circuit is a leg of a conflux set: stream messages belong to
    /// the set.
    leg: bool,
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
            streams: ExitStreams::new(cc.clone()),
            cc,
            link_seen: false,
            leg: false,
        }
    }

    /// The circuit became a conflux leg (its CONFLUX_LINK was accepted).
    pub fn set_conflux_leg(&mut self) {
        self.leg = true;
    }
    /// Whether it is a conflux leg.
    pub fn is_conflux_leg(&self) -> bool {
        self.leg
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
        let cmd = msg.cmd();
        if matches!(msg, RelayMsg::Data(_) | RelayMsg::Datagram(_)) {
            if sid == 0 {
                return Err(RelayCircError::Protocol("DATA or DATAGRAM with stream 0"));
            }
            // Counted on the circuit it came on, in or out of order
            // (proposal 329 §2.5).
            self.deliver.on_received()?;
            if self.deliver.sendme_due() {
                self.deliver.on_sendme_sent();
                circ_sendme = Some(digest);
            }
        }
        if self.leg && (should_multiplex(cmd) || cmd == RelayCmd::BEGIN_DIR) {
            if matches!(cmd, RelayCmd::CONNECTED | RelayCmd::RESOLVED) {
                return Err(RelayCircError::Protocol(
                    "backward-only command from client",
                ));
            }
            return Ok(Handled {
                action: Inbound::Multiplexed {
                    cmd,
                    stream: sid,
                    data: relay::data(body)?,
                    sequenced: cmd != RelayCmd::BEGIN_DIR,
                },
                circ_sendme,
            });
        }
        let action = match msg {
            RelayMsg::Extend2(e) => {
                if !early {
                    return Err(RelayCircError::Protocol("EXTEND2 not in RELAY_EARLY"));
                }
                if self.has_next || self.extending {
                    return Err(RelayCircError::Protocol("circuit already extended"));
                }
                if !self.streams.is_empty() || self.link_seen {
                    return Err(RelayCircError::Protocol(
                        "EXTEND2 on a circuit with streams or conflux",
                    ));
                }
                self.extending = true;
                Inbound::Extend(e)
            }
            RelayMsg::Begin(_) | RelayMsg::BeginDir | RelayMsg::ConnectUdp(_) if self.has_next => {
                return Err(RelayCircError::Protocol(
                    "BEGIN on a circuit that continues",
                ));
            }
            m @ (RelayMsg::Begin(_)
            | RelayMsg::BeginDir
            | RelayMsg::ConnectUdp(_)
            | RelayMsg::Datagram(_)
            | RelayMsg::Resolve(_)
            | RelayMsg::Data(_)
            | RelayMsg::End(_)
            | RelayMsg::Xoff
            | RelayMsg::Xon(_)) => self.streams.handle(sid, m)?,
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
            RelayMsg::ConfluxLink(l) => {
                // tor's conflux_process_link checks, and 0.4.9's refusal
                // of a circuit that already carries streams.
                if self.link_seen {
                    return Err(RelayCircError::Protocol("second CONFLUX_LINK"));
                }
                if self.has_next || self.extending {
                    return Err(RelayCircError::Protocol("CONFLUX_LINK with further hops"));
                }
                if self.cc.is_none() {
                    return Err(RelayCircError::Protocol(
                        "CONFLUX_LINK without congestion control",
                    ));
                }
                if !self.streams.is_empty() {
                    return Err(RelayCircError::Protocol(
                        "CONFLUX_LINK on a circuit with streams",
                    ));
                }
                self.link_seen = true;
                Inbound::ConfluxLink(l)
            }
            RelayMsg::ConfluxLinkedAck | RelayMsg::ConfluxSwitch(_) if !self.leg => {
                return Err(RelayCircError::Protocol(
                    "conflux message on a circuit that is not a leg",
                ));
            }
            RelayMsg::ConfluxLinkedAck => Inbound::ConfluxLinkedAck,
            RelayMsg::ConfluxSwitch(seq) => Inbound::ConfluxSwitch(seq),
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
            | RelayMsg::Truncated(_)
            | RelayMsg::ConfluxLinked(_) => {
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

    /// Number of open exit streams.
    pub fn n_streams(&self) -> usize {
        self.streams.len()
    }

    /// The circuit's own exit streams (their flow control: closed from
    /// our side, data queued towards or drained by the target).
    pub fn streams_mut(&mut self) -> &mut ExitStreams {
        &mut self.streams
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

    /// A BEGIN on `sid`, taken.
    fn open_tcp_stream(c: &mut RelayCircuit, sid: u16) {
        let begin = onionmix_cell::relay::Begin {
            host: onionmix_cell::relay::TargetHost::Hostname("a.b".into()),
            port: 80,
            flags: 0,
        };
        let mut b = body(RelayCmd::BEGIN, sid, &begin.encode());
        c.handle_inbound(false, &mut b).unwrap();
    }

    #[test]
    fn resolve_is_a_stream_until_it_is_answered() {
        let mut c = RelayCircuit::new(Box::new(Clear), None);
        open_tcp_stream(&mut c, 6);
        // Not on a live stream's ID: that would replace its entry.
        let mut r = body(RelayCmd::RESOLVE, 6, b"a.example\0");
        assert!(c.handle_inbound(false, &mut r).is_err());
        let mut c = RelayCircuit::new(Box::new(Clear), None);
        let mut r = body(RelayCmd::RESOLVE, 7, b"a.example\0");
        assert!(matches!(
            c.handle_inbound(false, &mut r).unwrap().action,
            Inbound::Resolve { stream: 7, .. }
        ));
        assert_eq!(c.n_streams(), 1);
        // Counted against the circuit's streams.
        for sid in 8..(8 + MAX_EXIT_STREAMS as u16 - 1) {
            let mut r = body(RelayCmd::RESOLVE, sid, b"a.example\0");
            c.handle_inbound(false, &mut r).unwrap();
        }
        let mut r = body(RelayCmd::RESOLVE, 9000, b"a.example\0");
        assert!(c.handle_inbound(false, &mut r).is_err(), "over the limit");
        // Answered (RESOLVED sent): the ID is free again.
        c.streams_mut().stream_closed(7);
        let mut r = body(RelayCmd::RESOLVE, 7, b"a.example\0");
        assert!(c.handle_inbound(false, &mut r).is_ok());
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
        open_tcp_stream(&mut c, 6);
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

    fn cc_circ() -> RelayCircuit {
        RelayCircuit::new(Box::new(Clear), Some((Arc::new(CcParams::default()), 31)))
    }

    fn link_body() -> Vec<u8> {
        onionmix_cell::relay::ConfluxLink {
            nonce: onionmix_cell::relay::Nonce([5; 32]),
            last_seqno_sent: 0,
            last_seqno_recv: 0,
            desired_ux: 3,
        }
        .encode()
    }

    #[test]
    fn conflux_link_is_checked_as_tor_checks_it() {
        // Without congestion control: refused.
        let mut c = RelayCircuit::new(Box::new(Clear), None);
        let mut b = body(RelayCmd::CONFLUX_LINK, 0, &link_body());
        assert!(c.handle_inbound(false, &mut b).is_err());
        // With it: accepted once.
        let mut c = cc_circ();
        let mut b = body(RelayCmd::CONFLUX_LINK, 0, &link_body());
        assert!(matches!(
            c.handle_inbound(false, &mut b).unwrap().action,
            Inbound::ConfluxLink(_)
        ));
        let mut b = body(RelayCmd::CONFLUX_LINK, 0, &link_body());
        assert!(c.handle_inbound(false, &mut b).is_err(), "second LINK");
        // On a circuit with streams (tor 0.4.9), or that continues.
        let mut c = cc_circ();
        let begin = Begin {
            host: onionmix_cell::relay::TargetHost::Hostname("example.com".into()),
            port: 80,
            flags: 0,
        };
        let mut b = body(RelayCmd::BEGIN, 3, &begin.encode());
        c.handle_inbound(false, &mut b).unwrap();
        let mut b = body(RelayCmd::CONFLUX_LINK, 0, &link_body());
        assert!(c.handle_inbound(false, &mut b).is_err());
        let mut c = cc_circ();
        c.extended(true);
        let mut b = body(RelayCmd::CONFLUX_LINK, 0, &link_body());
        assert!(c.handle_inbound(false, &mut b).is_err());
        // A malformed body closes the circuit.
        let mut c = cc_circ();
        let mut b = body(RelayCmd::CONFLUX_LINK, 0, &link_body()[..20]);
        assert!(c.handle_inbound(false, &mut b).is_err());
        // LINKED is client-bound.
        let mut c = cc_circ();
        let mut b = body(RelayCmd::CONFLUX_LINKED, 0, &link_body());
        assert!(c.handle_inbound(false, &mut b).is_err());
    }

    #[test]
    fn switch_and_ack_only_on_legs_and_legs_hand_stream_messages_to_their_set() {
        let mut c = cc_circ();
        let mut b = body(RelayCmd::CONFLUX_SWITCH, 0, &7u32.to_be_bytes());
        assert!(c.handle_inbound(false, &mut b).is_err(), "SWITCH off a leg");
        let mut c = cc_circ();
        let mut b = body(RelayCmd::CONFLUX_LINKED_ACK, 0, &[]);
        assert!(c.handle_inbound(false, &mut b).is_err(), "ACK off a leg");

        let mut c = cc_circ();
        let mut b = body(RelayCmd::CONFLUX_LINK, 0, &link_body());
        c.handle_inbound(false, &mut b).unwrap();
        c.set_conflux_leg();
        assert!(c.is_conflux_leg());
        let mut b = body(RelayCmd::CONFLUX_SWITCH, 0, &7u32.to_be_bytes());
        assert!(matches!(
            c.handle_inbound(false, &mut b).unwrap().action,
            Inbound::ConfluxSwitch(7)
        ));
        let mut b = body(RelayCmd::CONFLUX_LINKED_ACK, 0, &[]);
        assert!(matches!(
            c.handle_inbound(false, &mut b).unwrap().action,
            Inbound::ConfluxLinkedAck
        ));
        // A short SWITCH is malformed.
        let mut b = body(RelayCmd::CONFLUX_SWITCH, 0, &[1, 2]);
        assert!(c.handle_inbound(false, &mut b).is_err());
        let mut c = cc_circ();
        let mut b = body(RelayCmd::CONFLUX_LINK, 0, &link_body());
        c.handle_inbound(false, &mut b).unwrap();
        c.set_conflux_leg();
        // DATA still counts for this circuit's SENDMEs, but is the set's.
        let mut sendmes = 0;
        for _ in 0..31 {
            let mut b = body(RelayCmd::DATA, 9, b"abc");
            let h = c.handle_inbound(false, &mut b).unwrap();
            sendmes += usize::from(h.circ_sendme.is_some());
            match h.action {
                Inbound::Multiplexed {
                    cmd,
                    stream,
                    data,
                    sequenced,
                } => {
                    assert_eq!(
                        (cmd, stream, data, sequenced),
                        (RelayCmd::DATA, 9, &b"abc"[..], true)
                    );
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(sendmes, 1);
        let mut b = body(RelayCmd::BEGIN_DIR, 4, &[]);
        assert!(matches!(
            c.handle_inbound(false, &mut b).unwrap().action,
            Inbound::Multiplexed {
                sequenced: false,
                ..
            }
        ));
        // A leg is never extended (a fresh circuit would be).
        let ext = Extend2 {
            specs: Vec::new(),
            create: onionmix_cell::chan::Create2 {
                htype: 2,
                hdata: vec![0; 84],
            },
        }
        .encode()
        .unwrap();
        let mut b = body(RelayCmd::EXTEND2, 0, &ext);
        assert!(c.handle_inbound(true, &mut b).is_err());
        let mut fresh = cc_circ();
        let mut b = body(RelayCmd::EXTEND2, 0, &ext);
        assert!(matches!(
            fresh.handle_inbound(true, &mut b).unwrap().action,
            Inbound::Extend(_)
        ));
        assert_eq!(c.n_streams(), 0);
    }
}
