//! Seeds for the cell targets (crates/cell): channel cells, relay messages, CERTS from stock tor.

use std::net::{IpAddr, Ipv4Addr};

use onionmix_cell::chan::{AuthChallenge, Create2, Created2, HTYPE_NTOR, Netinfo, encode_versions};
use onionmix_cell::relay::{
    Begin, ConfluxLink, Connected, End, Extend2, LinkSpec, Nonce, RelayCmd, RelayMsg,
    ResolvedAnswer, Sendme, TargetHost, end_reason,
};
use onionmix_cell::{ChanCmd, RawCell};
use onionmix_crypto::link_auth::build_authenticate_payload;

use super::{Seed, cat, cell_bytes, certs_payload, relay_body, stock_certs_payload, trim, v45};
use crate::crypto::AUTH_FIELDS;
use crate::fixtures::{self, NOW};

pub(super) fn relay_messages() -> Vec<(&'static str, RelayMsg<'static>)> {
    vec![
        (
            "begin-host",
            RelayMsg::Begin(Begin {
                host: TargetHost::Hostname("example.com".into()),
                port: 443,
                flags: 0,
            }),
        ),
        (
            "begin-v6",
            RelayMsg::Begin(Begin {
                host: TargetHost::Ip("2001:db8::1".parse().expect("literal")),
                port: 80,
                flags: 5,
            }),
        ),
        (
            "begin-v4",
            RelayMsg::Begin(Begin {
                host: TargetHost::Ip(IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1))),
                port: 8080,
                flags: 0,
            }),
        ),
        ("data", RelayMsg::Data(b"GET / HTTP/1.0\r\n\r\n")),
        (
            "end-exitpolicy",
            RelayMsg::End(End {
                reason: end_reason::EXITPOLICY,
                addr: Some((IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)), 300)),
            }),
        ),
        ("end-done", RelayMsg::End(End::new(end_reason::DONE))),
        (
            "connected-v4",
            RelayMsg::Connected(Connected {
                addr: Some((IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34)), 60)),
            }),
        ),
        (
            "connected-v6",
            RelayMsg::Connected(Connected {
                addr: Some(("2001:db8::2".parse().expect("literal"), 60)),
            }),
        ),
        (
            "sendme-v1",
            RelayMsg::Sendme(Sendme::Authenticated([5; 20])),
        ),
        ("sendme-v0", RelayMsg::Sendme(Sendme::Unauthenticated)),
        (
            "extend2",
            RelayMsg::Extend2(Extend2 {
                specs: vec![
                    LinkSpec::Ipv4("127.0.0.1:5000".parse().expect("literal")),
                    LinkSpec::Ipv6("[::1]:5001".parse().expect("literal")),
                    LinkSpec::LegacyId([1; 20]),
                    LinkSpec::Ed25519Id([2; 32]),
                    LinkSpec::Unknown(9, vec![1, 2, 3]),
                ],
                create: Create2 {
                    htype: HTYPE_NTOR,
                    hdata: vec![3; 84],
                },
            }),
        ),
        (
            "extended2",
            RelayMsg::Extended2(Created2 { hdata: vec![4; 64] }),
        ),
        ("truncate", RelayMsg::Truncate),
        ("truncated", RelayMsg::Truncated(8)),
        ("drop", RelayMsg::Drop),
        ("resolve", RelayMsg::Resolve("example.org".into())),
        (
            "resolved",
            RelayMsg::Resolved(vec![
                ResolvedAnswer::Ip(IpAddr::V4(Ipv4Addr::new(1, 2, 3, 4)), 60),
                ResolvedAnswer::Ip("::2".parse().expect("literal"), 60),
                ResolvedAnswer::Hostname("example.net".into(), 30),
                ResolvedAnswer::TransientError,
            ]),
        ),
        ("begin-dir", RelayMsg::BeginDir),
        ("xon", RelayMsg::Unknown(RelayCmd::XON, &[0, 0, 0, 5])),
        ("conflux-link", RelayMsg::ConfluxLink(conflux_link())),
        ("conflux-linked", RelayMsg::ConfluxLinked(conflux_link())),
        ("conflux-linked-ack", RelayMsg::ConfluxLinkedAck),
        ("conflux-switch", RelayMsg::ConfluxSwitch(31)),
    ]
}

/// A fresh link with a stock client's default DESIRED_UX.
pub(super) fn conflux_link() -> ConfluxLink {
    ConfluxLink {
        nonce: Nonce([0x5A; 32]),
        last_seqno_sent: 0,
        last_seqno_recv: 0,
        desired_ux: onionmix_cell::relay::conflux::ux::HIGH_THROUGHPUT,
    }
}

pub(super) fn cells(out: &mut Vec<Seed>) {
    let rf = fixtures::relay();
    let codec = v45();
    out.push((
        "cell_codec",
        "versions-v3".into(),
        cat(&[&[0], &[0, 0, 7, 0, 4], &encode_versions(&[3, 4, 5])]),
    ));
    let netinfo = Netinfo {
        time: NOW as u32,
        other_addr: Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        my_addrs: vec![
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2)),
            "::1".parse().expect("literal"),
        ],
    };
    let handshake = [
        RawCell::var(0, ChanCmd::CERTS, certs_payload(rf)).expect("var"),
        RawCell::var(
            0,
            ChanCmd::AUTH_CHALLENGE,
            &AuthChallenge {
                challenge: [9; 32],
                methods: vec![1, 3],
            }
            .encode(),
        )
        .expect("var"),
        RawCell::fixed(0, ChanCmd::NETINFO, &netinfo.encode()).expect("fixed"),
        RawCell::var(0, ChanCmd::VPADDING, &[0; 16]).expect("var"),
    ];
    out.push((
        "cell_codec",
        "handshake-v5".into(),
        cat(&[&[2], &cell_bytes(&codec, &handshake)]),
    ));
    out.push((
        "cell_codec",
        "stock-certs".into(),
        cat(&[
            &[1],
            &cell_bytes(
                &codec,
                &[RawCell::var(0, ChanCmd::CERTS, &stock_certs_payload()).expect("var")],
            ),
        ]),
    ));
    let circuit = [
        RawCell::fixed(
            0x8000_0001,
            ChanCmd::CREATE2,
            &Create2 {
                htype: HTYPE_NTOR,
                hdata: vec![7; 84],
            }
            .encode(),
        )
        .expect("fixed"),
        RawCell::fixed(
            0x8000_0001,
            ChanCmd::CREATED2,
            &Created2 { hdata: vec![8; 64] }.encode(),
        )
        .expect("fixed"),
        RawCell::fixed(
            0x8000_0001,
            ChanCmd::RELAY,
            &relay_body(&relay_messages()[0].1, 3),
        )
        .expect("fixed"),
        RawCell::fixed(
            0x8000_0001,
            ChanCmd::RELAY_EARLY,
            &relay_body(&relay_messages()[10].1, 0),
        )
        .expect("fixed"),
        RawCell::fixed(0x8000_0001, ChanCmd::DESTROY, &[1]).expect("fixed"),
        RawCell::fixed(0, ChanCmd::PADDING, &[]).expect("fixed"),
        RawCell::var(
            0,
            ChanCmd::AUTHENTICATE,
            &build_authenticate_payload(
                &AUTH_FIELDS,
                &fixtures::peer_relay().keys.ed_link_auth,
                &mut fixtures::rng(1),
            ),
        )
        .expect("var"),
    ];
    out.push((
        "cell_codec",
        "circuit-v4".into(),
        cat(&[&[1], &cell_bytes(&codec, &circuit)]),
    ));
    for (name, m) in relay_messages() {
        out.push(("relay_msg", name.into(), trim(&relay_body(&m, 7))));
    }
}
