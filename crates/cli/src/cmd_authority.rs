//! `onionmix authority`: a v3 directory authority.

use clap::Args;

#[derive(Args, Debug)]
pub struct AuthorityArgs {
    /// Authority configuration file (TOML; see docs/authority.md).
    #[arg(long)]
    config: std::path::PathBuf,
}

pub fn run(_a: AuthorityArgs) -> anyhow::Result<()> {
    anyhow::bail!("authority: not built yet")
}
