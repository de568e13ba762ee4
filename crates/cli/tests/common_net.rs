//! Shared helpers for tests that start networks with the launcher.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use onionmix_testbed::http;
use onionmix_testbed::launcher::{self, LaunchOptions, NetworkGuard};
use onionmix_testbed::socks::{self, Target};
use onionmix_testbed::spec::Spec;

/// Whether stock tor is available; prints a skip message, or panics when
/// ONIONMIX_REQUIRE_INTEROP=1.
pub fn tor_available(test: &str) -> bool {
    let ok = std::process::Command::new("tor")
        .arg("--version")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    if !ok {
        if std::env::var("ONIONMIX_REQUIRE_INTEROP").as_deref() == Ok("1") {
            panic!(
                "{test}: stock tor is required (ONIONMIX_REQUIRE_INTEROP=1) but `tor` is not on PATH; install it with: apt-get install -y tor"
            );
        }
        eprintln!("SKIP {test}: stock tor not found; install it with: apt-get install -y tor");
    }
    ok
}

/// Start a built-in network in `dir` with the test binary.
pub fn start(spec: &str, dir: &Path) -> NetworkGuard {
    let spec = Spec::load(spec).expect("spec");
    let opts = LaunchOptions::new(env!("CARGO_BIN_EXE_onionmix").into());
    let net =
        launcher::start(&spec, dir, &opts).unwrap_or_else(|e| panic!("network start failed: {e}"));
    NetworkGuard(Some(net))
}

/// Download `/bytes/<n>` from the sink through a SOCKS proxy; returns the
/// response (body verified by the caller) and the elapsed time.
pub async fn download(
    proxy: SocketAddr,
    host: &str,
    port: u16,
    n: u64,
    auth: Option<(&str, &str)>,
) -> Result<(http::Response, Duration), String> {
    let t0 = Instant::now();
    let mut s = socks::connect(
        proxy,
        &Target::Host(host.to_string(), port),
        auth,
        Duration::from_secs(60),
    )
    .await
    .map_err(|e| e.to_string())?;
    let r = tokio::time::timeout(
        Duration::from_secs(120),
        http::get(&mut s, host, &format!("/bytes/{n}"), t0),
    )
    .await
    .map_err(|_| "download timed out".to_string())?
    .map_err(|e| e.to_string())?;
    Ok((r, t0.elapsed()))
}

/// [`download`] with up to 3 attempts 2 s apart, for requests through a
/// stock tor client whose first streams after bootstrap can fail.
pub async fn download_retry(
    proxy: SocketAddr,
    host: &str,
    port: u16,
    n: u64,
) -> Result<(http::Response, Duration), String> {
    let mut last = String::new();
    for attempt in 0..3 {
        match download(proxy, host, port, n, None).await {
            Ok(r) => return Ok(r),
            Err(e) => {
                eprintln!("attempt {} through {proxy} failed: {e}", attempt + 1);
                last = e;
                tokio::time::sleep(Duration::from_secs(2)).await;
            }
        }
    }
    Err(last)
}
