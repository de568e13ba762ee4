//! Statistical tests of the client's Poisson streams and a whole network
//! driven in virtual time (sans-IO: no sockets, no sleeping).
//!
//! Tolerance: for a Poisson process with expected count N the standard
//! deviation is sqrt(N); each observed count must be within 4.5 sqrt(N) of N
//! (false-failure probability below 1e-5 per check). Inter-send gaps must
//! have a mean within 5% of the configured mean and a coefficient of
//! variation within 10% of 1 (the exponential's).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use onionmix_mix::loopix::codec::Profile;
use onionmix_mix::loopix::codec::ProfileKind;
use onionmix_mix::loopix::config::LoopixParams;
use onionmix_mix::loopix::node::{ClientNode, MixNode, Outgoing};
use onionmix_mix::testnet::{LoopixSpec, build};

fn within(obs: u64, expected: f64) -> bool {
    (obs as f64 - expected).abs() <= 4.5 * expected.sqrt()
}

#[test]
fn client_stream_rates_match_configuration() {
    let spec = LoopixSpec {
        providers: 1,
        layers: 3,
        mixes_per_layer: 1,
        clients: 2,
        profile: ProfileKind::X25519,
        ..Default::default()
    };
    let mut port = 1000u16;
    let g = build(&spec, &mut || {
        port += 1;
        port
    });
    let dir = Arc::new(g.directory);
    let params = LoopixParams {
        exp_params_payload: 0.5,
        exp_params_loops: 1.0,
        exp_params_drop: 2.0,
        exp_params_delay: 0.0,
        time_pull: 1000.0,
        ..LoopixParams::default()
    };
    let t0 = Instant::now();
    let mut c = ClientNode::new(
        "client0",
        Profile::loopix(ProfileKind::X25519),
        g.keys["client0"].clone(),
        dir,
        params.clone(),
        t0,
    )
    .expect("client");
    let horizon = 2000.0;
    let mut now = t0;
    let mut last_send: Option<Instant> = None;
    let mut gaps = Vec::new();
    let provider_port = 1001;
    while now < t0 + Duration::from_secs_f64(horizon) {
        let out = c.poll(now);
        for o in out
            .iter()
            .filter(|o| o.port == provider_port && o.data.len() > 1000)
        {
            if let Some(l) = last_send {
                gaps.push((o.at - l).as_secs_f64());
            }
            last_send = Some(o.at);
        }
        now = c.next_wakeup().max(now + Duration::from_micros(1));
    }
    let s = &c.stats;
    let real_stream = s.sent_real + s.sent_drop_substitute;
    assert!(
        within(real_stream, horizon / 0.5),
        "lambda_P stream: {real_stream} vs {}",
        horizon / 0.5
    );
    assert!(
        within(s.sent_loop, horizon / 1.0),
        "lambda_L stream: {} vs {}",
        s.sent_loop,
        horizon
    );
    assert!(
        within(s.sent_drop, horizon / 2.0),
        "lambda_D stream: {} vs {}",
        s.sent_drop,
        horizon / 2.0
    );
    // The merged stream is Poisson with mean gap 1 / (2 + 1 + 0.5) s.
    let n = gaps.len() as f64;
    let mean = gaps.iter().sum::<f64>() / n;
    let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n;
    let expected = 1.0 / 3.5;
    assert!(
        (mean - expected).abs() / expected < 0.05,
        "mean gap {mean} vs {expected}"
    );
    let cv = var.sqrt() / mean;
    assert!((cv - 1.0).abs() < 0.1, "coefficient of variation {cv}");
}

/// A whole network in virtual time: every real message is delivered, loops
/// come back, and nothing is dropped.
fn simulate(kind: ProfileKind) {
    let spec = LoopixSpec {
        providers: 2,
        layers: 3,
        mixes_per_layer: 2,
        clients: 6,
        profile: kind,
        ..Default::default()
    };
    let mut port = 2000u16;
    let g = build(&spec, &mut || {
        port += 1;
        port
    });
    let dir = Arc::new(g.directory);
    let profile = Profile::loopix(kind);
    let params = LoopixParams {
        exp_params_payload: 0.05,
        exp_params_loops: 0.1,
        exp_params_drop: 0.1,
        exp_params_delay: 0.01,
        time_pull: 0.2,
        max_retrieve: 5,
        ..LoopixParams::default()
    };
    let t0 = Instant::now();
    let mut mixes: HashMap<u16, MixNode> = HashMap::new();
    for m in &dir.mixes {
        let n = MixNode::new(
            &m.node.name,
            false,
            profile,
            Arc::new(g.keys[&m.node.name].clone()),
            dir.clone(),
            params.clone(),
            t0,
        )
        .expect("mix");
        mixes.insert(m.node.port, n);
    }
    for p in &dir.providers {
        let n = MixNode::new(
            &p.name,
            true,
            profile,
            Arc::new(g.keys[&p.name].clone()),
            dir.clone(),
            params.clone(),
            t0,
        )
        .expect("provider");
        mixes.insert(p.port, n);
    }
    let mut clients: HashMap<u16, ClientNode> = HashMap::new();
    for c in &dir.clients {
        let n = ClientNode::new(
            &c.node.name,
            profile,
            g.keys[&c.node.name].clone(),
            dir.clone(),
            params.clone(),
            t0,
        )
        .expect("client");
        clients.insert(c.node.port, n);
    }
    // Queue 3 messages per client to the next client.
    let names: Vec<String> = dir.clients.iter().map(|c| c.node.name.clone()).collect();
    let mut expected = 0;
    for (i, c) in dir.clients.iter().enumerate() {
        let node = clients.get_mut(&c.node.port).expect("client");
        for k in 0..3 {
            node.queue_message(
                &names[(i + 1) % names.len()],
                format!("msg {k} from {i}").into_bytes(),
            )
            .expect("queue");
            expected += 1;
        }
    }
    let mut now = t0;
    let end = t0 + Duration::from_secs(5);
    let mut delivered = 0;
    while now < end {
        let mut wire: Vec<Outgoing> = Vec::new();
        for m in mixes.values_mut() {
            wire.extend(m.poll(now));
        }
        for c in clients.values_mut() {
            wire.extend(c.poll(now));
        }
        for o in wire {
            if let Some(m) = mixes.get_mut(&o.port) {
                m.handle_datagram(now, std::net::IpAddr::from([127, 0, 0, 1]), &o.data);
            } else if let Some(c) = clients.get_mut(&o.port) {
                c.handle_datagram(now, &o.data);
            }
        }
        for c in clients.values_mut() {
            delivered += c.take_delivered().len();
        }
        now += Duration::from_millis(2);
    }
    assert_eq!(delivered, expected, "every real message delivered");
    for c in clients.values() {
        assert!(
            c.stats.loops_returned > 10,
            "{} loops returned: {}",
            c.name,
            c.stats.loops_returned
        );
        assert_eq!(c.stats.dropped_total(), 0, "{}: {:?}", c.name, c.stats);
    }
    for m in mixes.values() {
        assert!(
            m.stats.loops_returned > 5,
            "{} loops returned: {}",
            m.name,
            m.stats.loops_returned
        );
        assert_eq!(m.stats.dropped_total(), 0, "{}: {:?}", m.name, m.stats);
    }
}

#[test]
fn virtual_network_sphinxmix() {
    simulate(ProfileKind::Sphinxmix);
}

#[test]
fn virtual_network_x25519() {
    simulate(ProfileKind::X25519);
}

/// A client that falls far behind its schedule (a stalled process) sends no
/// catch-up burst; the skipped time is counted, so rate checks can discount
/// it.
#[test]
fn a_stalled_client_skips_and_counts_instead_of_bursting() {
    let spec = LoopixSpec {
        providers: 1,
        layers: 3,
        mixes_per_layer: 1,
        clients: 1,
        profile: ProfileKind::X25519,
        ..Default::default()
    };
    let mut port = 2000u16;
    let g = build(&spec, &mut || {
        port += 1;
        port
    });
    let params = LoopixParams {
        exp_params_payload: 0.1,
        exp_params_loops: 0.1,
        exp_params_drop: 0.1,
        exp_params_delay: 0.0,
        time_pull: 1000.0,
        ..LoopixParams::default()
    };
    let t0 = Instant::now();
    let mut c = ClientNode::new(
        "client0",
        Profile::loopix(ProfileKind::X25519),
        g.keys["client0"].clone(),
        Arc::new(g.directory),
        params,
        t0,
    )
    .expect("client");
    c.poll(t0);
    // Stalled for 60 s: about 600 events per stream were due.
    let _ = c.poll(t0 + Duration::from_secs(60));
    let s = &c.stats;
    let sent = s.sent_loop + s.sent_drop + s.sent_real + s.sent_drop_substitute;
    assert!(sent <= 60, "no burst after a stall: {sent} packets");
    for (what, skipped) in [
        ("payload", s.skipped_s_payload),
        ("loop", s.skipped_s_loop),
        ("drop", s.skipped_s_drop),
    ] {
        assert!(
            (57.0..=60.0).contains(&skipped),
            "{what}: skipped {skipped} s"
        );
    }
}
