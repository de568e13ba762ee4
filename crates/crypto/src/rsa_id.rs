//! RSA keys as tor uses them: 1024-bit identity and TAP onion keys,
//! fingerprints, and tor's signature convention.
//!
//! Tor's RSA signatures on documents and cross-certificates are PKCS#1 v1.5
//! type-1 padding applied directly to a digest **without** a DigestInfo
//! prefix (OpenSSL `RSA_private_encrypt` with `RSA_PKCS1_PADDING`):
//! [`RsaKeypair::sign_raw`] / [`RsaPublic::verify_raw`]. The digest is
//! SHA-1 for router descriptors and key certificates, SHA-256 for the
//! RSA->Ed25519 cross-certificate. X.509 certificates use the standard
//! sha256WithRSAEncryption (with DigestInfo): [`RsaKeypair::sign_pkcs1_sha256`].

use rand_core::CryptoRngCore;
use rsa::pkcs1::{
    DecodeRsaPrivateKey, DecodeRsaPublicKey, EncodeRsaPrivateKey, EncodeRsaPublicKey,
};
use rsa::pkcs8::EncodePrivateKey;
use rsa::traits::PublicKeyParts;
use rsa::{BigUint, Pkcs1v15Sign, RsaPrivateKey, RsaPublicKey};
use sha1::Sha1;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

/// Largest RSA modulus we accept from the network (bits).
pub const MAX_RSA_BITS: usize = 8192;

/// RSA key errors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RsaError {
    /// The key did not decode.
    #[error("malformed RSA key: {0}")]
    BadKey(String),
    /// The key is of an unacceptable size or exponent.
    #[error("unacceptable RSA key ({0} bits)")]
    BadSize(usize),
    /// A signature did not verify.
    #[error("RSA signature did not verify")]
    BadSignature,
    /// Key generation or signing failed.
    #[error("RSA operation failed: {0}")]
    Failed(String),
}

/// An RSA public key.
#[derive(Clone, PartialEq, Eq)]
pub struct RsaPublic(RsaPublicKey);

impl std::fmt::Debug for RsaPublic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "RsaPublic({} bits, {})",
            self.bits(),
            self.fingerprint_hex()
        )
    }
}

impl RsaPublic {
    /// Decode a PKCS#1 `RSAPublicKey` DER structure (what tor hashes and
    /// puts in descriptors). Rejects moduli over [`MAX_RSA_BITS`] and
    /// exponents other than 65537.
    pub fn from_der(der: &[u8]) -> Result<Self, RsaError> {
        let k = RsaPublicKey::from_pkcs1_der(der).map_err(|e| RsaError::BadKey(e.to_string()))?;
        let k = Self(k);
        if k.bits() > MAX_RSA_BITS {
            return Err(RsaError::BadSize(k.bits()));
        }
        if k.0.e() != &BigUint::from(65537u32) {
            return Err(RsaError::BadKey("public exponent is not 65537".into()));
        }
        Ok(k)
    }

    /// Decode a `-----BEGIN RSA PUBLIC KEY-----` PEM block.
    pub fn from_pem(pem: &str) -> Result<Self, RsaError> {
        let k = RsaPublicKey::from_pkcs1_pem(pem.trim())
            .map_err(|e| RsaError::BadKey(e.to_string()))?;
        Self::from_der(
            &k.to_pkcs1_der()
                .map_err(|e| RsaError::BadKey(e.to_string()))?
                .into_vec(),
        )
    }

    /// PKCS#1 `RSAPublicKey` DER encoding.
    pub fn to_der(&self) -> Vec<u8> {
        // Encoding a well-formed in-memory key cannot fail.
        self.0
            .to_pkcs1_der()
            .expect("encode RSA public key")
            .into_vec()
    }

    /// `-----BEGIN RSA PUBLIC KEY-----` PEM with 64-column lines and a
    /// trailing newline, as tor writes it in documents.
    pub fn to_pem(&self) -> String {
        pem_wrap("RSA PUBLIC KEY", &self.to_der())
    }

    /// Modulus size in bits.
    pub fn bits(&self) -> usize {
        self.0.n().bits()
    }

    /// Tor fingerprint / RSA identity digest: SHA-1 of the DER encoding.
    pub fn fingerprint(&self) -> [u8; 20] {
        Sha1::digest(self.to_der()).into()
    }

    /// Fingerprint as 40 upper-case hex digits.
    pub fn fingerprint_hex(&self) -> String {
        hex::encode_upper(self.fingerprint())
    }

    /// Fingerprint as tor prints it in descriptors: groups of four hex
    /// digits separated by spaces.
    pub fn fingerprint_spaced(&self) -> String {
        spaced_fingerprint(&self.fingerprint())
    }

    /// SHA-256 of the DER encoding (CID/SID in AUTHENTICATE).
    pub fn sha256_of_der(&self) -> [u8; 32] {
        Sha256::digest(self.to_der()).into()
    }

    /// Verify a tor-style signature (PKCS#1 v1.5 padding, no DigestInfo)
    /// whose signed content is exactly `data` (normally a SHA-1 or SHA-256
    /// digest).
    pub fn verify_raw(&self, data: &[u8], sig: &[u8]) -> Result<(), RsaError> {
        self.0
            .verify(Pkcs1v15Sign::new_unprefixed(), data, sig)
            .map_err(|_| RsaError::BadSignature)
    }

    /// Recover the content of a tor-style signature (C tor's
    /// `crypto_pk_public_checksig`): apply the public key, check the
    /// PKCS#1 type-1 padding, return what was signed. Used where verifiers
    /// must allow extra data after the expected prefix
    /// (`onion-key-crosscert`).
    pub fn recover_raw(&self, sig: &[u8]) -> Result<Vec<u8>, RsaError> {
        let k = self.0.size();
        if sig.len() != k {
            return Err(RsaError::BadSignature);
        }
        let s = BigUint::from_bytes_be(sig);
        if &s >= self.0.n() {
            return Err(RsaError::BadSignature);
        }
        let m = s.modpow(self.0.e(), self.0.n()).to_bytes_be();
        // Left-pad to k bytes: EM = 00 01 FF..FF 00 M, at least 8 FF bytes.
        let mut em = vec![0u8; k.saturating_sub(m.len())];
        em.extend_from_slice(&m);
        if em.len() != k || em[0] != 0 || em[1] != 1 {
            return Err(RsaError::BadSignature);
        }
        let sep = em[2..]
            .iter()
            .position(|&b| b != 0xff)
            .map(|p| p + 2)
            .ok_or(RsaError::BadSignature)?;
        if sep < 10 || em[sep] != 0 {
            return Err(RsaError::BadSignature);
        }
        Ok(em[sep + 1..].to_vec())
    }

    /// Verify a standard PKCS#1 v1.5 SHA-256 signature (X.509).
    pub fn verify_pkcs1_sha256(&self, msg: &[u8], sig: &[u8]) -> Result<(), RsaError> {
        let h = Sha256::digest(msg);
        self.0
            .verify(Pkcs1v15Sign::new::<Sha256>(), &h, sig)
            .map_err(|_| RsaError::BadSignature)
    }

    /// Verify a standard PKCS#1 v1.5 SHA-1 signature (old X.509 certs).
    pub fn verify_pkcs1_sha1(&self, msg: &[u8], sig: &[u8]) -> Result<(), RsaError> {
        let h = Sha1::digest(msg);
        self.0
            .verify(Pkcs1v15Sign::new::<Sha1>(), &h, sig)
            .map_err(|_| RsaError::BadSignature)
    }

    /// The underlying `rsa` crate key.
    pub fn inner(&self) -> &RsaPublicKey {
        &self.0
    }
}

/// Format a 20-byte fingerprint as `ABCD EF01 ...`.
pub fn spaced_fingerprint(fp: &[u8; 20]) -> String {
    let h = hex::encode_upper(fp);
    let mut out = String::with_capacity(49);
    for (i, c) in h.chars().enumerate() {
        if i > 0 && i % 4 == 0 {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

/// Wrap DER bytes in a PEM block with 64-column lines.
pub fn pem_wrap(label: &str, der: &[u8]) -> String {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut s = format!("-----BEGIN {label}-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        // base64 output is ASCII.
        s.push_str(std::str::from_utf8(chunk).expect("base64 is ASCII"));
        s.push('\n');
    }
    s.push_str(&format!("-----END {label}-----\n"));
    s
}

/// Extract the bytes of the first PEM block with the given label.
pub fn pem_unwrap(label: &str, text: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    let begin = format!("-----BEGIN {label}-----");
    let end = format!("-----END {label}-----");
    let start = text.find(&begin)? + begin.len();
    let stop = start + text[start..].find(&end)?;
    let b64: String = text[start..stop]
        .chars()
        .filter(|c| !c.is_whitespace())
        .collect();
    base64::engine::general_purpose::STANDARD.decode(b64).ok()
}

/// An RSA private key.
#[derive(Clone)]
pub struct RsaKeypair {
    private: RsaPrivateKey,
    public: RsaPublic,
}

impl std::fmt::Debug for RsaKeypair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RsaKeypair({:?})", self.public)
    }
}

impl RsaKeypair {
    /// Generate a key of `bits` bits with exponent 65537 (1024 for relay
    /// identity and TAP onion keys, 2048 for TLS link keys, 3072 for
    /// authority identity keys).
    pub fn generate(rng: &mut dyn CryptoRngCore, bits: usize) -> Result<Self, RsaError> {
        let private = RsaPrivateKey::new(rng, bits).map_err(|e| RsaError::Failed(e.to_string()))?;
        Ok(Self::from_private(private))
    }

    fn from_private(private: RsaPrivateKey) -> Self {
        let public = RsaPublic(private.to_public_key());
        Self { private, public }
    }

    /// Decode a PKCS#1 `RSAPrivateKey` DER structure.
    pub fn from_der(der: &[u8]) -> Result<Self, RsaError> {
        let k = RsaPrivateKey::from_pkcs1_der(der).map_err(|e| RsaError::BadKey(e.to_string()))?;
        k.validate().map_err(|e| RsaError::BadKey(e.to_string()))?;
        Ok(Self::from_private(k))
    }

    /// Decode a `-----BEGIN RSA PRIVATE KEY-----` PEM block (tor's
    /// `secret_id_key` / `secret_onion_key` files).
    pub fn from_pem(pem: &str) -> Result<Self, RsaError> {
        let der = pem_unwrap("RSA PRIVATE KEY", pem)
            .ok_or_else(|| RsaError::BadKey("no RSA PRIVATE KEY block".into()))?;
        let der = Zeroizing::new(der);
        Self::from_der(&der)
    }

    /// PKCS#1 `RSAPrivateKey` DER.
    pub fn to_der(&self) -> Zeroizing<Vec<u8>> {
        // Encoding an in-memory key cannot fail.
        Zeroizing::new(
            self.private
                .to_pkcs1_der()
                .expect("encode RSA private key")
                .as_bytes()
                .to_vec(),
        )
    }

    /// PKCS#8 `PrivateKeyInfo` DER (what rustls/ring load).
    pub fn to_pkcs8_der(&self) -> Zeroizing<Vec<u8>> {
        // Encoding an in-memory key cannot fail.
        Zeroizing::new(
            self.private
                .to_pkcs8_der()
                .expect("encode PKCS#8")
                .as_bytes()
                .to_vec(),
        )
    }

    /// `-----BEGIN RSA PRIVATE KEY-----` PEM.
    pub fn to_pem(&self) -> Zeroizing<String> {
        Zeroizing::new(pem_wrap("RSA PRIVATE KEY", &self.to_der()))
    }

    /// The public half.
    pub fn public(&self) -> &RsaPublic {
        &self.public
    }

    /// Tor-style signature: PKCS#1 v1.5 type-1 padding of `data` (a digest)
    /// without DigestInfo. `data` must be at most `k - 11` bytes.
    pub fn sign_raw(&self, data: &[u8]) -> Result<Vec<u8>, RsaError> {
        self.private
            .sign(Pkcs1v15Sign::new_unprefixed(), data)
            .map_err(|e| RsaError::Failed(e.to_string()))
    }

    /// Standard PKCS#1 v1.5 signature over SHA-256(`msg`) (X.509).
    pub fn sign_pkcs1_sha256(&self, msg: &[u8]) -> Result<Vec<u8>, RsaError> {
        let h = Sha256::digest(msg);
        self.private
            .sign(Pkcs1v15Sign::new::<Sha256>(), &h)
            .map_err(|e| RsaError::Failed(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_verify_and_encodings() {
        let mut rng = rand::rngs::OsRng;
        let k = RsaKeypair::generate(&mut rng, 1024).expect("keygen");
        assert_eq!(k.public().bits(), 1024);
        let d = Sha1::digest(b"hello");
        let sig = k.sign_raw(&d).expect("sign");
        assert_eq!(sig.len(), 128);
        k.public().verify_raw(&d, &sig).expect("verify");
        assert!(
            k.public()
                .verify_raw(&Sha1::digest(b"hellp"), &sig)
                .is_err()
        );
        let s2 = k.sign_pkcs1_sha256(b"msg").expect("sign");
        k.public().verify_pkcs1_sha256(b"msg", &s2).expect("verify");
        assert!(k.public().verify_raw(&Sha256::digest(b"msg"), &s2).is_err());
        assert_eq!(k.public().recover_raw(&sig).expect("recover"), d.to_vec());
        let mut bad = sig.clone();
        bad[5] ^= 1;
        assert!(k.public().recover_raw(&bad).is_err());
        assert!(k.public().recover_raw(&sig[1..]).is_err());

        let der = k.public().to_der();
        assert_eq!(RsaPublic::from_der(&der).expect("der"), *k.public());
        assert_eq!(
            RsaPublic::from_pem(&k.public().to_pem()).expect("pem"),
            *k.public()
        );
        let k2 = RsaKeypair::from_pem(&k.to_pem()).expect("pem");
        assert_eq!(k2.public(), k.public());
        assert_eq!(k.public().fingerprint_spaced().len(), 49);
        assert!(RsaPublic::from_der(&der[..der.len() - 1]).is_err());
    }

    #[test]
    fn spacing() {
        let fp = [0xabu8; 20];
        assert_eq!(
            spaced_fingerprint(&fp),
            "ABAB ABAB ABAB ABAB ABAB ABAB ABAB ABAB ABAB ABAB"
        );
    }
}
