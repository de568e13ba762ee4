//! Conflux (proposal 329) between our client and our exit, in process:
//! two circuits to one exit through different guards and middles are
//! linked into a set; downloads and uploads run over it, SHA-256 checked;
//! the exit sends on both legs (SWITCH) and the client puts the cells
//! back in order. Closing a leg closes the set, as in tor.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

mod inproc;

use std::sync::Arc;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use sha2::{Digest, Sha256};

use inproc::{open, pattern, start_relay, start_target, wait_until};
use onionmix_link::TlsTransport;
use onionmix_node::client::chanmgr::ChanMgr;
use onionmix_node::client::circuit::{self, Circuit, HopTarget};
use onionmix_node::client::conflux::{self, ConfluxStats};
use onionmix_node::reactor::ChanCommand;
use onionmix_node::relay::RelayCtx;
use onionmix_proto::conflux::ConfluxParams;

struct Net {
    exit: Arc<RelayCtx>,
    legs: [Vec<HopTarget>; 2],
    mgr: ChanMgr,
    _relays: Vec<Arc<RelayCtx>>,
}

async fn network(tmp: &std::path::Path) -> Net {
    let mut relays = Vec::new();
    let mut hops = Vec::new();
    for nick in ["guard1", "guard2", "middle1", "middle2"] {
        let (ctx, t) = start_relay(tmp, nick, false).await;
        relays.push(ctx);
        hops.push(t);
    }
    let (exit_ctx, exit) = start_relay(tmp, "exit", true).await;
    let [g1, g2, m1, m2]: [HopTarget; 4] = hops.try_into().unwrap();
    Net {
        exit: exit_ctx,
        legs: [vec![g1, m1, exit.clone()], vec![g2, m2, exit]],
        mgr: ChanMgr::new(TlsTransport::client().unwrap()),
        _relays: relays,
    }
}

async fn build(net: &Net, i: usize) -> Circuit {
    let path = net.legs[i].clone();
    let chan = net.mgr.get(&path[0]).await.unwrap();
    circuit::build(chan, path, Duration::from_secs(30))
        .await
        .expect("leg circuit")
}

async fn linked_set(net: &Net, stats: &Arc<ConfluxStats>) -> Circuit {
    let (a, b) = tokio::join!(build(net, 0), build(net, 1));
    conflux::link(
        a,
        b,
        &ConfluxParams::default(),
        Duration::from_secs(30),
        stats.clone(),
    )
    .await
    .expect("conflux set")
}

fn exit_counter(ctx: &RelayCtx, key: &str) -> u64 {
    onionmix_node::relay::status(ctx)["conflux"][key]
        .as_u64()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_client_and_exit_carry_streams_over_a_linked_set() {
    let tmp = tempfile::tempdir().unwrap();
    let net = network(tmp.path()).await;
    let target = start_target().await;
    let stats = Arc::new(ConfluxStats::default());
    let set = linked_set(&net, &stats).await;
    assert_eq!(stats.sets_linked.load(Relaxed), 1);
    assert_eq!(exit_counter(&net.exit, "legs_linked"), 2);
    assert_eq!(exit_counter(&net.exit, "sets"), 1);
    assert!(set.conflux_partner_path().is_some());

    // Download: the exit fills one leg's window, SWITCHes to the other;
    // the client reorders.
    let n = 8 * 1024 * 1024;
    let mut s = open(&set, target).await;
    s.write_all(format!("bytes {n}\n").as_bytes())
        .await
        .unwrap();
    let got = s
        .read_to_end(n + 1, Duration::from_secs(120))
        .await
        .unwrap();
    assert_eq!(Sha256::digest(&got), Sha256::digest(pattern(n)));
    assert!(
        exit_counter(&net.exit, "switches_sent") >= 1,
        "the exit used one leg only"
    );
    assert!(stats.switches_received.load(Relaxed) >= 1);
    assert!(stats.cells_delivered.load(Relaxed) > (n / 498) as u64);

    // Upload on the set (our client sends on its home leg).
    let n = 3 * 1024 * 1024;
    let mut s = open(&set, target).await;
    s.write_all(format!("sink {n} 0\n").as_bytes())
        .await
        .unwrap();
    s.write_all(&pattern(n)).await.unwrap();
    let digest = s.read_to_end(64, Duration::from_secs(120)).await.unwrap();
    assert_eq!(digest, Sha256::digest(pattern(n)).to_vec());
    assert!(exit_counter(&net.exit, "cells_delivered") > (n / 498) as u64);
    assert_eq!(exit_counter(&net.exit, "refused"), 0);

    // Dropping the set closes both legs; the exit forgets the set.
    drop(set);
    wait_until("the exit drops the set", Duration::from_secs(30), || {
        exit_counter(&net.exit, "sets_open") == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closing_one_leg_closes_the_set() {
    let tmp = tempfile::tempdir().unwrap();
    let net = network(tmp.path()).await;
    let target = start_target().await;
    let stats = Arc::new(ConfluxStats::default());
    let (a, b) = tokio::join!(build(&net, 0), build(&net, 1));
    let legs = [(a.chan.clone(), a.circ_id), (b.chan.clone(), b.circ_id)];
    let set = conflux::link(
        a,
        b,
        &ConfluxParams::default(),
        Duration::from_secs(30),
        stats.clone(),
    )
    .await
    .unwrap();
    let mut s = open(&set, target).await;
    s.write_all(b"bytes 100000\n").await.unwrap();
    let got = s
        .read_to_end(100_001, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(got.len(), 100_000);
    // Whichever leg is not the home one dies: the set closes, home too,
    // and the exit drops the set.
    let (chan, circ_id) = legs
        .into_iter()
        .find(|(c, id)| !(c.peer_rsa_id == set.chan.peer_rsa_id && *id == set.circ_id))
        .unwrap();
    chan.send(ChanCommand::Destroy { circ_id }).await.unwrap();
    wait_until(
        "the set closes with its leg",
        Duration::from_secs(30),
        || set.is_closed(),
    )
    .await;
    assert_eq!(stats.sets_closed.load(Relaxed), 1);
    wait_until("the exit drops the set", Duration::from_secs(30), || {
        exit_counter(&net.exit, "sets_open") == 0
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legs_must_end_at_one_exit_with_congestion_control() {
    let tmp = tempfile::tempdir().unwrap();
    let net = network(tmp.path()).await;
    let stats = Arc::new(ConfluxStats::default());
    // Two circuits to different last hops.
    let a = build(&net, 0).await;
    let chan = net.mgr.get(&net.legs[1][0]).await.unwrap();
    let b = circuit::build(chan, net.legs[1][..2].to_vec(), Duration::from_secs(30))
        .await
        .unwrap();
    let r = conflux::link(
        a,
        b,
        &ConfluxParams::default(),
        Duration::from_secs(5),
        stats,
    )
    .await;
    assert!(matches!(r, Err(conflux::LinkError::BadLegs)));
}
