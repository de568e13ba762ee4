#![allow(clippy::unwrap_used)]

use super::build::{ip_header, l4_checksum};
use super::*;
use crate::testutil::{sa, tcp_pkt};

fn fix_v4_checksum(p: &mut [u8]) {
    let ihl = usize::from(p[0] & 0x0f) * 4;
    p[10..12].fill(0);
    let s = checksum(&[&p[..ihl]]);
    p[10..12].copy_from_slice(&s.to_be_bytes());
}

/// IPv4 with DSCP/ECN set and an odd TTL.
fn marked_v4(mut p: Vec<u8>) -> Vec<u8> {
    p[1] = 0xb9;
    p[8] = 3;
    fix_v4_checksum(&mut p);
    p
}

/// Insert `opt` (a multiple of 4 bytes) as IPv4 options.
fn with_v4_options(p: &[u8], opt: &[u8]) -> Vec<u8> {
    let mut q = p[..20].to_vec();
    q.extend_from_slice(opt);
    q.extend_from_slice(&p[20..]);
    q[0] = 0x40 | u8::try_from((20 + opt.len()) / 4).unwrap();
    let total = u16::try_from(q.len()).unwrap();
    q[2..4].copy_from_slice(&total.to_be_bytes());
    fix_v4_checksum(&mut q);
    q
}

/// Insert an IPv6 extension header of type `ty` (8 bytes) after the fixed
/// header.
fn with_v6_ext(p: &[u8], ty: u8, body: [u8; 6]) -> Vec<u8> {
    let mut q = p[..40].to_vec();
    let next = q[6];
    q[6] = ty;
    q.extend_from_slice(&[next, 0]);
    q.extend_from_slice(&body);
    q.extend_from_slice(&p[40..]);
    let len = u16::try_from(q.len() - 40).unwrap();
    q[4..6].copy_from_slice(&len.to_be_bytes());
    q
}

fn policy(mode: Mode) -> Policy {
    Policy {
        mode,
        resolver_v6: Some("fd6f:6e69:6f6e:7475::1".parse().unwrap()),
        ..Policy::default()
    }
}

#[test]
fn dns_to_the_resolver() {
    let mut c = Counters::default();
    let q = b"not really a query";
    for (src, dst) in [
        ("10.0.0.2:5353", "198.18.0.1:53"),
        ("[fd00::2]:5353", "[fd6f:6e69:6f6e:7475::1]:53"),
    ] {
        let mut p = udp_packet(sa(src), sa(dst), q, 64).unwrap();
        let v = inspect(&policy(Mode::Anonymity), &mut c, &mut p);
        let Verdict::Dns {
            src: s,
            dst: d,
            payload,
        } = v
        else {
            panic!("{v:?}")
        };
        assert_eq!((s, d), (sa(src), sa(dst)));
        assert_eq!(&p[payload], q);
    }
    // Port 53 elsewhere is other UDP.
    let mut p = udp_packet(sa("10.0.0.2:5353"), sa("9.9.9.9:53"), q, 64).unwrap();
    assert!(matches!(
        inspect(&policy(Mode::Anonymity), &mut c, &mut p),
        Verdict::Reply(_)
    ));
    assert_eq!(c.drops_total(), 0);
}

#[test]
fn other_udp_gets_port_unreachable_v4() {
    let mut c = Counters::default();
    let mut p = udp_packet(sa("10.0.0.2:40000"), sa("1.2.3.4:443"), b"quic?", 64).unwrap();
    let orig = p.clone();
    let Verdict::Reply(r) = inspect(&policy(Mode::Compatibility), &mut c, &mut p) else {
        panic!()
    };
    let ip = parse_ip(&r).unwrap();
    assert_eq!(
        (ip.src, ip.dst, ip.proto),
        (orig_dst(&orig), orig_src(&orig), proto::ICMP)
    );
    let icmp = &r[20..];
    assert_eq!((icmp[0], icmp[1]), (3, 3));
    assert_eq!(checksum(&[icmp]), 0, "ICMP checksum");
    assert_eq!(&icmp[8..], &orig[..], "the datagram quoted");
    assert_eq!(c.icmp_unreachable, 1);
    // Policy: drop.
    let pol = Policy {
        udp: UdpPolicy::Drop,
        ..policy(Mode::Anonymity)
    };
    assert_eq!(
        inspect(&pol, &mut c, &mut p),
        Verdict::Drop(DropReason::Udp)
    );
    assert_eq!(c.drops(DropReason::Udp), 1);
}

fn orig_src(p: &[u8]) -> IpAddr {
    parse_ip(p).unwrap().src
}
fn orig_dst(p: &[u8]) -> IpAddr {
    parse_ip(p).unwrap().dst
}

#[test]
fn other_udp_gets_port_unreachable_v6() {
    let mut c = Counters::default();
    let big = vec![7u8; 1400];
    let mut p = udp_packet(sa("[fd00::2]:40000"), sa("[2001:db8::1]:443"), &big, 64).unwrap();
    let Verdict::Reply(r) = inspect(&policy(Mode::Anonymity), &mut c, &mut p) else {
        panic!()
    };
    assert!(r.len() <= 1280, "fits the minimum MTU");
    let ip = parse_ip(&r).unwrap();
    assert_eq!(ip.proto, proto::ICMPV6);
    assert_eq!(ip.src, "2001:db8::1".parse::<IpAddr>().unwrap());
    let m = &r[40..];
    assert_eq!((m[0], m[1]), (1, 4));
    assert_eq!(l4_checksum(ip.src, ip.dst, proto::ICMPV6, m), Some(0));
    assert_eq!(&m[8..48], &p[..40]);
}

#[test]
fn anonymity_normalizes_v4() {
    let mut c = Counters::default();
    let mut p = marked_v4(tcp_pkt(
        sa("10.0.0.2:40000"),
        sa("1.2.3.4:80"),
        tcp_flags::SYN,
        7,
        b"",
    ));
    let v = inspect(&policy(Mode::Anonymity), &mut c, &mut p);
    let Verdict::Tcp(t) = v else { panic!("{v:?}") };
    assert!(t.is_syn());
    assert_eq!(
        (t.src, t.dst, t.seq),
        (sa("10.0.0.2:40000"), sa("1.2.3.4:80"), 7)
    );
    assert_eq!((p[1], p[8]), (0, 64));
    assert_eq!(checksum(&[&p[..20]]), 0, "header checksum fixed");
    // Compatibility leaves them.
    let mut p = marked_v4(tcp_pkt(
        sa("10.0.0.2:40000"),
        sa("1.2.3.4:80"),
        tcp_flags::SYN,
        7,
        b"",
    ));
    let before = p.clone();
    assert!(matches!(
        inspect(&policy(Mode::Compatibility), &mut c, &mut p),
        Verdict::Tcp(_)
    ));
    assert_eq!(p, before);
}

#[test]
fn anonymity_normalizes_v6() {
    let mut c = Counters::default();
    let mut p = tcp_pkt(
        sa("[fd00::2]:40000"),
        sa("[2001:db8::1]:80"),
        tcp_flags::SYN,
        1,
        b"",
    );
    p[0..4].copy_from_slice(&[0x6b, 0x8f, 0x12, 0x34]);
    p[7] = 9;
    let mut compat = p.clone();
    assert!(matches!(
        inspect(&policy(Mode::Anonymity), &mut c, &mut p),
        Verdict::Tcp(_)
    ));
    assert_eq!(&p[..4], &[0x60, 0, 0, 0]);
    assert_eq!(p[7], 64);
    let before = compat.clone();
    assert!(matches!(
        inspect(&policy(Mode::Compatibility), &mut c, &mut compat),
        Verdict::Tcp(_)
    ));
    assert_eq!(compat, before);
}

#[test]
fn fragments_per_mode() {
    let base = tcp_pkt(
        sa("10.0.0.2:40000"),
        sa("1.2.3.4:80"),
        tcp_flags::ACK,
        1,
        b"data",
    );
    for (flags_off, what) in [(0x2000u16, "first"), (0x0010, "later"), (0x2010, "middle")] {
        let mut p = base.clone();
        p[6..8].copy_from_slice(&flags_off.to_be_bytes());
        fix_v4_checksum(&mut p);
        let mut c = Counters::default();
        let mut q = p.clone();
        assert_eq!(
            inspect(&policy(Mode::Anonymity), &mut c, &mut q),
            Verdict::Drop(DropReason::Fragment),
            "{what}"
        );
        assert_eq!(c.drops(DropReason::Fragment), 1);
        assert_eq!(
            inspect(&policy(Mode::Compatibility), &mut c, &mut p),
            Verdict::Reassemble,
            "{what}"
        );
    }
    // DF alone is no fragment.
    let mut p = base.clone();
    p[6] = 0x40;
    fix_v4_checksum(&mut p);
    assert!(matches!(
        inspect(&policy(Mode::Anonymity), &mut Counters::default(), &mut p),
        Verdict::Tcp(_)
    ));

    // IPv6 fragment header: offset 0 with M set.
    let v6 = tcp_pkt(
        sa("[fd00::2]:40000"),
        sa("[2001:db8::1]:80"),
        tcp_flags::ACK,
        1,
        b"data",
    );
    let mut f = with_v6_ext(&v6, 44, [0, 1, 0, 0, 0, 9]);
    let mut c = Counters::default();
    assert_eq!(
        inspect(&policy(Mode::Anonymity), &mut c, &mut f.clone()),
        Verdict::Drop(DropReason::Fragment)
    );
    assert_eq!(
        inspect(&policy(Mode::Compatibility), &mut c, &mut f),
        Verdict::Reassemble
    );
    // An atomic fragment: an extension header, no fragment.
    let mut a = with_v6_ext(&v6, 44, [0, 0, 0, 0, 0, 9]);
    assert_eq!(
        inspect(&policy(Mode::Anonymity), &mut c, &mut a.clone()),
        Verdict::Drop(DropReason::Ipv6Extension)
    );
    assert!(matches!(
        inspect(&policy(Mode::Compatibility), &mut c, &mut a),
        Verdict::Tcp(_)
    ));
}

#[test]
fn options_and_extensions_per_mode() {
    let base = tcp_pkt(
        sa("10.0.0.2:40000"),
        sa("1.2.3.4:80"),
        tcp_flags::SYN,
        1,
        b"",
    );
    // Record route, padded with end-of-options.
    let mut p = with_v4_options(&base, &[7, 3, 4, 0]);
    let mut c = Counters::default();
    assert_eq!(
        inspect(&policy(Mode::Anonymity), &mut c, &mut p.clone()),
        Verdict::Drop(DropReason::Ipv4Options)
    );
    let Verdict::Tcp(t) = inspect(&policy(Mode::Compatibility), &mut c, &mut p) else {
        panic!()
    };
    assert_eq!(t.dst, sa("1.2.3.4:80"), "ports read past the options");

    let v6 = tcp_pkt(
        sa("[fd00::2]:40000"),
        sa("[2001:db8::1]:80"),
        tcp_flags::SYN,
        1,
        b"",
    );
    for ty in [0u8, 60, 43] {
        let mut e = with_v6_ext(&v6, ty, [1, 4, 0, 0, 0, 0]);
        assert_eq!(
            inspect(&policy(Mode::Anonymity), &mut c, &mut e.clone()),
            Verdict::Drop(DropReason::Ipv6Extension)
        );
        let Verdict::Tcp(t) = inspect(&policy(Mode::Compatibility), &mut c, &mut e) else {
            panic!()
        };
        assert_eq!(t.dst, sa("[2001:db8::1]:80"));
    }
    assert_eq!(c.drops(DropReason::Ipv6Extension), 3);
}

#[test]
fn malformed_and_refused() {
    let pol = policy(Mode::Anonymity);
    let mut c = Counters::default();
    let good = tcp_pkt(
        sa("10.0.0.2:40000"),
        sa("1.2.3.4:80"),
        tcp_flags::SYN,
        1,
        b"x",
    );
    let mut cases: Vec<Vec<u8>> = vec![
        vec![],
        vec![0x45],
        good[..19].to_vec(),
        good[..good.len() - 1].to_vec(),
        [good.clone(), vec![0]].concat(),
    ];
    let mut bad_sum = good.clone();
    bad_sum[10] ^= 1;
    cases.push(bad_sum);
    let mut bad_version = good.clone();
    bad_version[0] = 0x55;
    cases.push(bad_version);
    let mut short_ihl = good.clone();
    short_ihl[0] = 0x44;
    cases.push(short_ihl);
    let mut bad_tcp_sum = good.clone();
    *bad_tcp_sum.last_mut().unwrap() ^= 1;
    cases.push(bad_tcp_sum);
    let mut bad_udp_sum = udp_packet(sa("10.0.0.2:5353"), sa("198.18.0.1:53"), b"q", 64).unwrap();
    *bad_udp_sum.last_mut().unwrap() ^= 1;
    cases.push(bad_udp_sum.clone());
    // IPv4 UDP without a checksum (0) is accepted.
    bad_udp_sum[26..28].fill(0);
    assert!(matches!(
        inspect(&pol, &mut c, &mut bad_udp_sum),
        Verdict::Dns { .. }
    ));
    let mut bad_doff = good.clone();
    bad_doff[32] = 0xf0;
    assert_eq!(fix_transport_checksum(&mut bad_doff), Some(()));
    cases.push(bad_doff);
    let n = cases.len();
    for mut p in cases {
        assert_eq!(
            inspect(&pol, &mut c, &mut p),
            Verdict::Drop(DropReason::Malformed),
            "{p:?}"
        );
    }
    assert_eq!(c.drops(DropReason::Malformed), u64::try_from(n).unwrap());

    let mut mc = udp_packet(sa("10.0.0.2:5353"), sa("224.0.0.251:5353"), b"mdns", 1).unwrap();
    assert_eq!(
        inspect(&pol, &mut c, &mut mc),
        Verdict::Drop(DropReason::Address)
    );
    let mut mc6 = udp_packet(sa("[fe80::2]:5353"), sa("[ff02::fb]:5353"), b"mdns", 1).unwrap();
    assert_eq!(
        inspect(&pol, &mut c, &mut mc6),
        Verdict::Drop(DropReason::Address)
    );

    // ICMP echo: not carried.
    let mut echo = ip_header(
        "10.0.0.2".parse().unwrap(),
        "1.2.3.4".parse().unwrap(),
        proto::ICMP,
        8,
        64,
    )
    .unwrap();
    echo.extend_from_slice(&[8, 0, 0xf7, 0xff, 0, 0, 0, 0]);
    assert_eq!(
        inspect(&pol, &mut c, &mut echo),
        Verdict::Drop(DropReason::Protocol)
    );
    assert!(
        icmp_unreachable(&echo, Unreachable::Port, 64).is_none(),
        "no errors about errors"
    );
}

#[test]
fn rst_refuses_a_syn() {
    for (src, dst) in [
        ("10.0.0.2:40000", "1.2.3.4:80"),
        ("[fd00::2]:40000", "[2001:db8::1]:80"),
    ] {
        let syn = tcp_pkt(sa(src), sa(dst), tcp_flags::SYN, 0xffff_ffff, b"");
        let rst = tcp_rst_for_syn(&syn, 64).unwrap();
        let ip = parse_ip(&rst).unwrap();
        assert_eq!(
            (ip.src, ip.dst, ip.proto),
            (sa(dst).ip(), sa(src).ip(), proto::TCP)
        );
        let t = &rst[ip.l4..];
        assert_eq!(be16(t, 0), Some(sa(dst).port()));
        assert_eq!(be16(t, 2), Some(sa(src).port()));
        assert_eq!(be32(t, 4), Some(0));
        assert_eq!(be32(t, 8), Some(0), "acknowledges the SYN (wrapping)");
        assert_eq!(t[13], tcp_flags::RST | tcp_flags::ACK);
        assert_eq!(l4_checksum(ip.src, ip.dst, proto::TCP, t), Some(0));
        if ip.src.is_ipv4() {
            assert_eq!(checksum(&[&rst[..20]]), 0);
        }
        // Only for a SYN.
        let ack = tcp_pkt(sa(src), sa(dst), tcp_flags::ACK, 1, b"");
        assert!(tcp_rst_for_syn(&ack, 64).is_none());
    }
}

#[test]
fn checksum_vectors() {
    // RFC 1071 §3's example bytes: sum 0xddf2, checksum 0x220d.
    assert_eq!(
        checksum(&[&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7]]),
        0x220d
    );
    // Split across parts at an odd offset: same result.
    assert_eq!(
        checksum(&[&[0x00, 0x01, 0xf2], &[0x03, 0xf4, 0xf5, 0xf6, 0xf7]]),
        0x220d
    );
}

proptest::proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(mut data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200), v6 in proptest::prelude::any::<bool>(), compat in proptest::prelude::any::<bool>()) {
        // Make half the inputs get past the version check.
        if let Some(b) = data.first_mut() {
            *b = (*b & 0x0f) | if v6 { 0x60 } else { 0x45 };
        }
        let mode = if compat { Mode::Compatibility } else { Mode::Anonymity };
        let mut c = Counters::default();
        let _ = inspect(&policy(mode), &mut c, &mut data);
        let _ = tcp_rst_for_syn(&data, 64);
        let _ = icmp_unreachable(&data, Unreachable::Host, 64);
    }

    #[test]
    fn well_formed_headers_with_arbitrary_tails(tail in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80), flags in proptest::prelude::any::<u8>()) {
        let mut p = tcp_pkt(sa("10.0.0.2:40000"), sa("1.2.3.4:80"), flags, 1, &tail);
        let mut c = Counters::default();
        let _ = inspect(&policy(Mode::Anonymity), &mut c, &mut p);
        let mut q = tcp_pkt(sa("[fd00::2]:40000"), sa("[2001:db8::1]:80"), flags, 1, &tail);
        let _ = inspect(&policy(Mode::Compatibility), &mut c, &mut q);
    }
}
