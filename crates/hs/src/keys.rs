//! Onion-service keys (rend-spec-v3 §2.1 `[SUBCRED]`, appendix A.2
//! `[KEYBLIND]`, cert-spec types 08, 09, 0B).
//!
//! * [`ServiceIdentity`]: the long-term identity key pair (`KS_hs_id`),
//!   stored in tor's expanded form; read and written in tor's
//!   `hs_ed25519_secret_key` file format so a stock tor service's keys can
//!   be used unchanged.
//! * Key blinding and the credential/subcredential are Arti's
//!   `tor-hscrypto` (the same 0.47 generation as our `tor-llcrypto`): its
//!   blinding is the one C tor uses (checked here against vectors C tor
//!   generated) and costs one scalar multiplication.
//! * [`BlindedService`]: the blinded key pair of one time period, which
//!   certifies the descriptor signing key (type 08) and computes the
//!   descriptor's revision counter.
//! * [`verify_desc_signing_cert`]: what an HSDir and a client check about
//!   the type-08 certificate of a descriptor.

use onionmix_crypto::Ed25519Keypair;
use onionmix_crypto::certs::{CertError, CertType, Ed25519Cert, expiration_hours, key_type};
use rand_core::CryptoRngCore;
use sha3::{Digest, Sha3_256};
use tor_hscrypto::ope::{AesOpeKey, SrvPeriodOffset};
use tor_hscrypto::pk::{HsBlindIdKeypair, HsIdKey, HsIdKeypair};
use tor_llcrypto::pk::ed25519::ExpandedKeypair;

use crate::addr::OnionAddress;
use crate::time::{DESC_CERT_LIFETIME_S, HsSchedule, TimeError};

/// Header of tor's `hs_ed25519_secret_key` file (NUL padded to 32 bytes).
pub const SECRET_KEY_FILE_TAG: &[u8] = b"== ed25519v1-secret: type0 ==";
/// Header of tor's `hs_ed25519_public_key` file (NUL padded to 32 bytes).
pub const PUBLIC_KEY_FILE_TAG: &[u8] = b"== ed25519v1-public: type0 ==";

/// Key errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// A key file of the wrong length or with the wrong header.
    #[error("not a tor {0} key file")]
    BadKeyFile(&'static str),
    /// The expanded secret key is not usable (e.g. its public key is not
    /// a valid point).
    #[error("unusable key")]
    BadKey,
    /// Key blinding failed (a degenerate key).
    #[error("key blinding failed")]
    Blinding,
    /// Time-period arithmetic failed.
    #[error(transparent)]
    Time(#[from] TimeError),
    /// A certificate did not verify.
    #[error("certificate: {0}")]
    Cert(#[from] CertError),
    /// A certificate of the wrong type.
    #[error("certificate has type {0}, expected {1}")]
    CertType(u8, u8),
}

/// `N_hs_cred = SHA3-256("credential" | KP_hs_id)`.
pub fn credential(id: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha3_256::new();
    h.update(b"credential");
    h.update(id);
    h.finalize().into()
}

/// `N_hs_subcred = SHA3-256("subcredential" | N_hs_cred | KP_hs_blind_id)`.
pub fn subcredential(id: &[u8; 32], blinded: &[u8; 32]) -> [u8; 32] {
    let mut h = Sha3_256::new();
    h.update(b"subcredential");
    h.update(credential(id));
    h.update(blinded);
    h.finalize().into()
}

/// Client side: the blinded public key and subcredential of `addr` for
/// time period `period` of `schedule`.
pub fn blinded_public(
    addr: &OnionAddress,
    schedule: &HsSchedule,
    period: u64,
) -> Result<([u8; 32], [u8; 32]), KeyError> {
    let id: HsIdKey = addr.hs_id_key().map_err(|_| KeyError::BadKey)?;
    let tp = schedule.time_period(period)?;
    let (blind, subcred) = id.compute_blinded_key(tp).map_err(|_| KeyError::Blinding)?;
    Ok((blind.id().into(), *subcred.as_ref()))
}

/// A service's long-term identity key pair.
pub struct ServiceIdentity {
    kp: Ed25519Keypair,
}

impl std::fmt::Debug for ServiceIdentity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ServiceIdentity { .. }")
    }
}

impl ServiceIdentity {
    /// A fresh identity.
    pub fn generate(rng: &mut dyn CryptoRngCore) -> Self {
        Self {
            kp: Ed25519Keypair::generate(rng),
        }
    }

    /// From the 64-byte expanded secret key (tor's storage form; the
    /// scalar is used unchanged, as tor does, so vanity keys work).
    pub fn from_expanded(expanded: &[u8; 64]) -> Result<Self, KeyError> {
        let kp = Ed25519Keypair::from_expanded_unclamped(expanded);
        OnionAddress::from_key(kp.public()).map_err(|_| KeyError::BadKey)?;
        Ok(Self { kp })
    }

    /// Parse tor's `hs_ed25519_secret_key` file (32-byte header, 64-byte
    /// expanded secret key).
    pub fn from_tor_key_file(bytes: &[u8]) -> Result<Self, KeyError> {
        let (head, key) = split_key_file(bytes, SECRET_KEY_FILE_TAG, 64, "secret")?;
        let _ = head;
        let mut e = [0u8; 64];
        e.copy_from_slice(key);
        Self::from_expanded(&e)
    }

    /// tor's `hs_ed25519_secret_key` file contents.
    pub fn to_tor_key_file(&self) -> Vec<u8> {
        key_file(SECRET_KEY_FILE_TAG, self.kp.expanded_secret())
    }

    /// tor's `hs_ed25519_public_key` file contents.
    pub fn to_tor_public_key_file(&self) -> Vec<u8> {
        key_file(PUBLIC_KEY_FILE_TAG, &self.kp.public())
    }

    /// The public identity key.
    pub fn public(&self) -> [u8; 32] {
        self.kp.public()
    }

    /// The service's address.
    pub fn address(&self) -> Result<OnionAddress, KeyError> {
        OnionAddress::from_key(self.kp.public()).map_err(|_| KeyError::BadKey)
    }

    /// The blinded key pair and subcredential for time period `period`.
    pub fn blind(&self, schedule: &HsSchedule, period: u64) -> Result<BlindedService, KeyError> {
        let exp = ExpandedKeypair::from_secret_key_bytes(*self.kp.expanded_secret())
            .ok_or(KeyError::BadKey)?;
        let id = HsIdKeypair::from(exp);
        let tp = schedule.time_period(period)?;
        let (_pk, blinded, subcred) = id.compute_blinded_key(tp).map_err(|_| KeyError::Blinding)?;
        let exp: &ExpandedKeypair = blinded.as_ref();
        let secret = exp.to_secret_key_bytes();
        let kp = Ed25519Keypair::from_expanded_unclamped(&secret);
        Ok(BlindedService {
            public: kp.public(),
            kp,
            arti: blinded,
            subcredential: *subcred.as_ref(),
            period,
        })
    }
}

/// The blinded identity of a service for one time period.
pub struct BlindedService {
    kp: Ed25519Keypair,
    arti: HsBlindIdKeypair,
    public: [u8; 32],
    subcredential: [u8; 32],
    period: u64,
}

impl std::fmt::Debug for BlindedService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BlindedService {{ period: {} }}", self.period)
    }
}

impl BlindedService {
    /// `KP_hs_blind_id`.
    pub fn public(&self) -> &[u8; 32] {
        &self.public
    }

    /// `N_hs_subcred` of this period.
    pub fn subcredential(&self) -> &[u8; 32] {
        &self.subcredential
    }

    /// The time period number.
    pub fn period(&self) -> u64 {
        self.period
    }

    /// The blinded key pair (signs the type-08 certificate).
    pub fn keypair(&self) -> &Ed25519Keypair {
        &self.kp
    }

    /// Arti's form of the blinded key pair (the descriptor builder takes it).
    pub fn arti_keypair(&self) -> &HsBlindIdKeypair {
        &self.arti
    }

    /// The `descriptor-signing-key-cert`: type 08, certifying
    /// `desc_signing_key`, signed by the blinded key with the
    /// signed-with-ed25519-key extension, valid for 54 hours from `now`
    /// (rounded up to the hour, as tor does).
    pub fn desc_signing_cert(&self, desc_signing_key: &[u8; 32], now: u64) -> Vec<u8> {
        Ed25519Cert::create(
            CertType::HS_BLINDED_ID_V_SIGNING,
            key_type::ED25519,
            desc_signing_key,
            expiration_hours(now, DESC_CERT_LIFETIME_S),
            &self.kp,
            true,
        )
    }

    /// The revision counter stock tor puts in a descriptor built at `now`:
    /// tor's order-preserving encryption ("Encrypted Time In Period") of the
    /// seconds since the start of the shared-random run whose SRV places the
    /// descriptor: the previous run for the current descriptor
    /// (`is_current`), the current run for the next one. The OPE key is
    /// `SHA3-256("rev-counter-generation\0" | blinded expanded secret)`; tor
    /// hashes the string's terminating NUL, so it is added here to produce
    /// the very counters a stock tor service with the same key produces.
    pub fn revision_counter(
        &self,
        schedule: &HsSchedule,
        valid_after: u64,
        now: u64,
        is_current: bool,
    ) -> u64 {
        let start = if is_current {
            schedule.previous_srv_run_start(valid_after)
        } else {
            schedule.srv_run_start(valid_after)
        };
        let since = now.saturating_sub(start);
        // tor caps the plaintext (OPE_INPUT_MAX, 2^18 * 2^... ) far above a
        // run's length; a u32 is ample.
        let since = u32::try_from(since).unwrap_or(u32::MAX);
        let mut secret = Vec::with_capacity(65);
        secret.push(0u8);
        secret.extend_from_slice(self.kp.expanded_secret());
        let ope = AesOpeKey::from_secret(&secret);
        zeroize::Zeroize::zeroize(&mut secret);
        ope.encrypt(SrvPeriodOffset::from(since))
    }
}

/// Check a `descriptor-signing-key-cert`: type 08, an Ed25519 certified key,
/// signed by `blinded` (the extension must name it), not expired at `now`.
/// Returns the descriptor signing key.
pub fn verify_desc_signing_cert(
    cert: &[u8],
    blinded: &[u8; 32],
    now: u64,
) -> Result<([u8; 32], Ed25519Cert), KeyError> {
    let c = Ed25519Cert::parse(cert)?;
    if c.cert_type != CertType::HS_BLINDED_ID_V_SIGNING {
        return Err(KeyError::CertType(
            c.cert_type.0,
            CertType::HS_BLINDED_ID_V_SIGNING.0,
        ));
    }
    if c.signing_key.as_ref() != Some(blinded) {
        return Err(KeyError::Cert(CertError::WrongSigner));
    }
    c.verify(Some(blinded), now)?;
    let key = c
        .certified_ed25519()
        .ok_or(KeyError::Cert(CertError::Malformed("certified key")))?;
    Ok((key, c))
}

fn key_file(tag: &[u8], key: &[u8]) -> Vec<u8> {
    let mut out = vec![0u8; 32];
    out[..tag.len()].copy_from_slice(tag);
    out.extend_from_slice(key);
    out
}

fn split_key_file<'a>(
    bytes: &'a [u8],
    tag: &[u8],
    key_len: usize,
    what: &'static str,
) -> Result<(&'a [u8], &'a [u8]), KeyError> {
    if bytes.len() != 32 + key_len {
        return Err(KeyError::BadKeyFile(what));
    }
    let (head, key) = bytes.split_at(32);
    let tag_ok = head.starts_with(tag)
        && head
            .get(tag.len()..)
            .is_some_and(|pad| pad.iter().all(|b| *b == 0));
    if !tag_ok {
        return Err(KeyError::BadKeyFile(what));
    }
    Ok((head, key))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h32(s: &str) -> [u8; 32] {
        let v = hex::decode(s).expect("hex");
        v.try_into().expect("32")
    }

    // C tor's vectors (test_hs_common.c test_blinding_basics):
    // period 1234 of a 1-day schedule.
    const ID_PUB: &str = "833990B085C1A688C1D4C8B1F6B56AFAF5A2ECA674449E1D704F83765CCB7BC6";
    const ID_SEC: &str = "D8C7FF0E31295B66540D789AF3E3DF992038A9592EEA01D8B7CBA06D6E66D1594D6167696320576F7264733A20737065697373636F62616C742062697669756D";
    const BLIND_PUB: &str = "3A50BF210E8F9EE955AE0014F7A6917FB65EBF098A86305ABB508D1A7291B6D5";
    const SUBCRED: &str = "635D55907816E8D76398A675A50B1C2F3E36B42A5CA77BA3A0441285161AE07D";
    const BLIND_SEC: &str = "A958DC83AC885F6814C67035DE817A2C604D5D2F715282079448F789B656350B4540FE1F80AA3F7E91306B7BF7A8E367293352B14A29FDCC8C19F3558075524B";

    fn schedule() -> HsSchedule {
        HsSchedule::from_interval(3600, None, false).expect("schedule")
    }

    #[test]
    fn blinding_matches_c_tor_vectors() {
        let sec: [u8; 64] = hex::decode(ID_SEC).expect("hex").try_into().expect("64");
        let id = ServiceIdentity::from_expanded(&sec).expect("id");
        assert_eq!(id.public(), h32(ID_PUB));
        // 1973-05-20T01:50:33Z is in period 1234.
        assert_eq!(schedule().period_num(106_710_633), Ok(1234));
        let b = id.blind(&schedule(), 1234).expect("blind");
        assert_eq!(b.public(), &h32(BLIND_PUB));
        assert_eq!(b.subcredential(), &h32(SUBCRED));
        assert_eq!(hex::encode_upper(b.keypair().expanded_secret()), BLIND_SEC);
        let addr = id.address().expect("addr");
        let (pk, sc) = blinded_public(&addr, &schedule(), 1234).expect("client");
        assert_eq!(pk, h32(BLIND_PUB));
        assert_eq!(sc, h32(SUBCRED));
        assert_eq!(subcredential(&h32(ID_PUB), &h32(BLIND_PUB)), h32(SUBCRED));
    }

    #[test]
    fn key_files_round_trip_and_are_checked() {
        let id = ServiceIdentity::generate(&mut rand::rngs::OsRng);
        let f = id.to_tor_key_file();
        assert_eq!(f.len(), 96);
        assert!(f.starts_with(SECRET_KEY_FILE_TAG));
        let back = ServiceIdentity::from_tor_key_file(&f).expect("parse");
        assert_eq!(back.public(), id.public());
        assert_eq!(id.to_tor_public_key_file()[32..], id.public());
        let mut bad = f.clone();
        bad[0] = b'x';
        assert!(ServiceIdentity::from_tor_key_file(&bad).is_err());
        assert!(ServiceIdentity::from_tor_key_file(&f[..95]).is_err());
    }

    #[test]
    fn desc_signing_cert_verifies() {
        let id = ServiceIdentity::generate(&mut rand::rngs::OsRng);
        let b = id.blind(&schedule(), 20_000).expect("blind");
        let sk = Ed25519Keypair::generate(&mut rand::rngs::OsRng);
        let now = 1_700_000_000;
        let cert = b.desc_signing_cert(&sk.public(), now);
        let (k, c) = verify_desc_signing_cert(&cert, b.public(), now).expect("ok");
        assert_eq!(k, sk.public());
        assert!(c.expires_unix() >= now + DESC_CERT_LIFETIME_S);
        assert!(verify_desc_signing_cert(&cert, &sk.public(), now).is_err());
        assert!(verify_desc_signing_cert(&cert, b.public(), now + 60 * 3600).is_err());
    }

    #[test]
    fn revision_counter_increases_with_time() {
        let id = ServiceIdentity::generate(&mut rand::rngs::OsRng);
        let s = schedule();
        let b = id.blind(&s, 20_000).expect("blind");
        let va = 1_728_000_000; // an SRV run start (multiple of 86400)
        let r1 = b.revision_counter(&s, va, va + 10, false);
        let r2 = b.revision_counter(&s, va, va + 11, false);
        let r3 = b.revision_counter(&s, va, va + 5000, false);
        assert!(r1 < r2 && r2 < r3);
        // The current descriptor counts from the previous run: larger.
        assert!(b.revision_counter(&s, va, va + 10, true) > r3);
    }
}
