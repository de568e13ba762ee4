//! Seeds for the node, emu and testbed targets (parsers of the drivers and tools).

use std::net::Ipv4Addr;

use super::{Seed, chunk};

pub(super) fn node(out: &mut Vec<Seed>) {
    let q = onionmix_node::relay::dns::query(0x4242, "sink.onionmix.test", 1).expect("query");
    let a = onionmix_testbed::sink::dns_answer(&q, Ipv4Addr::new(10, 9, 8, 7)).expect("answer");
    out.push(("exit_dns", "answer-a".into(), a.clone()));
    let q6 = onionmix_node::relay::dns::query(0x4343, "example.com", 28).expect("query");
    let mut a6 = q6.clone();
    a6[2] = 0x81;
    a6[3] = 0x80;
    a6[7] = 1;
    a6.extend([0xc0, 0x0c, 0, 28, 0, 1, 0, 0, 0, 60, 0, 16]);
    a6.extend([0x20, 1, 0x0d, 0xb8].iter().chain(&[0; 11]).chain(&[1]));
    out.push(("exit_dns", "answer-aaaa".into(), a6));
    out.push(("exit_dns", "name".into(), b"Sink.OnionMix.Test.".to_vec()));
    out.push(("sink_dns", "query-a".into(), q));
    out.push(("sink_dns", "query-aaaa".into(), q6));
    out.push((
        "sink_dns",
        "name".into(),
        b"a.b.sink.onionmix.test".to_vec(),
    ));
    for (name, p) in [
        ("summary-accept", "accept 80,443,6660-6669"),
        ("summary-reject", "reject 25,119,135-139,445"),
        (
            "policy",
            "reject 0.0.0.0/8:*\naccept 127.0.0.0/8:*\naccept *:80-81\naccept6 [2001:db8::]/32:443\nreject *4:*\nreject *:*",
        ),
        ("policy-v6", "accept [::1]:22\naccept *6:443\nreject *:*"),
    ] {
        out.push(("exit_policy", name.into(), p.as_bytes().to_vec()));
    }
}

pub(super) fn emu(out: &mut Vec<Seed>) {
    // Flags: bit 0 fix addresses, bits 1-3 destination, bits 4-7 source.
    let udp = |len: usize| {
        let total = 20 + 8 + len;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[8] = 64;
        p[9] = 17;
        p
    };
    let mut ops = Vec::new();
    for (from, to, len, dt) in [
        (0u8, 1u8, 100usize, 0u16),
        (1, 2, 1400, 1),
        (2, 0, 60, 5),
        (0, 3, 500, 0),
        (3, 1, 40, 100),
    ] {
        ops.push((from << 4) | (to << 1) | 1);
        ops.extend(dt.to_be_bytes());
        ops.extend(chunk(&udp(len)));
    }
    let mut v6 = vec![0u8; 48];
    v6[0] = 0x60;
    v6[5] = 8;
    ops.extend([0x10, 0, 1]);
    ops.extend(chunk(&v6));
    out.push(("emu_packet", "flows".into(), ops));
}

pub(super) fn testbed(out: &mut Vec<Seed>) {
    for (name, l) in [
        (
            "built",
            "650 CIRC 5 BUILT $73EB8750A9DB5F6931BD2734F577C69D33FC92EC~auth1,$51E3600DA3BF9282F08D887F8DABA637C5083153~auth2 BUILD_FLAGS=NEED_CAPACITY PURPOSE=GENERAL TIME_CREATED=2026-11-22T13:44:20.123456",
        ),
        (
            "launched",
            "650 CIRC 6 LAUNCHED BUILD_FLAGS=ONEHOP_TUNNEL,IS_INTERNAL,NEED_CAPACITY PURPOSE=GENERAL TIME_CREATED=2026-11-22T13:44:21",
        ),
        ("time", "2026-02-28T23:59:59.999999999"),
    ] {
        out.push(("torctl_event", name.into(), l.as_bytes().to_vec()));
    }
}

pub(super) fn tunnel(out: &mut Vec<Seed>) {
    use onionmix_tunnel::dns::wire;
    use onionmix_tunnel::packet::udp_packet;

    use crate::tunnel::flags as fl;
    let sa = |s: &str| s.parse::<std::net::SocketAddr>().expect("address");
    let (app, resolver) = (sa("10.0.0.2:5353"), sa("198.18.0.1:53"));
    let qa = wire::build_query(0x0101, "example.com", wire::TYPE_A).expect("query");
    let qaaaa = wire::build_query(0x0202, "example.com", wire::TYPE_AAAA).expect("query");
    let qonion = wire::build_query(0x0303, &format!("{}.onion", "a".repeat(56)), wire::TYPE_A)
        .expect("query");
    let qmx = wire::build_query(0x0404, "example.com", 15).expect("query");
    for (name, q) in [
        ("a", &qa),
        ("aaaa", &qaaaa),
        ("onion", &qonion),
        ("mx", &qmx),
    ] {
        out.push(("tunnel_dns", name.into(), q.clone()));
    }
    // An IPv4 TCP SYN to the first synthetic address handed out
    // (198.18.0.2: .1 is the resolver), port 443; lengths and header
    // checksum fixed by the target's flag.
    let syn_v4 = |dst: [u8; 4], port: u16| {
        let mut p = vec![0x45, 0, 0, 40, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 2];
        p.extend(dst);
        p.extend(40000u16.to_be_bytes());
        p.extend(port.to_be_bytes());
        p.extend([0, 0, 0, 1, 0, 0, 0, 0, 0x50, 0x02, 0xff, 0xff, 0, 0, 0, 0]);
        p
    };
    let dns = udp_packet(app, resolver, &qa, 64).expect("udp");
    let other_udp = udp_packet(app, sa("1.2.3.4:443"), b"quic", 64).expect("udp");
    let mut v6 = udp_packet(
        sa("[fd00::2]:5353"),
        sa("[fd6f:6e69:6f6e:7475::1]:53"),
        &qaaaa,
        64,
    )
    .expect("udp");
    v6[1] = 0x12;
    let mut frag = syn_v4([1, 2, 3, 4], 80);
    frag[6] = 0x20;
    // DNS, then a SYN to the name's address that connects (event byte 3),
    // a SYN to a port that refuses (END CONNECTREFUSED: 3 << 2 | 1).
    let mut seq = vec![fl::FIX_V4];
    seq.extend(chunk(&dns));
    seq.extend(chunk(&syn_v4([198, 18, 0, 2], 443)));
    seq.push(3);
    seq.extend(chunk(&syn_v4([1, 2, 3, 4], 81)));
    seq.push((3 << 2) | 1);
    out.push(("tunnel_packet", "dns-syn-connect-refuse".into(), seq));
    for (name, f, p) in [
        ("udp-other", fl::FIX_V4, other_udp),
        ("dns-v6", 0, v6),
        ("fragment-anonymity", fl::FIX_V4, frag.clone()),
        ("fragment-compat", fl::FIX_V4 | fl::COMPAT, frag),
        ("dns-fallback", fl::FIX_V4 | fl::FALLBACK, dns),
    ] {
        let mut s = vec![f];
        s.extend(chunk(&p));
        out.push(("tunnel_packet", name.into(), s));
    }
}
