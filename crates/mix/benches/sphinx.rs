//! Sphinx benchmarks: per-hop processing and packet creation for both
//! profiles, beside Nym's `sphinx-packet` 0.8.0 in the same run.
//!
//! `cargo bench -p onionmix-mix --bench sphinx`

use criterion::{Criterion, criterion_group, criterion_main};
use onionmix_mix::loopix::codec::{self, Dest, Hop, Profile, ProfileKind, RoutingEntry, SecretKey};
use onionmix_mix::sphinx::sphinxmix;
use std::hint::black_box;

fn loopix_path(kind: ProfileKind, hops: usize) -> (Vec<SecretKey>, Vec<Hop>, Dest) {
    let mut rng = rand::thread_rng();
    let keys: Vec<SecretKey> = (0..hops)
        .map(|_| SecretKey::generate(kind, &mut rng))
        .collect();
    let path = keys
        .iter()
        .enumerate()
        .map(|(i, k)| Hop {
            entry: RoutingEntry {
                host: "127.0.0.1".into(),
                port: 30000 + i as u16,
                drop: false,
                type_flag: None,
                delay: 0.001,
                name: format!("node{i}"),
            },
            key: k.public(),
        })
        .collect();
    let dest = Dest {
        host: "127.0.0.1".into(),
        port: 30005,
        name: "node5".into(),
    };
    (keys, path, dest)
}

fn bench_ours(c: &mut Criterion) {
    let mut g = c.benchmark_group("sphinx");
    for kind in [ProfileKind::Sphinxmix, ProfileKind::X25519] {
        let profile = Profile::loopix(kind);
        let (keys, path, dest) = loopix_path(kind, 6);
        let msg = vec![7u8; 502];
        let pkt = codec::build_packet(&profile, &path, &dest, &msg, &mut rand::thread_rng())
            .expect("build")
            .bytes;
        // One hop as a node does it: parse the datagram, process, decode the
        // routing entry, re-encode the outgoing datagram.
        g.bench_function(format!("process_hop/{kind}"), |b| {
            b.iter(|| {
                codec::process_datagram(&profile, &keys[0], black_box(&pkt)).expect("process")
            })
        });
        g.bench_function(format!("create_6hop/{kind}"), |b| {
            b.iter(|| {
                codec::build_packet(
                    &profile,
                    black_box(&path),
                    &dest,
                    &msg,
                    &mut rand::thread_rng(),
                )
                .expect("build")
            })
        });
    }
    // sphinxmix core only (no msgpack parse/encode).
    let (keys, path, dest) = loopix_path(ProfileKind::Sphinxmix, 6);
    let profile = Profile::loopix(ProfileKind::Sphinxmix);
    let bytes = codec::build_packet(&profile, &path, &dest, &[1u8; 100], &mut rand::thread_rng())
        .expect("build")
        .bytes;
    let pkt = sphinxmix::Packet::decode(&bytes).expect("decode");
    let SecretKey::P224(sk) = &keys[0] else {
        return;
    };
    g.bench_function("process_core/sphinxmix", |b| {
        b.iter(|| {
            sphinxmix::process(
                &sphinxmix::Params::LOOPIX,
                sk,
                black_box(&pkt.header),
                &pkt.body,
            )
            .expect("process")
        })
    });
    g.finish();
}

fn bench_nym(c: &mut Criterion) {
    use sphinx_packet::SphinxPacket;
    use sphinx_packet::constants::{
        DESTINATION_ADDRESS_LENGTH, IDENTIFIER_LENGTH, NODE_ADDRESS_LENGTH,
    };
    use sphinx_packet::crypto::{PrivateKey, PublicKey};
    use sphinx_packet::header::delays;
    use sphinx_packet::route::{Destination, DestinationAddressBytes, Node, NodeAddressBytes};

    let mut rng = rand::thread_rng();
    let mut secrets = Vec::new();
    let mut route = Vec::new();
    for i in 0..5u8 {
        let mut s = [0u8; 32];
        rand::RngCore::fill_bytes(&mut rng, &mut s);
        let sk = PrivateKey::from(s);
        let pk = PublicKey::from(&sk);
        route.push(Node::new(
            NodeAddressBytes::from_bytes([i; NODE_ADDRESS_LENGTH]),
            pk,
        ));
        secrets.push(sk);
    }
    let delays =
        delays::generate_from_average_duration(route.len(), std::time::Duration::from_millis(1));
    let destination = Destination::new(
        DestinationAddressBytes::from_bytes([3u8; DESTINATION_ADDRESS_LENGTH]),
        [4u8; IDENTIFIER_LENGTH],
    );
    let message = vec![13u8; 502];
    let packet =
        SphinxPacket::new(message.clone(), &route, &destination, &delays).expect("nym packet");
    let bytes = packet.to_bytes();
    let mut g = c.benchmark_group("sphinx");
    g.bench_function("process_hop/nym-sphinx-packet-0.8.0", |b| {
        b.iter(|| {
            SphinxPacket::from_bytes(black_box(&bytes))
                .expect("parse")
                .process(&secrets[0])
                .expect("process")
        })
    });
    g.bench_function("create_5hop/nym-sphinx-packet-0.8.0", |b| {
        b.iter(|| {
            SphinxPacket::new(message.clone(), black_box(&route), &destination, &delays)
                .expect("new")
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(3));
    targets = bench_ours, bench_nym
}
criterion_main!(benches);
