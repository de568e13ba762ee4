//! Reports: `summary.md` (tables of statistics) and CDF and box plots
//! from measured [`Record`]s, and reading a results directory back.
//!
//! # Grouping
//!
//! Records are grouped per workload, then per series: (label, kind, size).
//! The kind is part of the key because one workload can measure different
//! things under the same metric name (`session`: `latency_ms` per message
//! and per session; `access`: `ttfb_ms` on a new and on a reused circuit).
//! Within a workload, labels and kinds keep the order in which they first
//! appear in the records, sizes are ascending (no size first), metrics are
//! in alphabetical order.
//!
//! Statistics use the successful records only (`error` absent); errors and
//! timeouts are counted per series, apart from each other. See
//! [`crate::stats`] for the definitions of percentiles and confidence
//! intervals.
//!
//! # Files
//!
//! [`write_report`] writes `summary.md` and, per workload and metric:
//!
//! * `<workload>-<metric>-cdf.svg/.png`: one CDF line per series;
//! * `<workload>-<metric>-<size>-cdf.svg/.png`: when the metric was
//!   measured at several sizes, one CDF per size as well (size as `50KiB`,
//!   `1MiB`, ...), one line per label (and kind);
//! * `<workload>-<metric>-box.svg/.png`: one box per series.
//!
//! A series is named by its label, followed by its kind when the metric
//! was measured for several kinds, and by its size when the metric was
//! measured at several sizes (`onionmix-basic/omclient0 1 MiB`).
//! Characters other than ASCII letters, digits, `.`, `_` and `-` in file
//! names are replaced by `_`.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::plot;
use crate::record::{BASELINE_LABEL, Record, RunMeta};
use crate::stats;

/// Name of the records file in a results directory.
pub const RESULTS_FILE: &str = "results.jsonl";
/// Name of the run description file in a results directory.
pub const META_FILE: &str = "meta.json";
/// Name of the report's tables file.
pub const SUMMARY_FILE: &str = "summary.md";

/// Reads a results directory: `results.jsonl` (one [`Record`] per line;
/// blank lines are skipped; a malformed line is an error naming its line
/// number, counted from 1) and `meta.json` (a JSON array of [`RunMeta`],
/// or a single object). A missing `meta.json` gives no metas; a missing
/// `results.jsonl` is an error.
pub fn read_results(dir: &Path) -> Result<(Vec<Record>, Vec<RunMeta>), String> {
    let path = dir.join(RESULTS_FILE);
    let text =
        std::fs::read_to_string(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let mut records = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let record: Record = serde_json::from_str(line)
            .map_err(|e| format!("{} line {}: {e}", path.display(), i + 1))?;
        records.push(record);
    }

    let path = dir.join(META_FILE);
    let metas = match std::fs::read_to_string(&path) {
        Ok(text) => parse_metas(&text).map_err(|e| format!("{}: {e}", path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(format!("reading {}: {e}", path.display())),
    };
    Ok((records, metas))
}

/// Parses `meta.json`: an array of [`RunMeta`] or one object.
fn parse_metas(text: &str) -> Result<Vec<RunMeta>, String> {
    let value: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    match value {
        serde_json::Value::Array(_) => serde_json::from_value(value).map_err(|e| e.to_string()),
        serde_json::Value::Object(_) => serde_json::from_value(value)
            .map(|m| vec![m])
            .map_err(|e| e.to_string()),
        _ => Err("expected a JSON object or an array of objects".to_string()),
    }
}

/// A byte count for people: `512 B`, `50 KiB`, `1 MiB`, `1.5 MiB`
/// (binary units, at most two decimals, trailing zeros dropped).
pub fn human_size(bytes: u64) -> String {
    const UNITS: [(&str, u64); 4] = [
        ("TiB", 1 << 40),
        ("GiB", 1 << 30),
        ("MiB", 1 << 20),
        ("KiB", 1 << 10),
    ];
    for (unit, scale) in UNITS {
        if bytes >= scale {
            if bytes.is_multiple_of(scale) {
                return format!("{} {unit}", bytes / scale);
            }
            let v = format!("{:.2}", bytes as f64 / scale as f64);
            let v = v.trim_end_matches('0').trim_end_matches('.');
            return format!("{v} {unit}");
        }
    }
    format!("{bytes} B")
}

/// A size for tables (`—` when there is none).
fn size_cell(size: Option<u64>) -> String {
    size.map_or_else(|| "—".to_string(), human_size)
}

/// A size for file names: `50KiB`, `1.5MiB`, `nosize`.
fn size_slug(size: Option<u64>) -> String {
    size.map_or_else(|| "nosize".to_string(), |s| human_size(s).replace(' ', ""))
}

/// Replaces characters that do not belong in a file name.
fn slug(s: &str) -> String {
    let out: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if out.is_empty() || out.chars().all(|c| c == '.') {
        "_".to_string()
    } else {
        out
    }
}

/// A number for tables: a few significant digits, `–` for NaN.
fn num(v: f64) -> String {
    if v.is_nan() {
        return "–".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "∞" } else { "-∞" }.to_string();
    }
    let a = v.abs();
    if a == 0.0 {
        "0".to_string()
    } else if !(1e-3..1e6).contains(&a) {
        format!("{v:.3e}")
    } else if a >= 1000.0 {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 10.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

/// An interval for tables.
fn interval((lo, hi): (f64, f64)) -> String {
    if lo.is_nan() && hi.is_nan() {
        "–".to_string()
    } else {
        format!("[{}, {}]", num(lo), num(hi))
    }
}

/// Escapes text for a Markdown table cell.
fn cell(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('|', "\\|")
        .replace(['\n', '\r'], " ")
}

/// Inline Markdown code, safe for text containing backticks.
fn code(s: &str) -> String {
    let s = s.replace(['\n', '\r'], " ");
    if s.is_empty() {
        "(none)".to_string()
    } else if s.contains('`') {
        format!("`` {s} ``")
    } else {
        format!("`{s}`")
    }
}

/// `YYYY-MM-DD HH:MM:SS UTC` for Unix seconds (times past the year 9999
/// are written as its last second).
fn utc(unix: u64) -> String {
    const FORMAT: &[time::format_description::BorrowedFormatItem<'static>] =
        time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second] UTC");
    let t = i64::try_from(unix).unwrap_or(i64::MAX);
    time::OffsetDateTime::from_unix_timestamp(t)
        .unwrap_or_else(|_| time::PrimitiveDateTime::MAX.assume_utc())
        .format(FORMAT)
        .unwrap_or_else(|_| "9999-12-31 23:59:59 UTC".to_string())
}

/// The records of one series: (label, kind, size) within a workload.
#[derive(Default)]
struct Series<'a> {
    ok: usize,
    errors: usize,
    timeouts: usize,
    /// Finite values of successful records, by metric.
    metrics: BTreeMap<&'a str, Vec<f64>>,
}

/// Series key: (label index, kind index, size); indices into
/// [`Workload::labels`] and [`Workload::kinds`], in first-seen order.
type Key = (usize, usize, Option<u64>);

/// The records of one workload, grouped.
#[derive(Default)]
struct Workload<'a> {
    labels: Vec<&'a str>,
    kinds: Vec<&'a str>,
    series: BTreeMap<Key, Series<'a>>,
}

impl<'a> Workload<'a> {
    fn add(&mut self, r: &'a Record) {
        let label = index_of(&mut self.labels, &r.label);
        let kind = index_of(&mut self.kinds, &r.kind);
        let s = self.series.entry((label, kind, r.size)).or_default();
        if r.timed_out() {
            s.timeouts += 1;
        } else if !r.ok() {
            s.errors += 1;
        } else {
            s.ok += 1;
            for (name, &v) in &r.metrics {
                let values = s.metrics.entry(name.as_str()).or_default();
                if v.is_finite() {
                    values.push(v);
                }
            }
        }
    }

    /// Every metric measured in this workload.
    fn metrics(&self) -> BTreeSet<&'a str> {
        self.series
            .values()
            .flat_map(|s| s.metrics.keys().copied())
            .collect()
    }

    /// The series with finite values of `metric`, in key order.
    fn with_metric(&self, metric: &str) -> Vec<(Key, &[f64])> {
        self.series
            .iter()
            .filter_map(|(k, s)| {
                let v = s.metrics.get(metric)?;
                (!v.is_empty()).then_some((*k, v.as_slice()))
            })
            .collect()
    }
}

/// Position of `item` in `list`, appending it when new.
fn index_of<'a>(list: &mut Vec<&'a str>, item: &'a str) -> usize {
    match list.iter().position(|x| *x == item) {
        Some(i) => i,
        None => {
            list.push(item);
            list.len() - 1
        }
    }
}

/// Groups records per workload (workloads in alphabetical order).
fn group(records: &[Record]) -> BTreeMap<&str, Workload<'_>> {
    let mut out: BTreeMap<&str, Workload<'_>> = BTreeMap::new();
    for r in records {
        out.entry(r.workload.as_str()).or_default().add(r);
    }
    out
}

/// Writes a report of `records` (made as `metas` describe) into `out_dir`
/// (created if missing): `summary.md` and the plots listed in the module
/// documentation. Returns the paths written, `summary.md` first.
///
/// `summary.md` has a header per [`RunMeta`] (command, machine, git
/// commit, version, specs, seed, start, parameters, link profiles), then
/// per workload a table with one row per (label, kind, size, metric):
/// successful values, errors, timeouts, min, median, mean, p90, p99, max,
/// standard deviation, the mean's and the median's 95% confidence
/// intervals. When a workload has two or more labels (besides the
/// no-anonymisation baseline), ratio tables follow, the first label
/// against each other one (in order of first appearance): per (kind,
/// size, metric) measured under both, the ratio of medians with its
/// bootstrap 95% confidence interval.
pub fn write_report(
    records: &[Record],
    metas: &[RunMeta],
    out_dir: &Path,
) -> Result<Vec<PathBuf>, String> {
    std::fs::create_dir_all(out_dir).map_err(|e| format!("creating {}: {e}", out_dir.display()))?;
    let summary_path = out_dir.join(SUMMARY_FILE);
    let mut written = vec![summary_path.clone()];
    let mut md = String::new();

    md.push_str("# Measurement report\n\n");
    write_metas(&mut md, metas);

    let workloads = group(records);
    if workloads.is_empty() {
        md.push_str("No records.\n");
    }
    for (name, w) in &workloads {
        write_workload_tables(&mut md, name, w);
        write_seed_table(&mut md, name, records);
        let plots = write_workload_plots(name, w, out_dir)?;
        if !plots.is_empty() {
            md.push_str("### Plots\n\n");
            for (title, svg, png, show) in &plots {
                let (svg_name, png_name) = (file_name(svg), file_name(png));
                if *show {
                    let _ = writeln!(md, "\n![{title}]({svg_name})\n");
                }
                let _ = writeln!(md, "- {title}: [SVG]({svg_name}), [PNG]({png_name})");
                written.push(svg.clone());
                written.push(png.clone());
            }
            md.push('\n');
        }
    }

    std::fs::write(&summary_path, md)
        .map_err(|e| format!("writing {}: {e}", summary_path.display()))?;
    Ok(written)
}

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
fn write_seed_table(md: &mut String, workload: &str, records: &[Record]) {
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
fn write_seed002_table(md: &mut String, labels: &[&str], records: &[Record]) {
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

/// The last component of `path` as text.
fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The run descriptions at the top of `summary.md`.
fn write_metas(md: &mut String, metas: &[RunMeta]) {
    if metas.is_empty() {
        md.push_str("No run description (`meta.json`) was given.\n\n");
        return;
    }
    for (i, m) in metas.iter().enumerate() {
        if metas.len() == 1 {
            md.push_str("## Run\n\n");
        } else {
            let _ = writeln!(md, "## Run {} of {}\n", i + 1, metas.len());
        }
        let _ = writeln!(md, "- command: {}", code(&m.command));
        let _ = writeln!(md, "- machine: {}", cell(&m.machine));
        let _ = writeln!(md, "- git commit: {}", code(&m.git_commit));
        let _ = writeln!(md, "- version: {}", code(&m.version));
        let _ = writeln!(md, "- specs: {}", cell(&m.specs.join(", ")));
        let _ = writeln!(md, "- seed: {}", m.seed);
        let _ = writeln!(
            md,
            "- started: {} ({})",
            utc(m.started_unix),
            m.started_unix
        );
        if m.params.is_empty() {
            md.push_str("- params: (none)\n");
        } else {
            let params: Vec<String> = m
                .params
                .iter()
                .map(|(k, v)| code(&format!("{k} = {v}")))
                .collect();
            let _ = writeln!(md, "- params: {}", params.join(", "));
        }
        if m.links.trim().is_empty() {
            md.push_str("- links: none (no emulation)\n\n");
        } else {
            let fence = if m.links.contains("```") {
                "~~~~"
            } else {
                "```"
            };
            let _ = writeln!(
                md,
                "- links:\n\n{fence}toml\n{}\n{fence}\n",
                m.links.trim_end()
            );
        }
    }
}

/// The statistics table (and ratio table) of one workload.
fn write_workload_tables(md: &mut String, name: &str, w: &Workload<'_>) {
    let _ = writeln!(md, "## Workload `{}`\n", cell(name));
    md.push_str(
        "| series | kind | size | metric | n ok | errors | timeouts | min | median | mean \
         | p90 | p99 | max | sd | mean 95% CI | median 95% CI |\n",
    );
    md.push_str("|---|---|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|---|---|\n");
    for (&(l, k, size), s) in &w.series {
        let prefix = format!(
            "| {} | {} | {} |",
            cell(w.labels[l]),
            cell(w.kinds[k]),
            size_cell(size)
        );
        if s.metrics.is_empty() {
            let _ = writeln!(
                md,
                "{prefix} — | {} | {} | {} | – | – | – | – | – | – | – | – | – | – |",
                s.ok, s.errors, s.timeouts
            );
            continue;
        }
        for (metric, values) in &s.metrics {
            let _ = write!(
                md,
                "{prefix} {} | {} | {} | {} |",
                cell(metric),
                values.len(),
                s.errors,
                s.timeouts
            );
            match stats::summarize(values) {
                Some(st) => {
                    let _ = writeln!(
                        md,
                        " {} | {} | {} | {} | {} | {} | {} | {} | {} |",
                        num(st.min),
                        num(st.median),
                        num(st.mean),
                        num(st.p90),
                        num(st.p99),
                        num(st.max),
                        num(st.sd),
                        interval(st.mean_ci95),
                        interval(st.median_ci95)
                    );
                }
                None => md.push_str(" – | – | – | – | – | – | – | – | – |\n"),
            }
        }
    }
    md.push('\n');

    // Ratios pair by pair: the first series against each other one
    // (the no-anonymisation baseline is left out).
    let compared: Vec<usize> = (0..w.labels.len())
        .filter(|&i| w.labels[i] != BASELINE_LABEL)
        .collect();
    if let Some((&first, rest)) = compared.split_first() {
        for &other in rest {
            write_ratio_table(md, w, first, other);
        }
    }
}

/// Ratio of medians, label `ia` over label `ib`, per (kind, size, metric).
fn write_ratio_table(md: &mut String, w: &Workload<'_>, ia: usize, ib: usize) {
    let (a, b) = (w.labels[ia], w.labels[ib]);
    let mut rows = String::new();
    for ((l, k, size), s) in &w.series {
        if *l != ia {
            continue;
        }
        let Some(other) = w.series.get(&(ib, *k, *size)) else {
            continue;
        };
        for (metric, va) in &s.metrics {
            let Some(vb) = other.metrics.get(metric) else {
                continue;
            };
            let (Some(ma), Some(mb)) = (stats::median(va), stats::median(vb)) else {
                continue;
            };
            let (ratio, ci) = match stats::ratio_ci95(va, vb) {
                Some((r, ci)) => (num(r), interval(ci)),
                None => ("–".to_string(), "–".to_string()),
            };
            let _ = writeln!(
                rows,
                "| {} | {} | {} | {} | {} | {ratio} | {ci} |",
                cell(w.kinds[*k]),
                size_cell(*size),
                cell(metric),
                num(ma),
                num(mb),
            );
        }
    }
    if rows.is_empty() {
        return;
    }
    let _ = writeln!(
        md,
        "### Ratio of medians: `{}` / `{}`\n\n\
         Above 1: the first series' median is larger. 95% CI: percentile \
         bootstrap, {} resamples of each series.\n",
        cell(a),
        cell(b),
        stats::BOOTSTRAP_RESAMPLES
    );
    let _ = writeln!(
        md,
        "| kind | size | metric | median {} | median {} | ratio | 95% CI |",
        cell(a),
        cell(b)
    );
    md.push_str("|---|---|---|--:|--:|--:|---|\n");
    md.push_str(&rows);
    md.push('\n');
}

/// (title, SVG path, PNG path, whether to show it inline in summary.md)
type PlotFile = (String, PathBuf, PathBuf, bool);

/// Writes the plots of one workload; returns what was written.
fn write_workload_plots(
    name: &str,
    w: &Workload<'_>,
    out_dir: &Path,
) -> Result<Vec<PlotFile>, String> {
    let mut out = Vec::new();
    for metric in w.metrics() {
        let found = w.with_metric(metric);
        if found.is_empty() {
            continue;
        }
        let sizes: BTreeSet<Option<u64>> = found.iter().map(|((_, _, s), _)| *s).collect();
        let kinds: BTreeSet<usize> = found.iter().map(|((_, k, _), _)| *k).collect();
        let several_sizes = sizes.len() > 1;
        let several_kinds = kinds.len() > 1;
        let series_name = |(l, k, s): Key, with_size: bool| {
            let mut n = w.labels[l].to_string();
            if several_kinds {
                n.push(' ');
                n.push_str(w.kinds[k]);
            }
            if with_size {
                n.push(' ');
                n.push_str(&size_cell(s));
            }
            n
        };
        let all: Vec<(String, Vec<f64>)> = found
            .iter()
            .map(|(k, v)| (series_name(*k, several_sizes), v.to_vec()))
            .collect();
        let base = format!("{}-{}", slug(name), slug(metric));

        let title = format!("{name}: {metric}");
        let (svg, png) = paths(out_dir, &format!("{base}-cdf"));
        plot::cdf_plot(&title, metric, &all, &svg, &png)?;
        out.push((format!("{title}, CDF"), svg, png, true));

        if several_sizes {
            for size in &sizes {
                let per_size: Vec<(String, Vec<f64>)> = found
                    .iter()
                    .filter(|((_, _, s), _)| s == size)
                    .map(|(k, v)| (series_name(*k, false), v.to_vec()))
                    .collect();
                let title = format!("{name}: {metric}, {}", size_cell(*size));
                let (svg, png) = paths(out_dir, &format!("{base}-{}-cdf", slug(&size_slug(*size))));
                plot::cdf_plot(&title, metric, &per_size, &svg, &png)?;
                out.push((format!("{title}, CDF"), svg, png, false));
            }
        }

        let (svg, png) = paths(out_dir, &format!("{base}-box"));
        plot::box_plot(&title, metric, &all, &svg, &png)?;
        out.push((format!("{title}, box plot"), svg, png, false));
    }
    Ok(out)
}

/// `<dir>/<stem>.svg` and `<dir>/<stem>.png`.
fn paths(dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{stem}.svg")),
        dir.join(format!("{stem}.png")),
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

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
        let cols =
            |l: String| -> Vec<String> { l.split('|').map(|c| c.trim().to_string()).collect() };
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
}
