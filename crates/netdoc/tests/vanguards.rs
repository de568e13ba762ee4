//! Vanguards-lite on the captured network (7 relays, all Stable;
//! relay1+relay2 and relay3+relay4 are families): the layer 2 set and
//! onion-service paths through it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::HashSet;

use common::*;
use onionmix_netdoc::vanguards::{Layer2Guard, Layer2Set, VanguardParams};
use onionmix_netdoc::{ExitTarget, PathBuilder, PathConfig, PathError, Relay};
use rand::SeedableRng;

fn rng(seed: u64) -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(seed)
}

#[test]
fn the_set_fills_without_families_and_rotates() {
    let nd = netdir();
    let p = VanguardParams::default();
    let mut seen = HashSet::new();
    let mut set = Layer2Set::default();
    for seed in 0..50 {
        set = Layer2Set::default();
        set.maintain(&nd, 1000, &p, &mut rng(seed));
        assert_eq!(set.guards().len(), 4);
        let rs: Vec<&Relay> = set
            .ids()
            .iter()
            .map(|id| nd.relay_by_rsa_id(id).unwrap())
            .collect();
        for (i, a) in rs.iter().enumerate() {
            for b in &rs[i + 1..] {
                assert!(a.rsa_id != b.rsa_id && !a.in_same_family(b));
            }
            seen.insert(a.nickname.clone());
        }
        for g in set.guards() {
            assert!((1000 + p.lifetime_min..=1000 + p.lifetime_max).contains(&g.expires));
        }
    }
    // Weighted by middle bandwidth: relay2 (bandwidth 0) never.
    assert!(seen.len() >= 5, "drawn from the whole network: {seen:?}");
    assert!(!seen.contains("relay2"), "{seen:?}");
    // Kept while valid.
    let mut r = rng(99);
    let before = set.clone();
    set.maintain(&nd, 2000, &p, &mut r);
    assert_eq!(set, before);
    // The first to expire is replaced at its expiry; the others stay.
    let first = *set.guards().iter().min_by_key(|g| g.expires).unwrap();
    set.maintain(&nd, first.expires, &p, &mut r);
    assert_eq!(set.guards().len(), 4);
    assert!(set.guards().iter().all(|g| g.expires > first.expires));
    let kept = before
        .guards()
        .iter()
        .filter(|g| set.guards().contains(g))
        .count();
    assert_eq!(kept, 3);
    // A smaller guard-hs-l2-number trims it.
    let small = VanguardParams { number: 2, ..p };
    set.maintain(&nd, first.expires, &small, &mut r);
    assert_eq!(set.guards().len(), 2);
}

#[test]
fn a_member_gone_from_the_consensus_is_replaced() {
    let nd = netdir();
    let gone = Layer2Guard {
        rsa_id: [0x99; 20],
        expires: u64::MAX,
    };
    let mut set = Layer2Set::from_guards(vec![gone]);
    set.maintain(&nd, 10, &VanguardParams::default(), &mut rng(3));
    assert_eq!(set.guards().len(), 4);
    assert!(!set.ids().contains(&gone.rsa_id));
}

#[test]
fn families_limit_the_set() {
    // 7 relays, two families of two: at most 5 members.
    let nd = netdir();
    let p = VanguardParams {
        number: 19,
        ..Default::default()
    };
    let mut set = Layer2Set::default();
    set.maintain(&nd, 10, &p, &mut rng(5));
    assert_eq!(set.guards().len(), 5);
}

#[test]
fn onion_service_paths_take_their_second_hop_from_the_set() {
    let nd = netdir();
    let cfg = PathConfig::testing_network();
    let mut set = Layer2Set::default();
    set.maintain(&nd, 10, &VanguardParams::default(), &mut rng(8));
    let l2 = set.ids();
    let pb = PathBuilder::new(&nd, &cfg).with_layer2(&l2);
    let mut r = rng(2);
    for _ in 0..500 {
        let p = pb.exit_path(&mut r, ExitTarget::Internal).unwrap();
        let rsa = |i: usize| nd.relay(&p[i]).unwrap().rsa_id;
        assert!(l2.contains(&rsa(1)), "second hop from the layer 2 set");
        assert!(p[0] != p[1] && p[1] != p[2] && p[0] != p[2]);
    }
    // A set whose only member is unusable: no path rather than a non-vanguard.
    let only = [[0x99; 20]];
    let pb = PathBuilder::new(&nd, &cfg).with_layer2(&only);
    assert_eq!(
        pb.exit_path(&mut r, ExitTarget::Internal),
        Err(PathError::NoMiddle)
    );
}
