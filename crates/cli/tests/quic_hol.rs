//! Head-of-line blocking between two circuits that share a link, QUIC
//! links against TLS links (`docs/quic-links.md` §8): onionmix-basic
//! through the link emulator with 20 ms and 1% loss on every link; one
//! client, two circuits (SOCKS isolation) through the same guard. Circuit
//! E carries echo packets at 50/s; circuit B idles, then downloads in
//! bulk. On TLS, a segment of B's lost on the shared link holds up E's
//! cells behind it until TCP repairs it; on QUIC only B's stream waits.
//!
//! A measurement (minutes, root): it prints the echo round-trip
//! distribution with and without the bulk transfer for both transports.
//! Run by hand:
//! `cargo test --release -p onionmix --test quic_hol -- --ignored --nocapture`
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

mod common_net;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use onionmix_testbed::socks::{self, Target};
use onionmix_testbed::spec::Spec;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Echo packets per second on circuit E.
const RATE: f64 = 50.0;
/// Seconds of echoes per phase.
const PHASE_SECS: f64 = 30.0;
const PACKET: usize = 64;

/// The network; `cc` sets the relays' QUIC congestion controller.
fn spec(links: &str, cc: &str) -> Spec {
    let conf = format!("config = [\"quic_congestion = '{cc}'\"]\n");
    let text = format!(
        "name = \"hol-{links}\"\nlinks = \"{links}\"\nbootstrap_timeout_secs = 180\n\
         [emulation]\nseed = 7\ndefault = {{ delay_ms = 20.0, loss = 0.01 }}\n\
         [[nodes]]\nimpl = \"onionmix\"\nrole = \"authority\"\ncount = 3\n{conf}\
         [[nodes]]\nimpl = \"onionmix\"\nrole = \"relay\"\ncount = 3\n{conf}\
         [[nodes]]\nimpl = \"onionmix\"\nrole = \"exit\"\ncount = 2\n{conf}\
         [[nodes]]\nimpl = \"onionmix\"\nrole = \"client\"\ncount = 1\n"
    );
    Spec::parse("hol", &text).unwrap()
}

/// Echo round trips (ms) on a stream for `secs` at [`RATE`]; lost or
/// late echoes count at the end of the phase.
async fn echoes(s: &mut tokio::net::TcpStream, secs: f64) -> Vec<f64> {
    let n = (secs * RATE) as u64;
    let gap = Duration::from_secs_f64(1.0 / RATE);
    let (mut rd, mut wr) = s.split();
    let t0 = Instant::now();
    let sender = async {
        let mut tick = tokio::time::interval(gap);
        for seq in 0..n {
            tick.tick().await;
            let mut p = [0u8; PACKET];
            p[..8].copy_from_slice(&seq.to_be_bytes());
            p[8..16].copy_from_slice(&(t0.elapsed().as_nanos() as u64).to_be_bytes());
            if wr.write_all(&p).await.is_err() {
                break;
            }
        }
    };
    let receiver = async {
        let mut rtts = Vec::new();
        let mut p = [0u8; PACKET];
        let deadline = Duration::from_secs_f64(secs + 10.0);
        while (rtts.len() as u64) < n {
            let left = deadline.saturating_sub(t0.elapsed());
            match tokio::time::timeout(left, rd.read_exact(&mut p)).await {
                Ok(Ok(_)) => {
                    let sent = u64::from_be_bytes(p[8..16].try_into().unwrap());
                    rtts.push((t0.elapsed().as_nanos() as u64 - sent) as f64 / 1e6);
                }
                _ => break,
            }
        }
        rtts
    };
    let ((), rtts) = tokio::join!(sender, receiver);
    rtts
}

fn pct(v: &[f64], q: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let i = ((s.len() as f64 - 1.0) * q).round() as usize;
    s.get(i).copied().unwrap_or(f64::NAN)
}

fn summary(label: &str, v: &[f64]) -> String {
    format!(
        "{label:<28} n={:<5} p50={:>7.1} p90={:>7.1} p99={:>7.1} max={:>7.1} ms, >300 ms: {}",
        v.len(),
        pct(v, 0.5),
        pct(v, 0.9),
        pct(v, 0.99),
        pct(v, 1.0),
        v.iter().filter(|r| **r > 300.0).count()
    )
}

async fn phases(
    socks: SocketAddr,
    echo: SocketAddr,
    http: SocketAddr,
) -> (Vec<f64>, Vec<f64>, u64) {
    let t = Duration::from_secs(60);
    let mut e = socks::connect(socks, &Target::Addr(echo), Some(("echo", "x")), t)
        .await
        .expect("echo circuit");
    // Warm up the circuit.
    let _ = echoes(&mut e, 2.0).await;
    let idle = echoes(&mut e, PHASE_SECS).await;
    let mut b = socks::connect(socks, &Target::Addr(http), Some(("bulk", "x")), t)
        .await
        .expect("bulk circuit");
    b.write_all(format!("GET /bytes/{} HTTP/1.1\r\nHost: sink\r\n\r\n", 1u64 << 30).as_bytes())
        .await
        .unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop2 = stop.clone();
    let bulk = tokio::spawn(async move {
        let mut buf = vec![0u8; 1 << 16];
        let mut got = 0u64;
        while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
            match tokio::time::timeout(Duration::from_secs(1), b.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => got += n as u64,
                Err(_) => {}
            }
        }
        got
    });
    // Let the bulk transfer ramp up.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let busy = echoes(&mut e, PHASE_SECS).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let got = bulk.await.unwrap_or(0);
    (idle, busy, got)
}

#[test]
#[ignore = "measurement (minutes, root), run by hand"]
fn head_of_line_quic_vs_tls() {
    let _serial = common_net::serial();
    if !common_net::emulator_available("head_of_line_quic_vs_tls") {
        return;
    }
    let mut report = Vec::new();
    // ONIONMIX_HOL_CC=bbr (or newreno) adds QUIC links with that
    // controller at the relays.
    let mut runs = vec![("tls", "cubic".to_string()), ("quic", "cubic".to_string())];
    if let Ok(cc) = std::env::var("ONIONMIX_HOL_CC") {
        runs.push(("quic", cc));
    }
    for (links, cc) in runs {
        let tmp = tempfile::tempdir().unwrap();
        let net = common_net::start_spec(&spec(links, &cc), &tmp.path().join("net"));
        let links = format!("{links}/{cc}");
        let info = net.info().clone();
        let socks = info.clients(None)[0].socks_addr().unwrap();
        let sink = info.sink.clone().unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let (idle, busy, got) = rt.block_on(phases(socks, sink.echo, sink.http));
        let secs = PHASE_SECS + 3.0;
        report.push(summary(&format!("{links} echo, idle"), &idle));
        report.push(summary(&format!("{links} echo, with bulk"), &busy));
        report.push(format!(
            "{links} bulk: {:.1} MiB in ~{secs:.0} s ({:.2} Mbit/s)",
            got as f64 / (1u64 << 20) as f64,
            got as f64 * 8.0 / secs / 1e6
        ));
        drop(net);
    }
    eprintln!("\n{}", report.join("\n"));
}
