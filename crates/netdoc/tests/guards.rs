//! Guard sampling, primary guards, failure handling and persistence.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use onionmix_netdoc::{
    ExitTarget, GuardParams, GuardSet, GuardStateError, NetDir, NodeRestrictions, PathBuilder,
    PathConfig,
};
use rand::SeedableRng;

fn rng() -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(11)
}

#[test]
fn sample_primary_and_failover() {
    let nd = netdir();
    let now = now();
    let mut gs = GuardSet::new(GuardParams::default());
    gs.update(&nd, now, &mut rng());
    // Fewer than 20 guards exist: all 7 Guard-flagged relays are sampled.
    assert_eq!(gs.sampled_guards().len(), 7);
    let primary = gs.primary_guards();
    assert_eq!(primary.len(), 3);
    assert_eq!(&gs.sampled_guards()[..3], &primary[..]);
    assert_eq!(gs.pick_guard(&nd, now, |_| true), Some(primary[0]));

    gs.record_failure(&primary[0], now);
    assert_eq!(gs.pick_guard(&nd, now, |_| true), Some(primary[1]));
    // Primary guards are retried after 10 minutes.
    let later = now + Duration::from_secs(601);
    assert_eq!(gs.pick_guard(&nd, later, |_| true), Some(primary[0]));

    // Confirming a guard moves it to the front of the primary list.
    gs.record_success(&primary[1], now);
    assert_eq!(gs.confirmed_guards(), vec![primary[1]]);
    assert_eq!(gs.primary_guards()[0], primary[1]);
    assert_eq!(gs.pick_guard(&nd, now, |_| true), Some(primary[1]));
    // A filter (e.g. the exit's family) skips to the next guard.
    assert_eq!(
        gs.pick_guard(&nd, now, |r| r.id() != primary[1]),
        Some(primary[2])
    );

    // Directory guard: one of the usable primary guards.
    let mut r = rng();
    for _ in 0..20 {
        let d = gs.pick_dir_guard(&nd, now, &mut r).unwrap();
        assert!(gs.primary_guards().contains(&d));
        assert_ne!(d, primary[0]); // still failing at `now`
    }
    gs.mark_all_retry();
    assert!(gs.is_reachable_or_due(&primary[0], now));
}

#[test]
fn state_roundtrip() {
    let nd = netdir();
    let now = now();
    let mut gs = GuardSet::default();
    gs.update(&nd, now, &mut rng());
    let p = gs.primary_guards();
    gs.record_success(&p[2], now);
    gs.record_failure(&p[0], now);
    let json = gs.to_json();
    let mut back = GuardSet::from_json(&json, GuardParams::default()).unwrap();
    assert_eq!(back.sampled_guards(), gs.sampled_guards());
    assert_eq!(back.confirmed_guards(), gs.confirmed_guards());
    back.update(&nd, now, &mut rand_chacha::ChaCha8Rng::seed_from_u64(999));
    // Kept across restarts: same sample, same primaries, same failures.
    assert_eq!(back.sampled_guards(), gs.sampled_guards());
    assert_eq!(back.primary_guards(), gs.primary_guards());
    assert_eq!(
        back.pick_guard(&nd, now, |_| true),
        gs.pick_guard(&nd, now, |_| true)
    );
    assert_eq!(back.to_json(), json);

    assert!(matches!(
        GuardSet::from_json("{", GuardParams::default()),
        Err(GuardStateError::Malformed(_))
    ));
    let v2 = json.replace("\"version\": 1", "\"version\": 2");
    assert_eq!(
        GuardSet::from_json(&v2, GuardParams::default()).unwrap_err(),
        GuardStateError::Version(2)
    );
    let bad_id = json.replacen(&hex::encode_upper(p[0].0), "XYZ", 1);
    assert!(GuardSet::from_json(&bad_id, GuardParams::default()).is_err());
}

#[test]
fn guards_that_leave_the_consensus() {
    let nd = netdir();
    let now = now();
    let mut gs = GuardSet::default();
    gs.update(&nd, now, &mut rng());
    let gone = gs.primary_guards()[0];
    // A directory without that relay.
    let relays: Vec<_> = nd.relays().filter(|r| r.id() != gone).cloned().collect();
    let nd2 = NetDir::from_relays(
        nd.lifetime(),
        BTreeMap::new(),
        nd.consensus().bandwidth_weights_raw().clone(),
        relays,
    );
    gs.update(&nd2, now, &mut rng());
    assert!(!gs.primary_guards().contains(&gone));
    assert_eq!(gs.primary_guards().len(), 3);
    assert!(gs.sampled_guards().contains(&gone)); // remembered for a while
    assert_ne!(gs.pick_guard(&nd2, now, |_| true), Some(gone));
    // Back in the consensus: usable again, in its old place.
    gs.update(&nd, now, &mut rng());
    assert_eq!(gs.primary_guards()[0], gone);
    // Unlisted for more than 20 days: dropped.
    gs.update(&nd2, now, &mut rng());
    gs.update(&nd2, now + Duration::from_secs(21 * 24 * 3600), &mut rng());
    assert!(!gs.sampled_guards().contains(&gone));
    // Unconfirmed guards expire after 120 days.
    gs.update(&nd2, now + Duration::from_secs(121 * 24 * 3600), &mut rng());
    assert!(gs.confirmed_guards().is_empty());
    let sampled = gs.sampled_guards();
    assert_eq!(sampled.len(), 6); // all expired, then resampled
}

#[test]
fn paths_use_guards() {
    let nd = netdir();
    let now = now();
    let mut gs = GuardSet::default();
    gs.update(&nd, now, &mut rng());
    let cfg = PathConfig::testing_network();
    let pb = PathBuilder::new(&nd, &cfg).with_guards(&gs, now);
    let first = gs.primary_guards()[0];
    let mut r = rng();
    for _ in 0..500 {
        let p = pb.exit_path(&mut r, ExitTarget::Port(80)).unwrap();
        if p[2] == first
            || nd
                .relay(&p[2])
                .unwrap()
                .in_same_family(nd.relay(&first).unwrap())
        {
            assert_ne!(p[0], first);
        } else {
            assert_eq!(p[0], first);
        }
    }
    let d = pb.one_hop_dir_path(&mut r).unwrap();
    assert!(gs.primary_guards().contains(&d));
}

#[test]
fn pinned_nodes_override_guards_and_positions() {
    let nd = netdir();
    let now = now();
    let mut gs = GuardSet::default();
    gs.update(&nd, now, &mut rng());
    let cfg = PathConfig::testing_network();
    // Pin every position to relays the guard set would not choose first.
    let relays: Vec<_> = nd.relays().map(|r| r.rsa_id).collect();
    let mut r = rng();
    let free = PathBuilder::new(&nd, &cfg)
        .exit_path(&mut r, ExitTarget::Port(80))
        .unwrap();
    let exit_id = nd.relay(&free[2]).unwrap().rsa_id;
    let not_exit: Vec<_> = relays.iter().filter(|x| **x != exit_id).collect();
    let mut only = NodeRestrictions::default();
    only.exit.insert(exit_id);
    only.entry.insert(*not_exit[0]);
    only.middle.insert(*not_exit[1]);
    let pb = PathBuilder::new(&nd, &cfg)
        .with_guards(&gs, now)
        .restricted(&only);
    let mut built = 0;
    for _ in 0..50 {
        // Pinned relays may be incompatible (same family): then no path,
        // never a path through other relays.
        if let Ok(p) = pb.exit_path(&mut r, ExitTarget::Port(80)) {
            assert_eq!(nd.relay(&p[0]).unwrap().rsa_id, *not_exit[0]);
            assert_eq!(nd.relay(&p[1]).unwrap().rsa_id, *not_exit[1]);
            assert_eq!(nd.relay(&p[2]).unwrap().rsa_id, exit_id);
            built += 1;
        }
    }
    assert!(built > 0, "no path through the pinned relays");
    // An exit pin that cannot exit gives an error, not another exit.
    let mut only2 = NodeRestrictions::default();
    only2.exit.insert([0xAA; 20]);
    let pb2 = PathBuilder::new(&nd, &cfg).restricted(&only2);
    assert!(pb2.exit_path(&mut r, ExitTarget::Port(80)).is_err());
}
