//! End-to-end checks of every workload against a local sink through a direct SOCKS stub.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::*;
use crate::socks::Target;

/// An endpoint measured through the SOCKS port `socks`, to a sink's
/// `http` and `echo` servers (no HTTPS, onion service or tunnel).
fn socks_endpoint(label: &str, socks: SocketAddr, http: SocketAddr, echo: SocketAddr) -> Endpoint {
    Endpoint {
        label: label.into(),
        socks,
        http,
        echo,
        https: None,
        tls_ca: None,
        direct: false,
        netns: None,
        status_json: None,
        fresh: None,
        control: None,
        onion: None,
        tunnel: None,
        cpu: Vec::new(),
    }
}

/// A SOCKS5 server that connects straight to the target (IPv4
/// CONNECT; no auth or username/password, any credentials).
async fn direct_socks_server() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut c, _)) = l.accept().await {
            tokio::spawn(async move {
                let mut b = [0u8; 2];
                c.read_exact(&mut b).await?;
                let mut m = vec![0u8; b[1] as usize];
                c.read_exact(&mut m).await?;
                if m.contains(&2) {
                    c.write_all(&[5, 2]).await?;
                    let mut v = [0u8; 2];
                    c.read_exact(&mut v).await?;
                    let mut u = vec![0u8; v[1] as usize + 1];
                    c.read_exact(&mut u).await?;
                    let mut p = vec![0u8; u[u.len() - 1] as usize];
                    c.read_exact(&mut p).await?;
                    c.write_all(&[1, 0]).await?;
                } else {
                    c.write_all(&[5, 0]).await?;
                }
                let mut h = [0u8; 4];
                c.read_exact(&mut h).await?;
                let mut a = [0u8; 6];
                c.read_exact(&mut a).await?;
                let ip = std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]);
                let port = u16::from_be_bytes([a[4], a[5]]);
                let mut t = TcpStream::connect((ip, port)).await?;
                c.write_all(&[5, 0, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
                tokio::io::copy_bidirectional(&mut c, &mut t).await?;
                Ok::<(), std::io::Error>(())
            });
        }
    });
    addr
}

/// Every workload against a local sink, with a SOCKS stub that
/// connects directly (no Tor): the records have the right shape.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workloads_produce_records() {
    let sink = crate::sink::start(
        "127.0.0.1:0".parse().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
        "127.0.0.1:0".parse().unwrap(),
    )
    .await
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let ca = tmp.path().join("sink-ca.pem");
    let https = crate::sink::start_https("127.0.0.1:0".parse().unwrap(), &ca)
        .await
        .unwrap();
    let socks = direct_socks_server().await;
    let ep = Endpoint {
        https: Some(https),
        tls_ca: Some(ca.clone()),
        ..socks_endpoint("local/socks", socks, sink.http, sink.echo)
    };
    let quick = |w: &str| {
        let mut c = WorkloadConfig::named(w).unwrap();
        c.runs = 1;
        c.duration_secs = 0.5;
        c.warmup_secs = 0.1;
        c.interval_ms = 1;
        c.sizes = vec![2 << 20];
        c.timeout_secs = 10.0;
        c
    };
    let r = run_once(&quick("bulk"), &ep, 0, &|| {}).await;
    assert_eq!(r.len(), 1);
    assert!(r[0].ok(), "{:?}", r[0].error);
    for m in ["ttfb_ms", "ttlb_ms", "mbps_05_1", "max_gap_ms"] {
        assert!(r[0].metrics.contains_key(m), "{m}");
    }
    // The longest gap is at least the wait for the first byte and at
    // most the whole transfer.
    let gap = r[0].metrics["max_gap_ms"];
    assert!(
        gap >= r[0].metrics["ttfb_ms"] && gap <= r[0].metrics["ttlb_ms"],
        "{gap}"
    );
    let r = run_once(&quick("voip"), &ep, 0, &|| {}).await;
    let stream = r.iter().find(|x| x.kind == "stream").unwrap();
    assert_eq!(stream.metrics["packets_lost"], 0.0);
    // A share of wall-clock round trips: its range, not a maximum.
    let share = stream.metrics["share_under_150ms"];
    assert!((0.0..=1.0).contains(&share), "{share}");
    assert_eq!(r.iter().filter(|x| x.kind == "packet").count(), 5);
    // Sessions: plain HTTP and HTTPS, kept alive or a connection per
    // message; only connections that were opened have connect_ms.
    for (https, keep_alive) in [(false, true), (true, true), (true, false), (false, false)] {
        let mut c = quick("session");
        c.https = https;
        c.keep_alive = keep_alive;
        let r = run_once(&c, &ep, 0, &|| {}).await;
        assert_eq!(r.len(), 5);
        assert!(
            r.iter()
                .all(|x| x.ok() && x.metrics.contains_key("latency_ms")),
            "{r:?}"
        );
        let opened = r
            .iter()
            .filter(|x| x.metrics.contains_key("connect_ms"))
            .count();
        assert_eq!(opened, if keep_alive { 1 } else { 4 }, "{r:?}");
        let tls = r
            .iter()
            .filter(|x| x.metrics.contains_key("tls_handshake_ms"))
            .count();
        assert_eq!(tls, if https { opened } else { 0 }, "{r:?}");
        assert_eq!(r[4].metrics["https"], if https { 1.0 } else { 0.0 });
    }
    // Optimistic SOCKS: the request (or the ClientHello) follows the
    // SOCKS request without waiting for its reply; no connect_ms.
    for https in [false, true] {
        let mut c = quick("session");
        c.https = https;
        c.optimistic_socks = true;
        let r = run_once(&c, &ep, 0, &|| {}).await;
        assert!(r.iter().all(|x| x.ok()), "{r:?}");
        assert!(r.iter().all(|x| !x.metrics.contains_key("connect_ms")));
    }
    let mut c = quick("bulk");
    c.optimistic_socks = true;
    let r = run_once(&c, &ep, 0, &|| {}).await;
    assert!(r[0].ok() && r[0].metrics.contains_key("ttfb_ms"), "{r:?}");
    // HTTPS without the sink's CA (or with another): a clear error.
    let mut c = quick("session");
    c.https = true;
    let no_tls = Endpoint {
        https: None,
        ..ep.clone()
    };
    let r = run_once(&c, &no_tls, 0, &|| {}).await;
    assert!(r[0].error.as_deref().unwrap().contains("no HTTPS"), "{r:?}");
    assert!(r[1].error.as_deref().unwrap().contains("not sent"), "{r:?}");
    assert!(!r[4].ok());
    let other_ca = tmp.path().join("other.pem");
    std::fs::write(&other_ca, crate::sink::make_tls().unwrap().0).unwrap();
    let wrong = Endpoint {
        tls_ca: Some(other_ca),
        ..ep.clone()
    };
    let r = run_once(&c, &wrong, 0, &|| {}).await;
    assert!(
        r[0].error.as_deref().unwrap().contains("TLS handshake"),
        "{r:?}"
    );
    // Goodput: one record per stream count; the baseline goes direct.
    let mut g = quick("goodput");
    // The window includes each stream's SOCKS connect: room for a
    // loaded machine.
    g.duration_secs = 2.0;
    g.warmup_secs = 0.5;
    g.streams = vec![1, 3];
    for e in [ep.clone(), ep.baseline()] {
        let r = run_once(&g, &e, 0, &|| {}).await;
        assert_eq!(r.len(), 2);
        for (x, kind) in r.iter().zip(["streams:1", "streams:3"]) {
            assert!(x.ok(), "{:?}", x.error);
            assert!(x.metrics["mbps"] > 0.0, "{} {r:?}", e.label);
            assert_eq!(x.kind, kind);
        }
        assert_eq!(r[1].kind, "streams:3");
    }
    assert_eq!(ep.baseline().label, BASELINE_LABEL);
    // The baseline does not need the SOCKS port.
    let dead_socks = Endpoint {
        socks: "127.0.0.1:1".parse().unwrap(),
        ..ep.clone()
    };
    let r = run_once(&g, &dead_socks.baseline(), 0, &|| {}).await;
    assert!(r.iter().all(|x| x.ok()));
    // Reliability: `parallel` fetchers at once.
    let mut rl = quick("reliability");
    let r = run_once(&rl, &ep, 0, &|| {}).await;
    assert_eq!(r.len(), 1);
    assert!(r[0].ok());
    rl.parallel = 4;
    let r = run_once(&rl, &ep, 0, &|| {}).await;
    assert_eq!(r.len(), 4);
    assert!(r.iter().all(|x| x.ok()));
    let mut fetchers: Vec<f64> = r.iter().map(|x| x.metrics["fetcher"]).collect();
    fetchers.sort_by(f64::total_cmp);
    assert_eq!(fetchers, [0.0, 1.0, 2.0, 3.0]);
    let r = run_once(&quick("access"), &ep, 0, &|| {}).await;
    assert_eq!(r.len(), 2);
    assert!(r.iter().all(|x| x.ok()));
    // A dead SOCKS port gives errors, not panics.
    let dead = dead_socks;
    let r = run_once(&quick("bulk"), &dead, 0, &|| {}).await;
    assert!(r[0].error.as_deref().unwrap().starts_with("socks"));
}

/// Optimistic SOCKS and plain SOCKS ask for the same destination: an
/// endpoint's onion service (its virtual ports) when it has one. The
/// optimistic path once asked for the sink's address instead, so
/// `optimistic_socks` with `target = "onion"` measured an exit.
#[test]
fn both_socks_paths_go_to_the_onion_service() {
    let (http, echo, other): (SocketAddr, SocketAddr, SocketAddr) = (
        "10.0.0.1:80".parse().unwrap(),
        "10.0.0.1:7".parse().unwrap(),
        "10.0.0.1:9".parse().unwrap(),
    );
    let mut ep = socks_endpoint("x", "127.0.0.1:9050".parse().unwrap(), http, echo);
    assert_eq!(super::conn::socks_target(&ep, http), Target::Addr(http));
    let addr = format!("{}.onion", "a".repeat(56));
    ep.onion = Some(super::OnionTarget {
        address: addr.clone(),
        http_port: 8080,
        echo_port: 7007,
    });
    assert_eq!(
        super::conn::socks_target(&ep, http),
        Target::Host(addr.clone(), 8080)
    );
    assert_eq!(
        super::conn::socks_target(&ep, echo),
        Target::Host(addr, 7007)
    );
    assert_eq!(super::conn::socks_target(&ep, other), Target::Addr(other));
}
