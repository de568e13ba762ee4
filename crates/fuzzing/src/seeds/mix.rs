//! Seeds for the Loopix and Sphinx targets (crates/mix).

use onionmix_mix::loopix::codec::{
    self, Control, Profile, ProfileKind, RoutingEntry, legacy_pull, legacy_subscribe,
};
use onionmix_mix::loopix::control::{AuthRequest, ControlKey, ControlKind};
use onionmix_mix::sphinx::msgpack::Value;

use super::{Seed, cat, chunk};
use crate::fixtures::{self, NOW};
use crate::mix::{dest_of, hop_to};

pub(super) fn mix(out: &mut Vec<Seed>) {
    for kind in [ProfileKind::Sphinxmix, ProfileKind::X25519] {
        let f = fixtures::loopix(kind);
        let profile = Profile::loopix(kind);
        let prov = &f.dir.providers[0];
        let mixn = &f.dir.mixes[0].node;
        let c = &f.dir.clients[1].node;
        let entry = |n: &onionmix_mix::directory::NodeInfo| RoutingEntry {
            host: n.host.clone(),
            port: n.port,
            drop: false,
            type_flag: Some(codec::TYPE_REAL),
            delay: 0.25,
            name: n.name.clone(),
        };
        let path = [
            hop_to(mixn, entry(mixn)),
            hop_to(prov, entry(prov)),
            hop_to(c, entry(c)),
        ];
        let dest = dest_of(c);
        let built = codec::build_packet(
            &profile,
            &path,
            &dest,
            b"hello loopix",
            &mut fixtures::rng(6),
        )
        .expect("packet");
        let routing: Vec<Vec<u8>> = path.iter().map(|h| h.entry.encode(kind)).collect();
        let (target, dest_bytes) = match kind {
            ProfileKind::Sphinxmix => (
                "sphinxmix",
                Value::Array(vec![
                    Value::str(&c.host),
                    Value::Int(i128::from(c.port)),
                    Value::str(&c.name),
                ])
                .encode(),
            ),
            ProfileKind::X25519 => ("sphinx_x25519", b"\x75\x33\x09127.0.0.1client1".to_vec()),
        };
        out.push((target, "datagram".into(), cat(&[&[0], &built.bytes])));
        for sel in [1u8, 2] {
            let n = 1 + usize::from(sel & 1);
            let mut s = vec![sel];
            for r in routing.iter().take(n) {
                s.extend(chunk(r));
            }
            s.extend(chunk(&dest_bytes));
            s.extend(chunk(b"message"));
            s.extend([0x42; 40]);
            out.push((target, format!("build{n}"), s));
        }
        // Nodes: subscribe, a packet for client0 and client1, pull, time.
        let sel = u8::from(kind == ProfileKind::Sphinxmix);
        let mut ops = vec![sel];
        ops.extend([3, 0, 0, 0, 0, 0, 0, 0]); // SUBSCRIBE client0, on time
        ops.extend([4, 0]);
        ops.extend(chunk(b"to client0"));
        ops.extend([4, 1]);
        ops.extend(chunk(b"to client1"));
        ops.extend([3, 0, 1, 0, 0, 0, 5, 0]); // PULL client0
        ops.extend([3, 1, 1, 0, 0, 0, 9, 0]); // PULL client1
        ops.extend([5, 0, 200]);
        ops.extend([3, 0, 1, 0xff, 0xff, 0, 0, 1]);
        ops.extend(chunk(b"provider9"));
        ops.extend([0]);
        ops.extend(chunk(&legacy_pull("client0")));
        ops.extend([5, 0, 200]);
        out.push(("loopix_nodes", format!("{kind}"), ops));
    }
    let f = fixtures::loopix(ProfileKind::X25519);
    let prov = &f.dir.providers[0];
    let c = &f.dir.clients[0].node;
    let k = ControlKey::derive(
        &f.client_keys[0],
        &prov.key,
        &c.name,
        &c.key,
        &prov.name,
        &prov.key,
    )
    .expect("control key");
    let sub = Control::Auth(AuthRequest::sign(
        &k,
        ControlKind::Subscribe,
        &c.name,
        &prov.name,
        NOW * 1000,
    ))
    .encode();
    for (name, b) in [
        ("subscribe", sub.clone()),
        (
            "pull",
            Control::Auth(AuthRequest::sign(
                &k,
                ControlKind::Pull,
                &c.name,
                &prov.name,
                NOW * 1000 + 1,
            ))
            .encode(),
        ),
        (
            "legacy-subscribe",
            legacy_subscribe("client0", "127.0.0.1", 9999),
        ),
        ("legacy-pull", legacy_pull("client0")),
        ("dummy", Control::dummy(8, &mut fixtures::rng(8))),
    ] {
        out.push(("loopix_control", name.into(), b.clone()));
        out.push(("msgpack", name.into(), b));
    }
    let values = Value::Array(vec![
        Value::Nil,
        Value::Bool(true),
        Value::Int(-1),
        Value::Int(300),
        Value::Int(-40_000),
        Value::Int(1 << 40),
        Value::F64(0.25),
        Value::Map(vec![(Value::str("k"), Value::bin(b"v"))]),
        Value::Ext(2, vec![1, 2, 3, 4]),
        Value::Ext(5, vec![0; 20]),
        Value::Str(vec![b'x'; 40]),
    ]);
    out.push(("msgpack", "kinds".into(), values.encode()));
}
