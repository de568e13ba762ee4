//! Our client through our relays (in-process), and mixed paths with a stock
//! tor relay as first or second hop.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

mod common;
mod inproc;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncReadExt;

use onionmix_cell::relay::end_reason;
use onionmix_link::TlsTransport;
use onionmix_node::client::chanmgr::ChanMgr;
use onionmix_node::client::circuit::{self, HopTarget};
use onionmix_node::client::stream::StreamError;
use onionmix_node::reactor::{StreamEvent, StreamRequest};
use onionmix_node::relay::{self, RelayCtx, config::RelayConfig};

use inproc::{bulk, start_target, try_open};

/// Our relays here run with fixed windows (ntor, no congestion control).
async fn start_relay(dir: &std::path::Path, nick: &str, exit: bool) -> (Arc<RelayCtx>, HopTarget) {
    inproc::start_relay_with(dir, nick, exit, false).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_through_three_onionmix_relays() {
    let tmp = tempfile::tempdir().unwrap();
    let (_g, guard) = start_relay(tmp.path(), "guard", false).await;
    let (_m, middle) = start_relay(tmp.path(), "middle", false).await;
    let (exit_ctx, exit) = start_relay(tmp.path(), "exit", true).await;
    let target = start_target().await;

    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let chan = mgr.get(&guard).await.unwrap();
    let circ = circuit::build(chan, vec![guard, middle, exit], Duration::from_secs(30))
        .await
        .expect("3-hop circuit through onionmix relays");

    // Echo round trip, 1 MB: past the stream window (500 cells) both
    // ways, so the exit's stream SENDMEs (sent as its writes to the
    // target are accounted) must flow.
    let (mut s, _) = try_open(&circ, target).await.unwrap();
    // In steps, each within the windows: a client that writes all before
    // reading would deadlock with an echo.
    let msg: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut echoed = Vec::new();
    for chunk in msg.chunks(50_000) {
        s.write_all(chunk).await.unwrap();
        let want = echoed.len() + chunk.len();
        while echoed.len() < want {
            match s.next_event().await {
                Some(StreamEvent::Data(d)) => {
                    echoed.extend_from_slice(&d);
                    // Consumed: the client owes the exit stream SENDMEs.
                    s.drained(1, d.len()).await;
                }
                other => panic!("unexpected {other:?}"),
            }
        }
    }
    assert!(echoed == msg, "the echo differs");
    drop(s);

    // Bulk: 5 MiB exercises circuit and stream SENDMEs both ways.
    bulk(&circ, target, 5 * 1024 * 1024).await;

    // Closed port: END CONNECTREFUSED.
    let (_held, closed) =
        onionmix_testsupport::ports::closed_port("127.0.0.1".parse().unwrap()).unwrap();
    let err = try_open(&circ, closed).await.unwrap_err();
    assert_eq!(err, StreamError::End(end_reason::CONNECTREFUSED));

    // Exit policy: 10.0.0.1 is not accepted.
    let err = try_open(&circ, SocketAddr::new("10.0.0.1".parse().unwrap(), 80))
        .await
        .unwrap_err();
    assert_eq!(err, StreamError::End(end_reason::EXITPOLICY));

    // RESOLVE at the exit.
    let (_, ev) = circ
        .open_stream(
            StreamRequest::Resolve("localhost".into()),
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    assert!(
        matches!(ev, StreamEvent::Resolved(ref a) if !a.is_empty()),
        "{ev:?}"
    );
    assert!(
        exit_ctx
            .stats
            .streams
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 4
    );
}

fn read_stock_target(dir: &std::path::Path, or_port: u16) -> Option<HopTarget> {
    use base64::Engine;
    let fp = std::fs::read_to_string(dir.join("fingerprint")).ok()?;
    let rsa_id: [u8; 20] = hex::decode(fp.split_whitespace().nth(1)?)
        .ok()?
        .try_into()
        .ok()?;
    let ed = std::fs::read_to_string(dir.join("fingerprint-ed25519")).ok()?;
    let ed_id: [u8; 32] = base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(ed.split_whitespace().nth(1)?.trim_end_matches('='))
        .ok()?
        .try_into()
        .ok()?;
    let ntor = std::fs::read(dir.join("keys/secret_onion_key_ntor")).ok()?;
    Some(HopTarget {
        nickname: "stocktor".into(),
        rsa_id,
        ed_id: Some(ed_id),
        or_addr: format!("127.0.0.1:{or_port}").parse().ok()?,
        ntor_key: ntor.get(64..96)?.try_into().ok()?,
        ntor_v3: false,
        optimistic_data: true,
        flowctrl_cc: false,
        quic_port: None,
        datagram: false,
        params: None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mixed_paths_with_stock_tor_relay() {
    if !common::tor_available("mixed_paths_with_stock_tor_relay") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let tor_dir = tmp.path().join("tor");
    std::fs::create_dir_all(&tor_dir).unwrap();
    let or_port = common::free_port();
    let torrc = format!(
        "DataDirectory {d}\nORPort 127.0.0.1:{or_port}\nAddress 127.0.0.1\nNickname stocktor\n\
         SocksPort 0\nPublishServerDescriptor 0\nAssumeReachable 1\nExitRelay 0\nSandbox 0\n\
         ExtendAllowPrivateAddresses 1\nLog notice stdout\nContactInfo test@example.invalid\n",
        d = tor_dir.display()
    );
    let _tor = common::start_tor(&tor_dir, &torrc);
    let log = tor_dir.join("tor.log");
    let stock = common::wait_for("stock tor relay", Duration::from_secs(60), &log, || {
        let t = read_stock_target(&tor_dir, or_port)?;
        std::net::TcpStream::connect(t.or_addr).ok()?;
        Some(t)
    });
    let (_a, ours) = start_relay(tmp.path(), "ours", false).await;
    let (_e, our_exit) = start_relay(tmp.path(), "ourexit", true).await;
    let target = start_target().await;
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());

    // onionmix relay -> stock tor relay: tor must accept our relay's
    // authenticated link (CERTS + AUTHENTICATE, LinkAuth=3).
    let chan = mgr.get(&ours).await.unwrap();
    let circ = circuit::build(
        chan,
        vec![ours.clone(), stock.clone()],
        Duration::from_secs(30),
    )
    .await
    .unwrap_or_else(|e| {
        let l = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = l.lines().rev().take(25).collect();
        panic!(
            "our relay extends to stock tor: {e}\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    });
    drop(circ);

    // stock tor relay -> onionmix exit: we must accept tor's authenticated
    // link; then a download through our exit.
    let chan = mgr.get(&stock).await.unwrap();
    let circ = circuit::build(
        chan,
        vec![stock.clone(), our_exit.clone()],
        Duration::from_secs(30),
    )
    .await
    .expect("stock tor extends to our relay");
    bulk(&circ, target, 1024 * 1024).await;

    // Alternating: ours -> stock -> our exit.
    let chan = mgr.get(&ours).await.unwrap();
    let circ = circuit::build(
        chan.clone(),
        vec![ours.clone(), stock.clone(), our_exit.clone()],
        Duration::from_secs(30),
    )
    .await
    .expect("alternating implementations");
    bulk(&circ, target, 1024 * 1024).await;

    // The same with ntor-v3 (CREATE2 type 3) at every hop: our client's
    // ntor-v3 against stock tor and against our relay.
    let v3 = |mut h: HopTarget| {
        h.ntor_v3 = true;
        h
    };
    let circ = circuit::build(
        chan,
        vec![v3(ours), v3(stock), v3(our_exit)],
        Duration::from_secs(30),
    )
    .await
    .unwrap_or_else(|e| {
        let l = std::fs::read_to_string(&log).unwrap_or_default();
        let tail: Vec<&str> = l.lines().rev().take(12).collect();
        panic!(
            "ntor-v3 circuit: {e}\n{}",
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        )
    });
    bulk(&circ, target, 256 * 1024).await;
}

/// dos limits: one client opening circuits as fast as it can on one relay
/// is refused (RESOURCELIMIT) once over its per-connection limit, while a
/// second client's transfer through the same relay completes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_peer_circuit_limit_spares_other_clients() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = RelayConfig::parse(&format!(
        "data_dir = {:?}\nnickname = \"limited\"\nor_listen = \"127.0.0.1:0\"\nexit = true\n\
         exit_policy = [\"accept 127.0.0.0/8:*\", \"reject *:*\"]\nexit_policy_reject_private = false\n\
         testing_network = true\nmax_circuits_per_channel = 16\ncreate_rate_per_channel = 1000\n\
         allow_single_hop_exits = true\n",
        tmp.path().join("limited").display().to_string()
    ))
    .unwrap();
    let keys = relay::load_or_generate_keys(&cfg.data_dir).unwrap();
    let ctx = relay::make_ctx(cfg, keys, None).unwrap();
    let addr = relay::start(ctx.clone()).await.unwrap();
    let hop = HopTarget::local_relay(&ctx, addr);
    let target = start_target().await;

    // The flooder: its own connection, circuits until refused.
    let flood_mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let flood_chan = flood_mgr.get(&hop).await.unwrap();
    let mut held = Vec::new();
    let mut refused = 0;
    for _ in 0..64 {
        match circuit::build(
            flood_chan.clone(),
            vec![hop.clone()],
            Duration::from_secs(60),
        )
        .await
        {
            Ok(c) => held.push(c),
            // Only the relay's refusal counts (a timeout on a loaded
            // machine is not a refusal).
            Err(circuit::BuildError::Hop { err, .. }) if err.contains("RESOURCELIMIT") => {
                refused += 1
            }
            Err(e) => panic!("unexpected build failure: {e}"),
        }
    }
    assert_eq!(held.len(), 16, "the per-connection limit admits exactly 16");
    assert_eq!(refused, 48);
    assert!(
        ctx.stats
            .creates_refused
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 48
    );

    // Another client (its own connection) still gets a circuit and a
    // verified 2 MiB transfer through the same relay.
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let chan = mgr.get(&hop).await.unwrap();
    let circ = circuit::build(chan, vec![hop.clone()], Duration::from_secs(10))
        .await
        .expect("other client is not limited");
    bulk(&circ, target, 2 << 20).await;
    drop(held);
}

/// As stock tor: an exit refuses BEGIN on a client's first hop (END
/// TORPROTOCOL, nothing connected) unless `allow_single_hop_exits`, while
/// RESOLVE on that hop and BEGIN behind a relay still work.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exits_refuse_begin_on_a_clients_first_hop() {
    let tmp = tempfile::tempdir().unwrap();
    let (_g, guard) = start_relay(tmp.path(), "guard", false).await;
    let (exit_ctx, exit) = start_relay(tmp.path(), "exit", true).await;
    let target = start_target().await;
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let one_hop = circuit::build(
        mgr.get(&exit).await.unwrap(),
        vec![exit.clone()],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    let err = try_open(&one_hop, target).await.unwrap_err();
    assert_eq!(err, StreamError::End(end_reason::TORPROTOCOL));
    let ord = std::sync::atomic::Ordering::Relaxed;
    assert_eq!(exit_ctx.stats.single_hop_begins_refused.load(ord), 1);
    assert_eq!(exit_ctx.stats.streams.load(ord), 0, "nothing connected");
    let (_, ev) = one_hop
        .open_stream(
            StreamRequest::Resolve("localhost".into()),
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    assert!(matches!(ev, StreamEvent::Resolved(_)), "{ev:?}");
    // Behind a relay (an authenticated previous hop) the same exit serves.
    let two_hop = circuit::build(
        mgr.get(&guard).await.unwrap(),
        vec![guard, exit],
        Duration::from_secs(30),
    )
    .await
    .unwrap();
    bulk(&two_hop, target, 100_000).await;
    assert_eq!(exit_ctx.stats.single_hop_begins_refused.load(ord), 1);
}

/// A client channel without circuits is closed by the relay after its idle
/// time (here 1-1.5 s): the client reads EOF.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_client_channels_are_closed_by_the_relay() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = RelayConfig::parse(&format!(
        "data_dir = {:?}\nnickname = \"idle\"\nor_listen = \"127.0.0.1:0\"\ntesting_network = true\n\
         idle_client_channel_secs = 1\n",
        tmp.path().join("idle").display().to_string()
    ))
    .unwrap();
    let keys = relay::load_or_generate_keys(&cfg.data_dir).unwrap();
    let ctx = relay::make_ctx(cfg, keys, None).unwrap();
    let addr = relay::start(ctx.clone()).await.unwrap();
    let (mut tls, info) = TlsTransport::client().unwrap().connect(addr).await.unwrap();
    let verifier = onionmix_node::glue::responder_verifier();
    let hs = onionmix_proto::channel::InitiatorHandshake::new(
        Some(onionmix_proto::channel::ExpectedPeer {
            rsa_id: ctx.rsa_id,
            ed_id: None,
        }),
        verifier.as_ref(),
        info.responder_cert_digest().unwrap(),
        onionmix_node::clock::now_unix(),
    )
    .with_peer_addr(addr.ip());
    onionmix_node::glue::drive_initiator_handshake(&mut tls, hs, Duration::from_secs(20))
        .await
        .unwrap();
    let t0 = std::time::Instant::now();
    let mut b = [0u8; 512];
    let eof = tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            match tls.read(&mut b).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(eof.is_ok(), "the relay never closed the idle channel");
    // Not before the idle time (1-1.5 s) has passed.
    assert!(
        t0.elapsed() >= Duration::from_millis(900),
        "{:?}",
        t0.elapsed()
    );
    let ord = std::sync::atomic::Ordering::Relaxed;
    assert_eq!(ctx.stats.channels.load(ord), 0);
}

/// The circuit-creation DoS defence (dos-spec, on here by configuration,
/// with a small burst set as a consensus would): a client address holding
/// three connections that empties its CREATE bucket is marked, and then
/// its CREATEs are refused (RESOURCELIMIT) on every connection, not only
/// the one that flooded; the relay's counters say so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn circuit_creation_dos_marks_a_flooding_address() {
    use onionmix_proto::dos_cc::DosCcParams;
    let tmp = tempfile::tempdir().unwrap();
    let cfg = RelayConfig::parse(&format!(
        "data_dir = {:?}\nnickname = \"dosguard\"\nor_listen = \"127.0.0.1:0\"\n\
         testing_network = true\nmax_circuits_per_channel = 1000\ncreate_rate_per_channel = 1000\n\
         dos_circuit_creation = true\n",
        tmp.path().join("dosguard").display().to_string()
    ))
    .unwrap();
    let keys = relay::load_or_generate_keys(&cfg.data_dir).unwrap();
    let ctx = relay::make_ctx(cfg, keys, None).unwrap();
    // What a consensus would set (the live network: rate 2, burst 60).
    ctx.set_dos_cc_params(DosCcParams {
        rate: 1,
        burst: 10,
        min_connections: 3,
        ..DosCcParams::default()
    });
    assert!(ctx.dos_cc_params().enabled, "the configuration turns it on");
    let addr = relay::start(ctx.clone()).await.unwrap();
    let hop = HopTarget::local_relay(&ctx, addr);
    // Three connections from one address (each manager opens its own).
    let mut chans = Vec::new();
    for _ in 0..3 {
        let mgr = ChanMgr::new(TlsTransport::client().unwrap());
        chans.push((mgr.get(&hop).await.unwrap(), mgr));
    }
    let build = |chan| circuit::build(chan, vec![hop.clone()], Duration::from_secs(60));
    let refused = |r: &Result<circuit::Circuit, circuit::BuildError>| matches!(r, Err(circuit::BuildError::Hop { err, .. }) if err.contains("RESOURCELIMIT"));
    let mut held = Vec::new();
    let mut first_refusal = None;
    for i in 0..60 {
        let r = build(chans[0].0.clone()).await;
        if refused(&r) {
            first_refusal = Some(i);
            break;
        }
        held.push(r.expect("a circuit before the bucket is empty"));
    }
    // 10 tokens, one more per second: refused after at least 9 circuits.
    let n = first_refusal.expect("the flood was never refused");
    assert!(n >= 9, "refused after only {n} circuits");
    let (stats, tracked) = ctx.dos_cc_stats();
    assert_eq!((stats.marked, tracked), (1, 1));
    // Marked: the other connections are refused too.
    for (chan, _) in &chans[1..] {
        assert!(refused(&build(chan.clone()).await));
    }
    let dos_refused = ctx
        .stats
        .creates_refused_dos
        .load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(dos_refused, 3);
    drop(held);
}

/// The stream-creation DoS defence at an exit (tor 0.4.8's
/// `DoSStreamCreation*`, set here as a consensus would): a circuit that
/// opens streams faster than its bucket allows gets END RESOURCELIMIT
/// (defence type 2) while the circuit goes on, or loses the circuit
/// (type 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_creation_dos_refuses_streams_or_closes_the_circuit() {
    use onionmix_proto::dos_stream::{DosStreamParams, StreamDefense};
    let tmp = tempfile::tempdir().unwrap();
    let (_g, guard) = start_relay(tmp.path(), "guard", false).await;
    let (exit_ctx, exit) = start_relay(tmp.path(), "exit", true).await;
    let target = start_target().await;
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let params = |defense| DosStreamParams {
        enabled: true,
        rate: 1,
        burst: 3,
        defense,
    };
    let ord = std::sync::atomic::Ordering::Relaxed;
    for defense in [StreamDefense::RefuseStream, StreamDefense::CloseCircuit] {
        exit_ctx.set_dos_stream_params(params(defense));
        let circ = circuit::build(
            mgr.get(&guard).await.unwrap(),
            vec![guard.clone(), exit.clone()],
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        let mut opened = Vec::new();
        let mut err = None;
        // 3 at once, one more per second: refused within 20 tries unless
        // every open took over a second.
        for _ in 0..20 {
            match try_open(&circ, target).await {
                Ok((s, _)) => opened.push(s),
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        assert!(
            opened.len() >= 3,
            "{defense:?}: refused after {}",
            opened.len()
        );
        let err = err.expect("never refused");
        match defense {
            StreamDefense::RefuseStream => {
                assert_eq!(err, StreamError::End(end_reason::RESOURCELIMIT));
                assert!(!circ.is_closed(), "the circuit goes on");
            }
            _ => {
                assert_ne!(err, StreamError::End(end_reason::RESOURCELIMIT));
                onionmix_testsupport::wait_for(
                    "the exit to close the circuit",
                    Duration::from_secs(20),
                    Duration::from_millis(50),
                    || circ.is_closed().then_some(()),
                );
            }
        }
        drop(opened);
    }
    assert_eq!(exit_ctx.stats.streams_refused_dos.load(ord), 2);
}
