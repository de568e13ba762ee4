//! Directory authorities: configuration and v3 key certificates
//! (dir-spec §3.1).
//!
//! Certificates are parsed and their two signatures checked (the
//! identity-key signature over the certificate and the signing-key
//! cross-certificate over the identity fingerprint) by Arti's `tor-netdoc`;
//! this module wraps the result in [`AuthCertificate`] and adds the time
//! check against a caller-supplied `now`.

use std::net::{SocketAddr, SocketAddrV4};
use std::time::{Duration, SystemTime};

use tor_checkable::{SelfSigned, Timebound};

/// How far in the future a certificate's `dir-key-published` may lie
/// (clock skew between us and the authority).
pub const CERT_PUBLISHED_SKEW: Duration = Duration::from_secs(24 * 60 * 60);
/// Most certificates accepted from one document.
pub const MAX_CERTS_PER_DOCUMENT: usize = 256;

/// One configured directory authority.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct AuthorityConfig {
    /// Nickname (informational).
    pub nickname: String,
    /// SHA-1 fingerprint of the authority's v3 identity key (`v3ident=`),
    /// the key that signs its key certificates.
    #[serde(with = "crate::hex20")]
    pub v3ident: [u8; 20],
    /// DirPort address, if known.
    #[serde(default)]
    pub dir_addr: Option<SocketAddr>,
    /// ORPort address, if known (for BEGIN_DIR).
    #[serde(default)]
    pub or_addr: Option<SocketAddr>,
    /// The authority's relay RSA identity fingerprint, if known.
    #[serde(default, with = "crate::hex20_opt")]
    pub rsa_id: Option<[u8; 20]>,
}

/// Error parsing a torrc `DirAuthority` line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad DirAuthority line: {0}")]
pub struct AuthorityLineError(pub String);

impl AuthorityConfig {
    /// An authority known only by nickname and v3 identity.
    pub fn new(nickname: impl Into<String>, v3ident: [u8; 20]) -> Self {
        AuthorityConfig {
            nickname: nickname.into(),
            v3ident,
            dir_addr: None,
            or_addr: None,
            rsa_id: None,
        }
    }

    /// Parse a torrc `DirAuthority` line (with or without the leading
    /// keyword), e.g.
    /// `auth1 orport=5001 no-v2 v3ident=73EB...92EC 127.0.0.1:7001 E7C0 D49D ...`.
    /// Requires a `v3ident=`.
    pub fn from_dirauthority_line(line: &str) -> Result<Self, AuthorityLineError> {
        let err = |m: &str| AuthorityLineError(m.to_string());
        let mut toks: Vec<&str> = line.split_ascii_whitespace().collect();
        if toks
            .first()
            .is_some_and(|t| t.eq_ignore_ascii_case("DirAuthority"))
        {
            toks.remove(0);
        }
        let mut i = 0;
        let mut nickname = String::new();
        if let Some(t) = toks.first()
            && !t.contains('=')
            && !t.contains(':')
            && !is_flag_word(t)
            && t.len() <= 19
            && t.bytes().all(|b| b.is_ascii_alphanumeric())
        {
            nickname = (*t).to_string();
            i = 1;
        }
        let mut v3ident = None;
        let mut orport: Option<u16> = None;
        while i < toks.len() && (toks[i].contains('=') || is_flag_word(toks[i])) {
            if let Some(v) = toks[i].strip_prefix("v3ident=") {
                v3ident = Some(crate::parse_hex20(v).ok_or_else(|| err("bad v3ident"))?);
            } else if let Some(v) = toks[i].strip_prefix("orport=") {
                orport = Some(v.parse().map_err(|_| err("bad orport"))?);
            }
            i += 1;
        }
        let addr: SocketAddrV4 = toks
            .get(i)
            .ok_or_else(|| err("missing address"))?
            .parse()
            .map_err(|_| err("bad address"))?;
        i += 1;
        let fp: String = toks[i..].concat();
        let rsa_id = if fp.is_empty() {
            None
        } else {
            Some(crate::parse_hex20(&fp).ok_or_else(|| err("bad fingerprint"))?)
        };
        let v3ident = v3ident.ok_or_else(|| err("missing v3ident="))?;
        Ok(AuthorityConfig {
            nickname,
            v3ident,
            dir_addr: Some(SocketAddr::V4(addr)),
            or_addr: orport.map(|p| SocketAddr::V4(SocketAddrV4::new(*addr.ip(), p))),
            rsa_id,
        })
    }
}

fn is_flag_word(t: &str) -> bool {
    matches!(t, "no-v2" | "v1" | "hs" | "no-hs" | "bridge")
}

/// Problems with an authority key certificate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CertError {
    /// The certificate could not be parsed.
    #[error("malformed authority certificate: {0}")]
    Malformed(String),
    /// A signature in the certificate did not verify.
    #[error("authority certificate signature invalid")]
    BadSignature,
    /// The certificate expired.
    #[error("authority certificate expired at {expires:?} (now {now:?})")]
    Expired {
        /// `dir-key-expires`.
        expires: SystemTime,
        /// The time checked against.
        now: SystemTime,
    },
    /// The certificate is published too far in the future.
    #[error("authority certificate published in the future ({published:?}, now {now:?})")]
    NotYetValid {
        /// `dir-key-published`.
        published: SystemTime,
        /// The time checked against.
        now: SystemTime,
    },
    /// More certificates than [`MAX_CERTS_PER_DOCUMENT`] in one document.
    #[error("too many certificates in one document")]
    TooMany,
}

/// A v3 authority key certificate whose signatures were verified.
#[derive(Clone)]
pub struct AuthCertificate {
    id_fingerprint: [u8; 20],
    signing_key_fingerprint: [u8; 20],
    published: SystemTime,
    expires: SystemTime,
    dir_address: Option<SocketAddrV4>,
    signing_key: tor_llcrypto::pk::rsa::PublicKey,
}

impl std::fmt::Debug for AuthCertificate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthCertificate")
            .field("id_fingerprint", &hex::encode_upper(self.id_fingerprint))
            .field(
                "signing_key_fingerprint",
                &hex::encode_upper(self.signing_key_fingerprint),
            )
            .field("published", &self.published)
            .field("expires", &self.expires)
            .finish()
    }
}

impl AuthCertificate {
    /// Parse every certificate in `text` (e.g. a `/tor/keys/...` response
    /// body), verify its signatures and check it is valid at `now`.
    /// One result per certificate found; a broken certificate does not hide
    /// the others.
    pub fn parse_all(text: &str, now: SystemTime) -> Vec<Result<AuthCertificate, CertError>> {
        let iter = match tor_netdoc::doc::authcert::AuthCert::parse_multiple(text) {
            Ok(it) => it,
            Err(e) => return vec![Err(CertError::Malformed(e.to_string()))],
        };
        let mut out = Vec::new();
        for r in iter {
            if out.len() >= MAX_CERTS_PER_DOCUMENT {
                out.push(Err(CertError::TooMany));
                break;
            }
            out.push(match r {
                Ok(unchecked) => Self::check(unchecked, now),
                Err(e) => Err(CertError::Malformed(e.to_string())),
            });
        }
        out
    }

    /// Parse exactly one certificate.
    pub fn parse(text: &str, now: SystemTime) -> Result<AuthCertificate, CertError> {
        let unchecked = tor_netdoc::doc::authcert::AuthCert::parse(text)
            .map_err(|e| CertError::Malformed(e.to_string()))?;
        Self::check(unchecked, now)
    }

    fn check(
        unchecked: tor_netdoc::doc::authcert::UncheckedAuthCert,
        now: SystemTime,
    ) -> Result<AuthCertificate, CertError> {
        let timed = unchecked
            .check_signature()
            .map_err(|_| CertError::BadSignature)?;
        // We do our own time check (with a skew allowance for `published`).
        let cert = timed.dangerously_assume_timely();
        let ids = cert.key_ids();
        let c = AuthCertificate {
            id_fingerprint: ids.id_fingerprint.to_bytes(),
            signing_key_fingerprint: ids.sk_fingerprint.to_bytes(),
            published: cert.published(),
            expires: cert.expires(),
            dir_address: cert.dir_address,
            signing_key: cert.signing_key().clone(),
        };
        c.check_time(now)?;
        Ok(c)
    }

    /// Check `published - skew <= now <= expires`.
    pub fn check_time(&self, now: SystemTime) -> Result<(), CertError> {
        if now > self.expires {
            return Err(CertError::Expired {
                expires: self.expires,
                now,
            });
        }
        if self
            .published
            .checked_sub(CERT_PUBLISHED_SKEW)
            .is_some_and(|p| now < p)
        {
            return Err(CertError::NotYetValid {
                published: self.published,
                now,
            });
        }
        Ok(())
    }

    /// Fingerprint of the authority identity key (the `v3ident`).
    pub fn id_fingerprint(&self) -> [u8; 20] {
        self.id_fingerprint
    }
    /// Fingerprint of the medium-term signing key this certificate certifies.
    pub fn signing_key_fingerprint(&self) -> [u8; 20] {
        self.signing_key_fingerprint
    }
    /// `dir-key-published`.
    pub fn published(&self) -> SystemTime {
        self.published
    }
    /// `dir-key-expires`.
    pub fn expires(&self) -> SystemTime {
        self.expires
    }
    /// `dir-address`, if present.
    pub fn dir_address(&self) -> Option<SocketAddrV4> {
        self.dir_address
    }

    /// Verify a directory signature (PKCS#1 v1.5 without DigestInfo, as
    /// tor uses) over `digest` with the certified signing key.
    pub(crate) fn verify_digest(&self, digest: &[u8], signature: &[u8]) -> bool {
        self.signing_key.verify(digest, signature).is_ok()
    }
}

/// Most certificates kept per authority identity (its current signing
/// key, the next one, and a little history).
pub const MAX_CERTS_PER_AUTHORITY: usize = 4;

/// Merge freshly fetched certificates into a client's store: only
/// configured authorities' certificates, valid at `now`, one per (identity,
/// signing key) (a refetched one replaces the old copy), at most
/// [`MAX_CERTS_PER_AUTHORITY`] per authority and `max` in all. When a limit
/// is reached the certificates published earliest go first, so a newly
/// rotated signing key always finds room.
pub fn merge_certificates(
    store: &mut Vec<AuthCertificate>,
    fetched: impl IntoIterator<Item = AuthCertificate>,
    authorities: &[AuthorityConfig],
    now: SystemTime,
    max: usize,
) {
    for c in fetched {
        if !authorities.iter().any(|a| a.v3ident == c.id_fingerprint) {
            continue;
        }
        store.retain(|o| {
            o.id_fingerprint != c.id_fingerprint
                || o.signing_key_fingerprint != c.signing_key_fingerprint
        });
        store.push(c);
    }
    store.retain(|c| c.check_time(now).is_ok());
    // Newest first; then keep the first MAX per authority and `max` overall.
    store.sort_by_key(|c| std::cmp::Reverse(c.published));
    let mut per: std::collections::HashMap<[u8; 20], usize> = std::collections::HashMap::new();
    store.retain(|c| {
        let n = per.entry(c.id_fingerprint).or_insert(0);
        *n += 1;
        *n <= MAX_CERTS_PER_AUTHORITY
    });
    store.truncate(max);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn dirauthority_line() {
        let a = AuthorityConfig::from_dirauthority_line(
            "DirAuthority auth1 orport=27101 no-v2 v3ident=73EB8750A9DB5F6931BD2734F577C69D33FC92EC 127.0.0.1:27111 E7C0D49DBD7080A978C4929ADA22BB9348B1C68C",
        )
        .unwrap();
        assert_eq!(a.nickname, "auth1");
        assert_eq!(a.v3ident[0], 0x73);
        assert_eq!(a.dir_addr, Some("127.0.0.1:27111".parse().unwrap()));
        assert_eq!(a.or_addr, Some("127.0.0.1:27101".parse().unwrap()));
        assert_eq!(a.rsa_id.unwrap()[0], 0xE7);
        let b = AuthorityConfig::from_dirauthority_line(
            "moria1 orport=9201 v3ident=F533C81CEF0BC0267857C99B2F471ADF249FA232 128.31.0.39:9231 1A25 C630 5E31 7A0C 3F5C 7D22 7F8E 2A4D 6D5C 3B6E",
        );
        let b = b.unwrap(); // grouped fingerprint, as in tor's built-in list
        assert_eq!(b.rsa_id.unwrap()[0], 0x1A);
        assert_eq!(b.nickname, "moria1");
        assert!(AuthorityConfig::from_dirauthority_line("a v3ident=F533 1.2.3.4:5").is_err());
        assert!(
            AuthorityConfig::from_dirauthority_line(
                "a v3ident=F533C81CEF0BC0267857C99B2F471ADF249FA232 1.2.3.4:5 1A25C6"
            )
            .is_err()
        );
        assert!(AuthorityConfig::from_dirauthority_line("x 1.2.3.4:5").is_err());
        let json = serde_json::to_string(&a).unwrap();
        let back: AuthorityConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(a, back);
    }

    #[test]
    fn certificate_store_keeps_the_newest_of_configured_authorities() {
        use onionmix_crypto::keys::key_certificate;
        use onionmix_crypto::rsa_id::RsaKeypair;
        use rand::SeedableRng;
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
        let now_unix = 1_800_000_000u64;
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(now_unix);
        let ids: Vec<RsaKeypair> = (0..3)
            .map(|_| RsaKeypair::generate(&mut rng, 1024).unwrap())
            .collect();
        let auths: Vec<AuthorityConfig> = ids[..2]
            .iter()
            .map(|k| AuthorityConfig::new("a", k.public().fingerprint()))
            .collect();
        let signing: Vec<RsaKeypair> = (0..6)
            .map(|_| RsaKeypair::generate(&mut rng, 1024).unwrap())
            .collect();
        let cert = |id: &RsaKeypair, sk: &RsaKeypair, published: u64, expires: u64| {
            AuthCertificate::parse(
                &key_certificate(id, sk, published, expires, None).unwrap(),
                SystemTime::UNIX_EPOCH + Duration::from_secs(published),
            )
            .unwrap()
        };
        let year = 365 * 86400;
        let mut store = Vec::new();
        // Authority 0 rotates its signing key six times, an hour apart.
        let a0: Vec<AuthCertificate> = (0..6u64)
            .map(|i| {
                cert(
                    &ids[0],
                    &signing[i as usize],
                    now_unix - 6 * 3600 + i * 3600,
                    now_unix + year,
                )
            })
            .collect();
        merge_certificates(&mut store, a0.clone(), &auths, now, 64);
        let kept: Vec<[u8; 20]> = store.iter().map(|c| c.signing_key_fingerprint()).collect();
        let newest4: Vec<[u8; 20]> = a0[2..]
            .iter()
            .rev()
            .map(|c| c.signing_key_fingerprint())
            .collect();
        assert_eq!(kept, newest4, "the four newest, newest first");
        // Refetching one does not duplicate it.
        merge_certificates(&mut store, [a0[5].clone()], &auths, now, 64);
        assert_eq!(store.len(), 4);
        // Unknown authorities are never stored; expired ones are dropped.
        merge_certificates(
            &mut store,
            [cert(&ids[2], &signing[0], now_unix - 60, now_unix + year)],
            &auths,
            now,
            64,
        );
        assert_eq!(store.len(), 4);
        merge_certificates(
            &mut store,
            [cert(
                &ids[1],
                &signing[0],
                now_unix - 2 * year,
                now_unix - 1,
            )],
            &auths,
            now,
            64,
        );
        assert_eq!(store.len(), 4);
        // Full store: the newest certificate gets in, the oldest goes.
        let fresh = cert(&ids[1], &signing[1], now_unix - 10, now_unix + year);
        merge_certificates(&mut store, [fresh.clone()], &auths, now, 4);
        assert_eq!(store.len(), 4);
        assert_eq!(
            store[0].signing_key_fingerprint(),
            fresh.signing_key_fingerprint()
        );
        assert!(
            !store
                .iter()
                .any(|c| c.signing_key_fingerprint() == a0[2].signing_key_fingerprint())
        );
    }
}
