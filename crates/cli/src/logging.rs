//! Logging set-up shared by every subcommand.

use tracing_subscriber::EnvFilter;

/// Initialise `tracing` output on stderr. `--log` wins over `ONIONMIX_LOG`;
/// the default is `info`.
pub fn init(cli_filter: Option<&str>) {
    let filter = cli_filter
        .map(str::to_owned)
        .or_else(|| std::env::var("ONIONMIX_LOG").ok())
        .unwrap_or_else(|| "info".to_owned());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}
