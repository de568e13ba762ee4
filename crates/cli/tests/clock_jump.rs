//! Issue 11 item 1: a network whose clock moves forward 3, 10 and 40 days
//! keeps building new links and carrying verified downloads, with stock tor
//! peers in it.
//!
//! The `tor-client-onionmix-network` network (onionmix authorities;
//! onionmix and stock relays and exits; stock tor and onionmix clients) runs
//! under libfaketime with one clock file for every node. After each jump
//! the authorities must publish a consensus made after the jump that lists
//! every relay as Running (they test each relay's reachability over a new
//! link, checking its certificates, renewed or not), and both clients carry
//! a verified 1 MiB download, the stock tor client building new links to
//! our relays with their renewed certificates.
//!
//! A stock relay still missing 90 s after a jump is restarted (stock tor
//! renews the RSA identity certificate it presents only with its TLS
//! context, every 2 hours; a 40-day jump in one step can leave it expired,
//! which every peer refuses); onionmix relays must recover on their own.
//!
//! Stock tor authorities are not used here: after a jump past their 45-min
//! reachability window they re-test one relay in 128 every 10 s, so every
//! relay is Running again only after about 21 minutes (docs/reliability.md).
//! Needs `tor` and `faketime` (Debian packages of those names).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use onionmix_testbed::launcher::{self, LaunchOptions, NetworkGuard};
use onionmix_testbed::spec::{Implementation, Role, Spec};

/// How long the network may take to recover from one jump.
const RECOVERY: Duration = Duration::from_secs(600);

fn faketime_available() -> bool {
    onionmix_testsupport::require_or_skip(
        "clock_jump",
        launcher::libfaketime().map(|_| ()).ok_or_else(|| {
            "libfaketime is not installed (apt-get install -y faketime)".to_string()
        }),
    )
}

fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// The consensus `auth` serves: its `valid-after` (Unix seconds) and the
/// nicknames listed with the Running flag.
fn consensus(auth: SocketAddr) -> Option<(f64, Vec<String>)> {
    let text = launcher::http_get_plain(auth, "/tor/status-vote/current/consensus-microdesc")?;
    let va = text
        .lines()
        .find_map(|l| l.strip_prefix("valid-after "))
        .and_then(|t| onionmix_testbed::torctl::parse_iso_usec(&t.replace(' ', "T")))?;
    let mut running = Vec::new();
    let mut nick = None;
    for l in text.lines() {
        if let Some(r) = l.strip_prefix("r ") {
            nick = r.split_whitespace().next().map(str::to_string);
        } else if let Some(s) = l.strip_prefix("s ")
            && s.split_whitespace().any(|f| f == "Running")
            && let Some(n) = nick.take()
        {
            running.push(n);
        }
    }
    Some((va, running))
}

#[test]
fn network_survives_clock_jumps_of_3_10_and_40_days() {
    if !common_net::tor_available("clock_jump") || !faketime_available() {
        return;
    }
    let _serial = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let clock = tmp.path().join("clock");
    std::fs::write(&clock, "+0\n").unwrap();
    let spec = Spec::load("tor-client-onionmix-network").unwrap();
    let mut opts = LaunchOptions::new(env!("CARGO_BIN_EXE_onionmix").into());
    opts.timeout = Some(common_net::TEST_BOOTSTRAP_TIMEOUT);
    opts.clock_file = Some(clock.clone());
    let mut net = NetworkGuard(Some(
        launcher::start(&spec, &tmp.path().join("net"), &opts).expect("network start"),
    ));
    let info = net.info().clone();
    let sink = info.sink.clone().unwrap();
    let auth = info
        .nodes
        .iter()
        .find(|n| n.has_role(Role::Authority))
        .and_then(|n| n.dir_addr())
        .unwrap();
    let relays: Vec<String> = info
        .nodes
        .iter()
        .filter(|n| !n.has_role(Role::Client))
        .map(|n| n.name.clone())
        .collect();
    let clients: Vec<(String, SocketAddr)> = info
        .clients(None)
        .iter()
        .map(|c| (c.name.clone(), c.socks_addr().unwrap()))
        .collect();
    assert!(
        info.nodes
            .iter()
            .any(|n| n.implementation == Implementation::Tor && n.has_role(Role::Relay)),
        "stock tor relays in the network"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();

    for days in [3u64, 10, 40] {
        std::fs::write(&clock, format!("+{days}d\n")).unwrap();
        let jumped = Instant::now();
        let faked_now = now_unix() + (days * 86400) as f64;
        // A consensus voted after the jump that lists every relay Running.
        let mut last = None;
        let mut restarted: Vec<String> = Vec::new();
        loop {
            if let Some((va, running)) = consensus(auth) {
                let missing: Vec<String> = relays
                    .iter()
                    .filter(|r| !running.contains(r))
                    .cloned()
                    .collect();
                if va >= faked_now - 60.0 && missing.is_empty() {
                    break;
                }
                // A stock relay still missing 90 s after the jump is
                // restarted, once per jump. Stock tor makes its TLS context,
                // and with it the RSA identity certificate it presents
                // (valid for a year from a random point in the past year),
                // anew only every 2 hours of monotonic time; a 40-day jump
                // in one step can leave that certificate expired, and every
                // peer (stock tor's own 48-hour slop, ours the same) refuses
                // the link until the next rotation. A relay running through
                // those 40 days would have rotated hundreds of times; the
                // restart stands for that. Our relays are never restarted.
                if va >= faked_now - 60.0 && jumped.elapsed() > Duration::from_secs(90) {
                    let stock: Vec<String> = net
                        .info()
                        .nodes
                        .iter()
                        .filter(|n| {
                            n.implementation == Implementation::Tor
                                && missing.contains(&n.name)
                                && !restarted.contains(&n.name)
                        })
                        .map(|n| n.name.clone())
                        .collect();
                    for name in stock {
                        let r = net.0.as_mut().unwrap().restart_tor_node(
                            &name,
                            &opts.tor_bin,
                            Some(&clock),
                        );
                        match r {
                            Ok(()) => restarted.push(name),
                            Err(e) => eprintln!("cannot restart {name}: {e}"),
                        }
                    }
                }
                last = Some((va - faked_now, missing));
            }
            assert!(
                jumped.elapsed() < RECOVERY,
                "+{days} days: no consensus after the jump listing every relay Running \
                 (last: valid-after minus jump time, relays missing: {last:?}; \
                 stock relays restarted: {restarted:?})"
            );
            std::thread::sleep(Duration::from_secs(5));
        }
        if !restarted.is_empty() {
            eprintln!("+{days} days: stock relays restarted: {restarted:?}");
        }
        let consensus_after = jumped.elapsed();
        // Both clients carry a verified download.
        for (name, socks) in &clients {
            let mut failures = Vec::new();
            loop {
                let r = rt.block_on(common_net::download(
                    *socks,
                    &sink.hostname,
                    sink.http.port(),
                    1 << 20,
                    None,
                ));
                match r {
                    Ok((resp, _)) if resp.sha256_ok() && resp.body.len() == 1 << 20 => break,
                    Ok(_) => panic!("+{days} days: {name} got wrong bytes"),
                    Err(e) => failures.push(e),
                }
                assert!(
                    jumped.elapsed() < RECOVERY,
                    "+{days} days: {name} could not download: {failures:?}"
                );
                std::thread::sleep(Duration::from_secs(3));
            }
            eprintln!(
                "+{days} days: {name} downloaded 1 MiB after {} failed tries",
                failures.len()
            );
        }
        eprintln!(
            "+{days} days: fresh consensus listing all {} relays after {consensus_after:?}; \
             both clients downloaded by {:?}",
            relays.len(),
            jumped.elapsed()
        );
    }
    drop(net);
}
