//! `onionmix testnet ...` and `onionmix sink`: owned by the testbed crate.

use clap::{Args, Subcommand};

#[derive(Subcommand, Debug)]
pub enum TestnetCmd {
    /// Start a network described by a built-in spec name or a TOML file.
    Start {
        #[arg(long)]
        spec: String,
        #[arg(long)]
        dir: std::path::PathBuf,
    },
    /// Show the nodes of a running network.
    Status {
        #[arg(long)]
        dir: std::path::PathBuf,
    },
    /// Stop exactly the processes a `start` launched.
    Stop {
        #[arg(long)]
        dir: std::path::PathBuf,
    },
}

#[derive(Args, Debug)]
pub struct SinkArgs {
    /// Address for the HTTP server.
    #[arg(long, default_value = "127.0.0.1:0")]
    http: std::net::SocketAddr,
}

pub fn run(_cmd: TestnetCmd) -> anyhow::Result<()> {
    anyhow::bail!("testnet: not built yet")
}

pub fn run_sink(_a: SinkArgs) -> anyhow::Result<()> {
    anyhow::bail!("sink: not built yet")
}
