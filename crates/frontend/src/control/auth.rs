//! Control-port authentication secrets (control-spec §3.5, §3.24, §5.1):
//! the 32-byte cookie, SAFECOOKIE's HMAC-SHA256 exchange, and
//! `HashedControlPassword` (OpenPGP RFC 2440 iterated-and-salted S2K over
//! SHA-1, written `16:` + hex(salt ‖ count byte ‖ digest), as
//! `tor --hash-password` writes it). Every secret comparison is constant
//! time.

use hmac::{Hmac, Mac};
use sha1::{Digest, Sha1};
use sha2::Sha256;
use subtle::ConstantTimeEq;

/// Length of the authentication cookie.
pub const COOKIE_LEN: usize = 32;
/// Length of the server nonce in AUTHCHALLENGE.
pub const SERVER_NONCE_LEN: usize = 32;
/// HMAC key for the hash the server sends.
pub const SERVER_TO_CONTROLLER: &[u8] = b"Tor safe cookie authentication server-to-controller hash";
/// HMAC key for the hash the controller must send back.
pub const CONTROLLER_TO_SERVER: &[u8] = b"Tor safe cookie authentication controller-to-server hash";
/// The S2K count byte tor uses (65536 bytes hashed).
pub const S2K_COUNT_BYTE: u8 = 0x60;

type HmacSha256 = Hmac<Sha256>;

fn hmac(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    // HMAC accepts keys of any length, so this cannot fail.
    let mut m = match <HmacSha256 as Mac>::new_from_slice(key) {
        Ok(m) => m,
        Err(_) => return [0u8; 32],
    };
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// The SAFECOOKIE pair: (server hash to send, client hash to expect).
pub fn safecookie_hashes(
    cookie: &[u8; COOKIE_LEN],
    client_nonce: &[u8],
    server_nonce: &[u8; SERVER_NONCE_LEN],
) -> ([u8; 32], [u8; 32]) {
    let parts: [&[u8]; 3] = [cookie, client_nonce, server_nonce];
    (
        hmac(SERVER_TO_CONTROLLER, &parts),
        hmac(CONTROLLER_TO_SERVER, &parts),
    )
}

/// Constant-time equality of two byte strings (lengths are not secret).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

/// RFC 2440 iterated and salted S2K with SHA-1, as tor computes it.
pub fn s2k_rfc2440(salt: &[u8; 8], count_byte: u8, secret: &[u8]) -> [u8; 20] {
    let c = u32::from(count_byte);
    let mut count = ((16 + (c & 15)) as usize) << ((c >> 4) + 6);
    let mut block = Vec::with_capacity(secret.len().saturating_add(8));
    block.extend_from_slice(salt);
    block.extend_from_slice(secret);
    let mut h = Sha1::new();
    while count > 0 {
        let n = count.min(block.len());
        h.update(block.get(..n).unwrap_or_default());
        count -= n;
    }
    h.finalize().into()
}

/// A `HashedControlPassword` value.
#[derive(Clone, PartialEq, Eq)]
pub struct HashedPassword {
    salt: [u8; 8],
    count_byte: u8,
    digest: [u8; 20],
}

impl std::fmt::Debug for HashedPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HashedPassword(..)")
    }
}

/// Why a `HashedControlPassword` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a hashed control password (expected 16: followed by 58 hex digits)")]
pub struct BadHashedPassword;

impl HashedPassword {
    /// Hash `password` with `salt`.
    pub fn new(password: &[u8], salt: [u8; 8]) -> Self {
        HashedPassword {
            salt,
            count_byte: S2K_COUNT_BYTE,
            digest: s2k_rfc2440(&salt, S2K_COUNT_BYTE, password),
        }
    }

    /// Parse `16:<hex>`.
    pub fn parse(s: &str) -> Result<Self, BadHashedPassword> {
        let hex = s.trim().strip_prefix("16:").ok_or(BadHashedPassword)?;
        let raw = super::syntax::decode_hex(hex).ok_or(BadHashedPassword)?;
        if raw.len() != 29 {
            return Err(BadHashedPassword);
        }
        let mut salt = [0u8; 8];
        salt.copy_from_slice(raw.get(..8).ok_or(BadHashedPassword)?);
        let mut digest = [0u8; 20];
        digest.copy_from_slice(raw.get(9..29).ok_or(BadHashedPassword)?);
        Ok(HashedPassword {
            salt,
            count_byte: *raw.get(8).ok_or(BadHashedPassword)?,
            digest,
        })
    }

    /// Whether `password` matches (constant-time digest comparison).
    pub fn verify(&self, password: &[u8]) -> bool {
        let d = s2k_rfc2440(&self.salt, self.count_byte, password);
        ct_eq(&d, &self.digest)
    }
}

impl std::fmt::Display for HashedPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("16:")?;
        for b in self
            .salt
            .iter()
            .chain(std::iter::once(&self.count_byte))
            .chain(self.digest.iter())
        {
            write!(f, "{b:02X}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Made by stock tor 0.4.9.11: `tor --hash-password foo`.
    const TOR_FOO: &str = "16:FBFFEECCA4EDC15860ACEB0B713CD5928A19ED3073A89F39F9BE4A1746";

    #[test]
    fn verifies_a_hash_made_by_tor() {
        let h = HashedPassword::parse(TOR_FOO).unwrap();
        assert!(h.verify(b"foo"));
        assert!(!h.verify(b"fo"));
        assert!(!h.verify(b""));
        assert_eq!(h.to_string(), TOR_FOO);
    }

    #[test]
    fn new_hash_round_trips() {
        let h = HashedPassword::new(b"secret", [7u8; 8]);
        let s = h.to_string();
        assert_eq!(s.len(), 3 + 58);
        let p = HashedPassword::parse(&s).unwrap();
        assert!(p.verify(b"secret"));
        assert!(HashedPassword::parse("16:00").is_err());
        assert!(HashedPassword::parse(&s.replace("16:", "17:")).is_err());
    }

    /// The spec's example: `foo` with salt 660537E3E1CD4999.
    #[test]
    fn spec_example() {
        let h =
            HashedPassword::parse("16:660537E3E1CD49996044A3BF558097A981F539FEA2F9DA662B4626C1C2")
                .unwrap();
        assert!(h.verify(b"foo"));
    }

    #[test]
    fn safecookie_keys_differ_and_bind_inputs() {
        let cookie = [1u8; 32];
        let sn = [2u8; 32];
        let (s, c) = safecookie_hashes(&cookie, b"nonce", &sn);
        assert_ne!(s, c);
        let (s2, _) = safecookie_hashes(&cookie, b"nonce2", &sn);
        assert_ne!(s, s2);
        // Independent check of the construction.
        let mut m = <HmacSha256 as Mac>::new_from_slice(SERVER_TO_CONTROLLER).unwrap();
        m.update(&cookie);
        m.update(b"nonce");
        m.update(&sn);
        assert_eq!(s.to_vec(), m.finalize().into_bytes().to_vec());
    }
}
