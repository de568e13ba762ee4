//! Seeds for the crypto targets: ntor, ntor v3, link authentication.

use onionmix_cell::chan::Certs;
use onionmix_crypto::link_auth::{build_authenticate_payload, encode_certs_payload};
use onionmix_crypto::ntor::{NtorClient, ntor_server_with_ephemeral};
use onionmix_crypto::ntor_v3::{
    EXT_CC_REQUEST, NTOR3_CIRC_VERIFICATION, Ntor3Client, Ntor3Extension, encode_extensions,
};

use super::{Seed, cat, certs_payload, chunk, stock_certs_payload};
use crate::crypto::AUTH_FIELDS;
use crate::fixtures::{self, NOW};

pub(super) fn crypto(out: &mut Vec<Seed>) {
    let rf = fixtures::relay();
    let peer = fixtures::peer_relay();
    let k = &rf.keys;
    let (ntor_cc, _) = k.ntor_onion_key_crosscert(NOW, 86_400);
    for (name, c) in [
        ("type4", k.ed_signing_cert.clone()),
        ("type6", k.ed_link_auth_cert.clone()),
        ("type5", k.tls_link_cert(&rf.tls.cert_sha256, NOW)),
        ("ntor-crosscert", ntor_cc),
    ] {
        out.push(("ed25519_cert", name.into(), cat(&[&[0], &c])));
    }
    out.push((
        "ed25519_cert",
        "rsa-crosscert".into(),
        cat(&[&[1], &k.rsa_crosscert(NOW).expect("crosscert")]),
    ));
    let stock = Certs::parse(&stock_certs_payload()).expect("stock CERTS parse");
    for (t, c) in &stock.certs {
        match t {
            4 | 5 => out.push(("ed25519_cert", format!("stock-type{t}"), cat(&[&[0], c]))),
            7 => out.push(("ed25519_cert", "stock-type7".into(), cat(&[&[1], c]))),
            _ => out.push(("x509_cert", format!("stock-type{t}"), c.clone())),
        }
    }
    out.push(("x509_cert", "tls".into(), rf.tls.cert_der.clone()));
    out.push((
        "x509_cert",
        "identity".into(),
        k.rsa_identity_cert(&mut fixtures::rng(2), NOW)
            .expect("cert"),
    ));
    out.push((
        "x509_cert",
        "rsa-key".into(),
        k.rsa_identity.public().to_der(),
    ));
    // CERTS checks.
    out.push((
        "link_certs",
        "responder".into(),
        cat(&[&[1], certs_payload(rf)]),
    ));
    out.push((
        "link_certs",
        "stock-responder".into(),
        cat(&[&[0], &stock_certs_payload()]),
    ));
    let ini = peer
        .keys
        .initiator_certs(&mut fixtures::rng(3), NOW)
        .expect("certs");
    out.push((
        "link_certs",
        "initiator".into(),
        cat(&[&[2], &encode_certs_payload(&ini).expect("encode")]),
    ));
    out.push((
        "link_certs",
        "authenticate".into(),
        cat(&[
            &[4],
            &build_authenticate_payload(
                &AUTH_FIELDS,
                &peer.keys.ed_link_auth,
                &mut fixtures::rng(4),
            ),
        ]),
    ));
    // Circuit handshakes.
    let y = [0x11u8; 32];
    let x = [0x22u8; 32];
    let (client, skin) = NtorClient::with_ephemeral(k.rsa_id(), k.ntor.public(), &x);
    let (reply, _) =
        ntor_server_with_ephemeral(&k.rsa_id(), &k.ntor_keys(), &skin, &y).expect("ntor");
    drop(client);
    out.push((
        "circuit_handshake",
        "ntor-server".into(),
        cat(&[&[0], &y, &skin]),
    ));
    out.push((
        "circuit_handshake",
        "ntor-client".into(),
        cat(&[&[1], &y, &x, &reply]),
    ));
    let cc = encode_extensions(&[Ntor3Extension {
        ext_type: EXT_CC_REQUEST,
        data: vec![],
    }]);
    let (_, hs) =
        Ntor3Client::with_ephemeral(k.ed_id(), k.ntor.public(), &cc, NTOR3_CIRC_VERIFICATION, &x)
            .expect("ntor3");
    out.push((
        "circuit_handshake",
        "ntor3-server".into(),
        cat(&[&[2], &y, &hs]),
    ));
    out.push((
        "circuit_handshake",
        "ntor3-client".into(),
        cat(&[&[3], &y, &x, &chunk(&cc), &[0x33; 64]]),
    ));
    out.push((
        "circuit_handshake",
        "ntor3-exts".into(),
        cat(&[&[4], &y, &cc]),
    ));
    out.push((
        "circuit_handshake",
        "ntor-pair".into(),
        cat(&[&[5], &y, &x]),
    ));
    out.push((
        "circuit_handshake",
        "ntor3-pair".into(),
        cat(&[&[6], &y, &x, &chunk(&cc)]),
    ));
}
