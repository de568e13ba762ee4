//! crates/emu: IP header validation and the packet scheduler it feeds.

use std::net::IpAddr;
use std::sync::OnceLock;

use onionmix_emu::engine::{Engine, Ingress, Limits};
use onionmix_emu::named_profile;
use onionmix_emu::packet;
use onionmix_emu::profile::{NodeSpec, ProfileRef, Resolved, Topology};

use crate::input::Input;

/// Three nodes with Wi-Fi access links and a lossy, jittery core: every
/// impairment path of the scheduler is live.
fn topology() -> &'static Resolved {
    static R: OnceLock<Resolved> = OnceLock::new();
    R.get_or_init(|| {
        let core = named_profile("wifi-busy").expect("built-in profile");
        let mut t = Topology::uniform(&["a", "b", "c"], core, 11);
        for n in &mut t.nodes {
            *n = NodeSpec {
                uplink: Some(ProfileRef::Named("wifi".into())),
                downlink: Some(ProfileRef::Named("4g-down".into())),
                ..NodeSpec::new(n.name.clone())
            };
        }
        t.resolve().expect("the fixed topology resolves")
    })
}

/// Build this module's fixture.
pub(crate) fn warm_up() {
    let _ = topology();
}

/// Packets read from the nodes' TUN devices, in virtual time: the header
/// check (`packet::parse`) and then the scheduler (`Engine`) with small
/// limits. Each operation: time passing, then a packet from an endpoint
/// (flag bit 0: overwrite the IPv4 source and destination with real
/// endpoint addresses so the packet gets past the address checks). The
/// scheduler must deliver only what it accepted, unchanged, to the
/// endpoint the header names, never before it arrived, and account every
/// byte.
pub fn emu_packet(data: &[u8]) {
    let _ = packet::parse(data);
    let mut inp = Input::new(data);
    let limits = Limits {
        max_inflight_bytes: 64 * 1024,
        max_inflight_packets: 64,
        max_links: 8,
        max_packet: 2048,
        pool_buffers: 8,
    };
    let mut e = Engine::new(topology().clone(), true, limits);
    let n_ep = e.endpoints().len();
    let addrs: Vec<IpAddr> = e.endpoints().iter().map(|p| p.address).collect();
    let mut now: u64 = 0;
    let mut accepted: u64 = 0;
    let mut delivered: u64 = 0;
    while !inp.is_empty() {
        let flags = inp.u8();
        now = now.saturating_add(u64::from(inp.u16()) * 1_000_000);
        let from = usize::from(flags >> 4) % (n_ep + 1);
        let mut pkt = inp.chunk().to_vec();
        if flags & 1 == 1 && pkt.len() >= 20 {
            let dst = usize::from((flags >> 1) & 7) % n_ep;
            if let (Some(IpAddr::V4(s)), IpAddr::V4(d)) = (addrs.get(from), addrs[dst]) {
                pkt[12..16].copy_from_slice(&s.octets());
                pkt[16..20].copy_from_slice(&d.octets());
            }
        }
        let parsed = packet::parse(&pkt);
        match e.ingress(now, from, &pkt) {
            Ingress::Accepted => {
                accepted += 1;
                assert!(parsed.is_ok(), "accepted a packet the parser refuses");
            }
            Ingress::Malformed(_) => assert!(parsed.is_err()),
            _ => {}
        }
        while let Some(d) = e.poll_output(now) {
            delivered += 1;
            assert!(d.due <= now);
            let a = packet::parse(&d.pkt).expect("delivered packets parse");
            assert_eq!(
                addrs.get(d.dst),
                Some(&a.dst),
                "delivered to the wrong node"
            );
            e.recycle(d.pkt);
        }
        if let Some(t) = e.next_deadline() {
            let _ = t;
        }
    }
    // Drain: everything accepted is delivered or dropped by a link.
    while let Some(d) = e.poll_output(u64::MAX) {
        delivered += 1;
        e.recycle(d.pkt);
    }
    assert!(delivered <= accepted);
    assert_eq!(e.inflight_bytes(), 0, "bytes left in flight");
    let _ = e.global();
    let _ = e.links().count();
}
