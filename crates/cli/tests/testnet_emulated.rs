//! Issue 4: whole networks through the link emulator (20 ms on every link)
//! started by the launcher: stock tor (bootstrap, a verified download by
//! hostname, per-link counters in `status`, nothing left after `stop`),
//! mixed, and all onionmix (our authorities included).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

mod common_net;

use std::process::Command;
use std::time::Duration;

use onionmix_testbed::netinfo::NetworkInfo;
use onionmix_testbed::proc;

#[test]
fn tor_basic_20ms_through_the_emulator() {
    let _serial = common_net::serial();
    if !common_net::tor_available("tor_basic_20ms_through_the_emulator")
        || !common_net::emulator_available("tor_basic_20ms_through_the_emulator")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let net = common_net::start("tor-basic-20ms", &dir);
    let info = net.info().clone();
    let emu = info
        .emulator
        .clone()
        .expect("emulated network records its emulator");
    let client = info.clients(None)[0].socks_addr().unwrap();
    assert!(!client.ip().is_loopback(), "nodes get their own addresses");
    let sink = info.sink.clone().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (r, t) = common_net::download(client, &sink.hostname, sink.http.port(), 1 << 20, None)
            .await
            .unwrap();
        assert!(r.sha256_ok());
        // 4 emulated links each way between client and sink: >= 160 ms.
        assert!(
            r.first_byte >= Duration::from_millis(160),
            "ttfb {:?}",
            r.first_byte
        );
        eprintln!("1 MiB in {t:?}, ttfb {:?}", r.first_byte);
    });
    let status = Command::new(env!("CARGO_BIN_EXE_onionmix"))
        .args(["testnet", "status", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("link emulator"), "{text}");
    drop(net);
    assert!(
        !proc::alive(emu.pid, emu.start_time),
        "emulator still running"
    );
    let ns = Command::new("ip").args(["netns", "list"]).output().unwrap();
    let ns = String::from_utf8_lossy(&ns.stdout);
    let run = std::fs::read_to_string(emu.state_dir.join("emulator.toml")).unwrap_or_default();
    let run_id = run
        .lines()
        .find_map(|l| l.strip_prefix("run_id = "))
        .map(|v| v.trim_matches('"').to_string());
    if let Some(id) = run_id {
        assert!(
            !ns.contains(&id),
            "namespaces of run {id} left behind:\n{ns}"
        );
    }
    let _ = NetworkInfo::load(&dir);
}

/// Our relays and client under emulation: `mixed-20ms` (stock authorities,
/// onionmix and stock relays, both clients) bootstraps through the
/// emulator and both clients carry a verified download.
#[test]
fn mixed_20ms_through_the_emulator() {
    let _serial = common_net::serial();
    if !common_net::tor_available("mixed_20ms_through_the_emulator")
        || !common_net::emulator_available("mixed_20ms_through_the_emulator")
    {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let net = common_net::start("mixed-20ms", &dir);
    let info = net.info().clone();
    let sink = info.sink.clone().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for c in info.clients(None) {
        let socks = c.socks_addr().unwrap();
        assert!(!socks.ip().is_loopback(), "nodes get their own addresses");
        rt.block_on(async {
            let (r, t) =
                common_net::download(socks, &sink.hostname, sink.http.port(), 1 << 20, None)
                    .await
                    .unwrap_or_else(|e| panic!("{}: {e}", c.name));
            assert!(r.sha256_ok());
            assert!(
                r.first_byte >= Duration::from_millis(160),
                "{}: ttfb {:?}",
                c.name,
                r.first_byte
            );
            eprintln!("{}: 1 MiB in {t:?}, ttfb {:?}", c.name, r.first_byte);
        });
    }
    drop(net);
}

/// The all-onionmix network (our authorities too) through the emulator:
/// `onionmix-basic-20ms` bootstraps and carries a verified download by
/// hostname with the 4 emulated links each way in its first byte.
#[test]
fn onionmix_basic_20ms_through_the_emulator() {
    let _serial = common_net::serial();
    if !common_net::emulator_available("onionmix_basic_20ms_through_the_emulator") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let net = common_net::start("onionmix-basic-20ms", &dir);
    let info = net.info().clone();
    let sink = info.sink.clone().unwrap();
    let socks = info.clients(None)[0].socks_addr().unwrap();
    assert!(!socks.ip().is_loopback(), "nodes get their own addresses");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (r, t) = common_net::download(socks, &sink.hostname, sink.http.port(), 1 << 20, None)
            .await
            .unwrap();
        assert!(r.sha256_ok() && r.body.len() == 1 << 20);
        assert!(
            r.first_byte >= Duration::from_millis(160),
            "ttfb {:?}",
            r.first_byte
        );
        eprintln!("1 MiB in {t:?}, ttfb {:?}", r.first_byte);
    });
    drop(net);
}

/// Onion services over 20 ms links (`onionmix-hs-20ms`): congestion
/// control on the rendezvous circuit fills its window, so the service's
/// last DATA cells wait in its queue when the sink closes; END must follow
/// them (it once overtook them: 5 MiB arrived 30-120 KB short). Two
/// downloads on new rendezvous circuits, SHA-256 verified; the second may
/// use the pre-built internal circuits. The counters show congestion
/// control on every rendezvous circuit, both ends.
#[test]
fn onion_service_20ms_transfers_are_complete() {
    let _serial = common_net::serial();
    if !common_net::emulator_available("onion_service_20ms_transfers_are_complete") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let net = common_net::start("onionmix-hs-20ms", &tmp.path().join("net"));
    let info = net.info().clone();
    let client = info.clients(None)[0].clone();
    let socks = client.socks_addr().unwrap();
    let svc = info.onion_services[0].clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (i, user) in ["a", "b"].into_iter().enumerate() {
        let n = 5u64 << 20;
        // A new SOCKS username: a new rendezvous circuit.
        let (r, t) = rt
            .block_on(common_net::download(
                socks,
                &svc.address,
                svc.http_port,
                n,
                Some((user, "x")),
            ))
            .unwrap_or_else(|e| panic!("download {i}: {e}"));
        assert_eq!(r.body.len() as u64, n, "download {i}: every byte");
        assert!(r.sha256_ok(), "download {i}: SHA-256");
        eprintln!(
            "5 MiB through the onion service in {t:?}, ttfb {:?}",
            r.first_byte
        );
    }
    let read = |dir: &std::path::Path| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(dir.join("status.json")).unwrap()).unwrap()
    };
    let svc_dir = info.node(&svc.name).unwrap().data_dir.clone();
    common_net::wait_for(
        "congestion control on every rendezvous circuit, both ends",
        Duration::from_secs(15),
        Duration::from_millis(250),
        || {
            let c = read(&client.data_dir)["onion_client"].clone();
            let s = read(&svc_dir)["onion_services"]
                .as_array()?
                .first()?
                .clone();
            let joined = c["rend_joined"].as_u64()?;
            let served = s["rendezvous_ok"].as_u64()?;
            (joined >= 2
                && c["rend_cc"].as_u64()? == joined
                && served >= 2
                && s["rendezvous_cc"].as_u64()? == served)
                .then_some(())
        },
    );
    drop(net);
}
