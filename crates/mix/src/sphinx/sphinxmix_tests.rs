//! Unit tests of the sphinxmix profile: subkeys, LIONESS, routing, SURBs,
//! and which msgpack types the wire accepts.
use super::*;

fn det_pad(buf: &mut [u8]) {
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
}

#[test]
fn subkey_vectors_from_seed() {
    // Vectors listed in the seed digest (Java's known answers).
    let z = [0u8; 16];
    assert_eq!(
        hex::encode(HopKeys::new(z).hrho),
        "5b506c5de47d367ea864d82983ab0564"
    );
    assert_eq!(
        hex::encode(mu(&z, &[0u8; 32])),
        "33ad0a1c607ec03b09e6cd9893680ce2"
    );
    assert_eq!(
        hex::encode(aes_key(&Point::generator())),
        "4dfc0fc4bf89db354d919e212d609602"
    );
    let hb = HopKeys::new(z).hb;
    assert_eq!(
        u128::from_be_bytes(hb),
        223545400317636578258278828935677691076u128
    );
}

/// Re-encodes a packet with the chosen fields of `[[alpha, beta, gamma],
/// body]` packed as str instead of bin.
fn reencode(pkt: &Packet, beta_str: bool, gamma_str: bool, body_str: bool) -> Vec<u8> {
    let f = |b: &[u8], as_str: bool| {
        if as_str {
            Value::Str(b.to_vec())
        } else {
            Value::Bin(b.to_vec())
        }
    };
    Value::Array(vec![
        Value::Array(vec![
            msgpack::ecpt_value(&pkt.header.alpha.to_compressed()),
            f(&pkt.header.beta, beta_str),
            f(&pkt.header.gamma, gamma_str),
        ]),
        f(&pkt.body, body_str),
    ])
    .encode()
}

#[test]
fn bytes_fields_must_be_bin() {
    // Python 3 sphinxmix 0.0.7 refuses a packet whose beta, gamma or body
    // arrives as a msgpack str (checked against the reference: it fails
    // to decode or to process it), so we refuse them too.
    let p = Params::LOOPIX;
    let mut rng = rand::thread_rng();
    let node = KeyPair::generate(&mut rng);
    let x = random_scalar(&mut rng);
    let pkt = create_forward_message(
        &p,
        &[nenc(Value::Int(0))],
        &[node.public],
        &Value::bin(b"bob"),
        b"hi",
        &x,
        &mut det_pad,
    )
    .expect("create");
    assert_eq!(reencode(&pkt, false, false, false), pkt.encode());
    assert_eq!(
        Packet::decode(&reencode(&pkt, false, false, false)).as_ref(),
        Ok(&pkt)
    );
    for (b, g, d) in [
        (true, false, false),
        (false, true, false),
        (false, false, true),
    ] {
        assert_eq!(
            Packet::decode(&reencode(&pkt, b, g, d)),
            Err(SphinxError::Malformed),
            "beta str {b}, gamma str {g}, body str {d}"
        );
    }
}

#[test]
fn routing_flags_python2_and_python3() {
    // Python 3 writes the flags as one-character str, Python 2 as bin.
    let py3 = Value::decode(&hex::decode("a2c3b0").expect("hex")).expect("msgpack");
    let py2 = Value::decode(&hex::decode("c401f0").expect("hex")).expect("msgpack");
    assert_eq!(flag_of(&py3), Some(RELAY_FLAG));
    assert_eq!(flag_of(&py2), Some(RELAY_FLAG));
    assert_eq!(
        flag_value(DEST_FLAG).encode(),
        hex::decode("a2c3b1").expect("hex")
    );
    // not a flag: two characters, empty, wrong type
    assert_eq!(flag_of(&Value::str("\u{f0}\u{f0}")), None);
    assert_eq!(flag_of(&Value::Bin(vec![])), None);
    assert_eq!(flag_of(&Value::Int(0xf0)), None);
}

#[test]
fn lioness_roundtrip() {
    let k = [7u8; 16];
    let m: Vec<u8> = (0..1024).map(|i| i as u8).collect();
    let mut c = m.clone();
    lioness_enc(&k, &mut c);
    assert_ne!(c, m);
    lioness_dec(&k, &mut c);
    assert_eq!(c, m);
}

#[test]
fn route_three_hops_and_surb() {
    let p = Params::LOOPIX;
    let mut rng = rand::thread_rng();
    let nodes: Vec<KeyPair> = (0..3).map(|_| KeyPair::generate(&mut rng)).collect();
    let names: Vec<Vec<u8>> = (0..3).map(|i| nenc(Value::Int(i))).collect();
    let keys: Vec<Point> = nodes.iter().map(|n| n.public).collect();
    let x = random_scalar(&mut rng);
    let pkt = create_forward_message(
        &p,
        &names,
        &keys,
        &Value::bin(b"bob"),
        b"hello",
        &x,
        &mut det_pad,
    )
    .expect("create");
    let wire = pkt.encode();
    assert_eq!(&wire[..2], &[0x92, 0x93]);
    let mut cur = Packet::decode(&wire).expect("decode");
    for (i, n) in nodes.iter().enumerate() {
        let out = process(&p, &n.secret, &cur.header, &cur.body).expect("process");
        let r = Value::decode(&out.routing).expect("routing");
        let arr = r.as_array().expect("array");
        if i < 2 {
            assert_eq!(flag_of(&arr[0]), Some(RELAY_FLAG));
            assert_eq!(arr[1], Value::Int(i as i128 + 1));
        } else {
            assert_eq!(flag_of(&arr[0]), Some(DEST_FLAG));
            let v = receive_forward(&out.mac_key, &out.packet.body).expect("mac");
            assert_eq!(
                v,
                Value::Array(vec![Value::bin(b"bob"), Value::bin(b"hello")])
            );
        }
        cur = out.packet;
    }
    // wrong key fails the MAC
    let pkt2 = Packet::decode(&wire).expect("decode");
    assert_eq!(
        process(&p, &nodes[1].secret, &pkt2.header, &pkt2.body).err(),
        Some(SphinxError::HeaderMac)
    );

    // SURB
    let surb =
        create_surb(&p, &names, &keys, &Value::bin(b"alice"), &x, &mut det_pad).expect("surb");
    let reply = package_surb(&p, &surb.header, &surb.ktilde, b"reply!").expect("package");
    let mut cur = reply;
    let mut last = None;
    for n in &nodes {
        let out = process(&p, &n.secret, &cur.header, &cur.body).expect("process");
        last = Some(out.routing.clone());
        cur = out.packet;
    }
    let r = Value::decode(&last.expect("hops")).expect("routing");
    assert_eq!(flag_of(&r.as_array().expect("arr")[0]), Some(SURB_FLAG));
    assert_eq!(
        receive_surb(&p, &surb.keytuple, &cur.body).expect("surb body"),
        b"reply!"
    );
}
