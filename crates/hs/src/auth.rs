//! Client-authorization key files in stock tor's formats (tor manual,
//! "CLIENT AUTHORIZATION"), so keys move between tor and onionmix:
//!
//! * service: `<HiddenServiceDir>/authorized_clients/<name>.auth` holds
//!   `descriptor:x25519:<base32 public key>`;
//! * client: `<ClientOnionAuthDir>/<name>.auth_private` holds
//!   `<56-char address>:descriptor:x25519:<base32 private key>`.
//!
//! Base32 is RFC 4648 without padding (52 characters for 32 bytes); tor
//! accepts either case and writes upper case in its documentation.

use crate::addr::OnionAddress;

/// Why a client-authorization line is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AuthFileError {
    /// Not `descriptor:x25519:<key>` (or, for clients, not prefixed by an address).
    #[error("not a tor client-authorization line")]
    Format,
    /// The key is not 32 bytes of base32.
    #[error("bad base32 key")]
    Key,
    /// The address part is not a valid onion address.
    #[error("bad onion address")]
    Address,
}

const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";

/// Base32 of a 32-byte key (52 characters, upper case, no padding).
pub fn key_to_base32(key: &[u8; 32]) -> String {
    let mut out = String::with_capacity(52);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &b in key {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(ALPHABET[((acc >> bits) & 31) as usize]));
        }
        acc &= (1 << bits) - 1;
    }
    if bits > 0 {
        out.push(char::from(ALPHABET[((acc << (5 - bits)) & 31) as usize]));
    }
    out
}

/// A 32-byte key from 52 base32 characters (either case). The 4 unused
/// low bits must be zero.
pub fn key_from_base32(s: &str) -> Result<[u8; 32], AuthFileError> {
    if s.len() != 52 {
        return Err(AuthFileError::Key);
    }
    let mut out = [0u8; 32];
    let mut n = 0usize;
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = match c.to_ascii_uppercase() {
            c @ b'A'..=b'Z' => c - b'A',
            c @ b'2'..=b'7' => c - b'2' + 26,
            _ => return Err(AuthFileError::Key),
        };
        acc = ((acc << 5) | u32::from(v)) & 0x1FFF;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            let slot = out.get_mut(n).ok_or(AuthFileError::Key)?;
            *slot = (acc >> bits) as u8;
            n += 1;
        }
    }
    if n != 32 || acc & ((1 << bits) - 1) != 0 {
        return Err(AuthFileError::Key);
    }
    Ok(out)
}

fn key_part(s: &str) -> Result<[u8; 32], AuthFileError> {
    let rest = s
        .trim()
        .strip_prefix("descriptor:x25519:")
        .ok_or(AuthFileError::Format)?;
    key_from_base32(rest)
}

/// The public key in a service's `.auth` file.
pub fn parse_authorized_client(line: &str) -> Result<[u8; 32], AuthFileError> {
    key_part(line)
}

/// A service's `.auth` file line for `public`.
pub fn authorized_client_line(public: &[u8; 32]) -> String {
    format!("descriptor:x25519:{}", key_to_base32(public))
}

/// The service and private key in a client's `.auth_private` file.
pub fn parse_client_auth(line: &str) -> Result<(OnionAddress, [u8; 32]), AuthFileError> {
    let line = line.trim();
    let (addr, rest) = line.split_once(':').ok_or(AuthFileError::Format)?;
    let addr =
        OnionAddress::parse_host(&format!("{addr}.onion")).map_err(|_| AuthFileError::Address)?;
    Ok((addr, key_part(rest)?))
}

/// A client's `.auth_private` file line.
pub fn client_auth_line(addr: &OnionAddress, secret: &[u8; 32]) -> String {
    format!(
        "{}:descriptor:x25519:{}",
        addr.label(),
        key_to_base32(secret)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    // The key pair of Arti's client-auth test descriptor (hsdesc2).
    const PUB_B32: &str = "SACGOAEODFGCYY22NYZV45ZESFPFLDGLMBWFACKEO34XGHASSAMQ";
    const PUB_HEX: &str = "900467008E194C2C635A6E335E7724915E558CCB606C50094476F9731C129019";
    const SEC_B32: &str = "SDZNMD4RP4SCH4EYTTUZPFRZINNFWAOPPKZ6BINZAC7LREV24RBQ";
    const SEC_HEX: &str = "90F2D60F917F2423F0989CE9979639435A5B01CF7AB3E0A1B900BEB892BAE443";
    const ADDR: &str = "paozpdhgz2okvc6kgbxvh2bnfsmt4xergrtcl4obkhopyvwxkpjzvoad";

    #[test]
    fn base32_keys() {
        let k = key_from_base32(PUB_B32).expect("key");
        assert_eq!(hex::encode_upper(k), PUB_HEX);
        assert_eq!(key_to_base32(&k), PUB_B32);
        assert_eq!(key_from_base32(&PUB_B32.to_lowercase()), Ok(k));
        // The secret's public key is the listed public key.
        let s = key_from_base32(SEC_B32).expect("sec");
        assert_eq!(hex::encode_upper(s), SEC_HEX);
        let p = x25519_dalek::PublicKey::from(&x25519_dalek::StaticSecret::from(s));
        assert_eq!(p.to_bytes(), k);
        assert!(key_from_base32(&PUB_B32[..51]).is_err());
        assert!(key_from_base32(&format!("{}1", &PUB_B32[..51])).is_err());
        // Non-zero trailing bits.
        assert!(key_from_base32(&format!("{}R", &PUB_B32[..51])).is_err());
    }

    #[test]
    fn tor_file_lines() {
        let line = format!("descriptor:x25519:{PUB_B32}\n");
        let k = parse_authorized_client(&line).expect("auth");
        assert_eq!(authorized_client_line(&k), line.trim());
        let cl = format!("{ADDR}:descriptor:x25519:{SEC_B32}");
        let (addr, sk) = parse_client_auth(&cl).expect("auth_private");
        assert_eq!(addr.label(), ADDR);
        assert_eq!(client_auth_line(&addr, &sk), cl);
        for bad in [
            "descriptor:x448:AAAA",
            "x25519:AAAA",
            &format!("{ADDR}descriptor:x25519:{SEC_B32}"),
            &format!("abc:descriptor:x25519:{SEC_B32}"),
        ] {
            assert!(
                parse_client_auth(bad).is_err() || parse_authorized_client(bad).is_err(),
                "{bad}"
            );
        }
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(s in "\\PC{0,120}") {
            let _ = parse_client_auth(&s);
            let _ = parse_authorized_client(&s);
            let _ = key_from_base32(&s);
        }
        #[test]
        fn base32_round_trip(k in proptest::array::uniform32(proptest::num::u8::ANY)) {
            proptest::prop_assert_eq!(key_from_base32(&key_to_base32(&k)), Ok(k));
        }
    }
}
