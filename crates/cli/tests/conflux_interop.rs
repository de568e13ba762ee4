//! Conflux (proposal 329) with stock tor 0.4.9, both ways. A stock client
//! with its default conflux setting (no `ConfluxEnabled 0`) pre-builds
//! conflux sets to our exits (the only exits of the network), links two
//! legs each, and carries its streams over them: its control port reports
//! its legs changing purpose to `CONFLUX_LINKED`, and our exits' counters
//! (status.json) show linked legs, multiplexed cells delivered in order
//! and SWITCHes both ways. Our client links sets to stock exits, and to
//! ours, and downloads over them: its counters show the sets and the
//! exit's SWITCHes it put back in order. Transfers are SHA-256 verified.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

mod common_net;

use std::net::SocketAddr;
use std::time::Duration;

use common_net::{status_sum, wait_for_status};
use onionmix_testbed::launcher::NetworkGuard;
use onionmix_testbed::netinfo::NodeInfo;
use onionmix_testbed::spec::{Implementation, Role};
use onionmix_testbed::torctl;

/// Stock authorities and middles; two exits and one client of the given
/// implementations.
fn start(dir: &std::path::Path, exits: &str, client: &str) -> NetworkGuard {
    let spec = format!(
        r#"name = "conflux-{exits}-exits-{client}-client"
description = "stock authorities and relays; {exits} exits, a {client} client"
[[nodes]]
impl = "tor"
role = "authority"
count = 3
[[nodes]]
impl = "tor"
role = "relay"
count = 4
[[nodes]]
impl = "{exits}"
role = "exit"
count = 2
[[nodes]]
impl = "{client}"
role = "client"
"#
    );
    let spec = common_net::write_spec(dir, &spec);
    common_net::start(&spec, &dir.join("net"))
}

/// Download 20 MiB from the sink through `proxy` (SOCKS credentials
/// `auth` pick the isolation key), SHA-256 checked.
async fn download_20m(proxy: SocketAddr, sink: SocketAddr, auth: Option<(&str, &str)>) {
    let (r, t) = common_net::download(proxy, &sink.ip().to_string(), sink.port(), 20 << 20, auth)
        .await
        .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len(), 20 << 20);
    assert!(r.sha256_ok(), "SHA-256 mismatch");
    eprintln!("20 MiB over conflux in {t:?}");
}

/// Print the conflux counters under `base` of `nodes`' status.json.
fn report(who: &str, nodes: &[&NodeInfo], base: &str, keys: &[&str]) {
    let line: Vec<String> = keys
        .iter()
        .map(|k| format!("{k} {}", status_sum(nodes, &format!("{base}/{k}"))))
        .collect();
    eprintln!("{who}: {}", line.join(", "));
}

#[test]
fn stock_client_uses_conflux_through_our_exits() {
    if !common_net::tor_available("stock_client_uses_conflux_through_our_exits") {
        return;
    }
    let _serial = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let net = start(tmp.path(), "onionmix", "tor");
    let info = net.info().clone();
    let stock = info.clients(Some(Implementation::Tor))[0].clone();
    let proxy = stock.socks_addr().unwrap();
    let sink = info.sink.clone().unwrap();
    let exits: Vec<&NodeInfo> = info
        .nodes
        .iter()
        .filter(|n| n.implementation == Implementation::Onionmix && n.has_role(Role::Exit))
        .collect();
    let control = SocketAddr::from(([127, 0, 0, 1], stock.control_port.unwrap()));
    let cookie = stock.data_dir.join("control_auth_cookie");
    // Our exits advertise Conflux=1 (the stock client counts the share of
    // exits that do before it builds any set).
    let auth = info
        .nodes
        .iter()
        .find(|n| n.has_role(Role::Authority))
        .and_then(NodeInfo::dir_addr)
        .expect("an authority DirPort");
    let desc = common_net::dir_get(auth, "/tor/server/all");
    assert!(
        desc.matches("proto Conflux=1 ").count() >= exits.len(),
        "our exits' descriptors do not say Conflux=1"
    );

    let rt = tokio::runtime::Runtime::new().unwrap();
    let watch = rt
        .block_on(torctl::watch_circ_events(
            control,
            &cookie,
            Duration::from_secs(30),
        ))
        .unwrap();
    // The stock client pre-builds conflux sets (3 by default) once it has
    // a consensus with exits that support conflux: two legs per set,
    // each linked at one of our exits.
    let legs = wait_for_status(&exits, "/conflux/legs_linked", 2, Duration::from_secs(120));
    eprintln!("our exits linked {legs} conflux legs");
    rt.block_on(async {
        for _ in 0..2 {
            download_20m(proxy, sink.http, None).await;
        }
        common_net::echo_verified(proxy, sink.echo, 2 << 20).await;
    });
    // The streams ran over sets: their messages were sequenced at our
    // exit (the 2 MiB upload alone is over 4000 DATA cells), and the
    // downloads filled one leg's window and continued on the other.
    wait_for_status(
        &exits,
        "/conflux/cells_delivered",
        4000,
        Duration::from_secs(30),
    );
    wait_for_status(&exits, "/conflux/switches_sent", 1, Duration::from_secs(30));
    let events = rt.block_on(watch.finish());
    // Legs linked after we subscribed, and those linked before (the
    // launcher's own round trip may have used a set already) that are
    // still open.
    let open = rt
        .block_on(torctl::getinfo_lines(
            control,
            &cookie,
            "circuit-status",
            Duration::from_secs(30),
        ))
        .unwrap();
    let linked: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|e| e.purpose.as_deref() == Some("CONFLUX_LINKED"))
        .map(|e| e.id.as_str())
        .chain(
            open.iter()
                .filter(|l| l.split(' ').any(|f| f == "PURPOSE=CONFLUX_LINKED"))
                .filter_map(|l| l.split(' ').next()),
        )
        .collect();
    eprintln!(
        "stock client: {} CIRC/CIRC_MINOR events, circuits with PURPOSE=CONFLUX_LINKED (events and circuit-status): {linked:?}",
        events.len()
    );
    assert!(
        linked.len() >= 2,
        "the stock client reported no linked conflux legs"
    );
    report(
        "our exits",
        &exits,
        "/conflux",
        &[
            "sets",
            "legs_linked",
            "refused",
            "cells_delivered",
            "cells_reordered",
            "switches_sent",
            "switches_received",
        ],
    );
    assert_eq!(status_sum(&exits, "/conflux/refused"), 0);
}

/// Our client on a network whose exits are `exits`': once it holds a
/// pre-built set, a 20 MiB download on a fresh isolation key (so no
/// circuit of the launcher's checks is reused) runs over it; the exit
/// sends on both legs and our client puts the cells back in order.
fn our_client_over(exits: &str) {
    let _serial = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let net = start(tmp.path(), exits, "onionmix");
    let info = net.info().clone();
    let om = info.clients(Some(Implementation::Onionmix))[0];
    let proxy = om.socks_addr().unwrap();
    let sink = info.sink.clone().unwrap();
    let client = [om];
    let sets = wait_for_status(
        &client,
        "/circuits/conflux/sets_linked",
        1,
        Duration::from_secs(120),
    );
    // A clean set, in a status.json written after the launcher's own
    // round trips were done: an older snapshot can list as clean a set
    // that one of them took since (it prefers sets too), and the download
    // would then run on a plain circuit.
    let ready = std::time::SystemTime::now();
    onionmix_testsupport::wait_for_seen(
        "a clean conflux set in a status.json written after the network was ready",
        Duration::from_secs(120),
        Duration::from_millis(200),
        || {
            let written = std::fs::metadata(om.data_dir.join("status.json"))
                .and_then(|m| m.modified())
                .is_ok_and(|t| t > ready);
            let clean = status_sum(&client, "/circuits/conflux/sets_clean");
            if written && clean >= 1 {
                Ok(())
            } else {
                Err((written, clean))
            }
        },
    );
    eprintln!("our client linked {sets} conflux set(s) to {exits} exits");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(download_20m(proxy, sink.http, Some(("conflux", "1"))));
    eprintln!(
        "our client's conflux counters after the download: {}",
        common_net::node_status(om)
            .pointer("/circuits/conflux")
            .cloned()
            .unwrap_or_default()
    );
    // 20 MiB is over 42000 DATA cells, all through the set's sequence;
    // the exit moved to the other leg when one leg's window was full.
    wait_for_status(
        &client,
        "/circuits/conflux/cells_delivered",
        42_000,
        Duration::from_secs(30),
    );
    wait_for_status(
        &client,
        "/circuits/conflux/switches_received",
        1,
        Duration::from_secs(30),
    );
    report(
        "our client",
        &client,
        "/circuits/conflux",
        &[
            "sets_linked",
            "sets_failed",
            "sets_closed",
            "cells_delivered",
            "cells_reordered",
            "switches_received",
        ],
    );
}

#[test]
fn our_client_uses_conflux_through_stock_exits() {
    if !common_net::tor_available("our_client_uses_conflux_through_stock_exits") {
        return;
    }
    our_client_over("tor");
}

#[test]
fn our_client_uses_conflux_through_our_exits() {
    if !common_net::tor_available("our_client_uses_conflux_through_our_exits") {
        return;
    }
    our_client_over("onionmix");
}
