//! Sphinx packet formats (sans-IO).
//!
//! Two profiles:
//! - [`sphinxmix`]: byte-compatible with PyPI sphinxmix 0.0.7 (NIST P-224);
//! - [`x25519`]: the same construction on X25519 with HKDF-SHA256 and a
//!   wide-block LIONESS body cipher, with smaller headers.
//!
//! [`replay`] holds the bounded replay cache.

pub mod msgpack;
pub mod p224;
pub mod replay;
pub mod sphinxmix;
pub mod x25519;

use subtle::ConstantTimeEq;
use thiserror::Error;

/// Compares MACs (and other secrets) in constant time (`subtle`); only the
/// lengths, which are public, may shortcut.
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.ct_eq(b).into()
}

/// Why a packet was refused. Every variant is a counted drop at a node.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SphinxError {
    #[error("bad Sphinx parameters")]
    BadParams,
    #[error("path empty or keys do not match hops")]
    BadPath,
    #[error("routing information does not fit the header")]
    RoutingTooLong,
    #[error("payload does not fit the body")]
    PayloadTooLong,
    #[error("field has the wrong length")]
    BadLength,
    #[error("alpha is not a valid group element")]
    BadAlpha,
    #[error("bad key")]
    BadKey,
    #[error("header MAC mismatch")]
    HeaderMac,
    #[error("body MAC mismatch")]
    BodyMac,
    #[error("malformed packet structure")]
    Malformed,
    #[error("msgpack: {0}")]
    Msgpack(msgpack::MsgpackError),
}
