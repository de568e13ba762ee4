//! The measurement suite end to end: every workload runs briefly through
//! a small stock tor testnet (with our client beside stock tor's) with
//! `onionmix measure` and writes results.jsonl, summary.md and plots;
//! `onionmix compare` runs a workload on two networks (all onionmix vs all
//! stock) and reports ratios; `onionmix report` rebuilds the report from
//! saved results.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

use std::path::Path;

fn onionmix(args: &[&str]) -> (bool, String, String) {
    let out = common_net::onionmix_cmd().args(args).output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
    )
}

/// `onionmix measure --dir <dir> --workload <file> --out <out> <extra...>`.
fn measure(dir: &str, workload: &Path, out: &Path, extra: &[&str]) -> (bool, String, String) {
    let mut args = vec![
        "measure",
        "--dir",
        dir,
        "--workload",
        workload.to_str().unwrap(),
        "--out",
        out.to_str().unwrap(),
    ];
    args.extend(extra);
    onionmix(&args)
}

fn check_outputs(out: &Path, workload: &str) {
    let jsonl = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    let n = jsonl.lines().filter(|l| !l.trim().is_empty()).count();
    assert!(n > 0, "{workload}: no records");
    // Every event succeeds, stock tor's too (the launcher waits until every
    // stock exit has a consensus listing every relay; docs/testnet.md).
    let mut failed = 0;
    for l in jsonl.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["workload"], workload);
        if !v["error"].is_null() {
            failed += 1;
            eprintln!("{workload}: failed event {l}");
        }
    }
    assert_eq!(failed, 0, "{workload}: {failed} of {n} events failed");
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains(workload), "{workload}: {summary}");
    let files: Vec<String> = std::fs::read_dir(out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(
        files.iter().any(|f| f.ends_with(".svg")),
        "{workload}: no SVG in {files:?}"
    );
    assert!(
        files.iter().any(|f| f.ends_with(".png")),
        "{workload}: no PNG in {files:?}"
    );
    let meta = std::fs::read_to_string(out.join("meta.json")).unwrap();
    assert!(meta.contains("git_commit") && meta.contains("machine"));
    // The record is taken when the run starts: no event began before the
    // first one (seconds, truncated), and it names the binary's commit.
    let metas: Vec<serde_json::Value> = match serde_json::from_str(&meta).unwrap() {
        serde_json::Value::Array(v) => v,
        one => vec![one],
    };
    let first_event_ms = jsonl
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["start_unix_ms"]
                .as_f64()
                .unwrap()
        })
        .fold(f64::INFINITY, f64::min);
    let started_ms = metas
        .iter()
        .map(|m| m["started_unix"].as_u64().unwrap() as f64 * 1000.0)
        .fold(f64::INFINITY, f64::min);
    assert!(
        started_ms <= first_event_ms,
        "{workload}: meta.json says the run started at {started_ms} ms, after its first event at {first_event_ms} ms"
    );
    for m in &metas {
        assert!(!m["git_commit"].as_str().unwrap().is_empty(), "{m}");
    }
}

#[test]
fn every_workload_on_a_stock_tor_testnet() {
    let _serial = common_net::serial();
    if !common_net::tor_available("every_workload_on_a_stock_tor_testnet") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let _net = common_net::start("tor-basic-onionmix-client", &dir);
    let d = dir.to_str().unwrap();
    let quick = [
        ("bulk", "runs = 2\nsizes = [51200, 1048576]\n"),
        ("voip", "runs = 1\nduration_secs = 3\n"),
        ("session", "runs = 2\nhttps = true\n"),
        (
            "goodput",
            "runs = 2\nduration_secs = 2\nwarmup_secs = 2\nstreams = [1, 3]\n",
        ),
        ("reliability", "runs = 3\ninterval_ms = 100\nparallel = 3\n"),
        ("access", "runs = 2\n"),
    ];
    let mut stock_builds = 0usize;
    for (w, extra) in quick {
        let file = tmp.path().join(format!("{w}.toml"));
        std::fs::write(&file, format!("workload = {w:?}\n{extra}")).unwrap();
        let out = tmp.path().join(format!("out-{w}"));
        // One run: the launcher's readiness waits until every stock exit
        // has a consensus listing every relay (see docs/testnet.md), so
        // stock tor's streams do not fail after start-up any more.
        let all: &[&str] = if w == "access" || w == "reliability" {
            &["--client", "all"]
        } else {
            &[]
        };
        let (success, stdout, stderr) = measure(d, &file, &out, all);
        assert!(success, "measure {w} failed:\n{stdout}\n{stderr}");
        check_outputs(&out, w);
        let jsonl = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
        let records: Vec<serde_json::Value> = jsonl
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
        let ok_with = |kind: &str, metric: &str| {
            records
                .iter()
                .filter(|r| {
                    r["kind"] == kind && r["error"].is_null() && r["metrics"][metric].is_number()
                })
                .count()
        };
        // No event fails, for either client.
        for r in &records {
            assert!(r["error"].is_null(), "{w}: failed event: {r}");
        }
        // Circuit build times of the stock tor client, from its control
        // port's CIRC events. Whether tor launches a new circuit inside one
        // short workload depends on its preemptive circuits, so this is
        // checked over the whole suite below.
        stock_builds += records
            .iter()
            .filter(|r| {
                r["kind"] == "circuit"
                    && r["label"] == "tor-basic-onionmix-client/client0"
                    && r["metrics"]["circuit_build_ms"].as_f64().unwrap_or(0.0) > 0.0
            })
            .count();
        match w {
            "access" => {
                // Per client (stock tor and onionmix): a fresh client per
                // run (bootstrap included), then a new and a reused
                // circuit of the running client.
                for kind in ["fresh-client", "new-circuit", "reused-circuit"] {
                    assert_eq!(
                        jsonl.matches(&format!("\"kind\":\"{kind}\"")).count(),
                        4,
                        "{kind}"
                    );
                }
            }
            "session" => {
                // HTTPS: TLS 1.3 to the sink through the network, one
                // handshake per session (keep-alive).
                assert!(
                    ok_with("message:new-session", "tls_handshake_ms") >= 1,
                    "{jsonl}"
                );
                assert_eq!(ok_with("message:get-proof", "tls_handshake_ms"), 0);
                assert!(summary.contains("seed 000's Table 3"), "{summary}");
            }
            "goodput" => {
                // 1 and 3 streams, with the no-anonymisation baseline, in
                // seed 002's table shape.
                for kind in ["streams:1", "streams:3"] {
                    assert!(ok_with(kind, "mbps") >= 2, "{kind}: {jsonl}");
                    assert!(
                        records
                            .iter()
                            .any(|r| r["kind"] == kind && r["label"] == "none/direct"),
                        "{kind}: no baseline"
                    );
                }
                // Loopback without Tor finishes a 1 GiB response within
                // the window: the next one follows, no error.
                assert!(
                    records
                        .iter()
                        .filter(|r| r["label"] == "none/direct")
                        .all(|r| r["error"].is_null()),
                    "{jsonl}"
                );
                assert!(summary.contains("seed 002's goodput table"), "{summary}");
                assert!(summary.contains("none (direct to the sink)"), "{summary}");
            }
            "reliability" => {
                // Both clients at once, 3 fetchers each, every run.
                for client in ["client0", "omclient0"] {
                    let n = records
                        .iter()
                        .filter(|r| {
                            r["kind"] == "transfer"
                                && r["label"]
                                    .as_str()
                                    .unwrap()
                                    .ends_with(&format!("/{client}"))
                        })
                        .count();
                    assert_eq!(n, 9, "{client}");
                }
            }
            _ => {}
        }
        eprintln!("{w}: ok");
    }
    assert!(
        stock_builds >= 1,
        "no stock tor circuit build times in any workload"
    );
    // Bad input: a clear error, not a panic.
    let (success, _, stderr) = onionmix(&[
        "measure",
        "--dir",
        d,
        "--workload",
        "nope",
        "--out",
        "/tmp/x",
    ]);
    assert!(
        !success && stderr.contains("neither a workload"),
        "{stderr}"
    );
    let (success, _, stderr) = onionmix(&[
        "measure",
        "--dir",
        d,
        "--workload",
        "bulk",
        "--client",
        "nobody",
        "--out",
        "/tmp/x",
    ]);
    assert!(!success && stderr.contains("no client"), "{stderr}");
    // `circuits` (seed 004's scenarios 2-4): both clients at once, each
    // on its own pinned circuit, new every run.
    let pinned = |circuits: &str, all: bool| {
        let file = tmp.path().join("circuits.toml");
        std::fs::write(
            &file,
            format!(
                "workload = \"bulk\"\nruns = 2\nsizes = [51200]\nfresh_circuit = false\ncircuits = {circuits}\n"
            ),
        )
        .unwrap();
        let out = tmp.path().join("out-circuits");
        let extra: &[&str] = if all {
            &["--client", "all", "--concurrent"]
        } else {
            &[]
        };
        let (success, stdout, stderr) = measure(d, &file, &out, extra);
        let jsonl = std::fs::read_to_string(out.join("results.jsonl")).unwrap_or_default();
        (success, format!("{stdout}\n{stderr}"), jsonl)
    };
    let (success, output, jsonl) = pinned(
        r#"[["relay0", "relay1", "exit0"], ["relay1", "relay0", "exit1"]]"#,
        true,
    );
    assert!(success, "{output}");
    assert!(
        output.contains("4 streams attached to pinned circuits"),
        "{output}"
    );
    let transfers: Vec<serde_json::Value> = jsonl
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|r| r["kind"] == "transfer")
        .collect();
    assert_eq!(transfers.len(), 4, "{jsonl}");
    assert!(transfers.iter().all(|r| r["error"].is_null()), "{jsonl}");
    let (success, output, _) = pinned(r#"[["relay0", "exit0"], ["relay7", "exit0"]]"#, true);
    assert!(!success && output.contains("no relay7"), "{output}");
    let (success, output, _) = pinned(r#"[["relay0", "exit0"]]"#, true);
    assert!(!success && output.contains("one path each"), "{output}");
    let (success, output, _) = pinned(r#"[["relay0", "exit0"], ["relay0", "exit0"]]"#, false);
    assert!(!success && output.contains("--client all"), "{output}");
    // report rebuilds from two result directories at once.
    let merged = tmp.path().join("merged");
    let (success, _, stderr) = onionmix(&[
        "report",
        tmp.path().join("out-bulk").to_str().unwrap(),
        tmp.path().join("out-access").to_str().unwrap(),
        "--out",
        merged.to_str().unwrap(),
    ]);
    assert!(success, "{stderr}");
    let s = std::fs::read_to_string(merged.join("summary.md")).unwrap();
    assert!(s.contains("bulk") && s.contains("access"), "{s}");
}

#[test]
fn compare_onionmix_and_stock_networks() {
    let _serial = common_net::serial();
    if !common_net::tor_available("compare_onionmix_and_stock_networks") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("cmp");
    let file = tmp.path().join("bulk.toml");
    std::fs::write(&file, "workload = \"bulk\"\nsizes = [51200, 1048576]\n").unwrap();
    // Two workloads on the same two networks, one report.
    let (success, stdout, stderr) = onionmix(&[
        "compare",
        "--spec",
        "onionmix-basic",
        "--spec",
        "stock-basic",
        "--workload",
        file.to_str().unwrap(),
        "--workload",
        "access",
        "--runs",
        "3",
        "--out",
        out.to_str().unwrap(),
    ]);
    assert!(success, "{stdout}\n{stderr}");
    let s = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(
        s.contains("onionmix-basic/omclient0") && s.contains("stock-basic/client0"),
        "{s}"
    );
    assert!(s.to_lowercase().contains("ratio"), "{s}");
    let jsonl = std::fs::read_to_string(out.join("results.jsonl")).unwrap();
    for (workload, kind, n) in [("bulk", "transfer", 12), ("access", "fresh-client", 6)] {
        let got = jsonl
            .lines()
            .filter(|l| {
                l.contains(&format!("\"workload\":\"{workload}\""))
                    && l.contains(&format!("\"kind\":\"{kind}\""))
            })
            .count();
        assert_eq!(got, n, "{workload} {kind} records:\n{jsonl}");
    }
    assert!(s.contains("access") && s.contains("bulk"), "{s}");
    // Every process both networks started is gone.
    for net in std::fs::read_dir(out.join("nets")).unwrap() {
        let info = onionmix_testbed::netinfo::NetworkInfo::load(&net.unwrap().path()).unwrap();
        for n in &info.nodes {
            assert!(
                !onionmix_testbed::proc::alive(n.pid, n.start_time),
                "{} still running",
                n.name
            );
        }
    }
}

#[test]
fn compare_refuses_client_options_it_cannot_honour() {
    // Refused before any network starts.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("cmp");
    let base = [
        "compare",
        "--spec",
        "onionmix-basic",
        "--spec",
        "stock-basic",
        "--workload",
        "bulk",
        "--out",
        out.to_str().unwrap(),
    ];
    let (ok, _, stderr) = onionmix(&[&base[..], &["--client", "omclient0"]].concat());
    assert!(!ok && stderr.contains("--client"), "{stderr}");
    let (ok, _, stderr) = onionmix(&[&base[..], &["--concurrent"]].concat());
    assert!(
        !ok && stderr.contains("--concurrent needs --client all"),
        "{stderr}"
    );
    assert!(!out.join("nets").exists());
}
