//! Onion-service descriptors (rend-spec-v3 §2.4, §2.5): the outer
//! document, the superencrypted (client-authorization) layer and the
//! encrypted layer with the introduction points.
//!
//! | submodule | side | what |
//! |---|---|---|
//! | [`service`] | service | build, sign and encrypt a descriptor |
//! | [`client`] | client | parse, verify, decrypt (with or without a client-auth key) |
//! | [`cache`] | HSDir | the bounded descriptor store, fetch/publish paths |
//! | [`hsdir`] | HSDir | parse the outer document, check the type-08 certificate and the signature, decide replacement by revision counter |
//!
//! Building and client parsing use Arti's `tor-netdoc` 0.47 `hsdesc`
//! module (features `hs-service`, `hs-client`, `hs-pow-full`) behind the
//! types here: it implements both encryption layers (SHAKE-256 KDF to an
//! AES-256-CTR key, IV and MAC key; SHA3-256 MAC; padding), client
//! authorization (x25519 descriptor cookies) and the `pow-params v1`
//! line. Its HSDir-side type (`StoredHsDescMeta`) has no public accessors
//! in 0.47, so the HSDir checks in [`hsdir`] are our own (a six-line
//! document). Descriptors are capped at [`MAX_DESC_LEN`] (tor's 50 000
//! bytes) before any parsing.

pub mod cache;
pub mod client;
pub mod hsdir;
pub mod service;

#[cfg(test)]
mod tests;

use onionmix_cell::relay::LinkSpec;

/// Largest descriptor accepted or produced (tor's `HS_DESC_MAX_LEN`).
pub const MAX_DESC_LEN: usize = 50_000;
/// Most introduction points in a descriptor (rend-spec-v3 `NUM_INTRO_POINT` max).
pub const MAX_INTRO_POINTS: usize = 20;
/// Most client-authorization keys a service may list (each adds an
/// `auth-client` line; tor pads to multiples of 16).
pub const MAX_AUTH_CLIENTS: usize = 1000;

/// Descriptor errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DescError {
    /// Larger than [`MAX_DESC_LEN`].
    #[error("descriptor of {0} bytes is over the 50 KB limit")]
    TooLarge(usize),
    /// Not UTF-8 / not a descriptor document.
    #[error("malformed descriptor: {0}")]
    Malformed(String),
    /// The outer document did not verify (certificate, signature, blinded key).
    #[error("descriptor does not verify: {0}")]
    BadSignature(String),
    /// Not for the blinded key we asked for.
    #[error("descriptor is for another blinded key")]
    WrongBlindedKey,
    /// Expired or not yet valid.
    #[error("descriptor is not valid at this time")]
    Expired,
    /// The superencrypted layer did not decrypt with the subcredential.
    #[error("descriptor did not decrypt")]
    DecryptFailed,
    /// The inner layer is encrypted to authorized clients and we have no key.
    #[error("descriptor requires client authorization")]
    MissingClientAuth,
    /// Our client-authorization key is not among the authorized ones.
    #[error("client authorization key does not decrypt the descriptor")]
    WrongClientAuth,
    /// A decrypted layer is malformed or its signature is bad.
    #[error("inner descriptor layer invalid: {0}")]
    Inner(String),
    /// An introduction point entry we cannot use.
    #[error("bad introduction point: {0}")]
    BadIntroPoint(String),
    /// The service could not build the descriptor.
    #[error("cannot build descriptor: {0}")]
    Build(String),
}

/// One introduction point, as the descriptor lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntroPointInfo {
    /// How to reach the introduction point (`introduction-point` line).
    pub link_specifiers: Vec<LinkSpec>,
    /// The relay's ntor onion key (`onion-key ntor`).
    pub onion_key: [u8; 32],
    /// `KP_hs_ipt_sid`, the service's authentication key at this point
    /// (certified by the `auth-key` type-09 certificate).
    pub auth_key: [u8; 32],
    /// `KP_hss_ntor`, the service's x25519 key for INTRODUCE encryption
    /// (`enc-key ntor`, cross-certified by the type-0B `enc-key-cert`).
    pub enc_key: [u8; 32],
}

/// A service's `pow-params v1` offer (proposal 327).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowParamsV1 {
    /// The current seed.
    pub seed: [u8; 32],
    /// The suggested effort (0: puzzle available but not suggested).
    pub suggested_effort: u32,
    /// When the seed expires (seconds since the epoch).
    pub expires: u64,
}

/// The decrypted, verified content of a descriptor, as a client uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescriptorContent {
    /// `revision-counter`.
    pub revision: u64,
    /// Introduction points (1..=20).
    pub intro_points: Vec<IntroPointInfo>,
    /// `single-onion-service`.
    pub single_onion_service: bool,
    /// `intro-auth-required` present.
    pub intro_auth_required: bool,
    /// `pow-params v1`, if offered (other schemes are ignored, as tor does).
    pub pow_v1: Option<PowParamsV1>,
    /// The `flow-control` line's `sendme_inc`, if present.
    pub flow_control_sendme_inc: Option<u8>,
}

fn unix_to_system(t: u64) -> std::time::SystemTime {
    std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(t)
}

#[cfg(feature = "pow")]
fn system_to_unix(t: std::time::SystemTime) -> u64 {
    t.duration_since(std::time::SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// An error and its sources in one line (Arti's errors nest).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
