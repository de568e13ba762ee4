//! hs-ntor (rend-spec-v3 §5.1 "[NTOR-WITH-EXTRA-DATA]"): the handshake
//! whose first message travels in INTRODUCE1/2 and whose answer travels in
//! RENDEZVOUS1/2.
//!
//! * Introduction: from `EXP(B,x) | AUTH_KEY | X | B | PROTOID`, `SHAKE-256`
//!   gives `ENC_KEY` (AES-256-CTR, zero IV, for the encrypted section of
//!   INTRODUCE1) and `MAC_KEY` (the section's MAC,
//!   `SHA3-256(INT_8(len(key)) | key | msg)`, see [`hs_mac`]).
//! * Rendezvous: the service answers with `Y` and
//!   `AUTH = MAC(verify | AUTH_KEY | B | Y | X | PROTOID | "Server", t_hsmac)`;
//!   both sides expand `NTOR_KEY_SEED | m_hsexpand` with SHAKE-256 to the
//!   128 bytes of [`HsCircuitKeys`] for the virtual hop
//!   (`onionmix_crypto::relay_crypto_hs`).
//!
//! `B` is the service's per-introduction-point x25519 key (`KP_hss_ntor`,
//! the descriptor's `enc-key ntor`), `AUTH_KEY` the introduction point
//! authentication key (`KP_hs_ipt_sid`). An all-zero Diffie-Hellman output
//! is refused, as tor does.

use aes::Aes256;
use cipher::{KeyIvInit, StreamCipher};
use digest::{ExtendableOutput, Update, XofReader};
use onionmix_crypto::HsCircuitKeys;
use rand_core::CryptoRngCore;
use sha3::{Digest, Sha3_256, Shake256};
use subtle::ConstantTimeEq;
use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::{Zeroize, Zeroizing};

/// `PROTOID`.
pub const PROTOID: &[u8] = b"tor-hs-ntor-curve25519-sha3-256-1";
const T_HSENC: &[u8] = b"tor-hs-ntor-curve25519-sha3-256-1:hs_key_extract";
const T_HSVERIFY: &[u8] = b"tor-hs-ntor-curve25519-sha3-256-1:hs_verify";
const T_HSMAC: &[u8] = b"tor-hs-ntor-curve25519-sha3-256-1:hs_mac";
const M_HSEXPAND: &[u8] = b"tor-hs-ntor-curve25519-sha3-256-1:hs_key_expand";

type Aes256Ctr = ctr::Ctr128BE<Aes256>;

/// hs-ntor failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HsNtorError {
    /// A Diffie-Hellman output was all zeros (a small-order peer key).
    #[error("degenerate Diffie-Hellman key")]
    ZeroSharedSecret,
    /// RENDEZVOUS2's AUTH did not match.
    #[error("rendezvous AUTH does not verify")]
    BadAuth,
}

/// The onion-service MAC: `SHA3-256(INT_8(len(key)) | key | msg)`.
pub fn hs_mac(key: &[u8], msg: &[u8]) -> [u8; 32] {
    let mut h = Sha3_256::new();
    Digest::update(&mut h, (key.len() as u64).to_be_bytes());
    Digest::update(&mut h, key);
    Digest::update(&mut h, msg);
    h.finalize().into()
}

/// The keys protecting INTRODUCE1's encrypted section.
pub struct IntroKeys {
    /// AES-256-CTR key for the encrypted data.
    pub enc_key: [u8; 32],
    /// MAC key for the cell.
    pub mac_key: [u8; 32],
}

impl Drop for IntroKeys {
    fn drop(&mut self) {
        self.enc_key.zeroize();
        self.mac_key.zeroize();
    }
}

impl IntroKeys {
    /// En- or decrypt the encrypted data in place (AES-256-CTR, zero IV).
    pub fn crypt(&self, data: &mut [u8]) {
        Aes256Ctr::new((&self.enc_key).into(), &[0u8; 16].into()).apply_keystream(data);
    }

    /// The MAC over `msg` (the INTRODUCE1 cell up to and including the
    /// encrypted data).
    pub fn mac(&self, msg: &[u8]) -> [u8; 32] {
        hs_mac(&self.mac_key, msg)
    }

    /// Check a received MAC in constant time.
    pub fn check_mac(&self, msg: &[u8], mac: &[u8; 32]) -> bool {
        bool::from(self.mac(msg).ct_eq(mac))
    }
}

fn dh(secret: &StaticSecret, public: &[u8; 32]) -> Result<Zeroizing<[u8; 32]>, HsNtorError> {
    let s = Zeroizing::new(secret.diffie_hellman(&PublicKey::from(*public)).to_bytes());
    if bool::from(s.ct_eq(&[0u8; 32])) {
        return Err(HsNtorError::ZeroSharedSecret);
    }
    Ok(s)
}

fn intro_keys(
    exp: &[u8; 32],
    auth_key: &[u8; 32],
    x_pub: &[u8; 32],
    b_pub: &[u8; 32],
    subcredential: &[u8; 32],
) -> IntroKeys {
    let mut shake = Shake256::default();
    for part in [
        &exp[..],
        auth_key,
        x_pub,
        b_pub,
        PROTOID,
        T_HSENC,
        M_HSEXPAND,
        subcredential,
    ] {
        shake.update(part);
    }
    let mut out = Zeroizing::new([0u8; 64]);
    shake.finalize_xof().read(&mut out[..]);
    let mut k = IntroKeys {
        enc_key: [0; 32],
        mac_key: [0; 32],
    };
    k.enc_key.copy_from_slice(&out[..32]);
    k.mac_key.copy_from_slice(&out[32..]);
    k
}

/// `NTOR_KEY_SEED` and `AUTH_INPUT_MAC` from the rendezvous secret input.
fn rend_outputs(
    xy: &[u8; 32],
    xb: &[u8; 32],
    auth_key: &[u8; 32],
    b_pub: &[u8; 32],
    x_pub: &[u8; 32],
    y_pub: &[u8; 32],
) -> (HsCircuitKeys, [u8; 32]) {
    let mut input = Zeroizing::new(Vec::with_capacity(32 * 6 + PROTOID.len()));
    for part in [&xy[..], xb, auth_key, b_pub, x_pub, y_pub, PROTOID] {
        input.extend_from_slice(part);
    }
    let seed = Zeroizing::new(hs_mac(&input, T_HSENC));
    let verify = hs_mac(&input, T_HSVERIFY);
    let mut auth_input = Vec::with_capacity(32 * 5 + PROTOID.len() + 6);
    for part in [
        &verify[..],
        auth_key,
        b_pub,
        y_pub,
        x_pub,
        PROTOID,
        b"Server",
    ] {
        auth_input.extend_from_slice(part);
    }
    let auth = hs_mac(&auth_input, T_HSMAC);
    let mut shake = Shake256::default();
    shake.update(&seed[..]);
    shake.update(M_HSEXPAND);
    let mut m = Zeroizing::new([0u8; 128]);
    shake.finalize_xof().read(&mut m[..]);
    (HsCircuitKeys::from_bytes(&m), auth)
}

/// The client's half of hs-ntor for one introduction attempt.
pub struct HsNtorClient {
    x: StaticSecret,
    x_pub: [u8; 32],
    b_pub: [u8; 32],
    auth_key: [u8; 32],
    subcredential: [u8; 32],
}

impl std::fmt::Debug for HsNtorClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HsNtorClient { .. }")
    }
}

impl HsNtorClient {
    /// Start: a fresh ephemeral key for the introduction point whose
    /// descriptor entry gave `enc_key` (`B`) and `auth_key`.
    pub fn new(
        rng: &mut dyn CryptoRngCore,
        enc_key: &[u8; 32],
        auth_key: &[u8; 32],
        subcredential: &[u8; 32],
    ) -> Self {
        let mut x = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(&mut x[..]);
        Self::from_secret(*x, enc_key, auth_key, subcredential)
    }

    /// Start with a given ephemeral secret (test vectors).
    pub fn from_secret(
        x: [u8; 32],
        enc_key: &[u8; 32],
        auth_key: &[u8; 32],
        subcredential: &[u8; 32],
    ) -> Self {
        let x = StaticSecret::from(x);
        let x_pub = PublicKey::from(&x).to_bytes();
        Self {
            x,
            x_pub,
            b_pub: *enc_key,
            auth_key: *auth_key,
            subcredential: *subcredential,
        }
    }

    /// `CLIENT_PK` (`X`), sent in INTRODUCE1's encrypted section.
    pub fn client_pk(&self) -> [u8; 32] {
        self.x_pub
    }

    /// The INTRODUCE1 encryption and MAC keys.
    pub fn intro_keys(&self) -> Result<IntroKeys, HsNtorError> {
        let xb = dh(&self.x, &self.b_pub)?;
        Ok(intro_keys(
            &xb,
            &self.auth_key,
            &self.x_pub,
            &self.b_pub,
            &self.subcredential,
        ))
    }

    /// Finish with RENDEZVOUS2's `SERVER_PK` (`Y`) and `AUTH`: the virtual
    /// hop's keys, if AUTH verifies.
    pub fn finish(
        &self,
        server_pk: &[u8; 32],
        auth: &[u8; 32],
    ) -> Result<HsCircuitKeys, HsNtorError> {
        let xy = dh(&self.x, server_pk)?;
        let xb = dh(&self.x, &self.b_pub)?;
        let (keys, want) = rend_outputs(
            &xy,
            &xb,
            &self.auth_key,
            &self.b_pub,
            &self.x_pub,
            server_pk,
        );
        if bool::from(want.ct_eq(auth)) {
            Ok(keys)
        } else {
            Err(HsNtorError::BadAuth)
        }
    }
}

/// The service's side, for the introduction point whose x25519 key pair is
/// `enc_secret` (`b`) and authentication key `auth_key`.
pub struct HsNtorService<'a> {
    b: &'a StaticSecret,
    b_pub: [u8; 32],
    auth_key: [u8; 32],
    subcredential: [u8; 32],
}

impl<'a> HsNtorService<'a> {
    /// The service's view of one introduction point.
    pub fn new(
        enc_secret: &'a StaticSecret,
        auth_key: &[u8; 32],
        subcredential: &[u8; 32],
    ) -> Self {
        Self {
            b: enc_secret,
            b_pub: PublicKey::from(enc_secret).to_bytes(),
            auth_key: *auth_key,
            subcredential: *subcredential,
        }
    }

    /// The INTRODUCE2 decryption and MAC keys for `client_pk` (`X`).
    pub fn intro_keys(&self, client_pk: &[u8; 32]) -> Result<IntroKeys, HsNtorError> {
        let xb = dh(self.b, client_pk)?;
        Ok(intro_keys(
            &xb,
            &self.auth_key,
            client_pk,
            &self.b_pub,
            &self.subcredential,
        ))
    }

    /// Answer: a fresh `Y`; returns `(SERVER_PK, AUTH, keys)` for
    /// RENDEZVOUS1 and the virtual hop.
    pub fn rendezvous(
        &self,
        rng: &mut dyn CryptoRngCore,
        client_pk: &[u8; 32],
    ) -> Result<([u8; 32], [u8; 32], HsCircuitKeys), HsNtorError> {
        let mut y = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(&mut y[..]);
        self.rendezvous_with(*y, client_pk)
    }

    /// As [`HsNtorService::rendezvous`] with a given ephemeral secret.
    pub fn rendezvous_with(
        &self,
        y: [u8; 32],
        client_pk: &[u8; 32],
    ) -> Result<([u8; 32], [u8; 32], HsCircuitKeys), HsNtorError> {
        let y = StaticSecret::from(y);
        let y_pub = PublicKey::from(&y).to_bytes();
        let xy = dh(&y, client_pk)?;
        let xb = dh(self.b, client_pk)?;
        let (keys, auth) = rend_outputs(&xy, &xb, &self.auth_key, &self.b_pub, client_pk, &y_pub);
        Ok((y_pub, auth, keys))
    }
}

#[cfg(test)]
mod tests;
