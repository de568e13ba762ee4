//! Relays with QUIC links (in-process, loopback): circuits whose hops run
//! over QUIC (the client's first hop and the relays' links, chosen from
//! the EXTEND2 hint), a 20 MiB download checked end to end, fallback to
//! TLS when the QUIC path is dead, refusal of the wrong identity,
//! garbage datagrams, a broken link handshake closed with PROTOCOL, certificate rotation on the QUIC endpoint, and an
//! EXTEND2 hint followed only for a relay the directory lists at the
//! hint's address.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

mod inproc;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use onionmix_link::quic::codes;
use onionmix_link::{QuicLimits, QuicTransport, TlsTransport};
use onionmix_node::client::chanmgr::ChanMgr;
use onionmix_node::client::circuit::{self, HopTarget};
use onionmix_node::relay::quic::DirRelay;
use onionmix_node::relay::{self, RelayCtx};
use rand::Rng;

use inproc::{bulk, start_target};

const LONG: Duration = Duration::from_secs(60);

/// A relay with QUIC links whose QUIC attempts fall back to TLS after 30
/// s: tests that expect QUIC must not see TLS because a handshake was slow
/// on a busy machine.
async fn quic_relay(dir: &std::path::Path, nick: &str, exit: bool) -> (Arc<RelayCtx>, HopTarget) {
    quic_relay_fallback(dir, nick, exit, 30).await
}

/// [`quic_relay`] with QUIC attempts that fall back after `secs`.
async fn quic_relay_fallback(
    dir: &std::path::Path,
    nick: &str,
    exit: bool,
    secs: u64,
) -> (Arc<RelayCtx>, HopTarget) {
    let (ctx, hop) = inproc::start_relay_cfg(
        dir,
        nick,
        exit,
        false,
        &format!("quic = true\nquic_fallback_secs = {secs}"),
    )
    .await;
    assert_eq!(hop.quic_port, Some(hop.or_addr.port()), "same port number");
    (ctx, hop)
}

/// A client channel manager that uses QUIC (fallback after 30 s).
fn quic_client() -> ChanMgr {
    quic_client_fallback(Duration::from_secs(30))
}

/// A client channel manager that uses QUIC, falling back after `after`.
fn quic_client_fallback(after: Duration) -> ChanMgr {
    let q = QuicTransport::client("127.0.0.1:0".parse().unwrap(), QuicLimits::default()).unwrap();
    ChanMgr::new(TlsTransport::client().unwrap()).with_quic(q, after)
}

/// The transport of `ctx`'s open link to `peer` (None: a client).
fn link_transport(ctx: &RelayCtx, peer: Option<[u8; 20]>) -> Option<String> {
    let want = peer.map(hex::encode_upper);
    relay::status(ctx)["links"]
        .as_array()?
        .iter()
        .find(|l| l["peer"].as_str().map(str::to_string) == want)
        .and_then(|l| l["transport"].as_str().map(str::to_string))
}

/// A UDP socket that takes datagrams and never answers (a dead QUIC path).
fn black_hole() -> (std::net::UdpSocket, u16) {
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let port = s.local_addr().unwrap().port();
    (s, port)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn circuits_over_quic_links_carry_20_mib() {
    let tmp = tempfile::tempdir().unwrap();
    let (g, guard) = quic_relay(tmp.path(), "guard", false).await;
    let (m, middle) = quic_relay(tmp.path(), "middle", false).await;
    let (x, exit) = quic_relay(tmp.path(), "exit", true).await;
    let target = start_target().await;

    let mgr = quic_client();
    let chan = tokio::time::timeout(LONG, mgr.get(&guard))
        .await
        .unwrap()
        .unwrap();
    let circ = circuit::build(chan.clone(), vec![guard, middle, exit], LONG)
        .await
        .expect("3 hops over QUIC");
    // Every hop is QUIC: client-guard, guard-middle, middle-exit.
    assert_eq!(link_transport(&g, None).as_deref(), Some("quic"));
    assert_eq!(link_transport(&g, Some(m.rsa_id)).as_deref(), Some("quic"));
    assert_eq!(link_transport(&m, Some(x.rsa_id)).as_deref(), Some("quic"));
    // A second circuit on the same links, used at the same time.
    let circ2 = circuit::build(chan, circ.path().to_vec(), LONG)
        .await
        .expect("second circuit");
    tokio::time::timeout(Duration::from_secs(300), async {
        tokio::join!(bulk(&circ, target, 20 << 20), bulk(&circ2, target, 1 << 20))
    })
    .await
    .expect("downloads in time");
    let st = relay::status(&m);
    assert!(st["circuits"].as_u64().unwrap() >= 2, "{st}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_quic_path_falls_back_to_tls() {
    let tmp = tempfile::tempdir().unwrap();
    // The guard falls back after 2 s; the middle keeps the long fallback
    // for its link to the exit, which must be QUIC.
    let (g, mut guard) = quic_relay_fallback(tmp.path(), "guard", false, 2).await;
    let (m, mut middle) = quic_relay(tmp.path(), "middle", false).await;
    let (x, exit) = quic_relay(tmp.path(), "exit", true).await;
    let target = start_target().await;
    // The client and the guard are told to use QUIC where nothing answers.
    let (_hole, port) = black_hole();
    guard.quic_port = Some(port);
    middle.quic_port = Some(port);

    let mgr = quic_client_fallback(Duration::from_secs(2));
    let start = std::time::Instant::now();
    let chan = tokio::time::timeout(LONG, mgr.get(&guard))
        .await
        .unwrap()
        .expect("TLS after the QUIC attempt");
    let circ = circuit::build(chan, vec![guard, middle, exit], LONG)
        .await
        .expect("circuit");
    // Two fallbacks of 2 s each, bounded.
    assert!(start.elapsed() >= Duration::from_secs(4));
    assert_eq!(link_transport(&g, None).as_deref(), Some("tls"));
    assert_eq!(link_transport(&g, Some(m.rsa_id)).as_deref(), Some("tls"));
    // Where QUIC works it is still used.
    assert_eq!(link_transport(&m, Some(x.rsa_id)).as_deref(), Some("quic"));
    bulk(&circ, target, 1 << 20).await;
    // The failure is remembered: the guard does not try QUIC to the
    // middle again for a while.
    let now = std::time::Instant::now();
    let hint = Some(SocketAddr::from(([127, 0, 0, 1], port)));
    assert_eq!(g.quic.peers.target(m.rsa_id, None, hint, now), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_identity_and_garbage_leave_the_relay_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, hop_a) = quic_relay(tmp.path(), "a", false).await;
    let (_b, hop_b) = quic_relay(tmp.path(), "b", true).await;
    let target = start_target().await;

    // Expecting a's identity at b's address: refused on QUIC and on TLS.
    let wrong = HopTarget {
        rsa_id: a.rsa_id,
        ed_id: Some(a.ed_id),
        ..hop_b.clone()
    };
    let mgr = quic_client();
    assert!(
        tokio::time::timeout(LONG, mgr.get(&wrong))
            .await
            .unwrap()
            .is_err()
    );

    // Garbage datagrams at b's QUIC port: random bytes, and random bytes
    // that start like a QUIC version 1 long-header packet.
    let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let to = SocketAddr::new(hop_b.or_addr.ip(), hop_b.quic_port.unwrap());
    let mut rng = rand::thread_rng();
    for i in 0..2000 {
        let n = rng.gen_range(1..1400);
        let mut d: Vec<u8> = (0..n).map(|_| rng.r#gen()).collect();
        if i % 2 == 0 && n > 5 {
            d[0] = 0xC0 | (d[0] & 0x0F);
            d[1..5].copy_from_slice(&1u32.to_be_bytes());
        }
        let _ = sock.send_to(&d, to);
    }

    // b still serves: a fresh client reaches it over QUIC, and circuits
    // through a and b work.
    let mgr = quic_client();
    let chan = tokio::time::timeout(LONG, mgr.get(&hop_a))
        .await
        .unwrap()
        .unwrap();
    let circ = circuit::build(chan, vec![hop_a, hop_b.clone()], LONG)
        .await
        .expect("circuit after garbage");
    assert_eq!(link_transport(&a, Some(_b.rsa_id)).as_deref(), Some("quic"));
    bulk(&circ, target, 256 << 10).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_link_handshake_is_closed_with_protocol() {
    use tokio::io::AsyncWriteExt;
    let tmp = tempfile::tempdir().unwrap();
    let (_b, hop_b) = quic_relay(tmp.path(), "b", false).await;
    let to = SocketAddr::new(hop_b.or_addr.ip(), hop_b.quic_port.unwrap());
    let t = QuicTransport::client("127.0.0.1:0".parse().unwrap(), QuicLimits::default()).unwrap();
    let (link, mut ctrl, _info) = tokio::time::timeout(LONG, t.connect(to))
        .await
        .unwrap()
        .unwrap();
    // VERSIONS offering link protocols 1 and 2 only: no common version,
    // a broken handshake (not a failed authentication).
    ctrl.write_all(&[0, 0, 7, 0, 4, 0, 1, 0, 2]).await.unwrap();
    let code = tokio::time::timeout(LONG, link.closed_with_code())
        .await
        .unwrap();
    assert_eq!(code, Some(codes::PROTOCOL));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_replaces_the_quic_certificate() {
    let tmp = tempfile::tempdir().unwrap();
    let (r, hop) = quic_relay(tmp.path(), "r", false).await;
    let quic_addr = SocketAddr::new(hop.or_addr.ip(), hop.quic_port.unwrap());
    let probe =
        QuicTransport::client("127.0.0.1:0".parse().unwrap(), QuicLimits::default()).unwrap();
    let served = || async {
        let (_l, _c, info) = probe.connect(quic_addr).await.unwrap();
        info.peer_cert.unwrap()
    };
    let before = served().await;
    let first = quic_client();
    let old = tokio::time::timeout(LONG, first.get(&hop))
        .await
        .unwrap()
        .unwrap();

    r.renew_link(onionmix_node::clock::now_unix()).unwrap();
    let after = served().await;
    assert_ne!(before, after, "the endpoint serves the new certificate");
    // A new link authenticates against it (the CERTS cell covers it), and
    // the old link is still up.
    let second = quic_client();
    tokio::time::timeout(LONG, second.get(&hop))
        .await
        .unwrap()
        .expect("QUIC link after rotation");
    assert!(!old.is_closed());
    assert_eq!(link_transport(&r, None).as_deref(), Some("quic"));
}

/// A circuit whose EXTEND2 carries no QUIC hint (a stock client's): the
/// relay picks QUIC from its directory, and TLS for a relay the directory
/// lists without QUIC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_directory_picks_quic_without_a_hint() {
    let tmp = tempfile::tempdir().unwrap();
    let (g, mut guard) = quic_relay(tmp.path(), "guard", false).await;
    let (m, mut middle) = quic_relay(tmp.path(), "middle", false).await;
    let (x, mut exit) = quic_relay(tmp.path(), "exit", true).await;
    let target = start_target().await;
    let quic_addr = |h: &HopTarget| SocketAddr::new(h.or_addr.ip(), h.quic_port.unwrap());
    // The guard's directory: the middle takes QUIC. The middle's: the exit
    // is listed without QUIC.
    g.quic.set_directory([DirRelay {
        id: m.rsa_id,
        ip: middle.or_addr.ip(),
        described: true,
        quic_port: Some(quic_addr(&middle).port()),
    }]);
    m.quic.set_directory([DirRelay {
        id: x.rsa_id,
        ip: exit.or_addr.ip(),
        described: true,
        quic_port: None,
    }]);
    for h in [&mut guard, &mut middle, &mut exit] {
        h.quic_port = None;
    }
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let chan = mgr.get(&guard).await.unwrap();
    let circ = circuit::build(chan, vec![guard, middle, exit], LONG)
        .await
        .expect("circuit");
    assert_eq!(link_transport(&g, None).as_deref(), Some("tls"));
    assert_eq!(link_transport(&g, Some(m.rsa_id)).as_deref(), Some("quic"));
    assert_eq!(link_transport(&m, Some(x.rsa_id)).as_deref(), Some("tls"));
    bulk(&circ, target, 256 << 10).await;
}

/// Nobody vouches for an EXTEND2 QUIC hint, so a relay that keeps a
/// directory follows one only for a relay the directory lists at the
/// hint's address (a network whose authorities do not copy the QUIC line,
/// stock tor's, lists every relay without QUIC): a client cannot make it
/// send QUIC packets to an address that is not a relay's. Where it does
/// not follow a hint it extends over TLS at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hint_is_followed_only_where_the_directory_lists_the_relay() {
    let tmp = tempfile::tempdir().unwrap();
    let (g, guard) = quic_relay(tmp.path(), "guard", false).await;
    let (m, mut middle) = quic_relay(tmp.path(), "middle", false).await;
    let (x, exit) = quic_relay(tmp.path(), "exit", true).await;
    let (x2, mut exit2) = quic_relay(tmp.path(), "exit2", true).await;
    let target = start_target().await;
    let (hole, port) = black_hole();
    hole.set_nonblocking(true).unwrap();
    let listed = |h: &HopTarget, ip: std::net::IpAddr| DirRelay {
        id: h.rsa_id,
        ip,
        described: true,
        quic_port: None,
    };
    let here = guard.or_addr.ip();
    // The guard's directory does not list the middle; the client's hint
    // for it names a UDP port where nothing answers.
    g.quic.set_directory([listed(&exit, here)]);
    middle.quic_port = Some(port);
    // The middle's directory lists the exit here without QUIC (as stock
    // authorities' do): its right hint is followed. It lists exit2 at
    // another address: the hint for exit2 (the dead port) is not.
    m.quic.set_directory([
        listed(&exit, here),
        listed(&exit2, "192.0.2.1".parse().unwrap()),
    ]);
    exit2.quic_port = Some(port);

    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let chan = tokio::time::timeout(LONG, mgr.get(&guard))
        .await
        .unwrap()
        .unwrap();
    let circ = circuit::build(
        chan.clone(),
        vec![guard.clone(), middle.clone(), exit],
        LONG,
    )
    .await
    .expect("circuit");
    let circ2 = circuit::build(chan, vec![guard, middle, exit2], LONG)
        .await
        .expect("circuit to exit2");
    assert_eq!(link_transport(&g, Some(m.rsa_id)).as_deref(), Some("tls"));
    assert_eq!(link_transport(&m, Some(x.rsa_id)).as_deref(), Some("quic"));
    assert_eq!(link_transport(&m, Some(x2.rsa_id)).as_deref(), Some("tls"));
    let mut buf = [0u8; 2048];
    match hole.recv(&mut buf) {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("a hint nobody listed was followed: {other:?}"),
    }
    bulk(&circ, target, 256 << 10).await;
    bulk(&circ2, target, 256 << 10).await;
}
