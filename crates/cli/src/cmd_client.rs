//! `onionmix client`: the Tor-compatible onion-routing client.

use clap::Args;

#[derive(Args, Debug)]
pub struct ClientArgs {
    /// Client configuration file (TOML).
    #[arg(long)]
    config: std::path::PathBuf,
}

pub fn run(_a: ClientArgs) -> anyhow::Result<()> {
    anyhow::bail!("client: not built yet")
}
