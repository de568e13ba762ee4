#![allow(clippy::unwrap_used)]

use super::*;
use crate::packet::{parse_ip, tcp_flags};
use crate::testutil::{sa, tcp_pkt};

fn key(src: &str, dst: &str) -> FlowKey {
    FlowKey {
        src: sa(src),
        dst: sa(dst),
    }
}

fn syn(k: &FlowKey) -> Vec<u8> {
    tcp_pkt(k.src, k.dst, tcp_flags::SYN, 1000, b"")
}

fn open(
    t: &mut FlowTable,
    now: Instant,
    k: FlowKey,
    target: Target,
    app: Option<u64>,
    c: &mut Counters,
) -> (u64, IsolationKey) {
    match t.on_syn(now, k, target, app, &syn(&k), c) {
        SynOutcome::Open { id, isolation, .. } => (id, isolation),
        other => panic!("{other:?}"),
    }
}

fn connect(t: &mut FlowTable, now: Instant, id: u64, c: &mut Counters) -> Vec<u8> {
    t.handle(now, id, FlowEvent::BeginSent, c).unwrap();
    match t.handle(now, id, FlowEvent::Connected, c).unwrap().action {
        FlowAction::AcceptSyn(s) => s,
        other => panic!("{other:?}"),
    }
}

#[test]
fn syn_held_until_connected_then_both_sides_close() {
    let now = Instant::now();
    let mut t = FlowTable::new(FlowConfig::default());
    let mut c = Counters::default();
    let k = key("10.0.0.2:40000", "198.18.0.5:443");
    let (id, iso) = open(
        &mut t,
        now,
        k,
        Target::Host("example.com".into(), 443),
        None,
        &mut c,
    );
    assert_eq!(iso, IsolationKey::Destination("example.com".into()));
    assert_eq!(t.find(&k).unwrap().state, FlowState::SynReceived);
    // Retransmitted SYN while connecting: ignored.
    assert_eq!(
        t.on_syn(
            now,
            k,
            Target::Host("example.com".into(), 443),
            None,
            &syn(&k),
            &mut c
        ),
        SynOutcome::Pending
    );
    // CONNECTED before BEGIN is a mistake.
    assert!(matches!(
        t.handle(now, id, FlowEvent::Connected, &mut c),
        Err(FlowError::State(..))
    ));
    assert_eq!(
        connect(&mut t, now, id, &mut c),
        syn(&k),
        "the held SYN goes to the stack"
    );
    assert_eq!(t.get(id).unwrap().state, FlowState::Open);
    // FIN from the application: no END yet (the answer may come).
    let s = t.handle(now, id, FlowEvent::AppFin, &mut c).unwrap();
    assert_eq!((s.action, s.closed), (FlowAction::None, None));
    // The exit finishes: FIN to the application, flow gone.
    let s = t
        .handle(now, id, FlowEvent::End(end_reason::DONE), &mut c)
        .unwrap();
    assert_eq!((s.action, s.closed), (FlowAction::FinToApp, Some(k)));
    assert!(t.is_empty());
    assert_eq!(
        (c.flows_opened, c.flows_connected, c.flows_refused),
        (1, 1, 0)
    );
    assert_eq!(
        t.handle(now, id, FlowEvent::AppFin, &mut c),
        Err(FlowError::NoFlow)
    );
}

#[test]
fn exit_closes_first() {
    let now = Instant::now();
    let mut t = FlowTable::new(FlowConfig::default());
    let mut c = Counters::default();
    let k = key("10.0.0.2:40000", "1.2.3.4:80");
    let (id, _) = open(&mut t, now, k, Target::Addr(k.dst), None, &mut c);
    connect(&mut t, now, id, &mut c);
    assert_eq!(
        t.handle(now, id, FlowEvent::End(end_reason::DONE), &mut c)
            .unwrap()
            .action,
        FlowAction::FinToApp
    );
    assert_eq!(t.get(id).unwrap().state, FlowState::ExitFinished);
    // Nothing more goes to the exit.
    assert_eq!(t.room_to_exit(id), 0, "the application's window stays shut");
    assert_eq!(
        t.queued_to_exit(id, 1),
        Err(FlowError::NoData(FlowState::ExitFinished))
    );
    let s = t.handle(now, id, FlowEvent::AppFin, &mut c).unwrap();
    assert_eq!((s.action, s.closed), (FlowAction::None, Some(k)));
}

#[test]
fn abortive_ends() {
    let now = Instant::now();
    let mut t = FlowTable::new(FlowConfig::default());
    let mut c = Counters::default();
    let k = key("10.0.0.2:40000", "1.2.3.4:80");
    let (id, _) = open(&mut t, now, k, Target::Addr(k.dst), None, &mut c);
    connect(&mut t, now, id, &mut c);
    // END other than DONE on an open flow: reset the application.
    assert_eq!(
        t.handle(now, id, FlowEvent::End(end_reason::CONNRESET), &mut c)
            .unwrap()
            .action,
        FlowAction::ResetApp
    );
    let (id, _) = open(&mut t, now, k, Target::Addr(k.dst), None, &mut c);
    connect(&mut t, now, id, &mut c);
    // The application resets: END.
    assert_eq!(
        t.handle(now, id, FlowEvent::AppRst, &mut c).unwrap().action,
        FlowAction::SendEnd(end_reason::DONE)
    );
    // The circuit dies.
    let (id, _) = open(&mut t, now, k, Target::Addr(k.dst), None, &mut c);
    connect(&mut t, now, id, &mut c);
    assert_eq!(
        t.handle(now, id, FlowEvent::StreamLost, &mut c)
            .unwrap()
            .action,
        FlowAction::ResetApp
    );
    assert!(t.is_empty());
}

#[test]
fn rst_for_a_closed_port() {
    let now = Instant::now();
    let mut t = FlowTable::new(FlowConfig::default());
    let mut c = Counters::default();
    let k = key("10.0.0.2:40000", "1.2.3.4:81");
    let (id, _) = open(&mut t, now, k, Target::Addr(k.dst), None, &mut c);
    t.handle(now, id, FlowEvent::BeginSent, &mut c).unwrap();
    let s = t
        .handle(now, id, FlowEvent::End(end_reason::CONNECTREFUSED), &mut c)
        .unwrap();
    let FlowAction::Refuse(rst) = s.action else {
        panic!()
    };
    assert_eq!(s.closed, Some(k));
    let ip = parse_ip(&rst).unwrap();
    assert_eq!((ip.src, ip.dst), (k.dst.ip(), k.src.ip()));
    let tcp = &rst[ip.l4..];
    assert_eq!(tcp[13], tcp_flags::RST | tcp_flags::ACK);
    assert_eq!(&tcp[8..12], &1001u32.to_be_bytes(), "acknowledges the SYN");
    assert_eq!(c.flows_refused, 1);
    assert!(t.is_empty());
}

#[test]
fn end_reasons_map_to_refusals() {
    assert_eq!(reject_for_end(end_reason::CONNECTREFUSED), Reject::Rst);
    assert_eq!(
        reject_for_end(end_reason::EXITPOLICY),
        Reject::Icmp(Unreachable::Prohibited)
    );
    assert_eq!(
        reject_for_end(end_reason::RESOLVEFAILED),
        Reject::Icmp(Unreachable::Host)
    );
    assert_eq!(
        reject_for_end(end_reason::NOROUTE),
        Reject::Icmp(Unreachable::Net)
    );
    assert_eq!(reject_for_end(200), Reject::Icmp(Unreachable::Host));
    // An exit policy refusal reaches the application as ICMP
    // administratively prohibited, v4 and v6.
    for (src, dst, ty, code) in [
        ("10.0.0.2:1", "1.2.3.4:25", 3, 13),
        ("[fd00::2]:1", "[2001:db8::1]:25", 1, 1),
    ] {
        let now = Instant::now();
        let mut t = FlowTable::new(FlowConfig::default());
        let mut c = Counters::default();
        let k = key(src, dst);
        let (id, _) = open(&mut t, now, k, Target::Addr(k.dst), None, &mut c);
        t.handle(now, id, FlowEvent::BeginSent, &mut c).unwrap();
        let FlowAction::Refuse(p) = t
            .handle(now, id, FlowEvent::End(end_reason::EXITPOLICY), &mut c)
            .unwrap()
            .action
        else {
            panic!()
        };
        let ip = parse_ip(&p).unwrap();
        assert_eq!((p[ip.l4], p[ip.l4 + 1]), (ty, code));
    }
}

#[test]
fn isolation_keys() {
    let now = Instant::now();
    let mut c = Counters::default();
    let a = key("10.0.0.2:40000", "198.18.0.5:443");
    let b = key("10.0.0.2:40001", "198.18.0.5:443");
    let other = key("10.0.0.2:40002", "198.18.0.6:443");
    let host = |h: &str| Target::Host(h.into(), 443);

    let mut t = FlowTable::new(FlowConfig {
        isolation: Isolation::PerFlow,
        ..FlowConfig::default()
    });
    let (_, ka) = open(&mut t, now, a, host("example.com"), Some(1), &mut c);
    let (_, kb) = open(&mut t, now, b, host("example.com"), Some(1), &mut c);
    assert_ne!(
        ka, kb,
        "per flow: the same destination and app, two circuits"
    );

    let mut t = FlowTable::new(FlowConfig::default());
    let (_, ka) = open(&mut t, now, a, host("example.com"), Some(1), &mut c);
    let (_, kb) = open(&mut t, now, b, host("example.com"), Some(2), &mut c);
    let (_, ko) = open(&mut t, now, other, host("example.org"), Some(1), &mut c);
    assert_eq!(ka, kb, "per destination: shared whatever the app");
    assert_ne!(ka, ko);

    let mut t = FlowTable::new(FlowConfig {
        isolation: Isolation::PerApp,
        ..FlowConfig::default()
    });
    let (_, ka) = open(&mut t, now, a, host("example.com"), Some(1), &mut c);
    let (_, ko) = open(&mut t, now, other, host("example.org"), Some(1), &mut c);
    let (_, kb) = open(&mut t, now, b, host("example.com"), Some(2), &mut c);
    assert_eq!(ka, ko, "per app: one app, one circuit");
    assert_ne!(ka, kb);
    // An unknown app: isolated alone.
    let u = key("10.0.0.2:40003", "198.18.0.5:443");
    let (id, ku) = open(&mut t, now, u, host("example.com"), None, &mut c);
    assert_eq!(ku, IsolationKey::Flow(id));
}

#[test]
fn table_bounded() {
    let now = Instant::now();
    let mut t = FlowTable::new(FlowConfig {
        max_flows: 2,
        ..FlowConfig::default()
    });
    let mut c = Counters::default();
    for p in [1u16, 2] {
        let k = key(&format!("10.0.0.2:{p}"), "1.2.3.4:80");
        open(&mut t, now, k, Target::Addr(k.dst), None, &mut c);
    }
    let k = key("10.0.0.2:3", "1.2.3.4:80");
    let SynOutcome::Refused(Some(rst)) =
        t.on_syn(now, k, Target::Addr(k.dst), None, &syn(&k), &mut c)
    else {
        panic!()
    };
    assert!(parse_ip(&rst).is_ok());
    assert_eq!(t.len(), 2);
    assert_eq!(c.drops(DropReason::FlowLimit), 1);
}

#[test]
fn timeouts() {
    let now = Instant::now();
    let cfg = FlowConfig::default();
    let (ct, linger) = (cfg.connect_timeout, cfg.half_close_linger);
    let mut t = FlowTable::new(cfg);
    let mut c = Counters::default();
    let k1 = key("10.0.0.2:1", "1.2.3.4:80");
    let k2 = key("10.0.0.2:2", "1.2.3.4:80");
    let k3 = key("10.0.0.2:3", "1.2.3.4:80");
    let (id1, _) = open(&mut t, now, k1, Target::Addr(k1.dst), None, &mut c);
    t.handle(now, id1, FlowEvent::BeginSent, &mut c).unwrap();
    let (id2, _) = open(&mut t, now, k2, Target::Addr(k2.dst), None, &mut c);
    connect(&mut t, now, id2, &mut c);
    t.handle(now, id2, FlowEvent::AppFin, &mut c).unwrap();
    let (id3, _) = open(&mut t, now, k3, Target::Addr(k3.dst), None, &mut c);
    connect(&mut t, now, id3, &mut c);
    assert!(t.expire(now + Duration::from_secs(1), &mut c).is_empty());
    let due = t.expire(now + ct.max(linger), &mut c);
    assert_eq!(due.len(), 2);
    assert_eq!(due[0].0, id1);
    assert!(
        matches!(&due[0].1.action, FlowAction::RefuseAndEnd(_, r) if *r == end_reason::TIMEOUT)
    );
    assert_eq!(due[1].1.action, FlowAction::ResetAndEnd(end_reason::DONE));
    assert_eq!(t.len(), 1, "the open flow stays");
}

#[test]
fn buffers_bounded_and_bytes_counted() {
    let now = Instant::now();
    let mut t = FlowTable::new(FlowConfig {
        max_buffer: 100,
        ..FlowConfig::default()
    });
    let mut c = Counters::default();
    let k = key("10.0.0.2:1", "1.2.3.4:80");
    let (id, _) = open(&mut t, now, k, Target::Addr(k.dst), None, &mut c);
    assert_eq!(t.room_to_exit(id), 0, "nothing read before CONNECTED");
    assert!(t.queued_to_app(id, 1).is_err());
    connect(&mut t, now, id, &mut c);
    assert_eq!(t.room_to_exit(id), 100);
    t.queued_to_exit(id, 60).unwrap();
    assert_eq!(t.room_to_exit(id), 40);
    assert_eq!(t.queued_to_exit(id, 41), Err(FlowError::BufferFull));
    t.sent_to_exit(id, 60, &mut c);
    t.queued_to_app(id, 100).unwrap();
    assert_eq!(t.queued_to_app(id, 1), Err(FlowError::BufferFull));
    t.sent_to_app(id, 1000, &mut c);
    assert_eq!((c.bytes_to_exit, c.bytes_to_app), (60, 100));
    assert_eq!(t.get(id).unwrap().bytes_to_app, 100);
    assert_eq!(t.queued_to_exit(id, usize::MAX), Err(FlowError::BufferFull));
}
