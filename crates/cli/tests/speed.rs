//! A client that is fast on links with latency, checked on an in-process
//! network (three onionmix relays, the testbed sink, the client's circuit
//! manager and SOCKS port) through the components' own counters, never
//! wall-clock comparisons:
//!
//! - a request with a new SOCKS isolation key takes a clean pre-built
//!   circuit: no circuit is built on the request path;
//! - optimistic data: the HTTP request reaches the exit before it answers
//!   CONNECTED (the exit's counter of optimistic bytes), with a verified
//!   download; a client that waits for the SOCKS reply sends none, unless
//!   the SOCKS port replies optimistically (prop 309); when the first exit
//!   refuses the stream, the same bytes are sent again on the retry;
//! - a hung hop makes a build give up at the learned timeout (loaded from
//!   the client's state file), not at 60 s, and the request succeeds on
//!   another path.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use onionmix_link::TlsTransport;
use onionmix_node::client::chanmgr::ChanMgr;
use onionmix_node::client::circmgr::{CircMgr, CircMgrConfig, IsolationKey};
use onionmix_node::client::circuit::{BuildError, HopTarget};
use onionmix_node::client::socks::{self, SocksContext};
use onionmix_node::relay::{self, RelayCtx, config::RelayConfig};
use onionmix_proto::cbt::{BuildTimeEstimator, CbtParams, CbtState};
use onionmix_testbed::http;
use onionmix_testbed::socks::{self as socks_client, Target};

struct Net {
    _tmp: tempfile::TempDir,
    hops: Vec<HopTarget>,
    exit: Arc<RelayCtx>,
    sink: SocketAddr,
}

async fn start_relay(
    dir: &std::path::Path,
    nick: &str,
    exit: bool,
    nameserver: Option<SocketAddr>,
) -> (Arc<RelayCtx>, HopTarget) {
    let mut text = format!(
        "data_dir = {:?}\nnickname = {nick:?}\nor_listen = \"127.0.0.1:0\"\nexit = {exit}\n\
         exit_policy = [\"accept 127.0.0.0/8:*\", \"reject *:*\"]\nexit_policy_reject_private = false\ntesting_network = true\n",
        dir.join(nick).display().to_string()
    );
    if let Some(ns) = nameserver {
        text.push_str(&format!("nameserver = \"{ns}\"\n"));
    }
    let cfg = RelayConfig::parse(&text).unwrap();
    let keys = relay::load_or_generate_keys(&cfg.data_dir).unwrap();
    let ctx = relay::make_ctx(cfg, keys, None).unwrap();
    let addr = relay::start(ctx.clone()).await.unwrap();
    let target = HopTarget::local_relay(&ctx, addr);
    (ctx, target)
}

/// A DNS server that answers names under the sink's test domain with
/// 127.0.0.1 after `delay`: an exit that takes this long to open a
/// stream, whatever the load on the machine.
async fn slow_dns(delay: Duration) -> SocketAddr {
    let sock = Arc::new(tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap());
    let addr = sock.local_addr().unwrap();
    tokio::spawn(async move {
        let mut buf = [0u8; 512];
        while let Ok((n, from)) = sock.recv_from(&mut buf).await {
            let q = buf[..n].to_vec();
            let sock = sock.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                if let Some(a) = onionmix_testbed::sink::dns_answer(&q, [127, 0, 0, 1].into()) {
                    let _ = sock.send_to(&a, from).await;
                }
            });
        }
    });
    addr
}

/// Relays and a sink; the exit resolves names through `nameserver`.
async fn start_net_with(nameserver: Option<SocketAddr>) -> Net {
    let tmp = tempfile::tempdir().unwrap();
    let (_, guard) = start_relay(tmp.path(), "guard", false, None).await;
    let (_, middle) = start_relay(tmp.path(), "middle", false, None).await;
    let (exit, exit_hop) = start_relay(tmp.path(), "exit", true, nameserver).await;
    let any = "127.0.0.1:0".parse().unwrap();
    let sink = onionmix_testbed::sink::start(any, any, any).await.unwrap();
    Net {
        _tmp: tmp,
        hops: vec![guard, middle, exit_hop],
        exit,
        sink: sink.http,
    }
}

async fn start_net() -> Net {
    start_net_with(None).await
}

/// A circuit manager whose paths are `path()`.
fn circmgr(
    cfg: CircMgrConfig,
    path: impl Fn() -> Vec<HopTarget> + Send + Sync + 'static,
) -> CircMgr {
    CircMgr::new(
        cfg,
        ChanMgr::new(TlsTransport::client().unwrap()),
        Arc::new(move |_, _| Ok(path())),
        Arc::new(|_, _| true),
        Arc::new(|_, _| {}),
    )
}

async fn socks_port(circmgr: &CircMgr, optimistic_reply: bool) -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (_tx, ready) = tokio::sync::watch::channel(true);
    let ctx = SocksContext {
        dir: None,
        circmgr: circmgr.clone(),
        stream_timeout: Duration::from_secs(30),
        ready,
        dir_ready: None,
        extended_errors: false,
        reject_internal: false,
        hub: Arc::new(onionmix_node::client::control::hub::ControlHub::new()),
        optimistic_data: true,
        optimistic_reply,
        hs: None,
    };
    tokio::spawn(socks::serve(l, ctx, 64));
    addr
}

/// `GET /bytes/<n>` from the sink through `proxy` as `user`, verified;
/// `pipelined`: the optimistic SOCKS client.
async fn download(proxy: SocketAddr, sink: SocketAddr, user: &str, n: u64, pipelined: bool) {
    download_from(proxy, Target::Addr(sink), user, n, pipelined).await
}

async fn download_from(proxy: SocketAddr, target: Target, user: &str, n: u64, pipelined: bool) {
    let t0 = Instant::now();
    let auth = Some((user, "x"));
    let to = Duration::from_secs(60);
    let r = if pipelined {
        let mut s = socks_client::connect_pipelined(proxy, &target, auth, to)
            .await
            .unwrap();
        http::get(&mut s, "sink", &format!("/bytes/{n}"), t0).await
    } else {
        let mut s = socks_client::connect(proxy, &target, auth, to)
            .await
            .unwrap();
        http::get(&mut s, "sink", &format!("/bytes/{n}"), t0).await
    }
    .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.body.len() as u64, n);
    assert!(r.sha256_ok(), "body does not match the sink's digest");
}

async fn wait_until(what: &str, secs: u64, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fresh_isolation_takes_a_prebuilt_circuit() {
    let net = start_net().await;
    let hops = net.hops.clone();
    let tmp = tempfile::tempdir().unwrap();
    let mgr = circmgr(
        CircMgrConfig {
            state_path: Some(tmp.path().join("state")),
            ..CircMgrConfig::default()
        },
        move || hops.clone(),
    );
    let proxy = socks_port(&mgr, false).await;
    mgr.start_preemptive();
    // Port 80 is predicted from start-up: two clean circuits for it.
    wait_until("two clean circuits", 60, || mgr.clean_circuits() >= 2).await;
    let c = mgr.counters();
    assert_eq!(c.on_demand.load(Ordering::Relaxed), 0);

    download(proxy, net.sink, "alice", 50 * 1024, false).await;
    assert_eq!(
        c.on_demand.load(Ordering::Relaxed),
        0,
        "a circuit was built on the request path"
    );
    assert_eq!(c.clean_taken.load(Ordering::Relaxed), 1);

    // Another new key: another clean circuit (never alice's).
    download(proxy, net.sink, "bob", 50 * 1024, true).await;
    assert_eq!(c.on_demand.load(Ordering::Relaxed), 0);
    assert_eq!(c.clean_taken.load(Ordering::Relaxed), 2);

    // alice again: her own circuit, no clean one taken.
    download(proxy, net.sink, "alice", 1024, false).await;
    assert_eq!(c.clean_taken.load(Ordering::Relaxed), 2);
    assert_eq!(c.on_demand.load(Ordering::Relaxed), 0);

    // Used circuits are replaced; the sink's port is predicted now too.
    wait_until("replacement circuits", 60, || mgr.clean_circuits() >= 2).await;
    let st = mgr.status();
    let ports: Vec<u64> = st["predicted_ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p.as_u64())
        .collect();
    assert!(
        ports.contains(&80) && ports.contains(&u64::from(net.sink.port())),
        "{st}"
    );
    assert!(c.preemptive.load(Ordering::Relaxed) >= 4, "{st}");

    // NEWNYM as tor does it: circuits that carried streams go, clean ones
    // (never used) stay...
    assert!(!mgr.open_circuit_paths().is_empty());
    let clean = mgr.clean_circuits();
    mgr.newnym(&std::collections::HashSet::new());
    assert!(mgr.open_circuit_paths().is_empty(), "used circuits kept");
    assert!(mgr.clean_circuits() >= clean, "clean circuits dropped");
    // ... unless their exit is one the old circuits used (every circuit
    // here has the same exit): those go, and are built again.
    let before = c.preemptive.load(Ordering::Relaxed);
    let exit = mgr.clean_circuit_paths()[0].last().cloned().unwrap();
    let exit_id = net.hops.iter().find(|h| h.nickname == exit).unwrap().rsa_id;
    mgr.newnym(&[exit_id].into_iter().collect());
    wait_until("clean circuits rebuilt", 60, || {
        c.preemptive.load(Ordering::Relaxed) >= before + 2 && mgr.clean_circuits() >= 2
    })
    .await;

    // Dormant (SIGNAL DORMANT): nothing is built ahead of need. Builds
    // already under way finish first.
    mgr.set_dormant(true);
    // Wait for them (not a fixed time: a build can take seconds on a busy
    // machine); twice, in case a round that began before the switch
    // launched one more.
    for _ in 0..2 {
        wait_until("pre-builds under way finish", 60, || {
            mgr.pending_preemptive() == 0
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let before = c.preemptive.load(Ordering::Relaxed);
    mgr.newnym(&[exit_id].into_iter().collect());
    assert_eq!(mgr.clean_circuits(), 0);
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(
        (c.preemptive.load(Ordering::Relaxed), mgr.clean_circuits()),
        (before, 0),
        "a dormant client built circuits ahead of need"
    );
    // A stream wakes it (as on tor's SOCKS port): served at once, and the
    // pool is kept again.
    download(proxy, net.sink, "carol", 1024, false).await;
    assert!(!mgr.is_dormant());
    wait_until("pre-building resumes", 60, || {
        c.preemptive.load(Ordering::Relaxed) > before && mgr.clean_circuits() >= 1
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_data_reaches_the_exit_before_connected() {
    // The exit takes a second to resolve the sink's name, so the test does
    // not depend on how fast loopback connects: data sent right after BEGIN
    // is at the exit before it can answer CONNECTED.
    let net = start_net_with(Some(slow_dns(Duration::from_secs(1)).await)).await;
    let sink = || {
        Target::Host(
            onionmix_testbed::sink::SINK_HOSTNAME.into(),
            net.sink.port(),
        )
    };
    let hops = net.hops.clone();
    let mgr = circmgr(
        CircMgrConfig {
            preemptive: false,
            ..CircMgrConfig::default()
        },
        move || hops.clone(),
    );
    let proxy = socks_port(&mgr, false).await;
    let stats = &net.exit.stats;
    let opt_bytes = || stats.optimistic_bytes.load(Ordering::Relaxed);
    let opt_streams = || stats.optimistic_streams.load(Ordering::Relaxed);

    // A client that waits for the SOCKS reply sends nothing early: the
    // reply comes with CONNECTED.
    download_from(proxy, sink(), "waits", 100 * 1024, false).await;
    assert_eq!(opt_streams(), 0);

    // The optimistic SOCKS client: its request goes out right after BEGIN
    // and waits at the exit while it connects.
    download_from(proxy, sink(), "pipelines", 100 * 1024, true).await;
    assert_eq!(opt_streams(), 1);
    let after_one = opt_bytes();
    assert!(after_one >= 40, "only {after_one} optimistic bytes");

    // Proposal 309: the SOCKS port replies at once, so even a client that
    // waits for the reply sends its request before CONNECTED.
    let proxy309 = socks_port(&mgr, true).await;
    download_from(proxy309, sink(), "waits-309", 100 * 1024, false).await;
    assert_eq!(opt_streams(), 2);
    assert!(opt_bytes() > after_one);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn optimistic_data_is_resent_when_the_stream_is_retried() {
    // The first path ends at an exit whose policy refuses the sink: it
    // answers BEGIN with END EXITPOLICY (after a slow name lookup, so the
    // request has already been sent to it). The stream is retried on
    // another circuit and the same bytes go out again, after that BEGIN.
    let dns = slow_dns(Duration::from_secs(1)).await;
    let net = start_net_with(Some(dns)).await;
    let tmp = tempfile::tempdir().unwrap();
    let cfg = RelayConfig::parse(&format!(
        "data_dir = {:?}\nnickname = \"refuser\"\nor_listen = \"127.0.0.1:0\"\nexit = true\n\
         exit_policy = [\"reject *:*\"]\nexit_policy_reject_private = false\ntesting_network = true\n\
         nameserver = \"{dns}\"\n",
        tmp.path().join("refuser").display().to_string()
    ))
    .unwrap();
    let keys = relay::load_or_generate_keys(&cfg.data_dir).unwrap();
    let refuser = relay::make_ctx(cfg, keys, None).unwrap();
    let addr = relay::start(refuser.clone()).await.unwrap();
    let refuser_hop = HopTarget {
        nickname: "refuser".into(),
        rsa_id: refuser.rsa_id,
        ed_id: Some(refuser.ed_id),
        or_addr: addr,
        ntor_key: refuser.ntor_keys()[0].public(),
        ntor_v3: false,
        optimistic_data: true,
        flowctrl_cc: false,
        quic_port: None,
        datagram: false,
        params: None,
    };
    let good = net.hops.clone();
    let bad = vec![good[0].clone(), good[1].clone(), refuser_hop];
    let first = Arc::new(AtomicBool::new(true));
    let f2 = first.clone();
    let mgr = circmgr(
        CircMgrConfig {
            preemptive: false,
            ..CircMgrConfig::default()
        },
        move || {
            if f2.swap(false, Ordering::Relaxed) {
                bad.clone()
            } else {
                good.clone()
            }
        },
    );
    let proxy = socks_port(&mgr, false).await;
    let target = Target::Host(
        onionmix_testbed::sink::SINK_HOSTNAME.into(),
        net.sink.port(),
    );
    download_from(proxy, target, "retried", 64 * 1024, true).await;
    assert!(
        !first.load(Ordering::Relaxed),
        "the refusing exit was not tried"
    );
    // The refusing exit got the request early too, and dropped it.
    assert_eq!(refuser.stats.optimistic_streams.load(Ordering::Relaxed), 0);
    assert!(refuser.stats.streams.load(Ordering::Relaxed) >= 1);
    assert_eq!(net.exit.stats.optimistic_streams.load(Ordering::Relaxed), 1);
    assert!(net.exit.stats.optimistic_bytes.load(Ordering::Relaxed) >= 40);
}

/// A state file whose histogram gives a learned timeout of a few seconds
/// (far above a loopback build, far below 60 s).
fn write_learned_state(path: &std::path::Path) -> Duration {
    let mut bins = Vec::new();
    for (i, ms) in (3005..=4005).step_by(100).enumerate() {
        bins.push((ms, 10 + (i as u32 % 3)));
    }
    let total = bins.iter().map(|(_, n)| n).sum();
    let st = CbtState {
        total_build_times: total,
        abandoned: 0,
        bins,
    };
    std::fs::write(path, st.encode()).unwrap();
    let mut e = BuildTimeEstimator::new(CbtParams::default());
    e.load_state(&st, &mut rand::thread_rng());
    assert!(e.has_computed_timeout());
    e.timeout()
}

/// A TCP listener that accepts and never answers: a relay that hangs.
async fn black_hole() -> SocketAddr {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = l.accept().await {
            held.push(s);
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_hop_times_out_at_the_learned_bound() {
    let net = start_net().await;
    let tmp = tempfile::tempdir().unwrap();
    let state = tmp.path().join("state");
    let learned = write_learned_state(&state);
    assert!(learned > Duration::from_secs(2) && learned < Duration::from_secs(10));

    let hung = HopTarget {
        nickname: "hung".into(),
        rsa_id: [7; 20],
        ed_id: None,
        or_addr: black_hole().await,
        ntor_key: [9; 32],
        ntor_v3: false,
        optimistic_data: true,
        flowctrl_cc: false,
        quic_port: None,
        datagram: false,
        params: None,
    };
    let good = net.hops.clone();
    let hung_path = vec![good[0].clone(), hung, good[2].clone()];
    let use_hung = Arc::new(AtomicBool::new(true));
    let picks = Arc::new(AtomicUsize::new(0));
    let (hp, gp, uh, pk) = (
        hung_path.clone(),
        good.clone(),
        use_hung.clone(),
        picks.clone(),
    );
    let mgr = circmgr(
        CircMgrConfig {
            preemptive: false,
            state_path: Some(state.clone()),
            ..CircMgrConfig::default()
        },
        move || {
            pk.fetch_add(1, Ordering::Relaxed);
            if uh.swap(false, Ordering::Relaxed) {
                hp.clone()
            } else {
                gp.clone()
            }
        },
    );
    let cbt = mgr.build_times_estimator();
    assert_eq!(cbt.timeouts(3).0, learned, "the state file was not loaded");

    // The hung middle: the build gives up at the learned timeout, while
    // extending to hop 1, long before the relay's own 30 s or tor's 60 s.
    let t0 = Instant::now();
    let err = mgr.build_path(hung_path).await.unwrap_err();
    let took = t0.elapsed();
    match err {
        BuildError::Slow { hop, timeout } => {
            assert_eq!(hop, 1);
            assert_eq!(timeout, learned);
        }
        other => panic!("expected a build timeout, got {other}"),
    }
    assert!(took >= learned, "gave up after {took:?}");
    assert!(took < Duration::from_secs(30), "gave up after {took:?}");
    assert_eq!(cbt.counters.timeouts.load(Ordering::Relaxed), 1);

    // A request whose first path hangs: the next path is tried as soon as
    // the timeout passes, and the request is served.
    use_hung.store(true, Ordering::Relaxed);
    let t0 = Instant::now();
    let c = mgr
        .get_exit_circuit(&IsolationKey::default(), Some(net.sink.port()))
        .await
        .expect("a circuit on the second path");
    assert!(t0.elapsed() < Duration::from_secs(30));
    assert_eq!(c.path()[1].nickname, "middle");
    assert_eq!(picks.load(Ordering::Relaxed), 2);
    assert_eq!(cbt.counters.timeouts.load(Ordering::Relaxed), 2);
    assert_eq!(mgr.counters().on_demand.load(Ordering::Relaxed), 1);
    let st = mgr.status();
    assert_eq!(st["build_timeout"]["computed"], true, "{st}");
}
