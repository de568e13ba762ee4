//! The packet loop for real, without a Tor network: a program in a fresh
//! namespace (only `lo` and the TUN) resolves a name through the tunnel's
//! resolver, connects, and its flow is carried by a connector that stands
//! in for the SOCKS port (it opens a TCP connection to a local HTTP server
//! for `sink.test`, and refuses `refused.test` with SOCKS reply 0x05).
//! curl downloads 1 MiB and the SHA-256 is checked; the refused name gives
//! curl "connection refused". Needs root, `ip`, `curl`; skipped otherwise
//! (fails when ONIONMIX_REQUIRE_INTEROP=1).

use onionmix_node::tunnel::dev::TunDevice;
use onionmix_node::tunnel::driver::{self, ConnectError, Connector};
use onionmix_node::tunnel::is_root;
use onionmix_node::tunnel::netns::Namespace;
use onionmix_tunnel::TunnelConfig;
use onionmix_tunnel::flows::Target;
use sha2::{Digest, Sha256};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn check() -> Result<(), String> {
    if !is_root() {
        return Err("needs root (network namespaces, TUN devices)".into());
    }
    for p in ["ip", "curl"] {
        if std::process::Command::new(p)
            .arg("-V")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_err()
        {
            return Err(format!("{p} missing: apt-get install iproute2 curl"));
        }
    }
    Ok(())
}

fn body(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i.wrapping_mul(31) % 251) as u8).collect()
}

/// A one-file HTTP/1.0 server: any request gets `n` bytes of `body`.
async fn http_server(n: usize) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let a = l.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut req = Vec::new();
                let mut b = [0u8; 1024];
                while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16 * 1024 {
                    match s.read(&mut b).await {
                        Ok(0) | Err(_) => return,
                        Ok(k) => req.extend_from_slice(b.get(..k).unwrap_or_default()),
                    }
                }
                let head = format!("HTTP/1.0 200 OK\r\nContent-Length: {n}\r\n\r\n");
                let _ = s.write_all(head.as_bytes()).await;
                let _ = s.write_all(&body(n)).await;
                let _ = s.shutdown().await;
            });
        }
    });
    a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_in_namespace_through_the_driver() {
    if !onionmix_testsupport::require_or_skip("curl_in_namespace_through_the_driver", check()) {
        return;
    }
    const N: usize = 1 << 20;
    let server = http_server(N).await;
    let connector: Connector = Arc::new(move |target: Target, _password: String| {
        Box::pin(async move {
            match target {
                Target::Host(h, 80) if h == "sink.test" => tokio::net::TcpStream::connect(server)
                    .await
                    .map_err(|e| ConnectError::Other(e.to_string())),
                _ => Err(ConnectError::Reply(0x05)),
            }
        })
    });

    let ns = Namespace::create().expect("namespace");
    let tun = TunDevice::create(&format!("omxd{}", std::process::id())).expect("tun");
    tun.move_into(&ns, Ipv4Addr::new(10, 255, 0, 1), 32)
        .expect("configure");
    let mut cfg = TunnelConfig::default();
    cfg.mapping.v6 = None;
    ns.write_resolv_conf(IpAddr::V4(cfg.policy.resolver_v4))
        .expect("resolv.conf");
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let loop_task = tokio::spawn(driver::run(tun, cfg, connector, async {
        let _ = stop_rx.await;
    }));

    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("body");
    let out_s = out.to_string_lossy().to_string();
    let st = tokio::time::timeout(
        Duration::from_secs(120),
        ns.command(
            "curl",
            &[
                "-sS",
                "--max-time",
                "100",
                "-o",
                &out_s,
                "http://sink.test/bytes",
            ],
        )
        .status(),
    )
    .await
    .expect("curl timed out")
    .expect("spawn curl");
    assert!(st.success(), "curl failed: {st}");
    let got = std::fs::read(&out).expect("body");
    assert_eq!(got.len(), N);
    assert_eq!(
        Sha256::digest(&got).as_slice(),
        Sha256::digest(body(N)).as_slice()
    );

    // A refused CONNECT is a refused connection for the program (RST).
    let r = tokio::time::timeout(
        Duration::from_secs(120),
        ns.command(
            "curl",
            &[
                "-sS",
                "--max-time",
                "60",
                "-o",
                "/dev/null",
                "http://refused.test/",
            ],
        )
        .output(),
    )
    .await
    .expect("curl timed out")
    .expect("spawn curl");
    assert_eq!(
        r.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&r.stderr)
    );

    let _ = stop_tx.send(());
    let counters = loop_task.await.expect("join").expect("driver");
    eprintln!("{counters:?}");
    assert_eq!(counters.flows_connected, 1);
    assert_eq!(counters.flows_refused, 1);
    // The body and the response header went to the application.
    assert!(counters.bytes_to_app > N as u64, "{counters:?}");
    assert!(counters.bytes_to_exit > 0, "{counters:?}");
    drop(ns);
}
