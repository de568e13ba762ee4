//! hs-ntor known answers and round trips.
//!
//! The fixed vectors come from `tests/data/hs_ntor_vectors.py`, an
//! independent implementation of the spec in Python (hashlib SHA3/SHAKE,
//! `cryptography`'s X25519 and AES-CTR); the MAC vectors are the ones
//! tor's `hs_ntor_ref.py` produced (also used by Arti's tests); the
//! whole-exchange vectors are rend-spec-v3's Appendix G.1, dumped from
//! tor itself.

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

/// rend-spec-v3 Appendix G.1: values dumped from tor on a Chutney
/// network for one INTRODUCE/RENDEZVOUS exchange.
mod rend_spec_g1 {
    pub const AUTH_KEY: &str = "34E171E4358E501BFF21ED907E96AC6BFEF697C779D040BBAF49ACC30FC5D21F";
    pub const B: &str = "8E5127A40E83AABF6493E41F142B6EE3604B85A3961CD7E38D247239AFF71979";
    pub const B_SECRET: &str = "A0ED5DBF94EEB2EDB3B514E4CF6ABFF6022051CC5F103391F1970A3FCD15296A";
    pub const SUBCRED: &str = "0085D26A9DEBA252263BF0231AEAC59B17CA11BAD8A218238AD6487CBAD68B57";
    pub const HEADER: &str = "000000000000000000000000000000000000000002002034E171E4358E501BFF\
        21ED907E96AC6BFEF697C779D040BBAF49ACC30FC5D21F00";
    pub const PLAINTEXT: &str = "6BD364C12638DD5C3BE23D76ACA05B04E6CE932C0101000100200DE6130E4FCA\
        C4EDDA24E21220CC3EADAE403EF6B7D11C8273AC71908DE565450300067F0000\
        0113890214F823C4F8CC085C792E0AEE0283FE00AD7520B37D0320728D5DF39B\
        7B7077A0118A900FF4456C382F0041300ACF9C58E51C392795EF870000000000\
        0000000000000000000000000000000000000000000000000000000000000000\
        000000000000000000000000000000000000000000000000000000000000";
    pub const X_SECRET: &str = "60B4D6BF5234DCF87A4E9D7487BDF3F4A69B6729835E825CA29089CFDDA1E341";
    pub const X: &str = "BF04348B46D09AED726F1D66C618FDEA1DE58E8CB8B89738D7356A0C59111D5D";
    pub const ENC_KEY: &str = "9B8917BA3D05F3130DACCE5300C3DC27F6D012912F1C733036F822D0ED238706";
    pub const MAC_KEY: &str = "FC4058DA59D4DF61E7B40985D122F502FD59336BC21C30CAF5E7F0D4A2C38FD5";
    pub const BODY: &str = "000000000000000000000000000000000000000002002034E171E4358E501BFF\
        21ED907E96AC6BFEF697C779D040BBAF49ACC30FC5D21F00BF04348B46D09AED\
        726F1D66C618FDEA1DE58E8CB8B89738D7356A0C59111D5DADBECCCB38E37830\
        4DCC179D3D9E437B452AF5702CED2CCFEC085BC02C4C175FA446525C1B9D5530\
        563C362FDFFB802DAB8CD9EBC7A5EE17DA62E37DEEB0EB187FBB48C63298B0E8\
        3F391B7566F42ADC97C46BA7588278273A44CE96BC68FFDAE31EF5F0913B9A9C\
        7E0F173DBC0BDDCD4ACB4C4600980A7DDD9EAEC6E7F3FA3FC37CD95E5B8BFB3E\
        35717012B78B4930569F895CB349A07538E42309C993223AEA77EF8AEA64F25D\
        DEE97DA623F1AEC0A47F150002150455845C385E5606E41A9A199E7111D54EF2\
        D1A51B7554D8B3692D85AC587FB9E69DF990EFB776D8";
    pub const Y_SECRET: &str = "68CB5188CA0CD7924250404FAB54EE1392D3D2B9C049A2E446513875952F8F55";
    pub const Y: &str = "8FBE0DB4D4A9C7FF46701E3E0EE7FD05CD28BE4F302460ADDEEC9E93354EE700";
    pub const AUTH_INPUT_MAC: &str =
        "4A92E8437B8424D5E5EC279245D5C72B25A0327ACF6DAF902079FCB643D8B208";
    pub const NTOR_KEY_SEED: &str =
        "4D0C72FE8AFF35559D95ECC18EB5A36883402B28CDFD48C8A530A5A3D7D578DB";
}

/// The whole exchange of rend-spec-v3's Appendix G.1, both sides: the
/// client's keys, encrypted body and MAC give tor's INTRODUCE1 body byte
/// for byte; the service decrypts it and answers with tor's Y and
/// AUTH_INPUT_MAC, which the client accepts.
#[test]
fn rend_spec_appendix_g1_vectors() {
    use rend_spec_g1 as v;
    let (auth_key, b_pub, subcred) = (h32(v::AUTH_KEY), h32(v::B), h32(v::SUBCRED));
    let b = StaticSecret::from(h32(v::B_SECRET));
    assert_eq!(PublicKey::from(&b).to_bytes(), b_pub);

    let client = HsNtorClient::from_secret(h32(v::X_SECRET), &b_pub, &auth_key, &subcred);
    assert_eq!(client.client_pk(), h32(v::X));
    let ck = client.intro_keys().expect("client keys");
    assert_eq!(ck.enc_key, h32(v::ENC_KEY));
    assert_eq!(ck.mac_key, h32(v::MAC_KEY));
    let mut body = h(v::HEADER);
    body.extend_from_slice(&client.client_pk());
    let mut c = h(v::PLAINTEXT);
    ck.crypt(&mut c);
    body.extend_from_slice(&c);
    let m = ck.mac(&body);
    body.extend_from_slice(&m);
    assert_eq!(body, h(v::BODY), "INTRODUCE1 body");

    // The service: MAC checked, plaintext recovered.
    let svc = HsNtorService::new(&b, &auth_key, &subcred);
    let mac_at = body.len() - 32;
    let x_at = h(v::HEADER).len();
    let x: [u8; 32] = body[x_at..x_at + 32].try_into().expect("X");
    let sk = svc.intro_keys(&x).expect("service keys");
    let mac: [u8; 32] = body[mac_at..].try_into().expect("MAC");
    assert!(sk.check_mac(&body[..mac_at], &mac));
    let mut p = body[x_at + 32..mac_at].to_vec();
    sk.crypt(&mut p);
    assert_eq!(p, h(v::PLAINTEXT));

    let (y, auth, skeys) = svc.rendezvous_with(h32(v::Y_SECRET), &x).expect("rend");
    assert_eq!(y, h32(v::Y));
    assert_eq!(auth, h32(v::AUTH_INPUT_MAC));
    let ckeys = client
        .finish(&y, &auth)
        .expect("tor's AUTH_INPUT_MAC verifies");
    // Both sides expanded tor's NTOR_KEY_SEED.
    let mut shake = Shake256::default();
    Update::update(&mut shake, &h(v::NTOR_KEY_SEED));
    Update::update(&mut shake, M_HSEXPAND);
    let mut m = [0u8; 128];
    shake.finalize_xof().read(&mut m);
    let want = HsCircuitKeys::from_bytes(&m);
    for k in [&ckeys, &skeys] {
        assert_eq!(
            (k.df, k.db, k.kf, k.kb),
            (want.df, want.db, want.kf, want.kb)
        );
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
