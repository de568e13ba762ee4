//! Profile and topology tests: named profiles, TOML round trips, errors, subnet math.
use super::*;
use std::net::Ipv4Addr;

#[test]
fn named_profiles_are_valid() {
    for n in NAMED_PROFILES {
        let p = named_profile(n).expect("listed");
        p.validate(n).expect("valid");
    }
    assert!(named_profile("nope").is_none());
}

#[test]
fn toml_round_trip_and_resolution() {
    let t = Topology::from_toml(
        r#"
        seed = 7
        subnet = "10.78.0.0/24"
        default = { delay_ms = 20.0 }
        [profiles.slow]
        delay_ms = 50.0
        rate_mbit = 5.0
        [[nodes]]
        name = "client"
        uplink = "4g-up"
        downlink = "4g-down"
        [[nodes]]
        name = "guard"
        address = "10.78.0.9"
        [[nodes]]
        name = "exit"
        [[pairs]]
        from = "guard"
        to = "exit"
        profile = "slow"
        symmetric = false
        "#,
    )
    .expect("parses");
    let r = t.resolve().expect("resolves");
    assert_eq!(r.host_address, Ipv4Addr::new(10, 78, 0, 1));
    assert_eq!(r.nodes[0].address, Ipv4Addr::new(10, 78, 0, 2));
    assert_eq!(r.nodes[1].address, Ipv4Addr::new(10, 78, 0, 9));
    assert_eq!(r.nodes[2].address, Ipv4Addr::new(10, 78, 0, 3));
    assert_eq!(r.core_profile(1, 2).delay_ms, 50.0);
    assert_eq!(r.core_profile(2, 1).delay_ms, 20.0);
    assert_eq!(r.core_profile(0, 1).delay_ms, 20.0);
    assert_eq!(
        r.nodes[0].uplink.as_ref().and_then(|p| p.rate_mbit),
        Some(10.0)
    );
    let s = toml::to_string(&t).expect("serializes");
    let t2 = Topology::from_toml(&s).expect("re-parses");
    assert_eq!(t, t2);
}

#[test]
fn clear_errors() {
    let e = LinkProfile {
        loss: 1.5,
        ..Default::default()
    }
    .validate("p")
    .expect_err("bad");
    assert!(e.to_string().contains("loss"), "{e}");
    let e = LinkProfile {
        delay_ms: 1.0,
        jitter_ms: 2.0,
        ..Default::default()
    }
    .validate("p")
    .expect_err("bad");
    assert!(e.to_string().contains("jitter"), "{e}");
    let e = LinkProfile {
        queue_bytes: Some(10_000),
        ..Default::default()
    }
    .validate("p")
    .expect_err("bad");
    assert!(e.to_string().contains("rate_mbit"), "{e}");
    let e = Topology::from_toml("default = \"marsnet\"\n")
        .expect("parses")
        .resolve()
        .expect_err("unknown");
    assert!(e.to_string().contains("marsnet"), "{e}");
    let e = Topology::from_toml("default = { delay = 3 }\n").expect_err("unknown field");
    assert!(e.to_string().contains("TOML"), "{e}");
    assert!("10.77.0.1/16".parse::<Subnet>().is_err());
    assert!("10.77.0.0/31".parse::<Subnet>().is_err());
    let mut t = Topology::uniform(&["a", "a"], LinkProfile::default(), 0);
    assert!(t.resolve().is_err());
    t.nodes[1].name = "Bad Name".into();
    assert!(t.resolve().is_err());
    t.nodes[1].name = "b".into();
    t.nodes[1].address = Some(Ipv4Addr::new(10, 77, 0, 1));
    assert!(t.resolve().is_err(), "host address reserved");
}

#[test]
fn subnet_math() {
    let s: Subnet = "10.77.4.0/24".parse().expect("ok");
    assert!(s.contains(Ipv4Addr::new(10, 77, 4, 200)));
    assert!(!s.contains(Ipv4Addr::new(10, 77, 5, 1)));
    assert_eq!(s.host_count(), 254);
    assert_eq!(s.nth(254), Some(Ipv4Addr::new(10, 77, 4, 254)));
    assert_eq!(s.nth(255), None);
    let big: Subnet = "10.77.0.0/16".parse().expect("ok");
    assert!(big.overlaps(&s));
    assert!(s.overlaps(&big));
    let other: Subnet = "10.78.0.0/16".parse().expect("ok");
    assert!(!other.overlaps(&s));
}

#[test]
fn ge_mean_loss() {
    let ge = GilbertElliott {
        p: 0.01,
        r: 0.3,
        loss_good: 0.0,
        loss_bad: 1.0,
    };
    assert!((ge.mean_loss() - 0.01 / 0.31).abs() < 1e-12);
}
