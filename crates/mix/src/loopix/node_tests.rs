//! Provider behaviour under hostile control traffic (sans-IO): no reply to
//! unauthenticated or forged requests, no inbox theft in pull or push mode,
//! replies only at the client's directory address.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::*;
use crate::loopix::codec::{ProfileKind, legacy_pull, legacy_subscribe};
use crate::loopix::control::{AuthRequest, ControlKey, MAC_LEN, SOURCE_BURST};
use crate::loopix::node::ClientNode;
use crate::testnet::{LoopixSpec, build};

const ATTACKER: [u8; 4] = [198, 51, 100, 7];
const VICTIM_PORT: u16 = 9;

struct Net {
    dir: Arc<Directory>,
    keys: std::collections::BTreeMap<String, SecretKey>,
    profile: Profile,
}

fn net(kind: ProfileKind) -> Net {
    let spec = LoopixSpec {
        providers: 1,
        layers: 1,
        mixes_per_layer: 1,
        clients: 2,
        profile: kind,
        ..Default::default()
    };
    let mut port = 40_000u16;
    let g = build(&spec, &mut || {
        port += 1;
        port
    });
    Net {
        dir: Arc::new(g.directory),
        keys: g.keys,
        profile: Profile::loopix(kind),
    }
}

impl Net {
    fn provider(&self, params: &LoopixParams, now: Instant) -> MixNode {
        MixNode::new(
            "provider0",
            true,
            self.profile,
            Arc::new(self.keys["provider0"].clone()),
            self.dir.clone(),
            params.clone(),
            now,
        )
        .expect("provider")
    }

    fn client(&self, name: &str, params: &LoopixParams, now: Instant) -> ClientNode {
        ClientNode::new(
            name,
            self.profile,
            self.keys[name].clone(),
            self.dir.clone(),
            params.clone(),
            now,
        )
        .expect("client")
    }

    /// A packet that `provider0` relays to client `to` carrying `msg`.
    fn packet_via_provider(&self, to: &str, msg: &[u8]) -> Vec<u8> {
        let p = self.dir.provider("provider0").expect("provider");
        let c = &self.dir.client(to).expect("client").node;
        let hops: Vec<Hop> = [p, c]
            .iter()
            .map(|n| Hop {
                entry: entry_for(n, 0.0, false),
                key: n.key,
            })
            .collect();
        let dest = Dest {
            host: c.host.clone(),
            port: c.port,
            name: c.name.clone(),
        };
        codec::build_packet(&self.profile, &hops, &dest, msg, &mut rand::thread_rng())
            .expect("build")
            .bytes
    }
}

fn quiet() -> LoopixParams {
    LoopixParams {
        exp_params_payload: 0.0,
        exp_params_loops: 0.0,
        exp_params_drop: 0.0,
        exp_params_delay: 0.0,
        max_retrieve: 10,
        ..LoopixParams::default()
    }
}

fn attacker() -> IpAddr {
    IpAddr::from(ATTACKER)
}

/// Every datagram a provider sends within `secs` virtual seconds.
fn drain(p: &mut MixNode, t: Instant, secs: u64) -> Vec<Outgoing> {
    let mut out = Vec::new();
    for ms in (0..=secs * 1000).step_by(50) {
        out.extend(p.poll(t + Duration::from_millis(ms)));
    }
    out
}

#[test]
fn unauthenticated_and_forged_requests_get_nothing_and_steal_nothing() {
    for kind in [ProfileKind::Sphinxmix, ProfileKind::X25519] {
        let n = net(kind);
        let t = Instant::now();
        let mut p = n.provider(&quiet(), t);
        let victim = "client0";
        for i in 0..3 {
            p.handle_datagram(
                t,
                attacker(),
                &n.packet_via_provider(victim, format!("m{i}").as_bytes()),
            );
        }
        assert_eq!(p.stats.stored_now, 3, "{kind}");
        let mut bytes_in = 0usize;
        let mut send = |p: &mut MixNode, d: &[u8]| {
            bytes_in += d.len();
            p.handle_datagram(t, attacker(), d);
        };
        // The reported attack: SUBSCRIBE naming the victim with a third
        // party's address, then PULLs.
        send(
            &mut p,
            &legacy_subscribe(victim, "203.0.113.9", VICTIM_PORT),
        );
        for _ in 0..1000 {
            send(&mut p, &legacy_pull(victim));
        }
        // Authenticated format with a wrong key (the other client's) and
        // with random MACs.
        let other = n.keys["client1"].clone();
        let pk = n.dir.provider("provider0").expect("provider").key;
        let ok1 = ControlKey::derive(&other, &pk, victim, &other.public(), "provider0", &pk)
            .expect("key");
        for (i, kind) in [ControlKind::Subscribe, ControlKind::Pull]
            .into_iter()
            .enumerate()
        {
            let r = AuthRequest::sign(&ok1, kind, victim, "provider0", 1 + i as u64);
            send(&mut p, &Control::Auth(r).encode());
            let mut r = AuthRequest::sign(&ok1, kind, victim, "provider0", 10 + i as u64);
            r.mac = [0xa5; MAC_LEN];
            send(&mut p, &Control::Auth(r).encode());
        }
        let out = drain(&mut p, t, 2);
        let bytes_out: usize = out.iter().map(|o| o.data.len()).sum();
        assert_eq!(bytes_out, 0, "{kind}: {} datagrams sent", out.len());
        eprintln!("{kind}: {bytes_in} bytes in, {bytes_out} out: amplification 0");
        assert_eq!(p.stats.stored_now, 3, "{kind}: nothing was taken");
        assert_eq!(p.stats.pulls, 0);
        // Every request was refused and counted: the first SOURCE_BURST by
        // reason, the rest (the source is over its budget) as source-limited.
        let s = &p.stats;
        assert_eq!(
            s.dropped_unauthenticated + s.dropped_bad_auth + s.dropped_source_limited,
            1005,
            "{kind}: {s:?}"
        );
        assert_eq!(s.dropped_unauthenticated, SOURCE_BURST as u64, "{kind}");

        // The real client subscribes and pulls, and gets everything, at its
        // own address only.
        let mut c = n.client(victim, &quiet(), t);
        let me = n.dir.client(victim).expect("victim").node.clone();
        let t2 = t + Duration::from_secs(3);
        for o in c.poll(t2) {
            p.handle_datagram(t2, IpAddr::from([127, 0, 0, 1]), &o.data);
        }
        let out = drain(&mut p, t2, 1);
        assert_eq!(out.len(), 10, "{kind}: MAX_RETRIEVE datagrams");
        for o in &out {
            assert_eq!((o.host.as_str(), o.port), (me.host.as_str(), me.port));
            c.handle_datagram(t2, &o.data);
        }
        let got: Vec<Vec<u8>> = c.take_delivered().into_iter().map(|d| d.msg).collect();
        assert_eq!(got, vec![b"m0".to_vec(), b"m1".to_vec(), b"m2".to_vec()]);
        assert_eq!(p.stats.control_accepted, 2);
    }
}

#[test]
fn push_mode_subscribe_without_the_key_does_not_redirect() {
    let n = net(ProfileKind::Sphinxmix);
    let t = Instant::now();
    let params = LoopixParams {
        push_messages: true,
        ..quiet()
    };
    let mut p = n.provider(&params, t);
    let victim = "client0";
    p.handle_datagram(
        t,
        attacker(),
        &legacy_subscribe(victim, "203.0.113.9", VICTIM_PORT),
    );
    p.handle_datagram(t, attacker(), &n.packet_via_provider(victim, b"secret"));
    assert!(drain(&mut p, t, 1).is_empty(), "nothing pushed anywhere");
    assert_eq!(p.stats.stored_now, 1, "kept for the real client");

    // After the client's own SUBSCRIBE, packets are pushed to its directory
    // address.
    let mut c = n.client(victim, &params, t);
    let me = n.dir.client(victim).expect("victim").node.clone();
    for o in c.poll(t) {
        p.handle_datagram(t, IpAddr::from([127, 0, 0, 1]), &o.data);
    }
    p.handle_datagram(t, attacker(), &n.packet_via_provider(victim, b"pushed"));
    let out = drain(&mut p, t, 1);
    assert!(!out.is_empty());
    for o in &out {
        assert_eq!((o.host.as_str(), o.port), (me.host.as_str(), me.port));
        c.handle_datagram(t, &o.data);
    }
    let got: Vec<Vec<u8>> = c.take_delivered().into_iter().map(|d| d.msg).collect();
    assert!(got.contains(&b"secret".to_vec()) && got.contains(&b"pushed".to_vec()));
}

#[test]
fn replayed_pull_is_refused_and_clock_is_checked() {
    let n = net(ProfileKind::X25519);
    let t = Instant::now();
    let mut p = n.provider(&quiet(), t);
    let mut c = n.client("client0", &quiet(), t);
    p.set_wall_clock(t, 1_800_000_000_000);
    c.set_wall_clock(t, 1_800_000_000_000);
    let reqs: Vec<Vec<u8>> = c.poll(t).into_iter().map(|o| o.data).collect();
    assert_eq!(reqs.len(), 2, "SUBSCRIBE and PULL");
    for r in &reqs {
        p.handle_datagram(t, IpAddr::from([127, 0, 0, 1]), r);
    }
    assert_eq!(drain(&mut p, t, 1).len(), 10);
    // captured and replayed (from anywhere): refused, nothing sent
    for r in &reqs {
        p.handle_datagram(t, attacker(), r);
    }
    assert!(drain(&mut p, t, 1).is_empty());
    assert_eq!(p.stats.dropped_control_replay, 2);
    // a client whose clock is 10 minutes off is refused as stale
    let mut late = n.client("client1", &quiet(), t);
    late.set_wall_clock(t, 1_800_000_000_000 - 600_000);
    for o in late.poll(t) {
        p.handle_datagram(t, IpAddr::from([127, 0, 0, 1]), &o.data);
    }
    assert_eq!(p.stats.dropped_stale, 2);
    assert!(drain(&mut p, t, 1).is_empty());
}
