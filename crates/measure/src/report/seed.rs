//! Tables in the shape of the seed papers (000: per-message latencies; 002: goodput) next to their published numbers.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::format::{cell, num};
use crate::record::{BASELINE_LABEL, Record};
use crate::stats;

/// Seed 000's per-message latencies over Tor (Table 3, HTTP, "set1/2
/// cell"; lowest/average/highest in seconds): new session (TDNS), get
/// commitments (T-GC), get proof (T-GPP), respond permission (TDRP).
const SEED000_TOR_HTTP: &[(&str, &str, &str)] = &[
    ("new-session", "NS", ".17 / .57 / 2.59"),
    ("get-commitments", "GC", ".57 / 2.50 / 11.68"),
    ("get-proof", "GPP", ".54 / 1.12 / 3.89"),
    ("respond-permission", "RP", ".30 / .68 / 2.70"),
];

/// Tables in the shape of a seed's own, with the seed's numbers beside
/// ours where it published them.
pub(super) fn write_seed_table(md: &mut String, workload: &str, records: &[Record]) {
    let mut labels: Vec<&str> = Vec::new();
    for r in records.iter().filter(|r| r.workload == workload) {
        if !labels.contains(&r.label.as_str()) {
            labels.push(&r.label);
        }
    }
    let values = |label: &str, kind: &str, metric: &str| -> Vec<f64> {
        records
            .iter()
            .filter(|r| r.workload == workload && r.label == label && r.kind == kind && r.ok())
            .filter_map(|r| r.metrics.get(metric).copied())
            .collect()
    };
    let lah = |xs: &[f64], scale: f64| -> String {
        match stats::summarize(xs) {
            Some(s) => format!(
                "{:.2} / {:.2} / {:.2}",
                s.min * scale,
                s.mean * scale,
                s.max * scale
            ),
            None => "-".into(),
        }
    };
    match workload {
        "session" => {
            let _ = writeln!(
                md,
                "### In the shape of seed 000's Table 3 (per-message latency, lowest / average / highest, seconds)\n"
            );
            let mut head = String::from("| message |");
            let mut rule = String::from("|---|");
            for l in &labels {
                let _ = write!(head, " {} |", cell(l));
                rule.push_str("---|");
            }
            head.push_str(" seed 000: HTTP over Tor, phone (2019) |");
            rule.push_str("---|");
            let _ = writeln!(md, "{head}\n{rule}");
            for (kind, short, seed) in SEED000_TOR_HTTP {
                let mut row = format!("| {short} ({kind}) |");
                for l in &labels {
                    let _ = write!(
                        row,
                        " {} |",
                        lah(&values(l, &format!("message:{kind}"), "latency_ms"), 1e-3)
                    );
                }
                let _ = writeln!(row, " {seed} |");
                md.push_str(&row);
            }
            let mut row = String::from("| whole session |");
            for l in &labels {
                let _ = write!(row, " {} |", lah(&values(l, "session", "latency_ms"), 1e-3));
            }
            row.push_str(" - |\n");
            md.push_str(&row);
            md.push_str("\nThe seed's sessions ran over a phone's cellular link and the public Tor network; ours over a testnet's links. Message sizes are estimates (docs/measure.md).\n\n");
        }
        "voip" => {
            let _ = writeln!(
                md,
                "### In the shape of seed 001's latency section (RTT against ITU G.114: 150 ms recommended, 300 ms upper bound)\n"
            );
            md.push_str("| series | packets | median RTT (ms) | share < 150 ms | share < 300 ms | lost |\n|---|--:|--:|--:|--:|--:|\n");
            for l in &labels {
                let rtts = values(l, "packet", "rtt_ms");
                let sent: f64 = values(l, "stream", "packets_sent").iter().sum();
                let lost: f64 = values(l, "stream", "packets_lost").iter().sum();
                let share = |lim: f64| {
                    if sent > 0.0 {
                        rtts.iter().filter(|x| **x < lim).count() as f64 / sent
                    } else {
                        f64::NAN
                    }
                };
                let med = stats::median(&rtts).unwrap_or(f64::NAN);
                let _ = writeln!(
                    md,
                    "| {} | {} | {} | {:.3} | {:.3} | {} |",
                    cell(l),
                    sent,
                    num(med),
                    share(150.0),
                    share(300.0),
                    lost
                );
            }
            md.push_str("\nSeed 001 published no RTT numbers; the shares are the quantity it argued from.\n\n");
        }
        "goodput" => write_seed002_table(md, &labels, records),
        _ => {}
    }
}

/// Seed 002's goodput (Mbit/s, mean ± 95% CI, share of no anonymisation),
/// Moto X Style; 3 streams: device not named in the paper.
const SEED002_GOODPUT: &[(&str, &str, &str)] = &[
    ("None", "308.2 ± 2.5", "335.2 ± 16.3"),
    ("OpenVPN", "61.9 ± 0.9 (20%)", "small gain"),
    ("Orbot, 2 relays", "57.5 ± 1.5 (19%)", "unchanged"),
    ("Orbot, 3 relays", "51.0 ± 0.7 (17%)", "unchanged"),
    ("ANONguard, 2 relays", "84.5 ± 5.2 (27%)", "–"),
    (
        "ANONguard, 3 relays",
        "93.5 ± 1.4 (30%)",
        "98.9 ± 2.4 (30%)",
    ),
];

/// `goodput` in the shape of seed 002's table: per series and stream
/// count (kind `streams:N`), mean Mbit/s ± the half-width of its 95% Student's t interval,
/// and the share of the no-anonymisation baseline's mean.
pub(super) fn write_seed002_table(md: &mut String, labels: &[&str], records: &[Record]) {
    let mut counts: BTreeSet<u64> = BTreeSet::new();
    let mut values: BTreeMap<(&str, u64), Vec<f64>> = BTreeMap::new();
    for r in records.iter().filter(|r| r.workload == "goodput" && r.ok()) {
        let (Some(n), Some(&mbps)) = (
            r.kind
                .strip_prefix("streams:")
                .and_then(|n| n.parse::<u64>().ok()),
            r.metrics.get("mbps"),
        ) else {
            continue;
        };
        if n == 0 || !mbps.is_finite() {
            continue;
        }
        counts.insert(n);
        values.entry((r.label.as_str(), n)).or_default().push(mbps);
    }
    if counts.is_empty() {
        return;
    }
    let stream_name = |n: u64| {
        if n == 1 {
            "1 stream".to_string()
        } else {
            format!("{n} streams")
        }
    };
    let _ = writeln!(
        md,
        "### In the shape of seed 002's goodput table (Mbit/s, mean ± 95% CI half-width, Student's t; share of no anonymisation)\n"
    );
    let mut head = String::from("| config |");
    let mut rule = String::from("|---|");
    for &n in &counts {
        let _ = write!(head, " {} | % of none |", stream_name(n));
        rule.push_str("--:|--:|");
    }
    let _ = writeln!(md, "{head}\n{rule}");
    let mean_of = |label: &str, n: u64| {
        values
            .get(&(label, n))
            .and_then(|v| stats::summarize(v))
            .map(|s| (s.mean, s.mean_ci95))
    };
    let mut ordered: Vec<&str> = labels
        .iter()
        .copied()
        .filter(|l| *l == BASELINE_LABEL)
        .collect();
    ordered.extend(labels.iter().copied().filter(|l| *l != BASELINE_LABEL));
    for l in ordered {
        let name = if l == BASELINE_LABEL {
            "none (direct to the sink)".to_string()
        } else {
            l.to_string()
        };
        let mut row = format!("| {} |", cell(&name));
        for &n in &counts {
            match mean_of(l, n) {
                Some((mean, (lo, hi))) => {
                    let half = (hi - lo) / 2.0;
                    let half = if half.is_finite() {
                        format!(" ± {half:.1}")
                    } else {
                        String::new()
                    };
                    let share = match mean_of(BASELINE_LABEL, n) {
                        Some((base, _)) if base > 0.0 && l != BASELINE_LABEL => {
                            format!("{:.0}%", 100.0 * mean / base)
                        }
                        _ => "–".into(),
                    };
                    let _ = write!(row, " {mean:.1}{half} | {share} |");
                }
                None => row.push_str(" – | – |"),
            }
        }
        let _ = writeln!(md, "{row}");
    }
    md.push_str("\nSeed 002 (Android phones, 2016; one TCP connection, 10 min after 1 min of warm-up, 10 runs; 3 streams measured on an unnamed device):\n\n");
    md.push_str("| config | 1 stream | 3 streams |\n|---|--:|--:|\n");
    for (c, one, three) in SEED002_GOODPUT {
        let _ = writeln!(md, "| {c} | {one} | {three} |");
    }
    md.push('\n');
}
