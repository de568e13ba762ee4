//! Loopix networks of real `onionmix` processes on 127.0.0.1 (free UDP
//! ports, temp dirs; every process is killed by pid on drop, also on panic).
//!
//! - `loopix_testnet_sphinxmix`: testnets/loopix.toml (4 providers, 6 mixes
//!   in 3 layers, 20 clients, reference SQLite directory): every real message
//!   is delivered, including to a client that is offline at first and pulls
//!   later; loops return; a packet built by Python sphinxmix is carried hop by
//!   hop by our nodes and delivered; measured send rates match the Poisson
//!   parameters.
//! - `loopix_testnet_x25519_signed`: the same with the x25519 profile and our
//!   signed directory.
//! - `loopix_faults`: garbage, truncated, replayed and wrong-MAC packets are
//!   dropped and counted; a mix killed and restarted mid-run comes back and
//!   traffic flows through it again.

mod loopix_net;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use loopix_net::{Network, load_spec, repo_root, send_udp, u, wait_for};
use onionmix_mix::loopix::codec::{self, Dest, Hop, Profile, ProfileKind, RoutingEntry};
use onionmix_mix::loopix::config::Role;
use onionmix_mix::testnet::LoopixSpec;

/// Sends real messages around the ring, with one client offline until the
/// rest are delivered, then checks loops and rates.
fn run_network(spec: LoopixSpec, python_injection: bool) {
    let _g = onionmix_testsupport::serial();
    let mut net = Network::generate(&spec);
    net.start_infrastructure();
    let clients = net.clients();
    let offline = clients.last().expect("clients").clone();
    for c in &clients[..clients.len() - 1] {
        net.start(c);
    }
    let mut expect = Vec::new();
    let mut late = Vec::new();
    for (i, c) in clients.iter().enumerate().take(clients.len() - 1) {
        let to = &clients[(i + 1) % clients.len()];
        let msg = format!("real message {i} from {c} to {to}").into_bytes();
        net.send(c, to, &msg);
        if *to == offline {
            late.push((to.clone(), msg))
        } else {
            expect.push((to.clone(), msg))
        }
    }
    // One more for the offline client, queued with the CLI.
    let cli_msg = b"sent with onionmix mix-client send".to_vec();
    let st = Command::new(loopix_net::onionmix_bin())
        .args(["mix-client", "send", "--config"])
        .arg(&net.spec(&clients[0]).config)
        .args([offline.as_str(), "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .and_then(|mut ch| {
            ch.stdin.take().expect("stdin").write_all(&cli_msg)?;
            ch.wait()
        })
        .expect("run mix-client send");
    assert!(st.success(), "mix-client send failed");
    late.push((offline.clone(), cli_msg));

    if python_injection
        && let Some((to, msg)) = inject_python_packet(&net, &clients[3], &clients[7])
    {
        expect.push((to, msg));
    }

    net.wait_delivered(&expect, Duration::from_secs(60));
    // The offline client's messages wait at its provider.
    let prov = net
        .dir
        .client(&offline)
        .expect("offline client")
        .provider
        .clone();
    let deadline = Instant::now() + Duration::from_secs(20);
    while u(&net.stats(&prov), "stored_now") < late.len() as u64 {
        assert!(
            Instant::now() < deadline,
            "provider {prov} did not store the offline client's messages"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    net.start(&offline);
    net.wait_delivered(&late, Duration::from_secs(30));

    // Loops come back to clients and to mixes/providers.
    for n in net.procs.iter().map(|p| p.name.clone()).collect::<Vec<_>>() {
        wait_for(
            &format!("a loop returning to {n}"),
            Duration::from_secs(20),
            || u(&net.stats(&n), "loops_returned") > 0,
        );
    }
    // Let the streams run a little longer for the rate check.
    std::thread::sleep(Duration::from_secs(3));
    // Time each stream was running on schedule: uptime minus what the
    // client skipped when a busy machine left it more than 1 s behind.
    let (mut up_loop, mut up_drop, mut up_real) = (0.0, 0.0, 0.0);
    let (mut loops, mut drops, mut reals) = (0u64, 0u64, 0u64);
    for c in &clients[..clients.len() - 1] {
        let s = net.stats(c);
        assert!(u(&s, "loops_returned") > 0, "{c}: no loop returned: {s}");
        let up = s["uptime_s"].as_f64().unwrap_or(0.0);
        let f = |k: &str| s[k].as_f64().unwrap_or(0.0);
        up_loop += up - f("skipped_s_loop");
        up_drop += up - f("skipped_s_drop");
        up_real += up - f("skipped_s_payload");
        loops += u(&s, "sent_loop");
        drops += u(&s, "sent_drop");
        reals += u(&s, "sent_real") + u(&s, "sent_drop_substitute");
    }
    for p in net.procs.iter().filter(|p| p.role != Role::Client) {
        let s = net.stats(&p.name);
        assert!(
            u(&s, "loops_returned") > 0,
            "{}: no loop returned: {s}",
            p.name
        );
        for k in [
            "dropped_malformed",
            "dropped_bad_mac",
            "dropped_bad_body",
            "dropped_replay",
            "dropped_bad_routing",
        ] {
            assert_eq!(u(&s, k), 0, "{}: {k} in a clean run: {s}", p.name);
        }
    }
    // Poisson rates over all clients (tolerance: 4.5 sqrt(N) plus 3% for
    // stats files that lag by up to one write interval).
    let cp = &spec.client_params;
    for (what, obs, mean, up) in [
        ("loop", loops, cp.exp_params_loops, up_loop),
        ("drop", drops, cp.exp_params_drop, up_drop),
        ("payload", reals, cp.exp_params_payload, up_real),
    ] {
        let n = up / mean;
        let tol = 4.5 * n.sqrt() + 0.03 * n;
        eprintln!("{what} stream: observed {obs}, expected {n:.0} +- {tol:.0}");
        assert!(
            (obs as f64 - n).abs() <= tol,
            "{what} stream rate off: {obs} vs {n:.0}"
        );
    }
}

/// Builds a packet with Python sphinxmix along a real path of our nodes and
/// sends it to the first hop. Returns the expected delivery.
fn inject_python_packet(net: &Network, from: &str, to: &str) -> Option<(String, Vec<u8>)> {
    let py = onionmix_testsupport::sphinxmix_python("mix_loopix python injection")?;
    let d = &net.dir;
    let sender = d.client(from).expect("sender");
    let recv = d.client(to).expect("recipient");
    let mut path = vec![d.provider(&sender.provider).expect("provider").clone()];
    for l in d.layers() {
        path.push(l[0].clone());
    }
    path.push(d.provider(&recv.provider).expect("provider").clone());
    path.push(recv.node.clone());
    let ents: Vec<serde_json::Value> = path
        .iter()
        .map(|n| serde_json::json!({"host": n.host, "port": n.port, "drop": false, "type": null, "delay": 0.01, "name": n.name}))
        .collect();
    let pubs: Vec<String> = path.iter().map(|n| hex::encode(n.key.to_bytes())).collect();
    let msg = b"built by Python sphinxmix 0.0.7".to_vec();
    let req = serde_json::json!({"op": "create", "header_len": 1024, "body_len": 1024, "pubs": pubs,
        "loopix_routing": ents, "dest": {"loopix": [recv.node.host, recv.node.port, recv.node.name]}, "msg": hex::encode(&msg)});
    let mut child = Command::new(&py)
        .arg(repo_root().join("scripts/sphinxmix/sphinxmix_tool.py"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start python");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(req.to_string().as_bytes())
        .expect("write");
    let out = child.wait_with_output().expect("python");
    assert!(out.status.success(), "sphinxmix_tool create failed");
    let resp: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    let pkt = hex::decode(resp["packet"].as_str().expect("packet")).expect("hex");
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.send_to(&pkt, (path[0].host.as_str(), path[0].port))
        .expect("send");
    Some((to.to_string(), msg))
}

#[test]
fn loopix_testnet_sphinxmix() {
    let spec = load_spec("loopix.toml");
    assert_eq!(
        (
            spec.providers,
            spec.layers * spec.mixes_per_layer,
            spec.clients
        ),
        (4, 6, 20)
    );
    run_network(spec, true);
}

#[test]
fn loopix_testnet_x25519_signed() {
    let spec = load_spec("loopix-x25519.toml");
    assert_eq!(spec.profile, ProfileKind::X25519);
    run_network(spec, false);
}

#[test]
fn loopix_faults() {
    let _g = onionmix_testsupport::serial();
    let mut spec = load_spec("loopix.toml");
    spec.clients = 4;
    spec.providers = 2;
    let mut net = Network::generate(&spec);
    net.start_infrastructure();
    for c in net.clients() {
        net.start(&c);
    }
    let d = net.dir.clone();
    let target = d.layers()[0][0].clone();
    let addr = (target.host.as_str(), target.port);
    let before = net.stats(&target.name);

    // A valid packet whose first hop is `target`, then abuse it.
    let profile = Profile::loopix(ProfileKind::Sphinxmix);
    let layers = d.layers();
    let recv = &d.clients[0];
    let mut nodes = vec![target.clone(), layers[1][0].clone(), layers[2][0].clone()];
    nodes.push(d.provider(&recv.provider).expect("provider").clone());
    nodes.push(recv.node.clone());
    let hops: Vec<Hop> = nodes
        .iter()
        .map(|n| Hop {
            entry: RoutingEntry {
                host: n.host.clone(),
                port: n.port,
                drop: false,
                type_flag: None,
                delay: 0.0,
                name: n.name.clone(),
            },
            key: n.key,
        })
        .collect();
    let dest = Dest {
        host: recv.node.host.clone(),
        port: recv.node.port,
        name: recv.node.name.clone(),
    };
    let good = codec::build_packet(
        &profile,
        &hops,
        &dest,
        b"fault test",
        &mut rand::thread_rng(),
    )
    .expect("build")
    .bytes;
    let mut garbage = vec![0u8; good.len()];
    rand::RngCore::fill_bytes(&mut rand::thread_rng(), &mut garbage);
    send_udp(addr, &garbage); // malformed
    send_udp(addr, &good[..good.len() / 2]); // truncated
    send_udp(addr, b""); // empty
    let mut bad_mac = good.clone();
    let n = bad_mac.len();
    bad_mac[n - 1500] ^= 0x40; // inside beta
    send_udp(addr, &bad_mac);
    send_udp(addr, &good);
    std::thread::sleep(Duration::from_millis(300));
    send_udp(addr, &good); // replay
    let b = |k: &str| u(&before, k);
    wait_for("drop counters", Duration::from_secs(10), || {
        let s = net.stats(&target.name);
        u(&s, "dropped_malformed") >= b("dropped_malformed") + 3
            && u(&s, "dropped_bad_mac") > b("dropped_bad_mac")
            && u(&s, "dropped_replay") > b("dropped_replay")
    });
    net.wait_delivered(
        &[(recv.node.name.clone(), b"fault test".to_vec())],
        Duration::from_secs(20),
    );
    let inbox = net.inbox(&recv.node.name);
    assert_eq!(
        inbox
            .iter()
            .filter(|m| m.as_slice() == b"fault test")
            .count(),
        1,
        "the replayed copy was not delivered"
    );

    // Kill a mix mid-run (SIGKILL: it loses what it held), restart it, and
    // check that traffic flows through it again and messages are delivered.
    let victim = layers[1][1].name.clone();
    let held = u(&net.stats(&victim), "queue_len");
    net.kill(&victim);
    std::thread::sleep(Duration::from_millis(500));
    net.start(&victim);
    let clients = net.clients();
    let mut expect = Vec::new();
    for (i, c) in clients.iter().enumerate() {
        for k in 0..3 {
            let to = &clients[(i + 1) % clients.len()];
            let msg = format!("after restart {k} from {c}").into_bytes();
            net.send(c, to, &msg);
            expect.push((to.clone(), msg));
        }
    }
    net.wait_delivered(&expect, Duration::from_secs(40));
    wait_for(
        "traffic through the restarted mix",
        Duration::from_secs(10),
        || u(&net.stats(&victim), "forwarded") > 10,
    );
    eprintln!("restarted {victim}; it held {held} packets when killed");
}
