//! Onion services on the built-in networks where onionmix relays serve the
//! onion-service roles: `onionmix-hs` (all onionmix: onionmix authorities
//! run shared randomness, onionmix relays are the HSDirs, introduction and
//! rendezvous points) and `mixed-hs` (stock authorities, stock and
//! onionmix relays: either may hold any role, for either implementation's
//! service). Every client downloads 1 MiB and 20 MiB from every service,
//! SHA-256 verified. On `mixed-hs` the measurement suite's onion-service
//! workloads (seed 001's access cases, bulk, voip, reliability) then run
//! against each service with both clients.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

use std::path::Path;

use onionmix_testbed::launcher::{self, LaunchOptions, NetworkGuard};
use onionmix_testbed::netinfo::NetworkInfo;
use onionmix_testbed::spec::Spec;

fn every_client_reaches_every_service(spec_name: &str, then: impl FnOnce(&Path, &NetworkInfo)) {
    let _serial = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let spec = Spec::load(spec_name).unwrap();
    let mut opts = LaunchOptions::new(env!("CARGO_BIN_EXE_onionmix").into());
    opts.timeout = Some(common_net::TEST_BOOTSTRAP_TIMEOUT);
    // The launcher is ready only once every client carried a round trip to
    // every onion service (descriptor published, introduction, rendezvous).
    let net = NetworkGuard(Some(
        launcher::start(&spec, &tmp.path().join("net"), &opts)
            .unwrap_or_else(|e| panic!("{spec_name}: network start failed: {e}")),
    ));
    let info = net.info().clone();
    assert!(!info.onion_services.is_empty(), "{spec_name}: no services");
    let rt = tokio::runtime::Runtime::new().unwrap();
    for client in info.clients(None) {
        let proxy = client.socks_addr().unwrap();
        for svc in &info.onion_services {
            for n in [1u64 << 20, 20 << 20] {
                let who = format!(
                    "{spec_name}: {} ({:?}) -> {} ({:?}), {n} bytes",
                    client.name, client.implementation, svc.name, svc.implementation
                );
                let (r, t) = rt
                    .block_on(common_net::download(
                        proxy,
                        &svc.address,
                        svc.http_port,
                        n,
                        None,
                    ))
                    .unwrap_or_else(|e| panic!("{who}: {e}"));
                assert_eq!(r.status, 200, "{who}");
                assert_eq!(r.body.len() as u64, n, "{who}");
                assert!(r.sha256_ok(), "{who}: SHA-256 mismatch");
                eprintln!("{who} in {t:?}");
            }
        }
    }
    then(&tmp.path().join("net"), &info);
    drop(net);
}

/// `onionmix measure` with `workload` against the onion service `svc`,
/// both clients at once; the records, every one without an error.
fn measure_onion(dir: &Path, svc: &str, workload: &str, extra: &str) -> Vec<serde_json::Value> {
    let work = dir.parent().unwrap();
    let file = work.join(format!("{workload}-{svc}.toml"));
    std::fs::write(
        &file,
        format!("workload = {workload:?}\ntarget = \"onion:{svc}\"\n{extra}"),
    )
    .unwrap();
    let out_dir = work.join(format!("out-{workload}-{svc}"));
    let out = common_net::onionmix_cmd()
        .args(["measure", "--dir", dir.to_str().unwrap(), "--workload"])
        .arg(&file)
        .args(["--out", out_dir.to_str().unwrap(), "--client", "all"])
        .output()
        .unwrap();
    let who = format!("{workload} against {svc}");
    assert!(
        out.status.success(),
        "{who}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let jsonl = std::fs::read_to_string(out_dir.join("results.jsonl")).unwrap();
    let records: Vec<serde_json::Value> = jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    for r in &records {
        assert!(r["error"].is_null(), "{who}: failed event {r}");
    }
    let summary = std::fs::read_to_string(out_dir.join("summary.md")).unwrap();
    assert!(summary.contains(workload), "{who}: {summary}");
    records
}

/// Records of `kind` from each client (labels `<spec>/<client>@<service>`).
fn per_client(records: &[serde_json::Value], kind: &str, clients: &[String]) -> Vec<usize> {
    clients
        .iter()
        .map(|c| {
            records
                .iter()
                .filter(|r| {
                    r["kind"] == kind
                        && r["label"].as_str().is_some_and(|l| {
                            l.split_once('/')
                                .and_then(|(_, rest)| rest.split('@').next())
                                .is_some_and(|client| client == c)
                        })
                })
                .count()
        })
        .collect()
}

/// Issue 12 §5: seed 001's workloads against onion addresses, for both
/// clients and both services of `mixed-hs`.
fn onion_workloads(dir: &Path, info: &NetworkInfo) {
    let clients: Vec<String> = info.clients(None).iter().map(|c| c.name.clone()).collect();
    assert_eq!(clients.len(), 2, "{clients:?}");
    for svc in &info.onion_services {
        let name = svc.name.as_str();
        // Seed 001's three access cases per client and run: a fresh client
        // process, a new rendezvous circuit with the descriptor cached,
        // the same circuit again.
        let r = measure_onion(dir, name, "access", "runs = 2\ntimeout_secs = 180\n");
        for kind in ["fresh-client", "new-circuit", "reused-circuit"] {
            assert_eq!(
                per_client(&r, kind, &clients),
                [2, 2],
                "access {kind} on {name}"
            );
        }
        let r = measure_onion(dir, name, "bulk", "runs = 1\nsizes = [51200, 1048576]\n");
        assert_eq!(
            per_client(&r, "transfer", &clients),
            [2, 2],
            "bulk on {name}"
        );
        // VoIP-like round trips to the service's echo port.
        let r = measure_onion(dir, name, "voip", "runs = 1\nduration_secs = 3\n");
        for n in per_client(&r, "packet", &clients) {
            assert!(n >= 20, "voip on {name}: {n} packets");
        }
        let r = measure_onion(
            dir,
            name,
            "reliability",
            "runs = 2\ninterval_ms = 100\nparallel = 2\n",
        );
        assert_eq!(
            per_client(&r, "transfer", &clients),
            [4, 4],
            "reliability on {name}"
        );
        eprintln!("workloads against {name} ({:?}): ok", svc.implementation);
    }
}

#[test]
fn all_onionmix_onion_service() {
    // The onionmix-hs network has no stock tor process.
    every_client_reaches_every_service("onionmix-hs", |_, _| {});
}

#[test]
fn mixed_network_onion_services() {
    if !common_net::tor_available("mixed_network_onion_services") {
        return;
    }
    every_client_reaches_every_service("mixed-hs", onion_workloads);
}
