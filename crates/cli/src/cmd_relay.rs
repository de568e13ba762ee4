//! `onionmix relay`: a Tor-compatible relay (guard, middle, exit).

use clap::Args;

use onionmix_node::relay::{self, config::RelayConfig};

#[derive(Args, Debug)]
pub struct RelayArgs {
    /// Relay configuration file (TOML; see docs/relay.md).
    #[arg(long)]
    config: std::path::PathBuf,
    /// Create the keys if needed, print `<nickname> <fingerprint>` and exit.
    #[arg(long)]
    list_fingerprint: bool,
}

pub fn run(a: RelayArgs) -> anyhow::Result<()> {
    let cfg = RelayConfig::load(&a.config).map_err(anyhow::Error::msg)?;
    if a.list_fingerprint {
        std::fs::create_dir_all(&cfg.data_dir)?;
        let keys = relay::load_or_generate_keys(&cfg.data_dir).map_err(anyhow::Error::msg)?;
        println!("{} {}", cfg.nickname, hex::encode_upper(keys.rsa_id()));
        return Ok(());
    }
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
