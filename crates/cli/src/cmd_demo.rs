//! `onionmix demo`: the README's main job. Starts a private network, carries
//! verified downloads from the sink through every client (alternating
//! clients run by run, so machine noise hits them alike), prints a timing
//! table, and stops the network (also on Ctrl-C or error).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;

use onionmix_testbed::http;
use onionmix_testbed::launcher::{self, LaunchOptions, NetworkGuard};
use onionmix_testbed::socks::{self, Target};
use onionmix_testbed::spec::{Implementation, Spec};

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Network spec (built-in name or TOML file).
    #[arg(long, default_value = "onionmix-basic")]
    spec: String,
    /// A second network to measure after the first, in the same way
    /// (e.g. `stock-basic`, stock tor with onionmix-basic's topology);
    /// prints both and the ratio of their clients.
    #[arg(long)]
    compare: Option<String>,
    /// State directory for the network (default: a temporary directory).
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Measured runs per client and size.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Download sizes in bytes.
    #[arg(long, value_delimiter = ',', default_values_t = [51_200u64, 1_048_576, 5_242_880])]
    sizes: Vec<u64>,
    /// Leave the network running afterwards.
    #[arg(long)]
    keep: bool,
}

struct Sample {
    client: String,
    size: u64,
    ttfb: Duration,
    ttlb: Duration,
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

async fn one(
    proxy: SocketAddr,
    sink: SocketAddr,
    n: u64,
    auth: Option<(&str, &str)>,
) -> Result<(Duration, Duration), String> {
    let t0 = Instant::now();
    let mut s = socks::connect(proxy, &Target::Addr(sink), auth, Duration::from_secs(60))
        .await
        .map_err(|e| e.to_string())?;
    let r = tokio::time::timeout(
        Duration::from_secs(300),
        http::get(&mut s, &sink.to_string(), &format!("/bytes/{n}"), t0),
    )
    .await
    .map_err(|_| "timed out".to_string())?
    .map_err(|e| e.to_string())?;
    if r.status != 200 || !r.sha256_ok() {
        return Err(format!(
            "bad response (status {}, SHA-256 ok: {})",
            r.status,
            r.sha256_ok()
        ));
    }
    Ok((r.first_byte, r.last_byte))
}

/// Label of a fresh-circuit sample (its `size` field).
const NEW_CIRCUIT: u64 = 0;

/// Start `spec_name`, measure every client, stop (unless `keep`).
fn measure(a: &DemoArgs, spec_name: &str, keep: bool) -> anyhow::Result<Vec<Sample>> {
    let spec = Spec::load(spec_name)?;
    let needs_tor = spec
        .nodes
        .iter()
        .any(|g| g.implementation == Implementation::Tor);
    if needs_tor
        && std::process::Command::new("tor")
            .arg("--version")
            .output()
            .is_err()
    {
        anyhow::bail!(
            "the {} network uses stock tor nodes, but `tor` is not installed (apt-get install -y tor)",
            spec.name
        );
    }
    let made_dir = a.dir.is_none();
    let dir = match &a.dir {
        Some(d) => d.join(&spec.name),
        None => tempfile_dir()?.join(&spec.name),
    };
    eprintln!("starting the {} network in {}", spec.name, dir.display());
    let opts = LaunchOptions::new(std::env::current_exe()?);
    let net = launcher::start(&spec, &dir, &opts)?;
    let guard = NetworkGuard(Some(net));
    let info = guard.info().clone();
    let sink = info
        .sink
        .as_ref()
        .ok_or_else(|| anyhow::anyhow!("the spec has no sink"))?
        .http;
    let mut clients: Vec<(String, SocketAddr)> = info
        .clients(None)
        .iter()
        .filter_map(|c| {
            c.socks_addr().map(|s| {
                let imp = format!("{:?}", c.implementation).to_lowercase();
                (format!("{} ({imp}) @ {}", c.name, spec.name), s)
            })
        })
        .collect();
    if clients.is_empty() {
        anyhow::bail!("the spec has no clients");
    }
    // onionmix clients first, so ratios read "onionmix / stock tor".
    clients.sort_by_key(|(n, _)| !n.contains("(onionmix)"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result: anyhow::Result<Vec<Sample>> = rt.block_on(async {
        let mut samples = Vec::new();
        let mut failures = 0usize;
        eprintln!(
            "network ready in {:.1}s; {} runs x {} sizes (+1 new circuit) x {} clients",
            info.bootstrap_secs,
            a.runs,
            a.sizes.len(),
            clients.len()
        );
        // One warm-up request per client (circuit construction).
        for (_, proxy) in &clients {
            let _ = one(*proxy, sink, 1000, None).await;
        }
        for run in 0..a.runs {
            let user = format!("demo-run-{run}");
            for &size in std::iter::once(&NEW_CIRCUIT).chain(a.sizes.iter()) {
                for (name, proxy) in &clients {
                    // A fresh SOCKS username isolates the request onto a
                    // new circuit: its TTFB includes the 3-hop build.
                    let (n, auth) = if size == NEW_CIRCUIT {
                        (1000, Some((user.as_str(), "x")))
                    } else {
                        (size, None)
                    };
                    tokio::select! {
                        r = one(*proxy, sink, n, auth) => match r {
                            Ok((ttfb, ttlb)) => samples.push(Sample { client: name.clone(), size, ttfb, ttlb }),
                            Err(e) => {
                                failures += 1;
                                eprintln!("run {run}: {name}: {n} bytes failed: {e}");
                            }
                        },
                        _ = tokio::signal::ctrl_c() => anyhow::bail!("interrupted"),
                    }
                }
            }
        }
        if failures > 0 {
            eprintln!("{failures} transfers failed");
        }
        Ok(samples)
    });
    // Circuit build times our clients measured themselves (CREATE2 sent to
    // last EXTENDED2 received), from their status files.
    for c in info.clients(Some(Implementation::Onionmix)) {
        let text = std::fs::read_to_string(c.data_dir.join("status.json")).unwrap_or_default();
        let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
        let times: Vec<f64> = v["recent_build_times_ms"]
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
            .unwrap_or_default();
        if !times.is_empty() {
            println!(
                "{} @ {}: 3-hop circuit build, median {:.1} ms over the last {} circuits",
                c.name,
                spec.name,
                median(times.clone()),
                times.len()
            );
        }
    }
    if keep {
        eprintln!(
            "network left running; stop it with: onionmix testnet stop --dir {}",
            dir.display()
        );
        if let Some(n) = guard.into_inner() {
            n.detach();
        }
    } else {
        drop(guard);
        // Stock tor saves its circuit build time histogram (10 ms bins) in
        // its state file on exit.
        for c in info.clients(Some(Implementation::Tor)) {
            let text = std::fs::read_to_string(c.data_dir.join("state")).unwrap_or_default();
            let mut times = Vec::new();
            for l in text.lines() {
                let f: Vec<&str> = l.split_whitespace().collect();
                if let ["CircuitBuildTimeBin", ms, n] = f[..]
                    && let (Ok(ms), Ok(n)) = (ms.parse::<f64>(), n.parse::<usize>())
                {
                    times.extend(std::iter::repeat_n(ms, n.min(10_000)));
                }
            }
            if !times.is_empty() {
                println!(
                    "{} @ {}: 3-hop circuit build, median {:.0} ms (10 ms bins) over {} circuits (tor's state file)",
                    c.name,
                    spec.name,
                    median(times.clone()),
                    times.len()
                );
            }
        }
        if made_dir {
            let _ = std::fs::remove_dir_all(&dir);
        }
        eprintln!("network {} stopped", spec.name);
    }
    result
}

pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    if a.keep && a.compare.is_some() {
        anyhow::bail!("--keep and --compare do not go together");
    }
    let mut samples = measure(&a, &a.spec, a.keep)?;
    if let Some(other) = &a.compare {
        samples.extend(measure(&a, other, false)?);
    }
    let mut labels: Vec<String> = Vec::new();
    for s in &samples {
        if !labels.contains(&s.client) {
            labels.push(s.client.clone());
        }
    }
    let mut sizes = vec![NEW_CIRCUIT];
    sizes.extend(a.sizes.iter().copied());
    let med = |c: &str, size: u64, f: &dyn Fn(&Sample) -> f64| {
        median(
            samples
                .iter()
                .filter(|x| x.client == c && x.size == size)
                .map(f)
                .collect(),
        )
    };
    let ttfb = |x: &Sample| x.ttfb.as_secs_f64() * 1e3;
    let ttlb = |x: &Sample| x.ttlb.as_secs_f64() * 1e3;
    println!(
        "\n{:<44} {:>11} {:>5} {:>12} {:>12} {:>10}",
        "client", "size", "runs", "median TTFB", "median TTLB", "Mbit/s"
    );
    for name in &labels {
        for &size in &sizes {
            let n = samples
                .iter()
                .filter(|x| &x.client == name && x.size == size)
                .count();
            let (fb, lb) = (med(name, size, &ttfb), med(name, size, &ttlb));
            if size == NEW_CIRCUIT {
                println!(
                    "{:<44} {:>11} {:>5} {:>10.1}ms {:>10.1}ms {:>10}",
                    name, "new circuit", n, fb, lb, "-"
                );
            } else {
                let mbit = size as f64 * 8.0 / (lb / 1e3) / 1e6;
                println!(
                    "{:<44} {:>11} {:>5} {:>10.1}ms {:>10.1}ms {:>10.1}",
                    name,
                    human(size),
                    n,
                    fb,
                    lb,
                    mbit
                );
            }
        }
    }
    if labels.len() == 2 {
        println!("\nratio {} / {}:", labels[0], labels[1]);
        for &size in &sizes {
            let what = if size == NEW_CIRCUIT {
                "new circuit".to_string()
            } else {
                human(size)
            };
            println!(
                "  {:>11}: TTFB x{:.2}, TTLB x{:.2}",
                what,
                med(&labels[0], size, &ttfb) / med(&labels[1], size, &ttfb),
                med(&labels[0], size, &ttlb) / med(&labels[1], size, &ttlb)
            );
        }
    }
    Ok(())
}

fn human(n: u64) -> String {
    if n >= 1 << 20 {
        format!("{} MiB", n >> 20)
    } else if n >= 1024 {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let base = std::env::temp_dir().join(format!("onionmix-demo-{}", std::process::id()));
    std::fs::create_dir_all(&base)?;
    Ok(base)
}
