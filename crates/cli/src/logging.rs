//! Logging set-up shared by every subcommand.

use tracing_subscriber::prelude::*;
use tracing_subscriber::{EnvFilter, fmt};

/// Initialise `tracing` output on stderr. `--log` wins over `ONIONMIX_LOG`;
/// the default is `info`. Records at `info` and above also go to the
/// control port's NOTICE/WARN/ERR subscribers, whatever the filter.
pub fn init(cli_filter: Option<&str>) {
    let filter = cli_filter
        .map(str::to_owned)
        .or_else(|| std::env::var("ONIONMIX_LOG").ok())
        .unwrap_or_else(|| "info".to_owned());
    let filter = EnvFilter::try_new(&filter).unwrap_or_else(|_| EnvFilter::new("info"));
    let log = fmt::layer()
        .with_writer(std::io::stderr)
        .with_target(false)
        .with_filter(filter);
    let _ = tracing_subscriber::registry()
        .with(log)
        .with(onionmix_node::control::logs::layer())
        .try_init();
}
