//! Microdescriptors joined with the consensus into a NetDir.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use onionmix_netdoc::{
    Consensus, ExitTarget, Microdesc, NetDir, PortPolicy, RelayFlags, TimeTolerance,
    parse_microdescs,
};

fn consensus() -> Consensus {
    Consensus::parse_and_verify(
        &consensus_text(),
        &authorities(),
        &certs(),
        now(),
        TimeTolerance::STRICT,
    )
    .unwrap()
}

#[test]
fn microdescs_match_consensus_digests() {
    let c = consensus();
    let batch = parse_microdescs(&data("microdescs"));
    assert!(batch.errors.is_empty(), "{:?}", batch.errors);
    assert_eq!(batch.microdescs.len(), 7);
    let listed: Vec<[u8; 32]> = c.md_digests().copied().collect();
    for md in &batch.microdescs {
        assert!(listed.contains(&md.digest));
    }
    let mut nd = NetDir::new(c);
    assert_eq!(nd.missing_microdescs().len(), 7);
    assert_eq!(nd.relays().count(), 0);
    assert_eq!(nd.usable_fraction(), 0.0);
    assert!(!nd.has_enough_dir_info(Some(0.67)));
    assert_eq!(
        nd.add_microdescs(batch.microdescs.iter().take(3).cloned()),
        3
    );
    assert_eq!(nd.missing_microdescs().len(), 4);
    assert_eq!(nd.relays().count(), 3);
    // Re-adding is a no-op; unlisted microdescriptors are discarded.
    assert_eq!(
        nd.add_microdescs(batch.microdescs.iter().take(3).cloned()),
        0
    );
    let mut stranger = batch.microdescs[0].clone();
    stranger.digest = [0xAB; 32];
    assert_eq!(nd.add_microdescs([stranger]), 0);
    assert_eq!(
        nd.add_microdescs(batch.microdescs.iter().skip(3).cloned()),
        4
    );
    assert!(nd.missing_microdescs().is_empty());
    assert_eq!(nd.relays().count(), 7);
    assert!((nd.usable_fraction() - 1.0).abs() < 1e-9);
    assert!(nd.has_enough_dir_info(Some(0.67)));
    assert!(nd.has_enough_dir_info(None));
}

#[test]
fn tampered_microdesc_not_used() {
    let text = data("microdescs");
    // Changing any byte changes the SHA-256 digest: the consensus no longer
    // lists it, so it is discarded.
    let tampered = text.replacen("p accept 80,443", "p accept 81,443", 1);
    let batch = parse_microdescs(&tampered);
    assert_eq!(batch.microdescs.len(), 7);
    let mut nd = NetDir::new(consensus());
    assert_eq!(nd.add_microdescs(batch.microdescs), 6);
    assert_eq!(nd.missing_microdescs().len(), 1);
}

#[test]
fn relay_model() {
    let nd = netdir();
    let r1 = nd.relay(&id_of(&nd, "relay1")).unwrap();
    let r2 = nd.relay(&id_of(&nd, "relay2")).unwrap();
    let r3 = nd.relay(&id_of(&nd, "relay3")).unwrap();
    let r4 = nd.relay(&id_of(&nd, "relay4")).unwrap();
    let a1 = nd.relay(&id_of(&nd, "auth1")).unwrap();
    assert_eq!(
        hex::encode_upper(r1.rsa_id),
        "92E12F3038F55468F467EFA160D2D8697C8FA2A8"
    );
    assert_eq!(r1.ipv4.to_string(), "127.0.0.1:27121");
    assert_eq!(r1.dir_port, 0);
    assert_eq!(a1.dir_port, 27111);
    assert!(r1.ed_id.is_some());
    assert_ne!(r1.ntor_onion_key, [0; 32]);
    assert_eq!(
        r1.ipv4_policy,
        "accept 80,443".parse::<PortPolicy>().unwrap()
    );
    assert_eq!(r1.ipv6_policy, PortPolicy::reject_all());
    assert!(!a1.ipv4_policy.allows_some_port());
    assert!(r1.allows_exit_port(443, false) && !r1.allows_exit_port(22, false));
    assert!(r1.flags.contains(RelayFlags::EXIT.with(RelayFlags::GUARD)));
    assert!(r1.protocols.supports("Relay", 4));
    // MyFamily, declared mutually.
    assert!(r1.family.contains(&r2.rsa_id) && r2.family.contains(&r1.rsa_id));
    assert!(r1.in_same_family(r2));
    assert!(!r1.in_same_family(r3));
    // FamilyId (happy families).
    assert_eq!(
        r3.family_ids,
        vec!["ed25519:wVccQ4HidT6ZPwrtSbGl+vNM3IafLp+cgnNBEZyrRYU".to_string()]
    );
    assert!(r3.in_same_family(r4));
    assert!(r1.in_same_subnet(r3)); // all on 127.0.0.1
    assert_eq!(nd.relay_by_rsa_id(&r1.rsa_id).unwrap().nickname, "relay1");
    assert!(nd.relay_by_rsa_id(&[0; 20]).is_none());
    assert!(nd.listed_by_rsa_id(&r1.rsa_id).is_some());
    // Single microdesc parse gives the same digest.
    let text = data("microdescs");
    let start = text.find("onion-key").unwrap();
    let next = text[start..]
        .find("\nonion-key")
        .map(|i| i + start + 1)
        .unwrap();
    let one = Microdesc::parse(&text[start..next]).unwrap();
    assert_eq!(parse_microdescs(&text).microdescs[0], one);
    let _ = ExitTarget::Port(80);
}

#[test]
fn one_sided_family_is_not_a_family() {
    let nd = netdir();
    let mut r1 = nd.relay(&id_of(&nd, "relay1")).unwrap().clone();
    let mut r3 = nd.relay(&id_of(&nd, "relay3")).unwrap().clone();
    r1.family.push(r3.rsa_id);
    assert!(!r1.in_same_family(&r3));
    r3.family.push(r1.rsa_id);
    assert!(r1.in_same_family(&r3));
}

#[test]
fn new_consensus_keeps_microdescs() {
    let nd = netdir();
    let nd2 = nd.with_new_consensus(consensus());
    assert!(nd2.missing_microdescs().is_empty());
    assert_eq!(nd2.relays().count(), 7);
}

#[test]
fn paths_needed_threshold() {
    let nd = netdir();
    assert_eq!(nd.paths_needed(None), 0.6);
    assert_eq!(nd.paths_needed(Some(0.67)), 0.67);
    assert_eq!(nd.paths_needed(Some(0.01)), 0.25);
    assert_eq!(nd.paths_needed(Some(2.0)), 0.95);
}

#[test]
fn shared_random_values_and_hsdirs_for_the_hash_ring() {
    // A stock tor 0.4.9 testing network booted in the reveal phase: its
    // first consensus of a run carries an SRV made from no reveals (and no
    // previous value), which our SRV computation reproduces.
    let c = consensus();
    let cur = *c.shared_rand_current().expect("shared-rand-current-value");
    assert_eq!(cur.num_reveals, 0);
    assert_eq!(
        cur.encoded(),
        "zxJao+gBmFMSezvz/VXkEWEQJD5b/z+7AXNCGoLFVW0="
    );
    assert_eq!(cur, onionmix_netdoc::srv::compute_srv(&[], None));
    assert!(c.shared_rand_previous().is_none());

    // Every relay of that network is an HSDir with HSDir=2: all are on
    // the ring, each with its Ed25519 identity from its microdescriptor.
    let nd = netdir();
    assert_eq!(nd.shared_rand_current(), Some(&cur));
    let ring: Vec<_> = nd.hsdirs().collect();
    assert_eq!(ring.len(), 7);
    for (r, ed) in &ring {
        assert!(r.flags.contains(RelayFlags::HSDIR));
        assert_eq!(r.ed_id.as_ref(), Some(*ed));
    }
    // Without the flag, or without HSDir=2, or without a microdescriptor,
    // a relay is not on the ring.
    let mut relays: Vec<onionmix_netdoc::ConsensusRelay> = nd.listed().to_vec();
    relays[0].flags.remove(RelayFlags::HSDIR);
    relays[1].protocols = "Cons=1-2 HSDir=1 Link=4-5".parse().unwrap();
    let no_md = relays[2].md_digest;
    let mds: Vec<Microdesc> = nd
        .microdescs()
        .filter(|m| m.digest != no_md)
        .cloned()
        .collect();
    let changed = Consensus::from_parts(
        nd.lifetime(),
        nd.params().clone(),
        Default::default(),
        relays,
    )
    .with_shared_rand(None, None);
    let mut nd2 = NetDir::new(changed);
    nd2.add_microdescs(mds);
    assert!(nd2.shared_rand_current().is_none());
    let on_ring: Vec<&str> = nd2.hsdirs().map(|(r, _)| r.nickname.as_str()).collect();
    assert_eq!(on_ring.len(), 4, "{on_ring:?}");
}
