//! Shared fixtures: documents captured from a stock tor 0.4.9.11 private
//! network (3 authorities, 4 relays; relay1+relay2 are exits accepting
//! 80,443 and declare each other in MyFamily; relay3+relay4 share a FamilyId).
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, SystemTime};

use onionmix_netdoc::{AuthCertificate, AuthorityConfig, UnverifiedConsensus};

pub fn data(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR")))
        .expect("fixture present")
}

pub fn data_bytes(name: &str) -> Vec<u8> {
    std::fs::read(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR")))
        .expect("fixture present")
}

pub fn consensus_text() -> String {
    data("consensus-microdesc")
}

pub fn authorities() -> Vec<AuthorityConfig> {
    data("dirauthorities.txt")
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| AuthorityConfig::from_dirauthority_line(l).unwrap())
        .collect()
}

/// A time inside the captured consensus' validity.
pub fn now() -> SystemTime {
    UnverifiedConsensus::parse(&consensus_text())
        .unwrap()
        .lifetime()
        .valid_after
        + Duration::from_secs(5)
}

pub fn certs() -> Vec<AuthCertificate> {
    AuthCertificate::parse_all(&data("keys-all"), now())
        .into_iter()
        .map(|c| c.unwrap())
        .collect()
}

pub fn netdir() -> onionmix_netdoc::NetDir {
    let c = onionmix_netdoc::Consensus::parse_and_verify(
        &consensus_text(),
        &authorities(),
        &certs(),
        now(),
        onionmix_netdoc::TimeTolerance::STRICT,
    )
    .unwrap();
    let mut nd = onionmix_netdoc::NetDir::new(c);
    let batch = onionmix_netdoc::parse_microdescs(&data("microdescs"));
    assert!(batch.errors.is_empty());
    nd.add_microdescs(batch.microdescs);
    nd
}

pub fn id_of(nd: &onionmix_netdoc::NetDir, nick: &str) -> onionmix_netdoc::RelayId {
    nd.relays()
        .find(|r| r.nickname == nick)
        .expect("relay present")
        .id()
}
