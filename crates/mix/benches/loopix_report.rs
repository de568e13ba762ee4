//! Loopix measurements in the shape of seed 003's results, run in-process on
//! 127.0.0.1 (real UDP sockets, real tokio drivers):
//! 1. mix-node throughput as the offered rate grows (both profiles);
//! 2. a 20-client network (4 providers, 3x2 mixes): bandwidth per client by
//!    message type, and loop latency in push and pull mode;
//! 3. the monthly data-cost table (seed Table 4.1) from measured packet sizes.
//!
//! `cargo bench -p onionmix-mix --bench loopix_report` (prints Markdown).
//! Set LOOPIX_REPORT_SECS to change the network run length (default 20).

use std::net::UdpSocket;
use std::sync::Arc;
use std::time::{Duration, Instant};

use onionmix_mix::directory::{Directory, MixInfo, NodeInfo};
use onionmix_mix::loopix::codec::{self, Dest, Hop, Profile, ProfileKind, RoutingEntry, SecretKey};
use onionmix_mix::loopix::config::{LoopixParams, NodeConfig};
use onionmix_mix::net;
use onionmix_mix::testnet::{self, LoopixSpec};

fn stop_future(
    rx: tokio::sync::watch::Receiver<bool>,
) -> impl std::future::Future<Output = ()> + Send {
    let mut rx = rx;
    async move {
        let _ = rx.changed().await;
    }
}

/// Offered-load test of one mix: packets whose next hop is a sink socket.
fn mix_throughput(kind: ProfileKind) -> Vec<(f64, f64, f64)> {
    let tmp = tempfile::tempdir().expect("tempdir");
    let mut rng = rand::thread_rng();
    let mix_key = SecretKey::generate(kind, &mut rng);
    let sink = UdpSocket::bind("127.0.0.1:0").expect("sink");
    sink.set_read_timeout(Some(Duration::from_millis(200)))
        .expect("timeout");
    let sink_port = sink.local_addr().expect("addr").port();
    let mix_port = testnet::free_udp_port().expect("a free port");
    let mix = NodeInfo {
        name: "mix".into(),
        host: "127.0.0.1".into(),
        port: mix_port,
        key: mix_key.public(),
    };
    let sink_node = NodeInfo {
        name: "sink".into(),
        host: "127.0.0.1".into(),
        port: sink_port,
        key: SecretKey::generate(kind, &mut rng).public(),
    };
    let dir = Directory {
        profile: kind,
        mixes: vec![MixInfo {
            node: mix.clone(),
            layer: 0,
        }],
        providers: vec![sink_node.clone()],
        clients: vec![],
    };
    let db = tmp.path().join("example.db");
    dir.to_sqlite(&db).expect("db");
    let keyf = tmp.path().join("mix.prv");
    std::fs::write(&keyf, mix_key.to_file_bytes()).expect("key");
    let cfg_text = format!(
        "role = \"mix\"\nname = \"mix\"\nlisten = \"127.0.0.1:{mix_port}\"\nprofile = \"{kind}\"\nsecret_key_file = \"{}\"\n[directory]\nsqlite = \"{}\"\n[params]\nEXP_PARAMS_LOOPS = 0.0\n",
        keyf.display(),
        db.display()
    );
    let cfg_path = tmp.path().join("mix.toml");
    std::fs::write(&cfg_path, cfg_text).expect("cfg");
    let cfg = NodeConfig::load(&cfg_path).expect("load cfg");
    let (tx, rx) = tokio::sync::watch::channel(false);
    let th = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("rt");
        let _ = rt.block_on(net::run_mix_node(cfg, stop_future(rx)));
    });
    std::thread::sleep(Duration::from_millis(300));

    let profile = Profile::loopix(kind);
    let hop = |n: &NodeInfo| Hop {
        entry: RoutingEntry {
            host: n.host.clone(),
            port: n.port,
            drop: false,
            type_flag: None,
            delay: 0.0,
            name: n.name.clone(),
        },
        key: n.key,
    };
    let path = vec![hop(&mix), hop(&sink_node)];
    let dest = Dest {
        host: "127.0.0.1".into(),
        port: sink_port,
        name: "sink".into(),
    };
    let rates = [
        1000.0, 2500.0, 5000.0, 10_000.0, 15_000.0, 20_000.0, 30_000.0,
    ];
    let secs = 1.5;
    let total: usize = rates.iter().map(|r| (r * secs) as usize).sum();
    let packets: Vec<Vec<u8>> = (0..total)
        .map(|_| {
            codec::build_packet(&profile, &path, &dest, &[0u8; 502], &mut rng)
                .expect("build")
                .bytes
        })
        .collect();
    let src = UdpSocket::bind("127.0.0.1:0").expect("src");
    let mut it = packets.into_iter();
    let mut out = Vec::new();
    for rate in rates {
        let n = (rate * secs) as usize;
        let counter = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let c2 = counter.clone();
        let sink2 = sink.try_clone().expect("clone");
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s2 = stop.clone();
        let rx_th = std::thread::spawn(move || {
            let mut buf = vec![0u8; 65536];
            while !s2.load(std::sync::atomic::Ordering::Relaxed) {
                if sink2.recv(&mut buf).is_ok() {
                    c2.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        });
        let start = Instant::now();
        for i in 0..n {
            let due = start + Duration::from_secs_f64(i as f64 / rate);
            while Instant::now() < due {
                std::hint::spin_loop();
            }
            if let Some(p) = it.next() {
                let _ = src.send_to(&p, ("127.0.0.1", mix_port));
            }
        }
        let sent_for = start.elapsed().as_secs_f64();
        std::thread::sleep(Duration::from_millis(700));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let _ = rx_th.join();
        let got = counter.load(std::sync::atomic::Ordering::Relaxed) as f64;
        out.push((rate, got / sent_for, got / n as f64));
    }
    let _ = tx.send(true);
    let _ = th.join();
    out
}

struct NetResult {
    per_client: Vec<serde_json::Value>,
    loop_latency_ms: f64,
    loops: u64,
    secs: f64,
}

/// Runs a whole network in-process for `secs` seconds.
fn run_network(spec: &LoopixSpec, secs: f64) -> NetResult {
    let tmp = tempfile::tempdir().expect("tempdir");
    let (_g, procs) = testnet::generate(spec, tmp.path()).expect("generate");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("rt");
    let (tx, rx) = tokio::sync::watch::channel(false);
    let mut handles = Vec::new();
    for p in &procs {
        let mut cfg = NodeConfig::load(&p.config).expect("cfg");
        cfg.workers = 1;
        let stop = stop_future(rx.clone());
        handles.push(rt.spawn(async move {
            let r = match cfg.role {
                onionmix_mix::loopix::config::Role::Client => net::run_client(cfg, stop).await,
                _ => net::run_mix_node(cfg, stop).await,
            };
            if let Err(e) = r {
                eprintln!("node failed: {e}");
            }
        }));
    }
    std::thread::sleep(Duration::from_secs_f64(secs));
    let _ = tx.send(true);
    for h in handles {
        let _ = rt.block_on(h);
    }
    let mut per_client = Vec::new();
    let (mut lat, mut loops) = (0.0, 0);
    for p in procs
        .iter()
        .filter(|p| p.role == onionmix_mix::loopix::config::Role::Client)
    {
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&p.stats).expect("stats")).expect("json");
        lat += v["loop_latency_sum_s"].as_f64().unwrap_or(0.0);
        loops += v["loops_returned"].as_u64().unwrap_or(0);
        per_client.push(v);
    }
    NetResult {
        per_client,
        loop_latency_ms: if loops > 0 {
            lat / loops as f64 * 1000.0
        } else {
            f64::NAN
        },
        loops,
        secs,
    }
}

fn packet_size(kind: ProfileKind) -> usize {
    let (mut rng, profile) = (rand::thread_rng(), Profile::loopix(kind));
    let path: Vec<Hop> = (0..6)
        .map(|i| Hop {
            entry: RoutingEntry {
                host: "127.0.0.1".into(),
                port: 40000 + i,
                drop: false,
                type_flag: None,
                delay: 0.001,
                name: format!("client{i:02}"),
            },
            key: SecretKey::generate(kind, &mut rng).public(),
        })
        .collect();
    let dest = Dest {
        host: "127.0.0.1".into(),
        port: 40005,
        name: "client05".into(),
    };
    codec::build_packet(&profile, &path, &dest, &[0u8; 502], &mut rng)
        .expect("build")
        .bytes
        .len()
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // cargo bench --list
    }
    let secs: f64 = std::env::var("LOOPIX_REPORT_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20.0);
    println!("# Loopix report (onionmix)\n");
    println!(
        "## Mix-node throughput vs offered load (one mix, 2 worker threads, 2-hop packets to a sink)\n"
    );
    println!(
        "| profile | offered msg/s | forwarded msg/s | delivered fraction |\n|---|---|---|---|"
    );
    for kind in [ProfileKind::Sphinxmix, ProfileKind::X25519] {
        for (rate, got, frac) in mix_throughput(kind) {
            println!("| {kind} | {rate:.0} | {got:.0} | {frac:.3} |");
        }
    }
    let sizes = [
        (ProfileKind::Sphinxmix, packet_size(ProfileKind::Sphinxmix)),
        (ProfileKind::X25519, packet_size(ProfileKind::X25519)),
    ];
    println!(
        "\nPacket sizes on the wire: sphinxmix {} B, x25519 {} B.\n",
        sizes[0].1, sizes[1].1
    );

    // Seed settings: lambda_R = lambda_L = lambda_D = 1/s, zero per-hop delay, 20 clients.
    for (mode, push, pull) in [("push", true, 10.0), ("pull", false, 5.0)] {
        for kind in [ProfileKind::Sphinxmix, ProfileKind::X25519] {
            let p = LoopixParams {
                exp_params_payload: 1.0,
                exp_params_loops: 1.0,
                exp_params_drop: 1.0,
                exp_params_delay: 0.0,
                time_pull: pull,
                max_retrieve: 30,
                push_messages: push,
                ..LoopixParams::default()
            };
            let spec = LoopixSpec {
                profile: kind,
                client_params: p.clone(),
                mix_params: LoopixParams {
                    exp_params_loops: 1.0,
                    ..p
                },
                ..LoopixSpec::default()
            };
            let r = run_network(&spec, secs);
            let n = r.per_client.len() as f64;
            let f = |k: &str| {
                r.per_client
                    .iter()
                    .map(|v| v[k].as_f64().unwrap_or(0.0))
                    .sum::<f64>()
                    / n
            };
            let up = f("uptime_s");
            let size = if kind == ProfileKind::Sphinxmix {
                sizes[0].1
            } else {
                sizes[1].1
            } as f64;
            println!(
                "### {kind}, {mode} mode, 20 clients, lambda_P = lambda_L = lambda_D = 1/s, delay 0, TIME_PULL {pull} s, {:.0} s run\n",
                r.secs
            );
            println!("| per client | msg/s | bytes/s |\n|---|---|---|");
            for (label, k) in [
                ("real (payload)", "sent_real"),
                ("drop substitutes (lambda_P)", "sent_drop_substitute"),
                ("loop cover", "sent_loop"),
                ("drop cover", "sent_drop"),
            ] {
                let rate = f(k) / up;
                println!("| sent: {label} | {rate:.2} | {:.0} |", rate * size);
            }
            println!(
                "| sent: control (SUBSCRIBE, PULL) | {:.2} | - |",
                f("sent_control") / up
            );
            println!(
                "| total sent bytes/s (measured) | - | {:.0} |",
                f("bytes_sent") / up
            );
            println!(
                "| received: packets (incl. dummies) | {:.2} | {:.0} |",
                f("received") / up,
                f("bytes_received") / up
            );
            println!(
                "\nLoop latency (client -> provider -> 3 mixes -> provider -> client): mean {:.1} ms over {} loops.\n",
                r.loop_latency_ms, r.loops
            );
        }
    }

    println!(
        "## Monthly data cost (seed Table 4.1 shape), 30-day month, GBP 0.01 per MB (decimal)\n"
    );
    println!(
        "| lambda_total (msg/s) | delay 16/lambda (s) | sphinxmix MiB/mo | sphinxmix GBP/mo | x25519 MiB/mo | x25519 GBP/mo |\n|---|---|---|---|---|---|"
    );
    for l in [0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 3.0, 4.0, 8.0, 16.0] {
        let month = 30.0 * 86400.0;
        let b0 = l * sizes[0].1 as f64 * month;
        let b1 = l * sizes[1].1 as f64 * month;
        println!(
            "| {l} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
            16.0 / l,
            b0 / 1048576.0,
            b0 / 1e6 * 0.01,
            b1 / 1048576.0,
            b1 / 1e6 * 0.01
        );
    }
}
