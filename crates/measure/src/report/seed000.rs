//! Seed 000's app experiment (docs/experiments/seed-000/): Tables 3-6 in
//! the seed's shape from several results directories, one per emulated
//! access profile and protocol, each holding the direct baseline, an
//! onionmix client and a stock tor client; the seed's numbers beside ours
//! and the goal check (onionmix's Tor delta at most half of stock tor's).

use std::fmt::Write as _;

use crate::record::{BASELINE_LABEL, Record, RunMeta};
use crate::stats;

/// The session script's messages, in order: (record kind suffix, the
/// seed's abbreviation).
const MESSAGES: &[(&str, &str)] = &[
    ("new-session", "NS"),
    ("get-commitments", "GC"),
    ("get-proof", "GPP"),
    ("respond-permission", "RP"),
];

/// Lowest / average / highest, seconds.
type Lah = (f64, f64, f64);

/// The seed's numbers for one situation: per message (NS, GC, GPP, RP),
/// without and with Tor; `None` where it measured nothing.
struct SeedRow {
    situation: &'static str,
    direct: [Option<Lah>; 4],
    tor: [Option<Lah>; 4],
}

/// The seed's Tables 3 and 4 for the situations our profiles stand for
/// (docs/experiments/seed-000/README.md says which stands for which).
fn seed_row(profile: &str, https: bool) -> Option<SeedRow> {
    let row = |situation, direct, tor| {
        Some(SeedRow {
            situation,
            direct,
            tor,
        })
    };
    match (profile, https) {
        ("4g", false) => row(
            "HTTP set1/2 cell, disclosure with KSS",
            [
                Some((0.07, 0.09, 0.46)),
                Some((0.23, 0.29, 0.39)),
                Some((0.24, 0.30, 0.42)),
                Some((0.13, 0.17, 0.24)),
            ],
            [
                Some((0.17, 0.57, 2.59)),
                Some((0.57, 2.50, 11.68)),
                Some((0.54, 1.12, 3.89)),
                Some((0.30, 0.68, 2.70)),
            ],
        ),
        ("4g", true) => row(
            "HTTPS set1/2 cell, disclosure with KSS",
            [
                Some((0.13, 0.17, 0.40)),
                Some((0.26, 0.31, 0.39)),
                Some((0.27, 0.32, 0.44)),
                Some((0.22, 0.26, 0.32)),
            ],
            [
                Some((0.38, 1.24, 6.37)),
                Some((0.68, 2.04, 11.28)),
                Some((0.66, 1.32, 7.55)),
                Some((0.58, 1.16, 6.71)),
            ],
        ),
        ("homewifi", false) => row(
            "HTTP home WiFi, disclosure (no KSS)",
            [
                Some((0.03, 0.06, 0.14)),
                None,
                None,
                Some((0.11, 0.13, 0.21)),
            ],
            [
                Some((0.18, 0.49, 1.31)),
                None,
                None,
                Some((0.31, 0.65, 1.74)),
            ],
        ),
        ("unstablewifi", false) => row(
            "HTTP unstable WiFi, issuance (no KSS)",
            [
                Some((0.03, 0.06, 0.32)),
                None,
                None,
                Some((0.09, 0.20, 0.47)),
            ],
            [
                Some((0.12, 0.57, 5.10)),
                None,
                None,
                Some((0.21, 0.51, 2.23)),
            ],
        ),
        ("officewifi", true) => row(
            "HTTPS office WiFi, disclosure with KSS",
            [
                Some((0.03, 0.08, 1.05)),
                Some((0.11, 0.16, 0.45)),
                Some((0.10, 0.17, 0.26)),
                Some((0.09, 0.12, 0.23)),
            ],
            [
                Some((0.47, 1.61, 7.28)),
                Some((0.76, 1.94, 6.03)),
                Some((0.70, 1.59, 3.16)),
                Some((0.68, 1.37, 2.92)),
            ],
        ),
        _ => None,
    }
}

/// One cell of the experiment: a profile and protocol, with its records.
#[derive(Debug, Clone)]
pub struct Seed000Cell {
    /// Access profile (`4g`, `homewifi`, `unstablewifi`, `officewifi`).
    pub profile: String,
    /// HTTPS (else HTTP).
    pub https: bool,
    /// The cell's records (direct, onionmix and stock tor series).
    pub records: Vec<Record>,
}

/// The profile and protocol of a results directory from its run
/// description: the profile is what follows `seed000-` in the first
/// spec's name or file (`onionmix-seed000-4g`,
/// `.../specs/onionmix-seed000-4g.toml`), the protocol the workload's
/// `https` parameter.
pub fn seed000_cell_of(meta: &RunMeta) -> Option<(String, bool)> {
    let profile = meta.specs.iter().find_map(|s| {
        let (_, p) = s.rsplit_once("seed000-")?;
        let p = p.strip_suffix(".toml").unwrap_or(p);
        (!p.is_empty() && !p.contains('/')).then(|| p.to_string())
    })?;
    let https = meta.params.get("https").map(|v| v == "true")?;
    Some((profile, https))
}

/// The three series of a cell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Series {
    Direct,
    Onionmix,
    Stock,
}

const SERIES: [(Series, &str); 3] = [
    (Series::Direct, "direct (no Tor)"),
    (Series::Onionmix, "onionmix"),
    (Series::Stock, "stock tor"),
];

fn series_of(label: &str) -> Option<Series> {
    if label == BASELINE_LABEL {
        Some(Series::Direct)
    } else if label.starts_with("onionmix") {
        Some(Series::Onionmix)
    } else if label.starts_with("tor") || label.starts_with("stock") {
        Some(Series::Stock)
    } else {
        None
    }
}

/// Per-message statistics of one series of a cell.
struct SeriesStats {
    /// Per message: lowest / average / highest latency, seconds.
    messages: [Option<Lah>; 4],
    /// Sessions that completed, of all sessions.
    ok: usize,
    total: usize,
}

fn series_stats(records: &[Record], s: Series) -> SeriesStats {
    let mine = || {
        records
            .iter()
            .filter(move |r| r.workload == "session" && series_of(&r.label) == Some(s))
    };
    let mut messages = [None; 4];
    for (slot, (kind, _)) in messages.iter_mut().zip(MESSAGES) {
        let kind = format!("message:{kind}");
        let xs: Vec<f64> = mine()
            .filter(|r| r.kind == kind && r.ok())
            .filter_map(|r| r.metrics.get("latency_ms").map(|v| v / 1e3))
            .collect();
        *slot = stats::summarize(&xs).map(|x| (x.min, x.mean, x.max));
    }
    let sessions = || mine().filter(|r| r.kind == "session");
    SeriesStats {
        messages,
        ok: sessions().filter(|r| r.ok()).count(),
        total: sessions().count(),
    }
}

/// Sum of the averages of the messages present in every one of `rows`
/// (so sums compare like with like); `None` when a row has none of them.
fn sum_of_averages(row: &[Option<Lah>; 4], mask: &[bool; 4]) -> Option<f64> {
    let mut sum = 0.0;
    for (m, on) in row.iter().zip(mask) {
        if *on {
            sum += m.map(|x| x.1)?;
        }
    }
    Some(sum)
}

fn lah(x: &Option<Lah>) -> String {
    match x {
        Some((l, a, h)) => format!("{l:.2} / {a:.2} / {h:.2}"),
        None => "-".into(),
    }
}

fn secs(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into())
}

fn signed(x: Option<f64>) -> String {
    x.map(|v| format!("{v:+.2}")).unwrap_or_else(|| "-".into())
}

/// Whether the goal holds: onionmix's delta at most half of stock tor's.
pub fn goal_met(onionmix_delta: f64, stock_delta: f64) -> bool {
    onionmix_delta <= 0.5 * stock_delta
}

/// Tables 3-6 in the seed's shape for `cells` (Markdown).
pub fn seed000_report(cells: &[Seed000Cell]) -> String {
    let mut md = String::from(
        "# Seed 000's app experiment: per-message latency of sessions over Tor\n\n\
         Lowest / average / highest per message (seconds); successful sessions only \
         (`ok/n` counts sessions). Seed rows are the seed's published numbers \
         (Kreukniet 2021, Tables 3-6; a phone on real networks and the public Tor \
         network, 2020), not ours.\n\n",
    );
    let mut order: Vec<&Seed000Cell> = cells.iter().collect();
    order.sort_by_key(|c| (c.https, profile_rank(&c.profile), c.profile.clone()));
    let mut deltas = Vec::new();
    for https in [false, true] {
        let mine: Vec<&&Seed000Cell> = order.iter().filter(|c| c.https == https).collect();
        if mine.is_empty() {
            continue;
        }
        let (table, proto) = if https { (4, "HTTPS") } else { (3, "HTTP") };
        let _ = writeln!(
            md,
            "## Table {table} ({proto}): lowest / average / highest per message, seconds\n"
        );
        md.push_str(
            "| profile | series | ok/n | NS | GC | GPP | RP |\n|---|---|---|---|---|---|---|\n",
        );
        for c in mine {
            let stats: Vec<(Series, &str, SeriesStats)> = SERIES
                .iter()
                .map(|(s, name)| (*s, *name, series_stats(&c.records, *s)))
                .collect();
            for (_, name, st) in &stats {
                let _ = writeln!(
                    md,
                    "| {} | {name} | {}/{} | {} | {} | {} | {} |",
                    c.profile,
                    st.ok,
                    st.total,
                    lah(&st.messages[0]),
                    lah(&st.messages[1]),
                    lah(&st.messages[2]),
                    lah(&st.messages[3]),
                );
            }
            let seed = seed_row(&c.profile, https);
            if let Some(s) = &seed {
                for (what, row) in [("seed, no Tor", &s.direct), ("seed, Tor", &s.tor)] {
                    let _ = writeln!(
                        md,
                        "| {} | {what} ({}) | | {} | {} | {} | {} |",
                        c.profile,
                        s.situation,
                        lah(&row[0]),
                        lah(&row[1]),
                        lah(&row[2]),
                        lah(&row[3]),
                    );
                }
            }
            let get = |s: Series| {
                stats
                    .iter()
                    .find(|(x, _, _)| *x == s)
                    .map(|(_, _, st)| st.messages)
                    .unwrap_or([None; 4])
            };
            deltas.push((
                c.profile.clone(),
                proto,
                get(Series::Direct),
                get(Series::Onionmix),
                get(Series::Stock),
                seed,
            ));
        }
        md.push('\n');
    }
    md.push_str(
        "## Tables 5/6: sum of the average message latencies per session (s) and the delta Tor adds\n\n\
         Sum over NS + GC + GPP + RP (ours; the seed's sum covers the messages it measured in \
         that situation, named in the last column). Goal: onionmix delta <= 0.5 x stock tor delta.\n\n\
         | profile | protocol | direct | onionmix | stock tor | onionmix delta | stock tor delta | onionmix/stock | goal met | seed: no Tor -> Tor (delta) |\n\
         |---|---|---|---|---|---|---|---|---|---|\n",
    );
    let all = [true; 4];
    let mut met = 0;
    let mut checked = 0;
    for (profile, proto, d, o, s, seed) in &deltas {
        let (sd, so, ss) = (
            sum_of_averages(d, &all),
            sum_of_averages(o, &all),
            sum_of_averages(s, &all),
        );
        let od = so.zip(sd).map(|(a, b)| a - b);
        let sdl = ss.zip(sd).map(|(a, b)| a - b);
        let (ratio, goal) = match (od, sdl) {
            (Some(a), Some(b)) => {
                checked += 1;
                let g = goal_met(a, b);
                met += usize::from(g);
                (
                    if b > 0.0 {
                        format!("{:.2}", a / b)
                    } else {
                        "-".into()
                    },
                    if g { "yes" } else { "**no**" },
                )
            }
            _ => ("-".into(), "-"),
        };
        let seed_txt = match seed {
            Some(r) => {
                let mask = [0, 1, 2, 3].map(|i| r.direct[i].is_some() && r.tor[i].is_some());
                let names: Vec<&str> = MESSAGES
                    .iter()
                    .zip(mask)
                    .filter(|(_, m)| *m)
                    .map(|((_, n), _)| *n)
                    .collect();
                match (
                    sum_of_averages(&r.direct, &mask),
                    sum_of_averages(&r.tor, &mask),
                ) {
                    (Some(a), Some(b)) => {
                        format!("{a:.2} -> {b:.2} ({:+.2}), {}", b - a, names.join("+"))
                    }
                    _ => "-".into(),
                }
            }
            None => "not measured by the seed".into(),
        };
        let _ = writeln!(
            md,
            "| {profile} | {proto} | {} | {} | {} | {} | {} | {ratio} | {goal} | {seed_txt} |",
            secs(sd),
            secs(so),
            secs(ss),
            signed(od),
            signed(sdl),
        );
    }
    let _ = writeln!(
        md,
        "\nGoal met in {met} of {checked} cells with all three series measured."
    );
    md
}

fn profile_rank(p: &str) -> usize {
    ["4g", "homewifi", "unstablewifi", "officewifi"]
        .iter()
        .position(|x| *x == p)
        .unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn rec(label: &str, run: u32, kind: &str, ms: f64) -> Record {
        Record {
            workload: "session".into(),
            label: label.into(),
            run,
            kind: kind.into(),
            size: None,
            start_unix_ms: 0.0,
            metrics: [("latency_ms".to_string(), ms)].into_iter().collect(),
            error: None,
        }
    }

    /// Direct 100 ms per message, onionmix 200 ms, stock tor 400 ms (and
    /// 600 ms in a second run): deltas 0.4 and 1.2 s, goal met.
    fn cell(profile: &str, https: bool) -> Seed000Cell {
        let mut records = Vec::new();
        for (label, per_run) in [
            (BASELINE_LABEL, [100.0, 100.0]),
            ("onionmix-seed000-4g/omclient0", [200.0, 200.0]),
            ("tor-seed000-4g/client0", [400.0, 600.0]),
        ] {
            for (run, ms) in per_run.into_iter().enumerate() {
                for (kind, _) in MESSAGES {
                    records.push(rec(label, run as u32, &format!("message:{kind}"), ms));
                }
                records.push(rec(label, run as u32, "session", ms * 4.0));
            }
        }
        // A failed stock session counts in n, not in the statistics.
        let mut bad = rec("tor-seed000-4g/client0", 2, "session", 0.0);
        bad.error = Some("timeout".into());
        records.push(bad);
        Seed000Cell {
            profile: profile.into(),
            https,
            records,
        }
    }

    #[test]
    fn tables_sums_deltas_and_goal() {
        let md = seed000_report(&[cell("4g", true), cell("4g", false)]);
        // HTTP (Table 3) comes before HTTPS (Table 4).
        let t3 = md.find("## Table 3").unwrap();
        let t4 = md.find("## Table 4").unwrap();
        assert!(t3 < t4, "{md}");
        assert!(
            md.contains("| 4g | stock tor | 2/3 | 0.40 / 0.50 / 0.60 |"),
            "{md}"
        );
        assert!(md.contains("| 4g | direct (no Tor) | 2/2 | 0.10 / 0.10 / 0.10 |"));
        // The seed's HTTP cell row, beside ours.
        assert!(md.contains("seed, Tor (HTTP set1/2 cell"));
        assert!(md.contains("0.57 / 2.50 / 11.68"));
        // Sums 0.4 / 0.8 / 2.0; deltas +0.40 / +1.60; ratio 0.25.
        assert!(
            md.contains("| 4g | HTTP | 0.40 | 0.80 | 2.00 | +0.40 | +1.60 | 0.25 | yes |"),
            "{md}"
        );
        // The seed's 4G HTTP sum: .09+.29+.30+.17 -> .57+2.50+1.12+.68.
        assert!(md.contains("0.85 -> 4.87 (+4.02), NS+GC+GPP+RP"), "{md}");
        assert!(md.contains("Goal met in 2 of 2 cells"));
    }

    #[test]
    fn missing_series_and_unmeasured_situations() {
        let mut c = cell("homewifi", true);
        c.records.retain(|r| !r.label.starts_with("tor"));
        let md = seed000_report(&[c, cell("homewifi", false)]);
        assert!(md.contains("not measured by the seed"), "{md}");
        // Home WiFi HTTP: the seed measured NS and RP only.
        assert!(md.contains("0.19 -> 1.14 (+0.95), NS+RP"), "{md}");
        assert!(md.contains("| - | - | - |"), "{md}");
        assert!(md.contains("Goal met in 1 of 1 cells"), "{md}");
        assert!(!goal_met(0.6, 1.0) && goal_met(0.5, 1.0));
    }

    #[test]
    fn cell_of_meta() {
        let mut m = RunMeta {
            specs: vec![
                "onionmix-seed000-officewifi".into(),
                "tor-seed000-officewifi".into(),
            ],
            ..Default::default()
        };
        assert_eq!(seed000_cell_of(&m), None, "no https parameter");
        m.params.insert("https".into(), "true".into());
        assert_eq!(seed000_cell_of(&m), Some(("officewifi".into(), true)));
        m.specs = vec!["docs/experiments/seed-000/specs/onionmix-seed000-4g.toml".into()];
        assert_eq!(seed000_cell_of(&m), Some(("4g".into(), true)));
        m.specs = vec!["onionmix-basic-20ms".into()];
        assert_eq!(seed000_cell_of(&m), None);
    }
}
