use super::*;
use crate::chan::Create2;

fn roundtrip(m: RelayMsg<'_>) {
    let mut body = [0u8; PAYLOAD_LEN];
    m.write_cell(7, &mut body, |p| p.fill(0xAB)).unwrap();
    let (sid, got) = RelayMsg::decode(&body).unwrap();
    assert_eq!(sid, 7);
    assert_eq!(got, m);
    let h = header(&body);
    assert_eq!(h.recognized, 0);
    assert_eq!(h.digest, [0; 4]);
}

#[test]
fn messages_roundtrip() {
    roundtrip(RelayMsg::Begin(Begin {
        host: TargetHost::Hostname("example.com".into()),
        port: 443,
        flags: 0,
    }));
    roundtrip(RelayMsg::Begin(Begin {
        host: TargetHost::Ip("::1".parse().unwrap()),
        port: 80,
        flags: begin_flags::IPV6_OK,
    }));
    roundtrip(RelayMsg::Begin(Begin {
        host: TargetHost::Ip("127.0.0.1".parse().unwrap()),
        port: 8080,
        flags: 0,
    }));
    roundtrip(RelayMsg::Data(b"hello world"));
    roundtrip(RelayMsg::End(End::new(end_reason::DONE)));
    roundtrip(RelayMsg::End(End {
        reason: end_reason::EXITPOLICY,
        addr: Some(("10.0.0.1".parse().unwrap(), 300)),
    }));
    roundtrip(RelayMsg::Connected(Connected {
        addr: Some(("127.0.0.1".parse().unwrap(), 60)),
    }));
    roundtrip(RelayMsg::Connected(Connected {
        addr: Some(("2001:db8::1".parse().unwrap(), 60)),
    }));
    roundtrip(RelayMsg::Sendme(Sendme::Authenticated([5; 20])));
    roundtrip(RelayMsg::Extend2(Extend2 {
        specs: vec![
            LinkSpec::Ipv4("127.0.0.1:5000".parse().unwrap()),
            LinkSpec::LegacyId([1; 20]),
            LinkSpec::Ed25519Id([2; 32]),
        ],
        create: Create2 {
            htype: 2,
            hdata: vec![3; 84],
        },
    }));
    roundtrip(RelayMsg::Resolve("example.org".into()));
    roundtrip(RelayMsg::Resolved(vec![
        ResolvedAnswer::Ip("1.2.3.4".parse().unwrap(), 60),
        ResolvedAnswer::Ip("::2".parse().unwrap(), 60),
    ]));
    roundtrip(RelayMsg::Truncated(8));
    roundtrip(RelayMsg::Xon(Xon { kbps_ewma: 0 }));
    roundtrip(RelayMsg::Xon(Xon {
        kbps_ewma: 0xDEAD_BEEF,
    }));
    roundtrip(RelayMsg::Xoff);
    let link = ConfluxLink {
        nonce: Nonce([3; 32]),
        last_seqno_sent: 5,
        last_seqno_recv: 6,
        desired_ux: conflux::ux::MIN_LATENCY,
    };
    roundtrip(RelayMsg::ConfluxLink(link));
    roundtrip(RelayMsg::ConfluxLinked(link));
    roundtrip(RelayMsg::ConfluxLinkedAck);
    roundtrip(RelayMsg::ConfluxSwitch(123_456));
}

#[test]
fn xon_xoff_wire_format() {
    // trunnel: xoff_cell { u8 version IN [0] }, xon_cell { u8 version
    // IN [0]; u32 kbps_ewma }.
    assert_eq!(encode_xoff(), vec![0]);
    assert_eq!(Xon { kbps_ewma: 258 }.encode(), vec![0, 0, 0, 1, 2]);
    assert_eq!(Xon::parse(&[0, 0, 0, 1, 2]).unwrap().kbps_ewma, 258);
    assert!(Xon::parse(&[1, 0, 0, 0, 0]).is_err());
    assert!(Xon::parse(&[0, 0, 0]).is_err());
    assert!(Xon::parse(&[]).is_err());
    assert!(parse_xoff(&[1]).is_err());
    assert!(parse_xoff(&[]).is_err());
    // Trailing bytes are tolerated, as trunnel does.
    assert!(parse_xoff(&[0, 9]).is_ok());
}

#[test]
fn xon_and_xoff_command_numbers_are_tors() {
    // or.h: RELAY_COMMAND_XOFF 43, RELAY_COMMAND_XON 44.
    assert_eq!(RelayCmd::XOFF.0, 43);
    assert_eq!(RelayCmd::XON.0, 44);
    let mut body = [0u8; PAYLOAD_LEN];
    write(&mut body, RelayCmd(43), 9, &[0], |p| p.fill(0)).unwrap();
    assert_eq!(RelayMsg::decode(&body).unwrap().1, RelayMsg::Xoff);
}

#[test]
fn padding_starts_with_four_zeros() {
    let mut body = [0xFFu8; PAYLOAD_LEN];
    write(&mut body, RelayCmd::DATA, 1, b"abc", |p| p.fill(0x55)).unwrap();
    assert_eq!(&body[14..18], &[0, 0, 0, 0]);
    assert!(body[18..].iter().all(|&b| b == 0x55));
}

#[test]
fn bad_lengths_rejected() {
    let mut body = [0u8; PAYLOAD_LEN];
    body[0] = 2;
    body[9..11].copy_from_slice(&499u16.to_be_bytes());
    assert!(RelayMsg::decode(&body).is_err());
    assert!(Begin::parse(b"example.com:0\0").is_err());
    assert!(Begin::parse(b"example.com\0").is_err());
    assert!(Begin::parse(b"bad host!:80\0").is_err());
    assert!(Begin::parse(b"[zz::1]:80\0").is_err());
}

proptest::proptest! {
    #[test]
    fn relay_decode_never_panics(data in proptest::collection::vec(proptest::num::u8::ANY, PAYLOAD_LEN..=PAYLOAD_LEN)) {
        let body: CellBody = data.try_into().unwrap();
        let _ = RelayMsg::decode(&body);
        let _ = Extend2::parse(&body[..]);
        let _ = parse_resolved(&body[..]);
        let _ = Begin::parse(&body[..]);
        let _ = Connected::parse(&body[..]);
        let _ = Sendme::parse(&body[..]);
        let _ = Xon::parse(&body[..]);
        let _ = parse_xoff(&body[..]);
    }
}

#[test]
fn quic_hint_round_trips_and_odd_hints_are_ignored() {
    let e = Extend2 {
        specs: vec![
            LinkSpec::Ipv4("127.0.0.1:5000".parse().unwrap()),
            LinkSpec::LegacyId([1; 20]),
            LinkSpec::onionmix_quic(5001),
        ],
        create: Create2 {
            htype: 2,
            hdata: vec![3; 84],
        },
    };
    let body = e.encode().unwrap();
    let back = Extend2::parse(&body).unwrap();
    assert_eq!(back.quic_port(), Some(5001));
    assert_eq!(back.rsa_id(), Some([1; 20]));
    // Wrong length or port 0: no hint, and no error (as an unknown type).
    for bad in [vec![], vec![1], vec![0, 0], vec![1, 2, 3]] {
        assert_eq!(
            LinkSpec::Unknown(LSTYPE_ONIONMIX_QUIC, bad).quic_port(),
            None
        );
    }
    assert_eq!(LinkSpec::Unknown(9, vec![1, 2]).quic_port(), None);
}

#[test]
fn udp_messages_roundtrip_and_refuse_bad_bodies() {
    for host in [
        TargetHost::Hostname("echo.example".into()),
        TargetHost::Ip("192.0.2.7".parse().unwrap()),
        TargetHost::Ip("2001:db8::7".parse().unwrap()),
    ] {
        roundtrip(RelayMsg::ConnectUdp(ConnectUdp {
            flags: begin_flags::IPV6_OK,
            host,
            port: 7,
        }));
    }
    roundtrip(RelayMsg::ConnectedUdp(ConnectedUdp {
        ours: "198.51.100.1:40000".parse().unwrap(),
        theirs: "[2001:db8::7]:7".parse().unwrap(),
    }));
    roundtrip(RelayMsg::Datagram(b"ping"));
    roundtrip(RelayMsg::Datagram(&[0u8; RELAY_DATA_LEN]));
    let good = ConnectUdp {
        flags: 0,
        host: TargetHost::Hostname("a.b".into()),
        port: 9,
    }
    .encode()
    .unwrap();
    for n in 0..good.len() {
        assert!(ConnectUdp::parse(&good[..n]).is_err(), "{n}");
    }
    // Port 0, NUL in a name, a wrong length for a type, a hostname in
    // CONNECTED_UDP.
    let mut p0 = good.clone();
    let l = p0.len();
    p0[l - 2..].fill(0);
    assert!(ConnectUdp::parse(&p0).is_err());
    let mut nul = good.clone();
    nul[6] = 0;
    assert!(ConnectUdp::parse(&nul).is_err());
    assert!(ConnectUdp::parse(&[0, 0, 0, 0, 4, 5, 1, 2, 3, 4, 5, 0, 7]).is_err());
    let mut hostname_addr = vec![];
    hostname_addr.extend_from_slice(&good[4..]);
    hostname_addr.extend_from_slice(&good[4..]);
    assert!(ConnectedUdp::parse(&hostname_addr).is_err());
    assert_eq!(RelayCmd::DATAGRAM.name(), "DATAGRAM");
    assert!(RelayCmd::DATAGRAM.counts_for_flow_control());
}
