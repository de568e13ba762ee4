#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use crate::authority::AuthorityConfig;
use crate::consensus::{ConsensusError, TimeTolerance, UnverifiedConsensus};
use crate::srv::{Commit, SharedRandom, SrVoteInfo};
use onionmix_crypto::keys::AuthorityKeys;
use onionmix_crypto::rsa_id::{RsaKeypair, pem_wrap};
use sha1::{Digest as _, Sha1};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const NOW: u64 = 1_790_000_000;

fn keys() -> &'static Vec<AuthorityKeys> {
    static K: OnceLock<Vec<AuthorityKeys>> = OnceLock::new();
    K.get_or_init(|| {
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
        (0..3)
            .map(|_| {
                AuthorityKeys::generate(&mut rng, 2048, NOW - 3600, 365 * 86400, None).unwrap()
            })
            .collect()
    })
}

fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(NOW)
}

fn entry(i: u8, flags: &[&str]) -> RouterEntry {
    RouterEntry {
        nickname: format!("relay{i}"),
        rsa_id: [i; 20],
        ed_id: [i.wrapping_add(100); 32],
        desc_digest: [i; 20],
        published: NOW - 60,
        address: Ipv4Addr::new(127, 0, 0, 1),
        or_port: 5000 + i as u16,
        dir_port: 0,
        flags: flags.iter().map(|s| s.to_string()).collect(),
        version: Some("onionmix 0.1.0".into()),
        protocols: "Cons=1-2 Desc=1-2 Link=4-5 Relay=2-4".into(),
        bandwidth_kb: 100 + i as u64,
        policy_summary: "reject 1-65535".into(),
        md_digest: [i; 32],
    }
}

fn header(k: &AuthorityKeys, i: usize) -> VoteHeader {
    VoteHeader {
        nickname: format!("omauth{i}"),
        v3ident: k.identity.public().fingerprint(),
        address: Ipv4Addr::new(127, 0, 0, 1),
        dir_port: 7000 + i as u16,
        or_port: 5000 + i as u16,
        contact: "test@example.invalid".into(),
        published: NOW - 10,
        valid_after: NOW,
        fresh_until: NOW + 300,
        valid_until: NOW + 900,
        voting_delay: (4, 4),
        known_flags: ["Running", "Valid", "Fast", "Guard", "Exit", "V2Dir"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        protocols: default_protocol_lines(),
        params: [("cbttestfreq".to_string(), 10 + i as i32)]
            .into_iter()
            .collect(),
        shared_rand: sr_info(k, i),
    }
}

fn sr_value(letter: u8) -> SharedRandom {
    SharedRandom {
        num_reveals: 3,
        value: [letter; 32],
    }
}

/// Every authority participates with its commit (and reveal); all agree
/// on the previous value 'P'; the current value is 'C' except for the
/// third authority's 'X'.
fn sr_info(k: &AuthorityKeys, i: usize) -> SrVoteInfo {
    use rand::SeedableRng;
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(i as u64);
    SrVoteInfo {
        participate: true,
        commits: vec![Commit::generate(
            k.identity.public().fingerprint(),
            NOW - 240,
            &mut rng,
        )],
        previous: Some(sr_value(b'P')),
        current: Some(sr_value(if i == 2 { b'X' } else { b'C' })),
    }
}

const RGFV: &[&str] = &["Running", "Valid", "Fast", "Guard", "V2Dir"];

/// Three votes: relay1 everywhere; relay2 Guard only in one vote;
/// relay3 in one vote only; relay4 Running in one vote only.
fn votes() -> Vec<String> {
    keys()
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mut rs = vec![entry(1, RGFV)];
            rs.push(entry(
                2,
                if i == 0 {
                    RGFV
                } else {
                    &["Running", "Valid", "Fast", "Exit"]
                },
            ));
            if i == 0 {
                rs.push(entry(3, RGFV));
            }
            rs.push(entry(4, if i == 2 { RGFV } else { &["Valid"] }));
            build_vote(&header(k, i), &rs, &k.certificate, &k.signing).unwrap()
        })
        .collect()
}

#[test]
fn signatures_are_made_and_checked_outside_fuzzing_builds() {
    // Only cargo-fuzz builds (`--cfg fuzzing`) stand in for vote and router
    // descriptor signatures; tests, CI and releases never do.
    const { assert!(!crate::FUZZING_ACCEPTS_SIGNATURES) };
    let v = &votes()[0];
    let at = v.rfind("\ndirectory-signature ").unwrap();
    assert!(
        !v[at..].contains("AAAAAAAAAAAAAAAAAAAA"),
        "a real signature"
    );
}

#[test]
fn votes_round_trip_and_tampering_is_caught() {
    let texts = votes();
    let v = parse_vote(&texts[0], now()).unwrap();
    assert_eq!(v.header.nickname, "omauth0");
    assert_eq!(v.relays.len(), 4);
    assert_eq!(v.relays[0], entry(1, RGFV));
    // The shared-random lines come back as written.
    assert_eq!(v.header.shared_rand, sr_info(&keys()[0], 0));
    assert!(texts[0].contains("\ncontact test@example.invalid\nshared-rand-participate\n"));
    let bad = texts[0].replace("relay1", "relayX");
    assert!(matches!(
        parse_vote(&bad, now()),
        Err(VoteError::BadSignature(_))
    ));
    // A vote presented with another authority's certificate.
    let c0 = &keys()[0].certificate;
    let c1 = &keys()[1].certificate;
    let swapped = texts[0].replace(c0.as_str(), c1.as_str());
    assert!(parse_vote(&swapped, now()).is_err());
    assert!(parse_vote("network-status-version 3\n", now()).is_err());
    assert!(parse_vote("", now()).is_err());
}

#[test]
fn consensus_from_votes_verifies_with_the_client_code() {
    let votes: Vec<Vote> = votes()
        .iter()
        .map(|t| parse_vote(t, now()).unwrap())
        .collect();
    let body = compute_consensus(&votes, 3, SrParams::default()).unwrap();
    // Every authority computes the same text from the same votes.
    let mut rev = votes.clone();
    rev.reverse();
    assert_eq!(
        compute_consensus(&rev, 3, SrParams::default()).unwrap(),
        body
    );
    let sigs: Vec<ConsensusSignature> = keys()
        .iter()
        .map(|k| sign_consensus(&body, k.identity.public().fingerprint(), &k.signing).unwrap())
        .collect();
    let text = assemble_consensus(&body, &sigs);
    let auths: Vec<AuthorityConfig> = keys()
        .iter()
        .enumerate()
        .map(|(i, k)| AuthorityConfig::new(format!("a{i}"), k.identity.public().fingerprint()))
        .collect();
    let certs: Vec<AuthCertificate> = keys()
        .iter()
        .map(|k| AuthCertificate::parse(&k.certificate, now()).unwrap())
        .collect();
    let c = UnverifiedConsensus::parse(&text)
        .unwrap()
        .verify(&auths, &certs, now(), TimeTolerance::default())
        .unwrap();
    let names: Vec<&str> = c.relays().iter().map(|r| r.nickname.as_str()).collect();
    // relay3 (one vote of three) and relay4 (Running in one) are out.
    assert_eq!(names, ["relay1", "relay2"]);
    let r2 = &c.relays()[1];
    assert!(!r2.flags.contains(crate::RelayFlags::GUARD));
    assert!(r2.flags.contains(crate::RelayFlags::EXIT));
    assert!(c.relays()[0].flags.contains(crate::RelayFlags::GUARD));
    assert_eq!(c.params().get("cbttestfreq"), Some(&11));
    assert!(body.contains("w Bandwidth=20 Unmeasured=1\n"));

    // One signature of three is not enough for a client.
    let one = assemble_consensus(&body, &sigs[..1]);
    let e = UnverifiedConsensus::parse(&one)
        .unwrap()
        .verify(&auths, &certs, now(), TimeTolerance::default())
        .unwrap_err();
    assert!(
        matches!(e, ConsensusError::InsufficientSignatures { .. }),
        "{e}"
    );

    // Two votes of three are a majority; one is not.
    assert!(compute_consensus(&votes[..2], 3, SrParams::default()).is_ok());
    assert_eq!(
        compute_consensus(&votes[..1], 3, SrParams::default()),
        Err(VoteError::NotEnoughVotes { have: 1, need: 2 })
    );
}

#[test]
fn detached_signatures_round_trip() {
    let votes: Vec<Vote> = votes()
        .iter()
        .map(|t| parse_vote(t, now()).unwrap())
        .collect();
    let body = compute_consensus(&votes, 3, SrParams::default()).unwrap();
    let k = &keys()[1];
    let sig = sign_consensus(&body, k.identity.public().fingerprint(), &k.signing).unwrap();
    let doc = build_detached(NOW, NOW + 300, NOW + 900, &body, &sig);
    let d = parse_detached(&doc).unwrap();
    assert_eq!(d.valid_after, NOW);
    let cert = AuthCertificate::parse(&k.certificate, now()).unwrap();
    assert!(d.verify(&body, &cert));
    assert!(!d.verify(&body.replace("relay1", "relayZ"), &cert));
    let other = AuthCertificate::parse(&keys()[0].certificate, now()).unwrap();
    assert!(!d.verify(&body, &other));
    assert!(parse_detached("valid-after 2026-01-01 00:00:00\n").is_err());
}

#[test]
fn bandwidth_weights_match_stock_tor() {
    // A 0.4.9 test network: seven Guard+Exit relays with bandwidths
    // 0,0,4,0,1,0,0; tor wrote these weights for it.
    let relays: Vec<(u64, bool, bool)> = [0, 0, 4, 0, 1, 0, 0]
        .iter()
        .map(|b| (*b, true, true))
        .collect();
    let w: Vec<String> = bandwidth_weights(&relays, 10000)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    assert_eq!(
        w.join(" "),
        "Wbd=3333 Wbe=0 Wbg=0 Wbm=10000 Wdb=10000 Web=10000 Wed=3333 Wee=10000 Weg=3333 \
         Wem=10000 Wgb=10000 Wgd=3333 Wgg=10000 Wgm=10000 Wmb=10000 Wmd=3333 Wme=0 Wmg=0 Wmm=10000"
    );
    // Case 1 (nothing scarce): the weights of each position sum to scale.
    let w = bandwidth_weights(
        &[(100, true, false), (100, false, true), (100, false, false)],
        10000,
    );
    let get = |k: &str| w.iter().find(|(n, _)| *n == k).unwrap().1;
    assert_eq!(get("Wgg") + get("Wmg"), 10000);
    assert_eq!(get("Wee") + get("Wme"), 10000);
    for &(_, v) in &w {
        assert!((0..=10000).contains(&v));
    }
}

#[test]
fn bandwidth_weights_fit_in_32_bits_at_any_scale() {
    // Found by the `vote` fuzz target: `bwweightscale=1000030004` gave
    // weights over i32::MAX, which tor-netdoc refuses in a consensus.
    let relays = [(20, false, false)];
    for scale in [1, 10000, 1_000_030_004, i64::from(i32::MAX)] {
        for (k, v) in bandwidth_weights(&relays, scale) {
            assert!(i32::try_from(v).is_ok(), "{k}={v} at scale {scale}");
        }
    }
}

#[test]
fn microdescs_parse_with_the_client_code() {
    let p = MicrodescParts {
        onion_key_pem: Some({
            use rand::SeedableRng;
            let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
            RsaKeypair::generate(&mut rng, 1024)
                .unwrap()
                .public()
                .to_pem()
        }),
        ntor_onion_key: [9; 32],
        family: vec!["$".to_string() + &"AB".repeat(20)],
        policy_summary: "reject 25,119".into(),
        ed_id: [7; 32],
        quic_port: None,
    };
    let (text, digest) = build_microdesc(&p);
    let md = crate::microdesc::Microdesc::parse(&text).unwrap();
    assert_eq!(md.digest, digest);
    assert_eq!(md.quic_port, None);
    // The QUIC line reaches clients, in single and batch parsing; the
    // digest covers it.
    let (tq, dq) = build_microdesc(&MicrodescParts {
        quic_port: Some(5001),
        ..p.clone()
    });
    assert!(tq.ends_with("\nonionmix-quic 5001\n"), "{tq}");
    assert_ne!(dq, digest);
    let mdq = crate::microdesc::Microdesc::parse(&tq).unwrap();
    assert_eq!((mdq.digest, mdq.quic_port), (dq, Some(5001)));
    let batch = crate::microdesc::parse_microdescs(&format!("{text}{tq}"));
    let ports: Vec<_> = batch.microdescs.iter().map(|m| m.quic_port).collect();
    assert_eq!(ports, [None, Some(5001)]);
    assert_eq!(md.ntor_onion_key, [9; 32]);
    assert!(md.ipv4_policy.allows_port(80));
    assert!(!md.ipv4_policy.allows_port(25));
    let (t2, _) = build_microdesc(&MicrodescParts {
        policy_summary: "reject 1-65535".into(),
        ..p
    });
    assert!(!t2.contains("\np "));
}

#[test]
fn platform_versions() {
    assert_eq!(
        version_from_platform("Tor 0.4.9.11 on Linux").as_deref(),
        Some("Tor 0.4.9.11")
    );
    assert_eq!(version_from_platform(""), None);
}

/// What stock tor 0.4.9.11 authorities put in a consensus (read from a
/// `tor-basic` network's cached-consensus).
const STOCK_0_4_9_LINES: [&str; 4] = [
    "Cons=2 Desc=2 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4 HSRend=2 Link=4-5 Microdesc=2 Relay=2-4",
    "Cons=2 Desc=2 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4-5 HSRend=2 Link=4-5 LinkAuth=3 Microdesc=2 Relay=2-4",
    "Cons=2 Desc=2 FlowCtrl=1 Link=4 Microdesc=2 Relay=2",
    "Cons=2 Desc=2 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4-5 HSRend=2 Link=4-5 LinkAuth=3 Microdesc=2 Relay=2-4",
];

#[test]
fn protocol_lines_are_stock_0_4_9s() {
    for (ours, stock) in default_protocol_lines().iter().zip(STOCK_0_4_9_LINES) {
        let ours: crate::types::Protocols = ours.parse().unwrap();
        let stock: crate::types::Protocols = stock.parse().unwrap();
        // Nothing asked that stock tor does not ask.
        assert!(stock.missing_from(&ours).is_empty(), "{ours}");
        // Everything stock asks.
        assert!(ours.missing_from(&stock).is_empty(), "{stock}");
    }
}

fn parsed_votes(texts: &[String]) -> Vec<Vote> {
    texts
        .iter()
        .map(|t| parse_vote(t, now()).unwrap())
        .collect()
}

fn consensus_of(body: &str) -> crate::Consensus {
    let k = &keys()[0];
    let sig = sign_consensus(body, k.identity.public().fingerprint(), &k.signing).unwrap();
    UnverifiedConsensus::parse(&assemble_consensus(body, &[sig]))
        .unwrap()
        .dangerously_assume_verified()
}

#[test]
fn consensus_carries_the_srvs_a_majority_voted() {
    let votes = parsed_votes(&votes());
    let sr = SrParams {
        participate: true,
        fresh: false,
    };
    let body = compute_consensus(&votes, 3, sr).unwrap();
    // After params, before the authority sections, previous first.
    let p = body.find("\nparams ").unwrap();
    let prev = body.find("\nshared-rand-previous-value 3 ").unwrap();
    let cur = body.find("\nshared-rand-current-value 3 ").unwrap();
    let ds = body.find("\ndir-source ").unwrap();
    assert!(p < prev && prev < cur && cur < ds, "{body}");
    // The client code reads them (through tor-netdoc).
    let c = consensus_of(&body);
    assert_eq!(c.shared_rand_previous(), Some(&sr_value(b'P')));
    assert_eq!(c.shared_rand_current(), Some(&sr_value(b'C')));

    // A fresh SRV needs AuthDirNumSRVAgreements (default 2 of 3: 'C' has
    // 2); with the parameter at 3 only the previous value (3 votes) stays.
    let fresh = SrParams {
        participate: true,
        fresh: true,
    };
    let c = consensus_of(&compute_consensus(&votes, 3, fresh).unwrap());
    assert_eq!(c.shared_rand_current(), Some(&sr_value(b'C')));
    let strict: Vec<String> = keys()
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let mut h = header(k, i);
            h.params.insert("AuthDirNumSRVAgreements".into(), 3);
            build_vote(&h, &[entry(1, RGFV)], &k.certificate, &k.signing).unwrap()
        })
        .collect();
    let strict = parsed_votes(&strict);
    let body = compute_consensus(&strict, 3, fresh).unwrap();
    assert!(body.contains("AuthDirNumSRVAgreements=3"));
    let c = consensus_of(&body);
    assert_eq!(c.shared_rand_previous(), Some(&sr_value(b'P')));
    assert_eq!(c.shared_rand_current(), None);
    // Not fresh: a majority is enough even then.
    let c = consensus_of(&compute_consensus(&strict, 3, sr).unwrap());
    assert_eq!(c.shared_rand_current(), Some(&sr_value(b'C')));

    // Only one vote of three with 'C' (the others have none): no majority.
    let mut few = votes.clone();
    few[1].header.shared_rand.current = None;
    let c = consensus_of(&compute_consensus(&few, 3, sr).unwrap());
    assert_eq!(c.shared_rand_current(), None);
    assert_eq!(c.shared_rand_previous(), Some(&sr_value(b'P')));

    // An authority that does not take part writes no SRV lines.
    let body = compute_consensus(&votes, 3, SrParams::default()).unwrap();
    assert!(!body.contains("shared-rand"));
}

#[test]
fn malformed_shared_random_lines_invalidate_a_vote() {
    let k = &keys()[0];
    let good = build_vote(&header(k, 0), &[entry(1, RGFV)], &k.certificate, &k.signing).unwrap();
    assert!(parse_vote(&good, now()).is_ok());
    // Signed votes with extra lines (smuggled in through the contact
    // line): a value that does not decode, or a second current value,
    // make the vote invalid; a second commit for the same authority is
    // ignored (dir-spec: the first counts).
    let signed = |extra: &str| {
        let mut h = header(k, 0);
        h.contact = format!("x\n{extra}");
        build_vote(&h, &[entry(1, RGFV)], &k.certificate, &k.signing).unwrap()
    };
    for bad in [
        "shared-rand-current-value 3 x",
        "shared-rand-current-value 3 Q0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0NDQ0M=",
    ] {
        let e = parse_vote(&signed(bad), now()).unwrap_err();
        assert!(matches!(e, VoteError::Malformed { .. }), "{bad}: {e}");
    }
    let mut rng = rand::rngs::OsRng;
    let other = Commit::generate(k.identity.public().fingerprint(), NOW - 220, &mut rng);
    let text = signed(&format!("shared-rand-commit {}", other.to_args()));
    let v = parse_vote(&text, now()).unwrap();
    assert_eq!(v.header.shared_rand.commits, [other]);
}
/// Sign `text` (a vote whose signature object was cut off) again.
fn resign(text: &str, k: &AuthorityKeys) -> String {
    let at = text.rfind("\ndirectory-signature ").unwrap() + 1;
    let end = at + "directory-signature ".len();
    let line_end = end + text[end..].find('\n').unwrap() + 1;
    let digest: [u8; 20] = Sha1::digest(&text.as_bytes()[..end]).into();
    let sig = k.signing.sign_raw(&digest).unwrap();
    format!("{}{}", &text[..line_end], pem_wrap("SIGNATURE", &sig))
}

#[test]
fn a_certificate_after_the_signature_is_refused_not_a_panic() {
    // Found by the `vote` fuzz target: the certificate was cut out of the
    // signed text by position, and one placed after the signature made
    // that slice run backwards.
    let k = &keys()[0];
    let good = votes().remove(0);
    let cert = k.certificate.as_str();
    assert!(good.contains(cert));
    let moved = format!("{}{cert}", resign(&good.replace(cert, ""), k));
    assert!(matches!(
        parse_vote(&moved, now()),
        Err(VoteError::Malformed { .. })
    ));
}

#[test]
fn votes_with_values_clients_would_refuse_are_refused() {
    // Everything parse_vote accepts is copied into the consensus, so
    // what tor-netdoc would refuse there is refused here (found by the
    // `vote` fuzz target).
    let k = &keys()[0];
    let good = votes().remove(0);
    assert!(parse_vote(&good, now()).is_ok());
    for (what, from, to) in [
        (
            "empty protocol line",
            "required-relay-protocols Cons",
            "required-relay-protocols\nx Cons",
        ),
        ("bad pr", "pr Cons=1-2", "pr Cons=99"),
        ("unknown flag", "s Fast", "s Weird Fast"),
        ("bad nickname", "r relay1 ", "r relay-1 "),
        ("tab", "contact test", "contact\ttest"),
        ("NUL", "contact test", "contact te\0st"),
        ("bad param", "params cbttestfreq", "params cbt.testfreq"),
    ] {
        assert!(good.contains(from), "{what}: {from:?} not in the vote");
        let bad = resign(&good.replacen(from, to, 1), k);
        assert!(
            matches!(parse_vote(&bad, now()), Err(VoteError::Malformed { .. })),
            "{what} accepted"
        );
    }
    // A protocol line may not be missing.
    let no_line = resign(
        &good.replacen("required-client-protocols", "x-client-protocols", 1),
        k,
    );
    assert!(parse_vote(&no_line, now()).is_err());
    // Leading spaces of contact and `v` values are dropped.
    let spaced = resign(&good.replacen("contact test", "contact   test", 1), k);
    assert_eq!(
        parse_vote(&spaced, now()).unwrap().header.contact,
        "test@example.invalid"
    );
}
