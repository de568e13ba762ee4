//! Key derivation functions (tor-spec 5.2).
//!
//! * KDF-RFC5869: HKDF-SHA256. ntor computes `KEY_SEED = HMAC-SHA256(key =
//!   t_key, msg = secret_input)` (the HKDF *extract* step with salt `t_key`)
//!   and then expands it with `info = m_expand`: [`kdf_rfc5869_expand`].
//! * KDF-TOR: `K = SHA1(K0 | [00]) | SHA1(K0 | [01]) | ...`, used by
//!   CREATE_FAST (and the retired TAP handshake): [`kdf_tor`].

use hmac::{Hmac, Mac};
use sha1::{Digest, Sha1};
use sha2::Sha256;

/// Errors from the KDFs (only ever caused by asking for too much output or
/// giving a too-short pseudo-random key).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KdfError {
    /// More output requested than the KDF can produce.
    #[error("requested {0} bytes of KDF output, which is more than the KDF allows")]
    TooLong(usize),
    /// The pseudo-random key for HKDF-Expand is shorter than 32 bytes.
    #[error("HKDF pseudo-random key too short")]
    ShortPrk,
}

/// `HMAC-SHA256(key, msg)`; tor-spec writes this as `H(msg, key)`.
pub fn hmac_sha256(key: &[u8], msg: &[&[u8]]) -> [u8; 32] {
    // HMAC accepts keys of any length, so `new_from_slice` cannot fail.
    let mut mac =
        <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes keys of any length");
    for part in msg {
        mac.update(part);
    }
    mac.finalize().into_bytes().into()
}

/// Full HKDF-SHA256 (RFC 5869): extract with `salt` over `ikm`, then expand
/// with `info` into `out`. At most 255*32 bytes.
pub fn hkdf_sha256(salt: &[u8], ikm: &[u8], info: &[u8], out: &mut [u8]) -> Result<(), KdfError> {
    let hk = hkdf::Hkdf::<Sha256>::new(Some(salt), ikm);
    hk.expand(info, out)
        .map_err(|_| KdfError::TooLong(out.len()))
}

/// KDF-RFC5869 as tor uses it: HKDF-Expand with PRK `key_seed` (the ntor
/// KEY_SEED, 32 bytes) and `info = m_expand`, filling `out` (at most
/// 255*32 bytes).
pub fn kdf_rfc5869_expand(
    key_seed: &[u8],
    m_expand: &[u8],
    out: &mut [u8],
) -> Result<(), KdfError> {
    let hk = hkdf::Hkdf::<Sha256>::from_prk(key_seed).map_err(|_| KdfError::ShortPrk)?;
    hk.expand(m_expand, out)
        .map_err(|_| KdfError::TooLong(out.len()))
}

/// KDF-TOR (tor-spec 5.2.1): fill `out` with
/// `SHA1(K0|[00]) | SHA1(K0|[01]) | ...`. At most 256*20 bytes.
pub fn kdf_tor(k0: &[u8], out: &mut [u8]) -> Result<(), KdfError> {
    if out.len() > 256 * 20 {
        return Err(KdfError::TooLong(out.len()));
    }
    for (i, chunk) in out.chunks_mut(20).enumerate() {
        let mut h = Sha1::new();
        h.update(k0);
        h.update([i as u8]);
        let d = h.finalize();
        chunk.copy_from_slice(&d[..chunk.len()]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        hex::decode(s).expect("test hex")
    }

    /// RFC 5869 appendix A, test cases 1-3 (SHA-256).
    #[test]
    fn rfc5869_vectors() {
        let cases = [
            (
                "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b",
                "000102030405060708090a0b0c",
                "f0f1f2f3f4f5f6f7f8f9",
                "077709362c2e32df0ddc3f0dc47bba6390b6c73bb50f9c3122ec844ad7c2b3e5",
                "3cb25f25faacd57a90434f64d0362f2a2d2d0a90cf1a5a4c5db02d56ecc4c5bf34007208d5b887185865",
            ),
            (
                "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\
                 202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f\
                 404142434445464748494a4b4c4d4e4f",
                "606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f\
                 808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f\
                 a0a1a2a3a4a5a6a7a8a9aaabacadaeaf",
                "b0b1b2b3b4b5b6b7b8b9babbbcbdbebfc0c1c2c3c4c5c6c7c8c9cacbcccdcecf\
                 d0d1d2d3d4d5d6d7d8d9dadbdcdddedfe0e1e2e3e4e5e6e7e8e9eaebecedeeef\
                 f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff",
                "06a6b88c5853361a06104c9ceb35b45cef760014904671014a193f40c15fc244",
                "b11e398dc80327a1c8e7f78c596a49344f012eda2d4efad8a050cc4c19afa97c\
                 59045a99cac7827271cb41c65e590e09da3275600c2f09b8367793a9aca3db71\
                 cc30c58179ec3e87c14c01d5c1f3434f1d87",
            ),
            (
                "0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b0b",
                "",
                "",
                "19ef24a32c717b167f33a91d6f648bdf96596776afdb6377ac434c1c293ccb04",
                "8da4e775a563c18f715f802a063c5a31b8a11f5c5ee1879ec3454e5f3c738d2d9d201395faa4b61a96c8",
            ),
        ];
        for (ikm, salt, info, prk, okm) in cases {
            let (ikm, salt, info) = (unhex(ikm), unhex(salt), unhex(info));
            let (prk, okm) = (unhex(prk), unhex(okm));
            let mut out = vec![0u8; okm.len()];
            hkdf_sha256(&salt, &ikm, &info, &mut out).expect("length ok");
            assert_eq!(out, okm);
            // Extract step is HMAC(salt, ikm); expand from the PRK matches too.
            assert_eq!(hmac_sha256(&salt, &[&ikm]).to_vec(), prk);
            let mut out2 = vec![0u8; okm.len()];
            kdf_rfc5869_expand(&prk, &info, &mut out2).expect("length ok");
            assert_eq!(out2, okm);
        }
    }

    #[test]
    fn kdf_tor_layout_and_limits() {
        // K0 = "" : first block is SHA1([00]).
        let mut out = [0u8; 25];
        kdf_tor(b"", &mut out).expect("short");
        let b0 = Sha1::digest([0u8]);
        let b1 = Sha1::digest([1u8]);
        assert_eq!(&out[..20], &b0[..]);
        assert_eq!(&out[20..], &b1[..5]);
        let mut big = vec![0u8; 256 * 20 + 1];
        assert!(kdf_tor(b"x", &mut big).is_err());
        let mut huge = vec![0u8; 255 * 32 + 1];
        assert!(kdf_rfc5869_expand(&[0u8; 32], b"", &mut huge).is_err());
        assert_eq!(
            kdf_rfc5869_expand(&[0u8; 16], b"", &mut out),
            Err(KdfError::ShortPrk)
        );
    }
}
