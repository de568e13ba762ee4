//! Relay benchmark (issue 3): forwarding throughput of one `onionmix relay`
//! process with 1 and 2 worker threads, and its resident memory with 1,000
//! open circuits.
//!
//! ```sh
//! cargo build --release -p onionmix
//! cargo run --release -p onionmix-node --example relay_bench -- target/release/onionmix
//! ```
//!
//! The relay runs as its own process (an exit accepting only loopback); this
//! process is the load: `STREAMS` one-hop circuits, each downloading
//! `PER_STREAM` bytes from a local TCP source through the relay at once.
//! Everything shares this machine's cores, so the load generator competes
//! with the relay; the numbers say so.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::print_stdout)]

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use onionmix_cell::relay::{Begin, TargetHost};
use onionmix_link::TlsTransport;
use onionmix_node::client::chanmgr::ChanMgr;
use onionmix_node::client::circuit::{self, HopTarget};
use onionmix_node::reactor::StreamRequest;
use onionmix_node::relay;

const STREAMS: usize = 8;
const PER_STREAM: usize = 32 << 20;

struct Proc(Child);
impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

fn cpu_secs(pid: u32) -> f64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = s
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    let t: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0)
        + f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    t as f64 / 100.0
}

async fn source() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut b = [0u8; 1];
                if s.read(&mut b).await.unwrap_or(0) == 0 {
                    return;
                }
                let chunk = vec![0x5au8; 64 * 1024];
                let mut left = PER_STREAM;
                while left > 0 {
                    let n = left.min(chunk.len());
                    if s.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                    left -= n;
                }
                let _ = s.shutdown().await;
            });
        }
    });
    a
}

fn start_relay(bin: &str, dir: &std::path::Path, threads: usize) -> (Proc, HopTarget) {
    let data = dir.join(format!("relay-{threads}"));
    let port = free_port();
    let cfg = format!(
        "data_dir = {:?}\nnickname = \"bench{threads}\"\nor_listen = \"127.0.0.1:{port}\"\nexit = true\n\
         exit_policy = [\"accept 127.0.0.0/8:*\", \"reject *:*\"]\nexit_policy_reject_private = false\n\
         testing_network = true\nthreads = {threads}\ncreate_rate_per_channel = 100000\n\
         max_circuits_per_channel = 4096\nallow_single_hop_exits = true\n",
        data.display().to_string()
    );
    std::fs::create_dir_all(&data).unwrap();
    std::fs::write(data.join("relay.toml"), cfg).unwrap();
    let keys = relay::load_or_generate_keys(&data).unwrap();
    let child = Command::new(bin)
        .args(["relay", "--config"])
        .arg(data.join("relay.toml"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let t0 = Instant::now();
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "relay did not start"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let hop = HopTarget {
        nickname: format!("bench{threads}"),
        rsa_id: keys.rsa_id(),
        ed_id: Some(keys.ed_id()),
        or_addr: addr,
        ntor_key: keys.ntor_keys()[0].public(),
        ntor_v3: false,
        optimistic_data: true,
        flowctrl_cc: false,
        quic_port: None,
        datagram: false,
        params: None,
    };
    (Proc(child), hop)
}

async fn throughput(hop: &HopTarget, src: SocketAddr) -> f64 {
    let mut tasks = Vec::new();
    let t0 = Instant::now();
    for _ in 0..STREAMS {
        let hop = hop.clone();
        tasks.push(tokio::spawn(async move {
            // One connection per circuit, like distinct clients.
            let mgr = ChanMgr::new(TlsTransport::client().unwrap());
            let chan = mgr.get(&hop).await.unwrap();
            let circ = circuit::build(chan, vec![hop], Duration::from_secs(20))
                .await
                .unwrap();
            let (mut s, _) = circ
                .open_stream(
                    StreamRequest::Begin(Begin {
                        host: TargetHost::Ip(src.ip()),
                        port: src.port(),
                        flags: 0,
                    }),
                    Duration::from_secs(20),
                )
                .await
                .unwrap();
            s.write_all(b"g").await.unwrap();
            let got = s
                .read_to_end(PER_STREAM + 1, Duration::from_secs(300))
                .await
                .unwrap();
            assert_eq!(got.len(), PER_STREAM);
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (STREAMS * PER_STREAM) as f64 * 8.0 / t0.elapsed().as_secs_f64() / 1e6
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let bin = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "target/release/onionmix".into());
    let tmp = tempfile::tempdir().unwrap();
    let src = source().await;
    println!(
        "relay forwarding: {STREAMS} one-hop circuits x {} MiB each",
        PER_STREAM >> 20
    );
    for threads in [1usize, 2] {
        let (p, hop) = start_relay(&bin, tmp.path(), threads);
        let c0 = cpu_secs(p.0.id());
        let mut runs: Vec<f64> = Vec::new();
        for _ in 0..3 {
            runs.push(throughput(&hop, src).await);
        }
        runs.sort_by(|a, b| a.total_cmp(b));
        let cpu = cpu_secs(p.0.id()) - c0;
        println!(
            "  {threads} worker thread(s): median {:.0} Mbit/s (runs {:?}), relay CPU {:.1} s for {} MiB",
            runs[1],
            runs.iter().map(|r| r.round()).collect::<Vec<_>>(),
            cpu,
            3 * STREAMS * (PER_STREAM >> 20)
        );
    }

    // Memory with 1,000 open circuits on one relay.
    let (p, hop) = start_relay(&bin, tmp.path(), 2);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let base = rss_kib(p.0.id());
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let chan = mgr.get(&hop).await.unwrap();
    let mut held = Vec::new();
    for _ in 0..1000 {
        held.push(
            circuit::build(chan.clone(), vec![hop.clone()], Duration::from_secs(20))
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let with = rss_kib(p.0.id());
    println!(
        "relay RSS: {:.1} MiB idle, {:.1} MiB with {} open circuits ({:.1} KiB per circuit)",
        base as f64 / 1024.0,
        with as f64 / 1024.0,
        held.len(),
        (with.saturating_sub(base)) as f64 / held.len() as f64
    );
}
