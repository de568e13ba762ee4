//! Relay cell crypto of the onion-service virtual hop (rend-spec-v3 §4.2.1,
//! "[NTOR-WITH-EXTRA-DATA]" key expansion; tor's `relay_crypto_init` with
//! `is_hs_v3`): the same tor1 cell layout and digest rules as
//! [`crate::relay_crypto`], but AES-256-CTR (zero IV) per direction and a
//! running SHA3-256 digest per direction seeded with the 32-byte Df/Db.
//! As in tor, the SENDME tag is the first 20 bytes of the running digest
//! and the cell carries its first 4.
//!
//! Both ends of a rendezvous circuit use this layer on the client-side
//! (origin) methods: the client as given, the service with the keys
//! swapped (tor's `reverse` flag), so that what the client sends forward
//! the service receives on its backward direction.

use aes::Aes256;
use cipher::{KeyIvInit, StreamCipher};
use sha3::{Digest, Sha3_256};
use subtle::ConstantTimeEq;
use zeroize::Zeroize;

use crate::relay_crypto::RelayBody;

type Aes256Ctr = ctr::Ctr128BE<Aes256>;

const RECOGNIZED: std::ops::Range<usize> = 1..3;
const DIGEST: std::ops::Range<usize> = 5..9;

/// Key material of the virtual hop: `Df | Db | Kf | Kb` (32 bytes each),
/// the first 128 bytes of `SHAKE-256(NTOR_KEY_SEED | m_hsexpand)`.
#[derive(Clone)]
pub struct HsCircuitKeys {
    /// Forward (client to service) digest seed.
    pub df: [u8; 32],
    /// Backward digest seed.
    pub db: [u8; 32],
    /// Forward AES-256 key.
    pub kf: [u8; 32],
    /// Backward AES-256 key.
    pub kb: [u8; 32],
}

impl HsCircuitKeys {
    /// Split 128 bytes of key material in tor's order.
    pub fn from_bytes(m: &[u8; 128]) -> Self {
        let mut k = Self {
            df: [0; 32],
            db: [0; 32],
            kf: [0; 32],
            kb: [0; 32],
        };
        k.df.copy_from_slice(&m[0..32]);
        k.db.copy_from_slice(&m[32..64]);
        k.kf.copy_from_slice(&m[64..96]);
        k.kb.copy_from_slice(&m[96..128]);
        k
    }
}

impl std::fmt::Debug for HsCircuitKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HsCircuitKeys { .. }")
    }
}

impl Drop for HsCircuitKeys {
    fn drop(&mut self) {
        self.df.zeroize();
        self.db.zeroize();
        self.kf.zeroize();
        self.kb.zeroize();
    }
}

#[derive(Clone)]
struct Direction {
    cipher: Aes256Ctr,
    digest: Sha3_256,
    last: [u8; 20],
}

impl Direction {
    fn new(key: &[u8; 32], seed: &[u8; 32]) -> Self {
        let mut digest = Sha3_256::new();
        digest.update(seed);
        Self {
            cipher: Aes256Ctr::new(key.into(), &[0u8; 16].into()),
            digest,
            last: [0; 20],
        }
    }

    fn crypt(&mut self, body: &mut RelayBody) {
        self.cipher.apply_keystream(&mut body[..]);
    }

    fn tag(d: &Sha3_256) -> [u8; 20] {
        let full: [u8; 32] = d.clone().finalize().into();
        let mut t = [0u8; 20];
        t.copy_from_slice(&full[..20]);
        t
    }

    fn set_digest(&mut self, body: &mut RelayBody) -> [u8; 20] {
        body[RECOGNIZED].fill(0);
        body[DIGEST].fill(0);
        self.digest.update(&body[..]);
        let t = Self::tag(&self.digest);
        body[DIGEST].copy_from_slice(&t[..4]);
        self.last = t;
        t
    }

    fn check_digest(&mut self, body: &mut RelayBody) -> Option<[u8; 20]> {
        if body[1] != 0 || body[2] != 0 {
            return None;
        }
        let mut received = [0u8; 4];
        received.copy_from_slice(&body[DIGEST]);
        body[DIGEST].fill(0);
        let mut trial = self.digest.clone();
        trial.update(&body[..]);
        body[DIGEST].copy_from_slice(&received);
        let t = Self::tag(&trial);
        if bool::from(t[..4].ct_eq(&received)) {
            self.digest = trial;
            self.last = t;
            Some(t)
        } else {
            None
        }
    }
}

/// The crypto state of the virtual hop at one end of a rendezvous circuit.
#[derive(Clone)]
pub struct HsRelayLayer {
    /// Direction we originate in (client: forward keys).
    out: Direction,
    /// Direction we receive in.
    inb: Direction,
}

impl std::fmt::Debug for HsRelayLayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HsRelayLayer { .. }")
    }
}

impl HsRelayLayer {
    /// The client's layer (sends with Kf/Df, receives with Kb/Db).
    pub fn client(keys: &HsCircuitKeys) -> Self {
        Self {
            out: Direction::new(&keys.kf, &keys.df),
            inb: Direction::new(&keys.kb, &keys.db),
        }
    }

    /// The service's layer (keys swapped: sends with Kb/Db, receives with
    /// Kf/Df).
    pub fn service(keys: &HsCircuitKeys) -> Self {
        Self {
            out: Direction::new(&keys.kb, &keys.db),
            inb: Direction::new(&keys.kf, &keys.df),
        }
    }

    /// Originate a cell at this end: set Recognized=0 and the digest
    /// field; returns the SENDME tag. Does not encrypt.
    pub fn originate_forward(&mut self, body: &mut RelayBody) -> [u8; 20] {
        self.out.set_digest(body)
    }

    /// Add this layer's encryption to an originated cell.
    pub fn encrypt_forward(&mut self, body: &mut RelayBody) {
        self.out.crypt(body);
    }

    /// Remove this layer from an arriving cell; if it is recognised,
    /// advance the running digest and return the SENDME tag.
    pub fn decrypt_backward(&mut self, body: &mut RelayBody) -> Option<[u8; 20]> {
        self.inb.crypt(body);
        self.inb.check_digest(body)
    }

    /// Digest tag after the last cell originated here.
    pub fn last_sent_digest(&self) -> [u8; 20] {
        self.out.last
    }

    /// Digest tag after the last cell recognised here.
    pub fn last_received_digest(&self) -> [u8; 20] {
        self.inb.last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> HsCircuitKeys {
        let mut m = [0u8; 128];
        for (i, b) in m.iter_mut().enumerate() {
            *b = i as u8;
        }
        HsCircuitKeys::from_bytes(&m)
    }

    #[test]
    fn client_and_service_talk_both_ways() {
        let k = keys();
        let (mut c, mut s) = (HsRelayLayer::client(&k), HsRelayLayer::service(&k));
        for round in 0..50u8 {
            let mut body = [round; 509];
            body[0] = 2;
            let plain = body;
            let tag = c.originate_forward(&mut body);
            c.encrypt_forward(&mut body);
            assert_ne!(body[11..], plain[11..]);
            assert_eq!(s.decrypt_backward(&mut body), Some(tag));
            assert_eq!(body[11..], plain[11..]);
            assert_eq!(s.last_received_digest(), c.last_sent_digest());

            let mut back = [round.wrapping_add(1); 509];
            let t2 = s.originate_forward(&mut back);
            s.encrypt_forward(&mut back);
            assert_eq!(c.decrypt_backward(&mut back), Some(t2));
        }
    }

    #[test]
    fn layout_is_aes256_ctr_and_sha3() {
        // One cell by hand: digest = SHA3-256(Df | body with zero digest)[..4],
        // ciphertext = body XOR AES-256-CTR(Kf, 0).
        let k = keys();
        let mut c = HsRelayLayer::client(&k);
        let mut body = [0u8; 509];
        body[0] = 2;
        body[11] = 0xAB;
        let mut h = Sha3_256::new();
        h.update(k.df);
        h.update(body);
        let d: [u8; 32] = h.finalize().into();
        let mut want = body;
        want[5..9].copy_from_slice(&d[..4]);
        let mut ks = [0u8; 509];
        Aes256Ctr::new((&k.kf).into(), &[0u8; 16].into()).apply_keystream(&mut ks);
        for (w, s) in want.iter_mut().zip(ks) {
            *w ^= s;
        }
        let tag = c.originate_forward(&mut body);
        c.encrypt_forward(&mut body);
        assert_eq!(body, want);
        assert_eq!(tag[..], d[..20]);
    }

    #[test]
    fn corrupted_cells_are_not_recognised() {
        let k = keys();
        let (mut c, mut s) = (HsRelayLayer::client(&k), HsRelayLayer::service(&k));
        let mut body = [7u8; 509];
        c.originate_forward(&mut body);
        c.encrypt_forward(&mut body);
        body[100] ^= 1;
        assert_eq!(s.decrypt_backward(&mut body), None);
        // A client layer does not recognise its own direction's cells.
        let mut c2 = HsRelayLayer::client(&k);
        let mut b2 = [7u8; 509];
        let mut c3 = HsRelayLayer::client(&k);
        c3.originate_forward(&mut b2);
        c3.encrypt_forward(&mut b2);
        assert_eq!(c2.decrypt_backward(&mut b2), None);
    }
}
