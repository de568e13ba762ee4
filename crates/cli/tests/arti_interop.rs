//! Issue 11 item 8: Arti, the Tor Project's Rust client (a pinned release
//! from crates.io), uses onionmix networks: it bootstraps from an
//! all-onionmix network (`onionmix-basic`) and from a mixed one (stock tor
//! authorities, onionmix and stock relays: `mixed`) and carries 1 MiB and
//! 20 MiB downloads whose SHA-256 the sink's header confirms.
//!
//! Needs `arti` (`cargo install arti --version 2.7.0 --locked`; .ci/run
//! installs it) and, for `mixed`, stock tor; skipped with a message when
//! missing, failed when `ONIONMIX_REQUIRE_INTEROP=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

use std::time::Duration;

use onionmix_testbed::arti::{ArtiClient, arti_check};

fn arti_available(test: &str) -> bool {
    let ok = onionmix_testsupport::require_or_skip(test, arti_check().map(|_| ()));
    if ok {
        eprintln!("{test}: using {}", arti_check().unwrap_or_default());
    }
    ok
}

fn arti_downloads_over(spec: &str) {
    let _serial = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let net = common_net::start(spec, &tmp.path().join("net"));
    let info = net.info().clone();
    let sink = info.sink.clone().expect("sink");
    // Arti takes only Fast exits and picks its guard before the exit: in
    // a young network with one Fast exit, an Arti whose guard is that exit
    // has no path at all. Wait for the flags; should they still be
    // missing, a new Arti (new state, new guard) gets another try.
    common_net::wait_for_exit_flags(
        &info,
        &["Fast", "Running", "Valid"],
        Duration::from_secs(180),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    const ATTEMPTS: usize = 3;
    for attempt in 1..=ATTEMPTS {
        let arti = ArtiClient::start(&info, &tmp.path().join(format!("arti{attempt}"))).unwrap();
        let boot = arti
            .wait_bootstrapped(Duration::from_secs(180))
            .unwrap_or_else(|e| panic!("{spec}: {e}"));
        eprintln!("{spec}: arti bootstrapped in {boot:.1?}");
        let mut failed = None;
        for n in [1u64 << 20, 20 << 20] {
            let r = rt.block_on(common_net::download(
                arti.socks,
                &sink.hostname,
                sink.http.port(),
                n,
                None,
            ));
            match r {
                Ok((resp, took)) => {
                    assert_eq!(resp.body.len() as u64, n, "{spec}: length");
                    assert!(resp.sha256_ok(), "{spec}: SHA-256 of {n} bytes");
                    eprintln!("{spec}: arti downloaded {n} bytes in {took:.2?}, SHA-256 verified");
                }
                // Only a first request that Arti refused at SOCKS (no
                // path) is retried: a download that broke after it
                // started is a failure.
                Err(e)
                    if n == 1 << 20
                        && attempt < ATTEMPTS
                        && e.to_string().contains("SOCKS reply") =>
                {
                    failed = Some(e);
                    break;
                }
                Err(e) => panic!(
                    "{spec}: {n}-byte download through arti failed: {e}\n{}",
                    onionmix_testbed::proc::tail(&arti.log, 30)
                ),
            }
        }
        match failed {
            None => return,
            Some(e) => eprintln!(
                "{spec}: attempt {attempt}: arti found no path ({e}); a new Arti tries again\n{}",
                onionmix_testbed::proc::tail(&arti.log, 10)
            ),
        }
    }
}

#[test]
fn arti_uses_an_all_onionmix_network() {
    if !arti_available("arti_uses_an_all_onionmix_network") {
        return;
    }
    arti_downloads_over("onionmix-basic");
}

#[test]
fn arti_uses_a_mixed_network() {
    if !arti_available("arti_uses_a_mixed_network")
        || !common_net::tor_available("arti_uses_a_mixed_network")
    {
        return;
    }
    arti_downloads_over("mixed");
}
