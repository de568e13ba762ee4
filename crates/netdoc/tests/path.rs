//! Path selection: constraints on the captured network, and weighted
//! statistics on a synthetic one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::{BTreeMap, HashMap};
use std::net::{Ipv4Addr, SocketAddrV4};

use common::*;
use onionmix_netdoc::consensus::Lifetime;
use onionmix_netdoc::{
    ExitTarget, NetDir, PathBuilder, PathConfig, PathError, PortPolicy, Position, Protocols, Relay,
    RelayFlags, RelayId,
};
use rand::SeedableRng;

fn rng(seed: u64) -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

#[test]
fn captured_network_constraints() {
    let nd = netdir();
    let cfg = PathConfig::testing_network();
    let pb = PathBuilder::new(&nd, &cfg);
    let r1 = id_of(&nd, "relay1");
    let r2 = id_of(&nd, "relay2");
    let r3 = id_of(&nd, "relay3");
    let r4 = id_of(&nd, "relay4");
    let mut rng = rng(1);
    let mut exits: HashMap<RelayId, usize> = HashMap::new();
    for _ in 0..2000 {
        let p = pb.exit_path(&mut rng, ExitTarget::Port(443)).unwrap();
        assert!(p[0] != p[1] && p[1] != p[2] && p[0] != p[2]);
        // Only relay1/relay2 accept 443 (authorities have the Exit flag in
        // a testing network but reject everything).
        assert!(p[2] == r1 || p[2] == r2, "exit {:?}", p[2]);
        // relay1+relay2 (MyFamily) and relay3+relay4 (FamilyId) never share a path.
        assert!(!(p.contains(&r1) && p.contains(&r2)));
        assert!(!(p.contains(&r3) && p.contains(&r4)));
        for id in &p {
            let r = nd.relay(id).unwrap();
            assert!(
                r.flags.contains(
                    RelayFlags::RUNNING
                        .with(RelayFlags::VALID)
                        .with(RelayFlags::FAST)
                )
            );
        }
        assert!(nd.relay(&p[0]).unwrap().flags.contains(RelayFlags::GUARD));
        *exits.entry(p[2]).or_default() += 1;
    }
    // relay1 has bandwidth 1 and relay2 bandwidth 0 (Wee weighting): with a
    // nonzero total weight, a zero-weight relay is never chosen.
    assert_eq!(exits.get(&r2), None);
    assert_eq!(
        pb.exit_path(&mut rng, ExitTarget::Port(22)),
        Err(PathError::NoExit(ExitTarget::Port(22)))
    );
    let p = pb.exit_path(&mut rng, ExitTarget::AnyPort).unwrap();
    assert!(p[2] == r1 || p[2] == r2);
    let p = pb.exit_path(&mut rng, ExitTarget::Internal).unwrap();
    assert!(p[0] != p[1] && p[1] != p[2]);
    let d = pb.one_hop_dir_path(&mut rng).unwrap();
    assert!(nd.relay(&d).unwrap().flags.contains(RelayFlags::V2DIR));

    // With subnet enforcement every relay conflicts (all on 127.0.0.1).
    let strict = PathConfig::default();
    let pb = PathBuilder::new(&nd, &strict);
    assert!(matches!(
        pb.exit_path(&mut rng, ExitTarget::Port(80)),
        Err(PathError::NoGuard | PathError::NoMiddle)
    ));
}

fn lifetime() -> Lifetime {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000);
    Lifetime {
        valid_after: t,
        fresh_until: t + std::time::Duration::from_secs(3600),
        valid_until: t + std::time::Duration::from_secs(3 * 3600),
    }
}

fn relay(i: u8, flags: RelayFlags, bw: u32, policy: &str) -> Relay {
    Relay {
        nickname: format!("r{i}"),
        rsa_id: [i; 20],
        ed_id: Some([i; 32]),
        ipv4: SocketAddrV4::new(Ipv4Addr::new(10, i, 0, 1), 9001),
        ipv6: None,
        dir_port: 0,
        flags: flags
            .with(RelayFlags::RUNNING)
            .with(RelayFlags::VALID)
            .with(RelayFlags::FAST)
            .with(RelayFlags::V2DIR),
        weight: bw,
        ntor_onion_key: [i; 32],
        family: Vec::new(),
        family_ids: Vec::new(),
        ipv4_policy: policy.parse::<PortPolicy>().unwrap(),
        ipv6_policy: PortPolicy::reject_all(),
        quic_port: None,
        protocols: "Relay=2-4 Link=4-5".parse::<Protocols>().unwrap(),
        md_digest: [i; 32],
    }
}

fn weights() -> BTreeMap<String, i32> {
    [
        ("Wgg", 6000),
        ("Wgm", 6000),
        ("Wgd", 2000),
        ("Wmg", 4000),
        ("Wmm", 10000),
        ("Wme", 3000),
        ("Wmd", 3000),
        ("Weg", 1000),
        ("Wem", 10000),
        ("Wee", 7000),
        ("Wed", 5000),
        ("Wgb", 10000),
        ("Wmb", 10000),
        ("Web", 10000),
        ("Wdb", 10000),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect()
}

/// 16 relays in distinct /16s: guards, exits, guard+exits, plain middles.
fn synthetic() -> NetDir {
    let g = RelayFlags::GUARD;
    let e = RelayFlags::EXIT;
    let ge = g.with(e);
    let n = RelayFlags::empty();
    let relays = vec![
        relay(1, g, 100, "reject 1-65535"),
        relay(2, g, 300, "reject 1-65535"),
        relay(3, g, 600, "reject 1-65535"),
        relay(4, g, 50, "accept 80"),
        relay(5, e, 200, "accept 80,443"),
        relay(6, e, 400, "accept 1-65535"),
        relay(7, e, 800, "reject 25"),
        relay(8, e, 100, "accept 443"),
        relay(9, ge, 300, "accept 80,443"),
        relay(10, ge, 500, "reject 1-79,81-65535"),
        relay(11, n, 150, "reject 1-65535"),
        relay(12, n, 250, "reject 1-65535"),
        relay(13, n, 1000, "reject 1-65535"),
        relay(14, n, 75, "accept 80"),
        relay(
            15,
            n.with(RelayFlags::BAD_EXIT).with(e),
            2000,
            "accept 1-65535",
        ),
        relay(16, n, 0, "reject 1-65535"),
    ];
    NetDir::from_relays(lifetime(), BTreeMap::new(), weights(), relays)
}

fn within(observed: usize, n: usize, p: f64) -> bool {
    let f = observed as f64 / n as f64;
    let sd = (p * (1.0 - p) / n as f64).sqrt();
    (f - p).abs() <= 4.5 * sd + 0.002
}

#[test]
fn weighted_statistics() {
    let nd = synthetic();
    let cfg = PathConfig::default();
    let pb = PathBuilder::new(&nd, &cfg);
    let target = ExitTarget::Port(80);
    let relays: Vec<&Relay> = nd.relays().collect();
    let w = |r: &Relay, pos: Position| nd.relay_weight(r, pos) as f64;

    // Exact expected distributions (no families, distinct subnets).
    let exits: Vec<&Relay> = relays
        .iter()
        .copied()
        .filter(|r| pb.exit_ok(r, target))
        .collect();
    let ex_total: f64 = exits.iter().map(|r| w(r, Position::Exit)).sum();
    let mut p_exit: HashMap<RelayId, f64> = HashMap::new();
    let mut p_guard: HashMap<RelayId, f64> = HashMap::new();
    let mut p_mid: HashMap<RelayId, f64> = HashMap::new();
    for e in &exits {
        let pe = w(e, Position::Exit) / ex_total;
        *p_exit.entry(e.id()).or_default() += pe;
        let guards: Vec<&Relay> = relays
            .iter()
            .copied()
            .filter(|r| r.flags.contains(RelayFlags::GUARD) && r.rsa_id != e.rsa_id)
            .collect();
        let gt: f64 = guards.iter().map(|r| w(r, Position::Guard)).sum();
        for g in &guards {
            let pg = pe * w(g, Position::Guard) / gt;
            *p_guard.entry(g.id()).or_default() += pg;
            let mids: Vec<&Relay> = relays
                .iter()
                .copied()
                .filter(|r| r.rsa_id != e.rsa_id && r.rsa_id != g.rsa_id)
                .collect();
            let mt: f64 = mids.iter().map(|r| w(r, Position::Middle)).sum();
            for m in &mids {
                *p_mid.entry(m.id()).or_default() += pg * w(m, Position::Middle) / mt;
            }
        }
    }

    let n = 10_000;
    let mut rng = rng(42);
    let mut c_exit: HashMap<RelayId, usize> = HashMap::new();
    let mut c_guard: HashMap<RelayId, usize> = HashMap::new();
    let mut c_mid: HashMap<RelayId, usize> = HashMap::new();
    for _ in 0..n {
        let p = pb.exit_path(&mut rng, target).unwrap();
        *c_guard.entry(p[0]).or_default() += 1;
        *c_mid.entry(p[1]).or_default() += 1;
        *c_exit.entry(p[2]).or_default() += 1;
        let e = nd.relay(&p[2]).unwrap();
        assert!(e.ipv4_policy.allows_port(80));
        assert!(!e.flags.contains(RelayFlags::BAD_EXIT));
    }
    for (name, expected, counts) in [
        ("exit", &p_exit, &c_exit),
        ("guard", &p_guard, &c_guard),
        ("middle", &p_mid, &c_mid),
    ] {
        for r in &relays {
            let p = expected.get(&r.id()).copied().unwrap_or(0.0);
            let c = counts.get(&r.id()).copied().unwrap_or(0);
            assert!(
                within(c, n, p),
                "{name} {}: observed {c}/{n}, expected p={p:.4}",
                r.nickname
            );
            if p == 0.0 {
                assert_eq!(c, 0, "{name} {} has zero weight", r.nickname);
            }
        }
    }
    // The BadExit relay is never an exit, but is a fine middle.
    assert_eq!(c_exit.get(&RelayId([15; 20])), None);
    assert!(c_mid.get(&RelayId([15; 20])).copied().unwrap_or(0) > 0);
}

#[test]
fn families_subnets_and_stability() {
    let mut relays: Vec<Relay> = synthetic().relays().cloned().collect();
    // r5 and r6 declare each other; r9 and r13 share a family id;
    // r10 and r11 live in the same /16; r7 only is Stable among exits.
    let id = |i: u8| [i; 20];
    for r in &mut relays {
        match r.rsa_id[0] {
            5 => r.family = vec![id(5), id(6)],
            6 => r.family = vec![id(6), id(5)],
            9 | 13 => r.family_ids = vec!["ed25519:AAAA".into()],
            11 => r.ipv4 = SocketAddrV4::new(Ipv4Addr::new(10, 10, 7, 7), 443),
            _ => {}
        }
        if [1, 2, 3, 7, 11, 12, 13].contains(&r.rsa_id[0]) {
            r.flags.insert(RelayFlags::STABLE);
        }
    }
    let nd = NetDir::from_relays(lifetime(), BTreeMap::new(), weights(), relays);
    let cfg = PathConfig::default();
    let pb = PathBuilder::new(&nd, &cfg);
    let mut rng = rng(3);
    let has = |p: &[RelayId; 3], i: u8| p.contains(&RelayId([i; 20]));
    for _ in 0..10_000 {
        let p = pb.exit_path(&mut rng, ExitTarget::Port(443)).unwrap();
        assert!(!(has(&p, 5) && has(&p, 6)));
        assert!(!(has(&p, 9) && has(&p, 13)));
        assert!(!(has(&p, 10) && has(&p, 11)));
        assert!(nd.relay(&p[2]).unwrap().ipv4_policy.allows_port(443));
    }
    // Port 22 is long-lived: every hop must be Stable.
    for _ in 0..1000 {
        let p = pb.exit_path(&mut rng, ExitTarget::Port(22)).unwrap();
        for h in &p {
            assert!(nd.relay(h).unwrap().flags.contains(RelayFlags::STABLE));
        }
        assert_eq!(p[2], RelayId([7; 20]));
    }
    // Port 25 is rejected by r7, and no other Stable exit exists for it.
    let no_stable = PathConfig {
        long_lived_ports: vec![25],
        ..PathConfig::default()
    };
    let pb2 = PathBuilder::new(&nd, &no_stable);
    assert_eq!(
        pb2.exit_path(&mut rng, ExitTarget::Port(25)),
        Err(PathError::NoExit(ExitTarget::Port(25)))
    );
    // Subnet enforcement off: r10 and r11 may share a path.
    let loose = PathConfig::testing_network();
    let pb3 = PathBuilder::new(&nd, &loose);
    let together = (0..5000)
        .filter(|_| {
            let p = pb3.exit_path(&mut rng, ExitTarget::Port(80)).unwrap();
            has(&p, 10) && has(&p, 11)
        })
        .count();
    assert!(together > 0);
}
