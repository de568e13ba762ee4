//! Congestion control (proposal 324) and XON/XOFF with stock tor 0.4.9:
//! our client through stock exits, and a stock client through our exits.
//! Each side shows it negotiated: our counters (status.json), the stock
//! exit's MetricsPort congestion-control counters, the stock client's
//! `CIRC_BW` events with `CWND`/`RTT` fields. Transfers are SHA-256
//! verified both ways, and a reader that stops for a while makes its side
//! send XOFF and then XON.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

mod common_net;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use onionmix_testbed::netinfo::NodeInfo;
use onionmix_testbed::socks::{self, Target};
use onionmix_testbed::spec::{Implementation, Role};
use onionmix_testbed::{http, torctl};

/// A stream whose reads start only after `pause`: the application on
/// the far side of a SOCKS proxy that is slow to read.
struct PausedReads<S> {
    inner: S,
    pause: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> PausedReads<S> {
    fn new(inner: S, pause: Duration) -> Self {
        PausedReads {
            inner,
            pause: Some(Box::pin(tokio::time::sleep(pause))),
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for PausedReads<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        if let Some(p) = self.pause.as_mut() {
            if p.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.pause = None;
        }
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for PausedReads<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        b: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, b)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Download `n` verified bytes through `proxy` (with SOCKS credentials
/// `auth`, which isolate circuits), reading nothing for `pause` after the
/// request.
async fn download(
    proxy: SocketAddr,
    sink: SocketAddr,
    n: u64,
    pause: Duration,
    auth: Option<(&str, &str)>,
) -> Duration {
    let t0 = Instant::now();
    let s = socks::connect(proxy, &Target::Addr(sink), auth, Duration::from_secs(60))
        .await
        .unwrap();
    let mut s = PausedReads::new(s, pause);
    let r = tokio::time::timeout(
        Duration::from_secs(180),
        http::get(&mut s, &sink.ip().to_string(), &format!("/bytes/{n}"), t0),
    )
    .await
    .expect("download finished in time")
    .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len() as u64, n);
    assert!(r.sha256_ok(), "SHA-256 mismatch for {n} bytes");
    t0.elapsed()
}

/// A stock tor's MetricsPort counter. (tor answers with a
/// `Content-Length` and keeps the connection open.)
fn metric(port: u16, name: &str) -> Option<u64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").ok()?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let n = s.read(&mut chunk).ok()?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf);
        if let Some((head, body)) = text.split_once("\r\n\r\n") {
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("Content-Length: "))
                .and_then(|v| v.trim().parse::<usize>().ok())?;
            if body.len() >= len {
                break;
            }
        }
    }
    let text = String::from_utf8_lossy(&buf);
    text.lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.trim().parse::<f64>().ok())
        .map(|v| v as u64)
}

#[test]
fn onionmix_client_negotiates_cc_with_stock_exits() {
    if !common_net::tor_available("onionmix_client_negotiates_cc_with_stock_exits") {
        return;
    }
    let _serial = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let m0 = onionmix_testsupport::ports::free_port("127.0.0.1").unwrap();
    let m1 = onionmix_testsupport::ports::free_port("127.0.0.1").unwrap();
    let m_ours = onionmix_testsupport::ports::free_port("127.0.0.1").unwrap();
    let spec = format!(
        r#"name = "cc-stock-exits"
description = "stock network with MetricsPorts on the exits, and our client"
[[nodes]]
impl = "tor"
role = "authority"
count = 3
[[nodes]]
impl = "tor"
role = "relay"
count = 2
[[nodes]]
impl = "tor"
role = "exit"
torrc = ["MetricsPort 127.0.0.1:{m0}", "MetricsPortPolicy accept 127.0.0.1"]
[[nodes]]
impl = "tor"
role = "exit"
torrc = ["MetricsPort 127.0.0.1:{m1}", "MetricsPortPolicy accept 127.0.0.1"]
[[nodes]]
impl = "onionmix"
role = "client"
config = ['metrics_port = "127.0.0.1:{m_ours}"']
"#
    );
    let spec = common_net::write_spec(tmp.path(), &spec);
    let net = common_net::start(&spec, &tmp.path().join("net"));
    let info = net.info().clone();
    let om = info.clients(Some(Implementation::Onionmix))[0].clone();
    let proxy = om.socks_addr().unwrap();
    let sink = info.sink.clone().unwrap();
    let circs = |port| {
        metric(
            port,
            "tor_relay_congestion_control_total{state=\"cc_circuits\",action=\"circs_created\"}",
        )
        .expect("a MetricsPort answer")
    };
    let before = circs(m0) + circs(m1);

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // 5 MiB down under the stock exit's Vegas, on a fresh circuit (new
        // SOCKS credentials). Our side runs without stream windows: had the
        // exit not agreed to congestion control, it would stop after 500
        // cells waiting for stream SENDMEs.
        let t = download(proxy, sink.http, 5 << 20, Duration::ZERO, Some(("cc", "1"))).await;
        eprintln!("5 MiB through a stock exit in {t:?}");
        // 2 MiB up and back (our client's Vegas uploads).
        common_net::echo_verified(proxy, sink.echo, 2 << 20).await;
    });
    let omv = [&om];
    let cc = common_net::wait_for_status(
        &omv,
        "/flow_control/cc_circuits",
        1,
        Duration::from_secs(20),
    );
    eprintln!("our client: {cc} circuit(s) with congestion control");
    // The stock exits' side: they count congestion-controlled circuits.
    // The download may have taken a circuit our client built before
    // `before` was read; the one it builds to replace it counts then, so
    // this waits rather than reads once.
    onionmix_testsupport::wait_for_seen(
        "the stock exits to count a new congestion-controlled circuit",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || {
            let after = circs(m0) + circs(m1);
            if after > before { Ok(()) } else { Err(after) }
        },
    );
    eprintln!(
        "stock exits: circs_created {before} -> {}",
        circs(m0) + circs(m1)
    );

    // A reader that stops for 3 s: our client's buffer for the stream
    // passes cc_xoff_client, it sends XOFF, the stock exit stops, and XON
    // resumes it once the reader catches up.
    rt.block_on(async {
        let t = download(proxy, sink.http, 20 << 20, Duration::from_secs(3), None).await;
        eprintln!("20 MiB with a 3 s stall in {t:?}");
    });
    common_net::wait_for_status(&omv, "/flow_control/xoff_sent", 1, Duration::from_secs(20));
    common_net::wait_for_status(&omv, "/flow_control/xon_sent", 1, Duration::from_secs(20));
    assert_eq!(
        common_net::status_sum(&omv, "/flow_control/invalid_cells"),
        0
    );

    // Our client's MetricsPort after that traffic: circuits built (with
    // their build times), streams carried, the bytes read, its channels.
    let ours = |name: &str| metric(m_ours, name).unwrap_or_else(|| panic!("no {name}"));
    let read = ours("onionmix_client_bytes_total{direction=\"read\"}");
    assert!(read >= 27 << 20, "bytes read: {read}");
    assert!(ours("onionmix_client_bytes_total{direction=\"written\"}") >= 2 << 20);
    assert!(ours("onionmix_client_streams_total{outcome=\"succeeded\"}") >= 3);
    assert!(ours("onionmix_client_circuits_total{outcome=\"built\"}") >= 1);
    assert!(ours("onionmix_client_circuit_build_seconds_count") >= 1);
    assert!(ours("onionmix_client_channels") >= 1);
    // A gauge: whatever is queued right now (nothing much, the transfers
    // are over), but present.
    let _ = ours("onionmix_client_channel_queued_bytes");
}

#[test]
fn stock_client_negotiates_cc_with_our_exits() {
    if !common_net::tor_available("stock_client_negotiates_cc_with_our_exits") {
        return;
    }
    let _serial = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let spec = r#"name = "cc-our-exits"
description = "stock authorities, relays and client; onionmix exits only"
[[nodes]]
impl = "tor"
role = "authority"
count = 3
[[nodes]]
impl = "tor"
role = "relay"
count = 2
[[nodes]]
impl = "onionmix"
role = "exit"
count = 2
[[nodes]]
impl = "tor"
role = "client"
"#;
    let spec = common_net::write_spec(tmp.path(), spec);
    let net = common_net::start(&spec, &tmp.path().join("net"));
    let info = net.info().clone();
    let stock = info.clients(Some(Implementation::Tor))[0].clone();
    let proxy = stock.socks_addr().unwrap();
    let sink = info.sink.clone().unwrap();
    let exits: Vec<NodeInfo> = info
        .nodes
        .iter()
        .filter(|n| n.implementation == Implementation::Onionmix && n.has_role(Role::Exit))
        .cloned()
        .collect();
    let exits: Vec<&NodeInfo> = exits.iter().collect();
    let control = SocketAddr::from(([127, 0, 0, 1], stock.control_port.unwrap()));
    let cookie = stock.data_dir.join("control_auth_cookie");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let events = rt.block_on(async {
        let watch = torctl::watch_circ_bw(control, &cookie, Duration::from_secs(30))
            .await
            .unwrap();
        let t = download(proxy, sink.http, 5 << 20, Duration::ZERO, None).await;
        eprintln!("5 MiB from our exit to a stock client in {t:?}");
        common_net::echo_verified(proxy, sink.echo, 2 << 20).await;
        // CIRC_BW events come about once a second.
        tokio::time::sleep(Duration::from_secs(3)).await;
        watch.finish().await
    });
    // Every exit circuit of the stock client ends at one of our exits: a
    // CIRC_BW event with CWND means it negotiated congestion control with
    // us; the upload made its window grow and its RTT be measured.
    assert!(
        !events.is_empty(),
        "no CIRC_BW event with CWND: no congestion control"
    );
    let max_cwnd = events.iter().filter_map(|e| e.cwnd).max().unwrap_or(0);
    let min_rtt = events
        .iter()
        .filter_map(|e| e.min_rtt_ms)
        .max()
        .unwrap_or(0);
    eprintln!(
        "stock client CIRC_BW: {} events, largest CWND {max_cwnd}, MIN_RTT up to {min_rtt} ms",
        events.len()
    );
    assert!(max_cwnd > 124, "the stock client's window never grew");
    let cc = common_net::wait_for_status(
        &exits,
        "/congestion_control/cc_circuits",
        1,
        Duration::from_secs(20),
    );
    eprintln!("our exits: {cc} circuit(s) with congestion control");

    // The stock client's SOCKS reader stalls: its buffer passes
    // cc_xoff_client, it sends XOFF to our exit, and later XON.
    rt.block_on(async {
        let t = download(proxy, sink.http, 20 << 20, Duration::from_secs(3), None).await;
        eprintln!("20 MiB with a 3 s stall in {t:?}");
    });
    common_net::wait_for_status(
        &exits,
        "/congestion_control/xoff_received",
        1,
        Duration::from_secs(20),
    );
    common_net::wait_for_status(
        &exits,
        "/congestion_control/xon_received",
        1,
        Duration::from_secs(20),
    );
}
