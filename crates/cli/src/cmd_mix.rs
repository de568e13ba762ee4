//! `onionmix mix`, `onionmix provider`, `onionmix mix-client`: Loopix nodes
//! (crate `onionmix-mix`).

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, Subcommand};
use onionmix_mix::loopix::config::{NodeConfig, Role};
use onionmix_mix::{net, testnet};

#[derive(Args, Debug)]
pub struct MixArgs {
    /// Node configuration file (TOML).
    #[arg(long)]
    config: PathBuf,
}

#[derive(Args, Debug)]
pub struct ProviderArgs {
    /// Node configuration file (TOML).
    #[arg(long)]
    config: PathBuf,
}

#[derive(Subcommand, Debug)]
pub enum MixClientCmd {
    /// Run the client loop: cover traffic, pulls, print delivered messages.
    Run {
        #[arg(long)]
        config: PathBuf,
    },
    /// Queue a message for a recipient (by client name) with a running
    /// client: FILE is a path or `-` for stdin.
    Send {
        #[arg(long)]
        config: PathBuf,
        recipient: String,
        file: String,
    },
    /// Generate a Loopix network (keys, configs, directory) from a spec and
    /// print the commands that start it.
    GenNetwork {
        /// Network spec (TOML), e.g. testnets/loopix.toml.
        #[arg(long)]
        spec: PathBuf,
        /// State directory to create.
        #[arg(long)]
        state_dir: PathBuf,
    },
}

fn load(config: &std::path::Path, want: Role) -> anyhow::Result<NodeConfig> {
    let cfg = NodeConfig::load(config).map_err(anyhow::Error::msg)?;
    if cfg.role != want {
        anyhow::bail!(
            "{} configures a {:?}, not a {:?}",
            config.display(),
            cfg.role,
            want
        );
    }
    Ok(cfg)
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = tokio::signal::ctrl_c() => {}
                    _ = term.recv() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("start tokio runtime")
}

pub fn run_mix(a: MixArgs) -> anyhow::Result<()> {
    let cfg = load(&a.config, Role::Mix)?;
    runtime()?.block_on(net::run_mix_node(cfg, shutdown_signal()))?;
    Ok(())
}

pub fn run_provider(a: ProviderArgs) -> anyhow::Result<()> {
    let cfg = load(&a.config, Role::Provider)?;
    runtime()?.block_on(net::run_mix_node(cfg, shutdown_signal()))?;
    Ok(())
}

pub fn run_client(c: MixClientCmd) -> anyhow::Result<()> {
    match c {
        MixClientCmd::Run { config } => {
            let cfg = load(&config, Role::Client)?;
            runtime()?.block_on(net::run_client(cfg, shutdown_signal()))?;
        }
        MixClientCmd::Send {
            config,
            recipient,
            file,
        } => {
            let cfg = load(&config, Role::Client)?;
            let outbox = cfg
                .outbox_dir
                .context("the client config has no outbox_dir")?;
            let mut msg = Vec::new();
            if file == "-" {
                std::io::stdin()
                    .read_to_end(&mut msg)
                    .context("read stdin")?;
            } else {
                msg = std::fs::read(&file).with_context(|| format!("read {file}"))?;
            }
            let max = onionmix_mix::loopix::codec::Profile::loopix(cfg.profile).max_message();
            if msg.len() > max {
                anyhow::bail!(
                    "message is {} bytes; one packet carries at most {max}",
                    msg.len()
                );
            }
            let p = net::write_outbox(&outbox, &recipient, &msg)?;
            println!(
                "queued {} bytes for {recipient} ({})",
                msg.len(),
                p.display()
            );
        }
        MixClientCmd::GenNetwork { spec, state_dir } => {
            let text = std::fs::read_to_string(&spec)
                .with_context(|| format!("read {}", spec.display()))?;
            let spec = testnet::LoopixSpec::from_toml(&text).map_err(anyhow::Error::msg)?;
            let (_g, procs) = testnet::generate(&spec, &state_dir).map_err(anyhow::Error::msg)?;
            for p in procs {
                println!("onionmix {}", p.argv.join(" "));
            }
        }
    }
    Ok(())
}
