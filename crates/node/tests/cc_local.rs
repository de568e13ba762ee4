//! Congestion control and XON/XOFF between our client and our relays
//! (in-process): negotiation, verified transfers both ways under Vegas,
//! XOFF/XON at a slow reader on either end, and fixed windows when the
//! exit's consensus turns congestion control off.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use onionmix_cell::relay::{Begin, TargetHost};
use onionmix_link::TlsTransport;
use onionmix_node::client::chanmgr::ChanMgr;
use onionmix_node::client::circuit::{self, HopTarget};
use onionmix_node::client::stream::Stream;
use onionmix_node::reactor::{StreamEvent, StreamRequest};
use onionmix_node::relay::{self, RelayCtx, config::RelayConfig};
use onionmix_proto::cc::CcParams;

async fn start_relay(dir: &std::path::Path, nick: &str, exit: bool) -> (Arc<RelayCtx>, HopTarget) {
    let cfg = RelayConfig::parse(&format!(
        "data_dir = {:?}\nnickname = {nick:?}\nor_listen = \"127.0.0.1:0\"\nexit = {exit}\n\
         exit_policy = [\"accept 127.0.0.0/8:*\", \"reject *:*\"]\nexit_policy_reject_private = false\ntesting_network = true\n",
        dir.join(nick).display().to_string()
    ))
    .unwrap();
    let keys = relay::load_or_generate_keys(&cfg.data_dir).unwrap();
    let ctx = relay::make_ctx(cfg, keys, None).unwrap();
    let addr = relay::start(ctx.clone()).await.unwrap();
    let target = HopTarget {
        nickname: nick.into(),
        rsa_id: ctx.rsa_id,
        ed_id: Some(ctx.ed_id),
        or_addr: addr,
        ntor_key: ctx.ntor_keys()[0].public(),
        ntor_v3: true,
        optimistic_data: true,
        flowctrl_cc: true,
        datagram: false,
        params: Some(Arc::new(CcParams::default())),
    };
    (ctx, target)
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

/// A TCP target: "bytes N\n" sends N pattern bytes and closes; "sink N
/// D\n" waits D ms, then reads N bytes and answers their SHA-256.
async fn start_target() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut line = Vec::new();
                let mut b = [0u8; 1];
                while !line.ends_with(b"\n") {
                    if s.read_exact(&mut b).await.is_err() {
                        return;
                    }
                    line.push(b[0]);
                }
                let line = String::from_utf8_lossy(&line).trim().to_string();
                let words: Vec<&str> = line.split_whitespace().collect();
                match words.as_slice() {
                    ["bytes", n] => {
                        let _ = s.write_all(&pattern(n.parse().unwrap())).await;
                        let _ = s.shutdown().await;
                    }
                    ["sink", n, delay] => {
                        let n: usize = n.parse().unwrap();
                        tokio::time::sleep(Duration::from_millis(delay.parse().unwrap())).await;
                        let mut got = vec![0u8; n];
                        if s.read_exact(&mut got).await.is_ok() {
                            let _ = s.write_all(&Sha256::digest(&got)).await;
                        }
                        let _ = s.shutdown().await;
                    }
                    _ => {}
                }
            });
        }
    });
    addr
}

async fn open(circ: &circuit::Circuit, target: SocketAddr) -> Stream {
    let (s, ev) = circ
        .open_stream(
            StreamRequest::Begin(Begin {
                host: TargetHost::Ip(target.ip()),
                port: target.port(),
                flags: 0,
            }),
            Duration::from_secs(20),
        )
        .await
        .expect("BEGIN");
    assert!(matches!(ev, StreamEvent::Connected(_)));
    s
}

async fn three_hops(tmp: &std::path::Path) -> (Arc<RelayCtx>, circuit::Circuit, ChanMgr) {
    let (_g, guard) = start_relay(tmp, "guard", false).await;
    let (_m, middle) = start_relay(tmp, "middle", false).await;
    let (exit_ctx, exit) = start_relay(tmp, "exit", true).await;
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let chan = mgr.get(&guard).await.unwrap();
    let circ = circuit::build(chan, vec![guard, middle, exit], Duration::from_secs(30))
        .await
        .expect("3-hop circuit");
    (exit_ctx, circ, mgr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn congestion_control_negotiated_and_transfers_verified_both_ways() {
    let tmp = tempfile::tempdir().unwrap();
    let (exit_ctx, circ, mgr) = three_hops(tmp.path()).await;
    let target = start_target().await;
    assert_eq!(
        circ.cc_sendme_inc,
        Some(31),
        "the exit agreed to congestion control"
    );
    assert_eq!(exit_ctx.stats.cc_circuits.load(Relaxed), 1);

    // Download: the exit sends under Vegas.
    let n = 5 * 1024 * 1024;
    let mut s = open(&circ, target).await;
    s.write_all(format!("bytes {n}\n").as_bytes())
        .await
        .unwrap();
    let got = s.read_to_end(n + 1, Duration::from_secs(60)).await.unwrap();
    assert_eq!(Sha256::digest(&got), Sha256::digest(pattern(n)));

    // Upload: our client sends under Vegas.
    let n = 3 * 1024 * 1024;
    let mut s = open(&circ, target).await;
    s.write_all(format!("sink {n} 0\n").as_bytes())
        .await
        .unwrap();
    s.write_all(&pattern(n)).await.unwrap();
    let digest = s.read_to_end(64, Duration::from_secs(60)).await.unwrap();
    assert_eq!(digest, Sha256::digest(pattern(n)).to_vec());

    // (The reactor counted the circuit when it added the exit hop.)
    assert_eq!(mgr.flow_stats().cc_circuits.load(Relaxed), 1);
    let st = circ.cc_status().await.expect("circuit alive");
    let cc = st.cc.expect("congestion control state");
    assert_eq!(cc.sendme_inc, 31);
    assert!(cc.cwnd >= 124, "{cc:?}");
    assert!(
        cc.min_rtt_usec > 0 && cc.ewma_rtt_usec > 0,
        "RTT measured: {cc:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_client_application_gets_xoff_then_xon() {
    let tmp = tempfile::tempdir().unwrap();
    let (exit_ctx, circ, mgr) = three_hops(tmp.path()).await;
    let target = start_target().await;
    let n = 4 * 1024 * 1024;
    let mut s = open(&circ, target).await;
    s.write_all(format!("bytes {n}\n").as_bytes())
        .await
        .unwrap();
    // Do not read: the buffer passes cc_xoff_client (500 cells) and we
    // send XOFF; the exit stops.
    let sent_xoff = async {
        while mgr.flow_stats().xoff_sent.load(Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), sent_xoff)
        .await
        .expect("XOFF sent by the client");
    let received = async {
        while exit_ctx.stats.xoff_received.load(Relaxed) == 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), received)
        .await
        .expect("XOFF received by the exit");
    // Reading again drains the buffer: XON, and the rest arrives intact.
    let got = s.read_to_end(n + 1, Duration::from_secs(60)).await.unwrap();
    assert_eq!(Sha256::digest(&got), Sha256::digest(pattern(n)));
    assert!(mgr.flow_stats().xon_sent.load(Relaxed) >= 1);
    assert!(exit_ctx.stats.xon_received.load(Relaxed) >= 1);
    let st = circ.cc_status().await.unwrap();
    assert!(
        st.stats.xoff_sent >= 1 && st.stats.invalid_cells == 0,
        "{st:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_target_gets_the_exit_to_send_xoff_then_xon() {
    let tmp = tempfile::tempdir().unwrap();
    let (exit_ctx, circ, mgr) = three_hops(tmp.path()).await;
    let target = start_target().await;
    // The target reads nothing for 3 s; 16 MiB is more than the kernel's
    // socket buffers hold, so the exit's stream buffer passes cc_xoff_exit.
    let n = 16 * 1024 * 1024;
    let mut s = open(&circ, target).await;
    s.write_all(format!("sink {n} 3000\n").as_bytes())
        .await
        .unwrap();
    s.write_all(&pattern(n)).await.unwrap();
    let digest = s.read_to_end(64, Duration::from_secs(120)).await.unwrap();
    assert_eq!(digest, Sha256::digest(pattern(n)).to_vec());
    assert!(
        exit_ctx.stats.xoff_sent.load(Relaxed) >= 1,
        "the exit sent XOFF"
    );
    assert!(exit_ctx.stats.xon_sent.load(Relaxed) >= 1, "and XON");
    assert!(mgr.flow_stats().xoff_received.load(Relaxed) >= 1);
    assert!(mgr.flow_stats().xon_received.load(Relaxed) >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exit_whose_consensus_disables_cc_keeps_fixed_windows() {
    let tmp = tempfile::tempdir().unwrap();
    let (_g, guard) = start_relay(tmp.path(), "guard", false).await;
    let (_m, middle) = start_relay(tmp.path(), "middle", false).await;
    let (exit_ctx, exit) = start_relay(tmp.path(), "exit", true).await;
    let mut off = BTreeMap::new();
    off.insert("cc_alg".to_string(), 0);
    exit_ctx.set_cc_params(CcParams::from_consensus(&off));
    let target = start_target().await;
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let chan = mgr.get(&guard).await.unwrap();
    let circ = circuit::build(chan, vec![guard, middle, exit], Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(circ.cc_sendme_inc, None);
    assert_eq!(exit_ctx.stats.cc_circuits.load(Relaxed), 0);
    let n = 3 * 1024 * 1024;
    let mut s = open(&circ, target).await;
    s.write_all(format!("bytes {n}\n").as_bytes())
        .await
        .unwrap();
    let got = s.read_to_end(n + 1, Duration::from_secs(60)).await.unwrap();
    assert_eq!(Sha256::digest(&got), Sha256::digest(pattern(n)));
    assert!(circ.cc_status().await.unwrap().cc.is_none());
}
