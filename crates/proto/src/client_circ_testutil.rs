//! Test helpers for client circuits: a toy XOR layer and cells as a hop
//! would send them.
#![allow(clippy::unwrap_used)]

use onionmix_cell::relay::{self, RelayCmd};
use onionmix_cell::{CellBody, PAYLOAD_LEN};

use super::{CircError, CircEvent, ClientCircuit, OutCell};
use crate::cc::ChanSignal;
use crate::layer::ClientLayer;

/// A toy layer: XOR with a key byte; the digest field carries the key.
pub(crate) struct Xor(pub(crate) u8);

impl ClientLayer for Xor {
    fn originate_forward(&mut self, body: &mut CellBody) -> [u8; 20] {
        body[5..9].copy_from_slice(&[self.0; 4]);
        [self.0; 20]
    }
    fn encrypt_forward(&mut self, body: &mut CellBody) {
        body.iter_mut().for_each(|b| *b ^= self.0);
    }
    fn decrypt_backward(&mut self, body: &mut CellBody) -> Option<[u8; 20]> {
        body.iter_mut().for_each(|b| *b ^= self.0);
        (body[1..3] == [0, 0] && body[5..9] == [self.0; 4]).then_some([self.0; 20])
    }
}

pub(crate) fn circuit(keys: &[u8]) -> ClientCircuit {
    let mut c = ClientCircuit::new(Box::new(Xor(keys[0])), Default::default());
    for k in &keys[1..] {
        c.add_hop(Box::new(Xor(*k)), None);
    }
    c
}

/// A cell as hop `hop` of a circuit with `keys` would send it back.
pub(crate) fn from_hop(keys: &[u8], hop: usize, cmd: RelayCmd, sid: u16, data: &[u8]) -> CellBody {
    let mut b = [0u8; PAYLOAD_LEN];
    relay::write(&mut b, cmd, sid, data, |p| p.fill(0)).unwrap();
    b[5..9].copy_from_slice(&[keys[hop]; 4]);
    for k in keys[..=hop].iter().rev() {
        b.iter_mut().for_each(|x| *x ^= *k);
    }
    b
}

/// What hop `hop` sees of an outbound cell.
pub(crate) fn at_hop(keys: &[u8], hop: usize, cell: &OutCell) -> CellBody {
    let mut b = cell.body;
    for k in &keys[..=hop] {
        b.iter_mut().for_each(|x| *x ^= *k);
    }
    b
}

/// Feed `c` (a circuit with `keys`) a cell from hop `hop`; the events and
/// cells it produced.
pub(crate) fn feed(
    c: &mut ClientCircuit,
    keys: &[u8],
    hop: usize,
    cmd: RelayCmd,
    sid: u16,
    data: &[u8],
) -> Result<(Vec<CircEvent>, Vec<OutCell>), CircError> {
    let mut b = from_hop(keys, hop, cmd, sid, data);
    let (mut ev, mut out) = (Vec::new(), Vec::new());
    c.handle_relay(
        &mut b,
        std::time::Instant::now(),
        ChanSignal::default(),
        &mut ev,
        &mut out,
    )?;
    Ok((ev, out))
}
