//! The client and exit circuit machines wired to each other (through a
//! stand-in relay crypto) with and without congestion control: SENDME
//! pacing and authentication, XON/XOFF rules, stream SENDMEs refused on
//! congestion-controlled circuits, and half-closed streams.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

use std::sync::Arc;
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

use onionmix_cell::relay::{self, Begin, RelayCmd, Sendme, TargetHost, Xon, encode_xoff};
use onionmix_cell::{CellBody, PAYLOAD_LEN};
use onionmix_proto::cc::{CcParams, ChanSignal};
use onionmix_proto::client_circ::{CircError, CircEvent, ClientCircuit, OutCell};
use onionmix_proto::flow::FlowError;
use onionmix_proto::layer::{ClientLayer, RelayLayer};
use onionmix_proto::relay_circ::{Inbound, RelayCircError, RelayCircuit};

/// A stand-in for tor1: no encryption; a cell is "recognized" by the hop
/// whose id is in the first digest byte; running digests are SHA-256 over
/// every recognized cell, the same at both ends.
struct Plain {
    id: u8,
    fwd: [u8; 32],
    bwd: [u8; 32],
}

impl Plain {
    fn new(id: u8) -> Self {
        Plain {
            id,
            fwd: [0; 32],
            bwd: [0; 32],
        }
    }
}

fn roll(state: &mut [u8; 32], body: &CellBody) -> [u8; 20] {
    let mut h = Sha256::new();
    h.update(*state);
    h.update(body);
    *state = h.finalize().into();
    state[..20].try_into().unwrap()
}

impl ClientLayer for Plain {
    fn originate_forward(&mut self, body: &mut CellBody) -> [u8; 20] {
        body[5] = self.id;
        roll(&mut self.fwd, body)
    }
    fn encrypt_forward(&mut self, _body: &mut CellBody) {}
    fn decrypt_backward(&mut self, body: &mut CellBody) -> Option<[u8; 20]> {
        (body[5] == self.id).then(|| roll(&mut self.bwd, body))
    }
}

impl RelayLayer for Plain {
    fn decrypt_forward(&mut self, body: &mut CellBody) -> Option<[u8; 20]> {
        (body[5] == self.id).then(|| roll(&mut self.fwd, body))
    }
    fn originate_backward(&mut self, body: &mut CellBody) -> [u8; 20] {
        body[5] = self.id;
        roll(&mut self.bwd, body)
    }
    fn encrypt_backward(&mut self, _body: &mut CellBody) {}
}

/// A two-hop circuit (the second hop is the exit) and the exit's machine.
struct Pair {
    client: ClientCircuit,
    exit: RelayCircuit,
    /// The exit's backward layer (cells it originates).
    exit_bwd: Plain,
    now: Instant,
}

impl Pair {
    fn new(cc: Option<u8>) -> Self {
        let params = Arc::new(CcParams::default());
        let mut client = ClientCircuit::new(Box::new(Plain::new(1)), params.clone());
        client.add_hop(Box::new(Plain::new(2)), cc);
        let exit = RelayCircuit::new(Box::new(Plain::new(2)), cc.map(|i| (params, i)));
        Pair {
            client,
            exit,
            exit_bwd: Plain::new(2),
            now: Instant::now(),
        }
    }

    /// Hand a client cell to the exit; returns the action (as text) and
    /// the circuit SENDME it made due.
    fn send_to_exit(&mut self, c: OutCell) -> Result<(String, Option<[u8; 20]>), RelayCircError> {
        let mut body = c.body;
        let h = self.exit.handle_inbound(c.early, &mut body)?;
        Ok((format!("{:?}", h.action), h.circ_sendme))
    }

    /// A cell from the exit to the client.
    fn recv_from_exit(
        &mut self,
        cmd: RelayCmd,
        sid: u16,
        data: &[u8],
    ) -> Result<Vec<CircEvent>, CircError> {
        let mut body = [0u8; PAYLOAD_LEN];
        relay::write(&mut body, cmd, sid, data, |p| p.fill(0)).unwrap();
        self.exit_bwd.originate_backward(&mut body);
        let (mut ev, mut out) = (Vec::new(), Vec::new());
        self.client.handle_relay(
            &mut body,
            self.now,
            ChanSignal::default(),
            &mut ev,
            &mut out,
        )?;
        Ok(ev)
    }

    /// A cell from the client side straight to the exit (crafted).
    fn raw_send_to_exit(
        &mut self,
        cmd: RelayCmd,
        sid: u16,
        data: &[u8],
    ) -> Result<Inbound<'static>, RelayCircError> {
        let mut body = [0u8; PAYLOAD_LEN];
        relay::write(&mut body, cmd, sid, data, |p| p.fill(0)).unwrap();
        body[5] = 2;
        let h = self.exit.handle_inbound(false, &mut body)?;
        Ok(match h.action {
            Inbound::Xoff { stream } => Inbound::Xoff { stream },
            Inbound::Xon { stream, kbps } => Inbound::Xon { stream, kbps },
            _ => Inbound::Nothing,
        })
    }

    /// Open a stream and have the exit accept it.
    fn open(&mut self) -> u16 {
        let (sid, cell) = self
            .client
            .begin(&Begin {
                host: TargetHost::Hostname("example.com".into()),
                port: 80,
                flags: 0,
            })
            .unwrap();
        let (action, _) = self.send_to_exit(cell).unwrap();
        assert!(action.starts_with("Begin"), "{action}");
        let ev = self.recv_from_exit(RelayCmd::CONNECTED, sid, &[]).unwrap();
        assert!(matches!(ev[..], [CircEvent::Connected { .. }]));
        sid
    }

    /// Send `n` full cells on `sid`, returning the exit's SENDMEs at once.
    fn pump(&mut self, sid: u16, n: usize) {
        let mut sent = 0;
        while sent < n {
            assert!(self.client.can_send(sid));
            let c = self.client.send_data(sid, &[1; 498], self.now).unwrap();
            sent += 1;
            if let (_, Some(tag)) = self.send_to_exit(c).unwrap() {
                self.recv_from_exit(RelayCmd::SENDME, 0, &Sendme::Authenticated(tag).encode())
                    .unwrap();
            }
        }
    }
}

#[test]
fn cc_data_is_paced_by_sendmes_every_sendme_inc_cells() {
    let mut p = Pair::new(Some(31));
    assert!(p.client.is_cc() && p.exit.is_cc());
    let sid = p.open();
    let mut due = Vec::new();
    let mut sent = 0;
    while p.client.can_send(sid) {
        let c = p.client.send_data(sid, &[7; 498], p.now).unwrap();
        sent += 1;
        let (action, sendme) = p.send_to_exit(c).unwrap();
        assert!(action.starts_with("Data"));
        if let Some(tag) = sendme {
            due.push((sent, tag));
        }
    }
    // cc_cwnd_init cells, and a SENDME due every 31.
    assert_eq!(sent, 124);
    assert_eq!(
        due.iter().map(|d| d.0).collect::<Vec<_>>(),
        vec![31, 62, 93, 124]
    );
    // The exit's SENDMEs come back 40 ms later: each opens the window.
    p.now += Duration::from_millis(40);
    for (_, tag) in &due {
        let ev = p
            .recv_from_exit(RelayCmd::SENDME, 0, &Sendme::Authenticated(*tag).encode())
            .unwrap();
        assert_eq!(ev, vec![CircEvent::Sendme { stream: 0 }]);
    }
    let cc = p.client.cc_snapshot().unwrap();
    assert_eq!(cc.inflight, 0);
    assert_eq!(cc.ewma_rtt_usec, 40_000);
    assert!(cc.cwnd > 124, "slow start grew the window: {cc:?}");
    // A SENDME with nothing outstanding kills the circuit.
    let err = p
        .recv_from_exit(
            RelayCmd::SENDME,
            0,
            &Sendme::Authenticated([1; 20]).encode(),
        )
        .unwrap_err();
    assert_eq!(err, CircError::Flow(FlowError::UnexpectedSendme));
}

#[test]
fn forged_sendme_digest_is_refused() {
    let mut p = Pair::new(Some(31));
    let sid = p.open();
    for _ in 0..31 {
        let c = p.client.send_data(sid, b"x", p.now).unwrap();
        p.send_to_exit(c).unwrap();
    }
    let err = p
        .recv_from_exit(
            RelayCmd::SENDME,
            0,
            &Sendme::Authenticated([9; 20]).encode(),
        )
        .unwrap_err();
    assert_eq!(err, CircError::Flow(FlowError::BadSendmeDigest));
}

#[test]
fn stream_sendmes_are_refused_with_cc_and_checked_without() {
    // With congestion control a stream SENDME closes the circuit, at the
    // client and at the exit.
    let mut p = Pair::new(Some(31));
    let sid = p.open();
    let err = p.recv_from_exit(RelayCmd::SENDME, sid, &[]).unwrap_err();
    assert_eq!(err, CircError::Flow(FlowError::StreamSendmeWithCc));
    let mut p = Pair::new(Some(31));
    let sid = p.open();
    assert!(matches!(
        p.raw_send_to_exit(RelayCmd::SENDME, sid, &[]),
        Err(RelayCircError::Flow(FlowError::StreamSendmeWithCc))
    ));
    // Without, one that would raise the window past 500 closes it.
    let mut p = Pair::new(None);
    let sid = p.open();
    let err = p.recv_from_exit(RelayCmd::SENDME, sid, &[]).unwrap_err();
    assert_eq!(err, CircError::Flow(FlowError::UnexpectedSendme));
}

#[test]
fn xon_xoff_rules_at_the_client() {
    // XOFF before the exit could have buffered cc_xoff_exit bytes: a
    // dropmark-style signal, obeyed but counted (as tor does).
    let mut p = Pair::new(Some(31));
    let sid = p.open();
    let ev = p
        .recv_from_exit(RelayCmd::XOFF, sid, &encode_xoff())
        .unwrap();
    assert_eq!(ev, vec![CircEvent::Xoff { stream: sid }]);
    assert_eq!(p.client.stats().early_xon_xoff, 1);
    // After 500 cells it is fine, and XON carries the rate.
    let mut p = Pair::new(Some(31));
    let sid = p.open();
    p.pump(sid, 500);
    let ev = p
        .recv_from_exit(RelayCmd::XOFF, sid, &encode_xoff())
        .unwrap();
    assert_eq!(ev, vec![CircEvent::Xoff { stream: sid }]);
    let ev = p
        .recv_from_exit(RelayCmd::XON, sid, &Xon { kbps_ewma: 250 }.encode())
        .unwrap();
    assert_eq!(
        ev,
        vec![CircEvent::Xon {
            stream: sid,
            kbps: 250
        }]
    );
    let st = p.client.stats();
    assert_eq!((st.xoff_received, st.xon_received), (1, 1));
    assert_eq!(st.early_xon_xoff, 0);
    // Bad versions are protocol violations.
    assert!(
        p.recv_from_exit(RelayCmd::XON, sid, &[1, 0, 0, 0, 0])
            .is_err()
    );
    // On a circuit without congestion control XON/XOFF are refused.
    let mut p = Pair::new(None);
    let sid = p.open();
    let err = p
        .recv_from_exit(RelayCmd::XOFF, sid, &encode_xoff())
        .unwrap_err();
    assert_eq!(err, CircError::Flow(FlowError::UnexpectedXonXoff));
}

#[test]
fn the_client_sends_xoff_and_xon_for_its_buffer() {
    let mut p = Pair::new(Some(31));
    let sid = p.open();
    assert!(
        p.client
            .stream_buffered(sid, 100_000, p.now)
            .unwrap()
            .is_none()
    );
    let xoff = p
        .client
        .stream_buffered(sid, 500 * 498 + 1, p.now)
        .unwrap()
        .expect("XOFF");
    let (action, _) = p.send_to_exit(xoff).unwrap();
    assert!(action.starts_with("Xoff"), "{action}");
    let mut out = Vec::new();
    let later = p.now + Duration::from_millis(300);
    p.client
        .stream_drained(sid, 600, 300_000, 0, later, &mut out)
        .unwrap();
    assert_eq!(out.len(), 1);
    let (action, _) = p.send_to_exit(out.remove(0)).unwrap();
    assert!(action.starts_with("Xon"), "{action}");
    assert_eq!(p.client.stats().xoff_sent, 1);
    assert_eq!(p.client.stats().xon_sent, 1);
}

#[test]
fn exit_rules_with_and_without_cc() {
    // With congestion control the exit acknowledges every 31 DATA cells
    // and passes XON/XOFF on.
    let mut p = Pair::new(Some(31));
    let sid = p.open();
    let mut dues = 0;
    for _ in 0..93 {
        let c = p.client.send_data(sid, b"y", p.now).unwrap();
        if p.send_to_exit(c).unwrap().1.is_some() {
            dues += 1;
        }
    }
    assert_eq!(dues, 3);
    assert!(matches!(
        p.raw_send_to_exit(RelayCmd::XOFF, sid, &encode_xoff()),
        Ok(Inbound::Xoff { stream }) if stream == sid
    ));
    // Without, every 100, and XON is a protocol violation.
    let mut p = Pair::new(None);
    let sid = p.open();
    let mut dues = 0;
    for _ in 0..200 {
        let c = p.client.send_data(sid, b"y", p.now).unwrap();
        if p.send_to_exit(c).unwrap().1.is_some() {
            dues += 1;
        }
    }
    assert_eq!(dues, 2);
    assert!(matches!(
        p.raw_send_to_exit(RelayCmd::XON, sid, &Xon { kbps_ewma: 1 }.encode()),
        Err(RelayCircError::Flow(FlowError::UnexpectedXonXoff))
    ));
}

#[test]
fn half_closed_streams_accept_what_was_in_flight() {
    let mut p = Pair::new(None);
    let sid = p.open();
    // Ten cells delivered (window 490 left), then we close.
    for _ in 0..10 {
        p.recv_from_exit(RelayCmd::DATA, sid, b"d").unwrap();
    }
    let end = p.client.end_stream(sid, 6, p.now).unwrap();
    p.send_to_exit(end).unwrap();
    assert_eq!(p.client.n_half_closed(), 1);
    // Data the exit sent before it saw our END: valid, no event.
    for _ in 0..490 {
        assert!(
            p.recv_from_exit(RelayCmd::DATA, sid, b"d")
                .unwrap()
                .is_empty()
        );
    }
    assert_eq!(p.client.stats().half_closed_valid, 490);
    // Beyond the window: invalid (counted, not fatal, as in tor).
    p.recv_from_exit(RelayCmd::DATA, sid, b"d").unwrap();
    assert_eq!(p.client.stats().invalid_cells, 1);
    // The ID is not reused while half-closed (a full turn of the IDs).
    for _ in 0..u16::MAX {
        let (other, _) = p.client.resolve("example.com").unwrap();
        assert_ne!(other, sid);
        p.client.forget_stream(other);
    }
    // The exit's END ends it; after that its cells are invalid.
    p.recv_from_exit(RelayCmd::END, sid, &[6]).unwrap();
    assert_eq!(p.client.n_half_closed(), 0);
    p.recv_from_exit(RelayCmd::DATA, sid, b"d").unwrap();
    assert_eq!(p.client.stats().invalid_cells, 2);
    // Data for a stream that never existed: invalid.
    p.recv_from_exit(RelayCmd::DATA, 4242, b"d").unwrap();
    assert_eq!(p.client.stats().invalid_cells, 3);
}

#[test]
fn cc_half_closed_streams_are_time_limited() {
    let mut p = Pair::new(Some(31));
    let sid = p.open();
    p.client.end_stream(sid, 6, p.now).unwrap();
    for _ in 0..2000 {
        p.recv_from_exit(RelayCmd::DATA, sid, b"d").unwrap();
    }
    p.recv_from_exit(RelayCmd::XON, sid, &Xon { kbps_ewma: 0 }.encode())
        .unwrap();
    assert_eq!(p.client.stats().half_closed_valid, 2001);
    p.now += Duration::from_secs(61);
    p.recv_from_exit(RelayCmd::DATA, sid, b"d").unwrap();
    assert_eq!(p.client.stats().invalid_cells, 1);
}

#[test]
fn udp_streams_are_paced_by_the_circuit_window_and_drop_beyond_it() {
    use onionmix_cell::relay::{ConnectUdp, ConnectedUdp};
    for cc in [None, Some(31)] {
        let mut p = Pair::new(cc);
        let (sid, cell) = p
            .client
            .connect_udp(&ConnectUdp {
                flags: 0,
                host: TargetHost::Hostname("echo.example".into()),
                port: 7,
            })
            .unwrap();
        let (action, _) = p.send_to_exit(cell).unwrap();
        assert!(action.starts_with("ConnectUdp"), "{action}");
        // An optimistic datagram before CONNECTED_UDP is allowed.
        let c = p
            .client
            .send_datagram(sid, b"early", p.now)
            .unwrap()
            .unwrap();
        let (action, _) = p.send_to_exit(c).unwrap();
        assert!(action.starts_with("Datagram"), "{action}");
        let connected = ConnectedUdp {
            ours: "198.51.100.1:40000".parse().unwrap(),
            theirs: "192.0.2.7:7".parse().unwrap(),
        };
        let ev = p
            .recv_from_exit(RelayCmd::CONNECTED_UDP, sid, &connected.encode())
            .unwrap();
        assert!(matches!(ev[..], [CircEvent::ConnectedUdp { stream, .. }] if stream == sid));
        let ev = p.recv_from_exit(RelayCmd::DATAGRAM, sid, b"pong").unwrap();
        assert_eq!(
            ev,
            vec![CircEvent::Datagram {
                stream: sid,
                data: b"pong".to_vec()
            }]
        );
        // DATA is not for UDP streams.
        assert!(p.client.send_data(sid, b"x", p.now).is_err() || !p.client.can_send(sid));
        assert!(p.recv_from_exit(RelayCmd::DATA, sid, b"x").is_err());
        // Datagrams fill the circuit's window; beyond it they are dropped,
        // and the exit's SENDMEs open it again.
        let mut p = Pair::new(cc);
        let (sid, cell) = p
            .client
            .connect_udp(&ConnectUdp {
                flags: 0,
                host: TargetHost::Ip("192.0.2.7".parse().unwrap()),
                port: 7,
            })
            .unwrap();
        p.send_to_exit(cell).unwrap();
        let mut sent = 0;
        let mut sendmes = Vec::new();
        while let Some(c) = p.client.send_datagram(sid, &[9; 498], p.now).unwrap() {
            sent += 1;
            if let (_, Some(tag)) = p.send_to_exit(c).unwrap() {
                sendmes.push(tag);
            }
            assert!(sent <= 1000, "the window bounds datagrams");
        }
        assert_eq!(sent, if cc.is_some() { 124 } else { 1000 });
        assert!(!sendmes.is_empty());
        assert!(p.client.send_datagram(sid, b"x", p.now).unwrap().is_none());
        p.now += Duration::from_millis(20);
        p.recv_from_exit(
            RelayCmd::SENDME,
            0,
            &Sendme::Authenticated(sendmes[0]).encode(),
        )
        .unwrap();
        assert!(p.client.send_datagram(sid, b"x", p.now).unwrap().is_some());
        // Too big for one message.
        assert!(p.client.send_datagram(sid, &[0; 499], p.now).is_err());
    }
}
