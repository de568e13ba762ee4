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

mod format;
mod plots;
mod seed;
mod seed000;
mod tables;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::record::{Record, RunMeta};

pub use format::human_size;
pub use seed000::{Seed000Cell, goal_met, seed000_cell_of, seed000_report};

use format::file_name;
use plots::write_workload_plots;
use seed::write_seed_table;
use tables::{write_metas, write_workload_tables};

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
