//! crates/crypto: certificates and keys read from peers, CERTS and
//! AUTHENTICATE checks, and the circuit handshakes (ntor, ntor-v3).

use onionmix_cell::chan::Certs;
use onionmix_crypto::certs::{CertType, Ed25519Cert, RsaCrosscert};
use onionmix_crypto::link_auth::{
    Auth3Fields, parse_authenticate_payload, verify_authenticate, verify_initiator_certs,
    verify_responder_certs,
};
use onionmix_crypto::ntor::{NtorClient, ntor_server_with_ephemeral};
use onionmix_crypto::ntor_v3::{
    EXT_CC_REQUEST, EXT_CC_RESPONSE, NTOR3_CIRC_VERIFICATION, Ntor3Client, Ntor3Extension,
    encode_extensions, ntor3_server_with_ephemeral, parse_extensions,
};
use onionmix_crypto::rsa_id::RsaPublic;
use onionmix_crypto::x509::X509Cert;

use crate::fixtures::{self, NOW};
use crate::input::Input;

/// Ed25519 certificates (cert-spec; CERTS types 4, 5, 6, descriptors'
/// identity and ntor cross-certificates) and the RSA->Ed25519
/// cross-certificate (CERTS type 7). First byte selects the parser.
/// A parsed certificate must keep its bytes, and one made with the same
/// fields must parse to the same fields.
pub fn ed25519_cert(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if sel & 1 == 0 {
        let Ok(c) = Ed25519Cert::parse(rest) else {
            return;
        };
        assert_eq!(c.as_bytes(), rest);
        let _ = c.expires_unix();
        let _ = c.is_expired(NOW);
        let _ = c.certified_ed25519();
        let _ = c.check_signature(None);
        let _ = c.verify(Some(&fixtures::relay().keys.ed_id()), NOW);
        // Same fields, our signature: must parse back to them.
        let signer = &fixtures::relay().keys.ed_signing;
        let made = Ed25519Cert::create(
            c.cert_type,
            c.key_type,
            &c.certified_key,
            c.expiration_hours,
            signer,
            true,
        );
        let back = Ed25519Cert::parse(&made).expect("a certificate we make parses");
        assert_eq!(
            (back.cert_type, back.key_type, back.certified_key),
            (c.cert_type, c.key_type, c.certified_key)
        );
        assert_eq!(back.check_signature(None), Ok(signer.public()));
    } else {
        let Ok(c) = RsaCrosscert::parse(rest) else {
            return;
        };
        assert_eq!(c.as_bytes(), rest);
        let _ = c.verify(fixtures::relay().keys.rsa_identity.public(), NOW);
    }
}

/// X.509 certificates (CERTS types 1 and 2) and PKCS#1 RSA public keys
/// as peers send them. A parsed certificate keeps its DER; a parsed key
/// re-encodes to a key with the same fingerprint.
pub fn x509_cert(data: &[u8]) {
    if let Ok(c) = X509Cert::parse(data) {
        assert_eq!(c.der(), data);
        let _ = c.sha256();
        let _ = c.check_signature(&c.subject_key);
        let _ = c.check_validity(NOW);
        key_round_trip(&c.subject_key);
    }
    if let Ok(k) = RsaPublic::from_der(data) {
        key_round_trip(&k);
        // A tor-style signature with this key over anything: only refused.
        let _ = k.verify_raw(&[0; 20], data);
    }
    // The raw PKCS#1 check of onion-key-crosscert, with a real key.
    let onion = fixtures::relay().keys.rsa_onion.public();
    let _ = onion.recover_raw(data);
}

fn key_round_trip(k: &RsaPublic) {
    let der = k.to_der();
    let back = RsaPublic::from_der(&der).expect("an encoded key parses");
    assert_eq!(back.fingerprint(), k.fingerprint());
    assert_eq!(back.bits(), k.bits());
}

/// The AUTHENTICATE fields the link_certs target expects.
pub const AUTH_FIELDS: Auth3Fields = Auth3Fields {
    cid: [1; 32],
    sid: [2; 32],
    cid_ed: [3; 32],
    sid_ed: [4; 32],
    slog: [5; 32],
    clog: [6; 32],
    scert: [7; 32],
    tlssecrets: [8; 32],
};

/// The checks of a peer's CERTS cell (tor-spec 4.2) and AUTHENTICATE
/// cell. First byte: bit 0 which TLS certificate the responder presented
/// (the stock tor relay's or our fixture relay's), bits 1-2 the check
/// (responder CERTS, initiator CERTS, AUTHENTICATE with the fixture
/// peer's link key). Proven identities must be consistent.
pub fn link_certs(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let tls = if sel & 1 == 0 {
        fixtures::stock_tls_sha256()
    } else {
        fixtures::relay().tls.cert_sha256
    };
    match (sel >> 1) % 3 {
        0 => {
            let Ok(c) = Certs::parse(rest) else { return };
            if let Ok(id) = verify_responder_certs(&c.certs, &tls, NOW) {
                assert_eq!(id.rsa_id, id.rsa_key.fingerprint());
                assert_eq!(id.rsa_key.bits(), 1024);
                assert!(id.auth_key.is_none());
                assert_eq!(
                    Ed25519Cert::parse(c.get(CertType::SIGNING_V_TLS_CERT.0).unwrap_or(&[]))
                        .map(|c| c.certified_key),
                    Ok(tls)
                );
            }
        }
        1 => {
            let Ok(c) = Certs::parse(rest) else { return };
            if let Ok(id) = verify_initiator_certs(&c.certs, NOW) {
                assert_eq!(id.rsa_id, id.rsa_key.fingerprint());
                assert!(id.auth_key.is_some());
            }
        }
        _ => {
            let _ = parse_authenticate_payload(rest);
            let key = fixtures::peer_relay().keys.ed_link_auth.public();
            if verify_authenticate(&AUTH_FIELDS, rest, &key).is_ok() {
                let (t, body) = parse_authenticate_payload(rest).expect("verified, so parses");
                assert_eq!(t, 3);
                assert_eq!(&body[8..8 + 32], &AUTH_FIELDS.cid);
            }
        }
    }
}

/// The circuit handshakes a relay answers and a client finishes (CREATE2
/// and EXTEND2 handshake data, CREATED2 and EXTENDED2 replies), with the
/// fixture relay's ntor key. First byte selects: raw input to the ntor
/// server, to the ntor client, to the ntor-v3 server, to the ntor-v3
/// client, to the ntor-v3 extension parser; or a complete ntor / ntor-v3
/// exchange from fuzzed secrets and messages, whose two sides must agree.
pub fn circuit_handshake(data: &[u8]) {
    let mut inp = Input::new(data);
    let sel = inp.u8() % 7;
    let relay = &fixtures::relay().keys;
    let keys = relay.ntor_keys();
    let ntor_pub = relay.ntor.public();
    let y: [u8; 32] = inp.array();
    match sel {
        0 => {
            let _ = ntor_server_with_ephemeral(&relay.rsa_id(), &keys, inp.rest(), &y);
        }
        1 => {
            let x: [u8; 32] = inp.array();
            let (client, _) = NtorClient::with_ephemeral(relay.rsa_id(), ntor_pub, &x);
            let _ = client.finish(inp.rest());
        }
        2 => {
            let mut answer = |m: &[u8]| -> Option<Vec<u8>> { server_reply(m) };
            let _ = ntor3_server_with_ephemeral(
                &relay.ed_id(),
                &keys,
                inp.rest(),
                NTOR3_CIRC_VERIFICATION,
                &mut answer,
                &y,
            );
        }
        3 => {
            let x: [u8; 32] = inp.array();
            let msg = inp.chunk().to_vec();
            let Ok((client, _)) = Ntor3Client::with_ephemeral(
                relay.ed_id(),
                ntor_pub,
                &msg,
                NTOR3_CIRC_VERIFICATION,
                &x,
            ) else {
                return;
            };
            let _ = client.finish(inp.rest());
        }
        4 => {
            let msg = inp.rest();
            if let Ok(exts) = parse_extensions(msg) {
                assert_eq!(
                    encode_extensions(&exts),
                    msg,
                    "ntor-v3 extensions round trip"
                );
            }
        }
        5 => {
            let x: [u8; 32] = inp.array();
            let (client, skin) = NtorClient::with_ephemeral(relay.rsa_id(), ntor_pub, &x);
            let Ok((reply, server_keys)) =
                ntor_server_with_ephemeral(&relay.rsa_id(), &keys, &skin, &y)
            else {
                // Only a degenerate client key is refused.
                return;
            };
            let client_keys = client
                .finish(&reply)
                .expect("the client accepts the server's genuine reply");
            assert_eq!(client_keys, server_keys, "ntor sides disagree");
        }
        _ => {
            let x: [u8; 32] = inp.array();
            let msg = inp.chunk().to_vec();
            let Ok((client, hs)) = Ntor3Client::with_ephemeral(
                relay.ed_id(),
                ntor_pub,
                &msg,
                NTOR3_CIRC_VERIFICATION,
                &x,
            ) else {
                return;
            };
            let mut seen = None;
            let mut answer = |m: &[u8]| -> Option<Vec<u8>> {
                seen = Some(m.to_vec());
                server_reply(m)
            };
            let Ok((reply, mut server_ks)) = ntor3_server_with_ephemeral(
                &relay.ed_id(),
                &keys,
                &hs,
                NTOR3_CIRC_VERIFICATION,
                &mut answer,
                &y,
            ) else {
                return;
            };
            assert_eq!(
                seen.as_deref(),
                Some(&msg[..]),
                "server read another message"
            );
            let (server_msg, mut client_ks) = client
                .finish(&reply)
                .expect("the client accepts the server's genuine reply");
            assert_eq!(Some(server_msg), server_reply(&msg));
            let (mut a, mut b) = ([0u8; 72], [0u8; 72]);
            server_ks.read(&mut a);
            client_ks.read(&mut b);
            assert_eq!(a, b, "ntor-v3 keystreams differ");
        }
    }
}

/// What a relay answers to an ntor-v3 client message: the extensions must
/// parse; a congestion-control request gets a response, anything else an
/// empty list.
fn server_reply(m: &[u8]) -> Option<Vec<u8>> {
    let exts = parse_extensions(m).ok()?;
    let reply: Vec<Ntor3Extension> = exts
        .iter()
        .filter(|e| e.ext_type == EXT_CC_REQUEST)
        .map(|_| Ntor3Extension {
            ext_type: EXT_CC_RESPONSE,
            data: vec![31],
        })
        .collect();
    Some(encode_extensions(&reply))
}
