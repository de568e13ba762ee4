//! crates/tunnel: IP packets from applications through the tunnel's
//! sans-IO core (packet policy, resolver, mappings, flows), and DNS
//! datagrams to its resolver.

use std::time::{Duration, Instant};

use onionmix_tunnel::dns::{self, DnsAction, DnsMode, wire};
use onionmix_tunnel::flows::{FlowEvent, Isolation, Target};
use onionmix_tunnel::mapping::{MappingConfig, MappingTable};
use onionmix_tunnel::packet::{self, Mode, UdpPolicy, parse_ip};
use onionmix_tunnel::{Counters, Output, Tunnel, TunnelConfig};

/// Flags in the first byte of a `tunnel_packet` input.
pub mod flags {
    /// Compatibility mode (else anonymity).
    pub const COMPAT: u8 = 1;
    /// Fallback DNS (else optimistic).
    pub const FALLBACK: u8 = 2;
    /// Drop other UDP (else ICMP port unreachable).
    pub const UDP_DROP: u8 = 4;
    /// Fix each IPv4 packet's total length and header checksum, and the
    /// TCP/UDP checksum of every packet, so the fuzzer gets past them.
    pub const FIX_V4: u8 = 8;
    /// Carry UDP (UDP flows; else the UDP policy).
    pub const CARRY_UDP: u8 = 16;
}

/// The next byte of the input (0 at its end).
fn take_byte(rest: &mut &[u8]) -> u8 {
    match rest.split_first() {
        Some((&b, r)) => {
            *rest = r;
            b
        }
        None => 0,
    }
}

/// Fix the total length and header checksum of an IPv4 packet, then the
/// TCP/UDP checksum of any well-formed packet.
pub fn fix_v4(p: &mut [u8]) {
    fix_v4_header(p);
    let _ = packet::fix_transport_checksum(p);
}

fn fix_v4_header(p: &mut [u8]) {
    if p.first().map(|b| b >> 4) != Some(4) {
        return;
    }
    let ihl = usize::from(p[0] & 0x0f) * 4;
    if ihl < 20 || ihl > p.len() {
        return;
    }
    if let Ok(total) = u16::try_from(p.len()) {
        p[2..4].copy_from_slice(&total.to_be_bytes());
    }
    p[10..12].fill(0);
    let sum = packet::checksum(&[&p[..ihl]]);
    p[10..12].copy_from_slice(&sum.to_be_bytes());
}

/// A sequence of packets (each behind a 2-byte length) through one
/// tunnel, after a flag byte ([`flags`]). The byte after each packet
/// drives the flow it may open (BEGIN sent, then CONNECTED or an END
/// reason, or for a UDP flow: opened, answered, ended, or refused).
/// Replies must be well-formed IP packets; flows to synthetic addresses
/// carry names; the tables stay within their bounds.
pub fn tunnel_packet(data: &[u8]) {
    let Some((&f, mut rest)) = data.split_first() else {
        return;
    };
    let mut cfg = TunnelConfig::default();
    if f & flags::COMPAT != 0 {
        cfg.policy.mode = Mode::Compatibility;
    }
    if f & flags::FALLBACK != 0 {
        cfg.dns = DnsMode::Fallback;
    }
    if f & flags::UDP_DROP != 0 {
        cfg.policy.udp = UdpPolicy::Drop;
    }
    cfg.policy.carry_udp = f & flags::CARRY_UDP != 0;
    cfg.udp.max_flows = 4;
    cfg.policy.resolver_v6 = "fd6f:6e69:6f6e:7475::1".parse().ok();
    cfg.flows.isolation = Isolation::PerFlow;
    cfg.flows.max_flows = 4;
    cfg.mapping.max_entries = 4;
    let mut t = Tunnel::new(cfg);
    let start = Instant::now();
    let mut now = start;
    while rest.len() >= 2 {
        let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
        let len = len.min(rest.len() - 2);
        let mut p = rest[2..2 + len].to_vec();
        rest = &rest[2 + len..];
        if f & flags::FIX_V4 != 0 {
            fix_v4(&mut p);
        }
        now += Duration::from_secs(7);
        let out = t.on_packet(now, Some(1), &mut p);
        match out {
            Output::Reply(r) => {
                parse_ip(&r).expect("the tunnel's own packets are well formed");
            }
            Output::OpenStream { id, target, .. } => {
                if let Target::Host(name, _) = &target {
                    assert!(!name.is_empty());
                }
                let ev = take_byte(&mut rest);
                if ev & 1 != 0 {
                    t.on_flow(now, id, FlowEvent::BeginSent)
                        .expect("BEGIN after SYN");
                    let next = if ev & 2 != 0 {
                        FlowEvent::Connected
                    } else {
                        FlowEvent::End(ev >> 2)
                    };
                    let step = t
                        .on_flow(now, id, next)
                        .expect("CONNECTED or END after BEGIN");
                    if let onionmix_tunnel::flows::FlowAction::Refuse(r) = step.action {
                        parse_ip(&r).expect("refusals are well formed");
                    }
                }
            }
            Output::UdpOpen { id, target, .. } => {
                if let Target::Host(name, _) = &target {
                    assert!(!name.is_empty());
                }
                let ev = take_byte(&mut rest);
                // Opened (and answered, and maybe ended) or refused.
                if ev & 1 != 0 {
                    let _ = t.udp_opened(now, id);
                    if let Some(r) = t.udp_from_exit(now, id, &rest[..rest.len().min(64)]) {
                        parse_ip(&r).expect("answers are well formed");
                    }
                    if ev & 2 != 0
                        && let Some(r) = t.udp_closed(now, id)
                    {
                        parse_ip(&r).expect("refusals are well formed");
                    }
                } else if let Some(r) = t.udp_failed(now, id) {
                    parse_ip(&r).expect("refusals are well formed");
                }
            }
            Output::ToStack
            | Output::Resolve { .. }
            | Output::Flow { .. }
            | Output::UdpSend { .. }
            | Output::None => {}
        }
        assert!(t.flows().len() <= 4);
        assert!(t.udp().len() <= 4);
        assert!(t.mapping().len(now) <= 4);
    }
    // Only open flows outlive their timeouts.
    t.expire(now + Duration::from_secs(3600));
    t.expire_udp(now + Duration::from_secs(3600));
    assert!(t.udp().is_empty(), "every UDP flow times out");
    let open = t.flows().len();
    assert!(open <= 4);
}

/// A DNS datagram to the resolver, asked twice (at 0 s and 30 s): an
/// answer is a response to the query's ID that the exit's parser reads,
/// every address in it is synthetic and maps back to the name asked, and
/// the second answer is the first.
pub fn tunnel_dns(data: &[u8]) {
    let mut table = MappingTable::new(MappingConfig {
        max_entries: 4,
        ..MappingConfig::default()
    });
    let mut c = Counters::default();
    let t0 = Instant::now();
    let mut answers = Vec::new();
    for now in [t0, t0 + Duration::from_secs(30)] {
        match dns::handle(&mut table, DnsMode::Optimistic, now, data, &mut c) {
            DnsAction::Reply(r) => {
                let q = wire::parse_query(data).ok();
                let id = u16::from_be_bytes([data[0], data[1]]);
                let addrs =
                    wire::parse_answer(&r, id).expect("the exit's parser reads our answers");
                for a in &addrs {
                    assert!(table.is_synthetic(*a));
                    let name = q
                        .as_ref()
                        .and_then(|q| q.hostname())
                        .expect("only names get addresses");
                    assert_eq!(table.name_of(now, *a), Some(name));
                }
                answers.push(addrs);
            }
            DnsAction::Drop => assert!(data.len() < wire::HEADER_LEN || data[2] & 0x80 != 0),
            DnsAction::Resolve { .. } => unreachable!("optimistic mode"),
        }
    }
    if let [a, b] = answers.as_slice() {
        assert_eq!(a, b, "asked again within the TTL: the same answer");
    }
    assert!(table.len(t0) <= 4);
}
