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

use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use onionmix_testbed::netinfo::NodeInfo;
use onionmix_testbed::socks::{self, Target};
use onionmix_testbed::spec::{Implementation, Role};
use onionmix_testbed::torctl;

fn status(node: &NodeInfo) -> serde_json::Value {
    std::fs::read_to_string(node.data_dir.join("status.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// A counter summed over nodes' status.json.
fn sum(nodes: &[NodeInfo], ptr: &str) -> u64 {
    nodes
        .iter()
        .map(|n| status(n).pointer(ptr).and_then(|v| v.as_u64()).unwrap_or(0))
        .sum()
}

fn wait_for_counter(nodes: &[NodeInfo], ptr: &str, at_least: u64, limit: Duration) -> u64 {
    common_net::wait_for(
        &format!("{ptr} >= {at_least}"),
        limit,
        Duration::from_millis(250),
        || {
            let v = sum(nodes, ptr);
            (v >= at_least).then_some(v)
        },
    )
}

/// Send `n` bytes to the sink's echo port and check the echo (an upload
/// and a download on one stream).
async fn echo(proxy: SocketAddr, echo: SocketAddr, n: usize) {
    let s = socks::connect(proxy, &Target::Addr(echo), None, Duration::from_secs(60))
        .await
        .unwrap();
    let (mut rd, mut wr) = tokio::io::split(s);
    let data: Vec<u8> = (0..n).map(|i| (i * 7 % 253) as u8).collect();
    let want = Sha256::digest(&data);
    let writer = tokio::spawn(async move {
        wr.write_all(&data).await.unwrap();
        wr
    });
    let mut got = vec![0u8; n];
    tokio::time::timeout(Duration::from_secs(180), rd.read_exact(&mut got))
        .await
        .expect("echo in time")
        .unwrap();
    let _wr = writer.await.unwrap();
    assert_eq!(Sha256::digest(&got), want, "echo of {n} bytes differs");
}

#[test]
fn stock_client_uses_conflux_through_our_exits() {
    if !common_net::tor_available("stock_client_uses_conflux_through_our_exits") {
        return;
    }
    let _serial = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let spec = r#"name = "conflux-our-exits"
description = "stock authorities, relays and client (default conflux); onionmix exits only"
[[nodes]]
impl = "tor"
role = "authority"
count = 3
[[nodes]]
impl = "tor"
role = "relay"
count = 4
[[nodes]]
impl = "onionmix"
role = "exit"
count = 2
[[nodes]]
impl = "tor"
role = "client"
"#;
    let p = tmp.path().join("spec.toml");
    std::fs::write(&p, spec).unwrap();
    let net = common_net::start(&p.display().to_string(), &tmp.path().join("net"));
    let info = net.info().clone();
    let stock = info.clients(Some(Implementation::Tor))[0].clone();
    let proxy = stock.socks_addr().unwrap();
    let sink = info.sink.clone().unwrap();
    let exits: Vec<NodeInfo> = info
        .nodes
        .iter()
        .filter(|n| n.implementation == Implementation::Onionmix && n.has_role(Role::Exit))
        .cloned()
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
    let legs = wait_for_counter(&exits, "/conflux/legs_linked", 2, Duration::from_secs(120));
    eprintln!("our exits linked {legs} conflux legs");

    rt.block_on(async {
        for _ in 0..2 {
            let (r, t) = common_net::download(
                proxy,
                &sink.http.ip().to_string(),
                sink.http.port(),
                20 << 20,
                None,
            )
            .await
            .unwrap();
            assert_eq!(r.status, 200);
            assert_eq!(r.body.len(), 20 << 20);
            assert!(r.sha256_ok(), "SHA-256 mismatch");
            eprintln!("20 MiB over conflux in {t:?}");
        }
        echo(proxy, sink.echo, 2 << 20).await;
    });
    let events = rt.block_on(async {
        // Status files are rewritten about every second.
        tokio::time::sleep(Duration::from_secs(2)).await;
        watch.finish().await
    });
    let linked: std::collections::BTreeSet<&str> = events
        .iter()
        .filter(|e| e.purpose.as_deref() == Some("CONFLUX_LINKED"))
        .map(|e| e.id.as_str())
        .collect();
    eprintln!(
        "stock client: {} CIRC/CIRC_MINOR events, circuits with PURPOSE=CONFLUX_LINKED: {linked:?}",
        events.len()
    );
    assert!(
        linked.len() >= 2,
        "the stock client reported no linked conflux legs"
    );
    let c = |k: &str| sum(&exits, &format!("/conflux/{k}"));
    eprintln!(
        "our exits: sets {} legs {} refused {} delivered {} reordered {} switches sent {} received {}",
        c("sets"),
        c("legs_linked"),
        c("refused"),
        c("cells_delivered"),
        c("cells_reordered"),
        c("switches_sent"),
        c("switches_received")
    );
    // The streams ran over sets: their messages were sequenced at our
    // exit (the 2 MiB upload alone is over 4000 DATA cells).
    assert!(c("cells_delivered") > 4000, "streams did not use the sets");
    // The downloads filled one leg's window and continued on the other.
    assert!(c("switches_sent") >= 1, "our exits never switched legs");
    assert_eq!(c("refused"), 0);
}

fn write_spec(dir: &std::path::Path, text: &str) -> String {
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// Our client on a network whose exits are `exit_impl`'s: once it holds a
/// pre-built set, a 20 MiB download on a fresh isolation key (so no
/// circuit of the launcher's checks is reused) runs over it; the exit
/// sends on both legs and our client puts the cells back in order.
fn our_client_over(exit_impl: &str, name: &str) {
    let _serial = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let spec = format!(
        r#"name = "{name}"
description = "our client; {exit_impl} exits"
[[nodes]]
impl = "tor"
role = "authority"
count = 3
[[nodes]]
impl = "tor"
role = "relay"
count = 4
[[nodes]]
impl = "{exit_impl}"
role = "exit"
count = 2
[[nodes]]
impl = "onionmix"
role = "client"
"#
    );
    let spec = write_spec(tmp.path(), &spec);
    let net = common_net::start(&spec, &tmp.path().join("net"));
    let info = net.info().clone();
    let om = info.clients(Some(Implementation::Onionmix))[0].clone();
    let proxy = om.socks_addr().unwrap();
    let sink = info.sink.clone().unwrap();
    let client = [om];
    let sets = wait_for_counter(
        &client,
        "/circuits/conflux/sets_linked",
        1,
        Duration::from_secs(120),
    );
    common_net::wait_for(
        "a clean conflux set",
        Duration::from_secs(120),
        Duration::from_millis(250),
        || (sum(&client, "/circuits/conflux/sets_clean") >= 1).then_some(()),
    );
    eprintln!("our client linked {sets} conflux set(s) to {exit_impl} exits");
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let (r, t) = common_net::download(
            proxy,
            &sink.http.ip().to_string(),
            sink.http.port(),
            20 << 20,
            Some(("conflux", "1")),
        )
        .await
        .unwrap();
        assert_eq!(r.status, 200);
        assert_eq!(r.body.len(), 20 << 20);
        assert!(r.sha256_ok(), "SHA-256 mismatch");
        eprintln!("20 MiB over a conflux set in {t:?}");
    });
    // 20 MiB is over 42000 DATA cells, all through the set's sequence
    // (status.json is rewritten about every second).
    wait_for_counter(
        &client,
        "/circuits/conflux/cells_delivered",
        42_000,
        Duration::from_secs(30),
    );
    // The exit moved to the other leg when one leg's window was full.
    wait_for_counter(
        &client,
        "/circuits/conflux/switches_received",
        1,
        Duration::from_secs(30),
    );
    let c = |k: &str| sum(&client, &format!("/circuits/conflux/{k}"));
    eprintln!(
        "our client: sets linked {} failed {} closed {} delivered {} reordered {} switches {}",
        c("sets_linked"),
        c("sets_failed"),
        c("sets_closed"),
        c("cells_delivered"),
        c("cells_reordered"),
        c("switches_received")
    );
}

#[test]
fn our_client_uses_conflux_through_stock_exits() {
    if !common_net::tor_available("our_client_uses_conflux_through_stock_exits") {
        return;
    }
    our_client_over("tor", "conflux-stock-exits");
}

#[test]
fn our_client_uses_conflux_through_our_exits() {
    if !common_net::tor_available("our_client_uses_conflux_through_our_exits") {
        return;
    }
    our_client_over("onionmix", "conflux-onionmix-exits");
}
