//! A relay's metrics port (tor's MetricsPort): Prometheus text over HTTP,
//! wrong methods and paths refused, a non-loopback address refused at
//! start.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use onionmix_node::relay::{self, config::RelayConfig};
use onionmix_testsupport::ports::free_port;

async fn get(addr: std::net::SocketAddr, req: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_string(&mut out))
        .await
        .unwrap()
        .unwrap();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_serves_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port("127.0.0.1").unwrap();
    let cfg = RelayConfig::parse(&format!(
        "data_dir = {:?}\nnickname = \"m\"\nor_listen = \"127.0.0.1:0\"\ntesting_network = true\nmetrics_port = \"127.0.0.1:{port}\"\n",
        dir.path().display().to_string()
    ))
    .unwrap();
    let keys = relay::load_or_generate_keys(&cfg.data_dir).unwrap();
    let ctx = relay::make_ctx(cfg, keys, None).unwrap();
    relay::start(ctx.clone()).await.unwrap();
    let addr: std::net::SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let r = get(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.0 200 OK\r\n"), "{r}");
    assert!(
        r.contains("Content-Type: text/plain; version=0.0.4\r\n"),
        "{r}"
    );
    assert!(
        r.contains("# TYPE onionmix_relay_channels gauge\nonionmix_relay_channels 0\n"),
        "{r}"
    );
    assert!(
        r.contains("onionmix_relay_circuits_total{outcome=\"created\"} 0\n"),
        "{r}"
    );
    assert!(
        r.contains("onionmix_relay_dos_total{type=\"creates_refused\"} 0\n"),
        "{r}"
    );
    assert!(
        get(addr, "POST /metrics HTTP/1.0\r\n\r\n")
            .await
            .starts_with("HTTP/1.0 405 ")
    );
    assert!(
        get(addr, "GET /nope HTTP/1.0\r\n\r\n")
            .await
            .starts_with("HTTP/1.0 404 ")
    );
    // A bad head gets no answer, and the endpoint keeps serving.
    let _ = get(addr, "\x00\x01garbage\r\n\r\n").await;
    assert!(
        get(addr, "GET /metrics HTTP/1.0\r\n\r\n")
            .await
            .starts_with("HTTP/1.0 200 OK")
    );

    let bad = RelayConfig::parse(&format!(
        "data_dir = {:?}\nnickname = \"m\"\nor_listen = \"127.0.0.1:0\"\nmetrics_port = \"0.0.0.0:{port}\"\n",
        dir.path().display().to_string()
    ));
    assert!(bad.unwrap_err().contains("allow_public_metrics"));
}
