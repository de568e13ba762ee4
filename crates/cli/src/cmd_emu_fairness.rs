//! `onionmix emulator fairness`: what a QUIC link's congestion controller
//! takes from a competing TCP flow at a shared bottleneck
//! (`docs/quic-links.md` §8). Two nodes, `s` and `r`, one emulated link
//! each way (rate, delay, loss, the emulator's drop-tail queue); `s` sends
//! to `r` at once a TCP bulk flow (the host's TCP controller) and a
//! second flow of the series under test: a QUIC link with N busy circuit
//! streams and a controller, or another TCP flow (the reference). Each
//! receiver counts the same window; the table gives the second flow's
//! share and the share of N flows, N/(N+1), that `cubic-per-circuit`
//! claims by design.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use onionmix_emu::probe::BulkResult;
use onionmix_emu::testkit::{TestNet, args};
use onionmix_emu::{LinkProfile, Topology, netns};
use onionmix_link::quic::QuicCongestion;

#[derive(Args, Debug)]
pub(crate) struct FairnessArgs {
    /// Bottleneck rate, Mbit/s (both directions).
    #[arg(long, default_value_t = 20.0)]
    rate_mbit: f64,
    /// One-way delay per direction, ms.
    #[arg(long, default_value_t = 20.0)]
    delay_ms: f64,
    /// Random loss per direction (0..1).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Seconds both flows run; the first `warmup_s` are not counted.
    #[arg(long, default_value_t = 40)]
    seconds: u64,
    #[arg(long, default_value_t = 10)]
    warmup_s: u64,
    /// Runs per series (interleaved: every series once, then again).
    #[arg(long, default_value_t = 3)]
    repeats: u32,
    /// Series: `tcp` (a second TCP flow), or `quic:<controller>:<N>` (one
    /// QUIC link, N busy circuit streams; `cubic-per-circuit` stands for
    /// N flows).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "tcp,quic:cubic:1,quic:cubic:4,quic:cubic-per-circuit:1,quic:cubic-per-circuit:2,quic:cubic-per-circuit:4,quic:bbr:1"
    )]
    series: Vec<Series>,
    /// Subnet for the two namespaces.
    #[arg(long, default_value = "10.77.251.0/24")]
    subnet: String,
    /// UDP socket buffer of both QUIC endpoints, each way, bytes (default:
    /// the relays' `udp_socket_buffer`; 0: the system default, as before
    /// 2026-12-07).
    #[arg(long)]
    udp_buffer: Option<usize>,
}

/// The flow that competes with the reference TCP flow.
#[derive(Debug, Clone, PartialEq)]
enum Series {
    Tcp,
    Quic { cc: QuicCongestion, streams: u32 },
}

impl FromStr for Series {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "tcp" {
            return Ok(Series::Tcp);
        }
        let mut p = s.split(':');
        match (p.next(), p.next(), p.next(), p.next()) {
            (Some("quic"), Some(cc), Some(n), None) => {
                let cc = cc.parse::<QuicCongestion>()?;
                if cc == QuicCongestion::Auto {
                    return Err("name the controller (auto depends on the host)".into());
                }
                let streams = n
                    .parse::<u32>()
                    .ok()
                    .filter(|n| (1..=crate::quic_probe::MAX_STREAMS).contains(n))
                    .ok_or_else(|| {
                        format!("{s:?}: N must be 1..={}", crate::quic_probe::MAX_STREAMS)
                    })?;
                Ok(Series::Quic { cc, streams })
            }
            _ => Err(format!(
                "unknown series {s:?} (tcp, or quic:<controller>:<streams>)"
            )),
        }
    }
}

impl Series {
    fn name(&self) -> String {
        match self {
            Series::Tcp => "TCP".into(),
            Series::Quic { cc, streams } => format!("QUIC {} x{streams}", cc.name()),
        }
    }
    /// The share a flow standing for this many flows gets at a fair
    /// bottleneck (against one TCP flow).
    fn fair_share(&self) -> f64 {
        let n = match self {
            Series::Quic {
                cc: QuicCongestion::CubicPerCircuit,
                streams,
            } => f64::from((*streams).min(onionmix_link::quic::MAX_CIRCUIT_WEIGHT)),
            _ => 1.0,
        };
        n / (n + 1.0)
    }
}

/// Seconds the sources run past `--seconds`.
const SOURCE_EXTRA_SECS: u64 = 3;

/// One run: (reference TCP, series flow) goodput in Mbit/s.
fn run_once(net: &TestNet, a: &FairnessArgs, s: &Series, port: u16) -> anyhow::Result<(f64, f64)> {
    let timeout = a.seconds + SOURCE_EXTRA_SECS + 30;
    let measure_ms = a.seconds.saturating_sub(a.warmup_s).max(1) * 1000 - 500;
    // `--udp-buffer` for the QUIC probes, when asked.
    let udp_buffer: Vec<String> = a
        .udp_buffer
        .map(|b| format!("--udp-buffer={b}"))
        .into_iter()
        .collect();
    let sink = |kind: &str, addr: SocketAddr, extra: &[String]| {
        let mut v = args(&[
            &kind,
            &format!("--listen={addr}"),
            &format!("--warmup-ms={}", a.warmup_s * 1000),
            &format!("--measure-ms={measure_ms}"),
            &format!("--timeout-s={timeout}"),
            &"--drain",
        ]);
        v.extend(extra.iter().cloned());
        net.server("r", &v).with_context(|| format!("{kind} in r"))
    };
    let tcp_addr = net.sock("r", port);
    let other_addr = net.sock("r", port + 1);
    let tcp_sink = sink("bulk-sink", tcp_addr, &[])?;
    let other_sink = match s {
        Series::Tcp => sink("bulk-sink", other_addr, &[])?,
        Series::Quic { .. } => sink("quic-bulk-sink", other_addr, &udp_buffer)?,
    };
    // The sources outlast both windows (each starts at its own first
    // byte), so neither flow stops while the other is still measured.
    let secs = (a.seconds + SOURCE_EXTRA_SECS).to_string();
    let tcp_src = net.spawn_probe(
        "s",
        &args(&[
            &"bulk-source",
            &format!("--connect={tcp_addr}"),
            &format!("--seconds={secs}"),
        ]),
    )?;
    let other_src = match s {
        Series::Tcp => net.spawn_probe(
            "s",
            &args(&[
                &"bulk-source",
                &format!("--connect={other_addr}"),
                &format!("--seconds={secs}"),
            ]),
        )?,
        Series::Quic { cc, streams } => {
            let mut v = args(&[
                &"quic-bulk-source",
                &format!("--connect={other_addr}"),
                &format!("--seconds={secs}"),
                &format!("--cc={}", cc.name()),
                &format!("--streams={streams}"),
                &format!(
                    "--weight={}",
                    (*streams).min(onionmix_link::quic::MAX_CIRCUIT_WEIGHT)
                ),
            ]);
            v.extend(udp_buffer.iter().cloned());
            net.spawn_probe("s", &v)?
        }
    };
    let wait = Duration::from_secs(timeout + 10);
    tcp_src.finish(wait)?;
    other_src.finish(wait)?;
    let goodput = |g: onionmix_emu::probe::ChildGuard| -> anyhow::Result<f64> {
        let r: BulkResult = onionmix_emu::probe::last_json(&g.finish(wait)?)?;
        Ok(r.goodput_bps / 1e6)
    };
    Ok((goodput(tcp_sink)?, goodput(other_sink)?))
}

pub(crate) fn fairness(a: FairnessArgs) -> anyhow::Result<()> {
    netns::check_privileges()?;
    anyhow::ensure!(
        a.rate_mbit > 0.0 && a.rate_mbit <= 1000.0,
        "--rate-mbit must be in (0, 1000]"
    );
    anyhow::ensure!(
        a.seconds > a.warmup_s && a.seconds <= 300,
        "--seconds must exceed --warmup-s and be at most 300"
    );
    anyhow::ensure!((1..=20).contains(&a.repeats), "--repeats must be 1..=20");
    anyhow::ensure!(
        (0.0..=1000.0).contains(&a.delay_ms),
        "--delay-ms must be in [0, 1000]"
    );
    anyhow::ensure!((0.0..1.0).contains(&a.loss), "--loss must be in [0, 1)");
    let exe = std::env::current_exe()?;
    let profile = LinkProfile {
        delay_ms: a.delay_ms,
        loss: a.loss,
        rate_mbit: Some(a.rate_mbit),
        ..LinkProfile::default()
    };
    let mut topo = Topology::uniform(&["s", "r"], profile, 1);
    topo.subnet = a.subnet.parse()?;
    let dir = tempdir_for("fairness")?;
    let net = TestNet::start(&exe, &dir, topo)?;
    let tcp_cc =
        std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap_or_default();
    println!(
        "# onionmix emulator fairness: {} Mbit/s, {} ms and loss {} each way, \
         drop-tail queue of 100 ms of the rate (at least 32 KiB); {} s per run ({} s warm-up); \
         reference flow: TCP {}; QUIC UDP socket buffers {}",
        a.rate_mbit,
        a.delay_ms,
        a.loss,
        a.seconds,
        a.warmup_s,
        tcp_cc.trim(),
        match a.udp_buffer {
            None => format!(
                "{} bytes each way (the relays' default)",
                onionmix_link::quic::QuicLimits::default().udp_socket_buffer
            ),
            Some(0) => "the system default".into(),
            Some(b) => format!("{b} bytes each way"),
        }
    );
    let mut results: Vec<Vec<(f64, f64)>> = vec![Vec::new(); a.series.len()];
    let mut port = 9000u16;
    for rep in 0..a.repeats {
        for (i, s) in a.series.iter().enumerate() {
            port = if port > 60000 { 9000 } else { port + 2 };
            let r = run_once(&net, &a, s, port)?;
            eprintln!(
                "run {}/{}: {}: TCP {:.2} Mbit/s, it {:.2} Mbit/s",
                rep + 1,
                a.repeats,
                s.name(),
                r.0,
                r.1
            );
            results[i].push(r);
        }
    }
    net.stop()?;
    let _ = std::fs::remove_dir_all(&dir);
    println!("| second flow | TCP Mbit/s | it Mbit/s | its share (min-max) | share of N flows |");
    println!("|---|--:|--:|--:|--:|");
    for (s, r) in a.series.iter().zip(&results) {
        let n = r.len() as f64;
        let tcp = r.iter().map(|x| x.0).sum::<f64>() / n;
        let it = r.iter().map(|x| x.1).sum::<f64>() / n;
        let shares: Vec<f64> = r
            .iter()
            .map(|x| {
                if x.0 + x.1 > 0.0 {
                    x.1 / (x.0 + x.1)
                } else {
                    0.0
                }
            })
            .collect();
        let mean = shares.iter().sum::<f64>() / n;
        let lo = shares.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = shares.iter().copied().fold(0.0, f64::max);
        println!(
            "| {} | {tcp:.2} | {it:.2} | {mean:.2} ({lo:.2}-{hi:.2}) | {:.2} |",
            s.name(),
            s.fair_share()
        );
    }
    Ok(())
}

fn tempdir_for(what: &str) -> anyhow::Result<std::path::PathBuf> {
    let d = std::env::temp_dir().join(format!("onionmix-emu-{what}-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn series_parse_and_fair_shares() {
        assert_eq!("tcp".parse::<Series>(), Ok(Series::Tcp));
        let s: Series = "quic:cubic-per-circuit:4".parse().unwrap();
        assert_eq!(
            s,
            Series::Quic {
                cc: QuicCongestion::CubicPerCircuit,
                streams: 4
            }
        );
        assert!((s.fair_share() - 0.8).abs() < 1e-9);
        // More streams than the weight cap stand for the cap.
        let s: Series = "quic:cubic-per-circuit:8".parse().unwrap();
        assert!((s.fair_share() - 0.8).abs() < 1e-9);
        let s: Series = "quic:cubic:4".parse().unwrap();
        assert!((s.fair_share() - 0.5).abs() < 1e-9);
        for bad in [
            "quic",
            "quic:cubic",
            "quic:cubic:0",
            "quic:cubic:17",
            "quic:vegas:1",
            "quic:auto:1",
            "udp",
            "quic:cubic:1:x",
        ] {
            assert!(bad.parse::<Series>().is_err(), "{bad}");
        }
    }
}
