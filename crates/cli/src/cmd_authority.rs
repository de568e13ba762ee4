//! `onionmix authority`: a v3 directory authority (and relay).

use clap::Args;

use onionmix_node::authority::{self, AuthorityConfig};

#[derive(Args, Debug)]
pub struct AuthorityArgs {
    /// Authority configuration file (TOML; see docs/authority.md).
    #[arg(long)]
    config: std::path::PathBuf,
    /// Create the keys if needed, print `<nickname> <relay fingerprint>
    /// <v3ident>` and exit.
    #[arg(long)]
    list_fingerprint: bool,
}

pub fn run(a: AuthorityArgs) -> anyhow::Result<()> {
    let cfg = AuthorityConfig::load(&a.config).map_err(anyhow::Error::msg)?;
    if a.list_fingerprint {
        let (fp, v3) = authority::list_fingerprint(&cfg).map_err(anyhow::Error::msg)?;
        println!("{} {fp} {v3}", cfg.nickname);
        return Ok(());
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(authority::run(cfg))
        .map_err(anyhow::Error::msg)?;
    Ok(())
}
