//! A relay against hostile clients and next hops: extensions a client
//! must not get (back to the previous hop, to internal addresses, IPv4
//! mapped into IPv6 included), a next hop that never answers CREATE2,
//! whose pending circuits must not pile up once their clients gave up,
//! and a client that stops reading while its circuits pull data, which
//! must neither stall other clients' circuits nor queue without bound.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

mod common;
mod inproc;

use std::net::{SocketAddr, SocketAddrV6};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use onionmix_crypto::keys::RelayKeys;
use onionmix_crypto::x509::TlsIdentity;
use onionmix_link::TlsTransport;
use onionmix_node::client::chanmgr::ChanMgr;
use onionmix_node::client::circuit::{self, HopTarget};
use onionmix_node::client::stream::Stream;
use onionmix_node::glue::{RelayLinkIdentity, drive_responder_handshake};
use onionmix_node::relay::{self, RelayCtx, config::RelayConfig};
use onionmix_proto::channel::ResponderHandshake;
use onionmix_proto::queue_limits::QueueLimits;

use common::now;
use inproc::{bulk, open, start_relay_with, start_target, wait_until};

/// A relay that completes the link handshake of every connection and
/// then reads cells forever without answering any (a next hop that
/// never sends CREATED2). Counts the links it accepted.
async fn silent_relay() -> (HopTarget, Arc<AtomicUsize>) {
    let mut rng = rand::rngs::OsRng;
    let keys = RelayKeys::generate(&mut rng, now()).unwrap();
    let served = TlsIdentity::generate(&mut rng, &keys.rsa_identity, now(), 86400).unwrap();
    let (rsa_id, ed_id, ntor) = (keys.rsa_id(), keys.ed_id(), keys.ntor.public());
    let link = Arc::new(RelayLinkIdentity::new(keys, &served, now()).unwrap());
    let transport =
        TlsTransport::server(served.cert_der.clone(), served.key_pkcs8_der.to_vec()).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let links = Arc::new(AtomicUsize::new(0));
    let counted = links.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, peer)) = l.accept().await else {
                return;
            };
            let (transport, link, counted) = (transport.clone(), link.clone(), counted.clone());
            tokio::spawn(async move {
                let Ok((mut tls, _)) = transport.accept(tcp).await else {
                    return;
                };
                let hs =
                    ResponderHandshake::new(link.as_ref(), now(), vec![addr.ip()], Some(peer.ip()));
                let exporter = |t: &onionmix_link::tls::TlsStream, c: &[u8; 32]| {
                    t.export(onionmix_link::tls::AUTH3_EXPORTER_LABEL, c).ok()
                };
                if drive_responder_handshake(&mut tls, hs, exporter, Duration::from_secs(30))
                    .await
                    .is_err()
                {
                    return;
                }
                counted.fetch_add(1, Ordering::Relaxed);
                let mut buf = vec![0u8; 16 * 1024];
                while matches!(tls.read(&mut buf).await, Ok(n) if n > 0) {}
            });
        }
    });
    let hop = HopTarget {
        nickname: "silent".into(),
        rsa_id,
        ed_id: Some(ed_id),
        or_addr: addr,
        ntor_key: ntor,
        ntor_v3: false,
        optimistic_data: true,
        flowctrl_cc: false,
        quic_port: None,
        datagram: false,
        params: None,
    };
    (hop, links)
}

fn circuits(ctx: &RelayCtx) -> usize {
    ctx.stats.circuits.load(Ordering::Relaxed)
}

/// A client that starts extensions to a next hop that never answers and
/// gives up on them (DESTROY) leaves nothing behind at the relay: the
/// pending entries go within the relay's sweep, so such a client cannot
/// use up the relay's circuit slots.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abandoned_extensions_to_a_silent_next_hop_are_freed() {
    let tmp = tempfile::tempdir().unwrap();
    let (ctx, hop) = start_relay_with(tmp.path(), "r", false, false).await;
    let (silent, links) = silent_relay().await;
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let chan = mgr.get(&hop).await.unwrap();
    const N: usize = 20;
    for i in 0..N {
        let c = circuit::build(chan.clone(), vec![hop.clone()], Duration::from_secs(30))
            .await
            .unwrap();
        // Gives up after a second; dropping the circuit sends DESTROY.
        let r = circuit::extend_circuit(c, silent.clone(), Duration::from_secs(1)).await;
        assert!(r.is_err(), "extension {i} to a silent relay cannot succeed");
    }
    assert!(links.load(Ordering::Relaxed) >= 1, "the relay reached it");
    // Each attempt held two slots (the client's circuit, the pending
    // next hop); the client's are gone with its DESTROYs, the pending
    // ones with the sweep (every 5 s).
    wait_until("pending extensions freed", Duration::from_secs(30), || {
        circuits(&ctx) == 0
    })
    .await;
    // The relay still extends for others.
    let (_m, middle) = start_relay_with(tmp.path(), "m", false, false).await;
    let c = circuit::build(chan, vec![hop.clone()], Duration::from_secs(30))
        .await
        .unwrap();
    circuit::extend_circuit(c, middle, Duration::from_secs(30))
        .await
        .expect("a good extension after the silent ones");
}

/// As tor: no extension back to the previous hop (by RSA or Ed25519
/// identity), nor to port 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_extension_back_to_the_previous_hop_or_to_port_zero() {
    let tmp = tempfile::tempdir().unwrap();
    let (_g, guard) = start_relay_with(tmp.path(), "g", false, false).await;
    let (m_ctx, middle) = start_relay_with(tmp.path(), "m", false, false).await;
    let (_x, other) = start_relay_with(tmp.path(), "x", false, false).await;
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let two = || {
        let (mgr, guard, middle) = (mgr.clone(), guard.clone(), middle.clone());
        async move {
            circuit::build(
                mgr.get(&guard).await.unwrap(),
                vec![guard, middle],
                Duration::from_secs(30),
            )
            .await
            .unwrap()
        }
    };
    let back = circuit::extend_circuit(two().await, guard.clone(), Duration::from_secs(20)).await;
    assert!(back.is_err(), "extended back to the previous hop");
    let mut zero = other.clone();
    zero.or_addr.set_port(0);
    let r = circuit::extend_circuit(two().await, zero, Duration::from_secs(20)).await;
    assert!(r.is_err(), "extended to port 0");
    // The same circuit shape to a third relay works.
    circuit::extend_circuit(two().await, other, Duration::from_secs(20))
        .await
        .expect("an ordinary extension");
    wait_until("refused circuits gone", Duration::from_secs(20), || {
        circuits(&m_ctx) <= 1
    })
    .await;
}

/// Outside a testing network a relay does not extend to internal
/// addresses, IPv4-mapped IPv6 ones included (tor's
/// `ExtendAllowPrivateAddresses 0`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_extension_to_internal_addresses_outside_testing_networks() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = RelayConfig::parse(&format!(
        "data_dir = {:?}\nnickname = \"strict\"\nor_listen = \"127.0.0.1:0\"\n",
        tmp.path().join("strict").display().to_string()
    ))
    .unwrap();
    let keys = relay::load_or_generate_keys(&cfg.data_dir).unwrap();
    let ctx = relay::make_ctx(cfg, keys, None).unwrap();
    let addr = relay::start(ctx.clone()).await.unwrap();
    let strict = HopTarget::local_relay(&ctx, addr);
    let (_n, next) = start_relay_with(tmp.path(), "n", false, false).await;
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let mapped = SocketAddr::V6(SocketAddrV6::new(
        std::net::Ipv4Addr::LOCALHOST.to_ipv6_mapped(),
        next.or_addr.port(),
        0,
        0,
    ));
    for or_addr in [next.or_addr, mapped] {
        let c = circuit::build(
            mgr.get(&strict).await.unwrap(),
            vec![strict.clone()],
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        let hop = HopTarget {
            or_addr,
            ..next.clone()
        };
        let r = circuit::extend_circuit(c, hop, Duration::from_secs(20)).await;
        assert!(r.is_err(), "extended to internal address {or_addr}");
    }
}

/// A TCP proxy to `to` whose direction towards the connecting side stops
/// (reads nothing more from `to`) while the flag is set: a client that
/// stops reading, with almost nothing buffered in between.
async fn pausing_proxy(to: SocketAddr) -> (SocketAddr, Arc<AtomicBool>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let paused = Arc::new(AtomicBool::new(false));
    let flag = paused.clone();
    tokio::spawn(async move {
        while let Ok((down, _)) = l.accept().await {
            let sock = tokio::net::TcpSocket::new_v4().unwrap();
            sock.set_recv_buffer_size(4096).unwrap();
            let Ok(up) = sock.connect(to).await else {
                continue;
            };
            let (mut dr, mut dw) = down.into_split();
            let (mut ur, mut uw) = up.into_split();
            tokio::spawn(async move {
                let _ = tokio::io::copy(&mut dr, &mut uw).await;
            });
            let flag = flag.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 16 * 1024];
                loop {
                    while flag.load(Ordering::Relaxed) {
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                    match ur.read(&mut buf).await {
                        Ok(n) if n > 0 => {
                            if dw.write_all(&buf[..n]).await.is_err() {
                                return;
                            }
                        }
                        _ => return,
                    }
                }
            });
        }
    });
    (addr, paused)
}

/// The most any client channel of `ctx` has queued towards its peer.
fn client_queue(ctx: &RelayCtx) -> u64 {
    ctx.queues
        .links_json()
        .iter()
        .filter(|l| l["peer"].is_null())
        .filter_map(|l| l["queued_bytes"].as_u64())
        .max()
        .unwrap_or(0)
}

/// A client reaching `r` through a pausing proxy opens `circuits`
/// circuits `r`, `x` (fixed windows: 1000 cells each) with two bulk
/// downloads each, having stopped reading just before asking for them.
/// Returns what must stay alive meanwhile.
async fn stop_reading_while_downloading(
    r: &HopTarget,
    x: &HopTarget,
    target: SocketAddr,
    circuits: usize,
) -> (Vec<circuit::Circuit>, Vec<Stream>) {
    let (proxy, paused) = pausing_proxy(r.or_addr).await;
    let via_proxy = HopTarget {
        or_addr: proxy,
        ..r.clone()
    };
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let chan = mgr.get(&via_proxy).await.unwrap();
    let (mut circs, mut streams) = (Vec::new(), Vec::new());
    for _ in 0..circuits {
        let c = circuit::build(
            chan.clone(),
            vec![via_proxy.clone(), x.clone()],
            Duration::from_secs(30),
        )
        .await
        .unwrap();
        for _ in 0..2 {
            streams.push(open(&c, target).await);
        }
        circs.push(c);
    }
    paused.store(true, Ordering::Relaxed);
    for s in &mut streams {
        s.write_all(b"bytes 4000000\n").await.unwrap();
    }
    (circs, streams)
}

/// A client that stops reading fills its channel's queue at the relay
/// with what its circuits pull. That must not hold up the other circuits
/// of the channel those cells come from (here the relay's channel to the
/// exit, shared with another client), as it did while the relay waited
/// up to 30 s for the full channel and then closed it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_stops_reading_does_not_stall_other_circuits() {
    let tmp = tempfile::tempdir().unwrap();
    let (r_ctx, r) = start_relay_with(tmp.path(), "r", false, false).await;
    let (_x_ctx, x) = start_relay_with(tmp.path(), "x", true, false).await;
    let target = start_target().await;
    // 16 windows of 1000 cells: 8 MB, of which the kernel may hold 3 MB
    // (a loopback socket's send buffer starts large, MSS being 64 KiB).
    let _hostile = stop_reading_while_downloading(&r, &x, target, 16).await;
    let hw = onionmix_link::io::DEFAULT_HIGH_WATER as u64;
    wait_until(
        "the silent client's queue passes the high-water mark",
        Duration::from_secs(60),
        || client_queue(&r_ctx) >= hw,
    )
    .await;
    // Another client's circuit over the same relay-to-exit channel.
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let c = circuit::build(
        mgr.get(&r).await.unwrap(),
        vec![r.clone(), x.clone()],
        Duration::from_secs(60),
    )
    .await
    .unwrap();
    bulk(&c, target, 256 * 1024).await;
    // It was not served by giving up on the full channel.
    assert!(
        client_queue(&r_ctx) >= hw,
        "the silent client's channel was closed to serve the other: {:?}",
        r_ctx.queues.links_json()
    );
    assert_eq!(r_ctx.stats.queue_limit_kills.load(Ordering::Relaxed), 0);
}

/// A circuit that queues more cells than the consensus allows
/// (`circ_max_cell_queue_size`) on a channel whose peer does not read is
/// closed, both ways, as tor closes it: its client's queue stays small.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn circuits_over_the_queue_limit_are_closed() {
    let tmp = tempfile::tempdir().unwrap();
    let (r_ctx, r) = start_relay_with(tmp.path(), "r", false, false).await;
    let (_x_ctx, x) = start_relay_with(tmp.path(), "x", true, false).await;
    let target = start_target().await;
    // Below the smallest value a consensus may set (1000), to be reached
    // within the circuits' windows.
    r_ctx.set_queue_limits(QueueLimits {
        toward_client: 100,
        away_from_client: 100,
    });
    const N: usize = 4;
    let _hostile = stop_reading_while_downloading(&r, &x, target, N).await;
    wait_until(
        "circuits over the limit closed",
        Duration::from_secs(60),
        || r_ctx.stats.queue_limit_kills.load(Ordering::Relaxed) >= N as u64,
    )
    .await;
    wait_until("their entries gone", Duration::from_secs(30), || {
        circuits(&r_ctx) == 0
    })
    .await;
    // Unbounded, the four windows would have queued 2 MB.
    let q = client_queue(&r_ctx);
    assert!(q < 1 << 20, "{q} bytes queued for the silent client");
}
