//! Onion-service additions to the origin side of a circuit
//! (rend-spec-v3 §3, §4): sending the circuit-level onion-service messages
//! (ESTABLISH_INTRO, ESTABLISH_RENDEZVOUS, INTRODUCE1, RENDEZVOUS1) to the
//! last hop, and, on a service's rendezvous circuit, streams the other end
//! opens (BEGIN arriving from the virtual hop).
//!
//! Inbound onion-service messages surface as [`CircEvent::Hs`]; a BEGIN on
//! a circuit that accepts streams as [`CircEvent::IncomingStream`].

use onionmix_cell::hs::OnionBegin;
use onionmix_cell::relay::{self, End, RelayCmd, end_reason};
use onionmix_cell::{CellBody, RELAY_DATA_LEN};

use super::{CircError, CircEvent, ClientCircuit, MAX_STREAMS_PER_CIRCUIT, OutCell, StreamKind};

/// Whether `cmd` is one of the onion-service relay commands (32-40).
pub(super) fn is_hs_cmd(cmd: RelayCmd) -> bool {
    (RelayCmd::ESTABLISH_INTRO.0..=RelayCmd::INTRODUCE_ACK.0).contains(&cmd.0)
}

impl ClientCircuit {
    /// Accept streams opened from the far end (BEGIN from the last hop):
    /// an onion service's rendezvous circuit once the virtual hop is added.
    pub fn set_accept_incoming(&mut self, yes: bool) {
        self.accept_incoming = yes;
    }

    /// Whether BEGIN from the last hop is accepted.
    pub fn accepts_incoming(&self) -> bool {
        self.accept_incoming
    }

    /// An onion-service message (relay commands 32-40) on stream 0 to the
    /// last hop.
    pub fn send_hs(&mut self, cmd: RelayCmd, data: &[u8]) -> Result<OutCell, CircError> {
        if !is_hs_cmd(cmd) {
            return Err(CircError::Protocol("not an onion-service relay command"));
        }
        if data.len() > RELAY_DATA_LEN {
            return Err(CircError::Cell(onionmix_cell::CellError::DoesNotFit(
                cmd.name(),
            )));
        }
        let last = self.hops.len() - 1;
        self.out(last, cmd, 0, data, false)
    }

    /// Accept a stream announced by [`CircEvent::IncomingStream`]: the
    /// CONNECTED cell to send (empty, as a service sends it: no address).
    pub fn accept_stream(&mut self, sid: u16) -> Result<OutCell, CircError> {
        let s = self
            .streams
            .get_mut(&sid)
            .ok_or(CircError::NoSuchStream(sid))?;
        if s.kind != StreamKind::Incoming {
            return Err(CircError::Protocol("stream is not waiting to be accepted"));
        }
        s.kind = StreamKind::Open;
        let hop = s.hop;
        self.out(hop, RelayCmd::CONNECTED, sid, &[], false)
    }

    /// A BEGIN arrived (already decrypted and recognized by `hop`).
    pub(super) fn incoming_begin(
        &mut self,
        hop: usize,
        body: &CellBody,
        events: &mut Vec<CircEvent>,
        out: &mut Vec<OutCell>,
    ) -> Result<(), CircError> {
        if hop + 1 != self.hops.len() {
            return Err(CircError::Protocol("BEGIN from a hop that is not the last"));
        }
        let sid = relay::header(body).stream_id;
        if sid == 0 {
            return Err(CircError::Protocol("BEGIN on stream 0"));
        }
        if self.streams.contains_key(&sid) {
            return Err(CircError::Protocol("BEGIN on a stream already open"));
        }
        let refuse = |c: &mut ClientCircuit, reason: u8, out: &mut Vec<OutCell>| {
            c.out(hop, RelayCmd::END, sid, &End::new(reason).encode(), false)
                .map(|cell| out.push(cell))
        };
        let begin = match relay::data(body).and_then(OnionBegin::parse) {
            Ok(b) => b,
            Err(_) => return refuse(self, end_reason::TORPROTOCOL, out),
        };
        if self.streams.len() >= MAX_STREAMS_PER_CIRCUIT {
            return refuse(self, end_reason::RESOURCELIMIT, out);
        }
        self.insert_stream(sid, hop, StreamKind::Incoming);
        events.push(CircEvent::IncomingStream {
            stream: sid,
            port: begin.port,
        });
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::cc::ChanSignal;
    use onionmix_cell::relay::RelayMsg;
    use std::time::Instant;

    use crate::client_circ::testutil::{Xor, at_hop, circuit, from_hop};

    #[test]
    fn hs_messages_go_to_and_come_from_the_last_hop() {
        let keys = [3u8, 5, 9];
        let mut c = circuit(&keys);
        let cell = c.send_hs(RelayCmd::ESTABLISH_RENDEZVOUS, &[7; 20]).unwrap();
        assert!(!cell.early);
        let seen = at_hop(&keys, 2, &cell);
        assert_eq!(relay::header(&seen).cmd, RelayCmd::ESTABLISH_RENDEZVOUS);
        assert_eq!(relay::data(&seen).unwrap(), &[7; 20]);
        // Not an onion-service command, or too long: refused.
        assert!(c.send_hs(RelayCmd::DATA, b"x").is_err());
        assert!(c.send_hs(RelayCmd::INTRODUCE1, &[0; 499]).is_err());

        let mut b = from_hop(&keys, 2, RelayCmd::RENDEZVOUS_ESTABLISHED, 0, &[]);
        let (mut ev, mut out) = (Vec::new(), Vec::new());
        c.handle_relay(
            &mut b,
            Instant::now(),
            ChanSignal::default(),
            &mut ev,
            &mut out,
        )
        .unwrap();
        assert_eq!(
            ev,
            vec![CircEvent::Hs {
                hop: 2,
                cmd: RelayCmd::RENDEZVOUS_ESTABLISHED,
                data: vec![]
            }]
        );
        // An onion-service command on a stream is ignored (like tor).
        let mut b = from_hop(&keys, 2, RelayCmd::RENDEZVOUS2, 4, &[1; 64]);
        ev.clear();
        c.handle_relay(
            &mut b,
            Instant::now(),
            ChanSignal::default(),
            &mut ev,
            &mut out,
        )
        .unwrap();
        assert!(ev.is_empty());
    }

    /// The virtual hop with congestion control: Vegas with the agreed
    /// SENDME increment, a circuit SENDME every `inc` DATA cells from the
    /// far end (not the fixed 100), the hops before it unchanged.
    #[test]
    fn onion_hop_runs_congestion_control_when_agreed() {
        let keys = [3u8, 5, 11];
        let mut fixed = circuit(&keys[..2]);
        fixed.add_onion_hop(Box::new(Xor(11)), None);
        assert!(!fixed.is_cc());
        assert_eq!(fixed.cc_snapshot(), None);

        let mut c = circuit(&keys[..2]);
        assert!(!c.is_cc());
        c.add_onion_hop(Box::new(Xor(11)), Some(31));
        assert_eq!(c.n_hops(), 3);
        assert!(c.is_cc());
        assert_eq!(c.cc_snapshot().map(|s| s.sendme_inc), Some(31));
        c.set_accept_incoming(true);
        let (mut ev, mut out) = (Vec::new(), Vec::new());
        let mut b = from_hop(&keys, 2, RelayCmd::BEGIN, 9, b":80\0");
        c.handle_relay(
            &mut b,
            Instant::now(),
            ChanSignal::default(),
            &mut ev,
            &mut out,
        )
        .unwrap();
        out.push(c.accept_stream(9).unwrap());
        let mut sendmes = 0;
        for _ in 0..62 {
            let mut b = from_hop(&keys, 2, RelayCmd::DATA, 9, &[1; 400]);
            c.handle_relay(
                &mut b,
                Instant::now(),
                ChanSignal::default(),
                &mut ev,
                &mut out,
            )
            .unwrap();
        }
        for cell in &out {
            let seen = at_hop(&keys, 2, cell);
            let h = relay::header(&seen);
            if h.cmd == RelayCmd::SENDME && h.stream_id == 0 {
                sendmes += 1;
            }
        }
        assert_eq!(sendmes, 2, "a circuit SENDME per 31 DATA cells");
    }

    #[test]
    fn begin_is_refused_unless_the_circuit_accepts_streams() {
        let keys = [3u8, 5];
        let mut c = circuit(&keys);
        let mut b = from_hop(&keys, 1, RelayCmd::BEGIN, 9, b"x.onion:80\0");
        let (mut ev, mut out) = (Vec::new(), Vec::new());
        assert!(
            c.handle_relay(
                &mut b,
                Instant::now(),
                ChanSignal::default(),
                &mut ev,
                &mut out
            )
            .is_err()
        );
    }

    #[test]
    fn incoming_stream_accept_data_and_end() {
        let keys = [3u8, 5, 11];
        let mut c = circuit(&keys);
        c.set_accept_incoming(true);
        assert!(c.accepts_incoming());
        let (mut ev, mut out) = (Vec::new(), Vec::new());
        // What stock tor clients send: an empty address.
        let mut b = from_hop(&keys, 2, RelayCmd::BEGIN, 77, b":8080\0");
        c.handle_relay(
            &mut b,
            Instant::now(),
            ChanSignal::default(),
            &mut ev,
            &mut out,
        )
        .unwrap();
        assert_eq!(
            ev,
            vec![CircEvent::IncomingStream {
                stream: 77,
                port: 8080
            }]
        );
        // Optimistic data before we accept is delivered.
        let mut b = from_hop(&keys, 2, RelayCmd::DATA, 77, b"GET /");
        ev.clear();
        c.handle_relay(
            &mut b,
            Instant::now(),
            ChanSignal::default(),
            &mut ev,
            &mut out,
        )
        .unwrap();
        assert_eq!(
            ev,
            vec![CircEvent::Data {
                stream: 77,
                data: b"GET /".to_vec()
            }]
        );
        // We cannot send before accepting; after, CONNECTED then DATA.
        let cell = c.accept_stream(77).unwrap();
        let seen = at_hop(&keys, 2, &cell);
        assert_eq!(relay::header(&seen).cmd, RelayCmd::CONNECTED);
        assert_eq!(relay::header(&seen).stream_id, 77);
        assert_eq!(relay::data(&seen).unwrap(), b"");
        assert!(c.accept_stream(77).is_err(), "accepted twice");
        let cell = c.send_data(77, b"HTTP/1.0 200", Instant::now()).unwrap();
        let seen = at_hop(&keys, 2, &cell);
        match RelayMsg::decode(&seen).unwrap() {
            (77, RelayMsg::Data(d)) => assert_eq!(d, b"HTTP/1.0 200"),
            other => panic!("{other:?}"),
        }
        // The same stream ID again while open is a protocol violation.
        let mut b = from_hop(&keys, 2, RelayCmd::BEGIN, 77, b":8080\0");
        assert!(
            c.handle_relay(
                &mut b,
                Instant::now(),
                ChanSignal::default(),
                &mut ev,
                &mut out
            )
            .is_err()
        );
    }

    #[test]
    fn bad_incoming_begins() {
        let keys = [3u8, 5];
        let mut c = circuit(&keys);
        c.set_accept_incoming(true);
        let (mut ev, mut out) = (Vec::new(), Vec::new());
        // Malformed: answered with END(TORPROTOCOL), no event.
        let mut b = from_hop(&keys, 1, RelayCmd::BEGIN, 5, b"no-port\0");
        c.handle_relay(
            &mut b,
            Instant::now(),
            ChanSignal::default(),
            &mut ev,
            &mut out,
        )
        .unwrap();
        assert!(ev.is_empty());
        let seen = at_hop(&keys, 1, &out[0]);
        assert_eq!(relay::header(&seen).cmd, RelayCmd::END);
        assert_eq!(relay::data(&seen).unwrap(), &[end_reason::TORPROTOCOL]);
        // From a hop that is not the last: the circuit ends.
        let mut b = from_hop(&keys, 0, RelayCmd::BEGIN, 6, b":80\0");
        assert!(
            c.handle_relay(
                &mut b,
                Instant::now(),
                ChanSignal::default(),
                &mut ev,
                &mut out
            )
            .is_err()
        );
        // Stream 0.
        let mut c = circuit(&keys);
        c.set_accept_incoming(true);
        let mut b = from_hop(&keys, 1, RelayCmd::BEGIN, 0, b":80\0");
        assert!(
            c.handle_relay(
                &mut b,
                Instant::now(),
                ChanSignal::default(),
                &mut ev,
                &mut out
            )
            .is_err()
        );
    }

    #[test]
    fn stream_limit_refuses_with_resourcelimit() {
        let keys = [3u8];
        let mut c = circuit(&keys);
        c.set_accept_incoming(true);
        let (mut ev, mut out) = (Vec::new(), Vec::new());
        for sid in 1..=(MAX_STREAMS_PER_CIRCUIT as u16 + 1) {
            let mut b = from_hop(&keys, 0, RelayCmd::BEGIN, sid, b":80\0");
            c.handle_relay(
                &mut b,
                Instant::now(),
                ChanSignal::default(),
                &mut ev,
                &mut out,
            )
            .unwrap();
        }
        assert_eq!(ev.len(), MAX_STREAMS_PER_CIRCUIT);
        assert_eq!(out.len(), 1);
        let seen = at_hop(&keys, 0, &out[0]);
        assert_eq!(relay::data(&seen).unwrap(), &[end_reason::RESOURCELIMIT]);
    }
}
