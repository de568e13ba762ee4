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
pub struct HashPasswordArgs {
    /// The password (read from standard input when absent, one line).
    password: Option<String>,
}

/// Print `16:<hex>` for a password, as `tor --hash-password` does.
pub fn hash_password(a: HashPasswordArgs) -> anyhow::Result<()> {
    use rand::RngCore;
    let pw = match a.password {
        Some(p) => p,
        None => {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line)?;
            line.trim_end_matches(['\r', '\n']).to_string()
        }
    };
    let mut salt = [0u8; 8];
    rand::rngs::OsRng.fill_bytes(&mut salt);
    let h = onionmix_frontend::control::auth::HashedPassword::new(pw.as_bytes(), salt);
    println!("{h}");
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
