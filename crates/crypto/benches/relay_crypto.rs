//! Relay cell crypto throughput (cells/s): one relay layer forward, a relay
//! originating backward, and a 3-hop client encrypt / decrypt.
//!
//! Run: `cargo bench -p onionmix-crypto --bench relay_crypto`

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use onionmix_crypto::ntor::CircuitKeys;
use onionmix_crypto::relay_crypto::{
    ClientCircuitCrypto, RELAY_BODY_LEN, RelayCircuitCrypto, Tor1Layer,
};
use std::hint::black_box;

fn keys(n: u8) -> CircuitKeys {
    let mut k = [0u8; 92];
    for (i, b) in k.iter_mut().enumerate() {
        *b = n.wrapping_mul(37).wrapping_add(i as u8);
    }
    CircuitKeys::from_ntor_kdf(&k)
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("tor1");
    g.throughput(Throughput::Elements(1));

    // A middle relay passing a cell on: decrypt one layer, recognised check fails fast.
    let mut relay = RelayCircuitCrypto::new(&keys(1));
    let mut body = [0x5au8; RELAY_BODY_LEN];
    g.bench_function("relay_forward_1_layer", |b| {
        b.iter(|| {
            black_box(relay.relay_forward(black_box(&mut body)));
        })
    });

    // A relay adding its layer to a backward cell.
    let mut relay = RelayCircuitCrypto::new(&keys(2));
    g.bench_function("relay_backward_1_layer", |b| {
        b.iter(|| relay.relay_backward(black_box(&mut body)))
    });

    // An exit originating a cell (digest + encrypt).
    let mut relay = RelayCircuitCrypto::new(&keys(3));
    g.bench_function("relay_originate_backward", |b| {
        b.iter(|| {
            let mut cell = [0u8; RELAY_BODY_LEN];
            cell[0] = 2;
            black_box(relay.relay_originate_backward(&mut cell));
        })
    });

    // Client encrypting to hop 3 of 3.
    let mut client = ClientCircuitCrypto::new();
    for n in 0..3 {
        client.add_hop(&keys(n)).expect("room");
    }
    g.bench_function("client_encrypt_3_hops", |b| {
        b.iter(|| {
            let mut cell = [0u8; RELAY_BODY_LEN];
            cell[0] = 2;
            black_box(client.encrypt_outbound(&mut cell, 2).expect("hop"));
        })
    });

    // Client decrypting a cell from hop 3 of 3 (exit state kept in step).
    let mut client = ClientCircuitCrypto::new();
    let mut hops: Vec<Tor1Layer> = Vec::new();
    for n in 0..3 {
        client.add_hop(&keys(n)).expect("room");
        hops.push(Tor1Layer::new(&keys(n)));
    }
    g.bench_function("client_decrypt_3_hops", |b| {
        b.iter(|| {
            let mut cell = [0u8; RELAY_BODY_LEN];
            cell[0] = 2;
            hops[2].originate_backward(&mut cell);
            hops[1].encrypt_backward(&mut cell);
            hops[0].encrypt_backward(&mut cell);
            black_box(client.decrypt_inbound(&mut cell).expect("recognised"));
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
