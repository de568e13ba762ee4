//! The CDF and box plots of one workload, and their file names.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::format::{size_cell, size_slug, slug};
use super::{Key, Workload};
use crate::plot;

/// (title, SVG path, PNG path, whether to show it inline in summary.md)
pub(super) type PlotFile = (String, PathBuf, PathBuf, bool);

/// Writes the plots of one workload; returns what was written.
pub(super) fn write_workload_plots(
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
pub(super) fn paths(dir: &Path, stem: &str) -> (PathBuf, PathBuf) {
    (
        dir.join(format!("{stem}.svg")),
        dir.join(format!("{stem}.png")),
    )
}
