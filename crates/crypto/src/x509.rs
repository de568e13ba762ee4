//! X.509 certificates as they appear in CERTS cells (tor-spec 4.2): type 2
//! (self-signed RSA-1024 identity certificate) and type 1 (link
//! certificate signed by the identity key), plus [`TlsIdentity`], the TLS
//! certificate and key our relays serve.
//!
//! Certificates are built and parsed with the RustCrypto `x509-cert`/`der`
//! crates and signed with the `rsa` crate (ring cannot sign with 1024-bit
//! RSA). Like tor's, they are version 3, carry only a CN in issuer and
//! subject, no extensions, and use sha256WithRSAEncryption.

use der::asn1::{BitString, GeneralizedTime, UtcTime};
use der::{Decode, Encode};
use rand_core::CryptoRngCore;
use sha2::{Digest, Sha256};
use spki::{AlgorithmIdentifierOwned, ObjectIdentifier, SubjectPublicKeyInfoOwned};
use std::str::FromStr;
use std::time::Duration;
use x509_cert::certificate::{Certificate, TbsCertificate, Version};
use x509_cert::name::Name;
use x509_cert::serial_number::SerialNumber;
use x509_cert::time::{Time, Validity};
use zeroize::Zeroizing;

use crate::rsa_id::{RsaError, RsaKeypair, RsaPublic};

/// rsaEncryption.
pub const OID_RSA_ENCRYPTION: ObjectIdentifier =
    ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.1");
/// sha256WithRSAEncryption.
pub const OID_SHA256_WITH_RSA: ObjectIdentifier =
    ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.11");
/// sha1WithRSAEncryption (accepted when verifying old certificates).
pub const OID_SHA1_WITH_RSA: ObjectIdentifier =
    ObjectIdentifier::new_unwrap("1.2.840.113549.1.1.5");

/// Tor accepts X.509 certificates that expired up to this long ago
/// (`TOR_X509_PAST_SLOP`).
pub const PAST_SLOP_SECS: u64 = 2 * 24 * 3600;
/// Tor accepts X.509 certificates that become valid up to this far in the
/// future (`TOR_X509_FUTURE_SLOP`).
pub const FUTURE_SLOP_SECS: u64 = 30 * 24 * 3600;
/// Largest certificate we parse.
pub const MAX_X509_LEN: usize = 16 * 1024;

/// X.509 errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum X509Error {
    /// DER did not parse.
    #[error("malformed X.509 certificate: {0}")]
    Malformed(String),
    /// Not an RSA subject key, or an unsupported signature algorithm.
    #[error("unsupported X.509 algorithm: {0}")]
    Unsupported(&'static str),
    /// The signature did not verify.
    #[error("bad X.509 signature")]
    BadSignature,
    /// Outside the validity period (with tor's slop).
    #[error("X.509 certificate not valid at {now} (valid {not_before}..{not_after})")]
    NotValid {
        /// notBefore, Unix seconds.
        not_before: u64,
        /// notAfter, Unix seconds.
        not_after: u64,
        /// Time checked.
        now: u64,
    },
    /// RSA failure.
    #[error("RSA: {0}")]
    Rsa(#[from] RsaError),
}

impl From<der::Error> for X509Error {
    fn from(e: der::Error) -> Self {
        X509Error::Malformed(e.to_string())
    }
}

/// A parsed X.509 certificate with an RSA subject key.
#[derive(Debug, Clone)]
pub struct X509Cert {
    der: Vec<u8>,
    tbs_der: Vec<u8>,
    sig_alg: ObjectIdentifier,
    signature: Vec<u8>,
    /// The subject's RSA public key.
    pub subject_key: RsaPublic,
    /// notBefore, Unix seconds.
    pub not_before: u64,
    /// notAfter, Unix seconds.
    pub not_after: u64,
}

impl X509Cert {
    /// Parse a DER certificate whose subject key is RSA.
    pub fn parse(der_bytes: &[u8]) -> Result<Self, X509Error> {
        if der_bytes.len() > MAX_X509_LEN {
            return Err(X509Error::Malformed("certificate too long".into()));
        }
        let cert = Certificate::from_der(der_bytes)?;
        let tbs = &cert.tbs_certificate;
        if tbs.signature.oid != cert.signature_algorithm.oid {
            return Err(X509Error::Malformed(
                "inner and outer signature algorithms differ".into(),
            ));
        }
        let spki = &tbs.subject_public_key_info;
        if spki.algorithm.oid != OID_RSA_ENCRYPTION {
            return Err(X509Error::Unsupported("subject key is not RSA"));
        }
        let key_bytes = spki
            .subject_public_key
            .as_bytes()
            .ok_or_else(|| X509Error::Malformed("unaligned key bit string".into()))?;
        let subject_key = RsaPublic::from_der(key_bytes)?;
        let signature = cert
            .signature
            .as_bytes()
            .ok_or_else(|| X509Error::Malformed("unaligned signature bit string".into()))?
            .to_vec();
        Ok(Self {
            der: der_bytes.to_vec(),
            tbs_der: tbs.to_der()?,
            sig_alg: cert.signature_algorithm.oid,
            signature,
            subject_key,
            not_before: tbs.validity.not_before.to_unix_duration().as_secs(),
            not_after: tbs.validity.not_after.to_unix_duration().as_secs(),
        })
    }

    /// The DER encoding.
    pub fn der(&self) -> &[u8] {
        &self.der
    }

    /// SHA-256 of the DER encoding (SCERT; type 5 certified digest).
    pub fn sha256(&self) -> [u8; 32] {
        Sha256::digest(&self.der).into()
    }

    /// Check the signature against `issuer` (sha256WithRSA or sha1WithRSA).
    pub fn check_signature(&self, issuer: &RsaPublic) -> Result<(), X509Error> {
        let r = if self.sig_alg == OID_SHA256_WITH_RSA {
            issuer.verify_pkcs1_sha256(&self.tbs_der, &self.signature)
        } else if self.sig_alg == OID_SHA1_WITH_RSA {
            issuer.verify_pkcs1_sha1(&self.tbs_der, &self.signature)
        } else {
            return Err(X509Error::Unsupported("signature algorithm"));
        };
        r.map_err(|_| X509Error::BadSignature)
    }

    /// Check the validity period against `now_unix` with tor's slop
    /// ([`PAST_SLOP_SECS`], [`FUTURE_SLOP_SECS`]).
    pub fn check_validity(&self, now_unix: u64) -> Result<(), X509Error> {
        let ok = now_unix.saturating_add(FUTURE_SLOP_SECS) >= self.not_before
            && now_unix <= self.not_after.saturating_add(PAST_SLOP_SECS);
        if ok {
            Ok(())
        } else {
            Err(X509Error::NotValid {
                not_before: self.not_before,
                not_after: self.not_after,
                now: now_unix,
            })
        }
    }
}

fn x509_time(unix: u64) -> Result<Time, X509Error> {
    let d = Duration::from_secs(unix);
    // RFC 5280: UTCTime through 2049, GeneralizedTime after.
    if unix < 2_524_608_000 {
        Ok(Time::UtcTime(UtcTime::from_unix_duration(d)?))
    } else {
        Ok(Time::GeneralTime(GeneralizedTime::from_unix_duration(d)?))
    }
}

/// A random host name like tor uses for certificate names
/// (`www.<random>.net` / `.com`).
pub fn random_hostname(rng: &mut dyn CryptoRngCore, suffix: &str) -> String {
    const ALPHA: &[u8] = b"abcdefghijklmnopqrstuvwxyz234567";
    let len = 8 + (rng.next_u32() % 13) as usize;
    let s: String = (0..len)
        .map(|_| ALPHA[(rng.next_u32() % 32) as usize] as char)
        .collect();
    format!("www.{s}.{suffix}")
}

/// Build and sign a tor-style X.509 certificate: version 3, subject key
/// `subject`, signed by `issuer_key` with sha256WithRSAEncryption, CN-only
/// names, no extensions.
pub fn create_cert(
    rng: &mut dyn CryptoRngCore,
    subject: &RsaPublic,
    subject_cn: &str,
    issuer_key: &RsaKeypair,
    issuer_cn: &str,
    not_before_unix: u64,
    not_after_unix: u64,
) -> Result<Vec<u8>, X509Error> {
    let mut serial = [0u8; 8];
    rng.fill_bytes(&mut serial);
    serial[0] = (serial[0] & 0x7f) | 0x01;
    let sig_alg = AlgorithmIdentifierOwned {
        oid: OID_SHA256_WITH_RSA,
        parameters: Some(der::Any::null()),
    };
    let name = |cn: &str| Name::from_str(&format!("CN={cn}")).map_err(X509Error::from);
    let tbs = TbsCertificate {
        version: Version::V3,
        serial_number: SerialNumber::new(&serial)?,
        signature: sig_alg.clone(),
        issuer: name(issuer_cn)?,
        validity: Validity {
            not_before: x509_time(not_before_unix)?,
            not_after: x509_time(not_after_unix)?,
        },
        subject: name(subject_cn)?,
        subject_public_key_info: SubjectPublicKeyInfoOwned {
            algorithm: AlgorithmIdentifierOwned {
                oid: OID_RSA_ENCRYPTION,
                parameters: Some(der::Any::null()),
            },
            subject_public_key: BitString::from_bytes(&subject.to_der())?,
        },
        issuer_unique_id: None,
        subject_unique_id: None,
        extensions: None,
    };
    let tbs_der = tbs.to_der()?;
    let sig = issuer_key.sign_pkcs1_sha256(&tbs_der)?;
    let cert = Certificate {
        tbs_certificate: tbs,
        signature_algorithm: sig_alg,
        signature: BitString::from_bytes(&sig)?,
    };
    Ok(cert.to_der()?)
}

/// Lifetime tor gives its self-signed identity certificate.
pub const IDENTITY_CERT_LIFETIME_SECS: u64 = 365 * 24 * 3600;

/// Create the self-signed identity certificate (CERTS type 2). Like tor,
/// it is backdated by a day.
pub fn create_identity_cert(
    rng: &mut dyn CryptoRngCore,
    identity: &RsaKeypair,
    now_unix: u64,
) -> Result<Vec<u8>, X509Error> {
    let cn = random_hostname(rng, "net");
    create_cert(
        rng,
        identity.public(),
        &cn,
        identity,
        &cn,
        now_unix.saturating_sub(24 * 3600),
        now_unix + IDENTITY_CERT_LIFETIME_SECS,
    )
}

/// The TLS identity of a relay: an RSA-2048 link key and its certificate
/// signed by the relay's RSA identity key. The certificate doubles as the
/// CERTS type 1 link certificate, and its SHA-256 is what the type 5
/// Ed25519 certificate certifies.
///
/// Feed it to rustls as `CertificateDer::from(cert_der)` (chain of one)
/// and `PrivateKeyDer::Pkcs8(key_pkcs8_der)`; ring serves RSA-2048 keys.
#[derive(Clone)]
pub struct TlsIdentity {
    /// The TLS certificate (DER).
    pub cert_der: Vec<u8>,
    /// The TLS private key, PKCS#8 DER.
    pub key_pkcs8_der: Zeroizing<Vec<u8>>,
    /// SHA-256 of `cert_der`.
    pub cert_sha256: [u8; 32],
    /// notAfter of the certificate, Unix seconds.
    pub not_after: u64,
}

impl std::fmt::Debug for TlsIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TlsIdentity")
            .field("cert_sha256", &hex::encode(self.cert_sha256))
            .field("not_after", &self.not_after)
            .finish_non_exhaustive()
    }
}

/// Bits of the TLS link key (tor: `RSA_LINK_KEY_BITS`).
pub const TLS_LINK_KEY_BITS: usize = 2048;

impl TlsIdentity {
    /// Generate a new link key and certificate valid from a day before
    /// `now_unix` for `lifetime_secs`, issued by `identity`.
    pub fn generate(
        rng: &mut dyn CryptoRngCore,
        identity: &RsaKeypair,
        now_unix: u64,
        lifetime_secs: u64,
    ) -> Result<Self, X509Error> {
        let link = RsaKeypair::generate(rng, TLS_LINK_KEY_BITS)?;
        Self::with_link_key(rng, identity, &link, now_unix, lifetime_secs)
    }

    /// As [`TlsIdentity::generate`] with a given link key.
    pub fn with_link_key(
        rng: &mut dyn CryptoRngCore,
        identity: &RsaKeypair,
        link: &RsaKeypair,
        now_unix: u64,
        lifetime_secs: u64,
    ) -> Result<Self, X509Error> {
        let subject = random_hostname(rng, "net");
        let issuer = random_hostname(rng, "com");
        let not_after = now_unix + lifetime_secs;
        let cert_der = create_cert(
            rng,
            link.public(),
            &subject,
            identity,
            &issuer,
            now_unix.saturating_sub(24 * 3600),
            not_after,
        )?;
        let cert_sha256 = Sha256::digest(&cert_der).into();
        Ok(Self {
            cert_der,
            key_pkcs8_der: link.to_pkcs8_der(),
            cert_sha256,
            not_after,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn create_parse_verify() {
        let mut rng = rand::rngs::OsRng;
        let id = RsaKeypair::generate(&mut rng, 1024).expect("keygen");
        let now = 1_700_000_000;
        let der = create_identity_cert(&mut rng, &id, now).expect("cert");
        let c = X509Cert::parse(&der).expect("parse");
        assert_eq!(c.subject_key, *id.public());
        c.check_signature(id.public()).expect("self-signed");
        c.check_validity(now).expect("valid");
        assert!(
            c.check_validity(now + IDENTITY_CERT_LIFETIME_SECS + PAST_SLOP_SECS + 1)
                .is_err()
        );
        assert!(
            c.check_validity(now - 24 * 3600 - FUTURE_SLOP_SECS - 1)
                .is_err()
        );
        let other = RsaKeypair::generate(&mut rng, 1024).expect("keygen");
        assert_eq!(
            c.check_signature(other.public()),
            Err(X509Error::BadSignature)
        );
        // link cert signed by identity
        let link_der = create_cert(
            &mut rng,
            other.public(),
            "www.a.net",
            &id,
            "www.b.com",
            now,
            now + 3600,
        )
        .expect("cert");
        let l = X509Cert::parse(&link_der).expect("parse");
        l.check_signature(id.public()).expect("signed by id");
        assert_eq!(l.subject_key, *other.public());
        assert!(X509Cert::parse(&link_der[..link_der.len() - 1]).is_err());
        // far-future dates use GeneralizedTime
        let far =
            create_cert(&mut rng, other.public(), "a", &id, "b", now, 4_000_000_000).expect("cert");
        assert_eq!(
            X509Cert::parse(&far).expect("parse").not_after,
            4_000_000_000
        );
    }
}
