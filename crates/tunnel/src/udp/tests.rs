#![allow(clippy::unwrap_used)]

use super::*;
use crate::testutil::sa;

fn key(sport: u16) -> UdpKey {
    UdpKey {
        src: SocketAddr::new(sa("10.0.0.2:1").ip(), sport),
        dst: sa("192.0.2.7:7"),
    }
}

fn open(t: &mut UdpTable, now: Instant, k: UdpKey, iso: Isolation, c: &mut Counters) -> UdpStep {
    t.on_datagram(
        now,
        k,
        || Target::Addr(k.dst),
        iso,
        Some(42),
        b"first",
        b"packet",
        c,
    )
}

/// Another datagram on a flow that exists.
fn again(
    t: &mut UdpTable,
    now: Instant,
    k: UdpKey,
    iso: Isolation,
    d: &[u8],
    c: &mut Counters,
) -> UdpStep {
    t.on_datagram(now, k, || unreachable!(), iso, None, d, b"p", c)
}

#[test]
fn datagrams_wait_for_the_stream_then_flow_both_ways() {
    let now = Instant::now();
    let mut c = Counters::default();
    let mut t = UdpTable::new(UdpConfig::default());
    let UdpStep::Open {
        id,
        target,
        isolation,
    } = open(&mut t, now, key(1000), Isolation::PerDestination, &mut c)
    else {
        panic!()
    };
    assert_eq!(target, Target::Addr(sa("192.0.2.7:7")));
    assert_eq!(isolation, IsolationKey::Destination("192.0.2.7".into()));
    // More datagrams while opening wait, up to the bound.
    for i in 0..20u8 {
        let s = again(
            &mut t,
            now,
            key(1000),
            Isolation::PerDestination,
            &[i],
            &mut c,
        );
        assert_eq!(s, UdpStep::None);
    }
    assert_eq!(c.drops(DropReason::UdpQueue), 20 - 7);
    let sent = t.opened(now, id, &mut c);
    assert_eq!(sent.len(), 8);
    assert_eq!(sent[0], b"first");
    assert_eq!(c.udp_datagrams_to_exit, 8);
    // Opened twice: nothing more.
    assert!(t.opened(now, id, &mut c).is_empty());
    let s = again(
        &mut t,
        now,
        key(1000),
        Isolation::PerDestination,
        b"x",
        &mut c,
    );
    assert_eq!(
        s,
        UdpStep::Send {
            id,
            payload: b"x".to_vec()
        }
    );
    assert_eq!(t.from_exit(now, id, 3, &mut c), Some(key(1000)));
    assert_eq!((c.udp_datagrams_to_app, c.udp_bytes_to_app), (1, 3));
    assert_eq!(t.open_count(), 1);
    // It heard back: its end removes it.
    assert_eq!(t.ended(now, id, &mut c), UdpEnded::Removed(key(1000)));
    assert!(t.is_empty());
    // A flow whose stream ends without a reply is taken as refused.
    let UdpStep::Open { id, .. } = open(&mut t, now, key(2000), Isolation::PerFlow, &mut c) else {
        panic!()
    };
    let _ = t.opened(now, id, &mut c);
    assert_eq!(
        t.ended(now, id, &mut c),
        UdpEnded::Refused(b"packet".to_vec())
    );
    assert_eq!(t.ended(now, id, &mut c), UdpEnded::Removed(key(2000)));
    let UdpStep::Open { id, .. } = open(&mut t, now, key(2000), Isolation::PerFlow, &mut c) else {
        panic!()
    };
    let _ = t.opened(now, id, &mut c);
    assert!(matches!(t.ended(now, id, &mut c), UdpEnded::Refused(_)));
    assert_eq!(c.udp_flows_refused, 2);
    let s = again(&mut t, now, key(2000), Isolation::PerFlow, b"x", &mut c);
    assert_eq!(s, UdpStep::Refused);
}

#[test]
fn a_refused_flow_falls_back_without_asking_again() {
    let now = Instant::now();
    let mut c = Counters::default();
    let mut t = UdpTable::new(UdpConfig::default());
    let UdpStep::Open { id, .. } = open(&mut t, now, key(1000), Isolation::PerFlow, &mut c) else {
        panic!()
    };
    assert_eq!(t.failed(now, id, &mut c), Some(b"packet".to_vec()));
    assert_eq!(c.udp_flows_refused, 1);
    assert_eq!(t.failed(now, id, &mut c), None);
    assert_eq!(t.from_exit(now, id, 1, &mut c), None);
    let s = again(&mut t, now, key(1000), Isolation::PerFlow, b"x", &mut c);
    assert_eq!(s, UdpStep::Refused);
    // Idle long enough, it is forgotten; the next datagram tries again.
    let later = now + UdpConfig::default().idle;
    assert_eq!(t.expire(later), vec![(id, key(1000))]);
    assert!(matches!(
        open(&mut t, later, key(1000), Isolation::PerFlow, &mut c),
        UdpStep::Open { .. }
    ));
}

#[test]
fn isolation_keys_and_limits() {
    let now = Instant::now();
    let mut c = Counters::default();
    let cfg = UdpConfig {
        max_flows: 2,
        ..UdpConfig::default()
    };
    let mut t = UdpTable::new(cfg);
    let UdpStep::Open { id, isolation, .. } = open(&mut t, now, key(1), Isolation::PerFlow, &mut c)
    else {
        panic!()
    };
    assert_eq!(isolation, IsolationKey::UdpFlow(id));
    let UdpStep::Open { isolation, .. } = open(&mut t, now, key(2), Isolation::PerApp, &mut c)
    else {
        panic!()
    };
    assert_eq!(isolation, IsolationKey::App(42));
    // Table full.
    assert_eq!(
        open(&mut t, now, key(3), Isolation::PerFlow, &mut c),
        UdpStep::None
    );
    assert_eq!(c.drops(DropReason::FlowLimit), 1);
    // Too big for one DATAGRAM message.
    let big = vec![0u8; 499];
    let s = again(&mut t, now, key(1), Isolation::PerFlow, &big, &mut c);
    assert_eq!(s, UdpStep::None);
    assert_eq!(c.drops(DropReason::UdpTooBig), 1);
    // Activity keeps a flow; idleness ends it.
    let idle = UdpConfig::default().idle;
    let _ = t.opened(now, id, &mut c);
    let _ = t.from_exit(now + idle / 2, id, 1, &mut c);
    let gone = t.expire(now + idle);
    assert_eq!(gone.len(), 1);
    assert_eq!(t.len(), 1);
    assert_eq!(t.expire(now + idle + idle / 2).len(), 1);
    assert!(t.is_empty());
}
