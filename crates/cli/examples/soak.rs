//! Soak: a network under many concurrent verified downloads for a long
//! time, with every node's resident memory sampled.
//!
//! ```sh
//! cargo run --release -p onionmix --example soak -- [SPEC] [STREAMS] [MINUTES]
//! # defaults: onionmix-basic 200 30
//! ```
//!
//! Starts the spec with the launcher (temp dir), then `STREAMS` workers
//! each download `/bytes/N` from the sink through the first client's SOCKS
//! port, one after another (N cycles 10 kB, 100 kB, 1 MB; the SOCKS
//! username spreads workers over 20 isolation groups), checking length and
//! the sink's SHA-256 of every answer. Prints a line a minute and a final
//! table: downloads, bytes, wrong bytes (a completed answer whose length or
//! digest is wrong), failed downloads (SOCKS or stream errors, timeouts),
//! and each node's RSS after warm-up (2 min), at the end and at most; each
//! minute's line also lists every node's RSS.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use onionmix_testbed::http;
use onionmix_testbed::launcher::{self, LaunchOptions};
use onionmix_testbed::socks::{self, Target};
use onionmix_testbed::spec::Spec;

#[derive(Default)]
struct Counts {
    ok: AtomicU64,
    bytes: AtomicU64,
    wrong: AtomicU64,
    failed: AtomicU64,
}

fn rss_kib(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    s.lines()
        .find(|l| l.starts_with("VmRSS:"))?
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let spec_name = args.get(1).cloned().unwrap_or("onionmix-basic".into());
    let streams: usize = args.get(2).and_then(|a| a.parse().ok()).unwrap_or(200);
    let minutes: u64 = args.get(3).and_then(|a| a.parse().ok()).unwrap_or(30);
    let tmp = tempfile::tempdir().unwrap();
    let spec = Spec::load(&spec_name).expect("spec");
    let bin = std::env::var("ONIONMIX_BIN")
        .map(Into::into)
        .unwrap_or_else(|_| {
            let mut p = std::env::current_exe().unwrap();
            p.pop();
            p.pop();
            p.join("onionmix")
        });
    let mut opts = LaunchOptions::new(bin);
    opts.timeout = Some(Duration::from_secs(300));
    let net = launcher::NetworkGuard(Some(
        launcher::start(&spec, &tmp.path().join("net"), &opts).expect("network start"),
    ));
    let info = net.info().clone();
    let sink = info.sink.clone().expect("sink");
    let proxy = info.clients(None)[0].socks_addr().expect("socks");
    println!(
        "soak: {spec_name}, {streams} concurrent streams, {minutes} min, client {}",
        info.clients(None)[0].name
    );

    let counts = Arc::new(Counts::default());
    let stop = Arc::new(AtomicBool::new(false));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..streams {
        let (counts, stop, sink) = (counts.clone(), stop.clone(), sink.clone());
        tasks.push(rt.spawn(async move {
            let sizes = [10_000u64, 100_000, 1_000_000];
            let user = format!("soak{}", w % 20);
            let mut i = w;
            while !stop.load(Ordering::Relaxed) {
                let n = sizes[i % sizes.len()];
                i += 1;
                let start = Instant::now();
                let r = async {
                    let mut s = socks::connect(
                        proxy,
                        &Target::Host(sink.hostname.clone(), sink.http.port()),
                        Some((&user, "x")),
                        Duration::from_secs(60),
                    )
                    .await
                    .map_err(|e| e.to_string())?;
                    tokio::time::timeout(
                        Duration::from_secs(120),
                        http::get(&mut s, &sink.hostname, &format!("/bytes/{n}"), start),
                    )
                    .await
                    .map_err(|_| "timed out".to_string())?
                    .map_err(|e| e.to_string())
                }
                .await;
                match r {
                    Ok(resp) if resp.body.len() as u64 == n && resp.sha256_ok() => {
                        counts.ok.fetch_add(1, Ordering::Relaxed);
                        counts.bytes.fetch_add(n, Ordering::Relaxed);
                    }
                    Ok(resp) => {
                        eprintln!(
                            "WRONG BYTES: asked {n}, got {} (digest ok: {})",
                            resp.body.len(),
                            resp.sha256_ok()
                        );
                        counts.wrong.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        if counts.failed.fetch_add(1, Ordering::Relaxed) < 20 {
                            eprintln!("failed download ({n} bytes): {e}");
                        }
                        tokio::time::sleep(Duration::from_secs(1)).await;
                    }
                }
            }
        }));
    }

    // RSS per node: after warm-up, at the end, and the most seen.
    let nodes: Vec<(String, u32)> = info.nodes.iter().map(|n| (n.name.clone(), n.pid)).collect();
    let mut warm: Vec<Option<u64>> = vec![None; nodes.len()];
    let mut max = vec![0u64; nodes.len()];
    let mut last = vec![0u64; nodes.len()];
    let end = t0 + Duration::from_secs(minutes * 60);
    let mut minute = 0;
    let names: Vec<&str> = nodes.iter().map(|(n, _)| n.as_str()).collect();
    println!("RSS columns: {}", names.join(" "));
    while Instant::now() < end {
        std::thread::sleep(Duration::from_secs(10));
        let el = t0.elapsed();
        for (i, (_, pid)) in nodes.iter().enumerate() {
            if let Some(r) = rss_kib(*pid) {
                last[i] = r;
                max[i] = max[i].max(r);
                if warm[i].is_none() && el >= Duration::from_secs(120) {
                    warm[i] = Some(r);
                }
            }
        }
        if el.as_secs() / 60 > minute {
            minute = el.as_secs() / 60;
            let rss: Vec<String> = last
                .iter()
                .map(|r| format!("{:.1}", *r as f64 / 1024.0))
                .collect();
            println!(
                "[{minute:>3} min] downloads {} ({:.1} MB), wrong {}, failed {}; RSS MB {}",
                counts.ok.load(Ordering::Relaxed),
                counts.bytes.load(Ordering::Relaxed) as f64 / 1e6,
                counts.wrong.load(Ordering::Relaxed),
                counts.failed.load(Ordering::Relaxed),
                rss.join(" ")
            );
        }
    }
    stop.store(true, Ordering::Relaxed);
    rt.block_on(async {
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(150), t).await;
        }
    });
    let secs = t0.elapsed().as_secs_f64();
    println!("\n| node | RSS after 2 min (MB) | RSS at end (MB) | max (MB) | end / 2 min |");
    println!("|---|---|---|---|---|");
    for (i, (name, _)) in nodes.iter().enumerate() {
        let w = warm[i].unwrap_or(0);
        println!(
            "| {name} | {:.1} | {:.1} | {:.1} | {:.2} |",
            w as f64 / 1024.0,
            last[i] as f64 / 1024.0,
            max[i] as f64 / 1024.0,
            if w > 0 {
                last[i] as f64 / w as f64
            } else {
                0.0
            }
        );
    }
    let ok = counts.ok.load(Ordering::Relaxed);
    let bytes = counts.bytes.load(Ordering::Relaxed);
    println!(
        "\n{ok} verified downloads, {:.1} MB ({:.2} MB/s) in {secs:.0} s; wrong bytes: {}; failed downloads: {}",
        bytes as f64 / 1e6,
        bytes as f64 / 1e6 / secs,
        counts.wrong.load(Ordering::Relaxed),
        counts.failed.load(Ordering::Relaxed)
    );
    drop(net);
}
