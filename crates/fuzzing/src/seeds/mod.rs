//! Seed inputs for every target: cells, handshakes and documents made by
//! the project's own builders with the fixture keys, documents and CERTS
//! cells captured from stock tor, and spec examples. `examples/seeds.rs`
//! writes them to `fuzz/corpus/<target>/seed-<name>`; fuzzing grows the
//! corpus from there.

mod cells;
mod circuits;
mod crypto;
mod drivers;
mod frontend;
mod mix;
mod netdoc;

use bytes::BytesMut;
use onionmix_cell::relay::RelayMsg;
use onionmix_cell::{CellCodec, PAYLOAD_LEN, RawCell};

use crate::fixtures;

/// A seed: target, file name (without the `seed-` prefix), bytes.
pub type Seed = (&'static str, String, Vec<u8>);

fn cat(parts: &[&[u8]]) -> Vec<u8> {
    parts.concat()
}

fn chunk(b: &[u8]) -> Vec<u8> {
    let mut v = (b.len() as u16).to_be_bytes().to_vec();
    v.extend_from_slice(b);
    v
}

fn cell_bytes(codec: &CellCodec, cells: &[RawCell]) -> Vec<u8> {
    let mut out = BytesMut::new();
    for c in cells {
        codec.encode(c, &mut out).expect("seed cell encodes");
    }
    out.to_vec()
}

fn v45() -> CellCodec {
    let mut c = CellCodec::new();
    c.set_link_version(5);
    c
}

fn relay_body(msg: &RelayMsg<'_>, sid: u16) -> [u8; PAYLOAD_LEN] {
    let mut body = [0u8; PAYLOAD_LEN];
    msg.write_cell(sid, &mut body, |p| p.fill(0))
        .expect("seed message fits");
    body
}

fn trim(body: &[u8]) -> Vec<u8> {
    let end = body.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
    body[..end].to_vec()
}

fn stock_certs_payload() -> Vec<u8> {
    hex::decode(fixtures::STOCK_CERTS_HEX.trim()).expect("stock CERTS hex")
}

fn certs_payload(rf: &fixtures::RelayFixture) -> &[u8] {
    use onionmix_proto::channel::ResponderIdentity;
    rf.link.certs_payload()
}

pub use netdoc::descriptor_template;

/// Every seed of every target.
pub fn all() -> Vec<Seed> {
    let mut out = Vec::new();
    cells::cells(&mut out);
    circuits::handshakes(&mut out);
    circuits::circuits(&mut out);
    crypto::crypto(&mut out);
    netdoc::netdoc(&mut out);
    frontend::frontend(&mut out);
    frontend::http(&mut out);
    drivers::node(&mut out);
    mix::mix(&mut out);
    drivers::emu(&mut out);
    drivers::testbed(&mut out);
    drivers::tunnel(&mut out);
    out
}
