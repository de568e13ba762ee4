//! `onionmix measure`, `compare`, `report`: the measurement suite
//! (docs/measure.md). Workloads live in `onionmix_testbed::workload`,
//! statistics, tables and plots in `onionmix_measure`.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use clap::Args;

use onionmix_measure::record::{Record, RunMeta, SocketDrops};
use onionmix_testbed::kstats::socket_drops;
use onionmix_testbed::launcher::{self, LaunchOptions, NetworkGuard};
use onionmix_testbed::netinfo::NetworkInfo;
use onionmix_testbed::spec::{Implementation, Spec};
use onionmix_testbed::workload::{self, Endpoint, FreshClient, WorkloadConfig};

#[derive(Args, Debug)]
pub struct MeasureArgs {
    /// State directory of a running testnet (`onionmix testnet start --dir`).
    #[arg(long)]
    dir: PathBuf,
    /// Workload: bulk, voip, session, goodput, reliability, access, or a
    /// TOML file (docs/measure.md).
    #[arg(long)]
    workload: String,
    /// Client node to measure through (default: the first client; `all`:
    /// every client, in turn within each run, or all at once with
    /// --concurrent; `reliability` always runs them at once).
    #[arg(long)]
    client: Option<String>,
    /// With several clients: run them at the same time within each run.
    #[arg(long)]
    concurrent: bool,
    /// Repetitions (overrides the workload's `runs`).
    #[arg(long)]
    runs: Option<u32>,
    /// Seconds per run for voip/goodput (overrides `duration_secs`).
    #[arg(long)]
    duration: Option<f64>,
    /// Results directory (results.jsonl, meta.json, summary.md, plots).
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args, Debug)]
pub struct CompareArgs {
    /// Network specs to compare (give --spec two or more times; ratios
    /// are the first against each other one).
    #[arg(long = "spec", num_args = 1, required = true)]
    specs: Vec<String>,
    /// Workload name or TOML file; given more than once, the workloads
    /// run one after the other on the same networks (each alternated
    /// between them), with one report for all.
    #[arg(long, num_args = 1, required = true)]
    workload: Vec<String>,
    /// Repetitions per network.
    #[arg(long, default_value_t = 10)]
    runs: u32,
    /// Seconds per run for voip/goodput.
    #[arg(long)]
    duration: Option<f64>,
    /// `all`: measure through every client of each network, as one series
    /// per network (`<spec>/all`); default: each network's first client.
    #[arg(long)]
    client: Option<String>,
    /// With `--client all`: a network's clients run at the same time
    /// (networks still take turns).
    #[arg(long)]
    concurrent: bool,
    /// Results directory (networks run under `<out>/nets/`).
    #[arg(long)]
    out: PathBuf,
}

#[derive(Args, Debug)]
pub struct ReportArgs {
    /// Results directories (each with results.jsonl and meta.json).
    #[arg(required = true)]
    dirs: Vec<PathBuf>,
    /// Where to write summary.md and plots (default: the first directory).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Seed 000's app experiment (docs/experiments/seed-000/): each
    /// directory is one access profile and protocol (`scripts/seed-000.sh`
    /// makes them); writes Tables 3-6 in the seed's shape to
    /// `<out>/seed-000.md` instead of the usual report.
    #[arg(long)]
    seed000: bool,
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    // TLS links and stock tor's links back off with the kernel's TCP
    // controller (and QUIC links with `auto` follow it): results depend on
    // it, so every record names it.
    let tcp = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown".into());
    format!("{cpu}, {cores} cores, Linux {kernel}, TCP congestion control {tcp}")
}

/// The commit this binary was built from (`build.rs`), not the checkout's
/// now: a run can outlast the checkout's state.
fn git_commit() -> String {
    env!("ONIONMIX_GIT_COMMIT").to_string()
}

/// The run's description, taken when it starts (its start time and the
/// binary's commit; socket drops are added when it ends).
fn meta(cfg: &WorkloadConfig, specs: Vec<String>) -> RunMeta {
    let links = specs
        .iter()
        .filter_map(|s| Spec::load(s).ok())
        .filter_map(|s| s.emulation.map(|e| (s.name, e)))
        .map(|(n, e)| format!("[{n}]\n{}", toml::to_string(&e).unwrap_or_default()))
        .collect::<Vec<_>>()
        .join("\n");
    RunMeta {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        machine: machine(),
        git_commit: git_commit(),
        version: env!("CARGO_PKG_VERSION").into(),
        specs,
        links,
        seed: 0,
        started_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        params: cfg.params(),
        socket_drops: BTreeMap::new(),
    }
}

fn endpoint(
    info: &NetworkInfo,
    client: Option<&str>,
    cfg: &WorkloadConfig,
) -> anyhow::Result<Endpoint> {
    let onion = match cfg.onion_target().map_err(anyhow::Error::msg)? {
        None => None,
        Some(name) => {
            let s = if name.is_empty() {
                info.onion_services.first()
            } else {
                info.onion_service(name)
            };
            let s = s.ok_or_else(|| {
                anyhow::anyhow!(
                    "target {:?}: {} has no such onion service (onion services: {})",
                    cfg.target.as_deref().unwrap_or(""),
                    info.spec,
                    info.onion_services
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )
            })?;
            Some((
                s.name.clone(),
                onionmix_testbed::workload::OnionTarget {
                    address: s.address.clone(),
                    http_port: s.http_port,
                    echo_port: s.echo_port,
                },
            ))
        }
    };
    let sink = info
        .sink
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("the network has no sink"))?;
    let clients = info.clients(None);
    let c = match client {
        Some(name) => clients.iter().find(|c| c.name == name).ok_or_else(|| {
            anyhow::anyhow!(
                "no client {name:?} in {} (clients: {})",
                info.spec,
                clients
                    .iter()
                    .map(|c| c.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })?,
        None => clients
            .first()
            .ok_or_else(|| anyhow::anyhow!("the network has no client"))?,
    };
    // On an emulated network, fresh clients (`access`) start in the
    // measured client's namespace, behind the same emulated link.
    let place = match &info.emulator {
        Some(e) => {
            let ready = onionmix_emu::run::read_ready(&e.state_dir)
                .map_err(|e| anyhow::anyhow!("link emulator: {e}"))?;
            let n = ready.node(&c.name).ok_or_else(|| {
                anyhow::anyhow!("{} has no namespace in the link emulator", c.name)
            })?;
            Some(onionmix_testbed::workload::FreshPlace {
                namespace: n.namespace.clone(),
                address: n.address.into(),
            })
        }
        None => None,
    };
    Ok(Endpoint {
        // Through an onion service: `<spec>/<client>@<service>`.
        label: match &onion {
            Some((name, _)) => format!("{}/{}@{name}", info.spec, c.name),
            None => format!("{}/{}", info.spec, c.name),
        },
        socks: c
            .socks_addr()
            .ok_or_else(|| anyhow::anyhow!("{} has no SOCKS port", c.name))?,
        http: sink.http,
        echo: sink.echo,
        https: sink.https,
        tls_ca: sink.tls_ca.clone(),
        direct: false,
        status_json: (c.implementation == Implementation::Onionmix)
            .then(|| c.data_dir.join("status.json")),
        // Both implementations write the cookie to the same place.
        control: c.control_port.and_then(|p| {
            c.address.parse().ok().map(|ip| {
                (
                    std::net::SocketAddr::new(ip, p),
                    c.data_dir.join("control_auth_cookie"),
                )
            })
        }),
        netns: place.as_ref().map(|p| p.namespace.clone()),
        fresh: Some(match c.implementation {
            Implementation::Onionmix => FreshClient::Onionmix {
                bin: std::env::current_exe()?,
                config: c.data_dir.join("client.toml"),
                work_dir: info.dir.join("measure-fresh"),
                place: place.clone(),
            },
            Implementation::Tor => FreshClient::Tor {
                bin: "tor".into(),
                torrc: c.data_dir.join("torrc"),
                work_dir: info.dir.join("measure-fresh"),
                place,
            },
        }),
        onion: onion.map(|(_, t)| t),
        tunnel: None,
        cpu: vec![("client".into(), c.pid)],
    })
}

fn workload_config(
    name: &str,
    runs: Option<u32>,
    duration: Option<f64>,
) -> anyhow::Result<WorkloadConfig> {
    let mut cfg = WorkloadConfig::load(name).map_err(anyhow::Error::msg)?;
    if let Some(r) = runs {
        cfg.runs = r;
    }
    if let Some(d) = duration {
        cfg.duration_secs = d;
    }
    // Validate the overrides too.
    let text = toml::to_string(&cfg)?;
    WorkloadConfig::parse(&text).map_err(anyhow::Error::msg)
}

fn progress(total: u64, what: &str) -> indicatif::ProgressBar {
    let pb = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        indicatif::ProgressBar::new(total)
    } else {
        indicatif::ProgressBar::hidden()
    };
    pb.set_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    pb.set_message(what.to_string());
    pb
}

fn events_per_run(cfg: &WorkloadConfig) -> u64 {
    match cfg.workload.as_str() {
        "bulk" => cfg.sizes.len() as u64,
        "session" => cfg.script.len() as u64,
        _ => 1,
    }
}

fn write_results(out: &Path, records: &[Record], metas: &[RunMeta]) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut f = std::io::BufWriter::new(std::fs::File::create(out.join("results.jsonl"))?);
    for r in records {
        serde_json::to_writer(&mut f, r)?;
        f.write_all(b"\n")?;
    }
    f.flush()?;
    std::fs::write(out.join("meta.json"), serde_json::to_vec_pretty(metas)?)?;
    Ok(())
}

fn finish(out: &Path, records: &[Record], metas: &[RunMeta]) -> anyhow::Result<()> {
    write_results(out, records, metas)?;
    let files =
        onionmix_measure::report::write_report(records, metas, out).map_err(anyhow::Error::msg)?;
    let failed = records.iter().filter(|r| !r.ok()).count();
    eprintln!(
        "{} records ({failed} failed or timed out); wrote {}/results.jsonl, meta.json and {} report files",
        records.len(),
        out.display(),
        files.len()
    );
    if let Ok(s) = std::fs::read_to_string(out.join("summary.md")) {
        println!("{s}");
    }
    Ok(())
}

pub fn run_measure(a: MeasureArgs) -> anyhow::Result<()> {
    let cfg = workload_config(&a.workload, a.runs, a.duration)?;
    let info = NetworkInfo::load(&a.dir).map_err(anyhow::Error::msg)?;
    let special = cfg.hops.is_some() || cfg.paths.iter().any(|p| p != "socks");
    if special && a.client.as_deref() == Some("all") {
        anyhow::bail!("hops and the tunnel path measure one client: name it with --client");
    }
    if !cfg.circuits.is_empty() && a.client.as_deref() != Some("all") {
        anyhow::bail!("circuits gives each client a path: measure them with --client all");
    }
    let mut _tunnel = None;
    let eps: Vec<Endpoint> = if a.client.as_deref() == Some("all") {
        info.clients(None)
            .iter()
            .map(|c| endpoint(&info, Some(&c.name), &cfg))
            .collect::<anyhow::Result<_>>()?
    } else if special {
        let base = endpoint(&info, a.client.as_deref(), &cfg)?;
        let pid = base.cpu.first().map_or(0, |(_, p)| *p);
        let (eps, t) = crate::measure_paths::endpoints(&cfg, base, &info, pid)?;
        _tunnel = t;
        eps
    } else {
        vec![endpoint(&info, a.client.as_deref(), &cfg)?]
    };
    if eps.is_empty() {
        anyhow::bail!("the network has no client");
    }
    check_endpoints(&cfg, &eps)?;
    let concurrent = a.concurrent || cfg.workload == "reliability";
    let groups: Vec<std::ops::Range<usize>> = if concurrent {
        std::iter::once(0..eps.len()).collect()
    } else {
        (0..eps.len()).map(|i| i..i + 1).collect()
    };
    let pins = crate::measure_paths::client_circuits(&cfg, &info, eps.len())?;
    let before = socket_drops(&info);
    let mut m = meta(&cfg, vec![info.spec.clone()]);
    let records = crate::measure_paths::with_pinned(&cfg, &info, eps[0].control.as_ref(), || {
        run_all(&cfg, &eps, &pins, &groups, &eps[0].label)
    })?;
    drop(_tunnel);
    m.socket_drops
        .insert(info.spec.clone(), socket_drops(&info).since(before));
    finish(&a.out, &records, &[m])
}

/// Refuse a workload the endpoints cannot serve, before anything runs.
fn check_endpoints(cfg: &WorkloadConfig, eps: &[Endpoint]) -> anyhow::Result<()> {
    if cfg.workload == "session"
        && cfg.https
        && let Some(ep) = eps.iter().find(|e| e.https.is_none() || e.tls_ca.is_none())
    {
        anyhow::bail!(
            "https = true, but the sink of {} serves no HTTPS (start the network with this onionmix)",
            ep.label
        );
    }
    Ok(())
}

/// Runs `cfg` on every endpoint, run by run (A, B, A, B, ... so machine
/// noise hits all alike): `groups` (ranges of `eps`, in order, covering
/// them all) take turns, and the endpoints of one group run at the same
/// time. Adds the no-anonymisation baseline for `goodput` and `session`
/// and the clients' circuit build times. Returns every record.
fn run_all(
    cfg: &WorkloadConfig,
    eps: &[Endpoint],
    pins: &[Option<Vec<String>>],
    groups: &[std::ops::Range<usize>],
    title: &str,
) -> anyhow::Result<Vec<Record>> {
    anyhow::ensure!(pins.len() == eps.len(), "one circuit pin per endpoint");
    let baseline = (matches!(cfg.workload.as_str(), "goodput" | "session") && cfg.baseline)
        .then(|| eps.first().map(Endpoint::baseline))
        .flatten();
    let n_eps = eps.len() as u64 + u64::from(baseline.is_some());
    let rt = tokio::runtime::Runtime::new()?;
    let pb = progress(n_eps * cfg.runs as u64 * events_per_run(cfg), title);
    let mut records = Vec::new();
    let mut attached = 0u64;
    rt.block_on(async {
        // Stock tor clients: circuit build times from CIRC events.
        let mut watches = Vec::new();
        // (onionmix clients report theirs in status.json.)
        // (A tunnel series shares its client's: not watched twice.)
        for ep in eps
            .iter()
            .filter(|e| e.status_json.is_none() && e.tunnel.is_none())
        {
            if let Some((addr, cookie)) = &ep.control {
                match onionmix_testbed::torctl::watch_circuits(
                    *addr,
                    cookie,
                    std::time::Duration::from_secs(10),
                )
                .await
                {
                    Ok(w) => watches.push((ep, w)),
                    Err(e) => eprintln!("{}: no circuit build times: {e}", ep.label),
                }
            }
        }
        let tick = || pb.inc(1);
        for run in 0..cfg.runs {
            for g in groups {
                let pinned = pin_circuits(&eps[g.clone()], &pins[g.clone()]).await;
                let group = eps[g.clone()]
                    .iter()
                    .zip(&pinned)
                    .map(|(ep, p)| async move {
                        match p {
                            Ok(_) => workload::run_once(cfg, ep, run, &tick).await,
                            Err(why) => {
                                eprintln!("{}: run {run}: {why}", ep.label);
                                tick();
                                workload::failed_run(cfg, ep, run, why)
                            }
                        }
                    });
                for r in futures::future::join_all(group).await {
                    records.extend(r);
                }
                for (ep, p) in eps[g.clone()].iter().zip(pinned) {
                    if let Ok(Some(p)) = p {
                        match p.finish().await {
                            Ok(n) => attached += n,
                            // The records say which streams failed.
                            Err(e) => {
                                eprintln!("{}: run {run}: the pinned circuit broke: {e}", ep.label)
                            }
                        }
                    }
                }
            }
            if let Some(b) = &baseline {
                records.extend(workload::run_once(cfg, b, run, &tick).await);
            }
        }
        for (ep, w) in watches {
            let seen = w.finish().await;
            if let Some(why) = &seen.ended_early {
                eprintln!(
                    "{}: circuit build times cover only part of the run (control port: {why})",
                    ep.label
                );
            }
            for t in seen.build_ms {
                let mut r = workload::circuit_record(cfg, ep, t);
                r.run = 0;
                records.push(r);
            }
        }
    });
    pb.finish_and_clear();
    if pins.iter().any(Option::is_some) {
        eprintln!("{attached} streams attached to pinned circuits");
    }
    for ep in eps {
        records.extend(workload::circuit_builds(cfg, ep));
    }
    Ok(records)
}

/// Build each endpoint's pinned circuit (workload `circuits`), all at
/// once; `Ok(None)` where nothing is pinned.
async fn pin_circuits(
    eps: &[Endpoint],
    pins: &[Option<Vec<String>>],
) -> Vec<Result<Option<onionmix_testbed::torctl::Pinned>, String>> {
    let futs = eps.iter().zip(pins).map(|(ep, path)| async move {
        let Some(path) = path else { return Ok(None) };
        let (addr, cookie) = ep
            .control
            .as_ref()
            .ok_or_else(|| "circuits: the client has no control port".to_string())?;
        onionmix_testbed::torctl::pin_streams(
            *addr,
            cookie,
            path,
            std::time::Duration::from_secs(120),
        )
        .await
        .map(Some)
        .map_err(|e| format!("pinning its circuit ({}): {e}", path.join(",")))
    });
    futures::future::join_all(futs).await
}

pub fn run_compare(a: CompareArgs) -> anyhow::Result<()> {
    if a.specs.len() < 2 {
        anyhow::bail!("give --spec at least twice (the networks to compare)");
    }
    let all = match a.client.as_deref() {
        None => false,
        Some("all") => true,
        Some(c) => anyhow::bail!("--client: `all` or nothing for compare, not {c:?}"),
    };
    if a.concurrent && !all {
        anyhow::bail!("--concurrent needs --client all");
    }
    // Every workload is checked before any network starts.
    let mut cfgs = Vec::new();
    for w in &a.workload {
        let cfg = workload_config(w, Some(a.runs), a.duration)?;
        if cfg.hops.is_some() || cfg.paths.iter().any(|p| p != "socks") {
            anyhow::bail!(
                "{w}: hops and the tunnel path are for `onionmix measure` (one running network)"
            );
        }
        if !cfg.circuits.is_empty() && !all {
            anyhow::bail!("{w}: circuits gives each client a path: compare with --client all");
        }
        cfgs.push(cfg);
    }
    let mut guards = Vec::new();
    let opts = LaunchOptions::new(std::env::current_exe()?);
    for (i, s) in a.specs.iter().enumerate() {
        let spec = Spec::load(s)?;
        let dir = a.out.join("nets").join(format!("{i}-{}", spec.name));
        eprintln!("starting {} in {}", spec.name, dir.display());
        let net = launcher::start(&spec, &dir, &opts)?;
        guards.push(NetworkGuard(Some(net)));
    }
    let mut records = Vec::new();
    let mut metas = Vec::new();
    for cfg in &cfgs {
        let mut eps = Vec::new();
        let mut pins = Vec::new();
        let mut groups = Vec::new();
        for (i, (s, guard)) in a.specs.iter().zip(&guards).enumerate() {
            let info = guard.info();
            let names: Vec<Option<String>> = if all {
                info.clients(None)
                    .iter()
                    .map(|c| Some(c.name.clone()))
                    .collect()
            } else {
                vec![None]
            };
            let first = eps.len();
            for name in names {
                let mut ep = endpoint(info, name.as_deref(), cfg)?;
                if all {
                    ep.label = format!("{}/all", info.spec);
                }
                if a.specs.iter().filter(|x| **x == *s).count() > 1 {
                    ep.label = format!("{}#{i}", ep.label);
                }
                eps.push(ep);
            }
            if eps.len() == first {
                anyhow::bail!("{} has no client", info.spec);
            }
            pins.extend(crate::measure_paths::client_circuits(
                cfg,
                info,
                eps.len() - first,
            )?);
            if a.concurrent {
                groups.push(first..eps.len());
            } else {
                groups.extend((first..eps.len()).map(|j| j..j + 1));
            }
        }
        check_endpoints(cfg, &eps)?;
        let before: Vec<SocketDrops> = guards.iter().map(|g| socket_drops(g.info())).collect();
        let mut m = meta(cfg, a.specs.clone());
        records.extend(run_all(cfg, &eps, &pins, &groups, "A, B, A, B...")?);
        for (g, b) in guards.iter().zip(before) {
            let d = socket_drops(g.info()).since(b);
            m.socket_drops.insert(g.info().spec.clone(), d);
        }
        metas.push(m);
    }
    drop(guards);
    finish(&a.out, &records, &metas)
}

pub fn run_report(a: ReportArgs) -> anyhow::Result<()> {
    if a.seed000 {
        return seed000_report(&a);
    }
    let mut records = Vec::new();
    let mut metas = Vec::new();
    for d in &a.dirs {
        let (r, m) = onionmix_measure::report::read_results(d).map_err(anyhow::Error::msg)?;
        records.extend(r);
        metas.extend(m);
    }
    let out = a.out.clone().unwrap_or_else(|| a.dirs[0].clone());
    std::fs::create_dir_all(&out)?;
    let files = onionmix_measure::report::write_report(&records, &metas, &out)
        .map_err(anyhow::Error::msg)?;
    eprintln!(
        "{} records from {} directories; wrote {} report files to {}",
        records.len(),
        a.dirs.len(),
        files.len(),
        out.display()
    );
    Ok(())
}

/// `report --seed000`: Tables 3-6 of seed 000 from one directory per
/// access profile and protocol.
fn seed000_report(a: &ReportArgs) -> anyhow::Result<()> {
    use onionmix_measure::report::{Seed000Cell, seed000_cell_of, seed000_report};
    let mut cells = Vec::new();
    for d in &a.dirs {
        let (records, metas) =
            onionmix_measure::report::read_results(d).map_err(anyhow::Error::msg)?;
        let (profile, https) = metas.iter().find_map(seed000_cell_of).ok_or_else(|| {
            anyhow::anyhow!(
                "{}: not a seed-000 cell (meta.json names no seed000-<profile> spec or no https parameter)",
                d.display()
            )
        })?;
        cells.push(Seed000Cell {
            profile,
            https,
            records,
        });
    }
    let out = a.out.clone().unwrap_or_else(|| a.dirs[0].clone());
    std::fs::create_dir_all(&out)?;
    let path = out.join("seed-000.md");
    let md = seed000_report(&cells);
    std::fs::write(&path, &md).with_context(|| format!("writing {}", path.display()))?;
    println!("{md}");
    eprintln!("wrote {}", path.display());
    Ok(())
}
