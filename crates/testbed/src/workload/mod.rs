//! Measurement workloads (docs/measure.md): traffic through a client's
//! SOCKS port to the sink, one [`Record`] per measured event.
//!
//! | workload | seed | what is measured |
//! |---|---|---|
//! | `bulk` | OnionPerf / Tor Metrics | 50 KiB, 1 MiB, 5 MiB downloads, each on a fresh circuit: TTFB, TTLB, throughput between 0.5 and 1 MiB |
//! | `voip` | 001 (RTT pinger) | fixed-size timestamped packets at a fixed rate to the echo port: per-packet RTT, share under 150/300 ms |
//! | `session` | 000 (IRMA sessions) | a scripted sequence of request/response messages: per-message and whole-session latency |
//! | `goodput` | 002 | continuous download on 1 or more streams for a time after a warm-up: Mbit/s |
//! | `reliability` | 001 | small page fetches at an interval: error share |
//! | `access` | 001 (access time) | warm client on a new circuit vs a reused circuit: TTFB |
//!
//! `target = "onion:<name>"` sends a workload's traffic to one of the
//! network's onion services (network.json `onion_services`) instead of
//! the sink's own address: the service's virtual ports lead to the sink.

mod config;
mod conn;
mod fresh;
mod goodput;
mod session;
#[cfg(test)]
mod tests;
mod voip;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use onionmix_measure::record::{BASELINE_LABEL, Record};

pub use config::{Message, WORKLOADS, WorkloadConfig, parse_hop, seed000_script};
pub use fresh::{FreshClient, FreshPlace};

use conn::fetch;
use fresh::fresh_client_access;
use goodput::goodput;
use session::session;
use voip::voip;

/// Where a workload sends its traffic.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Series label (`<spec>/<client>`).
    pub label: String,
    /// The client's SOCKS address.
    pub socks: SocketAddr,
    /// The sink's HTTP address.
    pub http: SocketAddr,
    /// The sink's echo address.
    pub echo: SocketAddr,
    /// The sink's HTTPS (TLS 1.3) address, when it serves one.
    pub https: Option<SocketAddr>,
    /// PEM of the CA that issued the sink's HTTPS certificate.
    pub tls_ca: Option<PathBuf>,
    /// Straight to the sink, no SOCKS (the no-anonymisation baseline).
    pub direct: bool,
    /// On an emulated network: the measured client's namespace. Direct
    /// connections leave from there, so the baseline crosses the client's
    /// access links and the core link to the sink like the client's own
    /// traffic (from the root namespace they would cross no link).
    pub netns: Option<String>,
    /// The client's status file (onionmix clients), for circuit build times.
    pub status_json: Option<PathBuf>,
    /// How to start a fresh copy of the client (`access`'s fresh-client
    /// measurement); `None` skips it.
    pub fresh: Option<FreshClient>,
    /// The client's control port and cookie file (stock tor and
    /// onionmix): `SIGNAL NEWNYM` for `session`'s `newnym`, and for stock
    /// tor circuit build times from CIRC events.
    pub control: Option<(SocketAddr, PathBuf)>,
    /// Reach the sink through this onion service (`target = "onion:..."`).
    pub onion: Option<OnionTarget>,
    /// Reach the sink through the transparent tunnel instead of SOCKS.
    pub tunnel: Option<TunnelVia>,
    /// Processes whose CPU time `goodput` records over its measured
    /// window (name, pid): the client, the tunnel.
    pub cpu: Vec<(String, u32)>,
}

/// The transparent tunnel in front of the client: connections are made
/// inside `netns` to `host` as the tunnel's resolver answers for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TunnelVia {
    /// The tunnel's namespace.
    pub netns: String,
    /// Its resolver (UDP port 53).
    pub resolver: SocketAddr,
    /// The sink's name (resolved by the exits).
    pub host: String,
}

/// An onion service in front of the sink.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnionTarget {
    /// `<56 characters>.onion`.
    pub address: String,
    /// Virtual port of the sink's HTTP server.
    pub http_port: u16,
    /// Virtual port of the sink's echo server.
    pub echo_port: u16,
}

impl Endpoint {
    /// The no-anonymisation baseline next to `self`: the same sink,
    /// reached directly (series [`BASELINE_LABEL`]).
    pub fn baseline(&self) -> Endpoint {
        Endpoint {
            label: BASELINE_LABEL.into(),
            direct: true,
            status_json: None,
            fresh: None,
            control: None,
            onion: None,
            tunnel: None,
            cpu: Vec::new(),
            ..self.clone()
        }
    }
}

fn now_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn record(cfg: &WorkloadConfig, ep: &Endpoint, run: u32, kind: &str, size: Option<u64>) -> Record {
    Record {
        workload: cfg.workload.clone(),
        label: ep.label.clone(),
        run,
        kind: kind.into(),
        size,
        start_unix_ms: now_ms(),
        metrics: Default::default(),
        error: None,
    }
}

/// A SOCKS username that isolates `tag`'s streams onto their own circuit.
fn isolation(tag: &str) -> String {
    format!("om-measure-{tag}-{}", rand::random::<u32>())
}

/// Run `cfg` once (`run`) against `ep`. `tick` is called after each event.
pub async fn run_once(
    cfg: &WorkloadConfig,
    ep: &Endpoint,
    run: u32,
    tick: &(dyn Fn() + Sync),
) -> Vec<Record> {
    let timeout = Duration::from_secs_f64(cfg.timeout_secs);
    let mut out = Vec::new();
    match cfg.workload.as_str() {
        "bulk" => {
            for &size in &cfg.sizes {
                let user = cfg.fresh_circuit.then(|| isolation("bulk"));
                let mut r = record(cfg, ep, run, "transfer", Some(size));
                fetch_page(cfg, ep, user.as_deref(), size, timeout, &mut r).await;
                out.push(r);
                tick();
            }
        }
        "voip" => {
            out.extend(voip(cfg, ep, run, timeout).await);
            tick();
        }
        "session" => {
            out.extend(session(cfg, ep, run, timeout, tick).await);
        }
        "goodput" => {
            for &n in &cfg.streams {
                out.push(goodput(cfg, ep, run, n, timeout).await);
            }
            tick();
        }
        "reliability" => {
            // `parallel` fetchers at once, fetcher i always on circuit i
            // (`parallel = 1`: the client's default circuit).
            let futs: Vec<_> = (0..cfg.parallel)
                .map(|i| async move {
                    let user = (cfg.parallel > 1).then(|| format!("om-reliability-{i}"));
                    let mut r = record(cfg, ep, run, "transfer", Some(cfg.page_bytes));
                    r.metrics.insert("fetcher".into(), i as f64);
                    fetch_page(cfg, ep, user.as_deref(), cfg.page_bytes, timeout, &mut r).await;
                    r
                })
                .collect();
            out.extend(futures_join_all(futs).await);
            tick();
            tokio::time::sleep(Duration::from_millis(cfg.interval_ms)).await;
        }
        "access" => {
            // A fresh client process: bootstrap + first circuit + fetch.
            if let Some(f) = &ep.fresh {
                out.push(fresh_client_access(cfg, ep, f, run, timeout).await);
            }
            // Warm client, new circuit (a fresh isolation username), then
            // the same circuit again.
            let user = isolation("access");
            for kind in ["new-circuit", "reused-circuit"] {
                let mut r = record(cfg, ep, run, kind, Some(1000));
                fetch_page(cfg, ep, Some(&user), 1000, timeout, &mut r).await;
                out.push(r);
            }
            tick();
        }
        _ => {}
    }
    out
}

/// The records of a run that could not start (`why`: its pinned circuit
/// was not built): one failed transfer per `bulk` size, one failed event
/// otherwise, so the failure counts against the series.
pub fn failed_run(cfg: &WorkloadConfig, ep: &Endpoint, run: u32, why: &str) -> Vec<Record> {
    let sizes: Vec<Option<u64>> = if cfg.workload == "bulk" {
        cfg.sizes.iter().map(|s| Some(*s)).collect()
    } else {
        vec![None]
    };
    sizes
        .into_iter()
        .map(|size| {
            let mut r = record(cfg, ep, run, "transfer", size);
            r.error = Some(why.to_string());
            r
        })
        .collect()
}

/// One unpadded `GET /bytes/<n>` on a new connection, with the SOCKS
/// behaviour `cfg` asks for (see [`fetch`]).
async fn fetch_page(
    cfg: &WorkloadConfig,
    ep: &Endpoint,
    user: Option<&str>,
    n: u64,
    timeout: Duration,
    r: &mut Record,
) {
    fetch(ep, user, n, 0, cfg.optimistic_socks, timeout, r).await
}

/// Circuit build times the client reported (onionmix clients:
/// `recent_build_times_ms` in `status.json`), as `circuit` records.
pub fn circuit_builds(cfg: &WorkloadConfig, ep: &Endpoint) -> Vec<Record> {
    let Some(p) = &ep.status_json else {
        return Vec::new();
    };
    let text = std::fs::read_to_string(p).unwrap_or_default();
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    v["recent_build_times_ms"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|x| x.as_f64())
        .map(|t| circuit_record(cfg, ep, t))
        .collect()
}

/// A `circuit` record: one circuit built in `build_ms`.
pub fn circuit_record(cfg: &WorkloadConfig, ep: &Endpoint, build_ms: f64) -> Record {
    let mut r = record(cfg, ep, 0, "circuit", None);
    r.metrics.insert("circuit_build_ms".into(), build_ms);
    r
}

/// Await futures concurrently (no extra dependency).
async fn futures_join_all<F: std::future::Future>(futs: Vec<F>) -> Vec<F::Output> {
    let mut set: Vec<std::pin::Pin<Box<F>>> = futs.into_iter().map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = (0..set.len()).map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in set.iter_mut().enumerate() {
            if out[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => out[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}
