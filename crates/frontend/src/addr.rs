//! Which names a client may send to an exit, and which it must never let
//! leave the process.
//!
//! `.onion` names are onion services (rend-spec-v3 §6 "encoding onion
//! addresses"): asking an exit or a resolver about them leaks them to the
//! network. `.exit` names are tor's old "use this exit" notation, disabled in
//! tor for security reasons; stock tor refuses them. Both are decided here,
//! before anything is sent anywhere.

use sha3::{Digest, Sha3_256};

/// What kind of name a SOCKS (or any other) request names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HostKind {
    /// An ordinary hostname or address: an exit may resolve it.
    Public,
    /// A well-formed v3 onion address; `key` is the service's Ed25519
    /// identity key. Any labels before the address (`www.<addr>.onion`)
    /// are dropped, as tor does.
    Onion {
        /// The service's public identity key.
        key: [u8; 32],
    },
    /// A `.onion` name that is not a valid v3 address.
    BadOnion(OnionAddrError),
    /// A `.exit` name (refused, as stock tor refuses it).
    Exit,
}

impl HostKind {
    /// True if the name must never reach an exit or a resolver.
    pub fn is_local_only(&self) -> bool {
        !matches!(self, HostKind::Public)
    }
}

/// Why a `.onion` name is not a valid v3 onion address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OnionAddrError {
    /// Not 56 base32 characters (v2 addresses, 16 characters, are gone).
    #[error("an onion address has 56 base32 characters, this one has {0}")]
    Length(usize),
    /// Not base32.
    #[error("not base32")]
    Base32,
    /// The version byte is not 3.
    #[error("unsupported onion address version {0}")]
    Version(u8),
    /// The two checksum bytes do not match.
    #[error("bad checksum")]
    Checksum,
    /// The key is not a usable Ed25519 point.
    #[error("not a valid Ed25519 key")]
    Key,
}

/// Length of a v3 onion address label.
pub const ONION_V3_LEN: usize = 56;

/// Classify a hostname (already lower-cased or not; the check ignores case).
/// A trailing dot is ignored, as DNS does.
pub fn classify(host: &str) -> HostKind {
    let h = host.trim_end_matches('.');
    let lower = h.to_ascii_lowercase();
    if lower == "exit" || lower.ends_with(".exit") {
        return HostKind::Exit;
    }
    if lower == "onion" {
        return HostKind::BadOnion(OnionAddrError::Length(0));
    }
    let Some(rest) = lower.strip_suffix(".onion") else {
        return HostKind::Public;
    };
    let label = rest.rsplit('.').next().unwrap_or(rest);
    match parse_onion_v3(label) {
        Ok(key) => HostKind::Onion { key },
        Err(e) => HostKind::BadOnion(e),
    }
}

/// Parse the 56-character label of a v3 onion address into its key,
/// checking version, checksum and the key itself.
pub fn parse_onion_v3(label: &str) -> Result<[u8; 32], OnionAddrError> {
    if label.len() != ONION_V3_LEN {
        return Err(OnionAddrError::Length(label.len()));
    }
    let raw = base32_decode(label).ok_or(OnionAddrError::Base32)?;
    // 56 chars * 5 bits = 280 bits = 35 bytes: key(32) | checksum(2) | version(1).
    let (key, tail) = raw.split_at(32);
    let version = tail[2];
    if version != 3 {
        return Err(OnionAddrError::Version(version));
    }
    let mut key_arr = [0u8; 32];
    key_arr.copy_from_slice(key);
    if onion_checksum(&key_arr, version) != [tail[0], tail[1]] {
        return Err(OnionAddrError::Checksum);
    }
    let point = curve25519_dalek::edwards::CompressedEdwardsY(key_arr)
        .decompress()
        .ok_or(OnionAddrError::Key)?;
    // tor refuses keys with a torsion component (a small-order key would
    // let several addresses name one service).
    if !point.is_torsion_free() || point.is_small_order() {
        return Err(OnionAddrError::Key);
    }
    Ok(key_arr)
}

/// The v3 address of a service key: base32(key | checksum | 3), lower case,
/// without ".onion".
pub fn encode_onion_v3(key: &[u8; 32]) -> String {
    let mut raw = Vec::with_capacity(35);
    raw.extend_from_slice(key);
    raw.extend_from_slice(&onion_checksum(key, 3));
    raw.push(3);
    base32_encode(&raw)
}

/// CHECKSUM = SHA3-256(".onion checksum" | PUBKEY | VERSION)[:2].
fn onion_checksum(key: &[u8; 32], version: u8) -> [u8; 2] {
    let mut h = Sha3_256::new();
    h.update(b".onion checksum");
    h.update(key);
    h.update([version]);
    let d = h.finalize();
    [d[0], d[1]]
}

const B32: &[u8; 32] = b"abcdefghijklmnopqrstuvwxyz234567";

fn base32_encode(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(5) * 8);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &b in data {
        acc = (acc << 8) | u32::from(b);
        bits += 8;
        while bits >= 5 {
            bits -= 5;
            out.push(char::from(B32[((acc >> bits) & 31) as usize]));
        }
    }
    if bits > 0 {
        out.push(char::from(B32[((acc << (5 - bits)) & 31) as usize]));
    }
    out
}

/// Decode unpadded lower/upper-case base32 whose length is a multiple of 8.
fn base32_decode(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(8) {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() * 5 / 8);
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = match c {
            b'a'..=b'z' => c - b'a',
            b'A'..=b'Z' => c - b'A',
            b'2'..=b'7' => c - b'2' + 26,
            _ => return None,
        };
        acc = ((acc << 5) | u32::from(v)) & 0xFFFF;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Decode a 52-character base32 x25519 key (the key part of tor's
/// `descriptor:x25519:<key>` client-authorization lines; either case).
pub fn decode_x25519_base32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 52 {
        return None;
    }
    let mut out = [0u8; 32];
    let mut n = 0usize;
    let (mut acc, mut bits) = (0u32, 0u32);
    for c in s.bytes() {
        let v = match c {
            b'a'..=b'z' => c - b'a',
            b'A'..=b'Z' => c - b'A',
            b'2'..=b'7' => c - b'2' + 26,
            _ => return None,
        };
        acc = ((acc << 5) | u32::from(v)) & 0xFFFF;
        bits += 5;
        if bits >= 8 {
            bits -= 8;
            *out.get_mut(n)? = (acc >> bits) as u8;
            n += 1;
        }
    }
    (n == 32).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    // rend-spec-v3's example key and tor's test vector
    // (test_hs_common.c: test_build_address).
    const TOR_VECTOR_ADDR: &str = "25njqamcweflpvkl73j4szahhihoc4xt3ktcgjnpaingr5yhkenl5sid";

    #[test]
    fn tor_vector_round_trip() {
        let key = parse_onion_v3(TOR_VECTOR_ADDR).expect("valid");
        assert_eq!(encode_onion_v3(&key), TOR_VECTOR_ADDR);
        assert_eq!(
            classify(&format!("{TOR_VECTOR_ADDR}.onion")),
            HostKind::Onion { key }
        );
        assert_eq!(
            classify(&format!("www.{}.ONION.", TOR_VECTOR_ADDR.to_uppercase())),
            HostKind::Onion { key }
        );
    }

    #[test]
    fn bad_onions_are_classified_not_public() {
        let mut bad = TOR_VECTOR_ADDR.to_string();
        bad.replace_range(55..56, if &bad[55..56] == "a" { "b" } else { "a" });
        for (name, want) in [
            ("abc.onion".to_string(), OnionAddrError::Length(3)),
            (
                "expyuzz4wqqyqhjn.onion".to_string(),
                OnionAddrError::Length(16),
            ),
            (format!("{bad}.onion"), OnionAddrError::Checksum),
            (format!("{}1.onion", &bad[..55]), OnionAddrError::Base32),
        ] {
            let k = classify(&name);
            assert!(k.is_local_only(), "{name}");
            match k {
                HostKind::BadOnion(e) => {
                    if want != OnionAddrError::Checksum {
                        assert_eq!(e, want, "{name}");
                    } else {
                        assert!(
                            matches!(e, OnionAddrError::Checksum | OnionAddrError::Version(_)),
                            "{name}: {e}"
                        );
                    }
                }
                other => panic!("{name}: {other:?}"),
            }
        }
        assert!(classify("onion").is_local_only());
    }

    #[test]
    fn version_is_checked() {
        let key = parse_onion_v3(TOR_VECTOR_ADDR).expect("valid");
        let mut raw = key.to_vec();
        raw.extend_from_slice(&onion_checksum(&key, 2));
        raw.push(2);
        let addr = base32_encode(&raw);
        assert_eq!(parse_onion_v3(&addr), Err(OnionAddrError::Version(2)));
    }

    #[test]
    fn small_order_keys_are_refused() {
        // The identity point (y = 1) has order 1.
        let mut key = [0u8; 32];
        key[0] = 1;
        assert_eq!(
            parse_onion_v3(&encode_onion_v3(&key)),
            Err(OnionAddrError::Key)
        );
    }

    #[test]
    fn exit_and_public_names() {
        assert_eq!(classify("foo.exit"), HostKind::Exit);
        assert_eq!(
            classify("www.example.com.0123456789abcdef0123456789abcdef01234567.EXIT"),
            HostKind::Exit
        );
        assert_eq!(classify("sink.onionmix.test"), HostKind::Public);
        assert_eq!(classify("onion.example.com"), HostKind::Public);
        assert_eq!(classify("exit.example.com"), HostKind::Public);
        assert!(!classify("example.com").is_local_only());
    }

    proptest::proptest! {
        #[test]
        fn classify_never_panics(s in "\\PC{0,80}") {
            let _ = classify(&s);
            let _ = classify(&format!("{s}.onion"));
        }
        #[test]
        fn base32_round_trip(data in proptest::collection::vec(proptest::num::u8::ANY, 0..40)) {
            let n = data.len() / 5 * 5;
            let d = &data[..n];
            let e = base32_encode(d);
            proptest::prop_assert_eq!(base32_decode(&e).expect("decodes"), d.to_vec());
        }
    }
}
