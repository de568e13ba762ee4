//! tor1 relay cell cryptography (tor-spec 5.5, 6.1; subprotocol Relay=2):
//! AES-128-CTR with a zero IV per direction, plus a running SHA-1 digest per
//! direction seeded with Df/Db.
//!
//! Everything works in place on the 509-byte relay cell body
//! `Command(1) Recognized(2) StreamID(2) Digest(4) Length(2) Data(498)`,
//! with no allocation per cell.
//!
//! # SENDME v1 tags (tor-spec 7.3.1, proposal 289)
//!
//! Every operation that adds a cell to a running digest returns the 20-byte
//! digest value *right after that cell* (the "SENDME tag"):
//! * the sender of DATA cells remembers the tag returned when it sent the
//!   cell that brought its package window to a multiple of the increment
//!   (client: [`ClientCircuitCrypto::encrypt_outbound`] /
//!   [`Tor1Layer::originate_forward`]; relay: [`Tor1Layer::originate_backward`]),
//!   and compares it with the DIGEST in the SENDME it receives;
//! * the receiver puts into its SENDME v1 the tag of the last cell it
//!   received and recognised before sending the SENDME (client:
//!   [`ClientCircuitCrypto::decrypt_inbound`] / [`Tor1Layer::decrypt_backward`];
//!   relay: [`Tor1Layer::decrypt_forward`]).
//!
//! The last tags are also kept and readable through
//! [`Tor1Layer::last_forward_digest`] / [`Tor1Layer::last_backward_digest`].

use aes::Aes128;
use cipher::{KeyIvInit, StreamCipher};
use sha1::{Digest, Sha1};
use subtle::ConstantTimeEq;

use crate::ntor::CircuitKeys;

/// Length of a relay cell body.
pub const RELAY_BODY_LEN: usize = 509;
/// Largest number of hops a client circuit may have (path-spec paths are at
/// most 4 hops plus a virtual onion-service hop; 8 leaves head-room).
pub const MAX_HOPS: usize = 8;

/// A relay cell body.
pub type RelayBody = [u8; RELAY_BODY_LEN];

type Aes128Ctr = ctr::Ctr128BE<Aes128>;

const RECOGNIZED: std::ops::Range<usize> = 1..3;
const DIGEST: std::ops::Range<usize> = 5..9;

/// Errors from client-side circuit crypto bookkeeping.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RelayCryptoError {
    /// The target hop does not exist.
    #[error("no hop {0} on this circuit")]
    NoSuchHop(usize),
    /// The circuit already has the maximum number of hops.
    #[error("circuit already has {MAX_HOPS} hops")]
    TooManyHops,
}

/// One direction: a keystream and a running digest.
#[derive(Clone)]
struct Direction {
    cipher: Aes128Ctr,
    digest: Sha1,
    last: [u8; 20],
}

impl Direction {
    fn new(key: &[u8; 16], seed: &[u8; 20]) -> Self {
        let cipher = Aes128Ctr::new(key.into(), &[0u8; 16].into());
        let mut digest = Sha1::new();
        digest.update(seed);
        Self {
            cipher,
            digest,
            last: [0; 20],
        }
    }

    #[inline]
    fn crypt(&mut self, body: &mut RelayBody) {
        self.cipher.apply_keystream(&mut body[..]);
    }

    /// Set Recognized=0 and the digest field from the running digest.
    #[inline]
    fn set_digest(&mut self, body: &mut RelayBody) -> [u8; 20] {
        body[RECOGNIZED].fill(0);
        body[DIGEST].fill(0);
        self.digest.update(&body[..]);
        let d: [u8; 20] = self.digest.clone().finalize().into();
        body[DIGEST].copy_from_slice(&d[..4]);
        self.last = d;
        d
    }

    /// If Recognized==0 and the digest field matches, advance the running
    /// digest and return its value; otherwise leave the digest untouched.
    /// The body is left exactly as it was.
    #[inline]
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
        let d: [u8; 20] = trial.clone().finalize().into();
        if bool::from(d[..4].ct_eq(&received)) {
            self.digest = trial;
            self.last = d;
            Some(d)
        } else {
            None
        }
    }
}

/// The tor1 crypto state of one hop of a circuit (both directions). The
/// same type serves the client (one per hop) and the relay (one per
/// circuit), with the method names of the respective side.
#[derive(Clone)]
pub struct Tor1Layer {
    fwd: Direction,
    bwd: Direction,
}

impl std::fmt::Debug for Tor1Layer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tor1Layer { .. }")
    }
}

impl Tor1Layer {
    /// Build from the hop's circuit keys (forward = Kf/Df, backward = Kb/Db).
    pub fn new(keys: &CircuitKeys) -> Self {
        Self {
            fwd: Direction::new(&keys.kf, &keys.df),
            bwd: Direction::new(&keys.kb, &keys.db),
        }
    }

    // ---- client (origin) side ----

    /// Client: originate a cell for this hop. Sets Recognized=0 and the
    /// digest field from the forward running digest; returns the new 20-byte
    /// forward digest (SENDME tag). Does not encrypt.
    pub fn originate_forward(&mut self, body: &mut RelayBody) -> [u8; 20] {
        self.fwd.set_digest(body)
    }

    /// Client: add this hop's forward encryption layer.
    pub fn encrypt_forward(&mut self, body: &mut RelayBody) {
        self.fwd.crypt(body);
    }

    /// Client: remove this hop's backward layer; if the cell is now
    /// recognised (Recognized==0 and digest matches the backward running
    /// digest) advance that digest and return its value (SENDME tag).
    pub fn decrypt_backward(&mut self, body: &mut RelayBody) -> Option<[u8; 20]> {
        self.bwd.crypt(body);
        self.bwd.check_digest(body)
    }

    // ---- relay side ----

    /// Relay: remove our layer from a cell travelling away from the client;
    /// if it is for us (recognised), advance the forward digest and return
    /// its value (SENDME tag). Otherwise the cell is to be passed on.
    pub fn decrypt_forward(&mut self, body: &mut RelayBody) -> Option<[u8; 20]> {
        self.fwd.crypt(body);
        self.fwd.check_digest(body)
    }

    /// Relay: originate a cell towards the client: set its digest from the
    /// backward running digest, encrypt it with Kb, return the digest value.
    pub fn originate_backward(&mut self, body: &mut RelayBody) -> [u8; 20] {
        let d = self.bwd.set_digest(body);
        self.bwd.crypt(body);
        d
    }

    /// Relay: add our layer to a cell coming from further hops.
    pub fn encrypt_backward(&mut self, body: &mut RelayBody) {
        self.bwd.crypt(body);
    }

    // ---- SENDME tag accessors ----

    /// Forward digest after the last cell originated (client) or recognised
    /// (relay) in the forward direction; all zero before the first one.
    pub fn last_forward_digest(&self) -> [u8; 20] {
        self.fwd.last
    }

    /// Backward digest after the last cell recognised (client) or
    /// originated (relay) in the backward direction; zero before any.
    pub fn last_backward_digest(&self) -> [u8; 20] {
        self.bwd.last
    }
}

/// The client's crypto for a whole circuit: one [`Tor1Layer`] per hop, hop
/// 0 being the first (guard) hop.
#[derive(Clone, Debug, Default)]
pub struct ClientCircuitCrypto {
    hops: Vec<Tor1Layer>,
}

impl ClientCircuitCrypto {
    /// An empty circuit (no hops yet).
    pub fn new() -> Self {
        Self {
            hops: Vec::with_capacity(4),
        }
    }

    /// Append a hop built from its circuit keys (after CREATED2/EXTENDED2).
    pub fn add_hop(&mut self, keys: &CircuitKeys) -> Result<(), RelayCryptoError> {
        self.push_layer(Tor1Layer::new(keys))
    }

    /// Append an already built layer.
    pub fn push_layer(&mut self, layer: Tor1Layer) -> Result<(), RelayCryptoError> {
        if self.hops.len() >= MAX_HOPS {
            return Err(RelayCryptoError::TooManyHops);
        }
        self.hops.push(layer);
        Ok(())
    }

    /// Drop all hops after the first `n` (after TRUNCATED).
    pub fn truncate(&mut self, n: usize) {
        self.hops.truncate(n);
    }

    /// Number of hops.
    pub fn n_hops(&self) -> usize {
        self.hops.len()
    }

    /// Borrow one hop's layer (e.g. for its SENDME tags).
    pub fn hop(&self, i: usize) -> Option<&Tor1Layer> {
        self.hops.get(i)
    }

    /// Encrypt a plaintext relay body for `target_hop`: set Recognized=0 and
    /// the digest with that hop's forward digest, then add the layers of
    /// hops `target_hop..=0` (last layer added is hop 0's). Returns the
    /// forward SENDME tag of the cell.
    pub fn encrypt_outbound(
        &mut self,
        body: &mut RelayBody,
        target_hop: usize,
    ) -> Result<[u8; 20], RelayCryptoError> {
        let Some(target) = self.hops.get_mut(target_hop) else {
            return Err(RelayCryptoError::NoSuchHop(target_hop));
        };
        let tag = target.originate_forward(body);
        for hop in self.hops[..=target_hop].iter_mut().rev() {
            hop.encrypt_forward(body);
        }
        Ok(tag)
    }

    /// Peel layers hop 0, 1, 2, ... from an inbound cell until a hop
    /// recognises it; returns `(hop index, backward SENDME tag)`, or `None`
    /// if no hop recognised it (the circuit must then be closed). Only the
    /// recognising hop's running digest advances.
    pub fn decrypt_inbound(&mut self, body: &mut RelayBody) -> Option<(usize, [u8; 20])> {
        for (i, hop) in self.hops.iter_mut().enumerate() {
            if let Some(tag) = hop.decrypt_backward(body) {
                return Some((i, tag));
            }
        }
        None
    }

    /// Forward digest after the last cell sent to `hop`.
    pub fn last_sent_digest(&self, hop: usize) -> Option<[u8; 20]> {
        self.hops.get(hop).map(Tor1Layer::last_forward_digest)
    }

    /// Backward digest after the last cell received from `hop`.
    pub fn last_received_digest(&self, hop: usize) -> Option<[u8; 20]> {
        self.hops.get(hop).map(Tor1Layer::last_backward_digest)
    }
}

/// A relay's crypto for one circuit (thin wrapper over [`Tor1Layer`] with
/// the relay-side names).
#[derive(Clone, Debug)]
pub struct RelayCircuitCrypto {
    layer: Tor1Layer,
}

impl RelayCircuitCrypto {
    /// Build from the keys the relay derived in the handshake.
    pub fn new(keys: &CircuitKeys) -> Self {
        Self {
            layer: Tor1Layer::new(keys),
        }
    }

    /// Decrypt one layer of a forward cell with Kf; `true` if it is
    /// recognised by us (digest checked with Df and then advanced).
    pub fn relay_forward(&mut self, body: &mut RelayBody) -> bool {
        self.layer.decrypt_forward(body).is_some()
    }

    /// Originate a cell towards the client (digest with Db, encrypt with
    /// Kb); returns the backward SENDME tag.
    pub fn relay_originate_backward(&mut self, body: &mut RelayBody) -> [u8; 20] {
        self.layer.originate_backward(body)
    }

    /// Encrypt one layer with Kb on a cell from further hops.
    pub fn relay_backward(&mut self, body: &mut RelayBody) {
        self.layer.encrypt_backward(body);
    }

    /// Forward digest after the last cell recognised (to put in our
    /// SENDME v1 towards the client).
    pub fn last_received_digest(&self) -> [u8; 20] {
        self.layer.last_forward_digest()
    }

    /// Backward digest after the last cell we originated (to compare with
    /// the client's SENDME v1).
    pub fn last_sent_digest(&self) -> [u8; 20] {
        self.layer.last_backward_digest()
    }

    /// The underlying layer.
    pub fn layer_mut(&mut self) -> &mut Tor1Layer {
        &mut self.layer
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: u8) -> CircuitKeys {
        let mut k = [0u8; 92];
        for (i, b) in k.iter_mut().enumerate() {
            *b = n.wrapping_mul(31).wrapping_add(i as u8);
        }
        CircuitKeys::from_ntor_kdf(&k)
    }

    fn plain(i: u8) -> RelayBody {
        let mut b = [0u8; RELAY_BODY_LEN];
        b[0] = 2;
        b[4] = 1;
        b[9] = 0;
        b[10] = 3;
        b[11] = i;
        b[12] = 0xaa;
        b[100] = i.wrapping_mul(3);
        b
    }

    #[test]
    fn three_hops_both_directions() {
        let mut client = ClientCircuitCrypto::new();
        let mut relays: Vec<RelayCircuitCrypto> = Vec::new();
        for n in 0..3 {
            client.add_hop(&keys(n)).expect("room");
            relays.push(RelayCircuitCrypto::new(&keys(n)));
        }
        for round in 0..20u8 {
            let target = (round % 3) as usize;
            let orig = plain(round);
            let mut body = orig;
            let tag = client.encrypt_outbound(&mut body, target).expect("hop");
            for (i, r) in relays.iter_mut().enumerate().take(target + 1) {
                let rec = r.relay_forward(&mut body);
                assert_eq!(rec, i == target, "round {round} hop {i}");
            }
            assert_eq!(relays[target].last_received_digest(), tag);
            assert_eq!(&body[11..], &orig[11..]);
            assert_eq!(body[0], 2);

            let mut back = plain(round ^ 0x55);
            let orig_back = back;
            let btag = relays[target].relay_originate_backward(&mut back);
            for r in relays[..target].iter_mut().rev() {
                r.relay_backward(&mut back);
            }
            let (hop, ctag) = client.decrypt_inbound(&mut back).expect("recognised");
            assert_eq!(hop, target);
            assert_eq!(ctag, btag);
            assert_eq!(client.last_received_digest(target), Some(btag));
            assert_eq!(&back[11..], &orig_back[11..]);
        }
    }

    #[test]
    fn mismatched_digest_does_not_advance() {
        let k = keys(9);
        let mut sender = Direction::new(&k.kf, &k.df);
        let mut receiver = Direction::new(&k.kf, &k.df);
        for i in 0..5u8 {
            let mut body = plain(i);
            let tag = sender.set_digest(&mut body);
            let before: [u8; 20] = receiver.digest.clone().finalize().into();
            let mut bad = body;
            bad[200] ^= 1;
            let bad_copy = bad;
            assert!(receiver.check_digest(&mut bad).is_none());
            assert_eq!(bad, bad_copy, "failed check must leave the body alone");
            let mut unrec = body;
            unrec[1] = 1;
            assert!(receiver.check_digest(&mut unrec).is_none());
            let after: [u8; 20] = receiver.digest.clone().finalize().into();
            assert_eq!(before, after, "failed check must not advance the digest");
            assert_eq!(receiver.check_digest(&mut body), Some(tag));
        }
    }

    #[test]
    fn hop_limits() {
        let mut c = ClientCircuitCrypto::new();
        let mut body = [0u8; RELAY_BODY_LEN];
        assert_eq!(
            c.encrypt_outbound(&mut body, 0),
            Err(RelayCryptoError::NoSuchHop(0))
        );
        for n in 0..MAX_HOPS {
            c.add_hop(&keys(n as u8)).expect("room");
        }
        assert_eq!(c.add_hop(&keys(0)), Err(RelayCryptoError::TooManyHops));
        c.truncate(2);
        assert_eq!(c.n_hops(), 2);
        assert!(c.decrypt_inbound(&mut body).is_none());
    }
}
