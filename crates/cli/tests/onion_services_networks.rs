//! Onion services on the built-in networks where onionmix relays serve the
//! onion-service roles: `onionmix-hs` (all onionmix: onionmix authorities
//! run shared randomness, onionmix relays are the HSDirs, introduction and
//! rendezvous points) and `mixed-hs` (stock authorities, stock and
//! onionmix relays: either may hold any role, for either implementation's
//! service). Every client downloads 1 MiB and 20 MiB from every service,
//! SHA-256 verified.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

use onionmix_testbed::launcher::{self, LaunchOptions, NetworkGuard};
use onionmix_testbed::spec::Spec;

fn every_client_reaches_every_service(spec_name: &str) {
    let _serial = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let spec = Spec::load(spec_name).unwrap();
    let mut opts = LaunchOptions::new(env!("CARGO_BIN_EXE_onionmix").into());
    opts.timeout = Some(common_net::TEST_BOOTSTRAP_TIMEOUT);
    // The launcher is ready only once every client carried a round trip to
    // every onion service (descriptor published, introduction, rendezvous).
    let net = NetworkGuard(Some(
        launcher::start(&spec, &tmp.path().join("net"), &opts)
            .unwrap_or_else(|e| panic!("{spec_name}: network start failed: {e}")),
    ));
    let info = net.info().clone();
    assert!(!info.onion_services.is_empty(), "{spec_name}: no services");
    let rt = tokio::runtime::Runtime::new().unwrap();
    for client in info.clients(None) {
        let proxy = client.socks_addr().unwrap();
        for svc in &info.onion_services {
            for n in [1u64 << 20, 20 << 20] {
                let who = format!(
                    "{spec_name}: {} ({:?}) -> {} ({:?}), {n} bytes",
                    client.name, client.implementation, svc.name, svc.implementation
                );
                let (r, t) = rt
                    .block_on(common_net::download(
                        proxy,
                        &svc.address,
                        svc.http_port,
                        n,
                        None,
                    ))
                    .unwrap_or_else(|e| panic!("{who}: {e}"));
                assert_eq!(r.status, 200, "{who}");
                assert_eq!(r.body.len() as u64, n, "{who}");
                assert!(r.sha256_ok(), "{who}: SHA-256 mismatch");
                eprintln!("{who} in {t:?}");
            }
        }
    }
    drop(net);
}

#[test]
fn all_onionmix_onion_service() {
    // The onionmix-hs network has no stock tor process.
    every_client_reaches_every_service("onionmix-hs");
}

#[test]
fn mixed_network_onion_services() {
    if !common_net::tor_available("mixed_network_onion_services") {
        return;
    }
    every_client_reaches_every_service("mixed-hs");
}
