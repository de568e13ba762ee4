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
use crate::client::config::ClientConfig;

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!(
        "{}/../netdoc/tests/data/{name}",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap()
}

fn netdir() -> NetDir {
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
    let text = format!(
        r#"
data_dir = "{}"
socks_listen = "127.0.0.1:0"
testing_network = true
{extra}
[[authority]]
nickname = "auth0"
v3ident = "0123456789ABCDEF0123456789ABCDEF01234567"
fingerprint = "0123456789ABCDEF0123456789ABCDEF01234567"
dir_addr = "127.0.0.1:7000"
or_addr = "127.0.0.1:5000"
"#,
        data.display()
    );
    let d = DirMgr::new(Arc::new(ClientConfig::parse(&text).unwrap())).unwrap();
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
    let none = HashSet::new();
    let hs = middles_of((0..300).map(|_| {
        d.internal_path(&none, &|_| true)
            .unwrap()
            .iter()
            .map(|h| h.rsa_id)
            .collect()
    }));
    let l2: HashSet<[u8; 20]> = d.layer2_members().into_iter().collect();
    assert_eq!(l2.len(), 4);
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
    let pinned = nd.relays().find(|r| r.nickname == "relay3").unwrap();
    let fp = hex::encode_upper(pinned.rsa_id);
    let tmp = tempfile::tempdir().unwrap();
    let d = dirmgr(tmp.path(), &format!("middle_nodes = [\"{fp}\"]"));
    let none = HashSet::new();
    for _ in 0..50 {
        let p = d.internal_path(&none, &|r| r.rsa_id != pinned.rsa_id);
        if let Ok(p) = p {
            assert_eq!(p[1].rsa_id, pinned.rsa_id);
        }
        let p = d.pick_path(Purpose::Exit(None), &none).unwrap();
        assert_eq!(p[1].rsa_id, pinned.rsa_id);
    }
}
