//! In-process onionmix relays and a TCP target for tests that run our
//! client against our relays (circuits, congestion control, conflux, QUIC
//! links).
#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use onionmix_cell::relay::{Begin, TargetHost};
use onionmix_node::client::circuit::{self, HopTarget};
use onionmix_node::client::stream::{Stream, StreamError};
use onionmix_node::reactor::{StreamEvent, StreamRequest};
use onionmix_node::relay::{self, RelayCtx, config::RelayConfig};
use onionmix_proto::cc::CcParams;

/// An in-process relay (an exit to loopback when `exit`), and how our
/// client reaches it, asking for congestion control (ntor-v3).
pub async fn start_relay(
    dir: &std::path::Path,
    nick: &str,
    exit: bool,
) -> (Arc<RelayCtx>, HopTarget) {
    start_relay_with(dir, nick, exit, true).await
}

/// [`start_relay`], with ntor and fixed windows when `cc` is false.
pub async fn start_relay_with(
    dir: &std::path::Path,
    nick: &str,
    exit: bool,
    cc: bool,
) -> (Arc<RelayCtx>, HopTarget) {
    start_relay_cfg(dir, nick, exit, cc, "").await
}

/// [`start_relay_with`], `extra` appended to the relay's config (the hop
/// carries its QUIC port when it runs QUIC).
pub async fn start_relay_cfg(
    dir: &std::path::Path,
    nick: &str,
    exit: bool,
    cc: bool,
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
    let target = HopTarget {
        ntor_v3: cc,
        flowctrl_cc: cc,
        params: cc.then(|| Arc::new(CcParams::default())),
        ..HopTarget::local_relay(&ctx, addr)
    };
    (ctx, target)
}

pub fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

/// A TCP target. A first line "bytes N\n" gets N pattern bytes and the
/// connection closed; "sink N D\n" waits D ms, then reads N bytes and
/// answers their SHA-256; anything else is echoed.
pub async fn start_target() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((s, _)) = l.accept().await else {
                return;
            };
            tokio::spawn(serve_target(s));
        }
    });
    addr
}

async fn serve_target(mut s: TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 65536];
    // Could `b` still be the start of a command line?
    let maybe_cmd = |b: &[u8]| {
        [&b"bytes "[..], &b"sink "[..]]
            .iter()
            .any(|c| b.starts_with(c) || c.starts_with(b))
    };
    let line_end = loop {
        let n = match s.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        // The command line may arrive in one read with the data after it
        // (the exit coalesces cells): look for its end before judging
        // the length.
        if maybe_cmd(&buf)
            && let Some(i) = buf.iter().take(64).position(|&c| c == b'\n')
        {
            break Some(i);
        }
        if !maybe_cmd(&buf) || buf.len() > 64 {
            break None;
        }
    };
    let Some(i) = line_end else {
        // Echo.
        if s.write_all(&buf).await.is_err() {
            return;
        }
        loop {
            match s.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => {
                    if s.write_all(&chunk[..n]).await.is_err() {
                        return;
                    }
                }
            }
        }
    };
    let line = String::from_utf8_lossy(&buf[..i]).trim().to_string();
    let rest = buf[i + 1..].to_vec();
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.as_slice() {
        ["bytes", n] => {
            let _ = s.write_all(&pattern(n.parse().unwrap_or(0))).await;
        }
        ["sink", n, delay] => {
            let n: usize = n.parse().unwrap();
            tokio::time::sleep(Duration::from_millis(delay.parse().unwrap())).await;
            let mut got = rest;
            got.truncate(n);
            let have = got.len();
            got.resize(n, 0);
            if s.read_exact(&mut got[have..]).await.is_ok() {
                let _ = s.write_all(&Sha256::digest(&got)).await;
            }
        }
        _ => {}
    }
    let _ = s.shutdown().await;
}

/// Fetch `n` pattern bytes from `target` over `circ` and check them.
pub async fn bulk(circ: &circuit::Circuit, target: SocketAddr, n: usize) {
    let mut s = open(circ, target).await;
    s.write_all(format!("bytes {n}\n").as_bytes())
        .await
        .unwrap();
    let got = s.read_to_end(n + 1, Duration::from_secs(60)).await.unwrap();
    assert_eq!(got.len(), n);
    assert_eq!(Sha256::digest(&got), Sha256::digest(pattern(n)));
}

/// BEGIN to `target` over `circ`: the stream and its first event, or why
/// the exit refused.
pub async fn try_open(
    circ: &circuit::Circuit,
    target: SocketAddr,
) -> Result<(Stream, StreamEvent), StreamError> {
    circ.open_stream(
        StreamRequest::Begin(Begin {
            host: TargetHost::Ip(target.ip()),
            port: target.port(),
            flags: 0,
        }),
        Duration::from_secs(20),
    )
    .await
}

/// A connected stream to `target` over `circ`.
pub async fn open(circ: &circuit::Circuit, target: SocketAddr) -> Stream {
    let (s, ev) = try_open(circ, target).await.expect("BEGIN");
    assert!(matches!(ev, StreamEvent::Connected(_)));
    s
}

/// Poll `f` every 50 ms until it holds, or panic naming `what` after
/// `limit`.
pub async fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + limit;
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
