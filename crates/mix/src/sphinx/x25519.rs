//! Profile `x25519`: the sphinxmix construction on X25519 with HKDF-SHA256,
//! AES-256-CTR, HMAC-SHA256/16 and a four-round LIONESS wide-block body
//! cipher. Not compatible with any other implementation; documented in
//! docs/loopix.md ("x25519 packet format").
//!
//! Wire form: `0xC1 || alpha (32) || gamma (16) || beta (beta_len) || body`.
//! The leading 0xC1 (a byte msgpack never uses) tells these datagrams apart
//! from msgpack control messages.
//!
//! Per hop, with `s = X25519(y, alpha)` (all-zero `s` rejected):
//! `okm = HKDF-SHA256(salt = "onionmix-sphinx-x25519-v1", ikm = s, info = alpha, L = 256)`
//! split as rho (32) | mu (32) | pi (4 x 32) | blind (32) | tau (32).
//! - rho: AES-256-CTR, zero IV; mu: HMAC-SHA256(mu, beta)[:16];
//! - beta processing as sphinxmix: `B = rho(beta || 0^(1+255+16))`,
//!   `len = B[0]`, routing `B[1..1+len]`, gamma' next 16, beta' next beta_len;
//! - `alpha' = X25519(blind, alpha)` (clamped scalar);
//! - body: LIONESS with |L| = 32: `R ^= S(L^K1); L ^= H(K2,R); R ^= S(L^K3);
//!   L ^= H(K4,R)`, S = AES-256-CTR keystream, H = HMAC-SHA256; the node
//!   applies the inverse; the sender wraps from the last hop to the first;
//! - final plaintext body: `0^16 || u8 len(dest) || dest || u16be len(msg)
//!   || msg || 0...`; the receiver checks the 16 zero bytes.

use aes::Aes256;
use aes::cipher::{KeyIvInit, StreamCipher};
use curve25519_dalek::montgomery::MontgomeryPoint;
use curve25519_dalek::scalar::Scalar;
use hkdf::Hkdf;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use super::{SphinxError, ct_eq};

type Ctr = ctr::Ctr128BE<Aes256>;

pub const K: usize = 16;
/// First byte of every x25519 packet datagram.
pub const MAGIC: u8 = 0xc1;
const SALT: &[u8] = b"onionmix-sphinx-x25519-v1";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    pub beta_len: usize,
    pub body_len: usize,
}

impl Params {
    /// Defaults: a 432-byte header and 1024-byte body, so a datagram is
    /// 1457 bytes and fits a 1500-byte MTU.
    pub const DEFAULT: Params = Params {
        beta_len: 384,
        body_len: 1024,
    };

    pub fn packet_len(&self) -> usize {
        1 + 32 + K + self.beta_len + self.body_len
    }
    fn check(&self) -> Result<(), SphinxError> {
        if self.beta_len < 64 || self.beta_len > 8192 || self.body_len < 64 || self.body_len > 65536
        {
            return Err(SphinxError::BadParams);
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub alpha: [u8; 32],
    pub gamma: [u8; K],
    pub beta: Vec<u8>,
    pub body: Vec<u8>,
}

#[derive(Clone, Debug)]
pub struct Processed {
    pub tag: [u8; K],
    pub routing: Vec<u8>,
    pub packet: Packet,
}

struct HopKeys {
    rho: [u8; 32],
    mu: [u8; 32],
    pi: [[u8; 32]; 4],
    blind: [u8; 32],
    tau: [u8; K],
}

fn hop_keys(s: &[u8; 32], alpha: &[u8; 32]) -> HopKeys {
    let hk = Hkdf::<Sha256>::new(Some(SALT), s);
    let mut okm = [0u8; 256];
    hk.expand(alpha, &mut okm)
        .expect("256 bytes is a valid HKDF-SHA256 length");
    let part = |o: usize| -> [u8; 32] { okm[o..o + 32].try_into().expect("32-byte slice") };
    let mut tau = [0u8; K];
    tau.copy_from_slice(&okm[224..240]);
    HopKeys {
        rho: part(0),
        mu: part(32),
        pi: [part(64), part(96), part(128), part(160)],
        blind: part(192),
        tau,
    }
}

fn ctr256(key: &[u8; 32], data: &mut [u8]) {
    let mut c = Ctr::new(key.into(), &[0u8; 16].into());
    c.apply_keystream(data);
}

fn hmac32(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(data);
    m.finalize().into_bytes().into()
}

fn mu(key: &[u8; 32], data: &[u8]) -> [u8; K] {
    let d = hmac32(key, data);
    d[..K].try_into().expect("16-byte slice")
}

fn xor32(a: &[u8], b: &[u8; 32]) -> [u8; 32] {
    let mut o = [0u8; 32];
    for i in 0..32 {
        o[i] = a[i] ^ b[i];
    }
    o
}

/// LIONESS encryption (|L| = 32).
pub fn lioness_enc(k: &[[u8; 32]; 4], m: &mut [u8]) {
    let (l, r) = m.split_at_mut(32);
    ctr256(&xor32(l, &k[0]), r);
    let h = hmac32(&k[1], r);
    l.iter_mut().zip(h).for_each(|(a, b)| *a ^= b);
    ctr256(&xor32(l, &k[2]), r);
    let h = hmac32(&k[3], r);
    l.iter_mut().zip(h).for_each(|(a, b)| *a ^= b);
}

/// LIONESS decryption.
pub fn lioness_dec(k: &[[u8; 32]; 4], m: &mut [u8]) {
    let (l, r) = m.split_at_mut(32);
    let h = hmac32(&k[3], r);
    l.iter_mut().zip(h).for_each(|(a, b)| *a ^= b);
    ctr256(&xor32(l, &k[2]), r);
    let h = hmac32(&k[1], r);
    l.iter_mut().zip(h).for_each(|(a, b)| *a ^= b);
    ctr256(&xor32(l, &k[0]), r);
}

fn clamp(mut b: [u8; 32]) -> [u8; 32] {
    b[0] &= 248;
    b[31] &= 127;
    b[31] |= 64;
    b
}

/// A node key pair.
#[derive(Clone)]
pub struct KeyPair {
    pub secret: [u8; 32],
    pub public: [u8; 32],
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("public", &hex::encode(self.public))
            .finish_non_exhaustive()
    }
}

impl KeyPair {
    pub fn from_secret(secret: [u8; 32]) -> KeyPair {
        let public = MontgomeryPoint::mul_base_clamped(secret).to_bytes();
        KeyPair { secret, public }
    }
    pub fn generate(rng: &mut dyn rand_core::RngCore) -> KeyPair {
        let mut s = [0u8; 32];
        rng.fill_bytes(&mut s);
        KeyPair::from_secret(s)
    }
}

/// Builds a forward packet. `path[i] = (routing entry read by hop i-1, public key of hop i)`;
/// the entry of hop 0 is not carried (as in sphinxmix).
pub fn create_forward(
    p: &Params,
    routing: &[Vec<u8>],
    keys: &[[u8; 32]],
    dest: &[u8],
    msg: &[u8],
    rng: &mut dyn rand_core::RngCore,
) -> Result<Packet, SphinxError> {
    p.check()?;
    let nu = routing.len();
    if nu == 0 || keys.len() != nu {
        return Err(SphinxError::BadPath);
    }
    let meta: Vec<Vec<u8>> = routing
        .iter()
        .map(|n| {
            if n.len() > 255 {
                return Err(SphinxError::RoutingTooLong);
            }
            let mut v = vec![n.len() as u8];
            v.extend_from_slice(n);
            Ok(v)
        })
        .collect::<Result<_, _>>()?;
    let mut x = [0u8; 32];
    rng.fill_bytes(&mut x);
    let mut c = Scalar::from_bytes_mod_order(clamp(x));
    let mut hops = Vec::with_capacity(nu);
    let mut alpha0 = [0u8; 32];
    for (i, y) in keys.iter().enumerate() {
        let alpha =
            (MontgomeryPoint(curve25519_dalek::constants::X25519_BASEPOINT.0) * c).to_bytes();
        if i == 0 {
            alpha0 = alpha;
        }
        let s = (MontgomeryPoint(*y) * c).to_bytes();
        if ct_eq(&s, &[0u8; 32]) {
            return Err(SphinxError::BadKey);
        }
        let hk = hop_keys(&s, &alpha);
        c *= Scalar::from_bytes_mod_order(clamp(hk.blind));
        hops.push(hk);
    }
    // Filler.
    let mut phi: Vec<u8> = Vec::new();
    let mut min_len = p.beta_len;
    for i in 1..nu {
        let add = K + meta[i].len();
        let mut mx = vec![0u8; min_len + phi.len() + add];
        mx[min_len..min_len + phi.len()].copy_from_slice(&phi);
        ctr256(&hops[i - 1].rho, &mut mx);
        phi = mx.split_off(min_len);
        min_len = min_len
            .checked_sub(add)
            .ok_or(SphinxError::RoutingTooLong)?;
    }
    let final_routing = [0u8]; // zero-length entry marks the destination
    let len_meta: usize = meta[1..].iter().map(Vec::len).sum();
    let used = len_meta + (nu - 1) * K + final_routing.len();
    if used > p.beta_len {
        return Err(SphinxError::RoutingTooLong);
    }
    let mut beta = vec![0u8; p.beta_len - phi.len()];
    beta[0] = final_routing[0];
    rng.fill_bytes(&mut beta[1..]);
    ctr256(&hops[nu - 1].rho, &mut beta);
    beta.extend_from_slice(&phi);
    let mut gamma = mu(&hops[nu - 1].mu, &beta);
    for i in (0..nu - 1).rev() {
        let id = &meta[i + 1];
        let keep = p.beta_len - K - id.len();
        let mut plain = Vec::with_capacity(p.beta_len);
        plain.extend_from_slice(id);
        plain.extend_from_slice(&gamma);
        plain.extend_from_slice(&beta[..keep]);
        ctr256(&hops[i].rho, &mut plain);
        beta = plain;
        gamma = mu(&hops[i].mu, &beta);
    }
    // Body.
    if dest.len() > 255 || msg.len() > 0xffff || K + 1 + dest.len() + 2 + msg.len() > p.body_len {
        return Err(SphinxError::PayloadTooLong);
    }
    let mut body = vec![0u8; p.body_len];
    let mut o = K;
    body[o] = dest.len() as u8;
    o += 1;
    body[o..o + dest.len()].copy_from_slice(dest);
    o += dest.len();
    body[o..o + 2].copy_from_slice(&(msg.len() as u16).to_be_bytes());
    o += 2;
    body[o..o + msg.len()].copy_from_slice(msg);
    for h in hops.iter().rev() {
        lioness_enc(&h.pi, &mut body);
    }
    Ok(Packet {
        alpha: alpha0,
        gamma,
        beta,
        body,
    })
}

/// One hop. An empty `routing` in the result means this node is the
/// destination: read the body with [`receive_forward`].
pub fn process(p: &Params, secret: &[u8; 32], pkt: &Packet) -> Result<Processed, SphinxError> {
    if pkt.beta.len() != p.beta_len || pkt.body.len() != p.body_len {
        return Err(SphinxError::BadLength);
    }
    let s = MontgomeryPoint(pkt.alpha).mul_clamped(*secret).to_bytes();
    if ct_eq(&s, &[0u8; 32]) {
        return Err(SphinxError::BadAlpha);
    }
    let hk = hop_keys(&s, &pkt.alpha);
    if !ct_eq(&pkt.gamma, &mu(&hk.mu, &pkt.beta)) {
        return Err(SphinxError::HeaderMac);
    }
    let mut b = vec![0u8; p.beta_len + 1 + 255 + K];
    b[..p.beta_len].copy_from_slice(&pkt.beta);
    ctr256(&hk.rho, &mut b);
    let len = usize::from(b[0]);
    let routing = b[1..1 + len].to_vec();
    let rest = &b[1 + len..];
    let gamma: [u8; K] = rest[..K].try_into().expect("16-byte slice");
    let beta = rest[K..K + p.beta_len].to_vec();
    let alpha = MontgomeryPoint(pkt.alpha).mul_clamped(hk.blind).to_bytes();
    let mut body = pkt.body.clone();
    lioness_dec(&hk.pi, &mut body);
    Ok(Processed {
        tag: hk.tau,
        routing,
        packet: Packet {
            alpha,
            gamma,
            beta,
            body,
        },
    })
}

/// Reads a delivered body: checks the zero prefix, returns (dest, msg).
pub fn receive_forward(body: &[u8]) -> Result<(Vec<u8>, Vec<u8>), SphinxError> {
    if body.len() < K + 3 {
        return Err(SphinxError::BadLength);
    }
    if !ct_eq(&body[..K], &[0u8; K]) {
        return Err(SphinxError::BodyMac);
    }
    let dl = usize::from(body[K]);
    let d0 = K + 1;
    let dest = body
        .get(d0..d0 + dl)
        .ok_or(SphinxError::Malformed)?
        .to_vec();
    let m0 = d0 + dl;
    let ml = usize::from(u16::from_be_bytes(
        body.get(m0..m0 + 2)
            .ok_or(SphinxError::Malformed)?
            .try_into()
            .expect("2-byte slice"),
    ));
    let msg = body
        .get(m0 + 2..m0 + 2 + ml)
        .ok_or(SphinxError::Malformed)?
        .to_vec();
    Ok((dest, msg))
}

impl Packet {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(1 + 32 + K + self.beta.len() + self.body.len());
        out.push(MAGIC);
        out.extend_from_slice(&self.alpha);
        out.extend_from_slice(&self.gamma);
        out.extend_from_slice(&self.beta);
        out.extend_from_slice(&self.body);
        out
    }

    pub fn decode(p: &Params, data: &[u8]) -> Result<Packet, SphinxError> {
        if data.len() != p.packet_len() {
            return Err(SphinxError::BadLength);
        }
        if data[0] != MAGIC {
            return Err(SphinxError::Malformed);
        }
        let alpha: [u8; 32] = data[1..33].try_into().expect("32-byte slice");
        let gamma: [u8; K] = data[33..33 + K].try_into().expect("16-byte slice");
        let b0 = 33 + K;
        Ok(Packet {
            alpha,
            gamma,
            beta: data[b0..b0 + p.beta_len].to_vec(),
            body: data[b0 + p.beta_len..].to_vec(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lioness_roundtrip() {
        let k = [[1u8; 32], [2; 32], [3; 32], [4; 32]];
        let m: Vec<u8> = (0..1024).map(|i| i as u8).collect();
        let mut c = m.clone();
        lioness_enc(&k, &mut c);
        assert_ne!(c, m);
        lioness_dec(&k, &mut c);
        assert_eq!(c, m);
    }

    #[test]
    fn six_hops_deliver_and_tamper_fails() {
        let p = Params::DEFAULT;
        let mut rng = rand::thread_rng();
        let nodes: Vec<KeyPair> = (0..6).map(|_| KeyPair::generate(&mut rng)).collect();
        let routing: Vec<Vec<u8>> = (0..6).map(|i| vec![i as u8; 30]).collect();
        let keys: Vec<[u8; 32]> = nodes.iter().map(|n| n.public).collect();
        let pkt = create_forward(&p, &routing, &keys, b"dest", b"hello x25519", &mut rng)
            .expect("create");
        let wire = pkt.encode();
        assert_eq!(wire.len(), p.packet_len());
        let mut cur = Packet::decode(&p, &wire).expect("decode");
        for (i, n) in nodes.iter().enumerate() {
            let out = process(&p, &n.secret, &cur).expect("process");
            if i < 5 {
                assert_eq!(out.routing, routing[i + 1]);
            } else {
                assert!(out.routing.is_empty());
                let (d, m) = receive_forward(&out.packet.body).expect("body");
                assert_eq!(d, b"dest");
                assert_eq!(m, b"hello x25519");
            }
            cur = out.packet;
        }
        // tampered body is detected at the end
        let mut bad = Packet::decode(&p, &wire).expect("decode");
        bad.body[500] ^= 1;
        let mut cur = bad;
        for n in &nodes {
            cur = process(&p, &n.secret, &cur).expect("header intact").packet;
        }
        assert_eq!(receive_forward(&cur.body).err(), Some(SphinxError::BodyMac));
        // tampered header fails the MAC at hop 0
        let mut bad = Packet::decode(&p, &wire).expect("decode");
        bad.beta[3] ^= 1;
        assert_eq!(
            process(&p, &nodes[0].secret, &bad).err(),
            Some(SphinxError::HeaderMac)
        );
        // low-order alpha is refused
        let mut bad = Packet::decode(&p, &wire).expect("decode");
        bad.alpha = [0u8; 32];
        assert_eq!(
            process(&p, &nodes[0].secret, &bad).err(),
            Some(SphinxError::BadAlpha)
        );
    }
}
