//! The packet loop for real, without a Tor network: programs in a fresh
//! namespace (only `lo` and the TUN) resolve names through the tunnel's
//! resolver and connect; an upstream that stands in for the SOCKS port
//! carries the flows (`sink.test` leads to a local HTTP server, other
//! names are refused with SOCKS reply 0x05), resolves names (fallback
//! DNS: `sink.test` is 192.0.2.10) and echoes UDP for `echo.test`
//! (other UDP destinations: "command not supported", as stock tor
//! answers UDP ASSOCIATE). curl downloads 1 MiB over IPv4 and IPv6 (the
//! SHA-256 checked); the refused name gives "connection refused"; a UDP
//! round trip comes back and an uncarried one is refused; fallback DNS
//! answers the real address; per-app isolation gives each uid its own
//! key. Needs root, `ip`, `curl`, `bash`, `getent`, `setpriv`; skipped
//! otherwise (fails when ONIONMIX_REQUIRE_INTEROP=1).

use bytes::Bytes;
use onionmix_node::tunnel::dev::TunDevice;
use onionmix_node::tunnel::driver::{
    self, AppLookup, BoxFuture, ConnectError, Options, UdpChannel, Upstream,
};
use onionmix_node::tunnel::netns::Namespace;
use onionmix_node::tunnel::{APP_V4, APP_V6, RESOLVER_V6};
use onionmix_tunnel::TunnelConfig;
use onionmix_tunnel::dns::DnsMode;
use onionmix_tunnel::flows::{Isolation, Target};
use sha2::{Digest, Sha256};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;

const SINK_ADDR: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 10);

fn check() -> Result<(), String> {
    onionmix_testsupport::root_and_tools_check(
        &["ip", "curl", "bash", "setpriv"],
        "apt-get install iproute2 curl bash util-linux",
    )
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

/// The stand-in for a SOCKS port; it logs what it was asked, with the
/// isolation password.
struct Fake {
    server: SocketAddr,
    log: Mutex<Vec<(String, String, String)>>,
}

impl Fake {
    fn note(&self, kind: &str, what: String, pw: &str) {
        self.log
            .lock()
            .expect("log")
            .push((kind.into(), what, pw.into()));
    }
    fn passwords(&self, kind: &str) -> Vec<String> {
        self.log
            .lock()
            .expect("log")
            .iter()
            .filter(|(k, _, _)| k == kind)
            .map(|(_, _, p)| p.clone())
            .collect()
    }
}

impl Upstream for Fake {
    fn connect(
        &self,
        target: Target,
        isolation: String,
    ) -> BoxFuture<Result<tokio::net::TcpStream, ConnectError>> {
        self.note("connect", format!("{target:?}"), &isolation);
        let server = self.server;
        Box::pin(async move {
            let ours = match &target {
                Target::Host(h, 80) => h == "sink.test",
                Target::Addr(a) => a.ip() == IpAddr::V4(SINK_ADDR) && a.port() == 80,
                _ => false,
            };
            if !ours {
                return Err(ConnectError::Reply(0x05));
            }
            tokio::net::TcpStream::connect(server)
                .await
                .map_err(|e| ConnectError::Other(e.to_string()))
        })
    }

    fn resolve(
        &self,
        name: String,
        isolation: String,
    ) -> BoxFuture<Result<Vec<IpAddr>, ConnectError>> {
        self.note("resolve", name.clone(), &isolation);
        Box::pin(async move {
            if name == "sink.test" {
                Ok(vec![IpAddr::V4(SINK_ADDR)])
            } else {
                Err(ConnectError::Reply(0x04))
            }
        })
    }

    fn udp(
        &self,
        target: Target,
        isolation: String,
    ) -> BoxFuture<Result<UdpChannel, ConnectError>> {
        self.note("udp", format!("{target:?}"), &isolation);
        Box::pin(async move {
            if !matches!(&target, Target::Host(h, 7) if h == "echo.test") {
                return Err(ConnectError::Reply(0x07));
            }
            let (to_exit, mut rx) = mpsc::channel::<Bytes>(8);
            let (tx, from_exit) = mpsc::channel::<Bytes>(8);
            tokio::spawn(async move {
                while let Some(d) = rx.recv().await {
                    let mut back = b"echo:".to_vec();
                    back.extend_from_slice(&d);
                    if tx.send(Bytes::from(back)).await.is_err() {
                        return;
                    }
                }
            });
            Ok(UdpChannel { to_exit, from_exit })
        })
    }
}

struct Running {
    ns: Namespace,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<std::io::Result<onionmix_tunnel::Counters>>,
}

fn start(cfg: TunnelConfig, fake: Arc<Fake>, apps: bool, tag: &str) -> Running {
    let ns = Namespace::create().expect("namespace");
    let tun = TunDevice::create(&format!("omx{tag}{}", std::process::id() % 100_000)).expect("tun");
    tun.move_into(&ns, APP_V4, 32, cfg.policy.resolver_v6.map(|_| APP_V6))
        .expect("configure");
    ns.write_resolv_conf(IpAddr::V4(cfg.policy.resolver_v4))
        .expect("resolv.conf");
    let opts = Options {
        status: None,
        apps: apps.then(|| AppLookup::start(&ns).expect("app lookup")),
    };
    let (stop, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(driver::run(tun, cfg, fake, opts, async {
        let _ = stop_rx.await;
    }));
    Running { ns, stop, task }
}

async fn run_in(ns: &Namespace, prog: &str, args: &[&str]) -> std::process::Output {
    tokio::time::timeout(Duration::from_secs(120), ns.command(prog, args).output())
        .await
        .expect("command timed out")
        .expect("spawn")
}

async fn curl_body(
    ns: &Namespace,
    extra: &[&str],
    url: &str,
    out: &std::path::Path,
) -> std::process::Output {
    let out_s = out.to_string_lossy().to_string();
    let mut args = vec!["-sS", "--max-time", "100", "-o", out_s.as_str()];
    args.extend_from_slice(extra);
    args.push(url);
    run_in(ns, "curl", &args).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curl_in_namespace_through_the_driver() {
    if !onionmix_testsupport::require_or_skip("curl_in_namespace_through_the_driver", check()) {
        return;
    }
    const N: usize = 1 << 20;
    let fake = Arc::new(Fake {
        server: http_server(N).await,
        log: Mutex::new(Vec::new()),
    });
    let mut cfg = TunnelConfig::default();
    cfg.policy.resolver_v6 = Some(RESOLVER_V6);
    cfg.policy.carry_udp = true;
    let r = start(cfg, fake.clone(), false, "d");
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("body");

    // IPv4 and IPv6 (AAAA gives an address of the synthetic /64).
    for family in ["-4", "-6"] {
        let st = curl_body(&r.ns, &[family], "http://sink.test/bytes", &out).await;
        assert!(
            st.status.success(),
            "curl {family}: {}",
            String::from_utf8_lossy(&st.stderr)
        );
        let got = std::fs::read(&out).expect("body");
        assert_eq!(got.len(), N, "{family}");
        assert_eq!(
            Sha256::digest(&got).as_slice(),
            Sha256::digest(body(N)).as_slice(),
            "{family}"
        );
    }

    // A refused CONNECT is a refused connection for the program (RST).
    let st = curl_body(
        &r.ns,
        &[],
        "http://refused.test/",
        std::path::Path::new("/dev/null"),
    )
    .await;
    assert_eq!(
        st.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );

    // UDP carried: a round trip through the upstream's echo.
    let st = run_in(
        &r.ns,
        "bash",
        &["-c", "exec 3<>/dev/udp/echo.test/7; printf ping >&3; read -r -t 20 -N 9 line <&3; printf %s \"$line\""],
    )
    .await;
    assert_eq!(String::from_utf8_lossy(&st.stdout), "echo:ping", "{st:?}");
    // UDP the upstream cannot carry: ICMP port unreachable, so a read on
    // the connected socket fails at once (connection refused) instead of
    // timing out.
    let st = run_in(
        &r.ns,
        "bash",
        &["-c", "exec 3<>/dev/udp/other.test/9; printf x >&3; sleep 1; printf y >&3; read -r -t 20 -N 1 line <&3"],
    )
    .await;
    assert!(!st.status.success(), "{st:?}");

    let _ = r.stop.send(());
    let c = r.task.await.expect("join").expect("driver");
    eprintln!("{c:?}");
    assert_eq!(c.flows_connected, 2);
    // refused.test: curl tries its IPv6 and its IPv4 address.
    assert!((1..=2).contains(&c.flows_refused), "{c:?}");
    assert!(c.bytes_to_app > 2 * N as u64, "{c:?}");
    assert!(c.bytes_to_exit > 0, "{c:?}");
    assert_eq!((c.udp_flows_opened, c.udp_flows_refused), (2, 1));
    assert_eq!((c.udp_datagrams_to_exit, c.udp_datagrams_to_app), (1, 1));
    assert!(c.icmp_unreachable >= 1, "{c:?}");
    drop(r.ns);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallback_dns_and_per_app_isolation() {
    if !onionmix_testsupport::require_or_skip("fallback_dns_and_per_app_isolation", check()) {
        return;
    }
    const N: usize = 64 * 1024;
    let fake = Arc::new(Fake {
        server: http_server(N).await,
        log: Mutex::new(Vec::new()),
    });
    let mut cfg = TunnelConfig {
        dns: DnsMode::Fallback,
        ..TunnelConfig::default()
    };
    cfg.flows.isolation = Isolation::PerApp;
    cfg.mapping.v6 = None;
    let r = start(cfg, fake.clone(), true, "f");

    // The real address comes back, resolved through the upstream.
    let st = run_in(&r.ns, "getent", &["ahostsv4", "sink.test"]).await;
    let text = String::from_utf8_lossy(&st.stdout);
    assert!(text.starts_with("192.0.2.10"), "{text}");
    let st = run_in(&r.ns, "getent", &["ahostsv4", "nowhere.test"]).await;
    assert!(!st.status.success(), "NXDOMAIN: {st:?}");

    // Two users, two apps: each flow's key names its uid.
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("body");
    let st = curl_body(&r.ns, &[], "http://sink.test/", &out).await;
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let st = run_in(
        &r.ns,
        "setpriv",
        &[
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "curl",
            "-sS",
            "--max-time",
            "100",
            "-o",
            "/dev/null",
            "http://sink.test/",
        ],
    )
    .await;
    assert!(
        st.status.success(),
        "{}",
        String::from_utf8_lossy(&st.stderr)
    );
    let keys = fake.passwords("connect");
    assert_eq!(
        keys,
        ["a:0", "a:65534"],
        "{:?}",
        fake.log.lock().expect("log")
    );
    // Lookups went on the application's circuit too.
    assert!(
        fake.passwords("resolve")
            .iter()
            .all(|p| p.starts_with("a:"))
    );

    let _ = r.stop.send(());
    let c = r.task.await.expect("join").expect("driver");
    assert_eq!(c.flows_connected, 2, "{c:?}");
    assert_eq!(c.dns_mappings, 0, "no synthetic addresses in fallback mode");
    drop(r.ns);
}
