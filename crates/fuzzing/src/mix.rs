//! crates/mix: both Sphinx profiles (packet decoding and processing with a
//! fixed node key), petlib's msgpack, Loopix control messages, and the
//! provider, mix and client machines fed datagrams.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use rand::RngCore;

use onionmix_mix::loopix::codec::{
    self, Control, Dest, Hop, Outcome, Profile, ProfileKind, PublicKey, RoutingEntry, SecretKey,
    process_datagram,
};
use onionmix_mix::loopix::config::LoopixParams;
use onionmix_mix::loopix::control::{AuthRequest, ControlKey, ControlKind};
use onionmix_mix::loopix::node::{ClientNode, MixNode};
use onionmix_mix::sphinx::msgpack::Value;
use onionmix_mix::sphinx::p224::{Point, scalar_from_be_mod_n};
use onionmix_mix::sphinx::{sphinxmix, x25519};

use crate::fixtures::{self, LoopixFixture, NOW};
use crate::input::Input;

/// msgpack as petlib writes it (Sphinx headers, routing entries, control
/// messages). Whatever decodes must encode to bytes that decode to the
/// same value; a prefix decode must agree with a whole decode.
pub fn msgpack(data: &[u8]) {
    if let Ok(v) = Value::decode(data) {
        let enc = v.encode();
        let back = Value::decode(&enc).expect("an encoded value decodes");
        // Compared as bytes: NaN floats are not equal to themselves.
        assert_eq!(back.encode(), enc, "msgpack round trip");
        let mut raw = Vec::new();
        v.encode_into(&mut raw, false);
        let _ = Value::decode(&raw);
    }
    if let Ok((v, n)) = Value::decode_prefix(data) {
        assert!(n <= data.len());
        let whole = Value::decode(&data[..n]).expect("a decoded prefix decodes alone");
        assert_eq!(whole.encode(), v.encode());
    }
    let _ = onionmix_mix::sphinx::msgpack::ecpt_bytes(&Value::Bin(data.to_vec()));
}

fn keys_of(f: &LoopixFixture) -> [(Arc<SecretKey>, PublicKey); 2] {
    let mix = f.dir.mixes[0].node.key;
    let provider = f.dir.providers[0].key;
    [(f.mix_key.clone(), mix), (f.provider_key.clone(), provider)]
}

/// The sphinxmix profile (PyPI sphinxmix 0.0.7 on NIST P-224, Loopix
/// lengths). First byte: 0 processes the rest as a datagram at the mix
/// (and unpacks it as a `pack_message`); otherwise a packet is built
/// along one or two hops (mix, provider) from fuzzed routing entries,
/// destination and message, and each hop must recover exactly what was
/// put in.
pub fn sphinxmix(data: &[u8]) {
    let f = fixtures::loopix(ProfileKind::Sphinxmix);
    let profile = Profile::loopix(ProfileKind::Sphinxmix);
    let Profile::Sphinxmix(p) = profile else {
        return;
    };
    let mut inp = Input::new(data);
    let sel = inp.u8();
    let hops = keys_of(f);
    if sel == 0 {
        let rest = inp.rest();
        let _ = process_datagram(&profile, &hops[0].0, rest);
        let _ = sphinxmix::Packet::unpack_message(rest);
        return;
    }
    let n = 1 + usize::from(sel & 1);
    let routing: Vec<Vec<u8>> = (0..n).map(|_| inp.chunk().to_vec()).collect();
    let dest = match Value::decode(inp.chunk()) {
        Ok(v) => v,
        Err(_) => Value::Nil,
    };
    let msg = inp.chunk().to_vec();
    let x = scalar_from_be_mod_n(&inp.array::<40>());
    let keys: Vec<Point> = hops[..n]
        .iter()
        .map(|(_, pk)| match pk {
            PublicKey::P224(pt) => *pt,
            PublicKey::X25519(_) => Point::generator(),
        })
        .collect();
    let mut pad = |b: &mut [u8]| b.fill(0x5a);
    let Ok(pkt) = sphinxmix::create_forward_message(&p, &routing, &keys, &dest, &msg, &x, &mut pad)
    else {
        return;
    };
    let wire = pkt.encode();
    assert_eq!(
        sphinxmix::Packet::decode(&wire).as_ref(),
        Ok(&pkt),
        "packet round trip"
    );
    let mut cur = pkt;
    for (i, (sk, _)) in hops[..n].iter().enumerate() {
        let SecretKey::P224(secret) = &**sk else {
            return;
        };
        let out = sphinxmix::process(&p, secret, &cur.header, &cur.body)
            .expect("a hop processes a packet made for it");
        // The first hop's entry is not carried (as in sphinxmix): hop i
        // reads the entry written for hop i+1, or the destination flag.
        if i + 1 < n {
            assert_eq!(out.routing, routing[i + 1], "routing entry round trip");
        } else {
            let v = Value::decode(&out.routing).expect("final routing decodes");
            let flag = v
                .as_array()
                .and_then(|a| a.first())
                .and_then(sphinxmix::flag_of);
            assert_eq!(flag, Some(sphinxmix::DEST_FLAG));
            let got = sphinxmix::receive_forward(&out.mac_key, &out.packet.body)
                .expect("the destination reads the body");
            let want = Value::Array(vec![dest.clone(), Value::Bin(msg.clone())]);
            assert_eq!(got.encode(), want.encode(), "payload round trip");
        }
        // What the node itself does with the datagram, routing and all.
        let _ = process_datagram(&profile, sk, &cur.encode());
        cur = out.packet;
    }
}

/// The x25519 profile. First byte: 0 processes the rest as a datagram at
/// the mix; otherwise a packet is built along one or two hops from fuzzed
/// routing entries, destination and message, and each hop must recover
/// exactly what was put in.
pub fn sphinx_x25519(data: &[u8]) {
    let f = fixtures::loopix(ProfileKind::X25519);
    let profile = Profile::loopix(ProfileKind::X25519);
    let Profile::X25519(p) = profile else {
        return;
    };
    let mut inp = Input::new(data);
    let sel = inp.u8();
    let hops = keys_of(f);
    if sel == 0 {
        let rest = inp.rest();
        let _ = process_datagram(&profile, &hops[0].0, rest);
        let _ = x25519::Packet::decode(&p, rest);
        return;
    }
    let n = 1 + usize::from(sel & 1);
    let routing: Vec<Vec<u8>> = (0..n).map(|_| inp.chunk().to_vec()).collect();
    let dest = inp.chunk().to_vec();
    let msg = inp.chunk().to_vec();
    let mut rng = fixtures::rng(u64::from(inp.u32()));
    let keys: Vec<[u8; 32]> = hops[..n]
        .iter()
        .map(|(_, pk)| match pk {
            PublicKey::X25519(k) => *k,
            PublicKey::P224(_) => [9; 32],
        })
        .collect();
    let Ok(pkt) = x25519::create_forward(&p, &routing, &keys, &dest, &msg, &mut rng) else {
        return;
    };
    let wire = pkt.encode();
    assert_eq!(x25519::Packet::decode(&p, &wire).as_ref(), Ok(&pkt));
    let mut cur = pkt;
    for (i, (sk, _)) in hops[..n].iter().enumerate() {
        let SecretKey::X25519(secret) = &**sk else {
            return;
        };
        let out = x25519::process(&p, secret, &cur).expect("a hop processes a packet made for it");
        if i + 1 < n {
            assert_eq!(out.routing, routing[i + 1], "routing entry round trip");
        } else {
            assert!(out.routing.is_empty(), "the last hop is the destination");
            let (d, m) =
                x25519::receive_forward(&out.packet.body).expect("the destination reads the body");
            assert_eq!((d, m), (dest.clone(), msg.clone()), "payload round trip");
        }
        let _ = process_datagram(&profile, sk, &cur.encode());
        cur = out.packet;
    }
}

/// Control messages between clients and providers (authenticated
/// SUBSCRIBE/PULL, the reference's unauthenticated ones, dummies): what
/// parses must encode to something that parses the same.
pub fn loopix_control(data: &[u8]) {
    let Some(c) = Control::parse(data) else {
        return;
    };
    let enc = c.encode();
    let back = Control::parse(&enc).expect("an encoded control message parses");
    assert_eq!(back, c, "control round trip");
    if let Control::Auth(r) = &c {
        let f = fixtures::loopix(ProfileKind::X25519);
        let provider = &f.dir.providers[0];
        let client = &f.dir.clients[0].node;
        if let Some(k) = ControlKey::derive(
            &f.client_keys[0],
            &provider.key,
            &client.name,
            &client.key,
            &provider.name,
            &provider.key,
        ) {
            let _ = r.verify(&k);
        }
    }
}

/// The secret key of the node listening on `port`.
fn key_for_port(f: &LoopixFixture, port: u16) -> Arc<SecretKey> {
    if let Some(i) = f.dir.clients.iter().position(|c| c.node.port == port) {
        return Arc::new(f.client_keys[i].clone());
    }
    if f.dir.mixes.iter().any(|m| m.node.port == port) {
        return f.mix_key.clone();
    }
    f.provider_key.clone()
}

fn node_params() -> LoopixParams {
    LoopixParams {
        exp_params_payload: 0.0,
        exp_params_loops: 0.0,
        exp_params_drop: 0.0,
        noise_length: 16,
        max_retrieve: 3,
        max_stored_per_client: 64,
        max_queue: 256,
        replay_cache: 1024,
        send_queue: 8,
        ..LoopixParams::default()
    }
}

/// A Sphinx hop to `n` with routing entry `entry`.
pub(crate) fn hop_to(n: &onionmix_mix::directory::NodeInfo, entry: RoutingEntry) -> Hop {
    Hop { entry, key: n.key }
}

/// `n` as a packet's final destination.
pub(crate) fn dest_of(n: &onionmix_mix::directory::NodeInfo) -> Dest {
    Dest {
        host: n.host.clone(),
        port: n.port,
        name: n.name.clone(),
    }
}

fn entry(n: &onionmix_mix::directory::NodeInfo) -> RoutingEntry {
    RoutingEntry {
        host: n.host.clone(),
        port: n.port,
        drop: false,
        type_flag: None,
        delay: 0.0,
        name: n.name.clone(),
    }
}

/// The nodes [`loopix_nodes`] starts every input from: a provider, a mix
/// and `client0` of one profile's fixture network, with the provider's
/// clock at [`NOW`], and the control keys the harness signs requests
/// with. Built once per profile and cloned per input: building them
/// checks each secret key against the directory and derives the client's
/// control key (elliptic-curve multiplications that are the same for
/// every input, not what the target tests).
struct LoopixNodes {
    t0: Instant,
    provider: MixNode,
    mix: MixNode,
    client: ClientNode,
    /// `client0`'s and `client1`'s control keys with the provider.
    control_keys: [Option<ControlKey>; 2],
}

fn make_loopix_nodes(kind: ProfileKind) -> Option<LoopixNodes> {
    let f = fixtures::loopix(kind);
    let profile = Profile::loopix(kind);
    let t0 = Instant::now();
    let params = node_params();
    let mut provider = MixNode::new(
        "provider0",
        true,
        profile,
        f.provider_key.clone(),
        f.dir.clone(),
        params.clone(),
        t0,
    )
    .ok()?;
    provider.set_wall_clock(t0, NOW * 1000);
    let mix = MixNode::new(
        "mix0_0",
        false,
        profile,
        f.mix_key.clone(),
        f.dir.clone(),
        params.clone(),
        t0,
    )
    .ok()?;
    let client = ClientNode::new(
        "client0",
        profile,
        f.client_keys[0].clone(),
        f.dir.clone(),
        params,
        t0,
    )
    .ok()?;
    let prov = &f.dir.providers[0];
    let control_keys = [0, 1].map(|who| {
        let c = &f.dir.clients[who].node;
        ControlKey::derive(
            &f.client_keys[who],
            &prov.key,
            &c.name,
            &c.key,
            &prov.name,
            &prov.key,
        )
    });
    Some(LoopixNodes {
        t0,
        provider,
        mix,
        client,
        control_keys,
    })
}

fn loopix_nodes_of(kind: ProfileKind) -> Option<&'static LoopixNodes> {
    static P: OnceLock<Option<LoopixNodes>> = OnceLock::new();
    static X: OnceLock<Option<LoopixNodes>> = OnceLock::new();
    match kind {
        ProfileKind::Sphinxmix => P.get_or_init(|| make_loopix_nodes(kind)),
        ProfileKind::X25519 => X.get_or_init(|| make_loopix_nodes(kind)),
    }
    .as_ref()
}

/// Build this module's fixtures.
pub(crate) fn warm_up() {
    let _ = loopix_nodes_of(ProfileKind::Sphinxmix);
    let _ = loopix_nodes_of(ProfileKind::X25519);
}

/// A Loopix provider, a mix and a client fed datagrams, with the
/// provider's clock at [`NOW`]. First byte: bit 0 picks the profile
/// (x25519 or sphinxmix). Then operations: a raw datagram to the
/// provider, the mix or the client (from some source address), a control
/// request signed with a client's key (fuzzed kind, timestamp, names),
/// a genuine packet for a client through the provider, or time passing.
/// Everything a node sends must be a control message or a packet its
/// receiver can process. Every input starts from the same fresh nodes
/// ([`LoopixNodes`]).
pub fn loopix_nodes(data: &[u8]) {
    let mut inp = Input::new(data);
    let kind = if inp.u8() & 1 == 0 {
        ProfileKind::X25519
    } else {
        ProfileKind::Sphinxmix
    };
    let f = fixtures::loopix(kind);
    let profile = Profile::loopix(kind);
    let Some(nodes) = loopix_nodes_of(kind) else {
        return;
    };
    let t0 = nodes.t0;
    let mut now = t0;
    let mut provider = nodes.provider.clone();
    let mut mix = nodes.mix.clone();
    let mut client = nodes.client.clone();
    let prov = &f.dir.providers[0];
    let mut rng = fixtures::rng(9);
    // Bounded work per input: sphinxmix packets cost milliseconds each.
    let mut steps = 0;
    let mut built = 0;
    while !inp.is_empty() && steps < 48 {
        steps += 1;
        let op = inp.u8();
        let from = IpAddr::V4(Ipv4Addr::new(10, 0, 0, op >> 5));
        match op % 6 {
            0 => provider.handle_datagram(now, from, inp.chunk()),
            1 => mix.handle_datagram(now, from, inp.chunk()),
            2 => client.handle_datagram(now, inp.chunk()),
            3 => {
                // A signed request: which client, kind, clock offset, names.
                let who = usize::from(inp.u8() & 1);
                let c = &f.dir.clients[who].node;
                let kind = if inp.u8() & 1 == 0 {
                    ControlKind::Subscribe
                } else {
                    ControlKind::Pull
                };
                let offset = i64::from(inp.u32() as i32);
                let ts = (NOW * 1000)
                    .saturating_add_signed(offset)
                    .saturating_add(now.duration_since(t0).as_millis() as u64);
                let name_to = if inp.u8() & 1 == 0 {
                    prov.name.clone()
                } else {
                    String::from_utf8_lossy(inp.chunk()).into_owned()
                };
                let Some(k) = &nodes.control_keys[who] else {
                    continue;
                };
                let req = AuthRequest::sign(k, kind, &c.name, &name_to, ts);
                provider.handle_datagram(now, from, &Control::Auth(req).encode());
            }
            4 if built < 6 => {
                built += 1;
                // A genuine packet for a client, through the provider.
                let who = usize::from(inp.u8() & 1);
                let c = &f.dir.clients[who].node;
                let path = [hop_to(prov, entry(prov)), hop_to(c, entry(c))];
                let dest = dest_of(c);
                let msg = inp.chunk();
                let mut r = fixtures::rng(rng.next_u64());
                if let Ok(b) = codec::build_packet(&profile, &path, &dest, msg, &mut r) {
                    provider.handle_datagram(now, from, &b.bytes);
                }
            }
            _ => now += Duration::from_millis(u64::from(inp.u16()) * 10),
        }
        for (out, to_client) in provider
            .poll(now)
            .into_iter()
            .map(|o| (o, true))
            .chain(mix.poll(now).into_iter().map(|o| (o, false)))
        {
            if Control::parse(&out.data).is_some() {
                continue;
            }
            // A packet: for the client we run, or the node it is addressed to.
            if to_client && out.port == f.dir.clients[0].node.port {
                client.handle_datagram(now, &out.data);
            } else {
                let key = key_for_port(f, out.port);
                match process_datagram(&profile, &key, &out.data) {
                    Ok(p) => {
                        if let Outcome::Deliver { dest, .. } = p.outcome {
                            assert_eq!(dest.port, out.port, "delivered to another node");
                        }
                    }
                    Err(e) => panic!("a node sent a packet its receiver refuses: {e:?}"),
                }
            }
        }
        for d in client.take_delivered() {
            let _ = d.msg.len();
        }
    }
}
