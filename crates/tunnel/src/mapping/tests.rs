#![allow(clippy::unwrap_used)]

use super::*;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn table(v4: &str, max: usize) -> MappingTable {
    MappingTable::new(MappingConfig {
        v4: v4.parse().unwrap(),
        max_entries: max,
        ..MappingConfig::default()
    })
}

#[test]
fn ranges() {
    let r: AddrRange = "198.18.0.0/15".parse().unwrap();
    assert_eq!(r.size(), 131_072);
    assert!(r.contains("198.19.255.254".parse().unwrap()));
    assert!(!r.contains("198.20.0.1".parse().unwrap()));
    assert!(!r.contains("::1".parse().unwrap()));
    assert_eq!(
        "198.18.0.1/15".parse::<AddrRange>(),
        Err(RangeError::HostBits)
    );
    assert_eq!("10.0.0.0/31".parse::<AddrRange>(), Err(RangeError::Prefix));
    assert_eq!("10.0.0.0".parse::<AddrRange>(), Err(RangeError::Syntax));
    assert_eq!("::/8".parse::<AddrRange>(), Err(RangeError::Prefix));
    let v6: AddrRange = DEFAULT_V6.parse().unwrap();
    assert_eq!(v6.size(), 1u128 << 64);
    assert_eq!(v6.to_string(), DEFAULT_V6);
}

#[test]
fn reused_within_ttl_and_both_ways() {
    let t0 = Instant::now();
    let mut t = MappingTable::new(MappingConfig::default());
    let a = t.query(t0, "example.com", Family::V4).unwrap();
    assert!(t.is_synthetic(a));
    // Asked again within 60 s: the same address, renewed each time.
    assert_eq!(
        t.query(t0 + secs(30), "example.com", Family::V4).unwrap(),
        a
    );
    assert_eq!(
        t.query(t0 + secs(89), "example.com", Family::V4).unwrap(),
        a
    );
    let b = t.query(t0 + secs(89), "other.example", Family::V4).unwrap();
    assert_ne!(a, b);
    // Both ways.
    assert_eq!(t.name_of(t0 + secs(90), a), Some("example.com"));
    assert_eq!(t.addr_of(t0 + secs(90), "example.com", Family::V4), Some(a));
    // AAAA for the same name: an address from the v6 range, same mapping.
    let a6 = t.query(t0 + secs(90), "example.com", Family::V6).unwrap();
    assert!(a6.is_ipv6() && t.is_synthetic(a6));
    assert_eq!(t.name_of(t0 + secs(90), a6), Some("example.com"));
    assert_eq!(t.len(t0 + secs(90)), 2);
}

#[test]
fn purged_after_70s_then_new_address() {
    let t0 = Instant::now();
    let mut t = MappingTable::new(MappingConfig::default());
    let a = t.query(t0, "example.com", Family::V4).unwrap();
    // Past the TTL, before the purge: still mapped (an application may
    // have cached the answer just before the TTL).
    assert_eq!(t.name_of(t0 + secs(65), a), Some("example.com"));
    assert_eq!(
        t.name_of(t0 + secs(69) + Duration::from_millis(999), a),
        Some("example.com")
    );
    // 70 s after the last query: gone.
    assert_eq!(t.name_of(t0 + secs(70), a), None);
    assert_eq!(t.len(t0 + secs(70)), 0);
    let b = t.query(t0 + secs(71), "example.com", Family::V4).unwrap();
    assert_ne!(a, b, "a purged address is not handed out again at once");
}

#[test]
fn open_flows_keep_a_mapping() {
    let t0 = Instant::now();
    let mut t = MappingTable::new(MappingConfig::default());
    let a = t.query(t0, "example.com", Family::V4).unwrap();
    assert_eq!(
        t.flow_opened(t0 + secs(5), a).as_deref(),
        Some("example.com")
    );
    assert_eq!(t.name_of(t0 + secs(500), a), Some("example.com"));
    t.flow_closed(t0 + secs(600), a);
    assert_eq!(t.name_of(t0 + secs(669), a), Some("example.com"));
    assert_eq!(t.name_of(t0 + secs(670), a), None);
}

#[test]
fn unknown_synthetic_address() {
    let t0 = Instant::now();
    let mut t = MappingTable::new(MappingConfig::default());
    let ip: IpAddr = "198.18.3.4".parse().unwrap();
    assert!(t.is_synthetic(ip));
    assert_eq!(t.name_of(t0, ip), None);
    assert_eq!(t.flow_opened(t0, ip), None);
    t.flow_closed(t0, ip);
    assert!(t.is_empty(t0));
}

#[test]
fn bound_enforced() {
    let t0 = Instant::now();
    let mut t = table("198.18.0.0/15", 3);
    let _a = t.query(t0, "a.test", Family::V4).unwrap();
    let b = t.query(t0, "b.test", Family::V4).unwrap();
    let c = t.query(t0 + secs(1), "c.test", Family::V4).unwrap();
    // Full of live mappings: refused, the table does not grow.
    assert_eq!(
        t.query(t0 + secs(10), "d.test", Family::V4),
        Err(MappingError::Full)
    );
    assert_eq!(t.len(t0 + secs(10)), 3);
    // A known name is still answered (and renewed).
    assert!(t.query(t0 + secs(10), "a.test", Family::V4).is_ok());
    // At 62 s b (asked at 0 s) and c (at 1 s) are past their TTL, a is
    // not: the oldest expired mapping, b's, makes room for d.
    let d = t.query(t0 + secs(62), "d.test", Family::V4).unwrap();
    assert_eq!(t.name_of(t0 + secs(62), b), None);
    assert_eq!(t.name_of(t0 + secs(62), c), Some("c.test"));
    assert_ne!(d, b, "the evicted address is not handed out at once");
    assert_eq!(t.len(t0 + secs(62)), 3);
    // An expired mapping with a flow open is never evicted.
    assert!(t.flow_opened(t0 + secs(62), c).is_some());
    assert_eq!(
        t.query(t0 + secs(63), "e.test", Family::V4),
        Err(MappingError::Full)
    );
}

#[test]
fn tiny_range_exhausted() {
    let t0 = Instant::now();
    // A /30: four addresses, two usable (not the network, not broadcast).
    let mut t = table("10.254.0.0/30", 100);
    let a = t.query(t0, "a.test", Family::V4).unwrap();
    let b = t.query(t0, "b.test", Family::V4).unwrap();
    assert_eq!(
        (a, b),
        ("10.254.0.1".parse().unwrap(), "10.254.0.2".parse().unwrap())
    );
    assert_eq!(
        t.query(t0, "c.test", Family::V4),
        Err(MappingError::Exhausted)
    );
    // After the purge, the addresses come back.
    let c = t.query(t0 + secs(70), "c.test", Family::V4).unwrap();
    assert!(c == a || c == b);
}

#[test]
fn reserved_addresses_skipped() {
    let t0 = Instant::now();
    let mut t = MappingTable::new(MappingConfig {
        v4: "10.254.0.0/30".parse().unwrap(),
        reserved: vec!["10.254.0.1".parse().unwrap()],
        ..MappingConfig::default()
    });
    assert_eq!(
        t.query(t0, "a.test", Family::V4).unwrap(),
        "10.254.0.2".parse::<IpAddr>().unwrap()
    );
    assert_eq!(
        t.query(t0, "b.test", Family::V4),
        Err(MappingError::Exhausted)
    );
}

#[test]
fn no_v6_range() {
    let t0 = Instant::now();
    let mut t = MappingTable::new(MappingConfig {
        v6: None,
        ..MappingConfig::default()
    });
    assert_eq!(t.query(t0, "a.test", Family::V6), Err(MappingError::NoV6));
    assert!(t.is_empty(t0));
}
