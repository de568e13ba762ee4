//! `onionmix tunnel` end to end over private Tor networks on loopback:
//! programs run in a fresh network namespace whose only interfaces are
//! `lo` and the tunnel's TUN device.
//!
//! - `--exec curl`: the sink's name (`sink.onionmix.test`, which only the
//!   network's exits can resolve) through the tunnel's resolver (a
//!   synthetic address), 1 MiB and 20 MiB with the SHA-256 checked, over
//!   an all-onionmix network (`onionmix-basic`) and over stock tor
//!   (`tor-basic`, stock tor client and relays);
//! - UDP: a round trip through the sink's UDP echo over onionmix exits
//!   (CONNECT_UDP/DATAGRAM, docs/udp-over-tor.md); over stock tor (stock
//!   client, or the onionmix client with stock exits only) the policy
//!   (ICMP port unreachable, counted in the status file);
//! - isolation, visible in circuit ids (the client's STREAM events on its
//!   control port): per flow, every flow its own circuit; per app, one
//!   circuit per uid; per destination, one for the host;
//! - a long-running tunnel (no `--exec`) with its status file and view, and
//!   a clean SIGTERM shutdown;
//! - fail closed with a dead SOCKS port.
//!
//! Needs root, `ip`, `curl`, `bash`, `setpriv` (and `tor` for stock tor);
//! skipped otherwise, failing when ONIONMIX_REQUIRE_INTEROP=1. The leak
//! tests (packet capture) are in `tunnel_leaks.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

use common_net::{TunnelProc, tunnel_tools};
use onionmix_testbed::netinfo::{NetworkInfo, NodeInfo};
use onionmix_testbed::sink;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn curl_through_tunnel(dir: &Path, host: &str, port: u16, n: u64, out: &Path) {
    let url = format!("http://{host}:{port}/bytes/{n}");
    let st = Command::new(env!("CARGO_BIN_EXE_onionmix"))
        .args(["tunnel", "--net"])
        .arg(dir)
        .args([
            "--exec",
            "curl",
            "-sS",
            "--retry",
            "3",
            "--max-time",
            "600",
            "-o",
        ])
        .arg(out)
        .arg(&url)
        .status()
        .expect("run onionmix tunnel");
    assert!(st.success(), "onionmix tunnel --exec curl {url}: {st}");
    let body = std::fs::read(out).expect("downloaded body");
    assert_eq!(body.len() as u64, n, "{url}: length");
    assert_eq!(
        Sha256::digest(&body).as_slice(),
        sink::digest(n).as_slice(),
        "{url}: SHA-256"
    );
}

/// The client the tunnel uses (as `--net` picks it) and its SOCKS port.
fn client(info: &NetworkInfo) -> (NodeInfo, SocketAddr) {
    let ours = info.clients(Some(onionmix_testbed::spec::Implementation::Onionmix));
    let any = info.clients(None);
    let c = (*ours.first().or(any.first()).expect("a client")).clone();
    let socks = c.socks_addr().expect("socks");
    (c, socks)
}

/// Run `script` (bash) in a tunnel with `extra` options while watching the
/// client's STREAM events; the circuit id of every stream to `port` that
/// succeeded, in order, with the tunnel's final status.
fn streams_to(
    c: &NodeInfo,
    socks: SocketAddr,
    dir: &Path,
    name: &str,
    extra: &[&str],
    script: &str,
    port: u16,
) -> (Vec<String>, serde_json::Value) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ctl = SocketAddr::new(
        c.address.parse().unwrap(),
        c.control_port.expect("control port"),
    );
    let cookie = c.data_dir.join("control_auth_cookie");
    let watch = rt
        .block_on(onionmix_testbed::torctl::watch_events(
            ctl,
            &cookie,
            "STREAM",
            Duration::from_secs(60),
        ))
        .expect("STREAM events");
    let t = TunnelProc::start(socks, name, dir, extra);
    let out = t.run("bash", &["-c", script], Duration::from_secs(600));
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let st = t.stop();
    assert!(st.success(), "tunnel stop: {st}");
    let lines = rt.block_on(watch.finish());
    // 650 STREAM <id> SUCCEEDED <circ> <target> ...
    let circs = lines
        .iter()
        .filter_map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            (w.get(1) == Some(&"STREAM")
                && w.get(3) == Some(&"SUCCEEDED")
                && w.get(5).is_some_and(|t| t.ends_with(&format!(":{port}"))))
            .then(|| w.get(4).map(|c| c.to_string()))
            .flatten()
        })
        .collect();
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap())
            .unwrap();
    (circs, status)
}

fn distinct(v: &[String]) -> usize {
    v.iter().collect::<BTreeSet<_>>().len()
}

fn run(spec: &str, onionmix: bool) {
    let _s = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let net = common_net::start(spec, &dir);
    let info = net.info().clone();
    let s = info.sink.clone().expect("the network has a sink");
    for n in [1u64 << 20, 20 << 20] {
        curl_through_tunnel(
            &dir,
            &s.hostname,
            s.http.port(),
            n,
            &tmp.path().join("body"),
        );
    }
    let (c, socks) = client(&info);
    let url = format!("http://{}:{}/bytes/1000", s.hostname, s.http.port());
    let curl = format!("curl -sS --max-time 240 -o /dev/null {url}");
    let tag = std::process::id() % 10_000;

    // Per flow: three flows, three circuits.
    let (circs, _) = streams_to(
        &c,
        socks,
        tmp.path(),
        &format!("omxiso{tag}f"),
        &["--isolation", "flow"],
        &format!("{curl} && {curl} && {curl}"),
        s.http.port(),
    );
    assert_eq!(circs.len(), 3, "{circs:?}");
    assert_eq!(distinct(&circs), 3, "per-flow isolation: {circs:?}");
    // Per destination: one circuit for the host.
    let (circs, _) = streams_to(
        &c,
        socks,
        tmp.path(),
        &format!("omxiso{tag}d"),
        &[],
        &format!("{curl} && {curl}"),
        s.http.port(),
    );
    assert_eq!(circs.len(), 2, "{circs:?}");
    assert_eq!(distinct(&circs), 1, "per-destination isolation: {circs:?}");
    // Per app (uid): root twice shares, nobody gets its own.
    let nobody = format!("setpriv --reuid=65534 --regid=65534 --clear-groups {curl}");
    let (circs, _) = streams_to(
        &c,
        socks,
        tmp.path(),
        &format!("omxiso{tag}a"),
        &["--isolation", "app"],
        &format!("{curl} && {curl} && {nobody}"),
        s.http.port(),
    );
    assert_eq!(circs.len(), 3, "{circs:?}");
    assert_eq!(circs[0], circs[1], "one app, one circuit: {circs:?}");
    assert_ne!(
        circs[1], circs[2],
        "another uid, another circuit: {circs:?}"
    );

    udp_echo(socks, tmp.path(), &s, onionmix, &format!("omxudp{tag}"));
    drop(net);
}

/// A datagram to the sink's UDP echo (same port as its TCP echo) from a
/// long-running tunnel in front of `socks`: it comes back when `carried`
/// (onionmix client and exits), else the policy refuses it at once (ICMP
/// port unreachable, counted).
fn udp_echo(
    socks: SocketAddr,
    dir: &Path,
    s: &onionmix_testbed::netinfo::SinkInfo,
    carried: bool,
    name: &str,
) {
    let echo = format!(
        "exec 3<>/dev/udp/{}/{}; printf onionmix-udp >&3; timeout 120 head -c 12 <&3",
        s.hostname,
        s.echo.port()
    );
    let t = TunnelProc::start(socks, name, dir, &[]);
    let out = t.run("bash", &["-c", &echo], Duration::from_secs(300));
    let status = t.status_json().unwrap_or_default();
    if carried {
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "onionmix-udp",
            "UDP echo: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    } else {
        // Stock tor (no UDP ASSOCIATE) or no exit that carries UDP: the
        // policy answers ICMP port unreachable, and the read fails at once
        // (not after 120 s).
        assert!(!out.status.success(), "{out:?}");
        assert_ne!(out.status.code(), Some(124), "refused, not timed out");
    }
    let view = Command::new(env!("CARGO_BIN_EXE_onionmix"))
        .args(["tunnel", "status"])
        .arg(&t.status)
        .output()
        .unwrap();
    let view = String::from_utf8_lossy(&view.stdout).to_string();
    assert!(view.contains("UDP:"), "{view}");
    assert!(t.stop().success());
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join(format!("{name}.json"))).unwrap())
            .unwrap_or(status);
    let cnt = &status["counters"];
    eprintln!("{view}");
    if carried {
        assert_eq!(cnt["udp_datagrams_to_app"], 1, "{status}");
    } else {
        assert_eq!(cnt["udp_flows_refused"], 1, "{status}");
        assert!(
            cnt["icmp_unreachable"].as_u64().unwrap_or(0) >= 1,
            "{status}"
        );
    }
    assert_eq!(status["running"], false, "the final status says stopped");
}

/// Fail closed: with the SOCKS port gone (as when the client is killed)
/// the program's connections fail, by name and by address, and nothing
/// reaches the host: the namespace has no interface but `lo` and the TUN
/// (checked in onionmix-node's `tunnel_netns`), so a listener on the
/// host's own address sees no connection. The program's exit status is
/// passed on.
#[test]
fn tunnel_fails_closed_without_a_client() {
    if !onionmix_testsupport::require_or_skip(
        "tunnel_fails_closed_without_a_client",
        tunnel_tools(),
    ) {
        return;
    }
    // A port nobody listens on stands for the killed client's SOCKS port.
    let (_dead, socks) =
        onionmix_testsupport::ports::closed_port("127.0.0.1".parse().unwrap()).unwrap();
    // The host's own address (else loopback), with a listener on it.
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .unwrap();
    let host_ip = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|c| c.split('/').next().map(str::to_string))
        .unwrap_or_else(|| "127.0.0.1".into());
    let listener = std::net::TcpListener::bind((host_ip.as_str(), 0)).unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    for url in [
        format!("http://{host_ip}:{port}/"),
        format!("http://sink.onionmix.test:{port}/"),
    ] {
        let st = Command::new(env!("CARGO_BIN_EXE_onionmix"))
            .args(["tunnel", "--socks", &socks.to_string()])
            .args([
                "--exec",
                "curl",
                "-sS",
                "--max-time",
                "60",
                "-o",
                "/dev/null",
                &url,
            ])
            .status()
            .expect("run onionmix tunnel");
        assert!(!st.success(), "{url} must fail without a client");
        assert!(
            st.code().is_some_and(|c| c != 0),
            "curl's status passed on: {st}"
        );
    }
    match listener.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("a connection left the namespace outside the tunnel: {other:?}"),
    }
}

#[test]
fn tunnel_over_onionmix() {
    if !onionmix_testsupport::require_or_skip("tunnel_over_onionmix", tunnel_tools()) {
        return;
    }
    run("onionmix-basic", true);
}

/// The onionmix client on a stock tor network: UDP ASSOCIATE works, but
/// no exit advertises Datagram=1, so no stock exit is ever asked; the
/// flow gets the policy.
#[test]
fn tunnel_udp_onionmix_client_stock_exits() {
    let check = tunnel_tools().and_then(|()| onionmix_testsupport::tor_check());
    if !onionmix_testsupport::require_or_skip("tunnel_udp_onionmix_client_stock_exits", check) {
        return;
    }
    let _s = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let net = common_net::start("tor-basic-onionmix-client", &tmp.path().join("net"));
    let info = net.info().clone();
    let s = info.sink.clone().expect("sink");
    let (c, socks) = client(&info);
    assert_eq!(
        c.implementation,
        onionmix_testbed::spec::Implementation::Onionmix
    );
    let name = format!("omxsx{}", std::process::id() % 10_000);
    udp_echo(socks, tmp.path(), &s, false, &name);
    drop(net);
}

#[test]
fn tunnel_over_stock_tor() {
    let check = tunnel_tools().and_then(|()| onionmix_testsupport::tor_check());
    if !onionmix_testsupport::require_or_skip("tunnel_over_stock_tor", check) {
        return;
    }
    run("tor-basic", false);
}
