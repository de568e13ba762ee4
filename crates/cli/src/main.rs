//! The `onionmix` binary: one entry point for every node type, the testbed
//! and the measurement tools. Each subcommand lives in its own module and
//! hands off to a library crate as soon as its arguments are parsed.

use clap::{Parser, Subcommand};

mod cmd_authority;
mod cmd_client;
mod cmd_demo;
mod cmd_emu;
mod cmd_emu_fairness;
mod cmd_measure;
mod cmd_mix;
mod cmd_relay;
mod cmd_testnet;
mod cmd_tunnel;
mod logging;
mod measure_paths;
mod quic_probe;

/// onionmix: anonymity networks you can run, measure and build on.
///
/// Tor-compatible onion routing (client, relays, authorities), Loopix mix
/// networks, and a testbed that starts private networks mixing onionmix
/// nodes with stock `tor` on one machine.
#[derive(Parser, Debug)]
#[command(name = "onionmix", version, about, long_about = None)]
struct Cli {
    /// Log filter (tracing EnvFilter syntax), e.g. `info` or `onionmix=debug`.
    /// Overrides the ONIONMIX_LOG environment variable.
    #[arg(long, global = true)]
    log: Option<String>,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the main demo: start a private network, carry verified downloads
    /// through the onionmix client, print the timings, stop the network.
    Demo(cmd_demo::DemoArgs),
    /// Measure a running testnet with a workload (bulk, voip, session,
    /// goodput, reliability, access): results.jsonl, summary.md, plots.
    Measure(cmd_measure::MeasureArgs),
    /// Start two networks and run a workload on both alternately; report
    /// medians and ratios with confidence intervals.
    Compare(cmd_measure::CompareArgs),
    /// Rebuild tables and plots from saved results (several runs at once).
    Report(cmd_measure::ReportArgs),
    /// Start, inspect and stop private test networks (chutney's job).
    #[command(subcommand)]
    Testnet(cmd_testnet::TestnetCmd),
    /// Run the testbed sink: HTTP /bytes/<n> with SHA-256 header, TCP echo.
    Sink(cmd_testnet::SinkArgs),
    /// Run the Tor-compatible onion-routing client with a SOCKS5 front end.
    Client(cmd_client::ClientArgs),
    /// Hash a control-port password for `hashed_control_password` (the
    /// format of `tor --hash-password`).
    HashPassword(cmd_client::HashPasswordArgs),
    /// Host v3 onion services (keys in tor's HiddenServiceDir layout,
    /// ports like HiddenServicePort), without a SOCKS port.
    #[command(name = "onion-service")]
    OnionService(cmd_client::OnionServiceArgs),
    /// Run a Tor-compatible relay (guard, middle or exit).
    Relay(cmd_relay::RelayArgs),
    /// Run a v3 directory authority (votes, consensus, directory service).
    Authority(cmd_authority::AuthorityArgs),
    /// Run the link emulator process (started by `testnet start` for
    /// emulated networks).
    Emulator(cmd_emu::EmuArgs),
    /// Run a program in a fresh network namespace whose only route is a
    /// transparent tunnel over a SOCKS port (`--exec cmd args...`).
    Tunnel(cmd_tunnel::TunnelArgs),
    /// Loopix mix node (Sphinx, Poisson mixing, cover loops).
    Mix(cmd_mix::MixArgs),
    /// Loopix provider: inboxes for clients, SUBSCRIBE/PULL, offline storage.
    Provider(cmd_mix::ProviderArgs),
    /// Loopix client: send and receive messages with cover traffic.
    #[command(name = "mix-client", subcommand)]
    MixClient(cmd_mix::MixClientCmd),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    logging::init(cli.log.as_deref());
    let result = match cli.command {
        Command::Demo(a) => cmd_demo::run(a),
        Command::Measure(a) => cmd_measure::run_measure(a),
        Command::Compare(a) => cmd_measure::run_compare(a),
        Command::Report(a) => cmd_measure::run_report(a),
        Command::Testnet(c) => cmd_testnet::run(c),
        Command::Sink(a) => cmd_testnet::run_sink(a),
        Command::Client(a) => cmd_client::run(a),
        Command::HashPassword(a) => cmd_client::hash_password(a),
        Command::OnionService(a) => cmd_client::run_onion_service(a),
        Command::Relay(a) => cmd_relay::run(a),
        Command::Authority(a) => cmd_authority::run(a),
        Command::Emulator(a) => cmd_emu::run(a),
        Command::Tunnel(a) => cmd_tunnel::run(a),
        Command::Mix(a) => cmd_mix::run_mix(a),
        Command::Provider(a) => cmd_mix::run_provider(a),
        Command::MixClient(c) => cmd_mix::run_client(c),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}
