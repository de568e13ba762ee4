//! Property tests: every parser and verifier that sees network input
//! returns an error instead of panicking, on random and on mutated input.

use onionmix_crypto::certs::{Ed25519Cert, RsaCrosscert};
use onionmix_crypto::keys::decode_tagged;
use onionmix_crypto::link_auth::{
    Auth3Fields, parse_authenticate_payload, verify_authenticate, verify_initiator_certs,
    verify_responder_certs,
};
use onionmix_crypto::ntor::{NtorClient, NtorSecretKey, ntor_server_with_ephemeral};
use onionmix_crypto::relay_crypto::{ClientCircuitCrypto, RELAY_BODY_LEN};
use onionmix_crypto::rsa_id::RsaPublic;
use onionmix_crypto::x509::X509Cert;
use proptest::prelude::*;

const NOW: u64 = 1_795_354_689;

/// Valid samples to mutate: tor's type 4 cert, a crosscert, an X.509
/// certificate and an AUTHENTICATE payload.
fn samples() -> Vec<Vec<u8>> {
    let c4 = hex::decode(
        "01040006CC2A01F82294B866A31F01FC5D0DA8572850A9B929545C3266558D7D2316E3B74172B0010020040\
         0DCB604DB2034B00FD16986D4ADB9D16B21CB4E4457A33DEC0F538903683E96E9FF1A5203FA27F86EF7528D89\
         A0845D2520166E340754FFEA2AAE0F612B7CE5DA094A0236CDAC45034B0B6842C18E7F6B51B93A3CF7E60663B\
         8AD061C30A62602",
    )
    .expect("hex");
    let cc = hex::decode(
        "DCB604DB2034B00FD16986D4ADB9D16B21CB4E4457A33DEC0F538903683E96E90006DA3A805CF6006F917906\
         6534DE6B45AD47A5C469063EE462762723396DC9F25452A0A52DA3F5087DD239F2A311F6B0D4DFEFF4ABD089\
         DC3D0237A0ABAB19EB2045B91CDCAF04BE0A72D548A27BF2E77BD876ECFE5E1BE622350DA6BF31F6E306ED89\
         6488DD5B39409B23FC3EB7B2C9F7328EB18DA36D54D80575899EA6507CCBFCDF1F",
    )
    .expect("hex");
    vec![c4, cc, x509_sample(), auth_sample()]
}

fn x509_sample() -> Vec<u8> {
    use std::sync::OnceLock;
    static S: OnceLock<Vec<u8>> = OnceLock::new();
    S.get_or_init(|| {
        let mut rng = rand::rngs::OsRng;
        let k = onionmix_crypto::RsaKeypair::generate(&mut rng, 1024).expect("keygen");
        onionmix_crypto::x509::create_identity_cert(&mut rng, &k, NOW).expect("cert")
    })
    .clone()
}

fn fields() -> Auth3Fields {
    Auth3Fields {
        cid: [1; 32],
        sid: [2; 32],
        cid_ed: [3; 32],
        sid_ed: [4; 32],
        slog: [5; 32],
        clog: [6; 32],
        scert: [7; 32],
        tlssecrets: [8; 32],
    }
}

fn auth_sample() -> Vec<u8> {
    let mut rng = rand::rngs::OsRng;
    let k = onionmix_crypto::Ed25519Keypair::from_seed(&[9; 32]);
    onionmix_crypto::link_auth::build_authenticate_payload(&fields(), &k, &mut rng)
}

fn run_all(bytes: &[u8]) {
    let _ = Ed25519Cert::parse(bytes).map(|c| {
        let _ = c.verify(None, NOW);
        let _ = c.verify(Some(&[1; 32]), NOW);
        let _ = c.certified_ed25519();
    });
    let _ = RsaCrosscert::parse(bytes);
    let _ = X509Cert::parse(bytes).map(|c| {
        let _ = c.check_signature(&c.subject_key.clone());
        let _ = c.check_validity(NOW);
    });
    let _ = RsaPublic::from_der(bytes);
    let _ = parse_authenticate_payload(bytes);
    let _ = verify_authenticate(&fields(), bytes, &[3; 32]);
    let _ = decode_tagged("ed25519v1-cert", bytes);
    let certs: Vec<(u8, Vec<u8>)> = bytes
        .chunks(97)
        .enumerate()
        .map(|(i, c)| ((i as u8 % 8), c.to_vec()))
        .collect();
    let _ = verify_responder_certs(&certs, &[0; 32], NOW);
    let _ = verify_initiator_certs(&certs, NOW);
    let id = [7u8; 20];
    let relay = NtorSecretKey::from_secret_bytes(&[5; 32]);
    let _ = ntor_server_with_ephemeral(&id, std::slice::from_ref(&relay), bytes, &[6; 32]);
    let (c, _) = NtorClient::with_ephemeral(id, relay.public(), &[4; 32]);
    let _ = c.finish(bytes);
    let ed = [7u8; 32];
    let mut rep = |m: &[u8]| Some(m.to_vec());
    let _ = onionmix_crypto::ntor_v3::ntor3_server_with_ephemeral(
        &ed,
        std::slice::from_ref(&relay),
        bytes,
        b"circuit extend",
        &mut rep,
        &[6; 32],
    );
    if let Ok((c3, _)) = onionmix_crypto::ntor_v3::Ntor3Client::with_ephemeral(
        ed,
        relay.public(),
        &[],
        b"v",
        &[4; 32],
    ) {
        let _ = c3.finish(bytes);
    }
    let _ = onionmix_crypto::ntor_v3::parse_extensions(bytes);
}

#[test]
fn samples_are_valid() {
    let s = samples();
    Ed25519Cert::parse(&s[0])
        .expect("c4")
        .verify(None, 1_601_000_000)
        .expect("valid");
    RsaCrosscert::parse(&s[1]).expect("crosscert");
    X509Cert::parse(&s[2]).expect("x509");
    let k = onionmix_crypto::Ed25519Keypair::from_seed(&[9; 32]);
    verify_authenticate(&fields(), &s[3], &k.public()).expect("auth");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn random_input(bytes in proptest::collection::vec(any::<u8>(), 0..700)) {
        run_all(&bytes);
    }

    #[test]
    fn mutated_input(which in 0usize..4, edits in proptest::collection::vec((any::<u16>(), any::<u8>()), 1..6),
                     cut in any::<u16>(), grow in proptest::collection::vec(any::<u8>(), 0..8)) {
        let mut s = samples().swap_remove(which);
        for (pos, val) in edits {
            let i = usize::from(pos) % s.len();
            s[i] = val;
        }
        let keep = usize::from(cut) % (s.len() + 1);
        if keep > s.len() / 2 { s.truncate(keep); }
        s.extend_from_slice(&grow);
        run_all(&s);
    }

    #[test]
    fn client_decrypt_random_cells(cell in proptest::collection::vec(any::<u8>(), RELAY_BODY_LEN)) {
        let mut c = ClientCircuitCrypto::new();
        let keys = onionmix_crypto::CircuitKeys::from_ntor_kdf(&[3u8; 92]);
        c.add_hop(&keys).expect("room");
        c.add_hop(&keys).expect("room");
        let mut body = [0u8; RELAY_BODY_LEN];
        body.copy_from_slice(&cell);
        let _ = c.decrypt_inbound(&mut body);
    }
}
