//! `onionmix client`: the Tor-compatible onion-routing client.

use clap::Args;

use onionmix_node::client::{self, config::ClientConfig};

#[derive(Args, Debug)]
pub struct ClientArgs {
    /// Client configuration file (TOML; see docs/client.md).
    #[arg(long)]
    config: std::path::PathBuf,
}

pub fn run(a: ClientArgs) -> anyhow::Result<()> {
    let cfg = ClientConfig::load(&a.config)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(client::run(cfg))?;
    Ok(())
}

#[derive(Args, Debug)]
pub struct OnionServiceArgs {
    /// Configuration file: the client schema with one or more
    /// `[[onion_service]]` blocks (see docs/onion-services.md).
    #[arg(long)]
    config: std::path::PathBuf,
}

pub fn run_onion_service(a: OnionServiceArgs) -> anyhow::Result<()> {
    let cfg = ClientConfig::load(&a.config)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(client::run_services(cfg))?;
    Ok(())
}
