//! `onionmix demo`: the README's main job.

use clap::Args;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// State directory for the demo network (a temp dir by default).
    #[arg(long)]
    dir: Option<std::path::PathBuf>,
}

pub fn run(_a: DemoArgs) -> anyhow::Result<()> {
    anyhow::bail!("demo: not built yet")
}
