//! Live cross-implementation tests against Python sphinxmix 0.0.7 in both
//! directions. Skipped with a message when the venv is missing (run
//! `bash scripts/sphinxmix/setup-venv.sh`); fail under
//! ONIONMIX_REQUIRE_INTEROP=1.

mod common;

use common::*;
use onionmix_mix::sphinx::msgpack::{self, Value};
use onionmix_mix::sphinx::p224::Point;
use onionmix_mix::sphinx::sphinxmix::{self, KeyPair, Packet, Params};
use rand::RngCore;
use serde_json::json;

fn rand_hex(n: usize) -> String {
    let mut b = vec![0u8; n];
    rand::thread_rng().fill_bytes(&mut b);
    hex::encode(b)
}

fn loopix_routing(n: usize) -> serde_json::Value {
    let ents: Vec<serde_json::Value> = (0..n)
        .map(|i| {
            json!({"host": "127.0.0.1", "port": 40000 + i, "drop": i == n - 1 && n.is_multiple_of(2),
                   "type": null, "delay": 0.001 * (i as f64) + 0.25, "name": format!("node{i}")})
        })
        .collect();
    serde_json::Value::Array(ents)
}

#[test]
fn random_vectors_match_reference() {
    let Some(py) = sphinxmix_python("random_vectors_match_reference") else {
        return;
    };
    for hops in [1usize, 3, 6] {
        let req = json!({
            "op": "vector", "header_len": 1024, "body_len": 1024,
            "x": rand_hex(27),
            "secrets": (0..hops).map(|_| rand_hex(27)).collect::<Vec<_>>(),
            "loopix_routing": loopix_routing(hops),
            "dest": {"loopix": ["127.0.0.1", 40999, "receiver"]},
            "msg": rand_hex(300),
        });
        let resp = tool(&py, &req);
        check_vector(&req, &resp);
    }
}

#[test]
fn python_packets_processed_by_rust() {
    let Some(py) = sphinxmix_python("python_packets_processed_by_rust") else {
        return;
    };
    let p = Params::LOOPIX;
    let mut rng = rand::thread_rng();
    let nodes: Vec<KeyPair> = (0..6).map(|_| KeyPair::generate(&mut rng)).collect();
    let pubs: Vec<String> = nodes
        .iter()
        .map(|n| hex::encode(msgpack::ecpt_value(&n.public.to_compressed()).encode()))
        .collect();
    let msg = rand_hex(500);
    let req = json!({"op": "create", "header_len": 1024, "body_len": 1024, "pubs": pubs,
                     "loopix_routing": loopix_routing(6), "dest": {"loopix": ["127.0.0.1", 40005, "node5"]},
                     "msg": msg, "surb": true});
    let resp = tool(&py, &req);
    let mut cur = Packet::decode(&hexs(&resp["packet"])).expect("python packet decodes");
    let routing = resp["routing"].as_array().expect("routing");
    for (i, n) in nodes.iter().enumerate() {
        let out = sphinxmix::process(&p, &n.secret, &cur.header, &cur.body)
            .expect("process python packet");
        let r = Value::decode(&out.routing).expect("routing msgpack");
        let arr = r.as_array().expect("routing array");
        if i + 1 < nodes.len() {
            assert_eq!(sphinxmix::flag_of(&arr[0]), Some(sphinxmix::RELAY_FLAG));
            assert_eq!(
                hex::encode(&out.routing),
                routing[i + 1].as_str().expect("hex")
            );
        } else {
            assert_eq!(sphinxmix::flag_of(&arr[0]), Some(sphinxmix::DEST_FLAG));
            let v = sphinxmix::receive_forward(&out.mac_key, &out.packet.body).expect("body MAC");
            let a = v.as_array().expect("(dest, msg)");
            assert_eq!(
                a[1].as_str_or_bin().expect("bytes"),
                &hex::decode(&msg).expect("hex")[..]
            );
            assert_eq!(a[0].as_array().expect("dest")[2], Value::str("node5"));
        }
        cur = out.packet;
    }
    // A reply sent on a Python-made SURB, processed by our hops and read with
    // the Python-side keytuple.
    let surb = &resp["surb"];
    let mut cur = Packet::decode(&hexs(&surb["reply_packet"])).expect("surb reply decodes");
    let mut last_routing = Vec::new();
    for n in &nodes {
        let out =
            sphinxmix::process(&p, &n.secret, &cur.header, &cur.body).expect("process surb reply");
        last_routing = out.routing;
        cur = out.packet;
    }
    let r = Value::decode(&last_routing).expect("routing");
    assert_eq!(
        sphinxmix::flag_of(&r.as_array().expect("arr")[0]),
        Some(sphinxmix::SURB_FLAG)
    );
    let keytuple: Vec<[u8; 16]> = surb["keytuple"]
        .as_array()
        .expect("keytuple")
        .iter()
        .map(|k| hexs(k).try_into().expect("16 bytes"))
        .collect();
    assert_eq!(
        sphinxmix::receive_surb(&p, &keytuple, &cur.body).expect("surb body"),
        b"surb reply"
    );
}

#[test]
fn rust_packets_processed_by_python() {
    let Some(py) = sphinxmix_python("rust_packets_processed_by_python") else {
        return;
    };
    let p = Params::LOOPIX;
    let mut rng = rand::thread_rng();
    let secrets: Vec<String> = (0..6).map(|_| rand_hex(27)).collect();
    let keys: Vec<Point> = secrets
        .iter()
        .map(|s| {
            KeyPair::from_secret_bytes(&hex::decode(s).expect("hex"))
                .expect("key")
                .public
        })
        .collect();
    let routing: Vec<Vec<u8>> = (0..6)
        .map(|i| {
            sphinxmix::nenc(Value::Array(vec![
                Value::Array(vec![Value::str("127.0.0.1"), Value::Int(41000 + i)]),
                Value::Bool(false),
                Value::Nil,
                Value::F64(0.5),
                Value::str(&format!("hop{i}")),
            ]))
        })
        .collect();
    let msg: Vec<u8> = (0..600).map(|i| (i * 13 % 256) as u8).collect();
    let dest = Value::Array(vec![
        Value::str("127.0.0.1"),
        Value::Int(41005),
        Value::str("hop5"),
    ]);
    let x = sphinxmix::random_scalar(&mut rng);
    let pkt = sphinxmix::create_forward_message(
        &p,
        &routing,
        &keys,
        &dest,
        &msg,
        &x,
        &mut |b: &mut [u8]| rand::thread_rng().fill_bytes(b),
    )
    .expect("create");
    let resp = tool(
        &py,
        &json!({"op": "process", "header_len": 1024, "body_len": 1024,
                                 "secrets": secrets, "packet": hex::encode(pkt.encode())}),
    );
    let hops = resp["hops"].as_array().expect("hops");
    assert_eq!(hops.len(), 6, "python processed every hop");
    for (i, hop) in hops.iter().enumerate().take(5) {
        assert_eq!(hexs(&hop["routing"]), routing[i + 1], "hop {i} routing");
    }
    assert_eq!(
        resp["final"]["msg"]["bin"].as_str().expect("msg"),
        hex::encode(&msg)
    );
    assert_eq!(
        resp["final"]["dest"][2]["str"].as_str().expect("dest name"),
        "hop5"
    );
}
