//! Descriptor tests: our builder output through our HSDir checks and our
//! client decoder; client authorization; tampering; limits; and Arti's
//! test descriptors (one with client authorization) decoded from the
//! service's identity through our blinding.

use std::net::SocketAddrV4;

use onionmix_cell::relay::LinkSpec;
use rand::rngs::OsRng;

use super::client::decode_descriptor;
use super::hsdir::parse_outer;
use super::service::{DescSigningKey, DescriptorInput, build_descriptor};
use super::*;
use crate::keys::ServiceIdentity;
use crate::time::HsSchedule;

const NOW: u64 = 1_700_000_000;

fn sched() -> HsSchedule {
    HsSchedule::from_interval(3600, None, false).expect("s")
}

fn ipts(n: u8) -> Vec<IntroPointInfo> {
    (0..n)
        .map(|i| {
            let auth = crate::keys::ServiceIdentity::generate(&mut OsRng).public();
            IntroPointInfo {
                link_specifiers: vec![
                    LinkSpec::Ipv4(SocketAddrV4::new(
                        [127, 0, 0, 1 + i].into(),
                        5000 + u16::from(i),
                    )),
                    LinkSpec::LegacyId([i; 20]),
                    LinkSpec::Ed25519Id([i + 1; 32]),
                ],
                onion_key: x25519_dalek::PublicKey::from(
                    &x25519_dalek::StaticSecret::random_from_rng(OsRng),
                )
                .to_bytes(),
                auth_key: auth,
                enc_key: x25519_dalek::PublicKey::from(
                    &x25519_dalek::StaticSecret::random_from_rng(OsRng),
                )
                .to_bytes(),
            }
        })
        .collect()
}

struct Svc {
    blinded: crate::keys::BlindedService,
    signing: DescSigningKey,
}

fn svc() -> Svc {
    let id = ServiceIdentity::generate(&mut OsRng);
    let period = sched().period_num(NOW).expect("period");
    Svc {
        blinded: id.blind(&sched(), period).expect("blind"),
        signing: DescSigningKey::generate(&mut OsRng),
    }
}

#[test]
fn build_then_hsdir_then_client() {
    let s = svc();
    let points = ipts(3);
    #[allow(unused_mut)]
    let mut input = DescriptorInput::new(&s.blinded, &s.signing, 12345, NOW, &points);
    input.flow_control_sendme_inc = Some(31);
    #[cfg(feature = "pow")]
    {
        input.pow_v1 = Some(PowParamsV1 {
            seed: [5; 32],
            suggested_effort: 42,
            expires: NOW + 7200,
        });
    }
    let text = build_descriptor(&input, &mut OsRng).expect("build");
    assert!(text.len() <= MAX_DESC_LEN);
    assert!(text.starts_with("hs-descriptor 3\ndescriptor-lifetime 180\n"));

    let outer = parse_outer(&text, NOW).expect("hsdir accepts");
    assert_eq!(&outer.blinded_key, s.blinded.public());
    assert_eq!(outer.signing_key, s.signing.public());
    assert_eq!(outer.revision, 12345);
    assert_eq!(outer.lifetime_min, 180);
    assert_eq!(outer.expires_at(NOW), NOW + 180 * 60);

    let c = decode_descriptor(
        &text,
        s.blinded.public(),
        s.blinded.subcredential(),
        None,
        NOW,
    )
    .expect("client decodes");
    assert_eq!(c.revision, 12345);
    // The builder shuffles introduction points.
    let mut got = c.intro_points.clone();
    let mut want = points.clone();
    got.sort_by_key(|p| p.auth_key);
    want.sort_by_key(|p| p.auth_key);
    assert_eq!(got, want);
    assert!(!c.single_onion_service && !c.intro_auth_required);
    assert_eq!(c.pow_v1, input.pow_v1);
    assert_eq!(c.flow_control_sendme_inc, Some(31));
}

#[test]
fn flow_control_line_only_when_asked() {
    let s = svc();
    let points = ipts(1);
    let input = DescriptorInput::new(&s.blinded, &s.signing, 1, NOW, &points);
    assert_eq!(input.flow_control_sendme_inc, None);
    let text = build_descriptor(&input, &mut OsRng).expect("build");
    let c = decode_descriptor(
        &text,
        s.blinded.public(),
        s.blinded.subcredential(),
        None,
        NOW,
    )
    .expect("client decodes");
    assert_eq!(c.flow_control_sendme_inc, None);
    let mut input = input;
    input.flow_control_sendme_inc = Some(0);
    assert!(
        build_descriptor(&input, &mut OsRng).is_err(),
        "sendme_inc 0 is refused"
    );
}

#[test]
fn client_authorization() {
    let s = svc();
    let points = ipts(1);
    let alice = x25519_dalek::StaticSecret::random_from_rng(OsRng);
    let bob = x25519_dalek::StaticSecret::random_from_rng(OsRng);
    let keys = [x25519_dalek::PublicKey::from(&alice).to_bytes()];
    let mut input = DescriptorInput::new(&s.blinded, &s.signing, 1, NOW, &points);
    input.auth_clients = Some(&keys);
    let text = build_descriptor(&input, &mut OsRng).expect("build");
    let (b, sc) = (s.blinded.public(), s.blinded.subcredential());
    assert_eq!(
        decode_descriptor(&text, b, sc, None, NOW),
        Err(DescError::MissingClientAuth)
    );
    assert_eq!(
        decode_descriptor(&text, b, sc, Some(&bob.to_bytes()), NOW),
        Err(DescError::WrongClientAuth)
    );
    let c = decode_descriptor(&text, b, sc, Some(&alice.to_bytes()), NOW).expect("alice");
    assert_eq!(c.intro_points, points);
    // The HSDir needs no key.
    assert!(parse_outer(&text, NOW).is_ok());
}

#[test]
fn tampering_and_wrong_keys_are_caught() {
    let s = svc();
    let points = ipts(2);
    let text = build_descriptor(
        &DescriptorInput::new(&s.blinded, &s.signing, 7, NOW, &points),
        &mut OsRng,
    )
    .expect("build");
    let (b, sc) = (s.blinded.public(), s.blinded.subcredential());
    // A changed revision counter breaks the signature.
    let t2 = text.replace("revision-counter 7\n", "revision-counter 8\n");
    assert!(matches!(
        parse_outer(&t2, NOW),
        Err(DescError::BadSignature(_))
    ));
    // Another service's blinded key / subcredential.
    let other = svc();
    assert_eq!(
        decode_descriptor(&text, other.blinded.public(), sc, None, NOW),
        Err(DescError::WrongBlindedKey)
    );
    assert_eq!(
        decode_descriptor(&text, b, other.blinded.subcredential(), None, NOW),
        Err(DescError::DecryptFailed)
    );
    // After the certificate's 54 hours.
    assert_eq!(parse_outer(&text, NOW + 55 * 3600), Err(DescError::Expired));
    // Size limit before anything else.
    let big = format!("{text}{}", "x".repeat(MAX_DESC_LEN));
    assert_eq!(parse_outer(&big, NOW), Err(DescError::TooLarge(big.len())));
    // Structure.
    for bad in [
        text.replacen("hs-descriptor 3", "hs-descriptor 2", 1),
        text.replacen("descriptor-lifetime 180", "descriptor-lifetime 721", 1),
        format!("descriptor-lifetime 180\n{text}"),
        format!("{text}extra\n"),
        text.replacen("superencrypted\n", "superencrypted x\n", 1),
    ] {
        assert!(parse_outer(&bad, NOW).is_err());
    }
}

#[test]
fn replacement_rule_and_build_limits() {
    let s = svc();
    let points = ipts(1);
    let older = build_descriptor(
        &DescriptorInput::new(&s.blinded, &s.signing, 5, NOW, &points),
        &mut OsRng,
    )
    .expect("b");
    let newer = build_descriptor(
        &DescriptorInput::new(&s.blinded, &s.signing, 6, NOW, &points),
        &mut OsRng,
    )
    .expect("b");
    let (o, n) = (
        parse_outer(&older, NOW).expect("o"),
        parse_outer(&newer, NOW).expect("n"),
    );
    assert!(n.replaces(Some(&o)) && !o.replaces(Some(&n)) && !n.replaces(Some(&n)));
    assert!(o.replaces(None));
    assert!(
        build_descriptor(
            &DescriptorInput::new(&s.blinded, &s.signing, 1, NOW, &[]),
            &mut OsRng
        )
        .is_err()
    );
    let many = ipts(21);
    assert!(
        build_descriptor(
            &DescriptorInput::new(&s.blinded, &s.signing, 1, NOW, &many),
            &mut OsRng
        )
        .is_err()
    );
    // 20 introduction points still fit in 50 KB.
    let twenty = ipts(20);
    let t = build_descriptor(
        &DescriptorInput::new(&s.blinded, &s.signing, 1, NOW, &twenty),
        &mut OsRng,
    )
    .expect("20 fit");
    assert!(t.len() <= MAX_DESC_LEN);
}

#[test]
fn hsdir_cache_store_fetch_expire_and_bounds() {
    use super::cache::*;
    let s = svc();
    let points = ipts(1);
    let build = |rev| {
        build_descriptor(
            &DescriptorInput::new(&s.blinded, &s.signing, rev, NOW, &points),
            &mut OsRng,
        )
        .expect("b")
    };
    let (d5, d6) = (build(5), build(6));
    let mut c = HsDirCache::new(2, 200_000);
    c.store(&d5, NOW).expect("stored");
    assert_eq!(c.get(s.blinded.public(), NOW), Some(d5.as_str()));
    assert_eq!(
        c.store(&d5, NOW),
        Err(StoreError::NotNewer { have: 5, got: 5 })
    );
    c.store(&d6, NOW).expect("newer replaces");
    assert_eq!(c.len(), 1);
    assert_eq!(c.bytes(), d6.len());
    assert!(matches!(c.store("junk", NOW), Err(StoreError::Invalid(_))));
    // Lifetime 180 minutes.
    assert_eq!(c.get(s.blinded.public(), NOW + 180 * 60), None);
    c.expire(NOW + 180 * 60);
    assert!(c.is_empty() && c.bytes() == 0);
    // Entry bound: a third service evicts the one stored longest ago.
    let (a, b, d) = (svc(), svc(), svc());
    for (i, x) in [&a, &b, &d].into_iter().enumerate() {
        let t = build_descriptor(
            &DescriptorInput::new(&x.blinded, &x.signing, 1, NOW, &points),
            &mut OsRng,
        )
        .expect("b");
        c.store(&t, NOW + i as u64).expect("stored");
    }
    assert_eq!(c.len(), 2);
    assert!(c.get(a.blinded.public(), NOW + 10).is_none());
    assert!(c.get(d.blinded.public(), NOW + 10).is_some());
    // A descriptor claiming tor's longest lifetime (720 minutes) does not
    // outlast a later 180-minute one at the bound: storing order decides.
    let (long, short, next) = (svc(), svc(), svc());
    let mut c = HsDirCache::new(2, 200_000);
    let mut long_input = DescriptorInput::new(&long.blinded, &long.signing, 1, NOW, &points);
    long_input.lifetime_min = 720;
    c.store(&build_descriptor(&long_input, &mut OsRng).expect("b"), NOW)
        .expect("stored");
    for x in [&short, &next] {
        let t = build_descriptor(
            &DescriptorInput::new(&x.blinded, &x.signing, 1, NOW, &points),
            &mut OsRng,
        )
        .expect("b");
        c.store(&t, NOW + 1).expect("stored");
    }
    assert!(
        c.get(long.blinded.public(), NOW + 2).is_none(),
        "oldest out"
    );
    assert!(c.get(short.blinded.public(), NOW + 2).is_some());
    assert!(c.get(next.blinded.public(), NOW + 2).is_some());
    // Byte bound.
    // Byte bound (at least 50 000 bytes): descriptors of ~20 KB, the
    // oldest go first.
    let mut small = HsDirCache::new(10, 0);
    for (i, x) in [&s, &a, &b, &d].into_iter().enumerate() {
        let t = build_descriptor(
            &DescriptorInput::new(&x.blinded, &x.signing, 9, NOW, &points),
            &mut OsRng,
        )
        .expect("b");
        small.store(&t, NOW + i as u64).expect("stored");
        assert!(small.bytes() <= MAX_DESC_LEN);
    }
    assert!(small.len() < 4);
    assert!(small.get(d.blinded.public(), NOW).is_some());
    // Paths.
    let p = fetch_path(s.blinded.public());
    assert_eq!(p.len(), FETCH_PREFIX.len() + 43);
    assert_eq!(parse_fetch_path(&p), Some(*s.blinded.public()));
    assert_eq!(
        parse_fetch_path(&format!("{p}=")),
        Some(*s.blinded.public())
    );
    assert_eq!(parse_fetch_path("/tor/hs/3/abc"), None);
    assert_eq!(parse_fetch_path(PUBLISH_PATH), None);
}

mod arti_vectors {
    use super::*;
    use tor_netdoc::doc::hsdesc::test_data as td;

    /// A time the descriptor's certificates are valid at: two hours
    /// after its type-08 certificate was issued (54 h before expiry).
    fn valid_time(text: &str) -> u64 {
        // Expired certificates still parse with `now = 0`.
        let o = parse_outer(text, 0).expect("parses");
        o.cert_expires - 52 * 3600
    }

    #[test]
    fn descriptor_1_decodes() {
        let now = valid_time(td::TEST_DATA);
        let outer = parse_outer(td::TEST_DATA, now).expect("outer");
        assert_eq!(outer.revision, 19_655_750);
        assert_eq!(outer.lifetime_min, 180);
        let c = decode_descriptor(
            td::TEST_DATA,
            &outer.blinded_key,
            &td::TEST_SUBCREDENTIAL,
            None,
            now,
        )
        .expect("decodes");
        assert!(!c.intro_points.is_empty());
        assert!(c.intro_points.iter().all(|p| !p.link_specifiers.is_empty()));
    }

    #[test]
    fn descriptor_2_with_client_auth_from_identity() {
        // From the service identity: our blinding must give the key the
        // descriptor is signed under, and the subcredential that decrypts it.
        let addr = crate::OnionAddress::from_key(td::TEST_HSID_2).expect("addr");
        assert_eq!(
            addr.label(),
            "paozpdhgz2okvc6kgbxvh2bnfsmt4xergrtcl4obkhopyvwxkpjzvoad"
        );
        let (blinded, subcred) =
            crate::keys::blinded_public(&addr, &sched(), td::TEST_DATA_TIMEPERIOD_2)
                .expect("blind");
        assert_eq!(subcred, td::TEST_SUBCREDENTIAL_2);
        let now = valid_time(td::TEST_DATA_2);
        let outer = parse_outer(td::TEST_DATA_2, now).expect("outer");
        assert_eq!(outer.blinded_key, blinded);
        assert_eq!(
            decode_descriptor(td::TEST_DATA_2, &blinded, &subcred, None, now),
            Err(DescError::MissingClientAuth)
        );
        let c = decode_descriptor(
            td::TEST_DATA_2,
            &blinded,
            &subcred,
            Some(&td::TEST_SECKEY_2),
            now,
        )
        .expect("decodes with the client key");
        assert!(!c.intro_points.is_empty());
    }
}

fn valid_descriptor() -> &'static (String, [u8; 32], [u8; 32]) {
    static D: std::sync::OnceLock<(String, [u8; 32], [u8; 32])> = std::sync::OnceLock::new();
    D.get_or_init(|| {
        let s = svc();
        let points = ipts(2);
        let t = build_descriptor(
            &DescriptorInput::new(&s.blinded, &s.signing, 3, NOW, &points),
            &mut OsRng,
        )
        .expect("b");
        (t, *s.blinded.public(), *s.blinded.subcredential())
    })
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn mutated_descriptors_never_panic(edits in proptest::collection::vec((0usize..30_000, proptest::num::u8::ANY), 1..6),
                                       cut in 0usize..30_000) {
        let (text, b, sc) = valid_descriptor();
        let mut bytes = text.as_bytes().to_vec();
        for (pos, v) in edits {
            if let Some(x) = bytes.get_mut(pos % text.len()) {
                *x = v;
            }
        }
        bytes.truncate(cut.max(1));
        let t = String::from_utf8_lossy(&bytes);
        let _ = parse_outer(&t, NOW);
        let _ = decode_descriptor(&t, b, sc, None, NOW);
    }

    #[test]
    fn outer_parser_never_panics(s in "\\PC{0,400}") {
        let _ = parse_outer(&s, NOW);
        let _ = parse_outer(&format!("hs-descriptor 3\n{s}"), NOW);
    }
}
