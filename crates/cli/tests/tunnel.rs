//! `onionmix tunnel --net <dir> --exec curl ...` end to end: curl runs in a
//! fresh network namespace whose only interfaces are `lo` and the tunnel's
//! TUN device (nothing else can carry a packet out), resolves the sink's
//! name (`sink.onionmix.test`, which only the network's exits can resolve)
//! through the tunnel's resolver (a synthetic address), and downloads
//! 1 MiB and 20 MiB through a Tor network; the SHA-256 of each body is
//! checked against the sink's deterministic stream. Over an all-onionmix
//! network (`onionmix-basic`) and over stock tor (`tor-basic`, stock tor
//! client and relays). Needs root, `ip` and `curl` (and `tor` for the
//! second); skipped otherwise, failing when ONIONMIX_REQUIRE_INTEROP=1.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

use onionmix_testbed::sink;
use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::Command;

fn tools() -> Result<(), String> {
    if !onionmix_node::tunnel::is_root() {
        return Err("needs root (network namespace, TUN device)".into());
    }
    for p in ["ip", "curl"] {
        if Command::new(p)
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

fn run(spec: &str) {
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
    drop(net);
}

/// Fail closed: with the SOCKS port gone (as when the client is killed)
/// the program's connections fail, by name and by address, and nothing
/// reaches the host: the namespace has no interface but `lo` and the TUN
/// (checked in onionmix-node's `tunnel_netns`), so a listener on the
/// host's own address sees no connection. The program's exit status is
/// passed on.
#[test]
fn tunnel_fails_closed_without_a_client() {
    if !onionmix_testsupport::require_or_skip("tunnel_fails_closed_without_a_client", tools()) {
        return;
    }
    // A port nobody listens on stands for the killed client's SOCKS port.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let socks = dead.local_addr().unwrap();
    drop(dead);
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
fn tunnel_exec_curl_over_onionmix() {
    if !onionmix_testsupport::require_or_skip("tunnel_exec_curl_over_onionmix", tools()) {
        return;
    }
    run("onionmix-basic");
}

#[test]
fn tunnel_exec_curl_over_stock_tor() {
    let check = tools().and_then(|()| onionmix_testsupport::tor_check());
    if !onionmix_testsupport::require_or_skip("tunnel_exec_curl_over_stock_tor", check) {
        return;
    }
    run("tor-basic");
}
