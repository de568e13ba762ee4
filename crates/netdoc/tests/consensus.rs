//! Consensus parsing and verification against captured stock-tor documents.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::time::Duration;

use common::*;
use onionmix_netdoc::{
    AuthCertificate, AuthorityConfig, CertError, Consensus, ConsensusError, RelayFlags,
    TimeTolerance, UnverifiedConsensus,
};
use rand::SeedableRng;

#[test]
fn verify_captured_consensus() {
    let text = consensus_text();
    let auths = authorities();
    assert_eq!(auths.len(), 3);
    let certs = certs();
    assert_eq!(certs.len(), 3);
    let c =
        Consensus::parse_and_verify(&text, &auths, &certs, now(), TimeTolerance::STRICT).unwrap();
    assert_eq!(c.signed_by().len(), 3);
    assert_eq!(c.relays().len(), 7);
    let lt = c.lifetime();
    assert!(lt.valid_after < lt.fresh_until && lt.fresh_until < lt.valid_until);
    assert_eq!(c.fresh_until(), lt.fresh_until);
    assert_eq!(c.valid_until(), lt.valid_until);
    // Test network: 20 s voting interval, 2 intervals valid.
    assert_eq!(
        lt.fresh_until.duration_since(lt.valid_after).unwrap(),
        Duration::from_secs(20)
    );
    assert_eq!(
        lt.valid_until.duration_since(lt.valid_after).unwrap(),
        Duration::from_secs(40)
    );

    let auth1 = c.relays().iter().find(|r| r.nickname == "auth1").unwrap();
    assert!(
        auth1
            .flags
            .contains(RelayFlags::AUTHORITY.with(RelayFlags::GUARD))
    );
    assert!(
        auth1
            .flags
            .contains(RelayFlags::RUNNING.with(RelayFlags::VALID))
    );
    assert_eq!(auth1.ipv4.to_string(), "127.0.0.1:27101");
    assert_eq!(auth1.dir_port, 27111);
    assert_eq!(
        hex::encode_upper(auth1.rsa_id),
        "E7C0D49DBD7080A978C4929ADA22BB9348B1C68C"
    );
    assert_eq!(auth1.bandwidth, 8);
    assert!(!auth1.measured);
    assert!(auth1.protocols.supports("Relay", 6));
    assert!(auth1.protocols.supports("FlowCtrl", 2));
    assert!(auth1.protocols.supports("Link", 5));
    assert_eq!(auth1.version.as_deref(), Some("Tor 0.4.9.11"));
    assert!(c.required_client_protocols().supports("Link", 4));
    assert!(c.recommended_client_protocols().supports("Relay", 4));
    let w = c.bandwidth_weights();
    assert_eq!(
        (w.wgg, w.wgd, w.wmd, w.wme, w.wee, w.scale),
        (10000, 3333, 3333, 0, 10000, 10000)
    );
}

#[test]
fn refresh_schedule() {
    let u = UnverifiedConsensus::parse(&consensus_text()).unwrap();
    let lt = u.lifetime();
    let (start, end) = lt.refresh_window();
    // 3/4 of the 20 s interval after fresh-until; 7/8 of the remaining 5 s.
    assert_eq!(start, lt.fresh_until + Duration::from_secs(15));
    assert_eq!(end, start + Duration::from_millis(4375));
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    for _ in 0..100 {
        let t = lt.pick_refresh_time(&mut rng);
        assert!(t >= start && t <= end);
    }
}

#[test]
fn expired_and_not_yet_valid() {
    let text = consensus_text();
    let lt = UnverifiedConsensus::parse(&text).unwrap().lifetime();
    let late = lt.valid_until + Duration::from_secs(1);
    let err =
        Consensus::parse_and_verify(&text, &authorities(), &certs(), late, TimeTolerance::STRICT)
            .unwrap_err();
    assert_eq!(
        err,
        ConsensusError::Expired {
            valid_until: lt.valid_until,
            now: late
        }
    );
    // Inside tor's 24 h "reasonably live" tolerance it is still accepted.
    assert!(
        Consensus::parse_and_verify(
            &text,
            &authorities(),
            &certs(),
            late,
            TimeTolerance::default()
        )
        .is_ok()
    );
    let very_late = lt.valid_until + Duration::from_secs(24 * 3600 + 1);
    assert!(matches!(
        Consensus::parse_and_verify(
            &text,
            &authorities(),
            &certs(),
            very_late,
            TimeTolerance::default()
        ),
        Err(ConsensusError::Expired { .. })
    ));
    let early = lt.valid_after - Duration::from_secs(1);
    let err = Consensus::parse_and_verify(
        &text,
        &authorities(),
        &certs(),
        early,
        TimeTolerance::STRICT,
    )
    .unwrap_err();
    assert_eq!(
        err,
        ConsensusError::NotYetValid {
            valid_after: lt.valid_after,
            now: early
        }
    );
    let very_early = lt.valid_after - Duration::from_secs(24 * 3600 + 1);
    assert!(matches!(
        Consensus::parse_and_verify(
            &text,
            &authorities(),
            &certs(),
            very_early,
            TimeTolerance::default()
        ),
        Err(ConsensusError::NotYetValid { .. })
    ));
}

#[test]
fn tampered_body_rejected() {
    let text = consensus_text();
    let tampered = text.replacen("w Bandwidth=8 ", "w Bandwidth=9 ", 1);
    assert_ne!(text, tampered);
    let err = Consensus::parse_and_verify(
        &tampered,
        &authorities(),
        &certs(),
        now(),
        TimeTolerance::STRICT,
    )
    .unwrap_err();
    assert_eq!(
        err,
        ConsensusError::InsufficientSignatures { good: 0, needed: 2 }
    );
}

fn drop_signatures(text: &str, keep: usize) -> String {
    let idx = text.find("directory-signature ").unwrap();
    let (head, sigs) = text.split_at(idx);
    let blocks: Vec<&str> = sigs.split_inclusive("-----END SIGNATURE-----\n").collect();
    assert_eq!(blocks.len(), 3);
    format!("{head}{}", blocks[..keep].concat())
}

#[test]
fn too_few_signatures_rejected() {
    let text = drop_signatures(&consensus_text(), 1);
    let err = Consensus::parse_and_verify(
        &text,
        &authorities(),
        &certs(),
        now(),
        TimeTolerance::STRICT,
    )
    .unwrap_err();
    assert_eq!(
        err,
        ConsensusError::InsufficientSignatures { good: 1, needed: 2 }
    );
    // Two of three is a strict majority.
    let text = drop_signatures(&consensus_text(), 2);
    let c = Consensus::parse_and_verify(
        &text,
        &authorities(),
        &certs(),
        now(),
        TimeTolerance::STRICT,
    )
    .unwrap();
    assert_eq!(c.signed_by().len(), 2);
}

#[test]
fn unknown_authorities_rejected() {
    let text = consensus_text();
    let fake: Vec<AuthorityConfig> = (1..=3u8)
        .map(|i| AuthorityConfig::new(format!("fake{i}"), [i; 20]))
        .collect();
    let err = Consensus::parse_and_verify(&text, &fake, &certs(), now(), TimeTolerance::STRICT)
        .unwrap_err();
    assert_eq!(
        err,
        ConsensusError::InsufficientSignatures { good: 0, needed: 2 }
    );

    // 3 real + 2 unknown: 3 of 5 is a majority.
    let mut five = authorities();
    five.extend(fake.iter().take(2).cloned());
    assert!(
        Consensus::parse_and_verify(&text, &five, &certs(), now(), TimeTolerance::STRICT).is_ok()
    );
    // 3 real + 4 unknown: 3 of 7 is not.
    let mut seven = authorities();
    seven.extend(fake.iter().cloned());
    seven.push(AuthorityConfig::new("fake4", [4; 20]));
    let err = Consensus::parse_and_verify(&text, &seven, &certs(), now(), TimeTolerance::STRICT)
        .unwrap_err();
    assert_eq!(
        err,
        ConsensusError::InsufficientSignatures { good: 3, needed: 4 }
    );
    // No authorities at all.
    assert!(matches!(
        Consensus::parse_and_verify(&text, &[], &certs(), now(), TimeTolerance::STRICT),
        Err(ConsensusError::InsufficientSignatures { good: 0, needed: 1 })
    ));
}

#[test]
fn missing_certificates_reported() {
    let text = consensus_text();
    let all = certs();
    let u = UnverifiedConsensus::parse(&text).unwrap();
    let mut missing = u.missing_certificates(&authorities(), &all[..1], now());
    missing.sort();
    let mut expect: Vec<[u8; 20]> = all[1..].iter().map(|c| c.id_fingerprint()).collect();
    expect.sort();
    assert_eq!(missing, expect);
    assert!(
        u.missing_certificates(&authorities(), &all, now())
            .is_empty()
    );
    let err = u
        .verify(&authorities(), &all[..1], now(), TimeTolerance::STRICT)
        .unwrap_err();
    match err {
        ConsensusError::MissingCertificates(mut m) => {
            m.sort();
            assert_eq!(m, expect);
        }
        e => panic!("unexpected {e:?}"),
    }
    // Certificates of non-configured signers do not count.
    let err = Consensus::parse_and_verify(&text, &authorities(), &[], now(), TimeTolerance::STRICT)
        .unwrap_err();
    assert!(matches!(err, ConsensusError::MissingCertificates(m) if m.len() == 3));
}

#[test]
fn signing_keys_listed() {
    let u = UnverifiedConsensus::parse(&consensus_text()).unwrap();
    let keys = u.signing_keys();
    assert_eq!(keys.len(), 3);
    for c in certs() {
        assert!(keys.contains(&(c.id_fingerprint(), c.signing_key_fingerprint())));
    }
}

#[test]
fn certificates_checked() {
    let keys = data("keys-all");
    let lt = UnverifiedConsensus::parse(&consensus_text())
        .unwrap()
        .lifetime();
    let certs = certs();
    for c in &certs {
        assert!(c.published() <= lt.valid_after);
        assert!(c.expires() > lt.valid_until);
        assert_eq!(
            c.dir_address().map(|a| a.ip().to_string()),
            Some("127.0.0.1".into())
        );
    }
    // Expired at a time past dir-key-expires.
    let later = certs.iter().map(|c| c.expires()).max().unwrap() + Duration::from_secs(1);
    let r = AuthCertificate::parse_all(&keys, later);
    assert!(
        r.iter()
            .all(|c| matches!(c, Err(CertError::Expired { .. })))
    );
    // Published far in the future relative to now.
    let earlier =
        certs.iter().map(|c| c.published()).min().unwrap() - Duration::from_secs(3 * 24 * 3600);
    let r = AuthCertificate::parse_all(&keys, earlier);
    assert!(
        r.iter()
            .all(|c| matches!(c, Err(CertError::NotYetValid { .. })))
    );
    // Tampered certificate: signature check fails, the others still load.
    let first_exp = keys.find("dir-key-expires 20").unwrap() + "dir-key-expires 20".len();
    let mut tampered = keys.clone();
    let digit = &keys[first_exp..first_exp + 1];
    let repl = if digit == "9" { "8" } else { "9" };
    tampered.replace_range(first_exp..first_exp + 1, repl);
    let r = AuthCertificate::parse_all(&tampered, now());
    assert_eq!(r.len(), 3);
    assert!(matches!(r[0], Err(CertError::BadSignature)));
    assert!(r[1].is_ok() && r[2].is_ok());
    // Expired certificate is not used by verify (its signature then is missing).
    let err = Consensus::parse_and_verify(
        &consensus_text(),
        &authorities(),
        &certs,
        later,
        TimeTolerance {
            pre_valid: Duration::ZERO,
            post_valid: Duration::from_secs(10 * 365 * 24 * 3600),
        },
    )
    .unwrap_err();
    assert!(matches!(err, ConsensusError::MissingCertificates(_)));
}

#[test]
fn malformed_consensus() {
    for bad in [
        "",
        "network-status-version 3\n",
        "network-status-version 3 microdesc\nvote-status consensus\n",
        &consensus_text().replace("valid-until", "valid-untill"),
        &consensus_text()[..2000],
    ] {
        assert!(matches!(
            UnverifiedConsensus::parse(bad),
            Err(ConsensusError::Malformed(_))
        ));
    }
    let mut two = consensus_text();
    two.push_str("junk after\n");
    assert!(UnverifiedConsensus::parse(&two).is_err());
}
