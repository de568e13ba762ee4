//! Engine tests on a fake clock: delay, jitter, loss, rate, queues, shared links and limits.
use super::*;
use crate::packet::ipv4_udp;
use crate::profile::{
    GilbertElliott, JitterDist, LinkProfile, NodeSpec, ProfileRef, Reorder, Topology,
};
use std::net::Ipv4Addr;

const MS: Nanos = 1_000_000;

fn engine(t: Topology) -> Engine {
    Engine::new(t.resolve().expect("valid"), true, Limits::default())
}

fn addr(e: &Engine, i: EndpointId) -> Ipv4Addr {
    match e.endpoints()[i].address {
        IpAddr::V4(a) => a,
        IpAddr::V6(_) => unreachable!("tests use IPv4"),
    }
}

fn pkt(e: &Engine, from: EndpointId, to: EndpointId, len: usize) -> Vec<u8> {
    let mut p = ipv4_udp(addr(e, from), addr(e, to), len - 28);
    // Tag with a sequence-like payload so reordering can be seen.
    p.truncate(len);
    p
}

fn tag(p: &mut [u8], n: u32) {
    p[28..32].copy_from_slice(&n.to_be_bytes());
}

fn read_tag(p: &[u8]) -> u32 {
    match p.get(28..32) {
        Some(b) => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
        None => 0,
    }
}

/// Drain everything, returning (due time, tag) in delivery order.
fn drain(e: &mut Engine) -> Vec<(Nanos, u32)> {
    let mut out = Vec::new();
    while let Some(t) = e.next_deadline() {
        while let Some(d) = e.poll_output(t) {
            out.push((d.due, read_tag(&d.pkt)));
            e.recycle(d.pkt);
        }
    }
    out
}

#[test]
fn fixed_delay() {
    let mut e = engine(Topology::uniform(&["a", "b"], LinkProfile::delay(20.0), 1));
    let mut p = pkt(&e, 0, 1, 100);
    tag(&mut p, 7);
    assert_eq!(e.ingress(5 * MS, 0, &p), Ingress::Accepted);
    assert_eq!(e.next_deadline(), Some(25 * MS));
    assert!(e.poll_output(25 * MS - 1).is_none());
    let d = e.poll_output(25 * MS).expect("due");
    assert_eq!(d.dst, 1);
    assert_eq!(d.due, 25 * MS);
    assert_eq!(read_tag(&d.pkt), 7);
    let c = e.core_counters("a", "b").expect("link");
    assert_eq!((c.rx_packets, c.tx_packets), (1, 1));
    assert_eq!(
        (c.delay_min_us, c.delay_max_us),
        (Some(20_000), Some(20_000))
    );
    assert_eq!(c.queue_delay_max_us, 0);
}

#[test]
fn host_path_is_unimpaired() {
    let mut e = engine(Topology::uniform(&["a", "b"], LinkProfile::delay(20.0), 1));
    let host = e.host().expect("host");
    let p = pkt(&e, host, 1, 60);
    assert_eq!(e.ingress(MS, host, &p), Ingress::Accepted);
    let d = e.poll_output(MS).expect("immediate");
    assert_eq!(d.dst, 1);
    let p = pkt(&e, 0, host, 60);
    assert_eq!(e.ingress(2 * MS, 0, &p), Ingress::Accepted);
    assert_eq!(e.poll_output(2 * MS).expect("immediate").dst, host);
    assert_eq!(e.global().host_packets, 2);
}

#[test]
fn jitter_is_bounded_and_never_reorders() {
    for dist in [JitterDist::Uniform, JitterDist::Normal] {
        let prof = LinkProfile {
            delay_ms: 20.0,
            jitter_ms: 5.0,
            jitter_dist: dist,
            ..Default::default()
        };
        let mut e = engine(Topology::uniform(&["a", "b"], prof, 3));
        let mut sent = Vec::new();
        for i in 0..5000u32 {
            let t = u64::from(i) * 200_000; // 0.2 ms apart
            let mut p = pkt(&e, 0, 1, 64);
            tag(&mut p, i);
            e.ingress(t, 0, &p);
            sent.push(t);
        }
        let out = drain(&mut e);
        assert_eq!(out.len(), 5000);
        let mut below = 0;
        let mut sum = 0.0;
        for w in out.windows(2) {
            assert!(w[0].1 < w[1].1, "reordered: {:?}", w);
        }
        for (due, i) in &out {
            let d = due - sent[*i as usize];
            assert!((15 * MS..=25 * MS).contains(&d), "delay {d}");
            if d < 20 * MS {
                below += 1;
            }
            sum += d as f64;
        }
        // Not pushed to the top of the range: centred on the delay.
        let mean = sum / out.len() as f64;
        assert!((mean - 20e6).abs() < 1e6, "{dist:?}: mean {mean}");
        assert!(below > 1500, "{dist:?}: only {below} below the mean");
        let c = e.core_counters("a", "b").expect("link");
        assert_eq!(c.reordered, 0);
        // The link's own record of what it decided spans the range.
        let (lo, hi) = (c.delay_min_us.expect("min"), c.delay_max_us.expect("max"));
        assert!(lo >= 15_000 && hi <= 25_000, "{lo}..{hi}");
        assert!(hi - lo >= 5_000, "{dist:?}: jitter spread {lo}..{hi}");
    }
}

#[test]
fn reorder_only_when_asked() {
    let prof = LinkProfile {
        delay_ms: 10.0,
        reorder: Some(Reorder {
            probability: 0.05,
            extra_delay_ms: 3.0,
        }),
        ..Default::default()
    };
    let mut e = engine(Topology::uniform(&["a", "b"], prof, 3));
    for i in 0..2000u32 {
        let mut p = pkt(&e, 0, 1, 64);
        tag(&mut p, i);
        e.ingress(u64::from(i) * 100_000, 0, &p);
    }
    let out = drain(&mut e);
    let inversions = out.windows(2).filter(|w| w[0].1 > w[1].1).count();
    let c = e.core_counters("a", "b").expect("link");
    assert!(c.reordered > 50 && c.reordered < 150, "{}", c.reordered);
    assert!(inversions > 50, "{inversions}");
}

fn loss_run(seed: u64, p: f64, n: u32) -> Vec<u32> {
    let prof = LinkProfile {
        delay_ms: 1.0,
        loss: p,
        ..Default::default()
    };
    let mut e = engine(Topology::uniform(&["a", "b"], prof, seed));
    let mut got = vec![false; n as usize];
    for i in 0..n {
        let mut pk = pkt(&e, 0, 1, 64);
        tag(&mut pk, i);
        e.ingress(u64::from(i) * 10_000, 0, &pk);
    }
    for (_, i) in drain(&mut e) {
        got[i as usize] = true;
    }
    (0..n).filter(|i| !got[*i as usize]).collect()
}

#[test]
fn loss_rate_and_reproducibility() {
    let n = 100_000u32;
    for p in [0.005, 0.01, 0.05] {
        let lost = loss_run(11, p, n);
        let rate = lost.len() as f64 / f64::from(n);
        let sd = (p * (1.0 - p) / f64::from(n)).sqrt();
        assert!((rate - p).abs() < 2.576 * sd + 1e-9, "p={p} rate={rate}");
        assert_eq!(lost, loss_run(11, p, n), "same seed, same drops");
        assert_ne!(lost, loss_run(12, p, n), "other seed, other drops");
    }
}

#[test]
fn gilbert_elliott_bursts() {
    let ge = GilbertElliott {
        p: 0.002,
        r: 0.25,
        loss_good: 0.0,
        loss_bad: 1.0,
    };
    let prof = LinkProfile {
        gilbert_elliott: Some(ge),
        ..Default::default()
    };
    let mut e = engine(Topology::uniform(&["a", "b"], prof, 5));
    let n = 400_000u32;
    let mut got = vec![false; n as usize];
    for i in 0..n {
        let mut pk = pkt(&e, 0, 1, 64);
        tag(&mut pk, i);
        e.ingress(u64::from(i) * 1000, 0, &pk);
        while let Some(d) = e.poll_output(u64::from(i) * 1000) {
            got[read_tag(&d.pkt) as usize] = true;
            e.recycle(d.pkt);
        }
    }
    let lost = got.iter().filter(|g| !**g).count();
    let rate = lost as f64 / f64::from(n);
    let want = ge.mean_loss();
    assert!((rate - want).abs() < 0.2 * want, "rate {rate} want {want}");
    // Mean burst length ~ 1/r = 4.
    let mut bursts = 0;
    let mut prev = true;
    for g in &got {
        if !*g && prev {
            bursts += 1;
        }
        prev = *g;
    }
    let mean_burst = lost as f64 / f64::from(bursts);
    assert!((mean_burst - 4.0).abs() < 0.6, "mean burst {mean_burst}");
    let c = e.core_counters("a", "b").expect("link");
    assert_eq!(c.drop_burst as usize, lost);
}

#[test]
fn rate_and_queue_limit() {
    // 10 Mbit/s: a 1250-byte packet takes 1 ms.
    let prof = LinkProfile {
        rate_mbit: Some(10.0),
        burst_bytes: Some(1600),
        queue_bytes: Some(12_500),
        ..Default::default()
    };
    let mut e = engine(Topology::uniform(&["a", "b"], prof, 1));
    // 30 packets at once: the first passes on its tokens, ten more fit
    // in the queue, the rest are tail-dropped.
    for i in 0..30u32 {
        let mut p = pkt(&e, 0, 1, 1250);
        tag(&mut p, i);
        e.ingress(0, 0, &p);
    }
    let out = drain(&mut e);
    let c = e.core_counters("a", "b").expect("link");
    assert_eq!(out.len(), 11, "{out:?}");
    assert_eq!(c.drop_queue, 19);
    assert!(c.queue_hwm_bytes <= 12_500);
    assert_eq!(c.queue_hwm_bytes, 12_500);
    // The last packet waited for the ten before it: 10 ms less the
    // 0.28 ms the first one's tokens gave.
    assert_eq!(c.queue_delay_max_us, 9_720);
    // The first leaves at once on its tokens; the second waits for the
    // 900 bytes the first left missing (0.72 ms); then exactly 1 ms apart.
    for (k, (due, _)) in out.iter().enumerate() {
        let want = if k == 0 { 0 } else { k as u64 * MS - 280_000 };
        assert_eq!(*due, want, "{out:?}");
    }
}

#[test]
fn sustained_rate_matches() {
    let prof = LinkProfile {
        rate_mbit: Some(1.0),
        queue_bytes: Some(1 << 20),
        ..Default::default()
    };
    let mut e = engine(Topology::uniform(&["a", "b"], prof, 1));
    // Offer 2 Mbit/s for 10 s; 1 Mbit/s must come out.
    let mut t = 0;
    let mut delivered = 0u64;
    let mut last = 0;
    for i in 0..1667u32 {
        t = u64::from(i) * 6 * MS; // 1500 B every 6 ms = 2 Mbit/s
        let p = pkt(&e, 0, 1, 1500);
        e.ingress(t, 0, &p);
        while let Some(d) = e.poll_output(t) {
            delivered += d.pkt.len() as u64;
            last = d.due;
            e.recycle(d.pkt);
        }
    }
    let _ = t;
    let rate = delivered as f64 * 8.0 / (last as f64 / 1e9);
    assert!((rate - 1e6).abs() < 0.01e6, "{rate}");
}

#[test]
fn shared_uplink_is_shared() {
    let mut t = Topology::uniform(&["a", "b", "c"], LinkProfile::default(), 1);
    t.nodes[0].uplink = Some(ProfileRef::Inline(LinkProfile {
        rate_mbit: Some(8.0),
        queue_bytes: Some(1 << 20),
        ..Default::default()
    }));
    let mut e = engine(t);
    // 100 packets of 1000 B to b and 100 to c, all at t=0: 200 KB at
    // 1 MB/s through the shared uplink takes ~0.2 s.
    for i in 0..200u32 {
        let p = pkt(&e, 0, 1 + (i % 2) as usize, 1000);
        e.ingress(0, 0, &p);
    }
    let out = drain(&mut e);
    assert_eq!(out.len(), 200);
    let last = out.last().map(|x| x.0).unwrap_or(0);
    assert!((196 * MS..=200 * MS).contains(&last), "{last}");
}

#[test]
fn downlink_and_pair_override_compose() {
    let mut t = Topology::uniform(&["a", "b", "c"], LinkProfile::delay(10.0), 1);
    t.nodes[1].downlink = Some(ProfileRef::Inline(LinkProfile::delay(5.0)));
    t.pairs.push(crate::profile::PairOverride {
        from: "a".into(),
        to: "b".into(),
        profile: ProfileRef::Inline(LinkProfile::delay(30.0)),
        symmetric: true,
    });
    let mut e = engine(t);
    let p = pkt(&e, 0, 1, 64);
    e.ingress(0, 0, &p);
    let p = pkt(&e, 2, 1, 64);
    e.ingress(0, 2, &p);
    let p = pkt(&e, 1, 0, 64);
    e.ingress(0, 1, &p);
    let out: Vec<Nanos> = drain(&mut e).into_iter().map(|x| x.0).collect();
    assert_eq!(out, vec![15 * MS, 30 * MS, 35 * MS]);
}

#[test]
fn bad_packets_are_counted_not_forwarded() {
    let mut e = engine(Topology::uniform(&["a", "b"], LinkProfile::default(), 1));
    assert!(matches!(e.ingress(0, 0, &[1, 2, 3]), Ingress::Malformed(_)));
    // Spoofed source: b's address sent from a.
    let p = pkt(&e, 1, 0, 64);
    assert_eq!(e.ingress(0, 0, &p), Ingress::BadSource);
    // Unknown destination.
    let mut p = pkt(&e, 0, 1, 64);
    p[16..20].copy_from_slice(&[224, 0, 0, 1]);
    assert_eq!(e.ingress(0, 0, &p), Ingress::UnknownDst);
    // Out-of-range endpoint index.
    assert_eq!(e.ingress(0, 99, &pkt(&e, 0, 1, 64)), Ingress::BadSource);
    let g = e.global();
    assert_eq!(
        (g.drop_malformed, g.drop_bad_source, g.drop_unknown_dst),
        (1, 2, 1)
    );
    assert!(e.next_deadline().is_none());
}

#[test]
fn inflight_limit_bounds_memory() {
    let limits = Limits {
        max_inflight_packets: 10,
        ..Default::default()
    };
    let t = Topology::uniform(&["a", "b"], LinkProfile::delay(100.0), 1);
    let mut e = Engine::new(t.resolve().expect("ok"), false, limits);
    for i in 0..20 {
        let p = pkt(&e, 0, 1, 64);
        e.ingress(i, 0, &p);
    }
    assert_eq!(e.global().drop_overflow, 10);
    assert_eq!(drain(&mut e).len(), 10);
    assert_eq!(e.inflight_bytes(), 0);
}

#[test]
fn link_table_limit() {
    let limits = Limits {
        max_links: 1,
        ..Default::default()
    };
    let t = Topology::uniform(&["a", "b", "c"], LinkProfile::default(), 1);
    let mut e = Engine::new(t.resolve().expect("ok"), false, limits);
    assert_eq!(e.ingress(0, 0, &pkt(&e, 0, 1, 64)), Ingress::Accepted);
    assert_eq!(e.ingress(0, 0, &pkt(&e, 0, 2, 64)), Ingress::LinkTableFull);
}

#[test]
fn node_spec_addresses_reach_engine() {
    let mut t = Topology::default();
    t.nodes.push(NodeSpec::new("x"));
    let e = engine(t);
    assert_eq!(
        e.endpoints()[0].address,
        IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2))
    );
    assert_eq!(e.endpoints()[1].name, "host");
}

proptest::proptest! {
    #[test]
    fn arbitrary_input_never_panics(
        pkts in proptest::collection::vec(
            (0usize..4, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)),
            0..50)
    ) {
        let prof = LinkProfile { delay_ms: 1.0, loss: 0.1, rate_mbit: Some(1.0), ..Default::default() };
        let mut e = engine(Topology::uniform(&["a", "b"], prof, 1));
        let mut t = 0;
        for (from, mut bytes) in pkts {
            // Make some of them valid-looking.
            if bytes.len() >= 20 && from < 2 {
                bytes[0] = 0x45;
                let l = bytes.len() as u16;
                bytes[2..4].copy_from_slice(&l.to_be_bytes());
                let a = addr(&e, from).octets();
                bytes[12..16].copy_from_slice(&a);
                let b = addr(&e, 1 - from).octets();
                bytes[16..20].copy_from_slice(&b);
            }
            t += 100_000;
            let _ = e.ingress(t, from, &bytes);
            while let Some(d) = e.poll_output(t) { e.recycle(d.pkt); }
        }
        drain(&mut e);
        proptest::prop_assert_eq!(e.inflight_bytes(), 0);
    }
}

#[test]
fn drop_udp_blocks_udp_only() {
    let prof = LinkProfile {
        drop_udp: true,
        ..Default::default()
    };
    assert!(!prof.is_transparent());
    let mut e = engine(Topology::uniform(&["a", "b"], prof, 1));
    // Ten UDP datagrams vanish; the same packets as TCP (protocol 6) pass.
    for i in 0..10u32 {
        let mut p = pkt(&e, 0, 1, 100);
        tag(&mut p, i);
        e.ingress(0, 0, &p);
        p[9] = 6;
        e.ingress(0, 0, &p);
    }
    let out = drain(&mut e);
    assert_eq!(out.len(), 10);
    let c = e.core_counters("a", "b").expect("link");
    assert_eq!((c.drop_udp, c.tx_packets), (10, 10));
    // The other direction has its own profile (here the same).
    assert!(crate::packet::is_udp(&pkt(&e, 1, 0, 64)));
}
