//! The interface between circuit logic and relay-cell cryptography.
//!
//! `tor1` (AES-128-CTR with running SHA-1 digests) implements these traits
//! in `onionmix-crypto`; a future CGO implementation (proposal 359) would
//! implement them too, and nothing in the circuit machines changes.

use onionmix_cell::CellBody;

/// One hop's relay crypto, as seen from the circuit's origin (the client).
pub trait ClientLayer: Send {
    /// Originate a cell for this hop: set the digest field from the forward
    /// running digest (the body must be plaintext with Recognized=0 and
    /// Digest=0) and return the new 20-byte running digest (the SENDME v1
    /// tag if this cell triggers a SENDME). Does not encrypt.
    fn originate_forward(&mut self, body: &mut CellBody) -> [u8; 20];
    /// Encrypt one layer in the forward direction.
    fn encrypt_forward(&mut self, body: &mut CellBody);
    /// Decrypt one layer in the backward direction and, if the cell is now
    /// recognized by this hop (Recognized==0 and the digest matches),
    /// advance the backward running digest and return its new value.
    fn decrypt_backward(&mut self, body: &mut CellBody) -> Option<[u8; 20]>;
}

/// One hop's relay crypto, as seen from a relay on the circuit.
pub trait RelayLayer: Send {
    /// Decrypt one layer of a cell travelling away from the client; if it
    /// is recognized by us, advance the forward digest and return its value.
    fn decrypt_forward(&mut self, body: &mut CellBody) -> Option<[u8; 20]>;
    /// Originate a cell towards the client: set its digest from the
    /// backward running digest, encrypt it, and return the digest value.
    fn originate_backward(&mut self, body: &mut CellBody) -> [u8; 20];
    /// Add our layer to a cell travelling towards the client.
    fn encrypt_backward(&mut self, body: &mut CellBody);
}
