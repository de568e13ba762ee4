//! `mixed`: stock tor authorities with onionmix and stock relays. Our relays
//! must be listed with the expected flags; stock tor clients and our client
//! must carry verified downloads over circuits pinned hop by hop to chosen
//! implementations (all ours, all stock, alternating both ways).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common_net::{start, tor_available};
use onionmix_testbed::launcher::{echo_through_socks, http_get_plain};
use onionmix_testbed::netinfo::{NetworkInfo, NodeInfo};
use onionmix_testbed::proc;

/// A client process started by this test, killed (by pid) on drop.
struct Extra(Child);
impl Drop for Extra {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn node<'a>(info: &'a NetworkInfo, name: &str) -> &'a NodeInfo {
    info.nodes
        .iter()
        .find(|n| n.name == name)
        .unwrap_or_else(|| panic!("no node {name}"))
}

fn fp(info: &NetworkInfo, name: &str) -> String {
    node(info, name).fingerprint.clone().expect("fingerprint")
}

/// Start a stock tor client pinned to `[entry, middle, exit]`.
fn stock_client(info: &NetworkInfo, dir: &Path, path: [&str; 3]) -> (Extra, SocketAddr, String) {
    let base = std::fs::read_to_string(node(info, "client0").data_dir.join("torrc")).unwrap();
    let data = dir.join(format!("stock-{}", path.join("-")));
    std::fs::create_dir_all(&data).unwrap();
    let port = proc::free_port("127.0.0.1").unwrap();
    let mut torrc: String = base
        .lines()
        .filter(|l| {
            !l.starts_with("DataDirectory")
                && !l.starts_with("SocksPort")
                && !l.starts_with("ControlPort")
                && !l.starts_with("Nickname")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    // Conflux stays at tor's default: onionmix exits end conflux sets too.
    torrc.push_str(&format!(
        "DataDirectory {}\nSocksPort 127.0.0.1:{port}\nEntryNodes ${}\nMiddleNodes ${}\nExitNodes ${}\nStrictNodes 1\n",
        data.display(),
        fp(info, path[0]),
        fp(info, path[1]),
        fp(info, path[2]),
    ));
    std::fs::write(data.join("torrc"), torrc).unwrap();
    let log = data.join("tor.log");
    let mut cmd = Command::new("tor");
    cmd.arg("-f").arg(data.join("torrc"));
    let child = proc::spawn(cmd, &log).unwrap();
    (
        Extra(child),
        SocketAddr::from(([127, 0, 0, 1], port)),
        log.display().to_string(),
    )
}

/// Start our client pinned to `[entry, middle, exit]`.
fn our_client(info: &NetworkInfo, dir: &Path, path: [&str; 3]) -> (Extra, SocketAddr, String) {
    let base =
        std::fs::read_to_string(node(info, "omclient0").data_dir.join("client.toml")).unwrap();
    let data = dir.join(format!("om-{}", path.join("-")));
    std::fs::create_dir_all(&data).unwrap();
    let port = proc::free_port("127.0.0.1").unwrap();
    let mut cfg = format!(
        "data_dir = {:?}\nsocks_listen = \"127.0.0.1:{port}\"\nentry_nodes = [\"{}\"]\nmiddle_nodes = [\"{}\"]\nexit_nodes = [\"{}\"]\n",
        data.display().to_string(),
        fp(info, path[0]),
        fp(info, path[1]),
        fp(info, path[2]),
    );
    cfg.extend(
        base.lines()
            .filter(|l| {
                // The running client holds the control port.
                !l.starts_with("data_dir")
                    && !l.starts_with("socks_listen")
                    && !l.starts_with("control_port")
            })
            .map(|l| format!("{l}\n")),
    );
    std::fs::write(data.join("client.toml"), cfg).unwrap();
    let log = data.join("client.log");
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_onionmix"));
    cmd.arg("client")
        .arg("--config")
        .arg(data.join("client.toml"));
    let child = proc::spawn(cmd, &log).unwrap();
    (
        Extra(child),
        SocketAddr::from(([127, 0, 0, 1], port)),
        log.display().to_string(),
    )
}

fn wait_bootstrapped(log: &str, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if text.contains("Bootstrapped 100%") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{what} did not bootstrap; log tail:\n{}",
            proc::tail(Path::new(log), 30)
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Download 1 MiB from the sink through `socks` and verify it.
fn check_download(rt: &tokio::runtime::Runtime, info: &NetworkInfo, socks: SocketAddr, what: &str) {
    let sink = info.sink.as_ref().unwrap();
    // Like the launcher's readiness check: "Bootstrapped 100%" is not yet
    // usable for stock tor (its first streams may fail); wait for one echo
    // round trip through the pinned circuit first.
    let deadline = Instant::now() + Duration::from_secs(90);
    while !echo_through_socks(socks, sink.echo) {
        assert!(
            Instant::now() < deadline,
            "{what}: no echo round trip within 90 s"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let host = sink.http.ip().to_string();
    let (r, t) = rt
        .block_on(common_net::download(
            socks,
            &host,
            sink.http.port(),
            1 << 20,
            None,
        ))
        .unwrap_or_else(|e| panic!("{what}: download failed: {e}"));
    assert_eq!(r.body.len(), 1 << 20, "{what}: body length");
    assert!(r.sha256_ok(), "{what}: SHA-256 mismatch");
    eprintln!("{what}: 1 MiB verified in {t:?}");
}

#[test]
fn mixed_network_interop() {
    if !tor_available("mixed_network_interop") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let net = start("mixed", &dir);
    let info = net.info().clone();
    let rt = tokio::runtime::Runtime::new().unwrap();

    // Our relays are in the stock authorities' consensus with Running,
    // Valid, Guard (a TestingTorNetwork votes Guard and Exit for all) and
    // V2Dir (they are directory caches, which tor requires of guards).
    // Fast and Stable come and go in a young network, for stock relays
    // too; guard selection below waits for them.
    let auth = node(&info, "auth0").dir_addr().unwrap();
    let cons = common_net::dir_get(auth, "/tor/status-vote/current/consensus");
    for name in ["omrelay0", "omrelay1", "omexit0"] {
        let start = cons
            .find(&format!("\nr {name} "))
            .unwrap_or_else(|| panic!("{name} missing from the consensus"));
        let s_line = cons[start + 1..]
            .lines()
            .find(|l| l.starts_with("s "))
            .unwrap();
        for flag in ["Running", "Valid", "Guard", "V2Dir"] {
            assert!(
                s_line.split(' ').any(|f| f == flag),
                "{name} lacks {flag}: {s_line}"
            );
        }
    }
    // The exit's descriptor carries its real policy; the middles reject all.
    let d = common_net::dir_get(auth, &format!("/tor/server/fp/{}", fp(&info, "omexit0")));
    assert!(d.contains("accept 127.0.0.0/8:*"), "exit policy: {d}");
    // ... followed by tor's default exit policy, as stock tor does for a
    // policy without a final catch-all.
    assert!(d.contains("reject *:25\n") && d.contains("accept *:*\n"));
    let d = common_net::dir_get(auth, &format!("/tor/server/fp/{}", fp(&info, "omrelay0")));
    assert!(d.contains("reject *:*"));

    // Stock tor only takes relays with Guard, Stable, Fast, Valid and V2Dir
    // as entries, and a young network's flags still move: wait until each
    // implementation has such a relay, and pin the stock client to it.
    // Stock authorities vote Stable by median uptime until they have MTBF
    // data, so it can take a few consensus periods (the same wait failed
    // hs_relay_interop once at 180 s).
    let deadline = Instant::now() + Duration::from_secs(480);
    let (om_guard, stock_guard) = loop {
        let cons = http_get_plain(auth, "/tor/status-vote/current/consensus").unwrap_or_default();
        let pick = |names: &[&'static str]| {
            names.iter().copied().find(|n| {
                common_net::has_flags(
                    &cons,
                    n,
                    &["Guard", "Stable", "Fast", "Valid", "V2Dir", "Running"],
                )
            })
        };
        if let (Some(o), Some(t)) = (
            pick(&["omrelay0", "omrelay1"]),
            pick(&["relay0", "auth0", "auth1", "auth2"]),
        ) {
            break (o, t);
        }
        assert!(
            Instant::now() < deadline,
            "no guard-eligible relays:\n{cons}"
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    let om_middle = if om_guard == "omrelay0" {
        "omrelay1"
    } else {
        "omrelay0"
    };
    let stock_middle = if stock_guard == "relay0" {
        "auth0"
    } else {
        "relay0"
    };
    // Stock tor client: all ours; alternating stock/ours/stock; ours/stock/ours.
    let stock_paths = [
        [om_guard, om_middle, "omexit0"],
        [stock_guard, om_middle, "exit0"],
        [om_guard, stock_middle, "omexit0"],
    ];
    // Our client: all stock; alternating both ways.
    let our_paths = [
        ["auth0", "relay0", "exit0"],
        ["omrelay0", "relay0", "omexit0"],
        ["relay0", "omrelay1", "exit0"],
    ];
    let mut clients = Vec::new();
    for p in stock_paths {
        let (c, socks, log) = stock_client(&info, tmp.path(), p);
        clients.push((c, socks, log, format!("stock client via {}", p.join(" > "))));
    }
    for p in our_paths {
        let (c, socks, log) = our_client(&info, tmp.path(), p);
        clients.push((
            c,
            socks,
            log,
            format!("onionmix client via {}", p.join(" > ")),
        ));
    }
    for (_, socks, log, what) in &clients {
        wait_bootstrapped(log, what);
        check_download(&rt, &info, *socks, what);
    }
    // Our clients' status shows the circuits went through the pinned hops
    // and no other.
    for p in &our_paths {
        let data = tmp.path().join(format!("om-{}", p.join("-")));
        let status: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(data.join("status.json")).unwrap())
                .unwrap();
        let paths = status["open_circuit_paths"].as_array().unwrap();
        assert!(!paths.is_empty(), "no open circuit for {p:?}");
        for path in paths {
            let names: Vec<&str> = path
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap())
                .collect();
            assert_eq!(names, p.to_vec(), "circuit not through the pinned relays");
        }
    }
    drop(clients);
    drop(net);
}
