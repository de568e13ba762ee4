//! `onionmix emulator fairness` end to end (root): a TCP flow and an
//! onionmix QUIC link (`cubic-per-circuit` standing for two circuits) share
//! one emulated 10 Mbit/s bottleneck; both probes report, both flows
//! carry data, and together they fill the link without exceeding it
//! (with the QUIC endpoints' UDP socket buffers as asked). The
//! shares themselves are a benchmark (`scripts/seed-004.sh fairness`,
//! `docs/benchmarks.md`), not bounded here.

mod common_net;

use std::process::Command;

#[test]
fn fairness_benchmark_runs_a_tcp_flow_against_a_quic_link() {
    let _serial = common_net::serial();
    if !common_net::emulator_available("fairness_benchmark_runs_a_tcp_flow_against_a_quic_link") {
        return;
    }
    let out = Command::new(env!("CARGO_BIN_EXE_onionmix"))
        .args([
            "emulator",
            "fairness",
            "--rate-mbit=10",
            "--delay-ms=5",
            "--seconds=8",
            "--warmup-s=2",
            "--repeats=1",
            "--series=quic:cubic-per-circuit:2",
            "--subnet=10.77.17.0/24",
            "--udp-buffer=262144",
        ])
        .output()
        .expect("run onionmix");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("QUIC UDP socket buffers 262144 bytes each way"),
        "{stdout}"
    );
    // | QUIC cubic-per-circuit x2 | <tcp> | <quic> | <share> (..) | 0.67 |
    let row = stdout
        .lines()
        .find(|l| l.starts_with("| QUIC cubic-per-circuit x2 |"))
        .unwrap_or_else(|| panic!("no result row:\n{stdout}\n{stderr}"));
    let cols: Vec<&str> = row.split('|').map(str::trim).collect();
    let tcp: f64 = cols[2].parse().expect("TCP Mbit/s");
    let quic: f64 = cols[3].parse().expect("QUIC Mbit/s");
    assert!(tcp > 0.1 && quic > 0.1, "both flows carry data: {row}");
    // Goodput counts payload; the rate counts IP bytes.
    assert!(tcp + quic < 10.0, "more than the link carries: {row}");
    assert!(tcp + quic > 4.0, "the two flows leave the link idle: {row}");
    assert_eq!(cols[5], "0.67", "{row}");
}
