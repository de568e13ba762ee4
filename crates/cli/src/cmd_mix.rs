//! `onionmix mix`, `onionmix provider`, `onionmix mix-client`: owned by the mix crate.

use clap::{Args, Subcommand};

#[derive(Args, Debug)]
pub struct MixArgs {
    /// Node configuration file (TOML).
    #[arg(long)]
    config: std::path::PathBuf,
}

#[derive(Args, Debug)]
pub struct ProviderArgs {
    /// Node configuration file (TOML).
    #[arg(long)]
    config: std::path::PathBuf,
}

#[derive(Subcommand, Debug)]
pub enum MixClientCmd {
    /// Run the client loop: cover traffic, pulls, print delivered messages.
    Run {
        #[arg(long)]
        config: std::path::PathBuf,
    },
}

pub fn run_mix(_a: MixArgs) -> anyhow::Result<()> {
    anyhow::bail!("mix: not built yet")
}
pub fn run_provider(_a: ProviderArgs) -> anyhow::Result<()> {
    anyhow::bail!("provider: not built yet")
}
pub fn run_client(_c: MixClientCmd) -> anyhow::Result<()> {
    anyhow::bail!("mix-client: not built yet")
}
