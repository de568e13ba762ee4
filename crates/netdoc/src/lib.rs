//! onionmix-netdoc: Tor directory documents for the client, sans-IO.
//!
//! Bootstrapping with this crate (the caller owns sockets and clocks):
//!
//! 1. [`DirRequest::microdesc_consensus`] -> bytes to send on a DirPort or
//!    `BEGIN_DIR` stream; feed the reply to a [`ResponseParser`]; parse the
//!    body with [`UnverifiedConsensus::parse`].
//! 2. [`UnverifiedConsensus::missing_certificates`] -> fetch
//!    [`DirRequest::authority_certs`] (or `all_authority_certs`), parse with
//!    [`AuthCertificate::parse_all`].
//! 3. [`UnverifiedConsensus::verify`] against the configured
//!    [`AuthorityConfig`]s -> [`Consensus`]; schedule the next fetch with
//!    [`Lifetime::pick_refresh_time`].
//! 4. [`NetDir::new`], then fetch [`NetDir::missing_microdescs`] in batches
//!    ([`DirRequest::microdesc_batches`]), [`parse_microdescs`],
//!    [`NetDir::add_microdescs`], until [`NetDir::has_enough_dir_info`].
//! 5. [`GuardSet::update`], then [`PathBuilder`] for circuits.
//!
//! Parsing and signature primitives come from Arti's `tor-netdoc` 0.47
//! (consensus, authority certificates, microdescriptors); no `tor-netdoc`
//! type appears in this crate's public API.

pub mod authority;
pub mod consensus;
pub mod dirclient;
pub mod guards;
pub mod microdesc;
pub mod netdir;
pub mod path;
pub mod routerdesc;
pub mod srv;
pub mod types;
pub mod vanguards;
pub mod vote;

pub use authority::{AuthCertificate, AuthorityConfig, CertError, merge_certificates};
pub use consensus::{
    Consensus, ConsensusError, ConsensusRelay, Lifetime, TimeTolerance, UnverifiedConsensus,
};
pub use dirclient::{DirClientError, DirRequest, DirRequestKind, DirResponse, ResponseParser};
pub use guards::{GuardParams, GuardSet, GuardStateError};
pub use microdesc::{Microdesc, MicrodescBatch, MicrodescError, QUIC_KEYWORD, parse_microdescs};
pub use netdir::{BandwidthWeights, NetDir, Position, Relay};
pub use path::{ExitTarget, NodeRestrictions, PathBuilder, PathConfig, PathError};
pub use srv::SharedRandom;
pub use types::{PortPolicy, Protocols, RelayFlags};

use std::fmt;
use std::str::FromStr;

/// True only in fuzzing builds: `--cfg fuzzing`, which cargo-fuzz sets and
/// no other build (release, test, CI) does. There, two signature checks
/// that a fuzz target would otherwise have to satisfy by signing every
/// input accept any well-formed signature, as tor's own fuzzing harness
/// does (`disable_signature_checking`): a status vote's signature
/// ([`vote::parse_vote`]; [`vote::build_vote`] writes a stand-in instead
/// of signing) and the signatures and cross-certificates of an uploaded
/// router descriptor ([`routerdesc::verify_upload`]). The fuzzer then
/// spends its executions on the code after the checks rather than on RSA
/// signing. Every other build signs and checks; see docs/fuzzing.md.
pub(crate) const FUZZING_ACCEPTS_SIGNATURES: bool = cfg!(fuzzing);

/// SHA-1 fingerprint of a relay's RSA identity key.
pub type RsaId = [u8; 20];
/// Ed25519 identity key.
pub type Ed25519Id = [u8; 32];
/// SHA-256 digest of a microdescriptor.
pub type MdDigest = [u8; 32];

/// A relay, identified by its RSA identity fingerprint.
#[derive(
    Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub struct RelayId(#[serde(with = "hex20")] pub RsaId);

impl fmt::Display for RelayId {
    /// Upper-case hex, as in tor's logs and URLs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex::encode_upper(self.0))
    }
}

impl fmt::Debug for RelayId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "${}", hex::encode_upper(self.0))
    }
}

/// Error parsing a [`RelayId`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("expected 40 hex digits (optionally prefixed by '$')")]
pub struct RelayIdParseError;

impl FromStr for RelayId {
    type Err = RelayIdParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_hex20(s.strip_prefix('$').unwrap_or(s))
            .map(RelayId)
            .ok_or(RelayIdParseError)
    }
}

/// Parse exactly 40 hex digits.
pub(crate) fn parse_hex20(s: &str) -> Option<[u8; 20]> {
    if s.len() != 40 {
        return None;
    }
    let mut out = [0u8; 20];
    hex::decode_to_slice(s, &mut out).ok()?;
    Some(out)
}

/// Base64 without padding (as in consensus `m` lines and `/tor/micro/d/` URLs).
pub fn b64_unpadded(data: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(data)
}

/// Serde helper: `[u8; 20]` as 40 upper-case hex digits.
pub(crate) mod hex20 {
    pub fn serialize<S: serde::Serializer>(v: &[u8; 20], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&hex::encode_upper(v))
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<[u8; 20], D::Error> {
        let s: String = serde::Deserialize::deserialize(d)?;
        super::parse_hex20(&s).ok_or_else(|| serde::de::Error::custom("expected 40 hex digits"))
    }
}

/// Serde helper: `Option<[u8; 20]>` as hex or null.
pub(crate) mod hex20_opt {
    pub fn serialize<S: serde::Serializer>(v: &Option<[u8; 20]>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(v) => s.serialize_some(&hex::encode_upper(v)),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<Option<[u8; 20]>, D::Error> {
        let s: Option<String> = serde::Deserialize::deserialize(d)?;
        match s {
            None => Ok(None),
            Some(s) => super::parse_hex20(&s)
                .map(Some)
                .ok_or_else(|| serde::de::Error::custom("expected 40 hex digits")),
        }
    }
}
