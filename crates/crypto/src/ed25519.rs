//! Ed25519 key pairs as tor keeps them, and the curve25519 <-> ed25519
//! conversions used by `ntor-onion-key-crosscert` (proposal 228).
//!
//! Tor stores Ed25519 secret keys in *expanded* form (64 bytes: the clamped
//! scalar followed by the 32-byte nonce prefix), not as 32-byte seeds, and
//! the key derived from an ntor (curve25519) key only exists in that form.
//! [`Ed25519Keypair`] therefore holds the expanded key and signs with
//! ed25519-dalek's `hazmat` raw signing; the signatures are standard Ed25519.

use curve25519_dalek::montgomery::MontgomeryPoint;
use ed25519_dalek::hazmat::{ExpandedSecretKey, raw_sign};
use ed25519_dalek::{Signature, VerifyingKey};
use rand_core::CryptoRngCore;
use sha2::{Digest, Sha512};
use zeroize::Zeroizing;

/// An Ed25519 key pair held as a 64-byte expanded secret key.
pub struct Ed25519Keypair {
    expanded: Zeroizing<[u8; 64]>,
    secret: ExpandedSecretKey,
    public: VerifyingKey,
}

impl Clone for Ed25519Keypair {
    fn clone(&self) -> Self {
        Self {
            expanded: self.expanded.clone(),
            secret: ExpandedSecretKey {
                scalar: self.secret.scalar,
                hash_prefix: self.secret.hash_prefix,
            },
            public: self.public,
        }
    }
}

impl std::fmt::Debug for Ed25519Keypair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ed25519Keypair")
            .field("public", &hex::encode(self.public.as_bytes()))
            .finish_non_exhaustive()
    }
}

impl Ed25519Keypair {
    /// Generate a fresh key pair.
    pub fn generate(rng: &mut dyn CryptoRngCore) -> Self {
        let mut seed = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(&mut seed[..]);
        Self::from_seed(&seed)
    }

    /// The key pair for a standard 32-byte Ed25519 seed (RFC 8032).
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        let h = Sha512::digest(seed);
        let mut expanded = Zeroizing::new([0u8; 64]);
        expanded.copy_from_slice(&h);
        clamp(&mut expanded);
        Self::from_expanded(&expanded)
    }

    /// The key pair for a 64-byte expanded secret key (tor's on-disk form:
    /// clamped scalar || prefix). The scalar is clamped again, as tor does.
    pub fn from_expanded(expanded: &[u8; 64]) -> Self {
        let mut bytes = Zeroizing::new(*expanded);
        clamp(&mut bytes);
        let secret = ExpandedSecretKey::from_bytes(&bytes);
        let public = VerifyingKey::from(&secret);
        Self {
            expanded: bytes,
            secret,
            public,
        }
    }

    /// The key pair for a 64-byte expanded secret key whose scalar is used
    /// as it is (reduced mod the group order, not clamped): blinded
    /// onion-service keys (rend-spec-v3 A.2) are such scalars, and tor
    /// uses the scalar of an `hs_ed25519_secret_key` file unchanged too.
    pub fn from_expanded_unclamped(expanded: &[u8; 64]) -> Self {
        let bytes = Zeroizing::new(*expanded);
        let mut scalar = Zeroizing::new([0u8; 32]);
        scalar.copy_from_slice(&bytes[..32]);
        let mut hash_prefix = [0u8; 32];
        hash_prefix.copy_from_slice(&bytes[32..]);
        let secret = ExpandedSecretKey {
            scalar: curve25519_dalek::Scalar::from_bytes_mod_order(*scalar),
            hash_prefix,
        };
        let public = VerifyingKey::from(&secret);
        Self {
            expanded: bytes,
            secret,
            public,
        }
    }

    /// The 64-byte expanded secret key (secret material: handle with care).
    pub fn expanded_secret(&self) -> &[u8; 64] {
        &self.expanded
    }

    /// The public key bytes.
    pub fn public(&self) -> [u8; 32] {
        self.public.to_bytes()
    }

    /// The public key as an ed25519-dalek verifying key.
    pub fn verifying_key(&self) -> &VerifyingKey {
        &self.public
    }

    /// Sign `msg`.
    pub fn sign(&self, msg: &[u8]) -> [u8; 64] {
        raw_sign::<Sha512>(&self.secret, msg, &self.public).to_bytes()
    }
}

fn clamp(b: &mut [u8; 64]) {
    b[0] &= 248;
    b[31] &= 63;
    b[31] |= 64;
}

/// Verify an Ed25519 signature made by `public` over `msg`, strictly: a
/// small-order (weak) public key or `R`, or a non-canonical `S`, is
/// refused, so no signature verifies for more than one message under a
/// key a peer chose to be weak. Honest signatures always pass.
pub fn verify(public: &[u8; 32], msg: &[u8], sig: &[u8; 64]) -> bool {
    let Ok(vk) = VerifyingKey::from_bytes(public) else {
        return false;
    };
    vk.verify_strict(msg, &Signature::from_bytes(sig)).is_ok()
}

/// Clamp a curve25519 secret key the way tor does before storing it.
pub fn clamp_curve25519(sk: &mut [u8; 32]) {
    sk[0] &= 248;
    sk[31] &= 127;
    sk[31] |= 64;
}

/// Derive the Ed25519 key pair that tor associates with a curve25519 (ntor)
/// secret key, and the sign bit of its public key (proposal 228; C tor's
/// `ed25519_keypair_from_curve25519_keypair`): the expanded secret is the
/// clamped curve25519 secret followed by
/// `SHA512(secret | "Derive high part of ed25519 key from curve25519 key\0")[..32]`.
pub fn ed25519_from_curve25519_secret(curve_sk: &[u8; 32]) -> (Ed25519Keypair, u8) {
    const STRING: &[u8] = b"Derive high part of ed25519 key from curve25519 key\0";
    let mut sk = Zeroizing::new(*curve_sk);
    clamp_curve25519(&mut sk);
    let mut h = Sha512::new();
    h.update(&sk[..]);
    h.update(STRING);
    let digest = h.finalize();
    let mut expanded = Zeroizing::new([0u8; 64]);
    expanded[..32].copy_from_slice(&sk[..]);
    expanded[32..].copy_from_slice(&digest[..32]);
    let kp = Ed25519Keypair::from_expanded(&expanded);
    let signbit = kp.public()[31] >> 7;
    (kp, signbit)
}

/// Convert a curve25519 public key plus sign bit into the Ed25519 public key
/// (`y = (u-1)/(u+1)`), as verifiers of `ntor-onion-key-crosscert` do.
/// Returns `None` for the one u-coordinate with no Edwards image.
pub fn ed25519_from_curve25519_public(curve_pk: &[u8; 32], signbit: u8) -> Option<[u8; 32]> {
    let ed = MontgomeryPoint(*curve_pk).to_edwards(signbit & 1)?;
    Some(ed.compress().to_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unclamped_expanded_keys_sign_and_clone() {
        // A scalar with the low bits set (never produced by clamping).
        let mut e = [7u8; 64];
        e[31] = 0x05;
        let kp = Ed25519Keypair::from_expanded_unclamped(&e);
        assert_eq!(kp.expanded_secret(), &e);
        let sig = kp.sign(b"m");
        assert!(verify(&kp.public(), b"m", &sig));
        let c = kp.clone();
        assert_eq!(c.public(), kp.public());
        assert_eq!(c.expanded_secret(), &e);
        assert!(verify(&c.public(), b"m", &c.sign(b"m")));
        // Clamping changes the key.
        assert_ne!(Ed25519Keypair::from_expanded(&e).public(), kp.public());
    }

    /// The identity point as public key, R = identity and S = 0 satisfy
    /// the cofactorless equation for every message; a lenient verifier
    /// accepts it, ours must not.
    #[test]
    fn weak_keys_verify_nothing() {
        let mut identity = [0u8; 32];
        identity[0] = 1;
        let mut sig = [0u8; 64];
        sig[..32].copy_from_slice(&identity);
        let vk = VerifyingKey::from_bytes(&identity).unwrap();
        use ed25519_dalek::Verifier as _;
        assert!(
            vk.verify(b"anything", &Signature::from_bytes(&sig)).is_ok(),
            "the lenient check accepts it (the test is meaningful)"
        );
        assert!(!verify(&identity, b"anything", &sig));
        assert!(!verify(&identity, b"something else", &sig));
    }

    /// RFC 8032 section 7.1, TEST 1 and TEST 2.
    #[test]
    fn rfc8032_vectors() {
        let cases = [
            (
                "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
                "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a",
                "",
                "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b",
            ),
            (
                "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
                "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c",
                "72",
                "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00",
            ),
        ];
        for (seed, public, msg, sig) in cases {
            let seed: [u8; 32] = hex::decode(seed).expect("hex").try_into().expect("32");
            let kp = Ed25519Keypair::from_seed(&seed);
            assert_eq!(hex::encode(kp.public()), public);
            let msg = hex::decode(msg).expect("hex");
            let s = kp.sign(&msg);
            assert_eq!(hex::encode(s), sig);
            assert!(verify(&kp.public(), &msg, &s));
            let kp2 = Ed25519Keypair::from_expanded(kp.expanded_secret());
            assert_eq!(kp2.sign(&msg), s);
        }
    }

    #[test]
    fn curve_to_ed_roundtrip() {
        let mut rng = rand::rngs::OsRng;
        for _ in 0..16 {
            let secret = x25519_dalek::StaticSecret::random_from_rng(rng);
            let public = x25519_dalek::PublicKey::from(&secret);
            let (kp, signbit) = ed25519_from_curve25519_secret(&secret.to_bytes());
            let derived =
                ed25519_from_curve25519_public(public.as_bytes(), signbit).expect("on curve");
            assert_eq!(derived, kp.public());
            let sig = kp.sign(b"hello");
            assert!(verify(&derived, b"hello", &sig));
        }
        let _ = &mut rng;
    }
}
