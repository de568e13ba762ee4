//! End-to-end use of the API the link and circuit layers call: relay key
//! sets, CERTS cells in both directions, AUTHENTICATE, descriptor
//! cross-certificates, key storage and rotation.

use onionmix_crypto::certs::{CertType, Ed25519Cert};
use onionmix_crypto::ed25519::{ed25519_from_curve25519_public, verify as ed_verify};
use onionmix_crypto::keys::{RelayKeys, SIGNING_KEY_LIFETIME_SECS};
use onionmix_crypto::link_auth::{
    Auth3Fields, LinkAuthError, build_authenticate_payload, encode_certs_payload,
    verify_authenticate, verify_initiator_certs, verify_responder_certs,
};
use onionmix_crypto::ntor::{NtorClient, ntor_server};
use onionmix_crypto::x509::{TlsIdentity, X509Cert};

const NOW: u64 = 1_795_354_689;

fn keys_and_tls() -> (RelayKeys, TlsIdentity) {
    let mut rng = rand::rngs::OsRng;
    let keys = RelayKeys::generate(&mut rng, NOW).expect("keys");
    let tls = TlsIdentity::generate(&mut rng, &keys.rsa_identity, NOW, 86_400).expect("tls");
    (keys, tls)
}

#[test]
fn certs_and_authenticate_both_directions() {
    let mut rng = rand::rngs::OsRng;
    let (responder, tls) = keys_and_tls();
    let initiator = RelayKeys::generate(&mut rng, NOW).expect("keys");

    // The TLS certificate is a type 1 link cert signed by the identity.
    let link = X509Cert::parse(&tls.cert_der).expect("tls cert");
    link.check_signature(responder.rsa_identity.public())
        .expect("signed by identity");
    assert_eq!(link.subject_key.bits(), 2048);
    assert_eq!(link.sha256(), tls.cert_sha256);

    // Initiator checks the responder's CERTS.
    let rcerts = responder
        .responder_certs(&mut rng, &tls, NOW)
        .expect("certs");
    assert_eq!(
        rcerts.iter().map(|c| c.0).collect::<Vec<_>>(),
        vec![1, 2, 4, 5, 7]
    );
    let payload = encode_certs_payload(&rcerts).expect("encode");
    assert_eq!(payload[0], 5);
    let proven = verify_responder_certs(&rcerts, &tls.cert_sha256, NOW).expect("responder proven");
    assert_eq!(proven.rsa_id, responder.rsa_id());
    assert_eq!(proven.ed_id, responder.ed_id());
    assert!(matches!(
        verify_responder_certs(&rcerts, &[0; 32], NOW),
        Err(LinkAuthError::TlsCertMismatch)
    ));
    assert!(
        verify_responder_certs(&rcerts, &tls.cert_sha256, NOW + 3 * 86_400).is_err(),
        "type 5 expires"
    );
    let mut missing = rcerts.clone();
    missing.retain(|c| c.0 != 7);
    assert!(matches!(
        verify_responder_certs(&missing, &tls.cert_sha256, NOW),
        Err(LinkAuthError::MissingCert(7))
    ));
    let mut dup = rcerts.clone();
    dup.push(rcerts[2].clone());
    assert!(matches!(
        verify_responder_certs(&dup, &tls.cert_sha256, NOW),
        Err(LinkAuthError::DuplicateCert(4))
    ));
    // Crosscert from another relay: rejected.
    let mut mixed = rcerts.clone();
    mixed[4] = (7, initiator.rsa_crosscert(NOW).expect("cc"));
    assert!(verify_responder_certs(&mixed, &tls.cert_sha256, NOW).is_err());

    // Responder checks the initiator's CERTS, then AUTHENTICATE.
    let icerts = initiator.initiator_certs(&mut rng, NOW).expect("certs");
    assert_eq!(
        icerts.iter().map(|c| c.0).collect::<Vec<_>>(),
        vec![2, 4, 6, 7]
    );
    let iproven = verify_initiator_certs(&icerts, NOW).expect("initiator certs");
    assert_eq!(iproven.ed_id, initiator.ed_id());
    let auth_key = iproven.auth_key.expect("type 6 key");
    assert_eq!(auth_key, initiator.ed_link_auth.public());

    let fields = Auth3Fields {
        cid: initiator.rsa_identity.public().sha256_of_der(),
        sid: responder.rsa_identity.public().sha256_of_der(),
        cid_ed: initiator.ed_id(),
        sid_ed: responder.ed_id(),
        slog: [0x51; 32],
        clog: [0xc1; 32],
        scert: tls.cert_sha256,
        tlssecrets: [0x77; 32],
    };
    let auth = build_authenticate_payload(&fields, &initiator.ed_link_auth, &mut rng);
    verify_authenticate(&fields, &auth, &auth_key).expect("authenticated");
    let mut other = fields.clone();
    other.tlssecrets[0] ^= 1;
    assert_eq!(
        verify_authenticate(&other, &auth, &auth_key),
        Err(LinkAuthError::FieldMismatch)
    );
}

#[test]
fn descriptor_crosscerts_and_ntor_keys() {
    let mut rng = rand::rngs::OsRng;
    let mut keys = RelayKeys::generate(&mut rng, NOW).expect("keys");

    // ntor-onion-key-crosscert verifies with the key derived from the
    // *public* ntor key and sign bit, as an authority checks it.
    let (cc, signbit) = keys.ntor_onion_key_crosscert(NOW, 28 * 86_400);
    let c = Ed25519Cert::parse(&cc).expect("parse");
    assert_eq!(c.cert_type, CertType::NTOR_CC_IDENTITY);
    assert_eq!(c.certified_ed25519(), Some(keys.ed_id()));
    let ed = ed25519_from_curve25519_public(&keys.ntor.public(), signbit).expect("convertible");
    c.verify(Some(&ed), NOW).expect("crosscert valid");

    // onion-key-crosscert: RSA onion key over SHA1(id) | ed id.
    let sig = keys.tap_onion_key_crosscert().expect("sign");
    let mut data = keys.rsa_id().to_vec();
    data.extend_from_slice(&keys.ed_id());
    keys.rsa_onion
        .public()
        .verify_raw(&data, &sig)
        .expect("tap crosscert");
    onionmix_crypto::keys::verify_tap_onion_key_crosscert(
        keys.rsa_onion.public(),
        &sig,
        &keys.rsa_id(),
        &keys.ed_id(),
    )
    .expect("authority-style check");
    assert!(
        onionmix_crypto::keys::verify_tap_onion_key_crosscert(
            keys.rsa_onion.public(),
            &sig,
            &[0; 20],
            &keys.ed_id()
        )
        .is_err()
    );

    // ntor rotation keeps the previous key usable.
    let old_pub = keys.ntor.public();
    keys.rotate_ntor_key(&mut rng);
    assert_ne!(keys.ntor.public(), old_pub);
    let (client, skin) = NtorClient::new(keys.rsa_id(), old_pub, &mut rng);
    let (reply, skeys) =
        ntor_server(&keys.rsa_id(), &keys.ntor_keys(), &skin, &mut rng).expect("old key accepted");
    assert_eq!(client.finish(&reply).expect("client"), skeys);
    keys.drop_previous_ntor_key();
    let (_, skin) = NtorClient::new(keys.rsa_id(), old_pub, &mut rng);
    assert!(ntor_server(&keys.rsa_id(), &keys.ntor_keys(), &skin, &mut rng).is_err());
}

#[test]
fn save_load_rotate() {
    let mut rng = rand::rngs::OsRng;
    let mut keys = RelayKeys::generate(&mut rng, NOW).expect("keys");
    keys.rotate_ntor_key(&mut rng);
    let dir = tempfile::tempdir().expect("tempdir");
    let kdir = dir.path().join("keys");
    keys.save(&kdir).expect("save");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&kdir).expect("dir").permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        for e in std::fs::read_dir(&kdir).expect("list") {
            let e = e.expect("entry");
            let mode = e.metadata().expect("meta").permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", e.path().display());
        }
    }
    let back = RelayKeys::load(&kdir, &mut rng, NOW).expect("load");
    assert_eq!(back.rsa_id(), keys.rsa_id());
    assert_eq!(back.ed_id(), keys.ed_id());
    assert_eq!(back.ed_signing.public(), keys.ed_signing.public());
    assert_eq!(back.ed_signing_cert, keys.ed_signing_cert);
    assert_eq!(back.ed_link_auth_cert, keys.ed_link_auth_cert);
    assert_eq!(back.ntor.public(), keys.ntor.public());
    assert_eq!(
        back.ntor_previous.as_ref().map(|k| k.public()),
        keys.ntor_previous.as_ref().map(|k| k.public())
    );
    assert_eq!(back.rsa_onion.public(), keys.rsa_onion.public());

    // Signing key rotation before expiry.
    assert!(!keys.signing_key_needs_rotation(NOW).expect("parse"));
    let late = NOW + SIGNING_KEY_LIFETIME_SECS - 3600;
    assert!(keys.signing_key_needs_rotation(late).expect("parse"));
    let old_signing = keys.ed_signing.public();
    keys.rotate_signing_key(&mut rng, late).expect("rotate");
    assert_ne!(keys.ed_signing.public(), old_signing);
    assert!(!keys.signing_key_needs_rotation(late).expect("parse"));
    let c = Ed25519Cert::parse(&keys.ed_signing_cert).expect("parse");
    c.verify(Some(&keys.ed_id()), late).expect("new cert valid");
    // link-auth cert re-certified by the new signing key
    let l = Ed25519Cert::parse(&keys.ed_link_auth_cert).expect("parse");
    l.verify(Some(&keys.ed_signing.public()), late)
        .expect("relinked");
    assert!(
        keys.link_auth_needs_rotation(late + 2 * 86_400)
            .expect("parse")
    );
    keys.rotate_link_auth_key(&mut rng, late + 2 * 86_400);
    assert!(
        !keys
            .link_auth_needs_rotation(late + 2 * 86_400)
            .expect("parse")
    );

    // Offline master key: loading works, signing rotation does not.
    std::fs::remove_file(kdir.join("ed25519_master_id_secret_key")).expect("rm");
    let mut offline = RelayKeys::load(&kdir, &mut rng, NOW).expect("load");
    assert!(offline.ed_identity.is_none());
    assert!(offline.rotate_signing_key(&mut rng, NOW).is_err());
    // Signatures are real Ed25519 signatures.
    let s = offline.ed_signing.sign(b"x");
    assert!(ed_verify(&offline.ed_signing.public(), b"x", &s));

    // Corrupted files give errors, not panics.
    std::fs::write(kdir.join("secret_onion_key_ntor"), b"== c25519v1: onion ==").expect("write");
    assert!(RelayKeys::load(&kdir, &mut rng, NOW).is_err());
}
