//! Introduction/rendezvous message tests: the whole exchange between a
//! client and a service through an introduction point, and every check.

use super::*;
use onionmix_cell::hs::{HsMsg, intro_status};
use onionmix_cell::relay::RelayCmd;
use rand::rngs::OsRng;
use std::net::SocketAddrV4;
use x25519_dalek::PublicKey;

struct Ipt {
    auth: Ed25519Keypair,
    enc: StaticSecret,
}

fn ipt() -> Ipt {
    Ipt {
        auth: Ed25519Keypair::generate(&mut OsRng),
        enc: StaticSecret::random_from_rng(OsRng),
    }
}

#[test]
fn establish_intro_checked_by_the_intro_point() {
    let p = ipt();
    let kh = [7u8; 20];
    let dos = DosParams {
        rate_per_sec: Some(25),
        burst_per_sec: Some(200),
    };
    let cell = establish_intro(&p.auth, &kh, Some(dos)).expect("build");
    let (m, d) = check_establish_intro(&cell, &kh).expect("valid");
    assert_eq!(m.auth_key, p.auth.public());
    assert_eq!(
        d,
        DosDecision::Enabled {
            rate: 25,
            burst: 200
        }
    );
    // Replayed on another circuit (other KH).
    assert_eq!(
        check_establish_intro(&cell, &[8u8; 20]).err(),
        Some(IntroError::BadHandshakeMac)
    );
    // Signature by another key over the same fields.
    let mut forged = cell.clone();
    let n = forged.len();
    forged[n - 1] ^= 1;
    assert_eq!(
        check_establish_intro(&forged, &kh).err(),
        Some(IntroError::BadSignature)
    );
    // DoS decisions.
    let decide = |r, b| {
        let c = establish_intro(
            &p.auth,
            &kh,
            Some(DosParams {
                rate_per_sec: r,
                burst_per_sec: b,
            }),
        )
        .expect("b");
        check_establish_intro(&c, &kh).expect("ok").1
    };
    assert_eq!(decide(Some(0), Some(10)), DosDecision::Disabled);
    assert_eq!(decide(Some(10), Some(5)), DosDecision::Disabled);
    assert_eq!(decide(Some(1 << 40), Some(1 << 41)), DosDecision::Disabled);
    assert_eq!(
        decide(Some(10), Some(10)),
        DosDecision::Enabled {
            rate: 10,
            burst: 10
        }
    );
    assert_eq!(decide(Some(10), None), DosDecision::Disabled);
    // As tor: a DoS extension that does not parse or names an unknown
    // parameter leaves the consensus defaults; trailing bytes are ignored.
    assert_eq!(dos_decision(&[]), DosDecision::ConsensusDefaults);
    assert_eq!(dos_decision(&[1, 1, 0]), DosDecision::ConsensusDefaults);
    let mut unknown = vec![2, 1, 0, 0, 0, 0, 0, 0, 0, 5, 9];
    unknown.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 5]);
    assert_eq!(dos_decision(&unknown), DosDecision::ConsensusDefaults);
    let mut trailing = DosParams {
        rate_per_sec: Some(5),
        burst_per_sec: Some(7),
    }
    .to_extension()
    .data;
    trailing.push(0xff);
    assert_eq!(
        dos_decision(&trailing),
        DosDecision::Enabled { rate: 5, burst: 7 }
    );
    let plain = establish_intro(&p.auth, &kh, None).expect("b");
    assert_eq!(
        check_establish_intro(&plain, &kh).expect("ok").1,
        DosDecision::ConsensusDefaults
    );
}

#[test]
fn introduce_and_rendezvous_end_to_end() {
    let p = ipt();
    let subcred = [0x11u8; 32];
    let old_subcred = [0x22u8; 32];
    let b_pub = PublicKey::from(&p.enc).to_bytes();
    let client = HsNtorClient::new(&mut OsRng, &b_pub, &p.auth.public(), &subcred);
    let ls = [
        LinkSpec::Ipv4(SocketAddrV4::new([127, 0, 0, 9].into(), 9001)),
        LinkSpec::LegacyId([3; 20]),
    ];
    let pow = PowSolution {
        nonce: [1; 16],
        effort: 64,
        seed_head: [9, 9, 9, 9],
        solution: [2; 16],
    };
    let input = Introduce1Input {
        auth_key: p.auth.public(),
        rend_cookie: [0x33; 20],
        rend_onion_key: [0x44; 32],
        rend_link_specifiers: &ls,
        pow: Some(pow),
        cc_request: true,
    };
    let intro1 = build_introduce1(&client, &input).expect("build");
    assert!(intro1.len() >= INTRODUCE1_MIN_SIZE);
    // The intro point relays the body unchanged as INTRODUCE2.
    let Some(HsMsg::Introduce1(parsed)) = HsMsg::parse(RelayCmd::INTRODUCE1, &intro1).expect("p")
    else {
        panic!("not INTRODUCE1");
    };
    assert_eq!(parsed.legacy_key_id, [0; 20]);
    assert_eq!(introduce1_auth_key(&intro1), Ok(p.auth.public()));
    let mut legacy = intro1.clone();
    legacy[0] = 1;
    assert!(introduce1_auth_key(&legacy).is_err());
    let opened =
        open_introduce2(&intro1, &p.enc, &p.auth.public(), &[old_subcred, subcred]).expect("open");
    assert_eq!(opened.subcredential_index, 1);
    assert_eq!(opened.plaintext.rend_cookie, [0x33; 20]);
    assert_eq!(opened.plaintext.link_specifiers, ls.to_vec());
    assert_eq!(opened.pow, Some(pow));
    assert!(opened.cc_requested);
    // The request is extension type 1 with no body, before the PoW (as
    // tor orders them), in the encrypted part.
    let types: Vec<(u8, usize)> = opened
        .plaintext
        .extensions
        .iter()
        .map(|e| (e.ext_type, e.data.len()))
        .collect();
    assert_eq!(types.first(), Some(&(onionmix_cell::hs::EXT_CC_REQUEST, 0)));
    assert_eq!(opened.client_pk, client.client_pk());

    // Service answers through the rendezvous point.
    let svc = HsNtorService::new(&p.enc, &p.auth.public(), &subcred);
    let (y, auth, skeys) = svc.rendezvous(&mut OsRng, &opened.client_pk).expect("rend");
    let r1 = rendezvous1(&opened.plaintext.rend_cookie, &y, &auth).expect("r1");
    let Some(HsMsg::Rendezvous1(m)) = HsMsg::parse(RelayCmd::RENDEZVOUS1, &r1).expect("p") else {
        panic!("not RENDEZVOUS1");
    };
    // The rendezvous point sends HANDSHAKE_INFO on as RENDEZVOUS2.
    let (y2, auth2) = rendezvous2_handshake(&m.handshake_info).expect("64 bytes");
    let ckeys = client.finish(&y2, &auth2).expect("verifies");
    assert_eq!(ckeys.kf, skeys.kf);
    assert_eq!(ckeys.db, skeys.db);
    assert!(rendezvous2_handshake(&[0; 63]).is_err());
    // What a stock service sends: padded to the legacy size; the client
    // reads the first 64 bytes of the 148 the rendezvous point relays.
    let padded = rendezvous1_padded(
        &opened.plaintext.rend_cookie,
        &y,
        &auth,
        &mut rand::rngs::OsRng,
    )
    .expect("r1");
    assert_eq!(padded.len(), LEGACY_RENDEZVOUS1_LEN);
    let info = padded.get(20..).expect("cookie");
    assert_eq!(info.len(), 148);
    assert_eq!(rendezvous2_handshake(info).expect("148 bytes"), (y2, auth2));
}

#[test]
fn introduce2_checks() {
    let p = ipt();
    let subcred = [0x11u8; 32];
    let b_pub = PublicKey::from(&p.enc).to_bytes();
    let client = HsNtorClient::new(&mut OsRng, &b_pub, &p.auth.public(), &subcred);
    let input = Introduce1Input {
        auth_key: p.auth.public(),
        rend_cookie: [1; 20],
        rend_onion_key: [2; 32],
        rend_link_specifiers: &[],
        pow: None,
        cc_request: false,
    };
    let cell = build_introduce1(&client, &input).expect("build");
    assert_eq!(cell.len(), INTRODUCE1_MIN_SIZE);
    let auth = p.auth.public();
    let plain = open_introduce2(&cell, &p.enc, &auth, &[subcred]).expect("open");
    assert!(!plain.cc_requested, "no request unless asked");
    assert_eq!(
        open_introduce2(&cell, &p.enc, &auth, &[[9; 32]]).err(),
        Some(IntroError::BadMac)
    );
    assert_eq!(
        open_introduce2(&cell, &p.enc, &[5; 32], &[subcred]).err(),
        Some(IntroError::WrongAuthKey)
    );
    for i in [0, 30, 60, 100, cell.len() - 1] {
        let mut t = cell.clone();
        t[i] ^= 0x80;
        assert!(
            open_introduce2(&t, &p.enc, &auth, &[subcred]).is_err(),
            "byte {i}"
        );
    }
    assert!(open_introduce2(&cell[..100], &p.enc, &auth, &[subcred]).is_err());
    // INTRODUCE_ACK statuses round-trip.
    let ack = HsMsg::IntroduceAck(intro_status::SUCCESS, vec![])
        .encode()
        .expect("e");
    assert_eq!(ack, vec![0, 0, 0]);
}

#[test]
fn replay_cache_bounds_and_window() {
    let mut c = ReplayCache::new(3, 100);
    assert!(!c.check_and_add(b"a", 0));
    assert!(c.check_and_add(b"a", 50));
    assert!(!c.check_and_add(b"b", 60));
    assert!(!c.check_and_add(b"c", 61));
    // Full: "a" (oldest) is forgotten to make room.
    assert!(!c.check_and_add(b"d", 62));
    assert!(c.len() <= 3);
    assert!(c.check_and_add(b"d", 63));
    // After the window everything is forgotten.
    assert!(!c.check_and_add(b"b", 200));
    assert_eq!(c.len(), 1);
}

proptest::proptest! {
    #[test]
    fn intro_point_and_service_parsers_never_panic(d in proptest::collection::vec(proptest::num::u8::ANY, 0..520)) {
        let enc = StaticSecret::from([7u8; 32]);
        let _ = check_establish_intro(&d, &[0; 20]);
        let _ = open_introduce2(&d, &enc, &[0; 32], &[[0; 32]]);
        let _ = rendezvous2_handshake(&d);
    }
}
