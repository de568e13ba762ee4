//! In-process onionmix relays and a TCP target for circuit tests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use onionmix_cell::relay::{Begin, TargetHost};
use onionmix_node::client::circuit::{self, HopTarget};
use onionmix_node::reactor::{StreamEvent, StreamRequest};
use onionmix_node::relay::{self, RelayCtx, config::RelayConfig};

/// An in-process relay on loopback (an exit to 127.0.0.0/8 when `exit`),
/// `extra` appended to its config, and how to reach it.
pub async fn start_relay(
    dir: &std::path::Path,
    nick: &str,
    exit: bool,
    extra: &str,
) -> (Arc<RelayCtx>, HopTarget) {
    let cfg = RelayConfig::parse(&format!(
        "data_dir = {:?}\nnickname = {nick:?}\nor_listen = \"127.0.0.1:0\"\nexit = {exit}\n\
         exit_policy = [\"accept 127.0.0.0/8:*\", \"reject *:*\"]\nexit_policy_reject_private = false\ntesting_network = true\n{extra}\n",
        dir.join(nick).display().to_string()
    ))
    .unwrap();
    let keys = relay::load_or_generate_keys(&cfg.data_dir).unwrap();
    let ctx = relay::make_ctx(cfg, keys, None).unwrap();
    let addr = relay::start(ctx.clone()).await.unwrap();
    let target = hop_target(&ctx, nick, addr);
    (ctx, target)
}

/// How to reach relay `ctx` at `addr`: ntor, fixed windows, its QUIC port
/// if it runs QUIC.
pub fn hop_target(ctx: &RelayCtx, nick: &str, addr: SocketAddr) -> HopTarget {
    HopTarget {
        nickname: nick.into(),
        rsa_id: ctx.rsa_id,
        ed_id: Some(ctx.ed_id),
        or_addr: addr,
        ntor_key: ctx.ntor_keys()[0].public(),
        ntor_v3: false,
        optimistic_data: true,
        flowctrl_cc: false,
        quic_port: ctx.quic.port(),
        params: None,
    }
}

/// A TCP server: "echo" mode echoes; a first line "bytes N" sends N
/// deterministic bytes and closes.
pub async fn start_target() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut first = [0u8; 32];
                let Ok(n) = s.read(&mut first).await else {
                    return;
                };
                let head = String::from_utf8_lossy(&first[..n]).to_string();
                if let Some(num) = head.strip_prefix("bytes ") {
                    let n: usize = num.trim().parse().unwrap_or(0);
                    let data = pattern(n);
                    let _ = s.write_all(&data).await;
                    let _ = s.shutdown().await;
                } else {
                    let _ = s.write_all(&first[..n]).await;
                    let mut buf = vec![0u8; 65536];
                    loop {
                        match s.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => {
                                if s.write_all(&buf[..n]).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                }
            });
        }
    });
    addr
}

pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

pub async fn bulk(circ: &circuit::Circuit, target: SocketAddr, n: usize) {
    let (mut s, ev) = circ
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
    s.write_all(format!("bytes {n}\n").as_bytes())
        .await
        .unwrap();
    let got = s.read_to_end(n + 1, Duration::from_secs(60)).await.unwrap();
    assert_eq!(got.len(), n);
    assert_eq!(Sha256::digest(&got), Sha256::digest(pattern(n)));
}
