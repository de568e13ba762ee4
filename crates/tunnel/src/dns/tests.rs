#![allow(clippy::unwrap_used)]

use std::time::Duration;

use super::*;
use crate::mapping::MappingConfig;

fn ask(
    t: &mut MappingTable,
    mode: DnsMode,
    now: Instant,
    name: &str,
    qtype: u16,
    c: &mut Counters,
) -> (u8, Vec<IpAddr>) {
    let q = wire::build_query(0x1234, name, qtype).unwrap();
    match handle(t, mode, now, &q, c) {
        DnsAction::Reply(r) => (r[3] & 0x0f, wire::parse_answer(&r, 0x1234).unwrap()),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_and_aaaa_answered_at_once() {
    let now = Instant::now();
    let mut t = MappingTable::new(MappingConfig::default());
    let mut c = Counters::default();
    let (rc, a) = ask(
        &mut t,
        DnsMode::Optimistic,
        now,
        "www.example.com",
        TYPE_A,
        &mut c,
    );
    assert_eq!((rc, a.len()), (0, 1));
    assert!(t.is_synthetic(a[0]) && a[0].is_ipv4());
    let (_, a6) = ask(
        &mut t,
        DnsMode::Optimistic,
        now,
        "WWW.Example.com",
        TYPE_AAAA,
        &mut c,
    );
    assert!(t.is_synthetic(a6[0]) && a6[0].is_ipv6());
    assert_eq!(t.name_of(now, a6[0]), Some("www.example.com"));
    // Asked again: same answer, no new mapping.
    let (_, again) = ask(
        &mut t,
        DnsMode::Optimistic,
        now + Duration::from_secs(59),
        "www.example.com",
        TYPE_A,
        &mut c,
    );
    assert_eq!(again, a);
    // Two addresses made (v4 and v6), three answers.
    assert_eq!((c.dns_answered, c.dns_mappings), (3, 2));
}

#[test]
fn onion_names_get_addresses_even_in_fallback() {
    let now = Instant::now();
    let mut t = MappingTable::new(MappingConfig::default());
    let mut c = Counters::default();
    let onion = format!("{}.onion", "a".repeat(56));
    let (rc, a) = ask(&mut t, DnsMode::Fallback, now, &onion, TYPE_A, &mut c);
    assert_eq!((rc, a.len()), (0, 1));
    assert_eq!(t.name_of(now, a[0]), Some(onion.as_str()));
    // Other names: resolved through the network.
    let q = wire::build_query(5, "example.com", TYPE_A).unwrap();
    let DnsAction::Resolve { query, name } = handle(&mut t, DnsMode::Fallback, now, &q, &mut c)
    else {
        panic!()
    };
    assert_eq!(name, "example.com");
    let ip: IpAddr = "93.184.215.14".parse().unwrap();
    let r = answer_resolved(&query, Some(&[ip]), &mut c);
    assert_eq!(wire::parse_answer(&r, 5), Some(vec![ip]));
    let r = answer_resolved(&query, None, &mut c);
    assert_eq!(r[3] & 0x0f, 3);
}

#[test]
fn other_types_and_classes() {
    let now = Instant::now();
    let mut t = MappingTable::new(MappingConfig {
        v6: None,
        ..MappingConfig::default()
    });
    let mut c = Counters::default();
    // AAAA without an IPv6 range, MX, HTTPS: NOERROR, no records, no
    // mapping.
    for ty in [TYPE_AAAA, 15, 65, 255] {
        assert_eq!(
            ask(&mut t, DnsMode::Optimistic, now, "example.com", ty, &mut c),
            (0, vec![])
        );
    }
    assert!(t.is_empty(now));
    // Class CH (version.bind): NOTIMP. Opcode STATUS: NOTIMP.
    let mut q = wire::build_query(1, "version.bind", 16).unwrap();
    let n = q.len();
    q[n - 1] = 3;
    let DnsAction::Reply(r) = handle(&mut t, DnsMode::Optimistic, now, &q, &mut c) else {
        panic!()
    };
    assert_eq!(r[3] & 0x0f, 4);
    let mut q = wire::build_query(1, "example.com", TYPE_A).unwrap();
    q[2] |= 2 << 3;
    let DnsAction::Reply(r) = handle(&mut t, DnsMode::Optimistic, now, &q, &mut c) else {
        panic!()
    };
    assert_eq!((r[2] >> 3) & 0x0f, 2);
    assert_eq!(r[3] & 0x0f, 4);
    // A name with a space in it: NXDOMAIN, never mapped.
    assert_eq!(
        ask(
            &mut t,
            DnsMode::Optimistic,
            now,
            "bad name.test",
            TYPE_A,
            &mut c
        )
        .0,
        3
    );
    assert!(t.is_empty(now));
}

#[test]
fn malformed_and_full() {
    let now = Instant::now();
    let mut t = MappingTable::new(MappingConfig {
        max_entries: 1,
        ..MappingConfig::default()
    });
    let mut c = Counters::default();
    assert_eq!(
        handle(&mut t, DnsMode::Optimistic, now, b"short", &mut c),
        DnsAction::Drop
    );
    assert_eq!(c.drops(DropReason::Dns), 1);
    // A response (QR set): dropped, never answered.
    assert_eq!(
        handle(&mut t, DnsMode::Optimistic, now, &[0xab; 12], &mut c),
        DnsAction::Drop
    );
    assert_eq!(c.drops(DropReason::Dns), 2);
    // A query header with a question count of 0x2b2b: FORMERR.
    let DnsAction::Reply(r) = handle(&mut t, DnsMode::Optimistic, now, &[0x2b; 14], &mut c) else {
        panic!()
    };
    assert_eq!(r[3] & 0x0f, 1);
    // Full: SERVFAIL, counted; the table does not grow.
    ask(&mut t, DnsMode::Optimistic, now, "a.test", TYPE_A, &mut c);
    assert_eq!(
        ask(&mut t, DnsMode::Optimistic, now, "b.test", TYPE_A, &mut c),
        (2, vec![])
    );
    assert_eq!(c.dns_refused, 1);
    assert_eq!(t.len(now), 1);
}

proptest::proptest! {
    #[test]
    fn arbitrary_datagrams_never_panic(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300), fallback in proptest::prelude::any::<bool>()) {
        let mut t = MappingTable::new(MappingConfig { max_entries: 4, ..MappingConfig::default() });
        let mut c = Counters::default();
        let mode = if fallback { DnsMode::Fallback } else { DnsMode::Optimistic };
        let _ = handle(&mut t, mode, Instant::now(), &data, &mut c);
        proptest::prop_assert!(t.len(Instant::now()) <= 4);
    }
}
