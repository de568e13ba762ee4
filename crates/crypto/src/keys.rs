//! Relay and directory-authority key sets: generation, rotation, the
//! certificates derived from them, and storage in a key directory.
//!
//! # On-disk format
//!
//! [`RelayKeys`] uses tor's own `keys/` layout and formats, so a directory
//! written by stock tor can be loaded and vice versa:
//!
//! | file | format |
//! |---|---|
//! | `secret_id_key` | PEM `RSA PRIVATE KEY` (RSA-1024 identity) |
//! | `secret_onion_key` | PEM `RSA PRIVATE KEY` (RSA-1024 TAP onion key) |
//! | `secret_onion_key_ntor` (`.old`) | 32-byte header `== c25519v1: onion ==` NUL-padded, secret(32), public(32) |
//! | `ed25519_master_id_secret_key` | header `== ed25519v1-secret: type0 ==`, 64-byte expanded key |
//! | `ed25519_master_id_public_key` | header `== ed25519v1-public: type0 ==`, 32-byte key |
//! | `ed25519_signing_secret_key` | header `== ed25519v1-secret: type4 ==`, 64-byte expanded key |
//! | `ed25519_signing_cert` | header `== ed25519v1-cert: type4 ==`, certificate |
//! | `onionmix_link_auth_secret_key` | header `== ed25519v1-secret: type6 ==` (ours; tor keeps this key in memory only) |
//! | `onionmix_link_auth_cert` | header `== ed25519v1-cert: type6 ==` (ours) |
//!
//! Files are created with mode 0600 and the directory with 0700. The master
//! identity secret may be absent (offline master key, as tor allows); then
//! the signing key cannot be rotated.
//!
//! [`AuthorityKeys`] uses tor-gencert's file names: `authority_identity_key`
//! (ours is an unencrypted PEM `RSA PRIVATE KEY`; tor-gencert's is
//! passphrase-encrypted PKCS#8, which we do not read), `authority_signing_key`
//! (PEM `RSA PRIVATE KEY`) and `authority_certificate` (dir-spec 3.1).

use std::path::Path;

use rand_core::CryptoRngCore;
use sha1::{Digest, Sha1};

use crate::certs::{CertError, CertType, Ed25519Cert, RsaCrosscert, expiration_hours, key_type};
use crate::ed25519::{Ed25519Keypair, ed25519_from_curve25519_secret};
use crate::ntor::NtorSecretKey;
use crate::rsa_id::{RsaError, RsaKeypair, RsaPublic, pem_wrap};
use crate::timefmt::format_utc;
use crate::x509::{TlsIdentity, X509Error, create_identity_cert};

/// Lifetime of the Ed25519 signing key certificate (tor: `SigningKeyLifetime`).
pub const SIGNING_KEY_LIFETIME_SECS: u64 = 30 * 86_400;
/// Renew the signing key this long before it expires (tor: `TestingSigningKeySlop`).
pub const SIGNING_KEY_SLOP_SECS: u64 = 86_400;
/// Lifetime of the link-authentication (type 6) and TLS link (type 5)
/// certificates (tor: `TestingAuthKeyLifetime`, `TestingLinkCertLifetime`).
pub const LINK_CERT_LIFETIME_SECS: u64 = 2 * 86_400;
/// Renew link certificates this long before they expire (`TestingAuthKeySlop`).
pub const LINK_CERT_SLOP_SECS: u64 = 3 * 3600;
/// Lifetime of the RSA->Ed25519 cross-certificate tor puts in CERTS cells.
pub const RSA_CROSSCERT_LIFETIME_SECS: u64 = 180 * 86_400;
/// Default ntor / TAP onion key lifetime (consensus `onion-key-rotation-days`).
pub const ONION_KEY_LIFETIME_SECS: u64 = 28 * 86_400;
/// How long a previous ntor key stays usable (`onion-key-grace-period-days`).
pub const ONION_KEY_GRACE_SECS: u64 = 7 * 86_400;

/// Key-set errors.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// File system error.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        source: std::io::Error,
    },
    /// A key file is malformed.
    #[error("{path}: {what}")]
    BadFile {
        /// The file.
        path: String,
        /// What is wrong.
        what: String,
    },
    /// The operation needs the offline master identity secret key.
    #[error("the Ed25519 master identity secret key is not available")]
    NoMasterKey,
    /// RSA failure.
    #[error("RSA: {0}")]
    Rsa(#[from] RsaError),
    /// Certificate failure.
    #[error("certificate: {0}")]
    Cert(#[from] CertError),
    /// X.509 failure.
    #[error("X.509: {0}")]
    X509(#[from] X509Error),
}

fn io_err(path: &Path, e: std::io::Error) -> KeyError {
    KeyError::Io {
        path: path.display().to_string(),
        source: e,
    }
}

fn bad(path: &Path, what: impl Into<String>) -> KeyError {
    KeyError::BadFile {
        path: path.display().to_string(),
        what: what.into(),
    }
}

/// Write `data` to `path` with mode 0600, replacing any existing file
/// atomically (write to a temporary file, then rename).
pub fn write_private_file(path: &Path, data: &[u8]) -> Result<(), KeyError> {
    onionmix_fsutil::write_private_atomic(path, data).map_err(|e| io_err(path, e))
}

fn create_private_dir(dir: &Path) -> Result<(), KeyError> {
    std::fs::create_dir_all(dir).map_err(|e| io_err(dir, e))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| io_err(dir, e))?;
    }
    Ok(())
}

/// Largest key file we read.
const MAX_KEY_FILE: u64 = 64 * 1024;

fn read_file(path: &Path) -> Result<Option<Vec<u8>>, KeyError> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() > MAX_KEY_FILE => return Err(bad(path, "file too large")),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(path, e)),
    }
    std::fs::read(path).map(Some).map_err(|e| io_err(path, e))
}

/// Encode tor's tagged binary file: `== <type>: <tag> ==` NUL-padded to
/// 32 bytes, followed by `data`.
pub fn encode_tagged(type_str: &str, tag: &str, data: &[u8]) -> Vec<u8> {
    let mut out = format!("== {type_str}: {tag} ==").into_bytes();
    out.resize(32, 0);
    out.extend_from_slice(data);
    out
}

/// Decode tor's tagged binary file; returns (tag, data).
pub fn decode_tagged<'a>(type_str: &str, bytes: &'a [u8]) -> Option<(String, &'a [u8])> {
    if bytes.len() < 32 {
        return None;
    }
    let header = &bytes[..32];
    let end = header.iter().position(|&b| b == 0).unwrap_or(32);
    if header[end..].iter().any(|&b| b != 0) {
        return None;
    }
    let text = std::str::from_utf8(&header[..end]).ok()?;
    let rest = text.strip_prefix("== ")?.strip_suffix(" ==")?;
    let (t, tag) = rest.split_once(": ")?;
    (t == type_str).then(|| (tag.to_string(), &bytes[32..]))
}

fn read_tagged(path: &Path, type_str: &str) -> Result<Option<Vec<u8>>, KeyError> {
    let Some(bytes) = read_file(path)? else {
        return Ok(None);
    };
    let (_, data) = decode_tagged(type_str, &bytes)
        .ok_or_else(|| bad(path, format!("not a {type_str} file")))?;
    Ok(Some(data.to_vec()))
}

fn read_ed_secret(path: &Path) -> Result<Option<Ed25519Keypair>, KeyError> {
    let Some(d) = read_tagged(path, "ed25519v1-secret")? else {
        return Ok(None);
    };
    let arr: [u8; 64] = d
        .as_slice()
        .try_into()
        .map_err(|_| bad(path, "expanded key is not 64 bytes"))?;
    let kp = Ed25519Keypair::from_expanded(&arr);
    Ok(Some(kp))
}

fn read_ntor(path: &Path) -> Result<Option<NtorSecretKey>, KeyError> {
    let Some(d) = read_tagged(path, "c25519v1")? else {
        return Ok(None);
    };
    if d.len() != 64 {
        return Err(bad(path, "curve25519 key file must hold 64 bytes"));
    }
    let mut sk = zeroize::Zeroizing::new([0u8; 32]);
    sk.copy_from_slice(&d[..32]);
    let k = NtorSecretKey::from_secret_bytes(&sk);
    if k.public()[..] != d[32..] {
        return Err(bad(path, "public key does not match secret key"));
    }
    Ok(Some(k))
}

fn ntor_file(k: &NtorSecretKey) -> Vec<u8> {
    let mut d = zeroize::Zeroizing::new(Vec::with_capacity(64));
    d.extend_from_slice(&k.secret_bytes()[..]);
    d.extend_from_slice(&k.public());
    encode_tagged("c25519v1", "onion", &d)
}

fn read_rsa(path: &Path) -> Result<Option<RsaKeypair>, KeyError> {
    let Some(b) = read_file(path)? else {
        return Ok(None);
    };
    let text =
        zeroize::Zeroizing::new(String::from_utf8(b).map_err(|_| bad(path, "not PEM text"))?);
    Ok(Some(RsaKeypair::from_pem(&text)?))
}

/// All long- and medium-term keys of a relay.
#[derive(Clone, Debug)]
pub struct RelayKeys {
    /// RSA-1024 identity key.
    pub rsa_identity: RsaKeypair,
    /// Ed25519 master identity secret key (None if kept offline).
    pub ed_identity: Option<Ed25519Keypair>,
    /// Ed25519 master identity public key.
    pub ed_identity_public: [u8; 32],
    /// Ed25519 signing key.
    pub ed_signing: Ed25519Keypair,
    /// Type 4 certificate: signing key certified by the identity.
    pub ed_signing_cert: Vec<u8>,
    /// Ed25519 link-authentication key.
    pub ed_link_auth: Ed25519Keypair,
    /// Type 6 certificate: link-auth key certified by the signing key.
    pub ed_link_auth_cert: Vec<u8>,
    /// Current ntor onion key.
    pub ntor: NtorSecretKey,
    /// Previous ntor onion key (still accepted during the grace period).
    pub ntor_previous: Option<NtorSecretKey>,
    /// RSA-1024 TAP onion key (still required in router descriptors).
    pub rsa_onion: RsaKeypair,
}

impl RelayKeys {
    /// Generate a complete new key set valid from `now_unix`.
    pub fn generate(rng: &mut dyn CryptoRngCore, now_unix: u64) -> Result<Self, KeyError> {
        let rsa_identity = RsaKeypair::generate(rng, 1024)?;
        let rsa_onion = RsaKeypair::generate(rng, 1024)?;
        let ed_identity = Ed25519Keypair::generate(rng);
        let ed_identity_public = ed_identity.public();
        let ed_signing = Ed25519Keypair::generate(rng);
        let ed_signing_cert = signing_cert(&ed_identity, &ed_signing, now_unix);
        let ed_link_auth = Ed25519Keypair::generate(rng);
        let ed_link_auth_cert = link_auth_cert(&ed_signing, &ed_link_auth, now_unix);
        Ok(Self {
            rsa_identity,
            ed_identity: Some(ed_identity),
            ed_identity_public,
            ed_signing,
            ed_signing_cert,
            ed_link_auth,
            ed_link_auth_cert,
            ntor: NtorSecretKey::generate(rng),
            ntor_previous: None,
            rsa_onion,
        })
    }

    /// RSA identity digest (fingerprint).
    pub fn rsa_id(&self) -> [u8; 20] {
        self.rsa_identity.public().fingerprint()
    }

    /// Ed25519 identity.
    pub fn ed_id(&self) -> [u8; 32] {
        self.ed_identity_public
    }

    /// The ntor keys the relay accepts, current first (for [`crate::ntor::ntor_server`]).
    pub fn ntor_keys(&self) -> Vec<NtorSecretKey> {
        let mut v = vec![self.ntor.clone()];
        v.extend(self.ntor_previous.iter().cloned());
        v
    }

    /// Expiry (Unix seconds) of the current signing key certificate.
    pub fn signing_cert_expires(&self) -> Result<u64, KeyError> {
        Ok(Ed25519Cert::parse(&self.ed_signing_cert)?.expires_unix())
    }

    /// True if the signing key should be replaced (expires within a day).
    pub fn signing_key_needs_rotation(&self, now_unix: u64) -> Result<bool, KeyError> {
        Ok(self.signing_cert_expires()? <= now_unix + SIGNING_KEY_SLOP_SECS)
    }

    /// True if the link-auth certificate should be replaced.
    pub fn link_auth_needs_rotation(&self, now_unix: u64) -> Result<bool, KeyError> {
        Ok(Ed25519Cert::parse(&self.ed_link_auth_cert)?.expires_unix()
            <= now_unix + LINK_CERT_SLOP_SECS)
    }

    /// Replace the signing key and its certificate (needs the master key),
    /// and re-certify the link-auth key with the new signing key.
    pub fn rotate_signing_key(
        &mut self,
        rng: &mut dyn CryptoRngCore,
        now_unix: u64,
    ) -> Result<(), KeyError> {
        let master = self.ed_identity.as_ref().ok_or(KeyError::NoMasterKey)?;
        let signing = Ed25519Keypair::generate(rng);
        self.ed_signing_cert = signing_cert(master, &signing, now_unix);
        self.ed_signing = signing;
        self.ed_link_auth_cert = link_auth_cert(&self.ed_signing, &self.ed_link_auth, now_unix);
        Ok(())
    }

    /// Replace the link-authentication key and certificate.
    pub fn rotate_link_auth_key(&mut self, rng: &mut dyn CryptoRngCore, now_unix: u64) {
        self.ed_link_auth = Ed25519Keypair::generate(rng);
        self.ed_link_auth_cert = link_auth_cert(&self.ed_signing, &self.ed_link_auth, now_unix);
    }

    /// New ntor key; the current one becomes the previous one (the one
    /// before that is dropped).
    pub fn rotate_ntor_key(&mut self, rng: &mut dyn CryptoRngCore) {
        let new = NtorSecretKey::generate(rng);
        self.ntor_previous = Some(std::mem::replace(&mut self.ntor, new));
    }

    /// Forget the previous ntor key (after the grace period).
    pub fn drop_previous_ntor_key(&mut self) {
        self.ntor_previous = None;
    }

    /// New TAP onion key.
    pub fn rotate_rsa_onion_key(&mut self, rng: &mut dyn CryptoRngCore) -> Result<(), KeyError> {
        self.rsa_onion = RsaKeypair::generate(rng, 1024)?;
        Ok(())
    }

    /// CERTS type 7: the Ed25519 identity cross-certified by the RSA identity.
    pub fn rsa_crosscert(&self, now_unix: u64) -> Result<Vec<u8>, KeyError> {
        let exp = expiration_hours(now_unix, RSA_CROSSCERT_LIFETIME_SECS);
        Ok(RsaCrosscert::create(
            &self.ed_identity_public,
            exp,
            &self.rsa_identity,
        )?)
    }

    /// CERTS type 5: SHA-256 of our TLS certificate certified by the
    /// signing key (expires with the shorter of the link lifetime and the
    /// TLS certificate).
    pub fn tls_link_cert(&self, tls_cert_sha256: &[u8; 32], now_unix: u64) -> Vec<u8> {
        let exp = expiration_hours(now_unix, LINK_CERT_LIFETIME_SECS);
        Ed25519Cert::create(
            CertType::SIGNING_V_TLS_CERT,
            key_type::SHA256_OF_X509,
            tls_cert_sha256,
            exp,
            &self.ed_signing,
            false,
        )
    }

    /// CERTS type 2: a self-signed X.509 certificate of the RSA identity.
    pub fn rsa_identity_cert(
        &self,
        rng: &mut dyn CryptoRngCore,
        now_unix: u64,
    ) -> Result<Vec<u8>, KeyError> {
        Ok(create_identity_cert(rng, &self.rsa_identity, now_unix)?)
    }

    /// The CERTS cell a responder (our relay accepting a connection) sends:
    /// types 1 (the TLS certificate itself, signed by the identity), 2, 4,
    /// 5 and 7, in the order tor sends them.
    pub fn responder_certs(
        &self,
        rng: &mut dyn CryptoRngCore,
        tls: &TlsIdentity,
        now_unix: u64,
    ) -> Result<Vec<(u8, Vec<u8>)>, KeyError> {
        Ok(vec![
            (CertType::RSA_LINK.0, tls.cert_der.clone()),
            (CertType::RSA_ID.0, self.rsa_identity_cert(rng, now_unix)?),
            (CertType::IDENTITY_V_SIGNING.0, self.ed_signing_cert.clone()),
            (
                CertType::SIGNING_V_TLS_CERT.0,
                self.tls_link_cert(&tls.cert_sha256, now_unix),
            ),
            (CertType::RSA_ID_V_IDENTITY.0, self.rsa_crosscert(now_unix)?),
        ])
    }

    /// The CERTS cell an authenticating initiator (our relay opening a
    /// connection) sends: types 2, 4, 6, 7.
    pub fn initiator_certs(
        &self,
        rng: &mut dyn CryptoRngCore,
        now_unix: u64,
    ) -> Result<Vec<(u8, Vec<u8>)>, KeyError> {
        Ok(vec![
            (CertType::RSA_ID.0, self.rsa_identity_cert(rng, now_unix)?),
            (CertType::IDENTITY_V_SIGNING.0, self.ed_signing_cert.clone()),
            (
                CertType::SIGNING_V_LINK_AUTH.0,
                self.ed_link_auth_cert.clone(),
            ),
            (CertType::RSA_ID_V_IDENTITY.0, self.rsa_crosscert(now_unix)?),
        ])
    }

    /// `ntor-onion-key-crosscert` for the router descriptor: a type 0A
    /// certificate of the Ed25519 identity, signed by the Ed25519 key
    /// derived from the current ntor key; returns (certificate, sign bit).
    pub fn ntor_onion_key_crosscert(&self, now_unix: u64, lifetime_secs: u64) -> (Vec<u8>, u8) {
        let (ed, signbit) = ed25519_from_curve25519_secret(&self.ntor.secret_bytes());
        let exp = expiration_hours(now_unix, lifetime_secs);
        let cert = Ed25519Cert::create(
            CertType::NTOR_CC_IDENTITY,
            key_type::ED25519,
            &self.ed_identity_public,
            exp,
            &ed,
            false,
        );
        (cert, signbit)
    }

    /// `onion-key-crosscert` for the router descriptor: the TAP onion key's
    /// tor-style RSA signature over SHA1(RSA identity DER) | Ed25519 identity.
    pub fn tap_onion_key_crosscert(&self) -> Result<Vec<u8>, KeyError> {
        let mut data = [0u8; 52];
        data[..20].copy_from_slice(&self.rsa_id());
        data[20..].copy_from_slice(&self.ed_identity_public);
        Ok(self.rsa_onion.sign_raw(&data)?)
    }

    /// Save to `dir` (created 0700; files 0600) in tor's layout.
    pub fn save(&self, dir: &Path) -> Result<(), KeyError> {
        create_private_dir(dir)?;
        write_private_file(
            &dir.join("secret_id_key"),
            self.rsa_identity.to_pem().as_bytes(),
        )?;
        write_private_file(
            &dir.join("secret_onion_key"),
            self.rsa_onion.to_pem().as_bytes(),
        )?;
        write_private_file(&dir.join("secret_onion_key_ntor"), &ntor_file(&self.ntor))?;
        let old = dir.join("secret_onion_key_ntor.old");
        match &self.ntor_previous {
            Some(k) => write_private_file(&old, &ntor_file(k))?,
            None => match std::fs::remove_file(&old) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_err(&old, e)),
            },
        }
        if let Some(id) = &self.ed_identity {
            let data = zeroize::Zeroizing::new(encode_tagged(
                "ed25519v1-secret",
                "type0",
                id.expanded_secret(),
            ));
            write_private_file(&dir.join("ed25519_master_id_secret_key"), &data)?;
        }
        write_private_file(
            &dir.join("ed25519_master_id_public_key"),
            &encode_tagged("ed25519v1-public", "type0", &self.ed_identity_public),
        )?;
        let data = zeroize::Zeroizing::new(encode_tagged(
            "ed25519v1-secret",
            "type4",
            self.ed_signing.expanded_secret(),
        ));
        write_private_file(&dir.join("ed25519_signing_secret_key"), &data)?;
        write_private_file(
            &dir.join("ed25519_signing_cert"),
            &encode_tagged("ed25519v1-cert", "type4", &self.ed_signing_cert),
        )?;
        let data = zeroize::Zeroizing::new(encode_tagged(
            "ed25519v1-secret",
            "type6",
            self.ed_link_auth.expanded_secret(),
        ));
        write_private_file(&dir.join("onionmix_link_auth_secret_key"), &data)?;
        write_private_file(
            &dir.join("onionmix_link_auth_cert"),
            &encode_tagged("ed25519v1-cert", "type6", &self.ed_link_auth_cert),
        )?;
        Ok(())
    }

    /// Load from `dir`. Checks that the signing certificate certifies the
    /// stored signing key and is signed by the stored identity. If the
    /// link-auth key is missing (e.g. a directory written by stock tor), a
    /// new one is generated with `rng` and certified at `now_unix`.
    pub fn load(dir: &Path, rng: &mut dyn CryptoRngCore, now_unix: u64) -> Result<Self, KeyError> {
        let p = |n: &str| dir.join(n);
        let need = |n: &str| bad(&dir.join(n), "missing");
        let rsa_identity = read_rsa(&p("secret_id_key"))?.ok_or_else(|| need("secret_id_key"))?;
        let rsa_onion =
            read_rsa(&p("secret_onion_key"))?.ok_or_else(|| need("secret_onion_key"))?;
        let ntor =
            read_ntor(&p("secret_onion_key_ntor"))?.ok_or_else(|| need("secret_onion_key_ntor"))?;
        let ntor_previous = read_ntor(&p("secret_onion_key_ntor.old"))?;
        let ed_identity = read_ed_secret(&p("ed25519_master_id_secret_key"))?;
        let ed_identity_public =
            match read_tagged(&p("ed25519_master_id_public_key"), "ed25519v1-public")? {
                Some(d) => d.as_slice().try_into().map_err(|_| {
                    bad(
                        &p("ed25519_master_id_public_key"),
                        "public key is not 32 bytes",
                    )
                })?,
                None => ed_identity
                    .as_ref()
                    .map(Ed25519Keypair::public)
                    .ok_or_else(|| need("ed25519_master_id_public_key"))?,
            };
        if let Some(id) = &ed_identity
            && id.public() != ed_identity_public
        {
            return Err(bad(
                &p("ed25519_master_id_public_key"),
                "does not match the secret key",
            ));
        }
        let ed_signing = read_ed_secret(&p("ed25519_signing_secret_key"))?
            .ok_or_else(|| need("ed25519_signing_secret_key"))?;
        let ed_signing_cert = read_tagged(&p("ed25519_signing_cert"), "ed25519v1-cert")?
            .ok_or_else(|| need("ed25519_signing_cert"))?;
        let c = Ed25519Cert::parse(&ed_signing_cert)?;
        if c.cert_type != CertType::IDENTITY_V_SIGNING
            || c.certified_ed25519() != Some(ed_signing.public())
        {
            return Err(bad(
                &p("ed25519_signing_cert"),
                "does not certify the signing key",
            ));
        }
        c.check_signature(Some(&ed_identity_public))?;
        let (ed_link_auth, ed_link_auth_cert) = match (
            read_ed_secret(&p("onionmix_link_auth_secret_key"))?,
            read_tagged(&p("onionmix_link_auth_cert"), "ed25519v1-cert")?,
        ) {
            (Some(k), Some(c)) => (k, c),
            _ => {
                let k = Ed25519Keypair::generate(rng);
                let c = link_auth_cert(&ed_signing, &k, now_unix);
                (k, c)
            }
        };
        Ok(Self {
            rsa_identity,
            ed_identity,
            ed_identity_public,
            ed_signing,
            ed_signing_cert,
            ed_link_auth,
            ed_link_auth_cert,
            ntor,
            ntor_previous,
            rsa_onion,
        })
    }
}

/// Verify an `onion-key-crosscert` (as an authority does): the TAP onion
/// key's signature must recover to `SHA1(RSA identity) | Ed25519 identity`,
/// extra trailing data allowed.
pub fn verify_tap_onion_key_crosscert(
    onion_key: &RsaPublic,
    sig: &[u8],
    rsa_id: &[u8; 20],
    ed_id: &[u8; 32],
) -> Result<(), KeyError> {
    let m = onion_key.recover_raw(sig)?;
    if m.len() < 52 || m[..20] != rsa_id[..] || m[20..52] != ed_id[..] {
        return Err(KeyError::Rsa(RsaError::BadSignature));
    }
    Ok(())
}

fn signing_cert(master: &Ed25519Keypair, signing: &Ed25519Keypair, now_unix: u64) -> Vec<u8> {
    let exp = expiration_hours(now_unix, SIGNING_KEY_LIFETIME_SECS);
    Ed25519Cert::create(
        CertType::IDENTITY_V_SIGNING,
        key_type::ED25519,
        &signing.public(),
        exp,
        master,
        true,
    )
}

fn link_auth_cert(signing: &Ed25519Keypair, auth: &Ed25519Keypair, now_unix: u64) -> Vec<u8> {
    let exp = expiration_hours(now_unix, LINK_CERT_LIFETIME_SECS);
    Ed25519Cert::create(
        CertType::SIGNING_V_LINK_AUTH,
        key_type::ED25519,
        &auth.public(),
        exp,
        signing,
        false,
    )
}

/// A v3 directory authority's keys and key certificate.
#[derive(Clone, Debug)]
pub struct AuthorityKeys {
    /// Authority identity key (3072 bits by default, like tor-gencert).
    pub identity: RsaKeypair,
    /// Medium-term signing key (2048 bits).
    pub signing: RsaKeypair,
    /// The key certificate text (dir-spec 3.1), ending in a newline.
    pub certificate: String,
}

/// Identity key size tor-gencert uses.
pub const AUTHORITY_IDENTITY_BITS: usize = 3072;
/// Signing key size tor-gencert uses.
pub const AUTHORITY_SIGNING_BITS: usize = 2048;

fn signature_block(label: &str, sig: &[u8]) -> String {
    pem_wrap(label, sig)
}

/// Build and sign a key certificate (dir-spec 3.1) in tor-gencert's item
/// order. `dir_address` is the optional `IP:Port` of the DirPort.
pub fn key_certificate(
    identity: &RsaKeypair,
    signing: &RsaKeypair,
    published_unix: u64,
    expires_unix: u64,
    dir_address: Option<&str>,
) -> Result<String, KeyError> {
    let mut doc = String::from("dir-key-certificate-version 3\n");
    if let Some(a) = dir_address {
        doc.push_str(&format!("dir-address {a}\n"));
    }
    doc.push_str(&format!(
        "fingerprint {}\n",
        identity.public().fingerprint_hex()
    ));
    doc.push_str(&format!(
        "dir-key-published {}\n",
        format_utc(published_unix)
    ));
    doc.push_str(&format!("dir-key-expires {}\n", format_utc(expires_unix)));
    doc.push_str("dir-identity-key\n");
    doc.push_str(&identity.public().to_pem());
    doc.push_str("dir-signing-key\n");
    doc.push_str(&signing.public().to_pem());
    doc.push_str("dir-key-crosscert\n");
    let cross = signing.sign_raw(&identity.public().fingerprint())?;
    doc.push_str(&signature_block("ID SIGNATURE", &cross));
    doc.push_str("dir-key-certification\n");
    let digest = Sha1::digest(doc.as_bytes());
    let sig = identity.sign_raw(&digest)?;
    doc.push_str(&signature_block("SIGNATURE", &sig));
    Ok(doc)
}

impl AuthorityKeys {
    /// Generate identity and signing keys and a certificate valid from
    /// `now_unix` for `lifetime_secs`. `identity_bits` is normally
    /// [`AUTHORITY_IDENTITY_BITS`] (tests may use 2048 for speed).
    pub fn generate(
        rng: &mut dyn CryptoRngCore,
        identity_bits: usize,
        now_unix: u64,
        lifetime_secs: u64,
        dir_address: Option<&str>,
    ) -> Result<Self, KeyError> {
        let identity = RsaKeypair::generate(rng, identity_bits)?;
        let signing = RsaKeypair::generate(rng, AUTHORITY_SIGNING_BITS)?;
        let certificate = key_certificate(
            &identity,
            &signing,
            now_unix,
            now_unix + lifetime_secs,
            dir_address,
        )?;
        Ok(Self {
            identity,
            signing,
            certificate,
        })
    }

    /// Replace the signing key and certificate (before the old one expires).
    pub fn rotate_signing_key(
        &mut self,
        rng: &mut dyn CryptoRngCore,
        now_unix: u64,
        lifetime_secs: u64,
        dir_address: Option<&str>,
    ) -> Result<(), KeyError> {
        let signing = RsaKeypair::generate(rng, AUTHORITY_SIGNING_BITS)?;
        self.certificate = key_certificate(
            &self.identity,
            &signing,
            now_unix,
            now_unix + lifetime_secs,
            dir_address,
        )?;
        self.signing = signing;
        Ok(())
    }

    /// The authority's v3 identity fingerprint (for `DirAuthority ... v3ident=`).
    pub fn v3ident(&self) -> String {
        self.identity.public().fingerprint_hex()
    }

    /// The public signing key.
    pub fn signing_public(&self) -> &RsaPublic {
        self.signing.public()
    }

    /// Save as `authority_identity_key`, `authority_signing_key`,
    /// `authority_certificate` in `dir` (0700 / 0600).
    pub fn save(&self, dir: &Path) -> Result<(), KeyError> {
        create_private_dir(dir)?;
        write_private_file(
            &dir.join("authority_identity_key"),
            self.identity.to_pem().as_bytes(),
        )?;
        write_private_file(
            &dir.join("authority_signing_key"),
            self.signing.to_pem().as_bytes(),
        )?;
        write_private_file(
            &dir.join("authority_certificate"),
            self.certificate.as_bytes(),
        )?;
        Ok(())
    }

    /// Load what [`AuthorityKeys::save`] wrote.
    pub fn load(dir: &Path) -> Result<Self, KeyError> {
        let p = |n: &str| dir.join(n);
        let identity = read_rsa(&p("authority_identity_key"))?
            .ok_or_else(|| bad(&p("authority_identity_key"), "missing"))?;
        let signing = read_rsa(&p("authority_signing_key"))?
            .ok_or_else(|| bad(&p("authority_signing_key"), "missing"))?;
        let cert = read_file(&p("authority_certificate"))?
            .ok_or_else(|| bad(&p("authority_certificate"), "missing"))?;
        let certificate =
            String::from_utf8(cert).map_err(|_| bad(&p("authority_certificate"), "not UTF-8"))?;
        Ok(Self {
            identity,
            signing,
            certificate,
        })
    }
}
