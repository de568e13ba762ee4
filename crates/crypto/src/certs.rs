//! Tor's Ed25519 certificates (cert-spec 2.1) and the RSA->Ed25519
//! cross-certificate (cert-spec 2.3, CERTS cell type 7): parse, verify,
//! create.
//!
//! # Why not Arti's `tor-cert`
//!
//! `tor-cert` parses and (with `encode`) builds these certificates well, but
//! its verification API is built around `tor-checkable` wrappers and
//! `SystemTime`, it has no encoder for the RSA cross-certificate, and it
//! would pull `tor-llcrypto`'s own key types into every caller. The formats
//! are small (fixed header, length-prefixed extensions, trailing signature),
//! so this module implements them directly over `&[u8]` with `now_unix`
//! passed in. `tor-cert` is used in the tests as an independent
//! implementation to cross-check our encodings.
//!
//! Parsing is strict: version must be 1, extensions must not be truncated,
//! an unknown extension with the AFFECTS_VALIDATION flag makes the
//! certificate unusable, and no bytes may follow the signature.

use sha2::{Digest, Sha256};

use crate::ed25519::{Ed25519Keypair, verify as ed_verify};
use crate::rsa_id::{RsaError, RsaKeypair, RsaPublic};

/// Certificate types (cert-spec A.1; also CERTS cell types, tor-spec 4.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CertType(pub u8);

impl CertType {
    /// X.509 link certificate signed by the RSA identity (CERTS only).
    pub const RSA_LINK: CertType = CertType(1);
    /// Self-signed X.509 RSA identity certificate (CERTS only).
    pub const RSA_ID: CertType = CertType(2);
    /// X.509 RSA AUTHENTICATE certificate (CERTS only, obsolete).
    pub const RSA_AUTH: CertType = CertType(3);
    /// Ed25519 signing key certified by the Ed25519 identity.
    pub const IDENTITY_V_SIGNING: CertType = CertType(4);
    /// SHA-256 of the TLS certificate, certified by the signing key.
    pub const SIGNING_V_TLS_CERT: CertType = CertType(5);
    /// Ed25519 link-authentication key certified by the signing key.
    pub const SIGNING_V_LINK_AUTH: CertType = CertType(6);
    /// RSA->Ed25519 cross-certificate (own format, [`RsaCrosscert`]).
    pub const RSA_ID_V_IDENTITY: CertType = CertType(7);
    /// Onion service: descriptor signing key by blinded key.
    pub const HS_BLINDED_ID_V_SIGNING: CertType = CertType(8);
    /// Onion service: intro point auth key by descriptor signing key.
    pub const HS_IP_V_SIGNING: CertType = CertType(9);
    /// Ed25519 identity certified by the ntor onion key (converted).
    pub const NTOR_CC_IDENTITY: CertType = CertType(0x0a);
    /// Onion service: ntor encryption key cross-certifies signing key.
    pub const HS_IP_CC_SIGNING: CertType = CertType(0x0b);
}

/// Certified key types (cert-spec A.4).
pub mod key_type {
    /// An Ed25519 public key.
    pub const ED25519: u8 = 1;
    /// SHA-256 of an RSA key.
    pub const SHA256_OF_RSA: u8 = 2;
    /// SHA-256 of an X.509 certificate.
    pub const SHA256_OF_X509: u8 = 3;
}

/// Extension type: signed-with-ed25519-key.
pub const EXT_SIGNED_WITH_ED25519_KEY: u8 = 4;
/// Extension flag: the extension affects validation.
pub const EXT_FLAG_AFFECTS_VALIDATION: u8 = 1;
/// Prefix hashed with the RSA->Ed25519 cross-certificate body.
pub const RSA_CROSSCERT_PREFIX: &[u8] = b"Tor TLS RSA/Ed25519 cross-certificate";
/// Largest certificate we parse (a CERTS entry is at most 65535 bytes).
pub const MAX_CERT_LEN: usize = 65_535;

/// Certificate errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    /// Structurally invalid.
    #[error("malformed certificate: {0}")]
    Malformed(&'static str),
    /// Unsupported certificate version.
    #[error("unsupported certificate version {0}")]
    BadVersion(u8),
    /// An extension we do not understand is marked as affecting validation.
    #[error("unknown critical extension type {0}")]
    UnknownCriticalExtension(u8),
    /// No signing key was given and the certificate does not include one.
    #[error("certificate does not name its signing key")]
    MissingSigner,
    /// The included signing key differs from the expected one.
    #[error("certificate signed by an unexpected key")]
    WrongSigner,
    /// The signature is invalid.
    #[error("bad certificate signature")]
    BadSignature,
    /// The certificate has expired.
    #[error("certificate expired at {expired_at} (now {now})")]
    Expired {
        /// Expiry, Unix seconds.
        expired_at: u64,
        /// The time checked against.
        now: u64,
    },
    /// Certificate type or key type not what was required.
    #[error("unexpected certificate type or key type: {0}")]
    WrongType(&'static str),
    /// RSA failure.
    #[error("RSA: {0}")]
    Rsa(#[from] RsaError),
}

/// One extension of an Ed25519 certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertExtension {
    /// Extension type.
    pub ext_type: u8,
    /// Flags.
    pub flags: u8,
    /// Data.
    pub data: Vec<u8>,
}

/// A parsed (not yet verified) Ed25519 certificate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ed25519Cert {
    raw: Vec<u8>,
    /// CERT_TYPE.
    pub cert_type: CertType,
    /// EXPIRATION_DATE in hours since the epoch.
    pub expiration_hours: u32,
    /// CERT_KEY_TYPE.
    pub key_type: u8,
    /// CERTIFIED_KEY (an Ed25519 key or a SHA-256 digest, by key type).
    pub certified_key: [u8; 32],
    /// The signing key from a signed-with-ed25519-key extension, if any.
    pub signing_key: Option<[u8; 32]>,
    /// All extensions, in order.
    pub extensions: Vec<CertExtension>,
    /// SIGNATURE.
    pub signature: [u8; 64],
}

struct Reader<'a> {
    b: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], CertError> {
        if self.b.len() < n {
            return Err(CertError::Malformed(what));
        }
        let (h, t) = self.b.split_at(n);
        self.b = t;
        Ok(h)
    }
    fn u8(&mut self, what: &'static str) -> Result<u8, CertError> {
        Ok(self.take(1, what)?[0])
    }
    fn u16(&mut self, what: &'static str) -> Result<u16, CertError> {
        let t = self.take(2, what)?;
        Ok(u16::from_be_bytes([t[0], t[1]]))
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, CertError> {
        let t = self.take(4, what)?;
        Ok(u32::from_be_bytes([t[0], t[1], t[2], t[3]]))
    }
    fn arr<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], CertError> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N, what)?);
        Ok(a)
    }
}

impl Ed25519Cert {
    /// Parse an encoded certificate.
    pub fn parse(bytes: &[u8]) -> Result<Self, CertError> {
        if bytes.len() > MAX_CERT_LEN {
            return Err(CertError::Malformed("certificate too long"));
        }
        let mut r = Reader { b: bytes };
        let version = r.u8("version")?;
        if version != 1 {
            return Err(CertError::BadVersion(version));
        }
        let cert_type = CertType(r.u8("cert type")?);
        let expiration_hours = r.u32("expiration")?;
        let key_type = r.u8("key type")?;
        let certified_key = r.arr::<32>("certified key")?;
        let n_ext = r.u8("extension count")?;
        let mut extensions = Vec::with_capacity(usize::from(n_ext).min(16));
        let mut signing_key = None;
        for _ in 0..n_ext {
            let len = r.u16("extension length")?;
            let ext_type = r.u8("extension type")?;
            let flags = r.u8("extension flags")?;
            let data = r.take(usize::from(len), "extension data")?;
            if ext_type == EXT_SIGNED_WITH_ED25519_KEY {
                if data.len() != 32 {
                    return Err(CertError::Malformed(
                        "signed-with-ed25519-key extension length",
                    ));
                }
                if signing_key.is_some() {
                    return Err(CertError::Malformed(
                        "duplicate signed-with-ed25519-key extension",
                    ));
                }
                let mut k = [0u8; 32];
                k.copy_from_slice(data);
                signing_key = Some(k);
            } else if flags & EXT_FLAG_AFFECTS_VALIDATION != 0 {
                return Err(CertError::UnknownCriticalExtension(ext_type));
            }
            extensions.push(CertExtension {
                ext_type,
                flags,
                data: data.to_vec(),
            });
        }
        let signature = r.arr::<64>("signature")?;
        if !r.b.is_empty() {
            return Err(CertError::Malformed("trailing bytes after signature"));
        }
        Ok(Self {
            raw: bytes.to_vec(),
            cert_type,
            expiration_hours,
            key_type,
            certified_key,
            signing_key,
            extensions,
            signature,
        })
    }

    /// The encoded certificate.
    pub fn as_bytes(&self) -> &[u8] {
        &self.raw
    }

    /// Expiry in Unix seconds.
    pub fn expires_unix(&self) -> u64 {
        u64::from(self.expiration_hours) * 3600
    }

    /// True when `now_unix` is past the expiry.
    pub fn is_expired(&self, now_unix: u64) -> bool {
        now_unix > self.expires_unix()
    }

    /// The certified key, if it is an Ed25519 key: key type 1, or (as
    /// cert-spec A.4 asks for old tor versions) a cert type whose certified
    /// key is always Ed25519.
    pub fn certified_ed25519(&self) -> Option<[u8; 32]> {
        let ed_by_type = matches!(
            self.cert_type,
            CertType::IDENTITY_V_SIGNING
                | CertType::SIGNING_V_LINK_AUTH
                | CertType::NTOR_CC_IDENTITY
                | CertType::HS_BLINDED_ID_V_SIGNING
                | CertType::HS_IP_V_SIGNING
                | CertType::HS_IP_CC_SIGNING
        );
        (self.key_type == key_type::ED25519 && ed_by_type).then_some(self.certified_key)
    }

    /// Check the signature. `signer` is the key that must have signed; if
    /// `None`, the signed-with-ed25519-key extension supplies it. If both
    /// are present they must agree. Returns the key that signed.
    pub fn check_signature(&self, signer: Option<&[u8; 32]>) -> Result<[u8; 32], CertError> {
        let key = match (signer, self.signing_key.as_ref()) {
            (Some(s), Some(e)) if s != e => return Err(CertError::WrongSigner),
            (Some(s), _) => *s,
            (None, Some(e)) => *e,
            (None, None) => return Err(CertError::MissingSigner),
        };
        let body = &self.raw[..self.raw.len() - 64];
        if ed_verify(&key, body, &self.signature) {
            Ok(key)
        } else {
            Err(CertError::BadSignature)
        }
    }

    /// Check signature (as [`Ed25519Cert::check_signature`]) and expiry.
    pub fn verify(&self, signer: Option<&[u8; 32]>, now_unix: u64) -> Result<[u8; 32], CertError> {
        let k = self.check_signature(signer)?;
        if self.is_expired(now_unix) {
            return Err(CertError::Expired {
                expired_at: self.expires_unix(),
                now: now_unix,
            });
        }
        Ok(k)
    }

    /// Create and sign a certificate. When `include_signing_key` is set the
    /// signer's public key is added as a signed-with-ed25519-key extension
    /// (tor does this for type 4 certificates).
    pub fn create(
        cert_type: CertType,
        key_type: u8,
        certified_key: &[u8; 32],
        expiration_hours: u32,
        signer: &Ed25519Keypair,
        include_signing_key: bool,
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(40 + 36 + 64);
        out.push(1);
        out.push(cert_type.0);
        out.extend_from_slice(&expiration_hours.to_be_bytes());
        out.push(key_type);
        out.extend_from_slice(certified_key);
        if include_signing_key {
            out.push(1);
            out.extend_from_slice(&32u16.to_be_bytes());
            out.push(EXT_SIGNED_WITH_ED25519_KEY);
            out.push(0);
            out.extend_from_slice(&signer.public());
        } else {
            out.push(0);
        }
        let sig = signer.sign(&out);
        out.extend_from_slice(&sig);
        out
    }
}

/// Expiration in hours for a certificate valid from `now_unix` for
/// `lifetime_secs`, rounded up to the next hour (as tor does).
pub fn expiration_hours(now_unix: u64, lifetime_secs: u64) -> u32 {
    let t = now_unix.saturating_add(lifetime_secs).div_ceil(3600);
    u32::try_from(t).unwrap_or(u32::MAX)
}

/// A parsed RSA->Ed25519 cross-certificate (CERTS type 7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RsaCrosscert {
    raw: Vec<u8>,
    /// The Ed25519 identity key being certified.
    pub ed25519_key: [u8; 32],
    /// Expiration in hours since the epoch.
    pub expiration_hours: u32,
    /// The RSA signature.
    pub signature: Vec<u8>,
}

impl RsaCrosscert {
    /// Parse (`ED25519_KEY(32) EXPIRATION(4) SIGLEN(1) SIGNATURE`).
    pub fn parse(bytes: &[u8]) -> Result<Self, CertError> {
        let mut r = Reader { b: bytes };
        let ed25519_key = r.arr::<32>("ed25519 key")?;
        let expiration_hours = r.u32("expiration")?;
        let siglen = r.u8("signature length")?;
        let signature = r.take(usize::from(siglen), "signature")?.to_vec();
        if !r.b.is_empty() {
            return Err(CertError::Malformed(
                "trailing bytes after crosscert signature",
            ));
        }
        Ok(Self {
            raw: bytes.to_vec(),
            ed25519_key,
            expiration_hours,
            signature,
        })
    }

    /// The encoded certificate.
    pub fn as_bytes(&self) -> &[u8] {
        &self.raw
    }

    /// Expiry in Unix seconds.
    pub fn expires_unix(&self) -> u64 {
        u64::from(self.expiration_hours) * 3600
    }

    fn digest(body: &[u8]) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update(RSA_CROSSCERT_PREFIX);
        h.update(body);
        h.finalize().into()
    }

    /// Verify the signature with the RSA identity key and the expiry.
    pub fn verify(&self, rsa_identity: &RsaPublic, now_unix: u64) -> Result<(), CertError> {
        let d = Self::digest(&self.raw[..36]);
        rsa_identity.verify_raw(&d, &self.signature)?;
        if now_unix > self.expires_unix() {
            return Err(CertError::Expired {
                expired_at: self.expires_unix(),
                now: now_unix,
            });
        }
        Ok(())
    }

    /// Create a cross-certificate of `ed25519_key` signed by `rsa_identity`.
    pub fn create(
        ed25519_key: &[u8; 32],
        expiration_hours: u32,
        rsa_identity: &RsaKeypair,
    ) -> Result<Vec<u8>, CertError> {
        let mut out = Vec::with_capacity(37 + 128);
        out.extend_from_slice(ed25519_key);
        out.extend_from_slice(&expiration_hours.to_be_bytes());
        let sig = rsa_identity.sign_raw(&Self::digest(&out))?;
        let siglen = u8::try_from(sig.len())
            .map_err(|_| CertError::WrongType("RSA key too large for a crosscert"))?;
        out.push(siglen);
        out.extend_from_slice(&sig);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
        hex::decode(s).expect("hex")
    }

    /// 2020-09-25T02:13:20Z
    const NOTIONAL: u64 = 1_601_000_000;

    /// Real certificates captured from a tor relay's CERTS cell (transcribed
    /// from Arti's tor-cert test vectors).
    #[test]
    fn tor_ed_certs() {
        let signing: [u8; 32] =
            unhex("F82294B866A31F01FC5D0DA8572850A9B929545C3266558D7D2316E3B74172B0")
                .try_into()
                .expect("32");
        let identity: [u8; 32] =
            unhex("DCB604DB2034B00FD16986D4ADB9D16B21CB4E4457A33DEC0F538903683E96E9")
                .try_into()
                .expect("32");
        let c4 = unhex(
            "01 04 0006CC2A 01
             F82294B866A31F01FC5D0DA8572850A9B929545C3266558D7D2316E3B74172B0
             01 0020 04 00
             DCB604DB2034B00FD16986D4ADB9D16B21CB4E4457A33DEC0F538903683E96E9
             FF1A5203FA27F86EF7528D89A0845D2520166E340754FFEA2AAE0F612B7CE5DA
             094A0236CDAC45034B0B6842C18E7F6B51B93A3CF7E60663B8AD061C30A62602",
        );
        let cert = Ed25519Cert::parse(&c4).expect("parse");
        assert_eq!(cert.cert_type, CertType::IDENTITY_V_SIGNING);
        assert_eq!(cert.certified_ed25519(), Some(signing));
        assert_eq!(cert.signing_key, Some(identity));
        assert_eq!(cert.verify(None, NOTIONAL).expect("valid"), identity);
        assert_eq!(
            cert.verify(Some(&identity), NOTIONAL).expect("valid"),
            identity
        );
        assert_eq!(
            cert.verify(Some(&signing), NOTIONAL),
            Err(CertError::WrongSigner)
        );
        // 2020-10-26T18:00:00Z
        assert_eq!(cert.expires_unix(), 1_603_735_200);
        assert!(matches!(
            cert.verify(None, 1_603_735_201),
            Err(CertError::Expired { .. })
        ));

        let c5 = unhex(
            "01 05 0006C98A 03
             B4FD606B64E4CBD466B8D76CB131069BAE6F3AA1878857C9F624E31D77A799B8
             00
             7173E5F8068431D0D3F5EE16B4C9FFD59DF373E152A87281BAE744AA5FCF7217
             1BF4B27C4E8FC1C6A9FC5CA11058BC49647063D7903CFD9F512F89099B27BC0C",
        );
        let cert = Ed25519Cert::parse(&c5).expect("parse");
        assert_eq!(cert.cert_type, CertType::SIGNING_V_TLS_CERT);
        assert_eq!(cert.key_type, key_type::SHA256_OF_X509);
        assert_eq!(cert.certified_ed25519(), None);
        assert_eq!(cert.check_signature(None), Err(CertError::MissingSigner));
        cert.verify(Some(&signing), NOTIONAL).expect("valid");
        assert_eq!(
            cert.verify(Some(&identity), NOTIONAL),
            Err(CertError::BadSignature)
        );
        // 2020-09-28T18:00:00Z
        assert_eq!(cert.expires_unix(), 1_601_316_000);

        let mut bad = c5.clone();
        bad[50] ^= 1;
        assert_eq!(
            Ed25519Cert::parse(&bad)
                .expect("parse")
                .check_signature(Some(&signing)),
            Err(CertError::BadSignature)
        );
        let mut trailing = c5.clone();
        trailing.push(0);
        assert!(Ed25519Cert::parse(&trailing).is_err());
        assert!(Ed25519Cert::parse(&c5[..c5.len() - 1]).is_err());
    }

    #[test]
    fn tor_rsa_crosscert() {
        let pk = RsaPublic::from_der(&unhex(
            "30818902818100d38b1e6ceb946e0db0751f4cbace3dcb9688b6c25304227b4710c35afb73627e50500f5913e158b621802612d1c75827003703338375237552eb3cd3c12f6ab3604e60c1a2d26bb1fbad206ff023969a90909d6a65a5458a5312c26ebd3a3dad30302d4515cdcd264146ac18e6fc60a04bd3ec327f04294d96ba5aa25b464c3f0203010001",
        ))
        .expect("key");
        let wrong = RsaPublic::from_der(&unhex(
            "30818902818100d38b1e6ceb946e0db0751f4cbace3dcb9688b6c25304227b4710c35afb73627e50500f5913e158b621802612d1c75827003703338375237552eb3cd3c12f6ab3604e60c1a2d26bb1fbad206ff023969a90909d6a65a5458a5312c26ebd6a3dad30302d4515cdcd264146ac18e6fc60a04bd3ec327f04294d96ba5aa25b464c3f0203010001",
        ))
        .expect("key");
        let c = unhex(
            "DCB604DB2034B00FD16986D4ADB9D16B21CB4E4457A33DEC0F538903683E96E9
             0006DA3A 80
             5CF6006F9179066534DE6B45AD47A5C469063EE462762723396DC9F25452A0A5
             2DA3F5087DD239F2A311F6B0D4DFEFF4ABD089DC3D0237A0ABAB19EB2045B91C
             DCAF04BE0A72D548A27BF2E77BD876ECFE5E1BE622350DA6BF31F6E306ED8964
             88DD5B39409B23FC3EB7B2C9F7328EB18DA36D54D80575899EA6507CCBFCDF1F",
        );
        let cc = RsaCrosscert::parse(&c).expect("parse");
        assert_eq!(
            hex::encode_upper(cc.ed25519_key),
            "DCB604DB2034B00FD16986D4ADB9D16B21CB4E4457A33DEC0F538903683E96E9"
        );
        cc.verify(&pk, NOTIONAL).expect("valid");
        assert!(cc.verify(&wrong, NOTIONAL).is_err());
        assert!(matches!(
            cc.verify(&pk, cc.expires_unix() + 1),
            Err(CertError::Expired { .. })
        ));
        assert!(RsaCrosscert::parse(&c[..c.len() - 1]).is_err());
    }

    #[test]
    fn create_roundtrip() {
        let mut rng = rand::rngs::OsRng;
        let id = Ed25519Keypair::generate(&mut rng);
        let signing = Ed25519Keypair::generate(&mut rng);
        let exp = expiration_hours(NOTIONAL, 86_400);
        let raw = Ed25519Cert::create(
            CertType::IDENTITY_V_SIGNING,
            key_type::ED25519,
            &signing.public(),
            exp,
            &id,
            true,
        );
        let c = Ed25519Cert::parse(&raw).expect("parse");
        assert_eq!(c.as_bytes(), &raw[..]);
        assert_eq!(c.verify(None, NOTIONAL).expect("ok"), id.public());
        assert_eq!(c.certified_ed25519(), Some(signing.public()));
        let raw6 = Ed25519Cert::create(
            CertType::SIGNING_V_LINK_AUTH,
            1,
            &[5; 32],
            exp,
            &signing,
            false,
        );
        let c6 = Ed25519Cert::parse(&raw6).expect("parse");
        c6.verify(Some(&signing.public()), NOTIONAL).expect("ok");
        assert_eq!(c6.signing_key, None);

        // unknown critical extension
        let mut crit = raw6[..39].to_vec();
        crit.extend_from_slice(&[1, 0, 1, 9, 1, 0xaa]);
        crit.extend_from_slice(&[0; 64]);
        assert_eq!(
            Ed25519Cert::parse(&crit),
            Err(CertError::UnknownCriticalExtension(9))
        );
        crit[39 + 4] = 0; // flags off: accepted structurally
        assert!(Ed25519Cert::parse(&crit).is_ok());
        assert_eq!(expiration_hours(3600, 0), 1);
        assert_eq!(expiration_hours(3601, 0), 2);
    }
}
