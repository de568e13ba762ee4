//! `onionmix emulator`: owned by the emu crate.
//!
//! `onionmix emulator --config <file>` runs the link emulator process (what
//! `testnet start` spawns for emulated networks). The subcommands are tools
//! around it: `status`, `stop`, `cleanup`, `profiles`, `bench`, `fairness`, and the
//! hidden `probe ...` measurement programs the tests run inside namespaces.

use anyhow::{Context, bail};
use clap::{Args, Subcommand};
use onionmix_emu::probe::{self, ChildGuard};
use onionmix_emu::run::{self, EmuConfig};
use onionmix_emu::{LinkProfile, Topology, netns};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub struct EmuArgs {
    /// Emulator configuration file (TOML: state_dir, topology, ...).
    #[arg(long)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    cmd: Option<EmuCmd>,
}

#[derive(Subcommand, Debug)]
enum EmuCmd {
    /// Show per-link counters of a running (or stopped) emulator.
    Status {
        /// The emulator's state directory.
        #[arg(long)]
        dir: PathBuf,
        /// Print the raw JSON status.
        #[arg(long)]
        json: bool,
        /// Include links that carried no traffic.
        #[arg(long)]
        all: bool,
    },
    /// Stop the emulator of a state directory and remove what it created.
    Stop {
        #[arg(long)]
        dir: PathBuf,
    },
    /// Remove namespaces and routes left by crashed emulator runs.
    Cleanup {
        #[arg(long, default_value = netns::DEFAULT_PREFIX)]
        prefix: String,
        #[arg(long, default_value = netns::DEFAULT_REGISTRY)]
        registry: PathBuf,
    },
    /// List the built-in link profiles (TOML).
    Profiles,
    /// Measure the emulator's forwarding capacity and added latency (root).
    Bench(BenchArgs),
    /// What a QUIC link's congestion controller takes from a competing TCP
    /// flow at a shared bottleneck (root).
    Fairness(crate::cmd_emu_fairness::FairnessArgs),
    /// Measurement programs run inside node namespaces (used by tests).
    #[command(subcommand, hide = true)]
    Probe(ProbeCmd),
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// Seconds per throughput measurement.
    #[arg(long, default_value_t = 3)]
    seconds: u64,
    /// UDP payload sizes to measure (bytes, comma separated).
    #[arg(long, value_delimiter = ',', default_value = "1400,64")]
    sizes: Vec<usize>,
    /// Subnet for the benchmark network.
    #[arg(long, default_value = "10.77.250.0/24")]
    subnet: String,
    /// Number of parallel sender/receiver pairs.
    #[arg(long, default_value_t = 2)]
    pairs: usize,
}

/// A bulk sink's listener and measurement window.
#[derive(Args, Debug)]
struct SinkArgs {
    #[arg(long)]
    listen: SocketAddr,
    /// Time after the first byte before counting starts.
    #[arg(long, default_value_t = 1000)]
    warmup_ms: u64,
    /// Length of the counted window.
    #[arg(long, default_value_t = 3000)]
    measure_ms: u64,
    #[arg(long, default_value_t = 60)]
    timeout_s: u64,
    /// Keep reading after the window until the sender stops.
    #[arg(long)]
    drain: bool,
}

impl SinkArgs {
    /// (warm-up, window, timeout).
    fn durations(&self) -> (Duration, Duration, Duration) {
        (
            Duration::from_millis(self.warmup_ms),
            Duration::from_millis(self.measure_ms),
            Duration::from_secs(self.timeout_s),
        )
    }
}

#[derive(Subcommand, Debug)]
enum ProbeCmd {
    /// TCP echo server.
    EchoServer {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long, default_value_t = 120)]
        duration_s: u64,
    },
    /// HTTP sink: GET /bytes/<n> serves n bytes of a fixed pattern.
    HttpSink {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long, default_value_t = 300)]
        duration_s: u64,
    },
    /// TCP request/response RTT client.
    Rtt {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value_t = 20)]
        count: u32,
        #[arg(long, default_value_t = 10)]
        interval_ms: u64,
        #[arg(long, default_value_t = 32)]
        size: usize,
        #[arg(long, default_value_t = 10_000)]
        timeout_ms: u64,
    },
    /// Count numbered UDP datagrams.
    UdpSink {
        #[arg(long)]
        listen: SocketAddr,
        #[arg(long)]
        count: u32,
        #[arg(long, default_value_t = 1000)]
        idle_ms: u64,
        #[arg(long, default_value_t = 60)]
        max_s: u64,
    },
    /// Send numbered UDP datagrams.
    UdpSource {
        #[arg(long)]
        connect: SocketAddr,
        /// Number of packets (0: send for --seconds).
        #[arg(long, default_value_t = 0)]
        count: u32,
        #[arg(long, default_value_t = 1.0)]
        seconds: f64,
        /// Packets per second (0: as fast as possible).
        #[arg(long, default_value_t = 0)]
        pps: u32,
        #[arg(long, default_value_t = 64)]
        size: usize,
    },
    /// Accept one TCP connection and measure goodput.
    BulkSink(SinkArgs),
    /// Send TCP bulk data.
    BulkSource {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
    },
    /// Accept one onionmix QUIC link and count its circuit streams' bytes
    /// (as `bulk-sink`).
    QuicBulkSink {
        #[command(flatten)]
        sink: SinkArgs,
        /// UDP socket buffer each way, bytes (default: the relays'
        /// `udp_socket_buffer`; 0: the system default).
        #[arg(long)]
        udp_buffer: Option<usize>,
    },
    /// Send bulk data on an onionmix QUIC link.
    QuicBulkSource {
        #[arg(long)]
        connect: SocketAddr,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
        /// QUIC congestion controller (cubic, bbr, newreno,
        /// cubic-per-circuit).
        #[arg(long, default_value = "cubic")]
        cc: onionmix_link::quic::QuicCongestion,
        /// Flows `cubic-per-circuit` stands for.
        #[arg(long, default_value_t = 1)]
        weight: u32,
        /// Circuit streams written in parallel.
        #[arg(long, default_value_t = 1)]
        streams: u32,
        /// UDP socket buffer each way, bytes (as `quic-bulk-sink`).
        #[arg(long)]
        udp_buffer: Option<usize>,
    },
}

pub fn run(a: EmuArgs) -> anyhow::Result<()> {
    match (a.config, a.cmd) {
        (Some(path), None) => {
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            let cfg = EmuConfig::from_toml(&text)?;
            run::run_emulator(cfg)?;
            Ok(())
        }
        (None, Some(cmd)) => run_cmd(cmd),
        _ => bail!("usage: onionmix emulator --config <file> | onionmix emulator <command>"),
    }
}

fn print_json<T: serde::Serialize>(v: &T) -> anyhow::Result<()> {
    println!("{}", serde_json::to_string(v)?);
    Ok(())
}

fn run_cmd(cmd: EmuCmd) -> anyhow::Result<()> {
    match cmd {
        EmuCmd::Status { dir, json, all } => {
            let s = run::read_status(&dir)?;
            if json {
                println!("{}", serde_json::to_string_pretty(&s)?);
            } else {
                print!("{}", s.render_table(all));
            }
            Ok(())
        }
        EmuCmd::Stop { dir } => Ok(run::stop(&dir, Duration::from_secs(10))?),
        EmuCmd::Cleanup { prefix, registry } => {
            let rep = netns::cleanup_stale(&prefix, &registry)?;
            println!("{}", serde_json::to_string_pretty(&rep)?);
            Ok(())
        }
        EmuCmd::Profiles => {
            for name in onionmix_emu::profile::NAMED_PROFILES {
                if let Some(p) = onionmix_emu::named_profile(name) {
                    println!("[profiles.\"{name}\"]");
                    print!("{}", toml::to_string(&p)?);
                    println!();
                }
            }
            Ok(())
        }
        EmuCmd::Bench(b) => bench(b),
        EmuCmd::Fairness(f) => crate::cmd_emu_fairness::fairness(f),
        EmuCmd::Probe(p) => probe_cmd(p),
    }
}

fn probe_cmd(p: ProbeCmd) -> anyhow::Result<()> {
    match p {
        ProbeCmd::EchoServer { listen, duration_s } => {
            probe::echo_server(listen, Duration::from_secs(duration_s))?;
            Ok(())
        }
        ProbeCmd::HttpSink { listen, duration_s } => {
            probe::http_sink(listen, Duration::from_secs(duration_s))?;
            Ok(())
        }
        ProbeCmd::Rtt {
            connect,
            count,
            interval_ms,
            size,
            timeout_ms,
        } => print_json(&probe::rtt_client(
            connect,
            count,
            Duration::from_millis(interval_ms),
            size,
            Duration::from_millis(timeout_ms),
        )?),
        ProbeCmd::UdpSink {
            listen,
            count,
            idle_ms,
            max_s,
        } => print_json(&probe::udp_sink(
            listen,
            count,
            Duration::from_millis(idle_ms),
            Duration::from_secs(max_s),
        )?),
        ProbeCmd::UdpSource {
            connect,
            count,
            seconds,
            pps,
            size,
        } => print_json(&probe::udp_source(
            connect,
            count,
            probe_secs(seconds)?,
            pps,
            size,
        )?),
        ProbeCmd::BulkSink(a) => {
            let (warmup, measure, timeout) = a.durations();
            print_json(&probe::bulk_sink(
                a.listen, warmup, measure, timeout, a.drain,
            )?)
        }
        ProbeCmd::BulkSource { connect, seconds } => {
            let n = probe::bulk_source(connect, probe_secs(seconds)?)?;
            println!("{{\"sent_bytes\":{n}}}");
            Ok(())
        }
        ProbeCmd::QuicBulkSink {
            sink: a,
            udp_buffer,
        } => {
            let (warmup, measure, timeout) = a.durations();
            print_json(&crate::quic_probe::quic_bulk_sink(
                a.listen, warmup, measure, timeout, a.drain, udp_buffer,
            )?)
        }
        ProbeCmd::QuicBulkSource {
            connect,
            seconds,
            cc,
            weight,
            streams,
            udp_buffer,
        } => {
            let n = crate::quic_probe::quic_bulk_source(
                connect,
                probe_secs(seconds)?,
                cc,
                weight,
                streams,
                udp_buffer,
            )?;
            println!("{{\"sent_bytes\":{n}}}");
            Ok(())
        }
    }
}

/// A probe's `--seconds`: a number, at most 600.
fn probe_secs(seconds: f64) -> anyhow::Result<Duration> {
    if !seconds.is_finite() {
        bail!("--seconds must be a number of seconds, not {seconds}");
    }
    Ok(Duration::from_secs_f64(seconds.clamp(0.0, 600.0)))
}

/// CPU time (user + system, clock ticks) of a process.
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

fn probe_cmd_in(
    h: &run::EmulatorHandle,
    exe: &std::path::Path,
    node: &str,
    args: &[String],
) -> anyhow::Result<std::process::Command> {
    let mut c = h
        .command(node, exe)
        .with_context(|| format!("no node {node}"))?;
    c.arg("emulator").arg("probe").args(args);
    Ok(c)
}

fn bench(b: BenchArgs) -> anyhow::Result<()> {
    netns::check_privileges()?;
    let exe = std::env::current_exe()?;
    let pairs = b.pairs.clamp(1, 8);
    let mut names = Vec::new();
    for i in 0..pairs {
        names.push(format!("s{i}"));
        names.push(format!("r{i}"));
    }
    let name_refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut topo = Topology::uniform(&name_refs, LinkProfile::default(), 1);
    topo.subnet = b.subnet.parse()?;
    let dir = std::env::temp_dir().join(format!("onionmix-emu-bench-{}", std::process::id()));
    let cfg = EmuConfig::new(&dir, topo);
    let h = run::spawn(&exe, &cfg, Duration::from_secs(30))?;
    let addr_of = |n: &str| -> anyhow::Result<std::net::Ipv4Addr> {
        Ok(h.ready.node(n).context("node")?.address)
    };
    let secs = b.seconds.clamp(1, 60);
    println!(
        "# onionmix emulator bench: {pairs} sender/receiver pair(s), zero impairment, {secs} s per size"
    );
    println!(
        "| UDP payload B | IP packet B | forwarded pkt/s | Gbit/s (IP) | emulator CPU % | loss % |"
    );
    println!("|---|---|---|---|---|---|");
    let mut max_pps_1400 = 0.0f64;
    for &size in &b.sizes {
        let size = size.clamp(8, 1472);
        let mut sinks = Vec::new();
        for i in 0..pairs {
            let a = SocketAddr::new(addr_of(&format!("r{i}"))?.into(), 9000);
            let mut s = ChildGuard::spawn(
                probe_cmd_in(
                    &h,
                    &exe,
                    &format!("r{i}"),
                    &[
                        "udp-sink".into(),
                        format!("--listen={a}"),
                        "--count=10000000".into(),
                        "--idle-ms=1500".into(),
                        format!("--max-s={}", secs + 20),
                    ],
                )?,
                "udp-sink",
            )?;
            s.wait_ready(Duration::from_secs(10))?;
            sinks.push((s, a));
        }
        let before = h.status()?;
        let cpu0 = cpu_ticks(h.pid()).unwrap_or(0);
        let t0 = Instant::now();
        let mut sources = Vec::new();
        for (i, (_, a)) in sinks.iter().enumerate() {
            sources.push(ChildGuard::spawn(
                probe_cmd_in(
                    &h,
                    &exe,
                    &format!("s{i}"),
                    &[
                        "udp-source".into(),
                        format!("--connect={a}"),
                        format!("--seconds={secs}"),
                        format!("--size={size}"),
                    ],
                )?,
                "udp-source",
            )?);
        }
        let mut sent = 0u64;
        for s in sources {
            let out = s.finish(Duration::from_secs(secs + 30))?;
            let r: probe::UdpSourceResult = probe::last_json(&out)?;
            sent += u64::from(r.sent);
        }
        let wall = t0.elapsed().as_secs_f64();
        let cpu1 = cpu_ticks(h.pid()).unwrap_or(0);
        let mut received = 0u64;
        for (s, _) in sinks {
            let out = s.finish(Duration::from_secs(30))?;
            let r: probe::UdpSinkResult = probe::last_json(&out)?;
            received += u64::from(r.received);
        }
        std::thread::sleep(Duration::from_millis(1100));
        let after = h.status()?;
        let fwd = after.global.delivered_packets - before.global.delivered_packets;
        let pps = fwd as f64 / wall;
        let ip = size + 28;
        let gbit = pps * ip as f64 * 8.0 / 1e9;
        let tick = 100.0; // USER_HZ
        let cpu = (cpu1 - cpu0) as f64 / tick / wall * 100.0;
        let loss = if sent > 0 {
            100.0 * (sent - received.min(sent)) as f64 / sent as f64
        } else {
            0.0
        };
        if size >= 1000 {
            max_pps_1400 = max_pps_1400.max(pps);
        }
        println!("| {size} | {ip} | {pps:.0} | {gbit:.2} | {cpu:.0} | {loss:.2} |");
    }
    // Added latency at 50% load.
    if max_pps_1400 > 0.0 {
        let echo_addr = SocketAddr::new(addr_of("r0")?.into(), 7000);
        let mut echo = ChildGuard::spawn(
            probe_cmd_in(
                &h,
                &exe,
                "r0",
                &[
                    "echo-server".into(),
                    format!("--listen={echo_addr}"),
                    "--duration-s=120".into(),
                ],
            )?,
            "echo-server",
        )?;
        echo.wait_ready(Duration::from_secs(10))?;
        let rtt = |h: &run::EmulatorHandle| -> anyhow::Result<probe::RttResult> {
            let out = ChildGuard::spawn(
                probe_cmd_in(
                    h,
                    &exe,
                    "s0",
                    &[
                        "rtt".into(),
                        format!("--connect={echo_addr}"),
                        "--count=300".into(),
                        "--interval-ms=5".into(),
                    ],
                )?,
                "rtt",
            )?
            .finish(Duration::from_secs(60))?;
            Ok(probe::last_json(&out)?)
        };
        let idle = rtt(&h)?;
        // Background load: half the measured capacity, split over the pairs.
        let per_pair = (max_pps_1400 * 0.5 / pairs as f64) as u32;
        let mut bg = Vec::new();
        let mut bg_sinks = Vec::new();
        for i in 0..pairs {
            let a = SocketAddr::new(addr_of(&format!("r{i}"))?.into(), 9100);
            let mut s = ChildGuard::spawn(
                probe_cmd_in(
                    &h,
                    &exe,
                    &format!("r{i}"),
                    &[
                        "udp-sink".into(),
                        format!("--listen={a}"),
                        "--count=10000000".into(),
                        "--idle-ms=1500".into(),
                        "--max-s=60".into(),
                    ],
                )?,
                "udp-sink",
            )?;
            s.wait_ready(Duration::from_secs(10))?;
            bg_sinks.push(s);
            bg.push(ChildGuard::spawn(
                probe_cmd_in(
                    &h,
                    &exe,
                    &format!("s{i}"),
                    &[
                        "udp-source".into(),
                        format!("--connect={a}"),
                        "--seconds=6".into(),
                        format!("--pps={per_pair}"),
                        "--size=1400".into(),
                    ],
                )?,
                "udp-source",
            )?);
        }
        std::thread::sleep(Duration::from_millis(500));
        let loaded = rtt(&h)?;
        drop(bg);
        drop(bg_sinks);
        drop(echo);
        let pct = |r: &probe::RttResult, q: f64| {
            let mut v = r.samples_us.clone();
            v.sort_unstable();
            v.get(((v.len() as f64 - 1.0) * q) as usize)
                .copied()
                .unwrap_or(0)
        };
        println!();
        println!(
            "Added latency at 50% load ({:.0} pkt/s of 1428-byte packets in background, TCP 32-byte echo RTT, 300 samples):",
            per_pair as f64 * pairs as f64
        );
        println!("| condition | median RTT us | p90 us | p99 us |");
        println!("|---|---|---|---|");
        println!(
            "| idle | {:.0} | {} | {} |",
            idle.median_us(),
            pct(&idle, 0.9),
            pct(&idle, 0.99)
        );
        println!(
            "| 50% load | {:.0} | {} | {} |",
            loaded.median_us(),
            pct(&loaded, 0.9),
            pct(&loaded, 0.99)
        );
    }
    let st = h.status()?;
    println!();
    println!(
        "emulator timing: p99 lateness < {} us, max {} us",
        st.lateness.quantile_bound_us(0.99).unwrap_or(0),
        st.lateness.max_us
    );
    h.stop(Duration::from_secs(10))?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
