//! Seeds for the handshake and circuit-machine targets (crates/proto).

use std::net::{IpAddr, Ipv4Addr};

use bytes::BytesMut;
use onionmix_cell::chan::{AuthChallenge, Netinfo, encode_versions};
use onionmix_cell::{ChanCmd, RawCell};
use onionmix_node::glue::RelayInitiatorAuth;
use onionmix_proto::channel::{InitiatorHandshake, ResponderHandshake};

use super::cells::relay_messages;
use super::{Seed, cat, cell_bytes, relay_body, stock_certs_payload, trim, v45};
use crate::fixtures::{self, NOW};

pub(super) fn handshakes(out: &mut Vec<Seed>) {
    let rf = fixtures::relay();
    let peer = fixtures::peer_relay();
    let exporter = |_: &[u8; 32]| Some([7u8; 32]);
    // A relay (peer) authenticating to our responder (rf).
    let auth = RelayInitiatorAuth {
        id: &peer.link,
        tlssecrets: [7; 32],
    };
    let verifier = onionmix_node::glue::CryptoVerifier;
    let mut ini = InitiatorHandshake::new(None, &verifier, rf.tls.cert_sha256, NOW)
        .with_auth(&auth, vec![IpAddr::V4(Ipv4Addr::LOCALHOST)]);
    let mut resp = ResponderHandshake::new(
        &rf.link,
        NOW,
        vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
        Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
    );
    let mut i_out = BytesMut::new();
    ini.start(&mut i_out).expect("start");
    let mut initiator_bytes = i_out.to_vec();
    let mut r_out = BytesMut::new();
    let mut r_in = BytesMut::from(&i_out[..]);
    let _ = resp.handle(&mut r_in, &mut r_out, &exporter);
    let responder_bytes = r_out.to_vec();
    let mut i_in = BytesMut::from(&r_out[..]);
    let mut i_out2 = BytesMut::new();
    let est = ini.handle(&mut i_in, &mut i_out2);
    assert!(matches!(est, Ok(Some(_))), "seed handshake completes");
    initiator_bytes.extend_from_slice(&i_out2);
    let tls = rf.tls.cert_sha256;
    for flags in [0x00u8, 0x01, 0x03, 0x05, 0x0b, 0x21] {
        out.push((
            "chan_initiator",
            format!("responder-flags{flags:02x}"),
            cat(&[&[flags], &tls, &responder_bytes]),
        ));
    }
    // Stock tor's CERTS cell in a responder transcript.
    let codec = v45();
    let stock = cat(&[
        &[0, 0, 7, 0, 6],
        &encode_versions(&[3, 4, 5]),
        &cell_bytes(
            &codec,
            &[
                RawCell::var(0, ChanCmd::CERTS, &stock_certs_payload()).expect("var"),
                RawCell::var(
                    0,
                    ChanCmd::AUTH_CHALLENGE,
                    &AuthChallenge {
                        challenge: [1; 32],
                        methods: vec![3],
                    }
                    .encode(),
                )
                .expect("var"),
                RawCell::fixed(
                    0,
                    ChanCmd::NETINFO,
                    &Netinfo {
                        time: NOW as u32,
                        other_addr: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                        my_addrs: vec![IpAddr::V4(Ipv4Addr::LOCALHOST)],
                    }
                    .encode(),
                )
                .expect("fixed"),
            ],
        ),
    ]);
    out.push((
        "chan_initiator",
        "stock-tor".into(),
        cat(&[&[0x01], &fixtures::stock_tls_sha256(), &stock]),
    ));
    for flags in [0x00u8, 0x01, 0x09, 0x19] {
        out.push((
            "chan_responder",
            format!("relay-flags{flags:02x}"),
            cat(&[&[flags], &initiator_bytes]),
        ));
    }
    // A client: VERSIONS, then NETINFO without CERTS.
    let client = cat(&[
        &[0, 0, 7, 0, 4],
        &encode_versions(&[4, 5]),
        &cell_bytes(
            &codec,
            &[RawCell::fixed(
                0,
                ChanCmd::NETINFO,
                &Netinfo {
                    time: 0,
                    other_addr: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                    my_addrs: vec![],
                }
                .encode(),
            )
            .expect("fixed")],
        ),
    ]);
    out.push(("chan_responder", "client".into(), cat(&[&[0], &client])));
    let _ = responder_bytes;
}

/// A circuit-machine operation carrying a cell body.
fn op_cell(op: u8, body: &[u8]) -> Vec<u8> {
    let mut b = body.to_vec();
    if b.len() % 2 == 1 {
        b.push(0);
    }
    cat(&[&[op, (b.len() / 2) as u8], &b])
}

pub(super) fn circuits(out: &mut Vec<Seed>) {
    let m = relay_messages();
    let body = |i: usize, sid: u16| trim(&relay_body(&m[i].1, sid));
    // Relay side: EXTEND2 in RELAY_EARLY, extended, then a forwarded cell.
    out.push((
        "circ_relay",
        "extend".into(),
        cat(&[&op_cell(1, &body(10, 0)), &[2, 1], &op_cell(0, &[1, 1, 1])]),
    ));
    // Exit: BEGIN, DATA x3, SENDME, END; BEGIN_DIR; RESOLVE.
    let mut exit = op_cell(0, &body(0, 1));
    for _ in 0..3 {
        exit.extend(op_cell(0, &body(3, 1)));
    }
    exit.extend(op_cell(0, &body(8, 0)));
    exit.extend([5, 0, 1]);
    exit.extend(op_cell(0, &body(5, 1)));
    exit.extend(op_cell(0, &body(17, 2)));
    exit.extend(op_cell(0, &body(15, 3)));
    exit.extend([4, 0, 2]);
    out.push(("circ_relay", "exit".into(), exit));
    // A conflux leg (congestion control on): LINK, LINKED_ACK, SWITCH,
    // then BEGIN and DATA for the set.
    let mut leg = vec![200];
    for (i, sid) in [(19, 0), (21, 0), (22, 0), (0, 1), (3, 1)] {
        leg.extend(op_cell(0, &body(i, sid)));
    }
    out.push(("circ_relay", "conflux-leg".into(), leg));
    conflux(out);
    // Client: open streams, get CONNECTED/DATA/RESOLVED/END, extend.
    // Stream IDs 1-16 in inbound cells name the streams opened so far;
    // the first Digest byte names the hop.
    let at_hop = |mut b: Vec<u8>, hop: u8| {
        b.resize(b.len().max(11), 0);
        b[5] = hop;
        b
    };
    let mut client = vec![1, 0, 0, 80];
    client.extend(op_cell(0, &at_hop(body(6, 1), 0)));
    client.extend(op_cell(0, &at_hop(body(3, 1), 0)));
    client.extend([4, 0, 100]);
    client.extend([2]);
    client.extend(op_cell(0, &at_hop(body(6, 2), 0)));
    client.extend([3]);
    client.extend(op_cell(0, &at_hop(body(16, 3), 0)));
    client.extend([6, 0]);
    client.extend([7]);
    client.extend(op_cell(0, &at_hop(body(11, 0), 0)));
    client.extend([8, 1, 1, 1, 187]);
    client.extend(op_cell(0, &at_hop(body(6, 3), 1)));
    client.extend(op_cell(0, &at_hop(body(5, 1), 0)));
    client.extend(op_cell(0, &at_hop(body(9, 3), 1)));
    client.extend(op_cell(0, &at_hop(body(13, 0), 1)));
    out.push(("circ_client", "streams".into(), client));
    // Client conflux leg: extend with congestion control, LINK, LINKED
    // from the last hop, then a SWITCH and DATA for the set.
    let mut leg = vec![7, 8, 200, 10];
    for (i, sid) in [(20, 0), (22, 0), (6, 1), (3, 1)] {
        leg.extend(op_cell(0, &at_hop(body(i, sid), 1)));
        leg.extend([0, 0, 0]);
    }
    out.push(("circ_client", "conflux-leg".into(), leg));
}

/// Programs for the `conflux` target: two legs link, messages arrive out
/// of order across a SWITCH, the scheduler sends and switches, a leg
/// closes.
fn conflux(out: &mut Vec<Seed>) {
    let link = super::cells::conflux_link().encode();
    let mut p = super::chunk(&link);
    p.extend([8, 0x10, 0x00]);
    for (leg, rtt) in [(1u8, 10u8), (2, 20)] {
        p.extend([leg, 0]);
        p.extend(&link);
        p.push(rtt);
    }
    p.extend([1, 1]);
    p.extend([2, 2, 0, 0, 0, 3]);
    for leg in [2u8, 2, 2, 1, 1, 1] {
        p.extend([leg, 3, 0, 100]);
    }
    // Sends: both legs ready (leg 1 faster), then only leg 2 (a SWITCH).
    // Each view is (ready, RTT u16); the last byte asks for DATA.
    p.extend([0, 5, 1, 0, 10, 1, 0, 20, 1]);
    p.extend([0, 5, 0, 0, 10, 1, 0, 20, 1]);
    p.extend([0, 7, 5]);
    p.extend([2, 6, 0, 30]);
    out.push(("conflux", "two-legs".into(), p));
    out.push((
        "conflux",
        "switch-body".into(),
        super::chunk(&31u32.to_be_bytes()),
    ));
}
