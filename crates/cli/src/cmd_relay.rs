//! `onionmix relay`: a Tor-compatible relay (guard, middle, exit).

use clap::Args;

use onionmix_node::relay::{self, config::RelayConfig};

#[derive(Args, Debug)]
pub struct RelayArgs {
    /// Relay configuration file (TOML; see docs/relay.md).
    #[arg(long)]
    config: std::path::PathBuf,
}

pub fn run(a: RelayArgs) -> anyhow::Result<()> {
    let cfg = RelayConfig::load(&a.config).map_err(anyhow::Error::msg)?;
    let threads = if cfg.threads == 0 {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
    } else {
        cfg.threads
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()?;
    rt.block_on(relay::run(cfg)).map_err(anyhow::Error::msg)?;
    Ok(())
}
