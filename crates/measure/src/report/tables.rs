//! The summary tables: the run descriptions, per-workload statistics, and label-against-label ratios.

use std::fmt::Write as _;

use super::Workload;
use super::format::{cell, code, interval, num, size_cell, utc};
use crate::record::{BASELINE_LABEL, RunMeta};
use crate::stats;

/// The run descriptions at the top of `summary.md`.
pub(super) fn write_metas(md: &mut String, metas: &[RunMeta]) {
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
        if !m.socket_drops.is_empty() {
            let per: Vec<String> = m
                .socket_drops
                .iter()
                .map(|(spec, d)| format!("{} {} / {}", cell(spec), d.udp_receive, d.udp_send))
                .collect();
            let any = m
                .socket_drops
                .values()
                .any(|d| d.udp_receive > 0 || d.udp_send > 0);
            let _ = writeln!(
                md,
                "- UDP datagrams dropped at full socket buffers while it ran (receive / send; \
                 the hosts' losses, not the emulated links'): {}{}",
                per.join(", "),
                if any {
                    ". **Not zero: UDP transports (QUIC links) lost packets to host load**"
                } else {
                    ""
                }
            );
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
pub(super) fn write_workload_tables(md: &mut String, name: &str, w: &Workload<'_>) {
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
pub(super) fn write_ratio_table(md: &mut String, w: &Workload<'_>, ia: usize, ib: usize) {
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
