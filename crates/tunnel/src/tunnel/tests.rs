#![allow(clippy::unwrap_used)]

use std::time::Duration;

use onionmix_cell::relay::end_reason;

use super::*;
use crate::dns::wire;
use crate::flows::{FlowAction, Isolation};
use crate::packet::{Mode, parse_ip, tcp_flags, udp_packet};
use crate::testutil::{sa, tcp_pkt};

const APP: &str = "10.0.0.2:5353";
const RESOLVER: &str = "198.18.0.1:53";

fn tunnel(isolation: Isolation, dns: DnsMode) -> Tunnel {
    let mut cfg = TunnelConfig::default();
    cfg.flows.isolation = isolation;
    cfg.dns = dns;
    Tunnel::new(cfg)
}

/// Ask the tunnel's resolver for `name` (A) over UDP; the address.
fn resolve(t: &mut Tunnel, now: Instant, name: &str) -> IpAddr {
    let q = wire::build_query(77, name, wire::TYPE_A).unwrap();
    let mut p = udp_packet(sa(APP), sa(RESOLVER), &q, 64).unwrap();
    let Output::Reply(r) = t.on_packet(now, None, &mut p) else {
        panic!()
    };
    let ip = parse_ip(&r).unwrap();
    assert_eq!((ip.src, ip.dst), (sa(RESOLVER).ip(), sa(APP).ip()));
    let addrs = wire::parse_answer(&r[ip.l4 + 8..], 77).unwrap();
    assert_eq!(addrs.len(), 1);
    addrs[0]
}

fn syn_to(t: &mut Tunnel, now: Instant, sport: u16, dst: SocketAddr) -> Output {
    let mut p = tcp_pkt(
        SocketAddr::new(sa(APP).ip(), sport),
        dst,
        tcp_flags::SYN,
        5,
        b"",
    );
    t.on_packet(now, Some(1), &mut p)
}

#[test]
fn name_travels_in_begin_and_the_flow_keeps_the_mapping() {
    let now = Instant::now();
    let mut t = tunnel(Isolation::PerDestination, DnsMode::Optimistic);
    let ip = resolve(&mut t, now, "example.com");
    assert_ne!(
        ip,
        sa(RESOLVER).ip(),
        "the resolver's address is never handed out"
    );
    let Output::OpenStream { id, target, .. } =
        syn_to(&mut t, now, 40000, SocketAddr::new(ip, 443))
    else {
        panic!()
    };
    assert_eq!(target, Target::Host("example.com".into(), 443));
    // A stray ACK before CONNECTED waits (the stack has not seen the SYN).
    let mut early = tcp_pkt(
        sa("10.0.0.2:40000"),
        SocketAddr::new(ip, 443),
        tcp_flags::ACK,
        6,
        b"",
    );
    assert_eq!(t.on_packet(now, None, &mut early), Output::None);
    // The SYN retransmitted before CONNECTED: nothing new.
    assert_eq!(
        syn_to(
            &mut t,
            now + Duration::from_secs(1),
            40000,
            SocketAddr::new(ip, 443)
        ),
        Output::None
    );
    t.on_flow(now, id, FlowEvent::BeginSent).unwrap();
    let step = t.on_flow(now, id, FlowEvent::Connected).unwrap();
    assert!(matches!(step.action, FlowAction::AcceptSyn(_)));
    // Data on the flow goes to the stack.
    let mut d = tcp_pkt(
        sa("10.0.0.2:40000"),
        SocketAddr::new(ip, 443),
        tcp_flags::ACK,
        6,
        b"GET /",
    );
    assert_eq!(t.on_packet(now, None, &mut d), Output::ToStack);
    // Long past the purge time, the open flow keeps the mapping.
    let later = now + Duration::from_secs(600);
    t.expire(later);
    assert_eq!(t.mapping().name_of(later, ip), Some("example.com"));
    t.on_flow(later, id, FlowEvent::End(end_reason::DONE))
        .unwrap();
    t.on_flow(later, id, FlowEvent::AppFin).unwrap();
    assert!(t.flows().is_empty());
    // Purged 70 s after the flow ended.
    assert_eq!(
        t.mapping().name_of(later + Duration::from_secs(69), ip),
        Some("example.com")
    );
    t.expire(later + Duration::from_secs(70));
    assert_eq!(
        t.mapping().name_of(later + Duration::from_secs(70), ip),
        None
    );
    // A SYN to it now is refused (fail closed).
    let Output::Reply(icmp) = syn_to(
        &mut t,
        later + Duration::from_secs(71),
        40001,
        SocketAddr::new(ip, 443),
    ) else {
        panic!()
    };
    let i = parse_ip(&icmp).unwrap();
    assert_eq!((icmp[i.l4], icmp[i.l4 + 1]), (3, 1), "host unreachable");
    assert_eq!(t.counters().drops(DropReason::UnknownSynthetic), 1);
    let c = t.counters();
    assert_eq!(
        (c.flows_opened, c.flows_connected, c.dns_mappings),
        (1, 1, 1)
    );
}

#[test]
fn rst_for_a_closed_port() {
    let now = Instant::now();
    let mut t = tunnel(Isolation::PerDestination, DnsMode::Optimistic);
    let Output::OpenStream { id, target, .. } = syn_to(&mut t, now, 40000, sa("93.184.215.14:81"))
    else {
        panic!()
    };
    assert_eq!(target, Target::Addr(sa("93.184.215.14:81")));
    t.on_flow(now, id, FlowEvent::BeginSent).unwrap();
    let step = t
        .on_flow(now, id, FlowEvent::End(end_reason::CONNECTREFUSED))
        .unwrap();
    let FlowAction::Refuse(rst) = step.action else {
        panic!()
    };
    let ip = parse_ip(&rst).unwrap();
    assert_eq!(rst[ip.l4 + 13], tcp_flags::RST | tcp_flags::ACK);
    assert_eq!(t.counters().flows_refused, 1);
}

#[test]
fn application_gives_up_while_connecting() {
    let now = Instant::now();
    let mut t = tunnel(Isolation::PerDestination, DnsMode::Optimistic);
    let ip = resolve(&mut t, now, "example.com");
    let dst = SocketAddr::new(ip, 443);
    let Output::OpenStream { id, .. } = syn_to(&mut t, now, 40000, dst) else {
        panic!()
    };
    t.on_flow(now, id, FlowEvent::BeginSent).unwrap();
    let mut rst = tcp_pkt(sa("10.0.0.2:40000"), dst, tcp_flags::RST, 6, b"");
    let Output::Flow { id: got, step } = t.on_packet(now, None, &mut rst) else {
        panic!()
    };
    assert_eq!(got, id);
    assert_eq!(step.action, FlowAction::SendEnd(end_reason::DONE));
    assert!(t.flows().is_empty());
    // The mapping's hold is released: purged 70 s later.
    t.expire(now + Duration::from_secs(70));
    assert_eq!(t.mapping().name_of(now + Duration::from_secs(70), ip), None);
}

#[test]
fn per_flow_isolation() {
    let now = Instant::now();
    for (iso, shared) in [
        (Isolation::PerFlow, false),
        (Isolation::PerDestination, true),
        (Isolation::PerApp, true),
    ] {
        let mut t = tunnel(iso, DnsMode::Optimistic);
        let ip = resolve(&mut t, now, "example.com");
        let dst = SocketAddr::new(ip, 443);
        let Output::OpenStream { isolation: a, .. } = syn_to(&mut t, now, 40000, dst) else {
            panic!()
        };
        let Output::OpenStream { isolation: b, .. } = syn_to(&mut t, now, 40001, dst) else {
            panic!()
        };
        assert_eq!(a == b, shared, "{iso:?}");
    }
}

#[test]
fn stray_segments_and_fallback_dns() {
    let now = Instant::now();
    let mut t = tunnel(Isolation::PerDestination, DnsMode::Fallback);
    let mut ack = tcp_pkt(
        sa("10.0.0.2:40000"),
        sa("1.2.3.4:80"),
        tcp_flags::ACK,
        1,
        b"x",
    );
    assert_eq!(t.on_packet(now, None, &mut ack), Output::None);
    assert_eq!(t.counters().drops(DropReason::NoFlow), 1);
    let q = wire::build_query(9, "example.com", wire::TYPE_A).unwrap();
    let mut p = udp_packet(sa(APP), sa(RESOLVER), &q, 64).unwrap();
    let Output::Resolve {
        query,
        name,
        app,
        resolver,
    } = t.on_packet(now, None, &mut p)
    else {
        panic!()
    };
    assert_eq!(
        (name.as_str(), app, resolver),
        ("example.com", sa(APP), sa(RESOLVER))
    );
    let real: IpAddr = "93.184.215.14".parse().unwrap();
    let r = t
        .dns_resolved(&query, Some(&[real]), app, resolver)
        .unwrap();
    let ip = parse_ip(&r).unwrap();
    assert_eq!(wire::parse_answer(&r[ip.l4 + 8..], 9), Some(vec![real]));
    // .onion: mapped even in fallback mode.
    let onion = resolve(&mut t, now, &format!("{}.onion", "b".repeat(56)));
    assert!(t.mapping().is_synthetic(onion));
}

#[test]
fn modes_through_the_tunnel() {
    let now = Instant::now();
    let mut frag = tcp_pkt(
        sa("10.0.0.2:40000"),
        sa("1.2.3.4:80"),
        tcp_flags::SYN,
        1,
        b"",
    );
    frag[6] = 0x20;
    frag[10..12].fill(0);
    let s = crate::packet::checksum(&[&frag[..20]]);
    frag[10..12].copy_from_slice(&s.to_be_bytes());
    let mut t = tunnel(Isolation::PerDestination, DnsMode::Optimistic);
    assert_eq!(t.on_packet(now, None, &mut frag.clone()), Output::None);
    assert_eq!(t.counters().drops(DropReason::Fragment), 1);
    let mut cfg = TunnelConfig::default();
    cfg.policy.mode = Mode::Compatibility;
    let mut t = Tunnel::new(cfg);
    assert_eq!(t.on_packet(now, None, &mut frag), Output::ToStack);
    assert_eq!(t.counters().drops_total(), 0);
}

#[test]
fn ipv6_like_ipv4() {
    let now = Instant::now();
    let mut cfg = TunnelConfig::default();
    cfg.policy.resolver_v6 = Some("fd6f:6e69:6f6e:7475::1".parse().unwrap());
    let mut t = Tunnel::new(cfg);
    let app6 = sa("[fd6f:6e69:6f6e:7400::1]:5353");
    let res6 = sa("[fd6f:6e69:6f6e:7475::1]:53");
    let q = wire::build_query(5, "example.com", wire::TYPE_AAAA).unwrap();
    let mut p = udp_packet(app6, res6, &q, 64).unwrap();
    let Output::Reply(r) = t.on_packet(now, None, &mut p) else {
        panic!()
    };
    let ip = parse_ip(&r).unwrap();
    let addrs = wire::parse_answer(&r[ip.l4 + 8..], 5).unwrap();
    let IpAddr::V6(a) = addrs[0] else { panic!() };
    assert!(t.mapping().is_synthetic(IpAddr::V6(a)));
    assert_ne!(
        IpAddr::V6(a),
        res6.ip(),
        "the resolver's address is reserved"
    );
    let mut syn = tcp_pkt(
        sa("[fd6f:6e69:6f6e:7400::1]:40000"),
        SocketAddr::new(IpAddr::V6(a), 443),
        tcp_flags::SYN,
        1,
        b"",
    );
    let Output::OpenStream { target, .. } = t.on_packet(now, None, &mut syn) else {
        panic!()
    };
    assert_eq!(target, Target::Host("example.com".into(), 443));
    // The same name over A gets an IPv4 address of the same mapping.
    assert!(resolve(&mut t, now, "example.com").is_ipv4());
}

#[test]
fn udp_carried_refused_and_answered() {
    let now = Instant::now();
    let mut cfg = TunnelConfig::default();
    cfg.policy.carry_udp = true;
    let mut t = Tunnel::new(cfg);
    let ip = resolve(&mut t, now, "echo.example");
    let dst = SocketAddr::new(ip, 7);
    let mut p = udp_packet(sa(APP), dst, b"ping", 64).unwrap();
    let Output::UdpOpen { id, target, .. } = t.on_packet(now, Some(3), &mut p) else {
        panic!()
    };
    assert_eq!(target, Target::Host("echo.example".into(), 7));
    assert_eq!(t.udp_opened(now, id), vec![b"ping".to_vec()]);
    let mut p2 = udp_packet(sa(APP), dst, b"again", 64).unwrap();
    assert_eq!(
        t.on_packet(now, None, &mut p2),
        Output::UdpSend {
            id,
            payload: b"again".to_vec()
        }
    );
    // The answer comes from the synthetic address to the application.
    let back = t.udp_from_exit(now, id, b"pong").unwrap();
    let bi = parse_ip(&back).unwrap();
    assert_eq!((bi.src, bi.dst), (ip, sa(APP).ip()));
    assert!(back.ends_with(b"pong"));
    // The flow holds the mapping; once closed, the mapping is purged.
    t.expire(now + Duration::from_secs(600));
    assert!(
        t.mapping()
            .name_of(now + Duration::from_secs(600), ip)
            .is_some()
    );
    t.udp_closed(now + Duration::from_secs(600), id);
    t.expire(now + Duration::from_secs(670));
    assert!(
        t.mapping()
            .name_of(now + Duration::from_secs(670), ip)
            .is_none()
    );

    // A flow the network cannot carry (stock tor) gets port unreachable.
    let other = sa("192.0.2.9:4000");
    let mut q = udp_packet(sa(APP), other, b"x", 64).unwrap();
    let Output::UdpOpen { id, .. } = t.on_packet(now, None, &mut q) else {
        panic!()
    };
    let icmp = t.udp_failed(now, id).unwrap();
    let ii = parse_ip(&icmp).unwrap();
    assert_eq!((icmp[ii.l4], icmp[ii.l4 + 1]), (3, 3), "port unreachable");
    let mut q2 = udp_packet(sa(APP), other, b"y", 64).unwrap();
    assert!(matches!(t.on_packet(now, None, &mut q2), Output::Reply(_)));
    assert_eq!(t.counters().udp_flows_refused, 1);
    assert_eq!(t.counters().icmp_unreachable, 2);
    // UDP to a synthetic address nobody was given: host unreachable.
    let mut u = udp_packet(sa(APP), sa("198.18.200.1:9"), b"z", 64).unwrap();
    let Output::Reply(r) = t.on_packet(now, None, &mut u) else {
        panic!()
    };
    let ri = parse_ip(&r).unwrap();
    assert_eq!((r[ri.l4], r[ri.l4 + 1]), (3, 1));
    let st = t.status(now);
    assert_eq!((st.udp_flows, st.udp_flows_open), (1, 0));
}

proptest::proptest! {
    #[test]
    fn arbitrary_packets_never_panic(packets in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120), 1..8)) {
        let now = Instant::now();
        let mut t = tunnel(Isolation::PerFlow, DnsMode::Optimistic);
        for mut p in packets {
            if let Some(b) = p.first_mut() {
                *b = 0x45;
            }
            let _ = t.on_packet(now, None, &mut p);
        }
    }
}
