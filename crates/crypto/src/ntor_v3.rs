//! The ntor-v3 handshake (proposal 332; CREATE2 handshake type 3), client
//! and relay side, with the instantiation of appendix A.1/A.2 (SHA3-256,
//! SHAKE-256, curve25519, AES-256-CTR) and `PROTOID =
//! "ntor3-curve25519-sha3_256-1"`.
//!
//! ntor-v3 carries encrypted extension messages in both directions (used by
//! tor 0.4.7+ to negotiate congestion control, proposal 324) and binds the
//! relay's Ed25519 identity instead of its RSA digest. For circuit
//! extension the verification string is [`NTOR3_CIRC_VERIFICATION`].
//!
//! ```text
//! client: ID(32) | B(32) | X(32) | ENC(CM) | MAC(32)
//! relay:  Y(32) | AUTH(32) | ENC(SM)
//! ```

use aes::Aes256;
use cipher::{KeyIvInit, StreamCipher};
use rand_core::CryptoRngCore;
use sha3::digest::{ExtendableOutput, Update, XofReader};
use sha3::{Digest, Sha3_256, Shake256};
use subtle::ConstantTimeEq;
use x25519_dalek::{PublicKey, StaticSecret};
use zeroize::Zeroizing;

use crate::ntor::{CircuitKeys, NtorError, NtorSecretKey};

/// CREATE2 handshake type of ntor-v3.
pub const NTOR3_HTYPE: u16 = 3;
/// Verification string tor uses for circuit extension.
pub const NTOR3_CIRC_VERIFICATION: &[u8] = b"circuit extend";
/// Smallest client handshake (no message).
pub const NTOR3_CLIENT_MIN_LEN: usize = 32 * 4;
/// Smallest relay reply (no message).
pub const NTOR3_REPLY_MIN_LEN: usize = 64;

const PROTOID: &[u8] = b"ntor3-curve25519-sha3_256-1";
const T_MSGKDF: &[u8] = b"ntor3-curve25519-sha3_256-1:kdf_phase1";
const T_MSGMAC: &[u8] = b"ntor3-curve25519-sha3_256-1:msg_mac";
const T_KEY_SEED: &[u8] = b"ntor3-curve25519-sha3_256-1:key_seed";
const T_VERIFY: &[u8] = b"ntor3-curve25519-sha3_256-1:verify";
const T_FINAL: &[u8] = b"ntor3-curve25519-sha3_256-1:kdf_final";
const T_AUTH: &[u8] = b"ntor3-curve25519-sha3_256-1:auth_final";

type Aes256Ctr = ctr::Ctr128BE<Aes256>;

fn encap(len: usize) -> [u8; 8] {
    (len as u64).to_be_bytes()
}

/// `H(s, t) = SHA3_256(ENCAP(t) | s)` over the concatenation of `parts`.
fn h(t: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut d = Sha3_256::new();
    Digest::update(&mut d, encap(t.len()));
    Digest::update(&mut d, t);
    for p in parts {
        Digest::update(&mut d, p);
    }
    d.finalize().into()
}

/// `MAC(k, msg, t) = SHA3_256(ENCAP(t) | ENCAP(k) | msg)`.
fn mac(k: &[u8], t: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut d = Sha3_256::new();
    Digest::update(&mut d, encap(t.len()));
    Digest::update(&mut d, t);
    Digest::update(&mut d, encap(k.len()));
    Digest::update(&mut d, k);
    for p in parts {
        Digest::update(&mut d, p);
    }
    d.finalize().into()
}

/// `KDF(s, t) = SHAKE_256(ENCAP(t) | s)`.
fn kdf(t: &[u8], parts: &[&[u8]]) -> sha3::Shake256Reader {
    let mut x = Shake256::default();
    x.update(&encap(t.len()));
    x.update(t);
    for p in parts {
        x.update(p);
    }
    x.finalize_xof()
}

fn aes256_ctr(key: &[u8; 32], data: &mut [u8]) {
    let mut c = Aes256Ctr::new(key.into(), &[0u8; 16].into());
    c.apply_keystream(data);
}

/// The shared keystream after a successful ntor-v3 handshake.
pub struct Ntor3Keystream {
    reader: sha3::Shake256Reader,
}

impl std::fmt::Debug for Ntor3Keystream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ntor3Keystream { .. }")
    }
}

impl Ntor3Keystream {
    /// Read the next bytes of the keystream.
    pub fn read(&mut self, out: &mut [u8]) {
        self.reader.read(out);
    }

    /// Take the next 92 bytes as tor1 circuit keys (`Df | Db | Kf | Kb | KH`).
    pub fn circuit_keys(mut self) -> CircuitKeys {
        let mut k = Zeroizing::new([0u8; 92]);
        self.reader.read(&mut k[..]);
        CircuitKeys::from_ntor_kdf(&k)
    }
}

/// Split `ntor_key_seed` into the message key and the keystream.
fn final_keys(key_seed: &[u8; 32]) -> (Zeroizing<[u8; 32]>, Ntor3Keystream) {
    let mut reader = kdf(T_FINAL, &[key_seed]);
    let mut enc_key = Zeroizing::new([0u8; 32]);
    reader.read(&mut enc_key[..]);
    (enc_key, Ntor3Keystream { reader })
}

fn phase1(
    bx: &[u8; 32],
    id: &[u8; 32],
    x: &[u8; 32],
    b: &[u8; 32],
    ver: &[u8],
) -> (Zeroizing<[u8; 32]>, Zeroizing<[u8; 32]>) {
    let mut r = kdf(T_MSGKDF, &[bx, id, x, b, PROTOID, &encap(ver.len()), ver]);
    let mut enc = Zeroizing::new([0u8; 32]);
    let mut mk = Zeroizing::new([0u8; 32]);
    r.read(&mut enc[..]);
    r.read(&mut mk[..]);
    (enc, mk)
}

/// Client state between sending the handshake and receiving the reply.
pub struct Ntor3Client {
    id: [u8; 32],
    b: [u8; 32],
    x: StaticSecret,
    x_pub: [u8; 32],
    bx: Zeroizing<[u8; 32]>,
    msg_mac: [u8; 32],
    ver: Vec<u8>,
}

impl std::fmt::Debug for Ntor3Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Ntor3Client { .. }")
    }
}

impl Ntor3Client {
    /// Start a handshake with the relay whose Ed25519 identity is
    /// `relay_ed_id` and ntor key `relay_ntor_key`, sending `client_msg`
    /// (encoded extensions, see [`encode_extensions`]). Returns the state and
    /// the handshake bytes (CREATE2 HDATA).
    pub fn new(
        relay_ed_id: [u8; 32],
        relay_ntor_key: [u8; 32],
        client_msg: &[u8],
        verification: &[u8],
        rng: &mut dyn CryptoRngCore,
    ) -> Result<(Self, Vec<u8>), NtorError> {
        let mut x = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(&mut x[..]);
        Self::with_ephemeral(relay_ed_id, relay_ntor_key, client_msg, verification, &x)
    }

    /// As [`Ntor3Client::new`] with a fixed ephemeral secret (vectors).
    pub fn with_ephemeral(
        relay_ed_id: [u8; 32],
        relay_ntor_key: [u8; 32],
        client_msg: &[u8],
        verification: &[u8],
        x: &[u8; 32],
    ) -> Result<(Self, Vec<u8>), NtorError> {
        let x = StaticSecret::from(*x);
        let x_pub = PublicKey::from(&x).to_bytes();
        let bx_shared = x.diffie_hellman(&PublicKey::from(relay_ntor_key));
        if !bx_shared.was_contributory() {
            return Err(NtorError::BadPoint);
        }
        let bx = Zeroizing::new(*bx_shared.as_bytes());
        let (enc_k1, mac_k1) = phase1(&bx, &relay_ed_id, &x_pub, &relay_ntor_key, verification);
        let mut msg = client_msg.to_vec();
        aes256_ctr(&enc_k1, &mut msg);
        let msg_mac = mac(
            &mac_k1[..],
            T_MSGMAC,
            &[&relay_ed_id, &relay_ntor_key, &x_pub, &msg],
        );
        let mut out = Vec::with_capacity(NTOR3_CLIENT_MIN_LEN + msg.len());
        out.extend_from_slice(&relay_ed_id);
        out.extend_from_slice(&relay_ntor_key);
        out.extend_from_slice(&x_pub);
        out.extend_from_slice(&msg);
        out.extend_from_slice(&msg_mac);
        let st = Self {
            id: relay_ed_id,
            b: relay_ntor_key,
            x,
            x_pub,
            bx,
            msg_mac,
            ver: verification.to_vec(),
        };
        Ok((st, out))
    }

    /// Process the relay's reply; returns the relay's decrypted message and
    /// the keystream. AUTH is compared in constant time.
    pub fn finish(self, reply: &[u8]) -> Result<(Vec<u8>, Ntor3Keystream), NtorError> {
        if reply.len() < NTOR3_REPLY_MIN_LEN {
            return Err(NtorError::BadLength(reply.len()));
        }
        let mut y = [0u8; 32];
        y.copy_from_slice(&reply[..32]);
        let auth = &reply[32..64];
        let msg = &reply[64..];
        let yx = self.x.diffie_hellman(&PublicKey::from(y));
        let yx_ok = yx.was_contributory();
        let ver_len = encap(self.ver.len());
        let secret: [&[u8]; 9] = [
            yx.as_bytes(),
            &self.bx[..],
            &self.id,
            &self.b,
            &self.x_pub,
            &y,
            PROTOID,
            &ver_len,
            &self.ver,
        ];
        let key_seed = Zeroizing::new(h(T_KEY_SEED, &secret));
        let verify = Zeroizing::new(h(T_VERIFY, &secret));
        let expected = h(
            T_AUTH,
            &[
                &verify[..],
                &self.id,
                &self.b,
                &y,
                &self.x_pub,
                &self.msg_mac,
                &encap(msg.len()),
                msg,
                PROTOID,
                b"Server",
            ],
        );
        let ok: bool = expected.ct_eq(auth).into();
        if !yx_ok {
            return Err(NtorError::BadPoint);
        }
        if !ok {
            return Err(NtorError::BadAuth);
        }
        let (enc_key, ks) = final_keys(&key_seed);
        let mut sm = msg.to_vec();
        aes256_ctr(&enc_key, &mut sm);
        Ok((sm, ks))
    }
}

/// Relay side: process a client handshake. `keys` are our ntor keys
/// (current and previous); `reply` gets the decrypted client message and
/// returns our message, or `None` to refuse the handshake. Returns the
/// reply bytes (CREATED2 HDATA) and the keystream.
pub fn ntor3_server(
    my_ed_id: &[u8; 32],
    keys: &[NtorSecretKey],
    handshake: &[u8],
    verification: &[u8],
    reply: &mut dyn FnMut(&[u8]) -> Option<Vec<u8>>,
    rng: &mut dyn CryptoRngCore,
) -> Result<(Vec<u8>, Ntor3Keystream), NtorError> {
    let mut y = Zeroizing::new([0u8; 32]);
    rng.fill_bytes(&mut y[..]);
    ntor3_server_with_ephemeral(my_ed_id, keys, handshake, verification, reply, &y)
}

/// As [`ntor3_server`] with a fixed ephemeral secret (vectors).
pub fn ntor3_server_with_ephemeral(
    my_ed_id: &[u8; 32],
    keys: &[NtorSecretKey],
    handshake: &[u8],
    verification: &[u8],
    reply: &mut dyn FnMut(&[u8]) -> Option<Vec<u8>>,
    y: &[u8; 32],
) -> Result<(Vec<u8>, Ntor3Keystream), NtorError> {
    if handshake.len() < NTOR3_CLIENT_MIN_LEN {
        return Err(NtorError::BadLength(handshake.len()));
    }
    if handshake[..32] != my_ed_id[..] {
        return Err(NtorError::WrongIdentity);
    }
    let mut b = [0u8; 32];
    b.copy_from_slice(&handshake[32..64]);
    let key = keys
        .iter()
        .find(|k| bool::from(k.public().ct_eq(&b)))
        .ok_or(NtorError::UnknownKey)?;
    let mut x = [0u8; 32];
    x.copy_from_slice(&handshake[64..96]);
    let (msg, client_mac) = handshake[96..].split_at(handshake.len() - 128);
    let x_pub = PublicKey::from(x);
    let b_secret = StaticSecret::from(*key.secret_bytes());
    let xb = b_secret.diffie_hellman(&x_pub);
    if !xb.was_contributory() {
        return Err(NtorError::BadPoint);
    }
    let (enc_k1, mac_k1) = phase1(xb.as_bytes(), my_ed_id, &x, &b, verification);
    let expected = mac(&mac_k1[..], T_MSGMAC, &[my_ed_id, &b, &x, msg]);
    if !bool::from(expected.ct_eq(client_mac)) {
        return Err(NtorError::BadAuth);
    }
    let mut cm = Zeroizing::new(msg.to_vec());
    aes256_ctr(&enc_k1, &mut cm);
    let sm = reply(&cm).ok_or(NtorError::Refused)?;

    let y = StaticSecret::from(*y);
    let y_pub = PublicKey::from(&y).to_bytes();
    let xy = y.diffie_hellman(&x_pub);
    if !xy.was_contributory() {
        return Err(NtorError::BadPoint);
    }
    let ver_len = encap(verification.len());
    let secret: [&[u8]; 9] = [
        xy.as_bytes(),
        xb.as_bytes(),
        my_ed_id,
        &b,
        &x,
        &y_pub,
        PROTOID,
        &ver_len,
        verification,
    ];
    let key_seed = Zeroizing::new(h(T_KEY_SEED, &secret));
    let verify = Zeroizing::new(h(T_VERIFY, &secret));
    let (enc_key, ks) = final_keys(&key_seed);
    let mut enc_msg = sm;
    aes256_ctr(&enc_key, &mut enc_msg);
    let auth = h(
        T_AUTH,
        &[
            &verify[..],
            my_ed_id,
            &b,
            &y_pub,
            &x,
            client_mac,
            &encap(enc_msg.len()),
            &enc_msg,
            PROTOID,
            b"Server",
        ],
    );
    let mut out = Vec::with_capacity(64 + enc_msg.len());
    out.extend_from_slice(&y_pub);
    out.extend_from_slice(&auth);
    out.extend_from_slice(&enc_msg);
    Ok((out, ks))
}

/// An ntor-v3 message extension (proposal 332 A.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ntor3Extension {
    /// EXT_FIELD_TYPE.
    pub ext_type: u8,
    /// EXT_FIELD (at most 255 bytes).
    pub data: Vec<u8>,
}

/// Extension type: congestion control request (client, empty).
pub const EXT_CC_REQUEST: u8 = 1;
/// Extension type: congestion control response (relay, 1 byte sendme_inc).
pub const EXT_CC_RESPONSE: u8 = 2;

/// Encode extensions as a message (`N_EXTENSIONS(1)` then
/// `TYPE(1) LEN(1) DATA` each, as tor's trunnel `ntorv3_ext` lists).
/// Extensions with more than 255 data bytes are truncated.
pub fn encode_extensions(exts: &[Ntor3Extension]) -> Vec<u8> {
    let mut out = vec![exts.len().min(255) as u8];
    for e in exts.iter().take(255) {
        let n = e.data.len().min(255);
        out.push(e.ext_type);
        out.push(n as u8);
        out.extend_from_slice(&e.data[..n]);
    }
    out
}

/// Parse a message of extensions; errors on truncation or trailing bytes.
pub fn parse_extensions(msg: &[u8]) -> Result<Vec<Ntor3Extension>, NtorError> {
    let Some((&n, mut rest)) = msg.split_first() else {
        return Err(NtorError::BadLength(0));
    };
    let mut out = Vec::with_capacity(usize::from(n));
    for _ in 0..n {
        let [t, len, tail @ ..] = rest else {
            return Err(NtorError::BadLength(msg.len()));
        };
        let len = usize::from(*len);
        if tail.len() < len {
            return Err(NtorError::BadLength(msg.len()));
        }
        out.push(Ntor3Extension {
            ext_type: *t,
            data: tail[..len].to_vec(),
        });
        rest = &tail[len..];
    }
    if !rest.is_empty() {
        return Err(NtorError::BadLength(msg.len()));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(s: &str) -> [u8; 32] {
        hex::decode(s).expect("hex").try_into().expect("32")
    }

    /// Proposal 332 appendix X.2 test vectors.
    #[test]
    fn proposal_332_vectors() {
        let b = k("4051daa5921cfa2a1c27b08451324919538e79e788a81b38cbed097a5dff454a");
        let b_pub = k("f8307a2bc1870b00b828bb74dbb8fd88e632a6375ab3bcd1ae706aaa8b6cdd1d");
        let id = k("9fad2af287ef942632833d21f946c6260c33fae6172b60006e86e4a6911753a2");
        let x = k("b825a3719147bcbe5fb1d0b0fcb9c09e51948048e2e3283d2ab7b45b5ef38b49");
        let y = k("4865a5b7689dafd978f529291c7171bc159be076b92186405d13220b80e2a053");
        let cm = hex::decode("68656c6c6f20776f726c64").expect("hex");
        let ver = hex::decode("78797a7a79").expect("hex");
        let sm = hex::decode("486f6c61204d756e646f").expect("hex");
        let relay = NtorSecretKey::from_secret_bytes(&b);
        assert_eq!(relay.public(), b_pub);

        let (client, c_hs) = Ntor3Client::with_ephemeral(id, b_pub, &cm, &ver, &x).expect("client");
        assert_eq!(
            hex::encode(&c_hs),
            "9fad2af287ef942632833d21f946c6260c33fae6172b60006e86e4a6911753a2f8307a2bc1870b00b828bb74dbb8fd88e632a6375ab3bcd1ae706aaa8b6cdd1d252fe9ae91264c91d4ecb8501f79d0387e34ad8ca0f7c995184f7d11d5da4f463bebd9151fd3b47c180abc9e044d53565f04d82bbb3bebed3d06cea65db8be9c72b68cd461942088502f67"
        );
        let mut seen = Vec::new();
        let mut rep = |m: &[u8]| {
            seen = m.to_vec();
            Some(sm.clone())
        };
        let (s_hs, mut s_ks) =
            ntor3_server_with_ephemeral(&id, &[relay], &c_hs, &ver, &mut rep, &y).expect("server");
        assert_eq!(seen, cm);
        assert_eq!(
            hex::encode(&s_hs),
            "4bf4814326fdab45ad5184f5518bd7fae25dc59374062698201a50a22954246d2fc5f8773ca824542bc6cf6f57c7c29bbf4e5476461ab130c5b18ab0a91276651202c3e1e87c0d32054c"
        );
        let (got_sm, mut c_ks) = client.finish(&s_hs).expect("finish");
        assert_eq!(got_sm, sm);
        let mut a = [0u8; 256];
        let mut bb = [0u8; 256];
        c_ks.read(&mut a);
        s_ks.read(&mut bb);
        assert_eq!(a, bb);
        assert_eq!(
            hex::encode(a),
            "9c19b631fd94ed86a817e01f6c80b0743a43f5faebd39cfaa8b00fa8bcc65c3bfeaa403d91acbd68a821bf6ee8504602b094a254392a07737d5662768c7a9fb1b2814bb34780eaee6e867c773e28c212ead563e98a1cd5d5b4576f5ee61c59bde025ff2851bb19b721421694f263818e3531e43a9e4e3e2c661e2ad547d8984caa28ebecd3e4525452299be26b9185a20a90ce1eac20a91f2832d731b54502b09749b5a2a2949292f8cfcbeffb790c7790ed935a9d251e7e336148ea83b063a5618fcff674a44581585fd22077ca0e52c59a24347a38d1a1ceebddbf238541f226b8f88d0fb9c07a1bcd2ea764bbbb5dacdaf5312a14c0b9e4f06309b0333b4a"
        );
    }

    #[test]
    fn roundtrip_and_failures() {
        let mut rng = rand::rngs::OsRng;
        let relay = NtorSecretKey::generate(&mut rng);
        let id = [3u8; 32];
        let cm = encode_extensions(&[Ntor3Extension {
            ext_type: EXT_CC_REQUEST,
            data: vec![],
        }]);
        let (c, hs) = Ntor3Client::new(id, relay.public(), &cm, NTOR3_CIRC_VERIFICATION, &mut rng)
            .expect("client");
        let mut rep = |m: &[u8]| {
            let exts = parse_extensions(m).ok()?;
            (exts.first()?.ext_type == EXT_CC_REQUEST).then(|| {
                encode_extensions(&[Ntor3Extension {
                    ext_type: EXT_CC_RESPONSE,
                    data: vec![31],
                }])
            })
        };
        let (reply, s_ks) = ntor3_server(
            &id,
            std::slice::from_ref(&relay),
            &hs,
            NTOR3_CIRC_VERIFICATION,
            &mut rep,
            &mut rng,
        )
        .expect("server");
        let (sm, c_ks) = c.finish(&reply).expect("client");
        assert_eq!(parse_extensions(&sm).expect("exts")[0].data, vec![31]);
        assert_eq!(c_ks.circuit_keys(), s_ks.circuit_keys());

        // Wrong verification string, tampered MAC, wrong id, refusal.
        let mut none = |_: &[u8]| Some(Vec::new());
        let keys = std::slice::from_ref(&relay);
        assert_eq!(
            ntor3_server(&id, keys, &hs, b"other", &mut none, &mut rng).err(),
            Some(NtorError::BadAuth)
        );
        let mut bad = hs.clone();
        let last = bad.len() - 1;
        bad[last] ^= 1;
        assert_eq!(
            ntor3_server(
                &id,
                keys,
                &bad,
                NTOR3_CIRC_VERIFICATION,
                &mut none,
                &mut rng
            )
            .err(),
            Some(NtorError::BadAuth)
        );
        assert_eq!(
            ntor3_server(
                &[4; 32],
                keys,
                &hs,
                NTOR3_CIRC_VERIFICATION,
                &mut none,
                &mut rng
            )
            .err(),
            Some(NtorError::WrongIdentity)
        );
        let mut refuse = |_: &[u8]| None;
        assert_eq!(
            ntor3_server(
                &id,
                keys,
                &hs,
                NTOR3_CIRC_VERIFICATION,
                &mut refuse,
                &mut rng
            )
            .err(),
            Some(NtorError::Refused)
        );
        assert!(
            ntor3_server(
                &id,
                keys,
                &hs[..127],
                NTOR3_CIRC_VERIFICATION,
                &mut none,
                &mut rng
            )
            .is_err()
        );
        let (c, _) = Ntor3Client::new(id, relay.public(), &[], NTOR3_CIRC_VERIFICATION, &mut rng)
            .expect("c");
        let mut r2 = reply.clone();
        r2[40] ^= 1;
        assert_eq!(c.finish(&r2).err(), Some(NtorError::BadAuth));
        assert!(parse_extensions(&[2, 1, 0]).is_err());
        assert!(parse_extensions(&[0, 9]).is_err());
        assert!(parse_extensions(&[]).is_err());
    }
}
