//! Path choice on a captured stock tor network (3 authorities, 4 relays;
//! netdoc's fixtures): vanguards-lite shapes onion-service circuits only.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use onionmix_netdoc::{
    AuthCertificate, AuthorityConfig, Consensus, NetDir, TimeTolerance, UnverifiedConsensus,
    parse_microdescs,
};

use super::DirMgr;
use crate::client::circmgr::Purpose;
use crate::client::config::test_config;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../netdoc/tests/data/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

pub(crate) fn netdir() -> NetDir {
    let text = fixture("consensus-microdesc");
    let now = UnverifiedConsensus::parse(&text)
        .unwrap()
        .lifetime()
        .valid_after
        + Duration::from_secs(5);
    let auths: Vec<AuthorityConfig> = fixture("dirauthorities.txt")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| AuthorityConfig::from_dirauthority_line(l).unwrap())
        .collect();
    let certs: Vec<AuthCertificate> = AuthCertificate::parse_all(&fixture("keys-all"), now)
        .into_iter()
        .map(|c| c.unwrap())
        .collect();
    let c = Consensus::parse_and_verify(&text, &auths, &certs, now, TimeTolerance::STRICT).unwrap();
    let mut nd = NetDir::new(c);
    nd.add_microdescs(parse_microdescs(&fixture("microdescs")).microdescs);
    nd
}

fn dirmgr(data: &std::path::Path, extra: &str) -> DirMgr {
    let d = DirMgr::new(Arc::new(test_config(data, extra))).unwrap();
    d.install_netdir(netdir());
    d
}

fn middles_of(paths: impl Iterator<Item = Vec<[u8; 20]>>) -> HashSet<[u8; 20]> {
    paths.map(|p| p[1]).collect()
}

#[test]
fn vanguards_lite_applies_to_onion_service_circuits_only() {
    let tmp = tempfile::tempdir().unwrap();
    let d = dirmgr(tmp.path(), "");
    // Layer 2 guards chosen so that, whatever the guard and exit, some
    // middle outside the set is possible: auth3 and relay4 are outside,
    // and no guard or exit rules out both (relay2 has no bandwidth).
    let nd = d.netdir().unwrap();
    let id = |n: &str| nd.relays().find(|r| r.nickname == n).unwrap().rsa_id;
    let chosen = ["auth1", "auth2", "relay1", "relay3"].map(id);
    d.set_layer2(&chosen);
    let none = HashSet::new();
    let hs = middles_of((0..300).map(|_| {
        d.internal_path(&none, &|_| true)
            .unwrap()
            .iter()
            .map(|h| h.rsa_id)
            .collect()
    }));
    let l2: HashSet<[u8; 20]> = d.layer2_members().into_iter().collect();
    assert_eq!(l2, chosen.into_iter().collect(), "the set was kept");
    assert!(hs.is_subset(&l2), "onion-service middles from layer 2");
    // Exit circuits draw their middle from the whole network: some middle
    // outside the 4 layer 2 guards shows up.
    let exit = middles_of((0..300).map(|_| {
        d.pick_path(Purpose::Exit(None), &none)
            .unwrap()
            .iter()
            .map(|h| h.rsa_id)
            .collect()
    }));
    assert!(
        !exit.is_subset(&l2),
        "exit circuits must not be limited to the layer 2 guards"
    );
}

#[test]
fn pinned_middles_win_over_vanguards_lite() {
    let nd = netdir();
    let id = |n: &str| nd.relays().find(|r| r.nickname == n).unwrap().rsa_id;
    // Two middles of different families, so that any guard leaves one.
    let pinned = [id("relay3"), id("auth3")];
    let list: Vec<String> = pinned
        .iter()
        .map(|i| format!("\"{}\"", hex::encode_upper(i)))
        .collect();
    let tmp = tempfile::tempdir().unwrap();
    let d = dirmgr(tmp.path(), &format!("middle_nodes = [{}]", list.join(", ")));
    // A layer 2 set without them: used, it would give other middles.
    d.set_layer2(&["auth1", "auth2", "relay1", "relay4"].map(id));
    let none = HashSet::new();
    for _ in 0..50 {
        let p = d.internal_path(&none, &|_| true).unwrap();
        assert!(pinned.contains(&p[1].rsa_id), "onion-service middle pinned");
        let p = d.pick_path(Purpose::Exit(None), &none).unwrap();
        assert!(pinned.contains(&p[1].rsa_id), "exit middle pinned");
    }
}
