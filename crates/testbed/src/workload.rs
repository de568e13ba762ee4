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

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use onionmix_measure::record::{BASELINE_LABEL, Record};

use crate::socks::{self, Target};

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
    /// The client's status file (onionmix clients), for circuit build times.
    pub status_json: Option<PathBuf>,
    /// How to start a fresh copy of the client (`access`'s fresh-client
    /// measurement); `None` skips it.
    pub fresh: Option<FreshClient>,
    /// A stock tor client's control port and cookie file, for circuit
    /// build times from CIRC events.
    pub control: Option<(SocketAddr, PathBuf)>,
    /// Reach the sink through this onion service (`target = "onion:..."`).
    pub onion: Option<OnionTarget>,
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
            ..self.clone()
        }
    }
}

/// A fresh client like the measured one: same network configuration, new
/// data directory (no cached directory, no guards) and SOCKS port.
#[derive(Debug, Clone)]
pub enum FreshClient {
    /// `onionmix client --config`, from the measured client's config.
    Onionmix {
        /// The onionmix binary.
        bin: PathBuf,
        /// The measured client's `client.toml`.
        config: PathBuf,
        /// Where fresh clients' data directories go.
        work_dir: PathBuf,
        /// Run it where the measured client runs (emulated networks).
        place: Option<FreshPlace>,
    },
    /// Stock `tor -f`, from the measured client's torrc.
    Tor {
        /// The tor binary.
        bin: PathBuf,
        /// The measured client's `torrc`.
        torrc: PathBuf,
        /// Where fresh clients' data directories go.
        work_dir: PathBuf,
        /// Run it where the measured client runs (emulated networks).
        place: Option<FreshPlace>,
    },
}

/// The measured client's network namespace and address: a fresh client
/// started there reaches the network over the same emulated link.
#[derive(Debug, Clone)]
pub struct FreshPlace {
    /// Namespace name (`ip netns exec`).
    pub namespace: String,
    /// The client's address in it (the fresh SOCKS port listens there).
    pub address: std::net::IpAddr,
}

/// A started fresh client, killed (by its pid) and its data removed on drop.
struct Fresh {
    child: std::process::Child,
    data: PathBuf,
    socks: SocketAddr,
}

impl Drop for Fresh {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

fn start_fresh(f: &FreshClient, run: u32) -> Result<Fresh, String> {
    let port = crate::proc::free_port("127.0.0.1").map_err(|e| e.to_string())?;
    let (work_dir, place) = match f {
        FreshClient::Onionmix {
            work_dir, place, ..
        }
        | FreshClient::Tor {
            work_dir, place, ..
        } => (work_dir, place.as_ref()),
    };
    // In the measured client's namespace, its address (nothing else
    // listens on it but that client's own ports); otherwise loopback.
    let socks = match place {
        Some(p) => SocketAddr::new(p.address, port),
        None => SocketAddr::from(([127, 0, 0, 1], port)),
    };
    let tag = format!("fresh-{run}-{port}");
    let program = |bin: &PathBuf| match place {
        Some(p) => onionmix_emu::netns::command_in(&p.namespace, bin),
        None => std::process::Command::new(bin),
    };
    let data = work_dir.join(tag);
    std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700));
    }
    let cmd = match f {
        FreshClient::Onionmix { bin, config, .. } => {
            let base = std::fs::read_to_string(config).map_err(|e| e.to_string())?;
            let mut cfg = format!(
                "data_dir = {:?}\nsocks_listen = \"{socks}\"\n",
                data.display().to_string()
            );
            // The running client holds the control and metrics ports;
            // the fresh one runs without them.
            for l in base.lines() {
                if ![
                    "data_dir",
                    "socks_listen",
                    "control_port",
                    "control_socket",
                    "metrics_port",
                ]
                .iter()
                .any(|k| l.starts_with(k))
                {
                    cfg.push_str(l);
                    cfg.push('\n');
                }
            }
            let path = data.join("client.toml");
            std::fs::write(&path, cfg).map_err(|e| e.to_string())?;
            let mut c = program(bin);
            c.arg("client").arg("--config").arg(path);
            c
        }
        FreshClient::Tor { bin, torrc, .. } => {
            let base = std::fs::read_to_string(torrc).map_err(|e| e.to_string())?;
            let mut t = String::new();
            for l in base.lines() {
                if !l.starts_with("DataDirectory")
                    && !l.starts_with("SocksPort")
                    && !l.starts_with("Nickname")
                    && !l.starts_with("ControlPort")
                {
                    t.push_str(l);
                    t.push('\n');
                }
            }
            t.push_str(&format!(
                "DataDirectory {}\nSocksPort {socks}\n",
                data.display()
            ));
            let path = data.join("torrc");
            std::fs::write(&path, t).map_err(|e| e.to_string())?;
            let mut c = program(bin);
            c.arg("-f").arg(path);
            c
        }
    };
    let child = crate::proc::spawn(cmd, &data.join("client.log")).map_err(|e| e.to_string())?;
    Ok(Fresh { child, data, socks })
}

/// Start a fresh client and time spawn -> first byte of a 1000-byte fetch
/// (bootstrap, first circuit and the fetch; retried until `timeout`).
async fn fresh_client_access(
    cfg: &WorkloadConfig,
    ep: &Endpoint,
    f: &FreshClient,
    run: u32,
    timeout: Duration,
) -> Record {
    let mut r = record(cfg, ep, run, "fresh-client", Some(1000));
    let t0 = Instant::now();
    let fresh = match start_fresh(f, run) {
        Ok(x) => x,
        Err(e) => {
            r.error = Some(format!("cannot start a fresh client: {e}"));
            return r;
        }
    };
    let probe = Endpoint {
        socks: fresh.socks,
        fresh: None,
        ..ep.clone()
    };
    loop {
        let left = timeout.saturating_sub(t0.elapsed());
        if left.is_zero() {
            r.error = Some("timeout".into());
            break;
        }
        let mut attempt = record(cfg, ep, run, "fresh-client", Some(1000));
        fetch(
            &probe,
            None,
            1000,
            0,
            cfg.optimistic_socks,
            left.min(Duration::from_secs(20)),
            &mut attempt,
        )
        .await;
        if attempt.ok() {
            r.metrics.insert("ttfb_ms".into(), ms(t0.elapsed()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(fresh);
    r
}

/// One message of a `session` script.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Message {
    /// Name (table label).
    pub name: String,
    /// Request size in bytes (padded with a header).
    pub request_bytes: usize,
    /// Response body size in bytes.
    pub response_bytes: u64,
    /// Pause before the message, ms.
    #[serde(default)]
    pub think_ms: u64,
}

/// The built-in session script: seed 000's message pattern (new session,
/// get commitments, get proof, respond permission). The seed timed the
/// messages but did not publish their sizes; these are estimates of the
/// JSON bodies' order of magnitude.
pub fn seed000_script() -> Vec<Message> {
    let m = |name: &str, request_bytes, response_bytes, think_ms| Message {
        name: name.into(),
        request_bytes,
        response_bytes,
        think_ms,
    };
    vec![
        m("new-session", 400, 1500, 0),
        m("get-commitments", 300, 800, 200),
        m("get-proof", 500, 1200, 0),
        m("respond-permission", 2500, 300, 500),
    ]
}

/// Workload parameters (a TOML file may set any of them; the name alone
/// gives the defaults).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkloadConfig {
    /// `bulk`, `voip`, `session`, `goodput`, `reliability` or `access`.
    pub workload: String,
    /// Repetitions (transfers per size, streams, sessions, fetches).
    #[serde(default = "d_runs")]
    pub runs: u32,
    /// Timeout of one event, seconds.
    #[serde(default = "d_timeout")]
    pub timeout_secs: f64,
    /// `bulk` sizes in bytes.
    #[serde(default = "d_sizes")]
    pub sizes: Vec<u64>,
    /// `bulk`: a fresh circuit per transfer (OnionPerf does this).
    #[serde(default = "d_true")]
    pub fresh_circuit: bool,
    /// `voip`: packet size in bytes (>= 16).
    #[serde(default = "d_packet")]
    pub packet_bytes: usize,
    /// `voip`: packets per second.
    #[serde(default = "d_pps")]
    pub packets_per_sec: f64,
    /// `voip`/`goodput`: measured seconds per run.
    #[serde(default = "d_duration")]
    pub duration_secs: f64,
    /// `goodput`: parallel streams; a number or a list (each count is
    /// measured in every run; seed 002 used 1 and 3).
    #[serde(default = "d_streams", deserialize_with = "one_or_many")]
    pub streams: Vec<usize>,
    /// `goodput`: also measure the same download straight to the sink
    /// (series `none/direct`), the reference seed 002's percentages use.
    #[serde(default = "d_true")]
    pub baseline: bool,
    /// `goodput`: seconds before measuring.
    #[serde(default = "d_warmup")]
    pub warmup_secs: f64,
    /// `session`: the messages.
    #[serde(default = "seed000_script")]
    pub script: Vec<Message>,
    /// `session`: HTTPS (TLS 1.3 to the sink, which the client verifies
    /// against the sink's CA) instead of plain HTTP.
    #[serde(default)]
    pub https: bool,
    /// `session`: all messages of a session on one connection (HTTP
    /// keep-alive; the first message pays for the stream and the TLS
    /// handshake), or a new connection per message.
    #[serde(default = "d_true")]
    pub keep_alive: bool,
    /// `reliability`: fetch interval, ms.
    #[serde(default = "d_interval")]
    pub interval_ms: u64,
    /// `reliability`: page size.
    #[serde(default = "d_page")]
    pub page_bytes: u64,
    /// `reliability`: fetchers per client at once, each on its own
    /// circuit (many users behind one client).
    #[serde(default = "d_parallel")]
    pub parallel: usize,
    /// `bulk`, `session`, `reliability`, `access`: send the SOCKS request
    /// and the first application bytes (the HTTP request, the TLS
    /// ClientHello) in one go, without waiting for the SOCKS replies
    /// (optimistic SOCKS, as proposal 181 suggests clients do). The
    /// client's optimistic data then saves a round trip through the
    /// network. `connect_ms` is not recorded then (the stream opens under
    /// the first exchange). Off by default: like most applications, the
    /// measuring client waits for the SOCKS reply.
    #[serde(default)]
    pub optimistic_socks: bool,
    /// Where the traffic goes: `"sink"` (default, the sink's address),
    /// `"onion:<name>"`, the onion service `<name>` of the network (its
    /// virtual ports lead to the sink), or `"onion"`, the network's first
    /// onion service (for `compare` across specs whose services differ in
    /// name).
    #[serde(default)]
    pub target: Option<String>,
}

/// `streams = 3` or `streams = [1, 3]`.
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<usize>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum OneOrMany {
        One(usize),
        Many(Vec<usize>),
    }
    Ok(match OneOrMany::deserialize(d)? {
        OneOrMany::One(n) => vec![n],
        OneOrMany::Many(v) => v,
    })
}

fn d_runs() -> u32 {
    10
}
fn d_timeout() -> f64 {
    60.0
}
fn d_sizes() -> Vec<u64> {
    vec![50 * 1024, 1 << 20, 5 << 20]
}
fn d_true() -> bool {
    true
}
fn d_packet() -> usize {
    300
}
fn d_pps() -> f64 {
    10.0
}
fn d_duration() -> f64 {
    10.0
}
fn d_streams() -> Vec<usize> {
    vec![1, 3]
}
fn d_parallel() -> usize {
    1
}
fn d_warmup() -> f64 {
    2.0
}
fn d_interval() -> u64 {
    500
}
fn d_page() -> u64 {
    10 * 1024
}

/// The workloads there are.
pub const WORKLOADS: &[&str] = &[
    "bulk",
    "voip",
    "session",
    "goodput",
    "reliability",
    "access",
];

impl WorkloadConfig {
    /// Defaults for a built-in workload name.
    pub fn named(name: &str) -> Result<Self, String> {
        Self::parse(&format!("workload = {name:?}\n"))
    }

    /// A built-in name or a TOML file.
    pub fn load(name_or_path: &str) -> Result<Self, String> {
        if WORKLOADS.contains(&name_or_path) {
            return Self::named(name_or_path);
        }
        let text = std::fs::read_to_string(name_or_path).map_err(|e| {
            format!(
                "{name_or_path:?} is neither a workload ({}) nor a readable file: {e}",
                WORKLOADS.join(", ")
            )
        })?;
        Self::parse(&text).map_err(|e| format!("{name_or_path}: {e}"))
    }

    /// Parse and validate TOML.
    pub fn parse(text: &str) -> Result<Self, String> {
        let c: WorkloadConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        if !WORKLOADS.contains(&c.workload.as_str()) {
            return Err(format!(
                "unknown workload {:?} (one of {})",
                c.workload,
                WORKLOADS.join(", ")
            ));
        }
        let bad = |w: &str| Err(format!("invalid {w}"));
        if c.runs == 0 || c.runs > 100_000 {
            return bad("runs (1-100000)");
        }
        if !(c.timeout_secs > 0.0 && c.timeout_secs <= 3600.0) {
            return bad("timeout_secs (0-3600]");
        }
        if c.sizes.is_empty()
            || c.sizes
                .iter()
                .any(|s| *s == 0 || *s > crate::sink::MAX_BYTES)
        {
            return bad("sizes (1 byte to 1 GiB each)");
        }
        if !(16..=65536).contains(&c.packet_bytes) {
            return bad("packet_bytes (16-65536)");
        }
        if !(c.packets_per_sec > 0.0 && c.packets_per_sec <= 1000.0) {
            return bad("packets_per_sec (0-1000]");
        }
        if !(c.duration_secs > 0.0 && c.duration_secs <= 86400.0) {
            return bad("duration_secs (0-86400]");
        }
        if c.streams.is_empty()
            || c.streams.len() > 8
            || c.streams.iter().any(|n| !(1..=64).contains(n))
        {
            return bad("streams (1-64, or a list of up to 8 such counts)");
        }
        if !(1..=256).contains(&c.parallel) {
            return bad("parallel (1-256)");
        }
        if !(c.warmup_secs >= 0.0 && c.warmup_secs <= 3600.0) {
            return bad("warmup_secs [0-3600]");
        }
        if c.script.is_empty()
            || c.script
                .iter()
                .any(|m| m.request_bytes > 6000 || m.response_bytes > crate::sink::MAX_BYTES)
        {
            return bad("script (1+ messages, request_bytes <= 6000)");
        }
        if c.interval_ms == 0 || c.page_bytes == 0 {
            return bad("interval_ms / page_bytes");
        }
        match c.onion_target() {
            Ok(Some(_)) if c.https => {
                return bad("target: HTTPS goes to the sink's own address, not an onion service");
            }
            Ok(_) => {}
            Err(e) => return Err(e),
        }
        Ok(c)
    }

    /// The onion service named by `target`, if any (`""`: the first).
    pub fn onion_target(&self) -> Result<Option<&str>, String> {
        match self.target.as_deref() {
            None | Some("sink") => Ok(None),
            Some("onion") => Ok(Some("")),
            Some(t) => match t.strip_prefix("onion:") {
                Some(name) if !name.is_empty() => Ok(Some(name)),
                _ => Err(format!(
                    "invalid target {t:?} (\"sink\", \"onion\" or \"onion:<service name>\")"
                )),
            },
        }
    }

    /// Parameters for the run metadata.
    pub fn params(&self) -> std::collections::BTreeMap<String, String> {
        let v = serde_json::to_value(self).unwrap_or_default();
        v.as_object()
            .map(|o| o.iter().map(|(k, v)| (k.clone(), v.to_string())).collect())
            .unwrap_or_default()
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

/// A byte stream to the sink: TCP through SOCKS (or direct), maybe TLS.
trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
type Conn = Box<dyn Io>;

/// Open a stream to `target` through the client's SOCKS port, either
/// waiting for the SOCKS reply (as most applications do) or, with
/// `optimistic`, returning as soon as the request is written.
async fn connect_opt(
    ep: &Endpoint,
    target: SocketAddr,
    user: Option<&str>,
    optimistic: bool,
    timeout: Duration,
) -> Result<Conn, String> {
    if optimistic && !ep.direct {
        let auth = user.map(|u| (u, "x"));
        let s = socks::connect_pipelined(ep.socks, &Target::Addr(target), auth, timeout)
            .await
            .map_err(|e| format!("socks: {e}"))?;
        return Ok(Box::new(s));
    }
    Ok(Box::new(connect(ep, target, user, timeout).await?))
}

async fn connect(
    ep: &Endpoint,
    target: SocketAddr,
    user: Option<&str>,
    timeout: Duration,
) -> Result<TcpStream, String> {
    if ep.direct {
        let s = tokio::time::timeout(timeout, TcpStream::connect(target))
            .await
            .map_err(|_| "connect: timeout".to_string())?
            .map_err(|e| format!("connect: {e}"))?;
        let _ = s.set_nodelay(true);
        return Ok(s);
    }
    let auth = user.map(|u| (u, "x"));
    // Through an onion service: its virtual port for the sink's server.
    let dest = match &ep.onion {
        Some(o) if target == ep.http => Target::Host(o.address.clone(), o.http_port),
        Some(o) if target == ep.echo => Target::Host(o.address.clone(), o.echo_port),
        _ => Target::Addr(target),
    };
    socks::connect(ep.socks, &dest, auth, timeout)
        .await
        .map_err(|e| format!("socks: {e}"))
}

/// Timings of opening a connection to the sink's web server.
#[derive(Debug, Clone, Copy, Default)]
struct Opened {
    /// SOCKS (or TCP) connect, i.e. until the stream through the network
    /// is open (None with optimistic SOCKS: it opens under the first
    /// exchange).
    connect: Option<Duration>,
    /// TLS handshake on top, when HTTPS.
    tls: Option<Duration>,
}

/// Open a connection to the sink's web server: plain HTTP, or HTTPS with
/// the sink's certificate verified against its CA.
async fn open(
    ep: &Endpoint,
    user: Option<&str>,
    https: bool,
    optimistic: bool,
    timeout: Duration,
) -> Result<(Conn, Opened), String> {
    let opened = |t: Duration| (!optimistic || ep.direct).then_some(t);
    if !https {
        let t0 = Instant::now();
        let s = connect_opt(ep, ep.http, user, optimistic, timeout).await?;
        return Ok((
            s,
            Opened {
                connect: opened(t0.elapsed()),
                tls: None,
            },
        ));
    }
    let (Some(addr), Some(ca)) = (ep.https, ep.tls_ca.as_ref()) else {
        return Err("the sink serves no HTTPS (network started by an older onionmix?)".into());
    };
    // TLS set-up before the clock starts: only the network is timed.
    let pem = std::fs::read(ca).map_err(|e| format!("sink CA {}: {e}", ca.display()))?;
    let cfg = crate::sink::client_tls(&pem)?;
    let name = rustls::pki_types::ServerName::try_from(crate::sink::SINK_HOSTNAME)
        .map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let s = connect_opt(ep, addr, user, optimistic, timeout).await?;
    let connected = t0.elapsed();
    let tls = tokio::time::timeout(
        timeout,
        tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg)).connect(name, s),
    )
    .await
    .map_err(|_| "TLS handshake: timeout".to_string())?
    .map_err(|e| format!("TLS handshake: {e}"))?;
    Ok((
        Box::new(tls),
        Opened {
            connect: opened(connected),
            tls: Some(t0.elapsed() - connected),
        },
    ))
}

/// What one HTTP exchange measured, from `t0`.
struct Exchange {
    first_byte: Duration,
    last_byte: Duration,
    at_half_mib: Option<Duration>,
    at_one_mib: Option<Duration>,
}

/// One `GET /bytes/<n>` on `s` (the request padded to about `pad` bytes);
/// reads exactly the n-byte body, so the connection can carry another
/// request unless `close`.
async fn exchange(
    s: &mut Conn,
    n: u64,
    pad: usize,
    close: bool,
    t0: Instant,
) -> Result<Exchange, String> {
    let mut req = format!(
        "GET /bytes/{n} HTTP/1.1\r\nHost: sink\r\nUser-Agent: onionmix-measure\r\n{}",
        if close { "Connection: close\r\n" } else { "" }
    );
    if pad > req.len() + 16 {
        req.push_str(&format!("X-Pad: {}\r\n", "p".repeat(pad - req.len() - 12)));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    s.flush().await.map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 64 * 1024];
    // The first read times the first byte; the parser takes it from there.
    let k = s.read(&mut buf).await.map_err(|e| e.to_string())?;
    if k == 0 {
        return Err("closed before the response".into());
    }
    let first = t0.elapsed();
    let mut pending = buf[..k].to_vec();
    let head = onionmix_http::io::read_response_head(
        s,
        &mut pending,
        &onionmix_http::Limits::DEFAULT,
        crate::http::HEAD_TIMEOUT,
    )
    .await
    .map_err(|e| format!("response head: {e}"))?;
    if head.status != 200 {
        return Err(format!("HTTP {} {}", head.status, head.reason));
    }
    // Read exactly this response's body so a kept-alive connection stays
    // in step.
    let max = usize::try_from(crate::sink::MAX_BYTES).unwrap_or(usize::MAX);
    match head.body_framing(max, false) {
        Ok(onionmix_http::BodyFraming::Length(len)) if u64::try_from(len) == Ok(n) => {}
        Ok(f) => {
            return Err(format!(
                "response framing {f:?} where {n} bytes were asked for"
            ));
        }
        Err(e) => return Err(format!("response head: {e}")),
    }
    let mut got = pending.len() as u64;
    if got > n {
        return Err(format!("{got} body bytes where {n} were asked for"));
    }
    let (mut at_half, mut at_one) = (None, None);
    let mark = |got: u64, h: &mut Option<Duration>, o: &mut Option<Duration>| {
        if got >= 512 * 1024 && h.is_none() {
            *h = Some(t0.elapsed());
        }
        if got >= 1024 * 1024 && o.is_none() {
            *o = Some(t0.elapsed());
        }
    };
    mark(got, &mut at_half, &mut at_one);
    while got < n {
        let want = (n - got).min(buf.len() as u64) as usize;
        let k = s.read(&mut buf[..want]).await.map_err(|e| e.to_string())?;
        if k == 0 {
            return Err(format!("truncated at {got} of {n} bytes"));
        }
        got += k as u64;
        mark(got, &mut at_half, &mut at_one);
    }
    Ok(Exchange {
        first_byte: first,
        last_byte: t0.elapsed(),
        at_half_mib: at_half,
        at_one_mib: at_one,
    })
}

/// Fill `r` from a finished exchange: ttfb/ttlb (and the 0.5-1 MiB
/// throughput when the body is that large).
fn fill(r: &mut Record, x: &Exchange) {
    r.metrics.insert("ttfb_ms".into(), ms(x.first_byte));
    r.metrics.insert("ttlb_ms".into(), ms(x.last_byte));
    if let (Some(h), Some(o)) = (x.at_half_mib, x.at_one_mib)
        && o > h
    {
        let mbps = (512.0 * 1024.0 * 8.0) / (o - h).as_secs_f64() / 1e6;
        r.metrics.insert("mbps_05_1".into(), mbps);
    }
}

/// One HTTP fetch on a new connection; fills `r` with ttfb/ttlb (from
/// before the connect) and the 0.5-1 MiB throughput.
async fn fetch(
    ep: &Endpoint,
    user: Option<&str>,
    n: u64,
    pad: usize,
    optimistic: bool,
    timeout: Duration,
    r: &mut Record,
) {
    let t0 = Instant::now();
    let work = async {
        let (mut s, _) = open(ep, user, false, optimistic, timeout).await?;
        exchange(&mut s, n, pad, true, t0).await
    };
    match tokio::time::timeout(timeout, work).await {
        Err(_) => r.error = Some("timeout".into()),
        Ok(Err(e)) => r.error = Some(e),
        Ok(Ok(x)) => fill(r, &x),
    }
}

/// One scripted session (`session`): per-message records, then the whole
/// session's.
async fn session(
    cfg: &WorkloadConfig,
    ep: &Endpoint,
    run: u32,
    timeout: Duration,
    tick: &(dyn Fn() + Sync),
) -> Vec<Record> {
    let user = isolation("session");
    let mut out = Vec::new();
    let mut total = record(cfg, ep, run, "session", None);
    let t0 = Instant::now();
    let mut failed = None;
    let mut conn: Option<Conn> = None;
    let last = cfg.script.len().saturating_sub(1);
    for (i, m) in cfg.script.iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(m.think_ms)).await;
        let mut r = record(
            cfg,
            ep,
            run,
            &format!("message:{}", m.name),
            Some(m.response_bytes),
        );
        r.metrics
            .insert("request_bytes".into(), m.request_bytes as f64);
        let t = Instant::now();
        if failed.is_none() {
            let work = async {
                let mut opened = None;
                if conn.is_none() || !cfg.keep_alive {
                    let (c, o) =
                        open(ep, Some(&user), cfg.https, cfg.optimistic_socks, timeout).await?;
                    conn = Some(c);
                    opened = Some(o);
                }
                let Some(c) = conn.as_mut() else {
                    return Err("no connection".to_string());
                };
                let close = !cfg.keep_alive || i == last;
                let x = exchange(c, m.response_bytes, m.request_bytes, close, t).await?;
                Ok::<_, String>((x, opened))
            };
            match tokio::time::timeout(timeout, work).await {
                Err(_) => r.error = Some("timeout".into()),
                Ok(Err(e)) => r.error = Some(e),
                Ok(Ok((x, opened))) => {
                    fill(&mut r, &x);
                    r.metrics.insert("latency_ms".into(), ms(t.elapsed()));
                    if let Some(o) = opened {
                        if let Some(c) = o.connect {
                            r.metrics.insert("connect_ms".into(), ms(c));
                        }
                        if let Some(tls) = o.tls {
                            r.metrics.insert("tls_handshake_ms".into(), ms(tls));
                        }
                    }
                }
            }
            if !r.ok() {
                failed = r.error.clone();
                conn = None;
            }
        } else {
            r.error = Some("not sent: an earlier message of the session failed".into());
        }
        out.push(r);
        tick();
    }
    match failed {
        Some(e) => total.error = Some(e),
        None => {
            let think: u64 = cfg.script.iter().map(|m| m.think_ms).sum();
            total
                .metrics
                .insert("latency_ms".into(), ms(t0.elapsed()) - think as f64);
        }
    }
    total
        .metrics
        .insert("https".into(), if cfg.https { 1.0 } else { 0.0 });
    out.push(total);
    out
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
                fetch(
                    ep,
                    user.as_deref(),
                    size,
                    0,
                    cfg.optimistic_socks,
                    timeout,
                    &mut r,
                )
                .await;
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
                    fetch(
                        ep,
                        user.as_deref(),
                        cfg.page_bytes,
                        0,
                        cfg.optimistic_socks,
                        timeout,
                        &mut r,
                    )
                    .await;
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
            // Warm client, new circuit: a fresh isolation username.
            let user = isolation("access");
            let mut r = record(cfg, ep, run, "new-circuit", Some(1000));
            fetch(
                ep,
                Some(&user),
                1000,
                0,
                cfg.optimistic_socks,
                timeout,
                &mut r,
            )
            .await;
            out.push(r);
            // The same circuit again.
            let mut r = record(cfg, ep, run, "reused-circuit", Some(1000));
            fetch(
                ep,
                Some(&user),
                1000,
                0,
                cfg.optimistic_socks,
                timeout,
                &mut r,
            )
            .await;
            out.push(r);
            tick();
        }
        _ => {}
    }
    out
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

async fn voip(cfg: &WorkloadConfig, ep: &Endpoint, run: u32, timeout: Duration) -> Vec<Record> {
    let mut stream = record(cfg, ep, run, "stream", Some(cfg.packet_bytes as u64));
    let mut s = match connect(ep, ep.echo, Some(&isolation("voip")), timeout).await {
        Ok(s) => s,
        Err(e) => {
            stream.error = Some(e);
            return vec![stream];
        }
    };
    let n = (cfg.duration_secs * cfg.packets_per_sec).ceil().max(1.0) as u64;
    let gap = Duration::from_secs_f64(1.0 / cfg.packets_per_sec);
    let (mut rd, mut wr) = s.split();
    let t0 = Instant::now();
    let size = cfg.packet_bytes;
    let sender = async {
        let mut ticker = tokio::time::interval(gap);
        for seq in 0..n {
            ticker.tick().await;
            let mut p = vec![0u8; size];
            p[..8].copy_from_slice(&seq.to_be_bytes());
            p[8..16].copy_from_slice(&(t0.elapsed().as_nanos() as u64).to_be_bytes());
            if wr.write_all(&p).await.is_err() {
                break;
            }
        }
    };
    let receiver = async {
        let mut rtts: Vec<(u64, f64)> = Vec::new();
        let mut p = vec![0u8; size];
        let deadline =
            Duration::from_secs_f64(cfg.duration_secs) + timeout.min(Duration::from_secs(10));
        while (rtts.len() as u64) < n {
            let left = deadline.saturating_sub(t0.elapsed());
            match tokio::time::timeout(left, rd.read_exact(&mut p)).await {
                Ok(Ok(_)) => {
                    let seq = u64::from_be_bytes(p[..8].try_into().unwrap_or_default());
                    let sent = u64::from_be_bytes(p[8..16].try_into().unwrap_or_default());
                    let rtt = t0.elapsed().as_nanos() as f64 / 1e6 - sent as f64 / 1e6;
                    rtts.push((seq, rtt));
                }
                _ => break,
            }
        }
        rtts
    };
    let ((), rtts) = tokio::join!(sender, receiver);
    let mut out = Vec::new();
    for (seq, rtt) in &rtts {
        let mut r = record(cfg, ep, run, "packet", Some(size as u64));
        r.metrics.insert("seq".into(), *seq as f64);
        r.metrics.insert("rtt_ms".into(), *rtt);
        out.push(r);
    }
    let got = rtts.len() as f64;
    let share = |lim: f64| rtts.iter().filter(|(_, r)| *r < lim).count() as f64 / n as f64;
    stream.metrics.insert("packets_sent".into(), n as f64);
    stream.metrics.insert("packets_lost".into(), n as f64 - got);
    stream
        .metrics
        .insert("share_under_150ms".into(), share(150.0));
    stream
        .metrics
        .insert("share_under_300ms".into(), share(300.0));
    if got == 0.0 {
        stream.error = Some("no packet came back".into());
    }
    out.push(stream);
    out
}

async fn goodput(
    cfg: &WorkloadConfig,
    ep: &Endpoint,
    run: u32,
    streams: usize,
    timeout: Duration,
) -> Record {
    let mut r = record(cfg, ep, run, &format!("streams:{streams}"), None);
    let warm = Duration::from_secs_f64(cfg.warmup_secs);
    let span = Duration::from_secs_f64(cfg.duration_secs);
    let user = isolation("goodput");
    let t0 = Instant::now();
    let one = |user: String| async move {
        let req = format!(
            "GET /stream/{} HTTP/1.1\r\nHost: sink\r\nConnection: close\r\n\r\n",
            crate::sink::MAX_BYTES
        );
        let end = warm + span;
        let mut buf = vec![0u8; 64 * 1024];
        let mut counted = 0u64;
        // A fast path (the direct baseline on loopback) can finish a whole
        // 1 GiB response within the window: then the next one is fetched
        // on a new connection. A response that ends short is an error.
        'conn: loop {
            let left = end.saturating_sub(t0.elapsed());
            if left.is_zero() {
                break;
            }
            let mut s = connect(ep, ep.http, Some(&user), timeout.min(left)).await?;
            match tokio::time::timeout(
                end.saturating_sub(t0.elapsed()),
                s.write_all(req.as_bytes()),
            )
            .await
            {
                Err(_) => break,
                Ok(r) => r.map_err(|e| e.to_string())?,
            }
            // The response head (only body bytes count), then body bytes.
            let mut pending = Vec::new();
            let left = end.saturating_sub(t0.elapsed());
            let head = match onionmix_http::io::read_response_head(
                &mut s,
                &mut pending,
                &onionmix_http::Limits::DEFAULT,
                left,
            )
            .await
            {
                Ok(h) => h,
                Err(onionmix_http::ReadError::TimedOut) => break 'conn,
                Err(onionmix_http::ReadError::Closed(_)) => {
                    return Err("stream ended early (after 0 body bytes)".into());
                }
                Err(e) => return Err(format!("response head: {e}")),
            };
            if head.status != 200 {
                return Err("sink refused the stream".into());
            }
            let mut body = pending.len() as u64;
            if t0.elapsed() >= warm {
                counted += body;
            }
            loop {
                let left = end.saturating_sub(t0.elapsed());
                if left.is_zero() {
                    break 'conn;
                }
                let k = match tokio::time::timeout(left, s.read(&mut buf)).await {
                    Err(_) => break 'conn,
                    Ok(Ok(0)) if body == crate::sink::MAX_BYTES => continue 'conn,
                    Ok(Ok(0)) => {
                        return Err(format!("stream ended early (after {body} body bytes)"));
                    }
                    Ok(Ok(k)) => k,
                    Ok(Err(e)) => return Err(e.to_string()),
                };
                body += k as u64;
                if t0.elapsed() >= warm {
                    counted += k as u64;
                }
            }
        }
        if counted == 0 {
            return Err("no bytes within the measured window".into());
        }
        Ok::<u64, String>(counted)
    };
    let futs: Vec<_> = (0..streams).map(|_| one(user.clone())).collect();
    let results = futures_join_all(futs).await;
    let mut total = 0u64;
    for res in results {
        match res {
            Ok(b) => total += b,
            Err(e) => {
                r.error = Some(e);
                return r;
            }
        }
    }
    r.metrics.insert("bytes".into(), total as f64);
    r.metrics
        .insert("mbps".into(), total as f64 * 8.0 / span.as_secs_f64() / 1e6);
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn configs_parse_and_bad_ones_are_refused() {
        for w in WORKLOADS {
            let c = WorkloadConfig::named(w).unwrap();
            assert_eq!(c.workload, *w);
        }
        assert_eq!(WorkloadConfig::named("bulk").unwrap().sizes, d_sizes());
        let c = WorkloadConfig::parse("workload = \"goodput\"\nstreams = 3\nduration_secs = 5\n")
            .unwrap();
        assert_eq!((c.streams.clone(), c.duration_secs), (vec![3], 5.0));
        let c = WorkloadConfig::parse("workload = \"goodput\"\nstreams = [1, 3]\n").unwrap();
        assert_eq!(c.streams, [1, 3]);
        assert!(c.baseline);
        // A config survives a round trip through TOML (overrides re-check).
        let back = WorkloadConfig::parse(&toml::to_string(&c).unwrap()).unwrap();
        assert_eq!(back, c);
        let c = WorkloadConfig::parse("workload = \"session\"\nhttps = true\n").unwrap();
        assert!(c.https && c.keep_alive);
        for bad in [
            "workload = \"nope\"",
            "workload = \"bulk\"\nruns = 0",
            "workload = \"bulk\"\nsizes = []",
            "workload = \"voip\"\npacket_bytes = 8",
            "workload = \"goodput\"\nstreams = 0",
            "workload = \"goodput\"\nstreams = []",
            "workload = \"goodput\"\nstreams = [1, 65]",
            "workload = \"goodput\"\nstreams = -1",
            "workload = \"reliability\"\nparallel = 0",
            "workload = \"session\"\nhttps = \"yes\"",
            "workload = \"bulk\"\nunknown = 1",
            "workload = \"session\"\nscript = []",
            "workload = \"bulk\"\ntarget = \"onion:\"",
            "workload = \"bulk\"\ntarget = \"elsewhere\"",
            "workload = \"session\"\nhttps = true\ntarget = \"onion:hs0\"",
        ] {
            assert!(WorkloadConfig::parse(bad).is_err(), "{bad}");
        }
        let c = WorkloadConfig::parse("workload = \"voip\"\ntarget = \"onion:omhs0\"").unwrap();
        assert_eq!(c.onion_target(), Ok(Some("omhs0")));
        let c = WorkloadConfig::parse("workload = \"bulk\"\ntarget = \"sink\"").unwrap();
        assert_eq!(c.onion_target(), Ok(None));
        assert!(WorkloadConfig::load("/nonexistent/w.toml").is_err());
        assert!(
            !WorkloadConfig::named("session")
                .unwrap()
                .params()
                .is_empty()
        );
    }

    /// A SOCKS5 server that connects straight to the target (IPv4
    /// CONNECT; no auth or username/password, any credentials).
    async fn direct_socks_server() -> SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut c, _)) = l.accept().await {
                tokio::spawn(async move {
                    let mut b = [0u8; 2];
                    c.read_exact(&mut b).await?;
                    let mut m = vec![0u8; b[1] as usize];
                    c.read_exact(&mut m).await?;
                    if m.contains(&2) {
                        c.write_all(&[5, 2]).await?;
                        let mut v = [0u8; 2];
                        c.read_exact(&mut v).await?;
                        let mut u = vec![0u8; v[1] as usize + 1];
                        c.read_exact(&mut u).await?;
                        let mut p = vec![0u8; u[u.len() - 1] as usize];
                        c.read_exact(&mut p).await?;
                        c.write_all(&[1, 0]).await?;
                    } else {
                        c.write_all(&[5, 0]).await?;
                    }
                    let mut h = [0u8; 4];
                    c.read_exact(&mut h).await?;
                    let mut a = [0u8; 6];
                    c.read_exact(&mut a).await?;
                    let ip = std::net::Ipv4Addr::new(a[0], a[1], a[2], a[3]);
                    let port = u16::from_be_bytes([a[4], a[5]]);
                    let mut t = TcpStream::connect((ip, port)).await?;
                    c.write_all(&[5, 0, 0, 1, 0, 0, 0, 0, 0, 0]).await?;
                    tokio::io::copy_bidirectional(&mut c, &mut t).await?;
                    Ok::<(), std::io::Error>(())
                });
            }
        });
        addr
    }

    /// Every workload against a local sink, with a SOCKS stub that
    /// connects directly (no Tor): the records have the right shape.
    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn workloads_produce_records() {
        let sink = crate::sink::start(
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:0".parse().unwrap(),
            "127.0.0.1:0".parse().unwrap(),
        )
        .await
        .unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let ca = tmp.path().join("sink-ca.pem");
        let https = crate::sink::start_https("127.0.0.1:0".parse().unwrap(), &ca)
            .await
            .unwrap();
        let socks = direct_socks_server().await;
        let ep = Endpoint {
            label: "local/socks".into(),
            socks,
            http: sink.http,
            echo: sink.echo,
            https: Some(https),
            tls_ca: Some(ca.clone()),
            direct: false,
            status_json: None,
            fresh: None,
            control: None,
            onion: None,
        };
        let quick = |w: &str| {
            let mut c = WorkloadConfig::named(w).unwrap();
            c.runs = 1;
            c.duration_secs = 0.5;
            c.warmup_secs = 0.1;
            c.interval_ms = 1;
            c.sizes = vec![2 << 20];
            c.timeout_secs = 10.0;
            c
        };
        let r = run_once(&quick("bulk"), &ep, 0, &|| {}).await;
        assert_eq!(r.len(), 1);
        assert!(r[0].ok(), "{:?}", r[0].error);
        for m in ["ttfb_ms", "ttlb_ms", "mbps_05_1"] {
            assert!(r[0].metrics.contains_key(m), "{m}");
        }
        let r = run_once(&quick("voip"), &ep, 0, &|| {}).await;
        let stream = r.iter().find(|x| x.kind == "stream").unwrap();
        assert_eq!(stream.metrics["packets_lost"], 0.0);
        // A share of wall-clock round trips: its range, not a maximum.
        let share = stream.metrics["share_under_150ms"];
        assert!((0.0..=1.0).contains(&share), "{share}");
        assert_eq!(r.iter().filter(|x| x.kind == "packet").count(), 5);
        // Sessions: plain HTTP and HTTPS, kept alive or a connection per
        // message; only connections that were opened have connect_ms.
        for (https, keep_alive) in [(false, true), (true, true), (true, false), (false, false)] {
            let mut c = quick("session");
            c.https = https;
            c.keep_alive = keep_alive;
            let r = run_once(&c, &ep, 0, &|| {}).await;
            assert_eq!(r.len(), 5);
            assert!(
                r.iter()
                    .all(|x| x.ok() && x.metrics.contains_key("latency_ms")),
                "{r:?}"
            );
            let opened = r
                .iter()
                .filter(|x| x.metrics.contains_key("connect_ms"))
                .count();
            assert_eq!(opened, if keep_alive { 1 } else { 4 }, "{r:?}");
            let tls = r
                .iter()
                .filter(|x| x.metrics.contains_key("tls_handshake_ms"))
                .count();
            assert_eq!(tls, if https { opened } else { 0 }, "{r:?}");
            assert_eq!(r[4].metrics["https"], if https { 1.0 } else { 0.0 });
        }
        // Optimistic SOCKS: the request (or the ClientHello) follows the
        // SOCKS request without waiting for its reply; no connect_ms.
        for https in [false, true] {
            let mut c = quick("session");
            c.https = https;
            c.optimistic_socks = true;
            let r = run_once(&c, &ep, 0, &|| {}).await;
            assert!(r.iter().all(|x| x.ok()), "{r:?}");
            assert!(r.iter().all(|x| !x.metrics.contains_key("connect_ms")));
        }
        let mut c = quick("bulk");
        c.optimistic_socks = true;
        let r = run_once(&c, &ep, 0, &|| {}).await;
        assert!(r[0].ok() && r[0].metrics.contains_key("ttfb_ms"), "{r:?}");
        // HTTPS without the sink's CA (or with another): a clear error.
        let mut c = quick("session");
        c.https = true;
        let no_tls = Endpoint {
            https: None,
            ..ep.clone()
        };
        let r = run_once(&c, &no_tls, 0, &|| {}).await;
        assert!(r[0].error.as_deref().unwrap().contains("no HTTPS"), "{r:?}");
        assert!(r[1].error.as_deref().unwrap().contains("not sent"), "{r:?}");
        assert!(!r[4].ok());
        let other_ca = tmp.path().join("other.pem");
        std::fs::write(&other_ca, crate::sink::make_tls().unwrap().0).unwrap();
        let wrong = Endpoint {
            tls_ca: Some(other_ca),
            ..ep.clone()
        };
        let r = run_once(&c, &wrong, 0, &|| {}).await;
        assert!(
            r[0].error.as_deref().unwrap().contains("TLS handshake"),
            "{r:?}"
        );
        // Goodput: one record per stream count; the baseline goes direct.
        let mut g = quick("goodput");
        // The window includes each stream's SOCKS connect: room for a
        // loaded machine.
        g.duration_secs = 2.0;
        g.warmup_secs = 0.5;
        g.streams = vec![1, 3];
        for e in [ep.clone(), ep.baseline()] {
            let r = run_once(&g, &e, 0, &|| {}).await;
            assert_eq!(r.len(), 2);
            for (x, kind) in r.iter().zip(["streams:1", "streams:3"]) {
                assert!(x.ok(), "{:?}", x.error);
                assert!(x.metrics["mbps"] > 0.0, "{} {r:?}", e.label);
                assert_eq!(x.kind, kind);
            }
            assert_eq!(r[1].kind, "streams:3");
        }
        assert_eq!(ep.baseline().label, BASELINE_LABEL);
        // The baseline does not need the SOCKS port.
        let dead_socks = Endpoint {
            socks: "127.0.0.1:1".parse().unwrap(),
            ..ep.clone()
        };
        let r = run_once(&g, &dead_socks.baseline(), 0, &|| {}).await;
        assert!(r.iter().all(|x| x.ok()));
        // Reliability: `parallel` fetchers at once.
        let mut rl = quick("reliability");
        let r = run_once(&rl, &ep, 0, &|| {}).await;
        assert_eq!(r.len(), 1);
        assert!(r[0].ok());
        rl.parallel = 4;
        let r = run_once(&rl, &ep, 0, &|| {}).await;
        assert_eq!(r.len(), 4);
        assert!(r.iter().all(|x| x.ok()));
        let mut fetchers: Vec<f64> = r.iter().map(|x| x.metrics["fetcher"]).collect();
        fetchers.sort_by(f64::total_cmp);
        assert_eq!(fetchers, [0.0, 1.0, 2.0, 3.0]);
        let r = run_once(&quick("access"), &ep, 0, &|| {}).await;
        assert_eq!(r.len(), 2);
        assert!(r.iter().all(|x| x.ok()));
        // A dead SOCKS port gives errors, not panics.
        let dead = dead_socks;
        let r = run_once(&quick("bulk"), &dead, 0, &|| {}).await;
        assert!(r[0].error.as_deref().unwrap().starts_with("socks"));
    }
}
