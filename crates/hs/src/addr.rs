//! v3 onion addresses as a type (rend-spec-v3 §6 `[ONIONADDRESS]`).
//!
//! The codec itself (base32, checksum `SHA3-256(".onion checksum" | key |
//! 3)[:2]`, version 3, torsion-free key) lives in
//! `onionmix_frontend::addr`, which the SOCKS front end already uses to
//! keep `.onion` names off the network; this module wraps it in
//! [`OnionAddress`] for the onion-service code and converts to Arti's
//! [`HsId`] and [`HsIdKey`], which the key-blinding code takes.

use std::fmt;
use std::str::FromStr;

use onionmix_frontend::addr::{HostKind, OnionAddrError, classify, encode_onion_v3};
use tor_hscrypto::pk::{HsId, HsIdKey};

use crate::error::HsClientError;

/// A v3 onion service address: the service's Ed25519 identity key
/// (`KP_hs_id`), checked to be a valid, torsion-free point.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct OnionAddress {
    key: [u8; 32],
}

impl OnionAddress {
    /// Parse a host name ending in `.onion` (case-insensitive, an optional
    /// trailing dot). Labels before the address (`www.<addr>.onion`) are
    /// accepted and dropped, as tor does.
    pub fn parse_host(host: &str) -> Result<Self, AddressError> {
        match classify(host) {
            HostKind::Onion { key } => Ok(Self { key }),
            HostKind::BadOnion(e) => Err(AddressError::Invalid(e)),
            HostKind::Public | HostKind::Exit => Err(AddressError::NotOnion),
        }
    }

    /// The address of a service whose identity key is `key`. Fails if the key
    /// is not a valid torsion-free Ed25519 point.
    pub fn from_key(key: [u8; 32]) -> Result<Self, AddressError> {
        // Round-trip through the codec so the same point checks apply.
        let label = encode_onion_v3(&key);
        let key = onionmix_frontend::addr::parse_onion_v3(&label).map_err(AddressError::Invalid)?;
        Ok(Self { key })
    }

    /// The service's Ed25519 identity key (`KP_hs_id`).
    pub fn key(&self) -> &[u8; 32] {
        &self.key
    }

    /// The 56-character label, without `.onion`.
    pub fn label(&self) -> String {
        encode_onion_v3(&self.key)
    }

    /// Arti's identity type for the same key.
    pub fn hs_id(&self) -> HsId {
        HsId::from(self.key)
    }

    /// Arti's public identity key (for blinding and subcredentials).
    pub fn hs_id_key(&self) -> Result<HsIdKey, AddressError> {
        HsIdKey::try_from(self.hs_id()).map_err(|_| AddressError::Invalid(OnionAddrError::Key))
    }
}

impl fmt::Display for OnionAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.onion", self.label())
    }
}

impl fmt::Debug for OnionAddress {
    /// Only a prefix: the whole address of a service a client visits is
    /// sensitive and must not end up in logs by accident.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let label = self.label();
        write!(f, "OnionAddress({}…)", label.get(..6).unwrap_or(""))
    }
}

impl FromStr for OnionAddress {
    type Err = AddressError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_host(s)
    }
}

/// Why a name is not a usable onion address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    /// The name does not end in `.onion`.
    #[error("not a .onion name")]
    NotOnion,
    /// A `.onion` name that is not a valid v3 address.
    #[error("invalid onion address: {0}")]
    Invalid(#[from] OnionAddrError),
}

impl From<AddressError> for HsClientError {
    fn from(e: AddressError) -> Self {
        HsClientError::BadAddress(e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // tor's test_hs_common.c test_build_address vector.
    const ADDR: &str = "25njqamcweflpvkl73j4szahhihoc4xt3ktcgjnpaingr5yhkenl5sid";

    #[test]
    fn parse_display_and_subdomains() {
        let a: OnionAddress = format!("{ADDR}.onion").parse().expect("valid");
        assert_eq!(a.to_string(), format!("{ADDR}.onion"));
        let b = OnionAddress::parse_host(&format!("www.deep.{}.ONION.", ADDR.to_uppercase()))
            .expect("subdomain");
        assert_eq!(a, b);
        assert_eq!(OnionAddress::from_key(*a.key()), Ok(a));
        assert_eq!(a.hs_id().as_ref(), a.key());
        assert!(a.hs_id_key().is_ok());
        // Arti's own parser agrees on the key.
        let arti: HsId = format!("{ADDR}.onion").parse().expect("arti parses");
        assert_eq!(arti, a.hs_id());
        assert!(!format!("{a:?}").contains(&ADDR[10..]));
    }

    #[test]
    fn errors_map_to_socks_bad_address() {
        for bad in ["example.com", "foo.exit"] {
            assert_eq!(OnionAddress::parse_host(bad), Err(AddressError::NotOnion));
        }
        let e = OnionAddress::parse_host("abc.onion").expect_err("short");
        assert!(matches!(
            e,
            AddressError::Invalid(OnionAddrError::Length(3))
        ));
        let he: HsClientError = e.into();
        assert_eq!(he.socks5_reply(), 0xF6);
    }
}
