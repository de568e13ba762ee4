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
    #[arg(long, default_value = "tor-basic-onionmix-client")]
    spec: String,
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

async fn one(proxy: SocketAddr, sink: SocketAddr, n: u64) -> Result<(Duration, Duration), String> {
    let t0 = Instant::now();
    let mut s = socks::connect(proxy, &Target::Addr(sink), None, Duration::from_secs(60))
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

pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    let spec = Spec::load(&a.spec)?;
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
        Some(d) => d.clone(),
        None => tempfile_dir()?,
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
                (format!("{} ({imp})", c.name), s)
            })
        })
        .collect();
    if clients.is_empty() {
        anyhow::bail!("the spec has no clients");
    }
    // onionmix clients first, so ratios read "onionmix / stock tor".
    clients.sort_by_key(|(n, _)| !n.contains("onionmix"));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let result: anyhow::Result<Vec<Sample>> = rt.block_on(async {
        let mut samples = Vec::new();
        let mut failures = 0usize;
        eprintln!(
            "network ready in {:.1}s; {} runs x {} sizes x {} clients",
            info.bootstrap_secs,
            a.runs,
            a.sizes.len(),
            clients.len()
        );
        // One warm-up request per client (circuit construction).
        for (_, proxy) in &clients {
            let _ = one(*proxy, sink, 1000).await;
        }
        for run in 0..a.runs {
            for &size in &a.sizes {
                for (name, proxy) in &clients {
                    tokio::select! {
                        r = one(*proxy, sink, size) => match r {
                            Ok((ttfb, ttlb)) => samples.push(Sample { client: name.clone(), size, ttfb, ttlb }),
                            Err(e) => {
                                failures += 1;
                                eprintln!("run {run}: {name}: {size} bytes failed: {e}");
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
    let samples = result?;
    println!(
        "\n{:<26} {:>9} {:>5} {:>12} {:>12} {:>10}",
        "client", "size", "runs", "median TTFB", "median TTLB", "Mbit/s"
    );
    for (name, _) in &clients {
        for &size in &a.sizes {
            let s: Vec<&Sample> = samples
                .iter()
                .filter(|x| &x.client == name && x.size == size)
                .collect();
            let ttfb = median(s.iter().map(|x| x.ttfb.as_secs_f64() * 1e3).collect());
            let ttlb = median(s.iter().map(|x| x.ttlb.as_secs_f64() * 1e3).collect());
            let mbit = size as f64 * 8.0 / (ttlb / 1e3) / 1e6;
            println!(
                "{:<26} {:>9} {:>5} {:>10.1}ms {:>10.1}ms {:>10.1}",
                name,
                human(size),
                s.len(),
                ttfb,
                ttlb,
                mbit
            );
        }
    }
    if clients.len() == 2 {
        println!("\nratio {} / {}:", clients[0].0, clients[1].0);
        for &size in &a.sizes {
            let m = |c: &str, f: &dyn Fn(&Sample) -> f64| {
                median(
                    samples
                        .iter()
                        .filter(|x| x.client == c && x.size == size)
                        .map(f)
                        .collect(),
                )
            };
            let ttfb = |x: &Sample| x.ttfb.as_secs_f64();
            let ttlb = |x: &Sample| x.ttlb.as_secs_f64();
            println!(
                "  {:>9}: TTFB x{:.2}, TTLB x{:.2}",
                human(size),
                m(&clients[0].0, &ttfb) / m(&clients[1].0, &ttfb),
                m(&clients[0].0, &ttlb) / m(&clients[1].0, &ttlb)
            );
        }
    }
    if a.keep {
        eprintln!(
            "network left running; stop it with: onionmix testnet stop --dir {}",
            dir.display()
        );
        if let Some(n) = guard.into_inner() {
            n.detach();
        }
    } else {
        drop(guard);
        if made_dir {
            let _ = std::fs::remove_dir_all(&dir);
        }
        eprintln!("network stopped");
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
