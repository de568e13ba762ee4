//! tor1 relay cell crypto against cells produced by C tor's relay crypto
//! code (the `test_relaycrypt.c` keys, as used for Arti's
//! `testdata/cell_crypt.rs`; values in `tests/data/tor1_cell_crypt.txt`).

use onionmix_crypto::ntor::CircuitKeys;
use onionmix_crypto::relay_crypto::{ClientCircuitCrypto, RELAY_BODY_LEN, RelayCircuitCrypto};
use sha3::Shake256;
use sha3::digest::{ExtendableOutput, Update, XofReader};

const K: [&[u8; 92]; 3] = [
    b"    'My public key is in this signed x509 object', said Tom assertively.      (N-PREG-VIRYL)",
    b"'Let's chart the pedal phlanges in the tomb', said Tom cryptographically.  (PELCG-GBR-TENCU)",
    b"     'Segmentation fault bugs don't _just happen_', said Tom seethingly.        (P-GUVAT-YL)",
];
const SEED: &[u8] =
    b"'You mean to tell me that there's a version of Sha-3 with no limit on the output length?', said Tom shakily.";

fn vectors() -> Vec<(usize, Vec<u8>)> {
    let text = include_str!("data/tor1_cell_crypt.txt");
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (n, h) = l.split_once(' ').expect("index and hex");
            (n.parse().expect("index"), hex::decode(h).expect("hex"))
        })
        .collect()
}

#[test]
fn c_tor_outbound_vectors() {
    let data = vectors();
    assert_eq!(data.len(), 8);
    let mut client = ClientCircuitCrypto::new();
    let mut relays = Vec::new();
    for k in K {
        let keys = CircuitKeys::from_ntor_kdf(k);
        client.add_hop(&keys).expect("room");
        relays.push(RelayCircuitCrypto::new(&keys));
    }
    let mut xof = Shake256::default();
    xof.update(SEED);
    let mut stream = xof.finalize_xof();
    let mut j = 0;
    for cellno in 0..51 {
        let mut body = [0u8; RELAY_BODY_LEN];
        body[0] = 2; // RELAY_DATA
        body[4] = 1; // stream 1
        body[9] = 1; // length 498
        body[10] = 242;
        stream.read(&mut body[11..]);
        let plain = body;
        client.encrypt_outbound(&mut body, 2).expect("hop 2");
        if j < data.len() && cellno == data[j].0 {
            assert_eq!(&body[..], &data[j].1[..], "cell {cellno}");
            j += 1;
        }
        // And the relays undo it: only the last one recognises the cell.
        for (i, r) in relays.iter_mut().enumerate() {
            assert_eq!(r.relay_forward(&mut body), i == 2, "cell {cellno} hop {i}");
        }
        assert_eq!(&body[11..], &plain[11..]);
    }
    assert_eq!(j, data.len());
}
