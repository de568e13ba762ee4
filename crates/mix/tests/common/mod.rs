//! Shared helpers for the interop tests: locating the sphinxmix venv.
#![allow(dead_code)]

use std::io::Write;

use onionmix_mix::sphinx::msgpack::Value;
use onionmix_mix::sphinx::p224::{Point, scalar_from_be_mod_n};
use onionmix_mix::sphinx::sphinxmix::{self, Packet, Params};
use std::path::PathBuf;
use std::process::{Command, Stdio};

pub use onionmix_testsupport::repo_root;

pub fn fixture(name: &str) -> serde_json::Value {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name);
    let s = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()));
    serde_json::from_str(&s).expect("fixture is JSON")
}

#[allow(unused_imports)]
pub use onionmix_testsupport::sphinxmix_python;

/// Runs scripts/sphinxmix/sphinxmix_tool.py with a JSON request.
pub fn tool(py: &PathBuf, req: &serde_json::Value) -> serde_json::Value {
    let script = repo_root().join("scripts/sphinxmix/sphinxmix_tool.py");
    let mut child = Command::new(py)
        .arg(&script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start python");
    child
        .stdin
        .take()
        .expect("stdin piped")
        .write_all(req.to_string().as_bytes())
        .expect("write request");
    let out = child.wait_with_output().expect("python finishes");
    assert!(
        out.status.success(),
        "sphinxmix_tool failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("tool prints JSON")
}

pub fn hexs(v: &serde_json::Value) -> Vec<u8> {
    hex::decode(v.as_str().expect("hex string")).expect("valid hex")
}

/// Secret given as a JSON int or big-endian hex -> 28-byte big-endian.
pub fn secret28(v: &serde_json::Value) -> [u8; 28] {
    let bytes = match v {
        serde_json::Value::Number(n) => n.as_u64().expect("small int").to_be_bytes().to_vec(),
        serde_json::Value::String(_) => hexs(v),
        _ => panic!("bad secret"),
    };
    let mut out = [0u8; 28];
    let n = bytes.len().min(28);
    out[28 - n..].copy_from_slice(&bytes[bytes.len() - n..]);
    out
}

pub fn det_pad(buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
}

pub fn dest_value(req: &serde_json::Value) -> Value {
    match &req["dest"] {
        serde_json::Value::String(s) => Value::Bin(hex::decode(s).expect("hex")),
        d => {
            let l = d["loopix"].as_array().expect("loopix dest");
            Value::Array(vec![
                Value::str(l[0].as_str().expect("host")),
                Value::Int(i128::from(l[1].as_u64().expect("port"))),
                Value::str(l[2].as_str().expect("name")),
            ])
        }
    }
}

pub fn check_vector(req: &serde_json::Value, resp: &serde_json::Value) {
    let p = Params {
        header_len: req["header_len"].as_u64().expect("header_len") as usize,
        body_len: req["body_len"].as_u64().expect("body_len") as usize,
    };
    let secrets: Vec<[u8; 28]> = req["secrets"]
        .as_array()
        .expect("secrets")
        .iter()
        .map(secret28)
        .collect();
    let keys: Vec<Point> = secrets
        .iter()
        .map(|s| Point::generator().mul(s).expect("nonzero"))
        .collect();
    let routing: Vec<Vec<u8>> = resp["routing"]
        .as_array()
        .expect("routing")
        .iter()
        .map(hexs)
        .collect();
    let x = scalar_from_be_mod_n(&secret28(&req["x"]));
    let msg = hexs(&req["msg"]);
    let pkt = sphinxmix::create_forward_message(
        &p,
        &routing,
        &keys,
        &dest_value(req),
        &msg,
        &x,
        &mut det_pad,
    )
    .expect("create");
    assert_eq!(
        hex::encode(pkt.header.alpha.to_compressed()),
        resp["alpha"].as_str().expect("alpha")
    );
    assert_eq!(
        hex::encode(&pkt.header.beta),
        resp["beta"].as_str().expect("beta"),
        "beta differs"
    );
    assert_eq!(
        hex::encode(pkt.header.gamma),
        resp["gamma"].as_str().expect("gamma"),
        "gamma (MAC) differs"
    );
    assert_eq!(
        hex::encode(&pkt.body),
        resp["body"].as_str().expect("body"),
        "body differs"
    );
    assert_eq!(
        hex::encode(pkt.encode()),
        resp["packet"].as_str().expect("packet"),
        "wire bytes differ"
    );

    // Each hop's processing equals the reference's.
    let mut cur = Packet::decode(&hexs(&resp["packet"])).expect("decode reference packet");
    let hops = resp["hops"].as_array().expect("hops");
    assert_eq!(hops.len(), secrets.len());
    for (i, (hop, sec)) in hops.iter().zip(&secrets).enumerate() {
        let out = sphinxmix::process(&p, sec, &cur.header, &cur.body).expect("process");
        assert_eq!(
            hex::encode(out.tag),
            hop["tag"].as_str().expect("tag"),
            "hop {i} tag"
        );
        assert_eq!(
            hex::encode(&out.routing),
            hop["routing"].as_str().expect("routing"),
            "hop {i} routing"
        );
        assert_eq!(
            hex::encode(out.mac_key),
            hop["mac_key"].as_str().expect("mac_key"),
            "hop {i} mac key"
        );
        assert_eq!(
            hex::encode(out.packet.encode()),
            hop["next"].as_str().expect("next"),
            "hop {i} output"
        );
        cur = out.packet;
        if i + 1 == hops.len() {
            let v = sphinxmix::receive_forward(&out.mac_key, &cur.body).expect("final body MAC");
            let arr = v.as_array().expect("(dest, msg)");
            assert_eq!(arr[0], dest_value(req));
            assert_eq!(arr[1].as_str_or_bin().expect("msg bytes"), &msg[..]);
        }
    }
}
