//! Report tests: tables, ratios, seed-shaped tables, plots and reading results back.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::format::{cell, code, num, size_slug, slug, utc};
use super::*;
use crate::record::{BASELINE_LABEL, SocketDrops};

const A: &str = "onionmix-basic/omclient0";
const B: &str = "stock-basic/torclient0";

fn rec(label: &str, size: u64, run: u32, ttlb: f64, error: Option<&str>) -> Record {
    let mut metrics = BTreeMap::new();
    if error.is_none() {
        metrics.insert("ttlb_ms".to_string(), ttlb);
        metrics.insert("ttfb_ms".to_string(), ttlb / 4.0);
    }
    Record {
        workload: "bulk".into(),
        label: label.into(),
        run,
        kind: "transfer".into(),
        size: Some(size),
        start_unix_ms: 1.7e12 + f64::from(run) * 1000.0,
        metrics,
        error: error.map(str::to_string),
    }
}

/// A: ttlb 100..=120 ms at 50 KiB (median 110), 1000..=1200 at 1 MiB
/// (median 1100); B: twice as slow; plus errors and timeouts.
fn records() -> Vec<Record> {
    let mut v = Vec::new();
    for run in 0..=20u32 {
        let x = f64::from(run);
        v.push(rec(A, 50 * 1024, run, 100.0 + x, None));
        v.push(rec(B, 50 * 1024, run, 2.0 * (100.0 + x), None));
        v.push(rec(A, 1 << 20, run, 1000.0 + 10.0 * x, None));
        v.push(rec(B, 1 << 20, run, 2.0 * (1000.0 + 10.0 * x), None));
    }
    v.push(rec(A, 1 << 20, 21, 0.0, Some("timeout")));
    v.push(rec(B, 1 << 20, 21, 0.0, Some("timeout")));
    v.push(rec(B, 1 << 20, 22, 0.0, Some("timeout")));
    v.push(rec(B, 1 << 20, 23, 0.0, Some("connection refused")));
    v
}

fn meta() -> RunMeta {
    RunMeta {
        command: "onionmix compare --spec onionmix-basic --spec stock-basic".into(),
        machine: "test cpu, 2 cores, linux".into(),
        git_commit: "abc1234-dirty".into(),
        version: "0.1.0".into(),
        specs: vec!["onionmix-basic".into(), "stock-basic".into()],
        links: "[emulation]\ndefault = \"wan\"\n".into(),
        seed: 42,
        started_unix: 1_700_000_000,
        params: [("runs".to_string(), "21".to_string())].into(),
        socket_drops: [
            ("onionmix-basic".to_string(), SocketDrops::default()),
            (
                "stock-basic".to_string(),
                SocketDrops {
                    udp_receive: 59,
                    udp_send: 0,
                },
            ),
        ]
        .into(),
    }
}

#[test]
fn report_has_medians_ratios_and_plots() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("report");
    let written = write_report(&records(), &[meta()], &out).unwrap();
    assert_eq!(written[0], out.join("summary.md"));
    for p in &written {
        assert!(p.exists(), "{} missing", p.display());
    }
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();

    // Header.
    assert!(md.contains("onionmix compare --spec onionmix-basic"));
    assert!(md.contains("abc1234-dirty"));
    assert!(md.contains("2023-11-14 22:13:20 UTC"));
    assert!(
        md.contains("onionmix-basic 0 / 0, stock-basic 59 / 0. **Not zero"),
        "{md}"
    );
    assert!(md.contains("`runs = 21`"));
    assert!(md.contains("default = \"wan\""));
    assert!(md.contains("seed: 42"));

    // Rows: median, counts.
    let row = |label: &str, size: &str, metric: &str| -> String {
        let prefix = format!("| {label} | transfer | {size} | {metric} |");
        md.lines()
            .find(|l| l.starts_with(&prefix))
            .unwrap_or_else(|| panic!("no row {prefix}\n{md}"))
            .to_string()
    };
    let cols = |l: String| -> Vec<String> { l.split('|').map(|c| c.trim().to_string()).collect() };
    // | series | kind | size | metric | n | err | to | min | median | ...
    let r = cols(row(A, "50 KiB", "ttlb_ms"));
    assert_eq!(&r[5..10], ["21", "0", "0", "100.0", "110.0"]);
    let r = cols(row(B, "50 KiB", "ttlb_ms"));
    assert_eq!(r[9], "220.0");
    let r = cols(row(A, "1 MiB", "ttlb_ms"));
    assert_eq!(&r[5..10], ["21", "0", "1", "1000", "1100"]);
    let r = cols(row(B, "1 MiB", "ttlb_ms"));
    assert_eq!(&r[5..10], ["21", "1", "2", "2000", "2200"]);
    let r = cols(row(A, "50 KiB", "ttfb_ms"));
    assert_eq!(r[9], "27.50");

    // Ratio table: A / B = 0.5 everywhere.
    assert!(md.contains(&format!("### Ratio of medians: `{A}` / `{B}`")));
    let ratio_rows: Vec<&str> = md
        .lines()
        .filter(|l| l.starts_with("| transfer |"))
        .collect();
    assert_eq!(ratio_rows.len(), 4, "{md}");
    for l in ratio_rows {
        let c: Vec<&str> = l.split('|').map(str::trim).collect();
        assert_eq!(c[6], "0.500", "{l}");
        assert!(c[7].starts_with('['), "{l}");
    }

    // Plots.
    for stem in [
        "bulk-ttlb_ms-cdf",
        "bulk-ttlb_ms-50KiB-cdf",
        "bulk-ttlb_ms-1MiB-cdf",
        "bulk-ttlb_ms-box",
        "bulk-ttfb_ms-cdf",
        "bulk-ttfb_ms-box",
    ] {
        for ext in ["svg", "png"] {
            let p = out.join(format!("{stem}.{ext}"));
            assert!(p.exists(), "{} missing", p.display());
            assert!(written.contains(&p));
        }
    }
    let svg = std::fs::read_to_string(out.join("bulk-ttlb_ms-cdf.svg")).unwrap();
    assert!(svg.contains(&format!("{A} 1 MiB")));
    let svg = std::fs::read_to_string(out.join("bulk-ttlb_ms-1MiB-cdf.svg")).unwrap();
    assert!(svg.contains(B));
    assert!(!svg.contains(&format!("{B} 1 MiB")));
    assert!(md.contains("](bulk-ttlb_ms-cdf.svg)"));
}

#[test]
fn ratio_tables_pair_by_pair_without_the_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let mut recs: Vec<Record> = records().into_iter().filter(|r| r.label == A).collect();
    write_report(&recs, &[], dir.path()).unwrap();
    let md = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(!md.contains("Ratio"));
    assert!(md.contains("No run description"));
    // A and the baseline: still no ratio table.
    for run in 0..5 {
        recs.push(rec(BASELINE_LABEL, 50 * 1024, run, 10.0, None));
    }
    write_report(&recs, &[], dir.path()).unwrap();
    let md = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(!md.contains("Ratio"), "{md}");
    // Three networks: A/B and A/C, never anything over the baseline.
    recs.extend(records().into_iter().filter(|r| r.label == B));
    for run in 0..=20u32 {
        recs.push(rec(
            "third/c",
            50 * 1024,
            run,
            4.0 * (100.0 + f64::from(run)),
            None,
        ));
    }
    recs.push(rec("third/c", 1024, 0, 5.0, None));
    write_report(&recs, &[], dir.path()).unwrap();
    let md = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(
        md.contains(&format!("### Ratio of medians: `{A}` / `{B}`")),
        "{md}"
    );
    assert!(
        md.contains(&format!("### Ratio of medians: `{A}` / `third/c`")),
        "{md}"
    );
    assert!(!md.contains("/ `none/direct`"), "{md}");
    assert_eq!(md.matches("### Ratio of medians").count(), 2);
    // A/C at 50 KiB: medians 110 and 440.
    assert!(
        md.contains("| transfer | 50 KiB | ttlb_ms | 110.0 | 440.0 | 0.250 |"),
        "{md}"
    );
    assert!(md.contains("| third/c | transfer | 1 KiB | ttlb_ms | 1 |"));
}

#[test]
fn goodput_in_seed_002_shape() {
    let dir = tempfile::tempdir().unwrap();
    let g = |label: &str, streams: u32, run: u32, mbps: f64| Record {
        workload: "goodput".into(),
        label: label.into(),
        run,
        kind: format!("streams:{streams}"),
        size: None,
        start_unix_ms: 1.7e12,
        metrics: [("mbps".to_string(), mbps)].into(),
        error: None,
    };
    let mut recs = Vec::new();
    for run in 0..4 {
        let d = f64::from(run) - 1.5; // -1.5, -0.5, 0.5, 1.5: mean 0
        recs.push(g(A, 1, run, 100.0 + d));
        recs.push(g(BASELINE_LABEL, 1, run, 400.0 + d));
        recs.push(g(A, 3, run, 150.0 + d));
        recs.push(g(BASELINE_LABEL, 3, run, 500.0 + d));
    }
    write_report(&recs, &[], dir.path()).unwrap();
    let md = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(
        md.contains("In the shape of seed 002's goodput table"),
        "{md}"
    );
    assert!(md.contains("| config | 1 stream | % of none | 3 streams | % of none |"));
    // sd of (-1.5, -0.5, 0.5, 1.5) = 1.291; t(3) = 3.182; half-width
    // 3.182 * 1.291 / 2 = 2.05.
    assert!(
        md.contains("| none (direct to the sink) | 400.0 ± 2.1 | – | 500.0 ± 2.1 | – |"),
        "{md}"
    );
    assert!(
        md.contains(&format!("| {A} | 100.0 ± 2.1 | 25% | 150.0 ± 2.1 | 30% |")),
        "{md}"
    );
    assert!(md.contains("| ANONguard, 3 relays | 93.5 ± 1.4 (30%) | 98.9 ± 2.4 (30%) |"));
    assert!(!md.contains("Ratio"), "{md}");
}

#[test]
fn kinds_and_errors_only_series() {
    let dir = tempfile::tempdir().unwrap();
    let mut recs = Vec::new();
    for (i, kind) in ["new-circuit", "reused-circuit"].into_iter().enumerate() {
        for run in 0..5u32 {
            let mut r = rec(A, 0, run, 0.0, None);
            r.workload = "access".into();
            r.kind = kind.into();
            r.size = None;
            r.metrics = [("ttfb_ms".to_string(), 50.0 * (i + 1) as f64)].into();
            recs.push(r);
        }
    }
    let mut failed = rec(B, 10 * 1024, 0, 0.0, Some("refused"));
    failed.workload = "reliability".into();
    recs.push(failed);
    let written = write_report(&recs, &[], dir.path()).unwrap();
    let md = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(
        md.contains(&format!("| {A} | new-circuit | — | ttfb_ms | 5 |")),
        "{md}"
    );
    assert!(md.contains(&format!("| {A} | reused-circuit | — | ttfb_ms | 5 |")));
    assert!(
        md.contains(&format!("| {B} | transfer | 10 KiB | — | 0 | 1 | 0 |")),
        "{md}"
    );
    let svg = std::fs::read_to_string(dir.path().join("access-ttfb_ms-cdf.svg")).unwrap();
    assert!(svg.contains(&format!("{A} reused-circuit")));
    // No metric, no plot for reliability.
    assert!(
        !written
            .iter()
            .any(|p| file_name(p).starts_with("reliability"))
    );
}

#[test]
fn empty_report() {
    let dir = tempfile::tempdir().unwrap();
    let written = write_report(&[], &[], dir.path()).unwrap();
    assert_eq!(written, vec![dir.path().join("summary.md")]);
    let md = std::fs::read_to_string(&written[0]).unwrap();
    assert!(md.contains("No records."));
}

#[test]
fn read_back_what_was_written() {
    let dir = tempfile::tempdir().unwrap();
    let recs = records();
    let mut jsonl = String::new();
    for (i, r) in recs.iter().enumerate() {
        jsonl.push_str(&serde_json::to_string(r).unwrap());
        jsonl.push('\n');
        if i == 3 {
            jsonl.push_str("   \n\n");
        }
    }
    std::fs::write(dir.path().join(RESULTS_FILE), &jsonl).unwrap();
    // No meta.json: no metas.
    let (r, m) = read_results(dir.path()).unwrap();
    assert_eq!(r, recs);
    assert!(m.is_empty());
    // One object.
    let one = serde_json::to_string(&meta()).unwrap();
    std::fs::write(dir.path().join(META_FILE), &one).unwrap();
    assert_eq!(read_results(dir.path()).unwrap().1, vec![meta()]);
    // An array.
    let two = serde_json::to_string(&vec![meta(), RunMeta::default()]).unwrap();
    std::fs::write(dir.path().join(META_FILE), &two).unwrap();
    assert_eq!(
        read_results(dir.path()).unwrap().1,
        vec![meta(), RunMeta::default()]
    );
    // Neither.
    std::fs::write(dir.path().join(META_FILE), "42").unwrap();
    let e = read_results(dir.path()).unwrap_err();
    assert!(e.contains("meta.json"), "{e}");
}

#[test]
fn malformed_line_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let good = serde_json::to_string(&records()[0]).unwrap();
    std::fs::write(
        dir.path().join(RESULTS_FILE),
        format!("{good}\n\n{good}\n{{\"workload\": \"bulk\", oops}}\n{good}\n"),
    )
    .unwrap();
    let e = read_results(dir.path()).unwrap_err();
    assert!(e.contains("line 4"), "{e}");
    assert!(e.contains("results.jsonl"), "{e}");
    // Missing results file.
    let empty = tempfile::tempdir().unwrap();
    assert!(read_results(empty.path()).is_err());
}

#[test]
fn helpers() {
    assert_eq!(human_size(0), "0 B");
    assert_eq!(human_size(512), "512 B");
    assert_eq!(human_size(50 * 1024), "50 KiB");
    assert_eq!(human_size(1 << 20), "1 MiB");
    assert_eq!(human_size(5 << 20), "5 MiB");
    assert_eq!(human_size(3 << 19), "1.5 MiB");
    assert_eq!(human_size(1 << 30), "1 GiB");
    assert_eq!(size_slug(Some(50 * 1024)), "50KiB");
    assert_eq!(size_slug(None), "nosize");
    assert_eq!(slug("a b/c"), "a_b_c");
    assert_eq!(slug(".."), "_");
    assert_eq!(num(f64::NAN), "–");
    assert_eq!(num(1234.4), "1234");
    assert_eq!(num(0.5), "0.500");
    assert_eq!(cell("a|b"), "a\\|b");
    assert_eq!(code("a`b"), "`` a`b ``");
    assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(utc(951_782_400), "2000-02-29 00:00:00 UTC");
    assert_eq!(utc(1_709_251_199), "2024-02-29 23:59:59 UTC");
    assert_eq!(utc(4_107_542_400), "2100-03-01 00:00:00 UTC");
    assert_eq!(utc(u64::MAX), "9999-12-31 23:59:59 UTC");
}
#[test]
fn seed_shaped_tables() {
    let mk = |workload: &str, kind: &str, metrics: &[(&str, f64)]| Record {
        workload: workload.into(),
        label: A.into(),
        run: 0,
        kind: kind.into(),
        size: None,
        start_unix_ms: 1.7e12,
        metrics: metrics.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
        error: None,
    };
    let mut v = Vec::new();
    for (kind, ms) in [
        ("message:new-session", 100.0),
        ("message:get-commitments", 200.0),
        ("message:get-proof", 300.0),
        ("message:respond-permission", 400.0),
        ("session", 1000.0),
    ] {
        v.push(mk("session", kind, &[("latency_ms", ms)]));
    }
    for rtt in [100.0, 200.0, 400.0] {
        v.push(mk("voip", "packet", &[("rtt_ms", rtt)]));
    }
    v.push(mk(
        "voip",
        "stream",
        &[("packets_sent", 4.0), ("packets_lost", 1.0)],
    ));
    let dir = tempfile::tempdir().unwrap();
    write_report(&v, &[], dir.path()).unwrap();
    let md = std::fs::read_to_string(dir.path().join(SUMMARY_FILE)).unwrap();
    assert!(md.contains("seed 000's Table 3"), "{md}");
    assert!(
        md.contains("| GC (get-commitments) | 0.20 / 0.20 / 0.20 | .57 / 2.50 / 11.68 |"),
        "{md}"
    );
    assert!(
        md.contains("| whole session | 1.00 / 1.00 / 1.00 | - |"),
        "{md}"
    );
    // 4 sent: 1 under 150 ms, 2 under 300 ms, 1 lost.
    assert!(md.contains("| 4 | 200.0 | 0.250 | 0.500 | 1 |"), "{md}");
}
