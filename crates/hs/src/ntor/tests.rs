//! hs-ntor known answers and round trips.
//!
//! The fixed vectors come from `tests/data/hs_ntor_vectors.py`, an
//! independent implementation of the spec in Python (hashlib SHA3/SHAKE,
//! `cryptography`'s X25519 and AES-CTR); the MAC vectors are the ones
//! tor's `hs_ntor_ref.py` produced (also used by Arti's tests).

use super::*;

fn h(s: &str) -> Vec<u8> {
    hex::decode(s).expect("hex")
}

fn h32(s: &str) -> [u8; 32] {
    h(s).try_into().expect("32 bytes")
}

fn seq(start: u8) -> [u8; 32] {
    let mut a = [0u8; 32];
    for (i, b) in a.iter_mut().enumerate() {
        *b = start + i as u8;
    }
    a
}

const X: &str = "07a37cbc142093c8b755dc1b10e86cb426374ad16aa853ed0bdfc0b2b86d1c7c";
const B: &str = "5869aff450549732cbaaed5e5df9b30a6da31cb0e5742bad5ad4a1a768f1a67b";
const Y: &str = "64b101b1d0be5a8704bd078f9895001fc03e8e9f9522f188dd128d9846d48466";
const ENC_KEY: &str = "a5793d30adb4f7805e450c1b7067a9236a4a88fcfa97141b29a94b4375bd4c19";
const MAC_KEY: &str = "fe908ecbc3c5eab2be969ce6cceee200566af805234fdeefb2d4d9c8e06f7d02";
const ENCRYPTED: &str = "56eb1ca176e41f032bba5e1107ec4ae6b2462b2ed1f56d23971a7a3d4cb626c458a53e6c";
const MAC_OF_ENCRYPTED: &str = "5818f16f605cb0513476f8fdf537416d7379675e49c5f196d70a5514a6774356";
const AUTH: &str = "0541084916a170cdbcc7b2705ea4e0d60498a4811068a49b2f08df3983eb5cd2";
const KEYS: &str = "fbb7a1d9f2bde1e9c2bd9759b906026ab270944ce20a54de482481f0394d6a5ac90ed83dd910346779bb8bf6228a16dbe3a2fefcb927a9098b925ff723f8cc9ff4af0f42c2546aa6e1f7f713175fe1008649098821fdfdfebfe49521c4db20b2fc79c893c99ab89233a39d274ed5591604f3e8a5595add337aed63d9695c84c6";

const AUTH_KEY: [u8; 32] = [0xA5; 32];
const SUBCRED: [u8; 32] = [0x5C; 32];

#[test]
fn mac_matches_hs_ntor_ref() {
    assert_eq!(
        hs_mac(b"who", b"knows?"),
        h32("5e7da329630fdaa3eab7498bb1dc625bbb9ca968f10392b6af92d51d5db17473")
    );
    assert_eq!(
        hs_mac(b"gone", b"by"),
        h32("90071aabb06d3f7c777db41542f4790c7dd9e2e7b2b842f54c9c42bbdb37e9a0")
    );
}

#[test]
fn known_answers_both_sides() {
    let b = StaticSecret::from(seq(33));
    assert_eq!(PublicKey::from(&b).to_bytes(), h32(B));
    let client = HsNtorClient::from_secret(seq(1), &h32(B), &AUTH_KEY, &SUBCRED);
    assert_eq!(client.client_pk(), h32(X));

    let ck = client.intro_keys().expect("client keys");
    assert_eq!(ck.enc_key, h32(ENC_KEY));
    assert_eq!(ck.mac_key, h32(MAC_KEY));
    let mut data = b"introduce me".repeat(3);
    ck.crypt(&mut data);
    assert_eq!(data, h(ENCRYPTED));
    assert_eq!(ck.mac(&data), h32(MAC_OF_ENCRYPTED));

    let svc = HsNtorService::new(&b, &AUTH_KEY, &SUBCRED);
    let sk = svc.intro_keys(&h32(X)).expect("service keys");
    assert_eq!(sk.enc_key, ck.enc_key);
    assert!(sk.check_mac(&data, &h32(MAC_OF_ENCRYPTED)));
    sk.crypt(&mut data);
    assert_eq!(data, b"introduce me".repeat(3));

    let (y, auth, skeys) = svc.rendezvous_with(seq(65), &h32(X)).expect("rend");
    assert_eq!(y, h32(Y));
    assert_eq!(auth, h32(AUTH));
    let keys = h(KEYS);
    let ckeys = client.finish(&y, &auth).expect("auth verifies");
    for k in [&skeys, &ckeys] {
        assert_eq!(k.df[..], keys[0..32]);
        assert_eq!(k.db[..], keys[32..64]);
        assert_eq!(k.kf[..], keys[64..96]);
        assert_eq!(k.kb[..], keys[96..128]);
    }
}

#[test]
fn bad_auth_and_degenerate_keys_fail() {
    let b = StaticSecret::from(seq(33));
    let bp = PublicKey::from(&b).to_bytes();
    let client = HsNtorClient::new(&mut rand::rngs::OsRng, &bp, &AUTH_KEY, &SUBCRED);
    let svc = HsNtorService::new(&b, &AUTH_KEY, &SUBCRED);
    let (y, mut auth, _) = svc
        .rendezvous(&mut rand::rngs::OsRng, &client.client_pk())
        .expect("rend");
    auth[0] ^= 1;
    assert_eq!(client.finish(&y, &auth).err(), Some(HsNtorError::BadAuth));
    // A small-order point (zero) as peer key.
    assert_eq!(
        svc.intro_keys(&[0u8; 32]).err(),
        Some(HsNtorError::ZeroSharedSecret)
    );
    let bad = HsNtorClient::new(&mut rand::rngs::OsRng, &[0u8; 32], &AUTH_KEY, &SUBCRED);
    assert_eq!(bad.intro_keys().err(), Some(HsNtorError::ZeroSharedSecret));
    // Another subcredential gives other intro keys.
    let other = HsNtorService::new(&b, &AUTH_KEY, &[1; 32]);
    let k1 = client.intro_keys().expect("k");
    let k2 = other.intro_keys(&client.client_pk()).expect("k");
    assert_ne!(k1.enc_key, k2.enc_key);
}

#[test]
fn virtual_hop_carries_cells_both_ways() {
    use onionmix_crypto::HsRelayLayer;
    let b = StaticSecret::from(seq(33));
    let bp = PublicKey::from(&b).to_bytes();
    let client = HsNtorClient::new(&mut rand::rngs::OsRng, &bp, &AUTH_KEY, &SUBCRED);
    let svc = HsNtorService::new(&b, &AUTH_KEY, &SUBCRED);
    let (y, auth, skeys) = svc
        .rendezvous(&mut rand::rngs::OsRng, &client.client_pk())
        .expect("rend");
    let ckeys = client.finish(&y, &auth).expect("ok");
    let (mut c, mut s) = (HsRelayLayer::client(&ckeys), HsRelayLayer::service(&skeys));
    let mut cell = [9u8; 509];
    let tag = c.originate_forward(&mut cell);
    c.encrypt_forward(&mut cell);
    assert_eq!(s.decrypt_backward(&mut cell), Some(tag));
    let mut back = [3u8; 509];
    let tag = s.originate_forward(&mut back);
    s.encrypt_forward(&mut back);
    assert_eq!(c.decrypt_backward(&mut back), Some(tag));
}
