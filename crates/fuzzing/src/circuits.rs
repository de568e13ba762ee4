//! crates/proto: the link handshake machines (initiator and responder) and
//! the client and relay circuit machines.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use onionmix_cell::chan::Certs;
use onionmix_cell::relay::{Begin, Extend2, LinkSpec, RelayMsg, TargetHost};
use onionmix_cell::{CellBody, CellCodec, ChanCmd, PAYLOAD_LEN};
use onionmix_node::glue::{CryptoVerifier, RelayInitiatorAuth};
use onionmix_proto::cc::{CcParams, ChanSignal};
use onionmix_proto::channel::{
    ExpectedPeer, InitiatorHandshake, LINK_VERSIONS, ProvenIds, ResponderHandshake,
    ResponderIdentity, ResponderVerifier,
};
use onionmix_proto::client_circ::{CircEvent, ClientCircuit, MAX_STREAMS_PER_CIRCUIT, OutCell};
use onionmix_proto::layer::{ClientLayer, RelayLayer};
use onionmix_proto::relay_circ::{Inbound, MAX_EXIT_STREAMS, RelayCircuit};

use crate::fixtures::{self, NOW};
use crate::input::Input;

/// Chunk sizes the handshake targets feed input in (selected by the
/// flags byte): whole, one byte at a time, and sizes around cell lengths.
const FEED: [usize; 8] = [usize::MAX, 1, 3, 64, 514, 4096, 16_384, usize::MAX];

fn feed_ranges(len: usize, sel: u8) -> Vec<std::ops::Range<usize>> {
    let step = FEED[usize::from(sel & 7)];
    let mut out = Vec::new();
    let mut at = 0;
    while at < len {
        let end = at.saturating_add(step).min(len);
        out.push(at..end);
        at = end;
    }
    out
}

/// Accepts any certificates: lets the fuzzer reach the states after CERTS.
struct AcceptAll;

impl ResponderVerifier for AcceptAll {
    fn verify(&self, certs: &Certs, _: &[u8; 32], _: u64) -> Result<ProvenIds, String> {
        // Still run the real checks, for coverage, and ignore the verdict.
        let _ = CryptoVerifier.verify(certs, &[0; 32], NOW);
        Ok(ProvenIds {
            rsa_id: [1; 20],
            ed_id: [2; 32],
            rsa_key_sha256: [3; 32],
        })
    }
}

/// Decode everything we sent: VERSIONS in the 2-byte circuit ID format,
/// the rest with the negotiated version. Our own output must always frame.
fn check_our_output(out: &[u8], version: Option<u16>) {
    let mut buf = BytesMut::from(out);
    let mut codec = CellCodec::new();
    while !buf.is_empty() {
        let cell = codec
            .decode(&mut buf)
            .expect("our handshake output frames")
            .expect("our handshake output holds whole cells");
        if cell.cmd == ChanCmd::VERSIONS {
            codec.set_link_version(version.unwrap_or(3));
        }
    }
}

/// The initiator of a link handshake (a client or a relay opening a
/// channel) reading a responder's bytes. Input: flags, the SHA-256 of the
/// TLS certificate the responder "presented", then the byte stream.
/// Flags: bit 0 real certificate checks (else accept any), bit 1
/// authenticate as a relay, bit 2 expect a particular identity, bits 3-5
/// the chunk size the stream is fed in.
pub fn chan_initiator(data: &[u8]) {
    let mut inp = Input::new(data);
    let flags = inp.u8();
    let tls_sha256: [u8; 32] = inp.array();
    let stream = inp.rest();
    let real = flags & 1 == 1;
    let verifier: &dyn ResponderVerifier = if real { &CryptoVerifier } else { &AcceptAll };
    let expected = (flags & 4 != 0).then(|| ExpectedPeer {
        rsa_id: fixtures::relay().keys.rsa_id(),
        ed_id: Some(fixtures::relay().keys.ed_id()),
    });
    let auth = RelayInitiatorAuth {
        id: &fixtures::peer_relay().link,
        tlssecrets: [7; 32],
    };
    let mut hs = InitiatorHandshake::new(expected, verifier, tls_sha256, NOW)
        .with_peer_addr(IpAddr::V4(Ipv4Addr::LOCALHOST));
    if flags & 2 != 0 {
        hs = hs.with_auth(&auth, vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    }
    let mut out = BytesMut::new();
    hs.start(&mut out).expect("VERSIONS is always written");
    let mut input = BytesMut::new();
    for r in feed_ranges(stream.len(), flags >> 3) {
        input.extend_from_slice(&stream[r]);
        match hs.handle(&mut input, &mut out) {
            Ok(None) => {}
            Ok(Some(est)) => {
                assert!(LINK_VERSIONS.contains(&est.link_version));
                check_our_output(&out, Some(est.link_version));
                // A finished handshake reads nothing more.
                assert!(matches!(hs.handle(&mut input, &mut out), Ok(None)));
                return;
            }
            Err(_) => return,
        }
    }
}

/// A relay identity that runs the real initiator checks but (when asked)
/// accepts the initiator anyway, to reach the states after AUTHENTICATE.
struct Lenient {
    accept: bool,
}

impl ResponderIdentity for Lenient {
    fn certs_payload(&self) -> &[u8] {
        fixtures::relay().link.certs_payload()
    }
    fn verify_initiator(
        &self,
        certs: &Certs,
        authenticate: &[u8],
        slog: [u8; 32],
        clog: [u8; 32],
        exporter: &dyn Fn(&[u8; 32]) -> Option<[u8; 32]>,
        now_unix: u64,
    ) -> Result<ProvenIds, String> {
        let r = fixtures::relay().link.verify_initiator(
            certs,
            authenticate,
            slog,
            clog,
            exporter,
            now_unix,
        );
        match r {
            Err(_) if self.accept => Ok(ProvenIds {
                rsa_id: [4; 20],
                ed_id: [5; 32],
                rsa_key_sha256: [6; 32],
            }),
            r => r,
        }
    }
}

/// The responder of a link handshake (our relay accepting a channel)
/// reading an initiator's bytes. Input: flags, then the byte stream.
/// Flags: bit 0 accept any AUTHENTICATE, bits 3-5 the chunk size.
pub fn chan_responder(data: &[u8]) {
    let mut inp = Input::new(data);
    let flags = inp.u8();
    let stream = inp.rest();
    let id = Lenient {
        accept: flags & 1 == 1,
    };
    let mut hs = ResponderHandshake::new(
        &id,
        NOW,
        vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
        Some(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2))),
    );
    let exporter = |_: &[u8; 32]| Some([7u8; 32]);
    let mut out = BytesMut::new();
    let mut input = BytesMut::new();
    for r in feed_ranges(stream.len(), flags >> 3) {
        input.extend_from_slice(&stream[r]);
        match hs.handle(&mut input, &mut out, &exporter) {
            Ok(None) => {}
            Ok(Some(acc)) => {
                assert!(LINK_VERSIONS.contains(&acc.link_version));
                check_our_output(&out, Some(acc.link_version));
                assert!(matches!(
                    hs.handle(&mut input, &mut out, &exporter),
                    Ok(None)
                ));
                return;
            }
            Err(_) => return,
        }
    }
    if !out.is_empty() {
        // VERSIONS answered: CERTS, AUTH_CHALLENGE and NETINFO follow in v4+.
        let mut buf = out.clone();
        let codec = CellCodec::new();
        let first = codec.decode(&mut buf).expect("frames").expect("whole");
        assert_eq!(first.cmd, ChanCmd::VERSIONS);
    }
}

// ---------------------------------------------------------------- circuits

/// A relay layer without encryption: a cell is "recognized" when its
/// Recognized field is zero; its digest is its Digest field, repeated.
struct PlainRelayLayer;

impl RelayLayer for PlainRelayLayer {
    fn decrypt_forward(&mut self, body: &mut CellBody) -> Option<[u8; 20]> {
        (body[1] == 0 && body[2] == 0).then_some([body[5]; 20])
    }
    fn originate_backward(&mut self, _: &mut CellBody) -> [u8; 20] {
        [0; 20]
    }
    fn encrypt_backward(&mut self, _: &mut CellBody) {}
}

/// Bytes of the next cell body: a length (0..=509, in steps of two) and
/// that many bytes; the rest of the 509 stays zero.
fn next_body(inp: &mut Input<'_>) -> CellBody {
    let mut body = [0u8; PAYLOAD_LEN];
    let n = (usize::from(inp.u8()) * 2).min(PAYLOAD_LEN);
    let b = inp.bytes(n);
    body[..b.len()].copy_from_slice(b);
    body
}

/// The relay side of a circuit (crates/proto `RelayCircuit`) fed RELAY and
/// RELAY_EARLY cells from the client side, with the driver's other inputs
/// (extension finished or failed, next hop gone, exit streams closing and
/// draining) in between. Stops where the relay would destroy the circuit.
pub fn circ_relay(data: &[u8]) {
    let mut inp = Input::new(data);
    // With or without congestion control negotiated (its SENDME increment
    // from the input).
    let cc = match inp.u8() {
        0..=127 => None,
        inc => Some((Arc::new(CcParams::default()), inc)),
    };
    let mut circ = RelayCircuit::new(Box::new(PlainRelayLayer), cc);
    let mut now = Instant::now();
    let mut flow = Vec::new();
    let mut extend_pending = false;
    while !inp.is_empty() {
        match inp.u8() % 6 {
            op @ (0 | 1) => {
                let mut body = next_body(&mut inp);
                let Ok(h) = circ.handle_inbound(op == 1, &mut body) else {
                    return;
                };
                match h.action {
                    Inbound::Extend(e) => {
                        assert!(!extend_pending, "second EXTEND2 accepted");
                        extend_pending = true;
                        let enc = e.encode().expect("a decoded EXTEND2 encodes");
                        assert_eq!(Extend2::parse(&enc).ok(), Some(e));
                    }
                    Inbound::Begin { stream, .. }
                    | Inbound::BeginDir { stream }
                    | Inbound::Resolve { stream, .. }
                    | Inbound::Data { stream, .. } => assert_ne!(stream, 0),
                    // The driver accepts the link: stream messages now
                    // belong to the set.
                    Inbound::ConfluxLink(_) => {
                        assert!(!extend_pending && !circ.has_next() && circ.n_streams() == 0);
                        circ.set_conflux_leg();
                    }
                    Inbound::Multiplexed { cmd, stream, .. } => {
                        assert!(circ.is_conflux_leg());
                        if cmd == onionmix_cell::relay::RelayCmd::DATA {
                            assert_ne!(stream, 0);
                        }
                    }
                    _ => {}
                }
            }
            2 => {
                if extend_pending {
                    circ.extended(inp.u8() & 1 == 1);
                    extend_pending = false;
                }
            }
            3 => {
                circ.next_gone();
                extend_pending = false;
            }
            4 => circ.streams_mut().stream_closed(inp.u16()),
            _ => {
                now += Duration::from_millis(u64::from(inp.u8()));
                let sid = inp.u16();
                let cells = u32::from(inp.u8());
                let buffered = usize::from(inp.u16());
                flow.clear();
                let streams = circ.streams_mut();
                streams.stream_drained(sid, cells, cells as usize * 498, buffered, now, &mut flow);
                let _ = streams.stream_buffered(sid, buffered, now);
            }
        }
        assert!(circ.n_streams() <= MAX_EXIT_STREAMS);
    }
}

/// The nonce the `circ_client` target links with.
const FUZZ_NONCE: onionmix_cell::relay::Nonce = onionmix_cell::relay::Nonce([0x5A; 32]);

/// A client layer without encryption. Hop `i` recognizes a cell whose
/// Recognized field is zero and whose first Digest byte is `i`.
struct PlainClientLayer(u8);

impl ClientLayer for PlainClientLayer {
    fn originate_forward(&mut self, _: &mut CellBody) -> [u8; 20] {
        [self.0; 20]
    }
    fn encrypt_forward(&mut self, _: &mut CellBody) {}
    fn decrypt_backward(&mut self, body: &mut CellBody) -> Option<[u8; 20]> {
        (body[1] == 0 && body[2] == 0 && body[5] == self.0).then_some([self.0; 20])
    }
}

fn check_out(cells: &[OutCell]) {
    for c in cells {
        RelayMsg::decode(&c.body).expect("the client sends well-formed relay cells");
    }
}

fn pick(sids: &[u16], i: u8) -> u16 {
    if sids.is_empty() {
        u16::from(i)
    } else {
        sids[usize::from(i) % sids.len()]
    }
}

/// The client side of a circuit (crates/proto `ClientCircuit`): RELAY
/// cells from the hops interleaved with what the client does (open
/// streams, send data, end streams, extend, add hops). Stream IDs are
/// random, so an inbound cell with stream ID `i` in 1..=16 is readdressed
/// to the `i`-th stream opened so far (cyclically).
pub fn circ_client(data: &[u8]) {
    let mut inp = Input::new(data);
    let mut circ = ClientCircuit::new(Box::new(PlainClientLayer(0)), Arc::new(CcParams::default()));
    let mut now = Instant::now();
    let mut sids: Vec<u16> = Vec::new();
    let mut hops = 1u8;
    let mut extending = false;
    let mut events = Vec::new();
    let mut out = Vec::new();
    while !inp.is_empty() {
        out.clear();
        match inp.u8() % 12 {
            0 => {
                let mut body = next_body(&mut inp);
                let sid = u16::from_be_bytes([body[3], body[4]]);
                if (1..=16).contains(&sid) && !sids.is_empty() {
                    let sid = sids[usize::from(sid - 1) % sids.len()];
                    body[3..5].copy_from_slice(&sid.to_be_bytes());
                }
                events.clear();
                now += Duration::from_millis(u64::from(inp.u8()));
                let chan = ChanSignal {
                    blocked: inp.u8() & 1 == 1,
                    queued_cells: u64::from(inp.u8()),
                };
                if circ
                    .handle_relay(&mut body, now, chan, &mut events, &mut out)
                    .is_err()
                {
                    return;
                }
                check_out(&out);
                let mut delivered = Vec::new();
                for e in &events {
                    match e {
                        CircEvent::End { stream, .. } | CircEvent::Resolved { stream, .. } => {
                            sids.retain(|s| s != stream);
                        }
                        CircEvent::Destroyed { .. } => return,
                        // The driver links the leg; the set hands the leg's
                        // stream messages back to it as the home leg.
                        CircEvent::ConfluxLinked(l) => {
                            assert_eq!(l.nonce, FUZZ_NONCE, "LINKED for another nonce");
                            circ.set_conflux_leg().expect("linked after LINK");
                        }
                        CircEvent::Multiplexed { cmd, stream, data } => {
                            assert!(circ.is_conflux_leg());
                            delivered.push((*cmd, *stream, data.clone()));
                        }
                        _ => {}
                    }
                }
                for (cmd, sid, data) in delivered {
                    events.clear();
                    if circ
                        .handle_conflux_msg(cmd, sid, &data, now, &mut events)
                        .is_err()
                    {
                        return;
                    }
                    for e in &events {
                        if let CircEvent::End { stream, .. } | CircEvent::Resolved { stream, .. } =
                            e
                        {
                            sids.retain(|s| s != stream);
                        }
                    }
                }
            }
            op @ 1..=3 => {
                let r = match op {
                    1 => {
                        let host = match inp.u8() % 3 {
                            0 => TargetHost::Hostname("example.com".into()),
                            1 => TargetHost::Ip(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1))),
                            _ => TargetHost::Ip("2001:db8::1".parse().expect("literal")),
                        };
                        circ.begin(&Begin {
                            host,
                            port: inp.u16().max(1),
                            flags: 0,
                        })
                    }
                    2 => circ.begin_dir(),
                    _ => circ.resolve("example.org"),
                };
                if let Ok((sid, cell)) = r {
                    assert!(!sids.contains(&sid), "stream ID reused");
                    sids.push(sid);
                    check_out(&[cell]);
                }
            }
            4 => {
                let sid = pick(&sids, inp.u8());
                let len = usize::from(inp.u8()) * 2;
                if circ.can_send(sid) {
                    let cell = circ
                        .send_data(sid, &vec![0x61; len.min(498)], now)
                        .expect("can_send said yes");
                    check_out(&[cell]);
                }
            }
            5 => {
                let sid = pick(&sids, inp.u8());
                if let Ok(cell) = circ.end_stream(sid, 6, now) {
                    check_out(&[cell]);
                }
                sids.retain(|s| *s != sid);
            }
            6 => {
                let sid = pick(&sids, inp.u8());
                let cells = u32::from(inp.u8());
                let buffered = usize::from(inp.u16());
                if circ
                    .stream_drained(sid, cells, cells as usize * 498, buffered, now, &mut out)
                    .is_ok()
                {
                    check_out(&out);
                }
            }
            7 => {
                let e = Extend2 {
                    specs: vec![
                        LinkSpec::Ipv4("127.0.0.1:5000".parse().expect("literal")),
                        LinkSpec::LegacyId([9; 20]),
                    ],
                    create: onionmix_cell::chan::Create2 {
                        htype: 2,
                        hdata: vec![1; 84],
                    },
                };
                if let Ok(cell) = circ.extend(&e) {
                    assert!(cell.early, "EXTEND2 goes in RELAY_EARLY");
                    check_out(&[cell]);
                    extending = true;
                }
            }
            8 => {
                if extending && hops < 8 {
                    // The last hop may agree to congestion control.
                    let inc = inp.u8();
                    circ.add_hop(
                        Box::new(PlainClientLayer(hops)),
                        (inc >= 128).then_some(inc),
                    );
                    hops += 1;
                    extending = false;
                }
            }
            9 => {
                let sid = pick(&sids, inp.u8());
                circ.forget_stream(sid);
                sids.retain(|s| *s != sid);
            }
            10 => {
                let link = onionmix_cell::relay::ConfluxLink {
                    nonce: FUZZ_NONCE,
                    last_seqno_sent: 0,
                    last_seqno_recv: 0,
                    desired_ux: 3,
                };
                if let Ok(cell) = circ.conflux_link(&link) {
                    check_out(&[cell]);
                }
            }
            _ => {
                events.clear();
                circ.handle_destroy(inp.u8(), &mut events);
                assert!(circ.is_closed());
                return;
            }
        }
        assert!(circ.n_streams() <= MAX_STREAMS_PER_CIRCUIT);
        assert_eq!(usize::from(hops), circ.n_hops());
    }
}
