//! Link authentication (tor-spec 4.2, 4.4.2): checking CERTS cells and
//! building/verifying AUTHENTICATE bodies of method 3,
//! "Ed25519-SHA256-RFC5705".
//!
//! # What the caller supplies (sans-IO)
//!
//! * `SLOG`: SHA-256 of every byte the responder sent on the connection up
//!   to and including AUTH_CHALLENGE (VERSIONS, CERTS, AUTH_CHALLENGE and any
//!   padding cells), as seen on the wire after TLS.
//! * `CLOG`: SHA-256 of every byte the initiator sent so far (VERSIONS,
//!   CERTS, padding), not including the AUTHENTICATE cell itself.
//! * `SCERT`: SHA-256 of the responder's TLS certificate (DER, the leaf
//!   the server presented).
//! * `TLSSECRETS`: 32 bytes of RFC 5705 keying material exported from the
//!   TLS session with label [`EXPORTER_LABEL`]
//!   (`"EXPORTER FOR TOR TLS CLIENT BINDING AUTH0003"`, no NUL) and
//!   context = CID, the SHA-256 of the initiator's RSA identity key (DER).
//!   This is what tor 0.4.9 does and what the current torspec says; the
//!   2023 tor-spec.txt said "the initiator's Ed25519 identity key", and tor
//!   rejects AUTHENTICATE cells built that way ("Some field in the
//!   AUTHENTICATE cell body was not as expected"). With rustls:
//!   `conn.export_keying_material(&mut [0u8; 32], EXPORTER_LABEL, Some(&cid))`.
//!   Both sides compute it the same way (the responder hashes the RSA key
//!   from the initiator's CERTS cell).

use rand_core::CryptoRngCore;
use subtle::ConstantTimeEq;

use crate::certs::{CertError, CertType, Ed25519Cert, RsaCrosscert, key_type};
use crate::ed25519::{Ed25519Keypair, verify as ed_verify};
use crate::rsa_id::RsaPublic;
use crate::x509::{X509Cert, X509Error};

/// AuthType of Ed25519-SHA256-RFC5705.
pub const AUTHTYPE_ED25519_SHA256_RFC5705: u16 = 3;
/// TYPE field of an AUTH0003 body.
pub const AUTH3_TYPE: &[u8; 8] = b"AUTH0003";
/// RFC 5705 exporter label for TLSSECRETS.
pub const EXPORTER_LABEL: &[u8] = b"EXPORTER FOR TOR TLS CLIENT BINDING AUTH0003";
/// Length of TYPE..TLSSECRETS.
pub const AUTH3_FIXED_LEN: usize = 8 + 8 * 32;
/// Length of RAND.
pub const AUTH3_RAND_LEN: usize = 24;
/// Length of a complete AUTH0003 body (fixed part, RAND, SIG).
pub const AUTH3_BODY_LEN: usize = AUTH3_FIXED_LEN + AUTH3_RAND_LEN + 64;

/// Errors from CERTS and AUTHENTICATE processing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinkAuthError {
    /// A required certificate is missing.
    #[error("CERTS cell lacks a certificate of type {0}")]
    MissingCert(u8),
    /// A certificate type appears twice.
    #[error("CERTS cell has two certificates of type {0}")]
    DuplicateCert(u8),
    /// The RSA identity key is not 1024 bits.
    #[error("RSA identity key has {0} bits, not 1024")]
    BadIdentitySize(usize),
    /// The type 5 certificate does not certify the TLS certificate.
    #[error("link certificate does not match the TLS certificate")]
    TlsCertMismatch,
    /// The cross-certificate names a different Ed25519 identity.
    #[error("RSA->Ed25519 cross-certificate names another identity")]
    CrosscertMismatch,
    /// An Ed25519 certificate problem.
    #[error("Ed25519 certificate: {0}")]
    Cert(#[from] CertError),
    /// An X.509 certificate problem.
    #[error("X.509 certificate: {0}")]
    X509(#[from] X509Error),
    /// The AUTHENTICATE cell is malformed.
    #[error("malformed AUTHENTICATE: {0}")]
    Malformed(&'static str),
    /// Unsupported AuthType.
    #[error("unsupported AUTHENTICATE type {0}")]
    UnsupportedAuthType(u16),
    /// A field of the AUTHENTICATE body has the wrong value.
    #[error("AUTHENTICATE fields do not match the expected values")]
    FieldMismatch,
    /// The AUTHENTICATE signature is invalid.
    #[error("AUTHENTICATE signature invalid")]
    BadSignature,
}

fn find(certs: &[(u8, Vec<u8>)], t: CertType) -> Result<&[u8], LinkAuthError> {
    let mut it = certs.iter().filter(|(ct, _)| *ct == t.0);
    let first = it.next().ok_or(LinkAuthError::MissingCert(t.0))?;
    if it.next().is_some() {
        return Err(LinkAuthError::DuplicateCert(t.0));
    }
    Ok(&first.1)
}

/// Identities proven by a peer's CERTS cell.
#[derive(Debug, Clone)]
pub struct PeerIdentity {
    /// RSA identity digest (SHA-1 of the DER key).
    pub rsa_id: [u8; 20],
    /// The RSA identity key.
    pub rsa_key: RsaPublic,
    /// Ed25519 identity key.
    pub ed_id: [u8; 32],
    /// Ed25519 signing key (from the type 4 certificate).
    pub ed_signing: [u8; 32],
    /// For an initiator: the Ed25519 link-authentication key (type 6) that
    /// must sign its AUTHENTICATE cell. `None` for a responder.
    pub auth_key: Option<[u8; 32]>,
}

/// Checks common to both sides: types 2, 4, 7.
fn check_id_chain(certs: &[(u8, Vec<u8>)], now_unix: u64) -> Result<PeerIdentity, LinkAuthError> {
    let id_cert = X509Cert::parse(find(certs, CertType::RSA_ID)?)?;
    let rsa_key = id_cert.subject_key.clone();
    if rsa_key.bits() != 1024 {
        return Err(LinkAuthError::BadIdentitySize(rsa_key.bits()));
    }
    id_cert.check_signature(&rsa_key)?;
    id_cert.check_validity(now_unix)?;

    let c4 = Ed25519Cert::parse(find(certs, CertType::IDENTITY_V_SIGNING)?)?;
    if c4.cert_type != CertType::IDENTITY_V_SIGNING {
        return Err(CertError::WrongType("CERTS type 4 holds another certificate type").into());
    }
    let ed_signing = c4
        .certified_ed25519()
        .ok_or(CertError::WrongType("type 4 must certify an Ed25519 key"))?;
    // The identity key must be carried in the certificate itself.
    let ed_id = c4.signing_key.ok_or(CertError::MissingSigner)?;
    c4.verify(Some(&ed_id), now_unix)?;

    let cc = RsaCrosscert::parse(find(certs, CertType::RSA_ID_V_IDENTITY)?)?;
    if !bool::from(cc.ed25519_key.ct_eq(&ed_id)) {
        return Err(LinkAuthError::CrosscertMismatch);
    }
    cc.verify(&rsa_key, now_unix)?;
    Ok(PeerIdentity {
        rsa_id: rsa_key.fingerprint(),
        rsa_key,
        ed_id,
        ed_signing,
        auth_key: None,
    })
}

/// Initiator side: authenticate a responder's CERTS cell (tor-spec 4.2,
/// Ed25519 + RSA case): types 2, 4, 5, 7 present once, all signatures and
/// lifetimes valid, and the type 5 certificate certifies `tls_cert_sha256`
/// (SHA-256 of the TLS certificate the responder presented).
pub fn verify_responder_certs(
    certs: &[(u8, Vec<u8>)],
    tls_cert_sha256: &[u8; 32],
    now_unix: u64,
) -> Result<PeerIdentity, LinkAuthError> {
    let id = check_id_chain(certs, now_unix)?;
    let c5 = Ed25519Cert::parse(find(certs, CertType::SIGNING_V_TLS_CERT)?)?;
    if c5.cert_type != CertType::SIGNING_V_TLS_CERT {
        return Err(CertError::WrongType("CERTS type 5 holds another certificate type").into());
    }
    if c5.key_type != key_type::SHA256_OF_X509 && c5.key_type != key_type::ED25519 {
        return Err(CertError::WrongType("type 5 must certify an X.509 digest").into());
    }
    c5.verify(Some(&id.ed_signing), now_unix)?;
    if !bool::from(c5.certified_key.ct_eq(tls_cert_sha256)) {
        return Err(LinkAuthError::TlsCertMismatch);
    }
    Ok(id)
}

/// Responder side: check an initiator's CERTS cell (types 2, 4, 6, 7).
/// This does NOT prove the initiator's identity by itself: the
/// AUTHENTICATE cell must then verify with the returned `auth_key`
/// ([`verify_authenticate`]).
pub fn verify_initiator_certs(
    certs: &[(u8, Vec<u8>)],
    now_unix: u64,
) -> Result<PeerIdentity, LinkAuthError> {
    let mut id = check_id_chain(certs, now_unix)?;
    let c6 = Ed25519Cert::parse(find(certs, CertType::SIGNING_V_LINK_AUTH)?)?;
    if c6.cert_type != CertType::SIGNING_V_LINK_AUTH {
        return Err(CertError::WrongType("CERTS type 6 holds another certificate type").into());
    }
    let auth_key = c6
        .certified_ed25519()
        .ok_or(CertError::WrongType("type 6 must certify an Ed25519 key"))?;
    c6.verify(Some(&id.ed_signing), now_unix)?;
    id.auth_key = Some(auth_key);
    Ok(id)
}

/// Encode a CERTS cell payload from `(type, body)` pairs. Fails if there
/// are more than 255 certificates or one is longer than 65535 bytes.
pub fn encode_certs_payload(certs: &[(u8, Vec<u8>)]) -> Result<Vec<u8>, LinkAuthError> {
    let n =
        u8::try_from(certs.len()).map_err(|_| LinkAuthError::Malformed("too many certificates"))?;
    let mut out = Vec::with_capacity(1 + certs.iter().map(|(_, c)| 3 + c.len()).sum::<usize>());
    out.push(n);
    for (t, c) in certs {
        let len =
            u16::try_from(c.len()).map_err(|_| LinkAuthError::Malformed("certificate too long"))?;
        out.push(*t);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(c);
    }
    Ok(out)
}

/// The fields of an AUTH0003 body that both sides compute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Auth3Fields {
    /// SHA-256 of the initiator's RSA identity key DER.
    pub cid: [u8; 32],
    /// SHA-256 of the responder's RSA identity key DER.
    pub sid: [u8; 32],
    /// Initiator's Ed25519 identity.
    pub cid_ed: [u8; 32],
    /// Responder's Ed25519 identity (or zeros).
    pub sid_ed: [u8; 32],
    /// SHA-256 of the responder's handshake bytes.
    pub slog: [u8; 32],
    /// SHA-256 of the initiator's handshake bytes.
    pub clog: [u8; 32],
    /// SHA-256 of the responder's TLS certificate.
    pub scert: [u8; 32],
    /// RFC 5705 exporter output (see module docs).
    pub tlssecrets: [u8; 32],
}

impl Auth3Fields {
    /// TYPE | CID | SID | CID_ED | SID_ED | SLOG | CLOG | SCERT | TLSSECRETS.
    pub fn fixed_part(&self) -> [u8; AUTH3_FIXED_LEN] {
        let mut out = [0u8; AUTH3_FIXED_LEN];
        out[..8].copy_from_slice(AUTH3_TYPE);
        let fields = [
            &self.cid,
            &self.sid,
            &self.cid_ed,
            &self.sid_ed,
            &self.slog,
            &self.clog,
            &self.scert,
            &self.tlssecrets,
        ];
        for (i, f) in fields.iter().enumerate() {
            out[8 + 32 * i..8 + 32 * (i + 1)].copy_from_slice(&f[..]);
        }
        out
    }
}

/// Build the Authentication field of an AUTH0003 AUTHENTICATE cell:
/// fixed part, 24 random bytes, and an Ed25519 signature by `auth_key` (the
/// key certified by our type 6 certificate) over everything before it.
pub fn build_auth3(
    fields: &Auth3Fields,
    auth_key: &Ed25519Keypair,
    rng: &mut dyn CryptoRngCore,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(AUTH3_BODY_LEN);
    out.extend_from_slice(&fields.fixed_part());
    let mut rand = [0u8; AUTH3_RAND_LEN];
    rng.fill_bytes(&mut rand);
    out.extend_from_slice(&rand);
    let sig = auth_key.sign(&out);
    out.extend_from_slice(&sig);
    out
}

/// Build a complete AUTHENTICATE cell payload: AuthType(2)=3, AuthLen(2),
/// Authentication.
pub fn build_authenticate_payload(
    fields: &Auth3Fields,
    auth_key: &Ed25519Keypair,
    rng: &mut dyn CryptoRngCore,
) -> Vec<u8> {
    let body = build_auth3(fields, auth_key, rng);
    let mut out = Vec::with_capacity(4 + body.len());
    out.extend_from_slice(&AUTHTYPE_ED25519_SHA256_RFC5705.to_be_bytes());
    // AUTH3_BODY_LEN (352) fits in u16.
    out.extend_from_slice(&(AUTH3_BODY_LEN as u16).to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Split an AUTHENTICATE payload into (AuthType, Authentication); extra
/// bytes after AuthLen are ignored as the spec requires.
pub fn parse_authenticate_payload(payload: &[u8]) -> Result<(u16, &[u8]), LinkAuthError> {
    if payload.len() < 4 {
        return Err(LinkAuthError::Malformed(
            "AUTHENTICATE shorter than its header",
        ));
    }
    let t = u16::from_be_bytes([payload[0], payload[1]]);
    let len = usize::from(u16::from_be_bytes([payload[2], payload[3]]));
    let body = payload
        .get(4..4 + len)
        .ok_or(LinkAuthError::Malformed("AuthLen exceeds the cell"))?;
    Ok((t, body))
}

/// Verify an AUTH0003 Authentication field: TYPE..TLSSECRETS must equal
/// `expected`, and the last 64 bytes must be a signature by `auth_key` over
/// everything before them (RAND and any extra bytes are not checked).
pub fn verify_auth3(
    expected: &Auth3Fields,
    auth: &[u8],
    auth_key: &[u8; 32],
) -> Result<(), LinkAuthError> {
    if auth.len() < AUTH3_BODY_LEN {
        return Err(LinkAuthError::Malformed("AUTH0003 body too short"));
    }
    let fixed = expected.fixed_part();
    if !bool::from(auth[..AUTH3_FIXED_LEN].ct_eq(&fixed[..])) {
        return Err(LinkAuthError::FieldMismatch);
    }
    let (signed, sig) = auth.split_at(auth.len() - 64);
    let mut s = [0u8; 64];
    s.copy_from_slice(sig);
    if ed_verify(auth_key, signed, &s) {
        Ok(())
    } else {
        Err(LinkAuthError::BadSignature)
    }
}

/// Responder side: verify a whole AUTHENTICATE payload (method 3 only).
pub fn verify_authenticate(
    expected: &Auth3Fields,
    payload: &[u8],
    auth_key: &[u8; 32],
) -> Result<(), LinkAuthError> {
    let (t, body) = parse_authenticate_payload(payload)?;
    if t != AUTHTYPE_ED25519_SHA256_RFC5705 {
        return Err(LinkAuthError::UnsupportedAuthType(t));
    }
    verify_auth3(expected, body, auth_key)
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn auth3_roundtrip_and_tamper() {
        let mut rng = rand::rngs::OsRng;
        let k = Ed25519Keypair::generate(&mut rng);
        let f = fields();
        let p = build_authenticate_payload(&f, &k, &mut rng);
        assert_eq!(p.len(), 4 + AUTH3_BODY_LEN);
        assert_eq!(&p[4..12], b"AUTH0003");
        verify_authenticate(&f, &p, &k.public()).expect("valid");
        // extra bytes after the Authentication field are ignored
        let mut q = p.clone();
        q.extend_from_slice(&[0; 10]);
        verify_authenticate(&f, &q, &k.public()).expect("trailing ignored");
        let mut g = f.clone();
        g.slog[0] ^= 1;
        assert_eq!(
            verify_authenticate(&g, &p, &k.public()),
            Err(LinkAuthError::FieldMismatch)
        );
        let mut bad = p.clone();
        bad[4 + AUTH3_FIXED_LEN] ^= 1; // RAND is signed
        assert_eq!(
            verify_authenticate(&f, &bad, &k.public()),
            Err(LinkAuthError::BadSignature)
        );
        let other = Ed25519Keypair::generate(&mut rng);
        assert_eq!(
            verify_authenticate(&f, &p, &other.public()),
            Err(LinkAuthError::BadSignature)
        );
        let mut wrong_type = p.clone();
        wrong_type[1] = 1;
        assert_eq!(
            verify_authenticate(&f, &wrong_type, &k.public()),
            Err(LinkAuthError::UnsupportedAuthType(1))
        );
        assert!(verify_authenticate(&f, &p[..p.len() - 1], &k.public()).is_err());
        assert!(parse_authenticate_payload(&[0, 3, 0]).is_err());
    }
}
