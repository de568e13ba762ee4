//! Profile `sphinxmix`: byte-compatible with PyPI `sphinxmix` 0.0.7 on
//! Python 3 (petlib 0.0.45, msgpack-python 0.5.6), NIST P-224.
//!
//! Format summary (see docs/loopix.md for the full description):
//! - `aes_s = SHA256("aes_key:" || uncompressed(s))[:16]`, `s = x * alpha`;
//! - subkeys `h*(aes_s) = AES-128_aes_s(label)` with the 16-byte labels
//!   `hbhb...`, `hrho...`, `hmu:...`, `hpi:...`, `htau...`;
//! - rho = AES-128-CTR (zero IV, 128-bit big-endian counter);
//! - mu = HMAC-SHA256 truncated to 16 bytes, over beta only;
//! - pi = a single-key four-round LIONESS built from AES-CTR and SHA-256;
//! - blinding `alpha' = hb(aes_s) * alpha` with `hb` read as an unsigned
//!   big-endian integer mod n;
//! - routing entries `int8(len) || entry`, final entry `encode((Dest_flag,))`;
//! - body `mu(hpi_last, payload) || payload`, payload =
//!   `encode((dest, msg)) || 7f || ff...`, wrapped by pi with every hop's
//!   hpi key from last to first.

use aes::Aes128;
use aes::cipher::{BlockEncrypt, KeyInit, KeyIvInit, StreamCipher};
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

use super::msgpack::{self, Value};
use super::p224::{Point, Scalar, ScalarBytes, scalar_from_be_mod_n};
use super::{SphinxError, ct_eq};

type Ctr = ctr::Ctr128BE<Aes128>;

/// Security parameter (bytes).
pub const K: usize = 16;

/// `Relay_flag`, `Dest_flag`, `Surb_flag` as Python 3 writes them
/// (one-character str, UTF-8 encoded).
pub const RELAY_FLAG: u8 = 0xf0;
pub const DEST_FLAG: u8 = 0xf1;
pub const SURB_FLAG: u8 = 0xf2;

/// msgpack value of a routing flag as Python 3 encodes it.
pub fn flag_value(flag: u8) -> Value {
    let c = char::from(flag);
    let mut s = String::new();
    s.push(c);
    Value::Str(s.into_bytes())
}

/// Reads a routing flag written by Python 3 (a one-character UTF-8 str,
/// `a2 c3 b0`) or Python 2 (one byte of bin, `c4 01 f0`).
pub fn flag_of(v: &Value) -> Option<u8> {
    match v {
        Value::Str(s) => {
            let st = std::str::from_utf8(s).ok()?;
            let mut it = st.chars();
            let c = it.next()?;
            if it.next().is_some() {
                return None;
            }
            u8::try_from(u32::from(c)).ok()
        }
        Value::Bin(b) if b.len() == 1 => Some(b[0]),
        _ => None,
    }
}

/// Header and body lengths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Params {
    /// `header_len` (sphinxmix `max_len`); beta is `header_len - 32` bytes.
    pub header_len: usize,
    /// `body_len` (sphinxmix `m`).
    pub body_len: usize,
}

impl Params {
    /// The library default (header 192, body 1024).
    pub const DEFAULT: Params = Params {
        header_len: 192,
        body_len: 1024,
    };
    /// Loopix: header 1024, body 1024.
    pub const LOOPIX: Params = Params {
        header_len: 1024,
        body_len: 1024,
    };

    pub fn beta_len(&self) -> usize {
        self.header_len - 32
    }

    fn check(&self) -> Result<(), SphinxError> {
        if self.header_len < 64
            || self.header_len > 65536
            || self.body_len < 2 * K + 2
            || self.body_len > 65536
        {
            return Err(SphinxError::BadParams);
        }
        Ok(())
    }
}

/// A Sphinx header `(alpha, beta, gamma)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    pub alpha: Point,
    pub beta: Vec<u8>,
    pub gamma: [u8; K],
}

/// A full packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    pub header: Header,
    pub body: Vec<u8>,
}

/// Result of processing a packet at a node.
#[derive(Clone, Debug)]
pub struct Processed {
    /// Replay tag `htau(aes_s)`.
    pub tag: [u8; K],
    /// The routing entry for this node (msgpack bytes).
    pub routing: Vec<u8>,
    /// The packet to pass on.
    pub packet: Packet,
    /// `hpi(aes_s)`: the key that checks the body MAC at the final hop.
    pub mac_key: [u8; K],
}

// ---------------------------------------------------------------- primitives

/// `SHA256("aes_key:" || uncompressed(s))[:16]`.
pub fn aes_key(s: &Point) -> [u8; K] {
    let mut h = Sha256::new();
    h.update(b"aes_key:");
    h.update(s.to_uncompressed());
    let d = h.finalize();
    let mut out = [0u8; K];
    out.copy_from_slice(&d[..K]);
    out
}

/// `derive_key(k, flavor)` = AES-128-CTR(k, IV=flavor)(0^16) = AES_k(flavor).
pub fn derive_key(k: &[u8; K], flavor: &[u8; K]) -> [u8; K] {
    let c = Aes128::new(k.into());
    let mut b = (*flavor).into();
    c.encrypt_block(&mut b);
    b.into()
}

/// The five per-hop subkeys.
#[derive(Clone, Copy, Debug)]
pub struct HopKeys {
    pub aes: [u8; K],
    pub hrho: [u8; K],
    pub hmu: [u8; K],
    pub hpi: [u8; K],
    pub htau: [u8; K],
    pub hb: [u8; K],
}

impl HopKeys {
    pub fn new(aes: [u8; K]) -> HopKeys {
        // One key schedule for all five derivations.
        let c = Aes128::new((&aes).into());
        let d = |label: &[u8; K]| -> [u8; K] {
            let mut b = (*label).into();
            c.encrypt_block(&mut b);
            b.into()
        };
        HopKeys {
            aes,
            hrho: d(b"hrhohrhohrhohrho"),
            hmu: d(b"hmu:hmu:hmu:hmu:"),
            hpi: d(b"hpi:hpi:hpi:hpi:"),
            htau: d(b"htauhtauhtauhtau"),
            hb: d(b"hbhbhbhbhbhbhbhb"),
        }
    }
}

/// XOR `data` with AES-128-CTR(key, iv).
pub fn aes_ctr(key: &[u8; K], iv: &[u8; K], data: &mut [u8]) {
    let mut c = Ctr::new(key.into(), iv.into());
    c.apply_keystream(data);
}

/// rho: AES-128-CTR with a zero IV.
pub fn xor_rho(key: &[u8; K], data: &mut [u8]) {
    aes_ctr(key, &[0u8; K], data);
}

/// mu: HMAC-SHA256 truncated to 16 bytes.
pub fn mu(key: &[u8; K], data: &[u8]) -> [u8; K] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    m.update(data);
    let d = m.finalize().into_bytes();
    let mut out = [0u8; K];
    out.copy_from_slice(&d[..K]);
    out
}

fn lioness_round_key(r: &[u8], key: &[u8; K], label: u8) -> [u8; K] {
    let mut h = Sha256::new();
    h.update(r);
    h.update(key);
    h.update([label]);
    let d = h.finalize();
    let mut out = [0u8; K];
    out.copy_from_slice(&d[..K]);
    out
}

/// pi: sphinxmix's single-key LIONESS, encryption direction.
pub fn lioness_enc(key: &[u8; K], m: &mut [u8]) {
    let (l, r) = m.split_at_mut(K);
    let l: &mut [u8; K] = l.try_into().expect("split at K");
    let k1 = lioness_round_key(r, key, b'1');
    aes_ctr(key, &k1, l);
    aes_ctr(key, l, r);
    let k3 = lioness_round_key(r, key, b'3');
    aes_ctr(key, &k3, l);
    aes_ctr(key, l, r);
}

/// pi inverse.
pub fn lioness_dec(key: &[u8; K], m: &mut [u8]) {
    let (l, r) = m.split_at_mut(K);
    let l: &mut [u8; K] = l.try_into().expect("split at K");
    aes_ctr(key, l, r);
    let k3 = lioness_round_key(r, key, b'3');
    aes_ctr(key, &k3, l);
    aes_ctr(key, l, r);
    let k1 = lioness_round_key(r, key, b'1');
    aes_ctr(key, &k1, l);
}

/// `pad_body(size, body)`: body || 7f || ff...
pub fn pad_body(size: usize, body: &[u8]) -> Result<Vec<u8>, SphinxError> {
    if body.len() + 1 > size {
        return Err(SphinxError::PayloadTooLong);
    }
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(body);
    out.push(0x7f);
    out.resize(size, 0xff);
    Ok(out)
}

/// `unpad_body`: strips the ff fill and the 7f marker (empty when absent).
pub fn unpad_body(body: &[u8]) -> &[u8] {
    if body.is_empty() {
        return body;
    }
    let mut l = body.len() - 1;
    while body[l] == 0xff && l > 0 {
        l -= 1;
    }
    if body[l] == 0x7f { &body[..l] } else { &[] }
}

// ---------------------------------------------------------------- client

/// Encodes a routing entry `Route_pack((Relay_flag, info))` (sphinxmix `Nenc`).
pub fn nenc(info: Value) -> Vec<u8> {
    Value::Array(vec![flag_value(RELAY_FLAG), info]).encode()
}

fn meta(n: &[u8]) -> Result<Vec<u8>, SphinxError> {
    // pack("b", len): a signed byte, so entries must be shorter than 128.
    if n.len() > 127 {
        return Err(SphinxError::RoutingTooLong);
    }
    let mut v = Vec::with_capacity(n.len() + 1);
    v.push(n.len() as u8);
    v.extend_from_slice(n);
    Ok(v)
}

/// `create_header`. `x` is the sender's ephemeral secret (`gensecret()`),
/// `pad` fills the random padding of the last routing block (`urandom`).
/// Returns the header and every hop's `aes_s`.
pub fn create_header(
    p: &Params,
    nodelist: &[Vec<u8>],
    keys: &[Point],
    dest: &[u8],
    x: &Scalar,
    pad: &mut dyn FnMut(&mut [u8]),
) -> Result<(Header, Vec<[u8; K]>), SphinxError> {
    p.check()?;
    let nu = nodelist.len();
    if nu == 0 || keys.len() != nu {
        return Err(SphinxError::BadPath);
    }
    let node_meta: Vec<Vec<u8>> = nodelist.iter().map(|n| meta(n)).collect::<Result<_, _>>()?;
    let beta_len = p.beta_len();

    let mut blind = *x;
    let mut hops: Vec<HopKeys> = Vec::with_capacity(nu);
    let mut alpha0 = None;
    for (i, y) in keys.iter().enumerate() {
        let bb = blind.be28();
        if i == 0 {
            alpha0 = Some(Point::generator().mul(&bb).ok_or(SphinxError::BadPath)?);
        }
        let s = y.mul(&bb).ok_or(SphinxError::BadPath)?;
        let hk = HopKeys::new(aes_key(&s));
        blind *= scalar_from_be_mod_n(&hk.hb);
        hops.push(hk);
    }
    let alpha0 = alpha0.ok_or(SphinxError::BadPath)?;

    // Filler.
    let mut phi: Vec<u8> = Vec::new();
    let mut min_len = beta_len;
    for i in 1..nu {
        let add = K + node_meta[i].len();
        let mut mx = vec![0u8; min_len + phi.len() + add];
        mx[min_len..min_len + phi.len()].copy_from_slice(&phi);
        xor_rho(&hops[i - 1].hrho, &mut mx);
        phi = mx.split_off(min_len);
        min_len = min_len
            .checked_sub(add)
            .ok_or(SphinxError::RoutingTooLong)?;
    }

    let final_routing = meta(dest)?;
    let len_meta: usize = node_meta[1..].iter().map(Vec::len).sum();
    let used = len_meta + (nu - 1) * K + final_routing.len();
    if used > beta_len {
        return Err(SphinxError::RoutingTooLong);
    }
    let random_pad_len = beta_len - used;
    let mut beta = Vec::with_capacity(beta_len);
    beta.extend_from_slice(&final_routing);
    let start = beta.len();
    beta.resize(start + random_pad_len, 0);
    pad(&mut beta[start..]);
    xor_rho(&hops[nu - 1].hrho, &mut beta);
    beta.extend_from_slice(&phi);
    let mut gamma = mu(&hops[nu - 1].hmu, &beta);

    for i in (0..nu - 1).rev() {
        let node_id = &node_meta[i + 1];
        let plain_beta_len = beta_len - K - node_id.len();
        let mut plain = Vec::with_capacity(beta_len);
        plain.extend_from_slice(node_id);
        plain.extend_from_slice(&gamma);
        plain.extend_from_slice(&beta[..plain_beta_len]);
        xor_rho(&hops[i].hrho, &mut plain);
        beta = plain;
        gamma = mu(&hops[i].hmu, &beta);
    }
    Ok((
        Header {
            alpha: alpha0,
            beta,
            gamma,
        },
        hops.iter().map(|h| h.aes).collect(),
    ))
}

/// `create_forward_message`: dest is any msgpack value (Loopix uses
/// `(host, port, name)`), msg is sent as bin.
pub fn create_forward_message(
    p: &Params,
    nodelist: &[Vec<u8>],
    keys: &[Point],
    dest: &Value,
    msg: &[u8],
    x: &Scalar,
    pad: &mut dyn FnMut(&mut [u8]),
) -> Result<Packet, SphinxError> {
    let final_routing = Value::Array(vec![flag_value(DEST_FLAG)]).encode();
    let (header, secrets) = create_header(p, nodelist, keys, &final_routing, x, pad)?;
    let inner = Value::Array(vec![dest.clone(), Value::Bin(msg.to_vec())]).encode();
    let body = wrap_body(p, &secrets, &inner)?;
    Ok(Packet { header, body })
}

fn wrap_body(p: &Params, secrets: &[[u8; K]], inner: &[u8]) -> Result<Vec<u8>, SphinxError> {
    let payload = pad_body(p.body_len - K, inner)?;
    let last = HopKeys::new(*secrets.last().ok_or(SphinxError::BadPath)?);
    let mut body = Vec::with_capacity(p.body_len);
    body.extend_from_slice(&mu(&last.hpi, &payload));
    body.extend_from_slice(&payload);
    for s in secrets.iter().rev() {
        let hk = HopKeys::new(*s);
        lioness_enc(&hk.hpi, &mut body);
    }
    Ok(body)
}

/// A single-use reply block as `create_surb` returns it.
#[derive(Clone, Debug)]
pub struct Surb {
    pub xid: [u8; K],
    /// `[ktilde] + [hpi(s_i)]`: kept by the creator to read the reply.
    pub keytuple: Vec<[u8; K]>,
    /// `nymtuple = (first node routing entry, header, ktilde)`: given away.
    pub first_node: Vec<u8>,
    pub header: Header,
    pub ktilde: [u8; K],
}

/// `create_surb`; `rand16` supplies xid then ktilde (sphinxmix's urandom
/// calls in order).
pub fn create_surb(
    p: &Params,
    nodelist: &[Vec<u8>],
    keys: &[Point],
    dest: &Value,
    x: &Scalar,
    pad: &mut dyn FnMut(&mut [u8]),
) -> Result<Surb, SphinxError> {
    let mut xid = [0u8; K];
    pad(&mut xid);
    let final_routing = Value::Array(vec![
        flag_value(SURB_FLAG),
        dest.clone(),
        Value::Bin(xid.to_vec()),
    ])
    .encode();
    let (header, secrets) = create_header(p, nodelist, keys, &final_routing, x, pad)?;
    let mut ktilde = [0u8; K];
    pad(&mut ktilde);
    let mut keytuple = vec![ktilde];
    keytuple.extend(secrets.iter().map(|s| HopKeys::new(*s).hpi));
    Ok(Surb {
        xid,
        keytuple,
        first_node: nodelist[0].clone(),
        header,
        ktilde,
    })
}

/// `package_surb`: the body a replier sends with a SURB header.
pub fn package_surb(
    p: &Params,
    header: &Header,
    ktilde: &[u8; K],
    message: &[u8],
) -> Result<Packet, SphinxError> {
    let payload = pad_body(p.body_len - K, message)?;
    let mut body = Vec::with_capacity(p.body_len);
    body.extend_from_slice(&mu(ktilde, &payload));
    body.extend_from_slice(&payload);
    lioness_enc(ktilde, &mut body);
    Ok(Packet {
        header: header.clone(),
        body,
    })
}

/// `receive_surb`: reads a reply with the stored keytuple.
pub fn receive_surb(p: &Params, keytuple: &[[u8; K]], body: &[u8]) -> Result<Vec<u8>, SphinxError> {
    if body.len() != p.body_len || keytuple.is_empty() {
        return Err(SphinxError::BadLength);
    }
    let mut d = body.to_vec();
    for k in keytuple[1..].iter().rev() {
        lioness_enc(k, &mut d);
    }
    lioness_dec(&keytuple[0], &mut d);
    if !ct_eq(&d[..K], &mu(&keytuple[0], &d[K..])) {
        return Err(SphinxError::BodyMac);
    }
    Ok(unpad_body(&d[K..]).to_vec())
}

/// `receive_forward`: checks the body MAC and returns the decoded
/// `(dest, msg)` msgpack value.
pub fn receive_forward(mac_key: &[u8; K], body: &[u8]) -> Result<Value, SphinxError> {
    if body.len() < K {
        return Err(SphinxError::BadLength);
    }
    if !ct_eq(&body[..K], &mu(mac_key, &body[K..])) {
        return Err(SphinxError::BodyMac);
    }
    Value::decode(unpad_body(&body[K..])).map_err(SphinxError::Msgpack)
}

// ---------------------------------------------------------------- node

/// `sphinx_process`: one hop. `secret` is the node's private scalar (as
/// 28 big-endian bytes).
pub fn process(
    p: &Params,
    secret: &[u8; 28],
    header: &Header,
    body: &[u8],
) -> Result<Processed, SphinxError> {
    let beta_len = p.beta_len();
    if header.beta.len() != beta_len || body.len() != p.body_len {
        return Err(SphinxError::BadLength);
    }
    // Both scalars are secret (the node key; the blinding factor links
    // alpha to alpha'): one constant-time table for both multiplications.
    let base = header.alpha.ct_base().ok_or(SphinxError::BadAlpha)?;
    let s = base.mul(secret).ok_or(SphinxError::BadAlpha)?;
    let hk = HopKeys::new(aes_key(&s));
    if !ct_eq(&header.gamma, &mu(&hk.hmu, &header.beta)) {
        return Err(SphinxError::HeaderMac);
    }
    // B = rho(beta || zeros); only the prefix we read is materialised.
    let mut b = vec![0u8; beta_len + 1 + 255 + K];
    b[..beta_len].copy_from_slice(&header.beta);
    // Decrypt the first byte to learn the length, then the rest.
    xor_rho(&hk.hrho, &mut b);
    let length = usize::from(b[0]);
    let routing = b[1..1 + length].to_vec();
    let rest = &b[1 + length..];
    let mut gamma = [0u8; K];
    gamma.copy_from_slice(&rest[..K]);
    let beta = rest[K..K + beta_len].to_vec();
    let alpha = base.mul(&hk.hb).ok_or(SphinxError::BadAlpha)?;
    let mut delta = body.to_vec();
    lioness_dec(&hk.hpi, &mut delta);
    Ok(Processed {
        tag: hk.htau,
        routing,
        packet: Packet {
            header: Header { alpha, beta, gamma },
            body: delta,
        },
        mac_key: hk.hpi,
    })
}

// ---------------------------------------------------------------- wire

impl Header {
    pub fn to_value(&self) -> Value {
        Value::Array(vec![
            msgpack::ecpt_value(&self.alpha.to_compressed()),
            Value::Bin(self.beta.clone()),
            Value::Bin(self.gamma.to_vec()),
        ])
    }

    pub fn from_value(v: &Value) -> Result<Header, SphinxError> {
        let a = v.as_array().ok_or(SphinxError::Malformed)?;
        if a.len() != 3 {
            return Err(SphinxError::Malformed);
        }
        let pt = msgpack::ecpt_bytes(&a[0]).ok_or(SphinxError::Malformed)?;
        let alpha = Point::from_sec1(pt).ok_or(SphinxError::BadAlpha)?;
        // beta and gamma must be bin: the reference cannot process a str.
        let beta = a[1].as_bin().ok_or(SphinxError::Malformed)?.to_vec();
        let g = a[2].as_bin().ok_or(SphinxError::Malformed)?;
        let gamma: [u8; K] = g.try_into().map_err(|_| SphinxError::BadLength)?;
        Ok(Header { alpha, beta, gamma })
    }
}

impl Packet {
    /// Loopix wire form: `petlib.pack.encode((header, body))`.
    pub fn encode(&self) -> Vec<u8> {
        Value::Array(vec![self.header.to_value(), Value::Bin(self.body.clone())]).encode()
    }

    pub fn from_value(v: &Value) -> Result<Packet, SphinxError> {
        let a = v.as_array().ok_or(SphinxError::Malformed)?;
        if a.len() != 2 {
            return Err(SphinxError::Malformed);
        }
        let header = Header::from_value(&a[0])?;
        let body = a[1].as_bin().ok_or(SphinxError::Malformed)?.to_vec();
        Ok(Packet { header, body })
    }

    pub fn decode(data: &[u8]) -> Result<Packet, SphinxError> {
        Packet::from_value(&Value::decode(data).map_err(SphinxError::Msgpack)?)
    }

    /// `pack_message`: `encode(((header_len, body_len), (header, body)))`.
    pub fn pack_message(&self, p: &Params) -> Vec<u8> {
        Value::Array(vec![
            Value::Array(vec![
                Value::Int(p.header_len as i128),
                Value::Int(p.body_len as i128),
            ]),
            Value::Array(vec![self.header.to_value(), Value::Bin(self.body.clone())]),
        ])
        .encode()
    }

    /// `unpack_message`: returns the params prefix and the packet.
    pub fn unpack_message(data: &[u8]) -> Result<(Params, Packet), SphinxError> {
        let v = Value::decode(data).map_err(SphinxError::Msgpack)?;
        let a = v.as_array().ok_or(SphinxError::Malformed)?;
        if a.len() != 2 {
            return Err(SphinxError::Malformed);
        }
        let lens = a[0].as_array().ok_or(SphinxError::Malformed)?;
        if lens.len() != 2 {
            return Err(SphinxError::Malformed);
        }
        let hl = usize::try_from(lens[0].as_int().ok_or(SphinxError::Malformed)?)
            .map_err(|_| SphinxError::BadParams)?;
        let bl = usize::try_from(lens[1].as_int().ok_or(SphinxError::Malformed)?)
            .map_err(|_| SphinxError::BadParams)?;
        let p = Params {
            header_len: hl,
            body_len: bl,
        };
        p.check()?;
        Ok((p, Packet::from_value(&a[1])?))
    }
}

/// A node key pair.
#[derive(Clone)]
pub struct KeyPair {
    pub secret: [u8; 28],
    pub public: Point,
}

impl std::fmt::Debug for KeyPair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyPair")
            .field("public", &hex::encode(self.public.to_compressed()))
            .finish_non_exhaustive()
    }
}

impl KeyPair {
    /// From petlib Bn magnitude bytes (`secret*.prv`).
    pub fn from_secret_bytes(be: &[u8]) -> Result<KeyPair, SphinxError> {
        let s = scalar_from_be_mod_n(be);
        let secret = s.be28();
        let public = Point::generator().mul(&secret).ok_or(SphinxError::BadKey)?;
        Ok(KeyPair { secret, public })
    }

    pub fn generate(rng: &mut dyn rand_core::RngCore) -> KeyPair {
        loop {
            let mut b = [0u8; 32];
            rng.fill_bytes(&mut b);
            if let Ok(k) = KeyPair::from_secret_bytes(&b) {
                return k;
            }
        }
    }
}

/// A fresh random ephemeral scalar.
pub fn random_scalar(rng: &mut dyn rand_core::RngCore) -> Scalar {
    let mut b = [0u8; 40];
    rng.fill_bytes(&mut b);
    scalar_from_be_mod_n(&b)
}

#[cfg(test)]
#[path = "sphinxmix_tests.rs"]
mod tests;
