//! Issue 15: whole networks with QUIC links between onionmix nodes,
//! started by the launcher (`links = "quic"` in the spec).
//!
//! - `onionmix-basic-quic` (loopback): relays advertise `onionmix-quic` in
//!   their microdescriptors, every link between onionmix nodes is QUIC (as
//!   `onionmix testnet status` and network.json show), and the client
//!   carries verified 1 MiB and 20 MiB downloads.
//! - `mixed-quic` (stock tor relays, exits and client with onionmix
//!   authorities, relays, exits and client): both clients carry verified
//!   20 MiB downloads; links between onionmix nodes are QUIC, links with
//!   stock tor relays TLS, as `testnet status` shows.
//! - Through the link emulator (root): `onionmix-basic-quic-20ms` carries a
//!   verified download; with UDP blocked between the only exit and every
//!   relay and authority, their links to it fall back to TLS (the others
//!   stay QUIC) and the download still completes.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

mod common_net;

use std::path::Path;

use onionmix_testbed::netinfo::{NetworkInfo, NodeInfo};
use onionmix_testbed::spec::{Implementation, Spec};

/// `onionmix testnet status` for `dir`: its output and the network.json it
/// refreshed.
fn status(dir: &Path) -> (String, NetworkInfo) {
    let out = common_net::onionmix_cmd()
        .args(["testnet", "status", "--dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    (text, NetworkInfo::load(dir).unwrap())
}

/// [`status`], polled until `ready` holds or 30 s pass (the last one is
/// returned either way, for the caller's assertions). Relays rewrite their
/// status.json about once a second, so a link opened just before the call
/// may not show yet.
fn status_when(dir: &Path, ready: impl Fn(&str, &NetworkInfo) -> bool) -> (String, NetworkInfo) {
    let t0 = std::time::Instant::now();
    let limit = std::time::Duration::from_secs(30);
    common_net::wait_for(
        "testnet status",
        limit * 2,
        std::time::Duration::from_millis(500),
        || {
            let (text, info) = status(dir);
            (ready(&text, &info) || t0.elapsed() > limit).then_some((text, info))
        },
    )
}

/// The transports of links onionmix relays report with clients.
fn client_links(info: &NetworkInfo) -> Vec<String> {
    info.nodes
        .iter()
        .flat_map(|n| n.links.iter())
        .filter(|l| l.peer == "client")
        .map(|l| l.transport.clone())
        .collect()
}

fn is_onionmix(info: &NetworkInfo, peer: &str) -> Option<bool> {
    info.node(peer)
        .map(|n| n.implementation == Implementation::Onionmix)
}

/// Every link an onionmix relay reported to another relay: (node, peer,
/// peer is onionmix, transport).
fn relay_links(info: &NetworkInfo) -> Vec<(String, String, bool, String)> {
    info.nodes
        .iter()
        .flat_map(|n: &NodeInfo| {
            n.links.iter().filter_map(|l| {
                let om = is_onionmix(info, &l.peer)?;
                Some((n.name.clone(), l.peer.clone(), om, l.transport.clone()))
            })
        })
        .collect()
}

/// Download `n` bytes from the sink through `socks`, verified.
fn fetch(rt: &tokio::runtime::Runtime, info: &NetworkInfo, socks: std::net::SocketAddr, n: u64) {
    let sink = info.sink.clone().unwrap();
    let (r, t) = rt
        .block_on(common_net::download(
            socks,
            &sink.hostname,
            sink.http.port(),
            n,
            None,
        ))
        .unwrap_or_else(|e| panic!("{n} bytes through {socks}: {e}"));
    assert!(
        r.body.len() as u64 == n && r.sha256_ok(),
        "{n} bytes verified"
    );
    eprintln!("{n} bytes through {socks} in {t:?}");
}

#[test]
fn onionmix_basic_quic_network() {
    let _serial = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let net = common_net::start("onionmix-basic-quic", &dir);
    let info = net.info().clone();

    // The relays' QUIC line reaches the microdescriptors.
    let auth = info.node("omauth0").unwrap().dir_addr().unwrap();
    let cons = common_net::dir_get(auth, "/tor/status-vote/current/consensus-microdesc");
    let md = cons.lines().find_map(|l| l.strip_prefix("m ")).unwrap();
    let body = common_net::dir_get(auth, &format!("/tor/micro/d/{md}"));
    assert!(body.contains("\nonionmix-quic "), "{body}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let socks = info.clients(None)[0].socks_addr().unwrap();
    fetch(&rt, &info, socks, 1 << 20);
    fetch(&rt, &info, socks, 20 << 20);

    // Every link between onionmix nodes is QUIC: relays and authorities
    // among themselves, and the client's to its first hops.
    let (text, info) = status_when(&dir, |_, i| {
        relay_links(i).len() >= 8 && !client_links(i).is_empty()
    });
    assert!(text.contains("links of onionmix relays"), "{text}");
    let links = relay_links(&info);
    assert!(links.len() >= 8, "{links:?}");
    for (node, peer, _, t) in &links {
        assert_eq!(t, "quic", "{node} - {peer}\n{text}");
    }
    let client_links = client_links(&info);
    assert!(!client_links.is_empty(), "{text}");
    assert!(client_links.iter().all(|t| t == "quic"), "{text}");
    drop(net);
}

#[test]
fn mixed_quic_network() {
    let _serial = common_net::serial();
    if !common_net::tor_available("mixed_quic_network") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let net = common_net::start("mixed-quic", &dir);
    let info = net.info().clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    for c in info.clients(None) {
        fetch(&rt, &info, c.socks_addr().unwrap(), 20 << 20);
    }
    // Onionmix to onionmix: QUIC; onionmix to stock tor: TLS. Our
    // authorities test every relay's reachability, so both kinds exist.
    let (text, info) = status_when(&dir, |t, _| t.contains(" quic ") && t.contains(" tls "));
    let links = relay_links(&info);
    let mut seen = (0, 0);
    for (node, peer, om, t) in &links {
        if *om {
            assert_eq!(t, "quic", "{node} - {peer}\n{text}");
            seen.0 += 1;
        } else {
            assert_eq!(t, "tls", "{node} - {peer}\n{text}");
            seen.1 += 1;
        }
    }
    assert!(seen.0 > 0 && seen.1 > 0, "{links:?}\n{text}");
    assert!(text.contains(" quic ") && text.contains(" tls "), "{text}");
    drop(net);
}

#[test]
fn onionmix_basic_quic_20ms_through_the_emulator() {
    let _serial = common_net::serial();
    if !common_net::emulator_available("onionmix_basic_quic_20ms_through_the_emulator") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let net = common_net::start("onionmix-basic-quic-20ms", &dir);
    let info = net.info().clone();
    let socks = info.clients(None)[0].socks_addr().unwrap();
    assert!(!socks.ip().is_loopback(), "nodes get their own addresses");
    let rt = tokio::runtime::Runtime::new().unwrap();
    fetch(&rt, &info, socks, 5 << 20);
    let (text, info) = status_when(&dir, |_, i| !relay_links(i).is_empty());
    let links = relay_links(&info);
    assert!(!links.is_empty(), "{text}");
    assert!(links.iter().all(|l| l.3 == "quic"), "{text}");
    drop(net);
}

/// onionmix-basic-quic-20ms with one exit, UDP blocked between it and
/// every relay and authority.
fn udp_blocked_spec() -> Spec {
    let mut text = String::from(
        "name = \"quic-udp-blocked\"\nlinks = \"quic\"\nbootstrap_timeout_secs = 180\n\
         [emulation]\nseed = 1\ndefault = { delay_ms = 20.0 }\n",
    );
    for peer in [
        "omauth0", "omauth1", "omauth2", "omrelay0", "omrelay1", "omrelay2",
    ] {
        text.push_str(&format!(
            "[[emulation.pairs]]\nfrom = \"omexit0\"\nto = \"{peer}\"\n\
             profile = {{ delay_ms = 20.0, drop_udp = true }}\n"
        ));
    }
    for (role, n) in [("authority", 3), ("relay", 3), ("exit", 1), ("client", 1)] {
        text.push_str(&format!(
            "[[nodes]]\nimpl = \"onionmix\"\nrole = \"{role}\"\ncount = {n}\n"
        ));
    }
    Spec::parse("quic-udp-blocked", &text).unwrap()
}

#[test]
fn blocked_udp_falls_back_to_tls() {
    let _serial = common_net::serial();
    if !common_net::emulator_available("blocked_udp_falls_back_to_tls") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let net = common_net::start_spec(&udp_blocked_spec(), &dir);
    let info = net.info().clone();
    let socks = info.clients(None)[0].socks_addr().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    // Every circuit ends at omexit0: its last hop had to fall back.
    fetch(&rt, &info, socks, 5 << 20);
    let (text, info) = status_when(&dir, |_, i| {
        let l = relay_links(i);
        l.iter().any(|l| l.0 == "omexit0" || l.1 == "omexit0")
            && l.iter().any(|l| l.0 != "omexit0" && l.1 != "omexit0")
    });
    let links = relay_links(&info);
    let (mut to_exit, mut others) = (0, 0);
    for (node, peer, _, t) in &links {
        if node == "omexit0" || peer == "omexit0" {
            assert_eq!(t, "tls", "{node} - {peer}\n{text}");
            to_exit += 1;
        } else {
            assert_eq!(t, "quic", "{node} - {peer}\n{text}");
            others += 1;
        }
    }
    assert!(to_exit > 0 && others > 0, "{text}");
    // The emulator did drop the QUIC datagrams.
    let emu = info.emulator.clone().unwrap();
    let st = onionmix_emu::run::read_status(&emu.state_dir).unwrap();
    let dropped: u64 = st.links.iter().map(|l| l.counters.drop_udp).sum();
    assert!(dropped > 0, "{}", st.render_table(false));
    drop(net);
}
