//! QUIC link transport over loopback: handshakes, the exporter, the
//! responder certificate, circuit streams (independence and the stream
//! limit), and a server that survives garbage and abrupt peers.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use onionmix_cell::{CellCodec, ChanCmd, RawCell};
use onionmix_link::quic::codes;
use onionmix_link::tls::AUTH3_EXPORTER_LABEL;
use onionmix_link::{QuicLimits, QuicTransport, spawn_channel_io};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handshake_both_ways_exporter_and_responder_cert() {
    let (a, a_cert) = server(QuicLimits::default());
    let (b, b_cert) = server(QuicLimits::default());

    // A initiates to B.
    let ((ab_i, mut ab_ic, ab_iinfo), (ab_r, mut ab_rc, ab_rinfo)) = pair(&a, &b).await;
    // The initiator sees the responder's certificate, and both sides agree
    // on the digest CERTS type 5 must certify.
    assert_eq!(ab_iinfo.peer_cert.as_deref(), Some(b_cert.as_slice()));
    let want: [u8; 32] = Sha256::digest(&b_cert).into();
    assert_eq!(ab_iinfo.responder_cert_digest(), Some(want));
    assert_eq!(ab_rinfo.responder_cert_digest(), Some(want));
    assert!(
        ab_r.peer_cert().is_none(),
        "initiators present no certificate"
    );
    // The control stream works both ways.
    within("reply", ab_rc.write_all(b"world"))
        .await
        .expect("write");
    let mut buf = [0u8; 5];
    within("reply", ab_ic.read_exact(&mut buf))
        .await
        .expect("read");
    assert_eq!(&buf, b"world");

    // B initiates to A over its own (server) endpoint.
    let ((ba_i, _ba_ic, ba_iinfo), (ba_r, _ba_rc, _)) = pair(&b, &a).await;
    assert_eq!(ba_iinfo.peer_cert.as_deref(), Some(a_cert.as_slice()));

    // Exporter: both ends of a connection agree; connections differ;
    // contexts differ.
    let ctx = [7u8; 32];
    let x1 = ab_i.export(AUTH3_EXPORTER_LABEL, &ctx).expect("export");
    assert_eq!(x1, ab_r.export(AUTH3_EXPORTER_LABEL, &ctx).expect("export"));
    let x2 = ba_i.export(AUTH3_EXPORTER_LABEL, &ctx).expect("export");
    assert_eq!(x2, ba_r.export(AUTH3_EXPORTER_LABEL, &ctx).expect("export"));
    assert_ne!(x1, x2);
    assert_ne!(
        x1,
        ab_i.export(AUTH3_EXPORTER_LABEL, &[8u8; 32])
            .expect("export")
    );
    // A third connection between the same endpoints differs again.
    let ((ab2_i, _, _), _) = pair(&a, &b).await;
    assert_ne!(
        x1,
        ab2_i.export(AUTH3_EXPORTER_LABEL, &ctx).expect("export")
    );
    assert_eq!(a.open_connections(), 3);
    a.close();
    b.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn control_stream_carries_channel_io() {
    let (s, _) = server(QuicLimits::default());
    let c = client(QuicLimits::default());
    let ((_il, ictrl, _), (_rl, rctrl, _)) = pair(&c, &s).await;
    let mut codec = CellCodec::new();
    codec.set_link_version(5);
    let ci = spawn_channel_io(ictrl, codec.clone(), BytesMut::new());
    let mut cr = spawn_channel_io(rctrl, codec.clone(), BytesMut::new());
    let mut out = BytesMut::new();
    for i in 0..100u8 {
        let cell = RawCell::fixed(0, ChanCmd::PADDING, &[i; 10]).expect("cell");
        codec.encode(&cell, &mut out).expect("encode");
    }
    assert!(ci.tx.send_now(out));
    let mut got = 0;
    while got < 100 {
        let batch = within("cells", cr.rx.recv())
            .await
            .expect("open")
            .expect("cells");
        for cell in batch {
            assert_eq!(cell.cmd, ChanCmd::PADDING);
            assert_eq!(cell.payload.first(), Some(&(got as u8)));
            got += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn circuit_streams_are_independent() {
    let limits = QuicLimits {
        stream_receive_window: 64 * 1024,
        receive_window: 1024 * 1024,
        ..QuicLimits::default()
    };
    let (s, _) = server(limits.clone());
    let c = client(limits);
    let ((il, _ictrl, _), (rl, _rctrl, _)) = pair(&c, &s).await;

    let mut a = within("open a", il.open_circuit_stream()).await.expect("a");
    let mut b = within("open b", il.open_circuit_stream()).await.expect("b");
    assert_ne!(a.id(), b.id());
    a.write_all(b"A").await.expect("a");
    b.write_all(b"B").await.expect("b");
    let ra = within("accept", rl.accept_circuit_stream())
        .await
        .expect("accept")
        .expect("stream");
    let mut rb = within("accept", rl.accept_circuit_stream())
        .await
        .expect("accept")
        .expect("stream");
    assert_eq!(ra.id(), a.id());
    assert_eq!(rb.id(), b.id());

    // Nobody reads `ra`: its writer fills the 64 KiB window and stalls.
    const BIG: usize = 512 * 1024;
    let a_writer = tokio::spawn(async move {
        a.write_all(&vec![0xAA; BIG]).await.expect("write a");
        a.finish();
        a
    });
    // Meanwhile B moves many windows' worth in both directions.
    let b_writer = tokio::spawn(async move {
        b.write_all(&vec![0xBB; BIG]).await.expect("write b");
        b.finish();
        let mut back = Vec::new();
        b.read_to_end(&mut back).await.expect("read b");
        back
    });
    let mut got = Vec::new();
    within("read b", rb.read_to_end(&mut got))
        .await
        .expect("read b");
    assert_eq!(got.len(), BIG + 1);
    within("echo b", rb.write_all(&got)).await.expect("echo");
    rb.finish();
    let back = within("b done", b_writer).await.expect("b task");
    assert_eq!(back.len(), BIG + 1);
    // A is still blocked on flow control: its reader never read.
    assert!(!a_writer.is_finished(), "A should still be stalled");
    // Once read, A completes too.
    let mut ra = ra;
    let mut got = Vec::new();
    within("read a", ra.read_to_end(&mut got))
        .await
        .expect("read a");
    assert_eq!(got.len(), BIG + 1);
    within("a done", a_writer).await.expect("a task");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_limit_is_enforced() {
    let server_limits = QuicLimits {
        max_circuit_streams: 2,
        ..QuicLimits::default()
    };
    let client_limits = QuicLimits {
        open_stream_timeout: Duration::from_millis(300),
        ..QuicLimits::default()
    };
    let (s, _) = server(server_limits);
    let c = client(client_limits);
    let ((il, _ictrl, _), (rl, _rctrl, _)) = pair(&c, &s).await;

    let mut one = within("open", il.open_circuit_stream()).await.expect("one");
    let mut two = within("open", il.open_circuit_stream()).await.expect("two");
    one.write_all(b"1").await.expect("1");
    two.write_all(b"2").await.expect("2");
    // The third waits for credit and gives up cleanly.
    match il.open_circuit_stream().await {
        Err(onionmix_link::LinkError::Timeout(_)) => {}
        other => panic!("expected a timeout, got {other:?}"),
    }
    // Close the first stream in both directions; the server then grants
    // credit for one more.
    let mut r1 = within("accept", rl.accept_circuit_stream())
        .await
        .expect("accept")
        .expect("stream");
    one.finish();
    let mut got = Vec::new();
    within("read 1", r1.read_to_end(&mut got))
        .await
        .expect("read");
    assert_eq!(got, b"1");
    r1.finish();
    let mut rest = Vec::new();
    within("read 1 back", one.read_to_end(&mut rest))
        .await
        .expect("read");
    drop(one);
    drop(r1);
    let three = within("open after credit", async {
        loop {
            match il.open_circuit_stream().await {
                Ok(s) => break s,
                Err(onionmix_link::LinkError::Timeout(_)) => continue,
                Err(e) => panic!("open: {e}"),
            }
        }
    })
    .await;
    assert_ne!(three.id(), two.id());
    // The link is still fine.
    assert!(il.close_reason().is_none());
    assert!(rl.close_reason().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn destroy_resets_the_circuit_stream_with_its_reason() {
    let limits = QuicLimits {
        max_circuit_streams: 1,
        open_stream_timeout: Duration::from_millis(300),
        ..QuicLimits::default()
    };
    let (s, _) = server(limits.clone());
    let c = client(limits);
    let ((il, _ictrl, _), (rl, _rctrl, _)) = pair(&c, &s).await;
    let mut a = within("open", il.open_circuit_stream())
        .await
        .expect("open");
    a.write_all(b"CREATE2").await.expect("write");
    let mut ra = within("accept", rl.accept_circuit_stream())
        .await
        .expect("accept")
        .expect("stream");
    let mut buf = [0u8; 7];
    within("read", ra.read_exact(&mut buf)).await.expect("read");
    // The only stream slot is taken.
    assert!(il.open_circuit_stream().await.is_err());
    // The responder destroys the circuit with reason 9 (DESTROYED)...
    ra.destroy(9);
    // ...and the opener learns the reason from the reset.
    let mut rest = Vec::new();
    let err = within("reset seen", a.read_to_end(&mut rest))
        .await
        .expect_err("the stream was reset");
    let code = onionmix_link::quic::peer_reset_code(&err).expect("a reset code");
    assert_eq!(codes::destroy_reason(code), 9);
    a.destroy(9);
    drop(a);
    drop(ra);
    // The slot comes back.
    within("open after destroy", async {
        loop {
            if il.open_circuit_stream().await.is_ok() {
                break;
            }
        }
    })
    .await;
}

/// A server that echoes each control stream until the peer closes it.
fn spawn_echo_server(t: QuicTransport) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        while let Some(inc) = t.accept().await {
            tokio::spawn(async move {
                let Ok((link, ctrl, _)) = inc.handshake().await else {
                    return;
                };
                let (mut send, mut recv) = ctrl.into_split();
                let _ = tokio::time::timeout(LONG, tokio::io::copy(&mut recv, &mut send)).await;
                let _ = send.finish();
                let _ = tokio::time::timeout(LONG, link.closed()).await;
            });
        }
    })
}

async fn echo_once(c: &QuicTransport, addr: SocketAddr, msg: &[u8]) {
    let (link, mut ctrl, _) = within("connect", c.connect(addr)).await.expect("connect");
    within("write", ctrl.write_all(msg)).await.expect("write");
    ctrl.finish();
    let mut back = Vec::new();
    within("echo", ctrl.read_to_end(&mut back))
        .await
        .expect("echo");
    assert_eq!(back, msg);
    link.close(codes::NO_ERROR);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_survives_garbage_and_abrupt_peers() {
    let (s, _) = server(QuicLimits {
        handshake_timeout: Duration::from_secs(2),
        ..QuicLimits::default()
    });
    let addr = s.local_addr().expect("addr");
    let accept_task = spawn_echo_server(s.clone());
    let c = client(QuicLimits::default());
    echo_once(&c, addr, b"before").await;

    // Garbage datagrams: random bytes of many sizes, and long-header
    // packets that claim QUIC v1 Initial and then make no sense.
    let udp = tokio::net::UdpSocket::bind(loopback()).await.expect("udp");
    let mut x: u32 = 0x1234_5678;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        x
    };
    for i in 0..300usize {
        let len = 1 + (next() as usize % 1500);
        let mut pkt: Vec<u8> = (0..len).map(|_| next() as u8).collect();
        if i % 3 == 0 && pkt.len() >= 1200 {
            pkt[0] = 0xC0;
            pkt[1..5].copy_from_slice(&1u32.to_be_bytes());
        }
        udp.send_to(&pkt, addr).await.expect("send");
    }

    // An initiator that resets its control stream mid-write and closes
    // the connection with an error.
    let (link, mut ctrl, _) = within("connect", c.connect(addr)).await.expect("connect");
    ctrl.write_all(&[1u8; 3000]).await.expect("write");
    ctrl.reset(codes::PROTOCOL);
    link.close(codes::PROTOCOL);
    // An initiator that completes QUIC but never opens the control stream
    // (the server gives up after its handshake timeout).
    let (idle_link, _unused, _) = within("connect", c.connect(addr)).await.expect("connect");
    // A client endpoint that vanishes: its whole transport is closed.
    let gone = client(QuicLimits::default());
    let (_gl, mut gctrl, _) = within("connect", gone.connect(addr))
        .await
        .expect("connect");
    gctrl.write_all(b"half").await.expect("write");
    gone.close();
    drop(gone);

    // The server still serves a new client.
    let c2 = client(QuicLimits::default());
    echo_once(&c2, addr, b"after").await;
    echo_once(&c, addr, b"again").await;
    // The idle initiator's connection was closed by the server.
    let why = within("idle closed", idle_link.closed()).await;
    assert!(
        matches!(why, quinn::ConnectionError::ApplicationClosed(ref c) if c.error_code == quinn::VarInt::from_u32(codes::PROTOCOL)),
        "{why:?}"
    );
    assert!(!accept_task.is_finished());
    s.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_limit_refuses_extra_peers() {
    let (s, _) = server(QuicLimits {
        max_connections: 1,
        ..QuicLimits::default()
    });
    let addr = s.local_addr().expect("addr");
    let _accept = spawn_echo_server(s.clone());
    let c = client(QuicLimits::default());
    let (first, mut ctrl, _) = within("connect", c.connect(addr)).await.expect("connect");
    ctrl.write_all(b"x").await.expect("write");
    let mut b = [0u8; 1];
    within("echo", ctrl.read_exact(&mut b)).await.expect("echo");
    // A second connection is refused while the first is open.
    assert!(within("refused", c.connect(addr)).await.is_err());
    first.close(codes::NO_ERROR);
    drop(ctrl);
    drop(first);
    // After it closed, the slot is free again.
    within("retry", async {
        loop {
            match c.connect(addr).await {
                Ok((l, _, _)) => break l,
                Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    })
    .await;
}

/// Loopback throughput over circuit streams with the default limits:
/// `cargo test --release -p onionmix-link --test quic -- --ignored --nocapture`.
/// A number for orientation only (shared 2-core machine), not a check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement, run by hand"]
async fn loopback_throughput() {
    let (s, _) = server(QuicLimits::default());
    let c = client(QuicLimits::default());
    let ((il, _ictrl, _), (rl, _rctrl, _)) = pair(&c, &s).await;
    for streams in [1usize, 8] {
        let per = 64 * 1024 * 1024 / streams;
        let start = std::time::Instant::now();
        let mut writers = Vec::new();
        for _ in 0..streams {
            let mut st = il.open_circuit_stream().await.expect("open");
            writers.push(tokio::spawn(async move {
                let chunk = vec![0x5Au8; 64 * 1024];
                for _ in 0..per / chunk.len() {
                    st.write_all(&chunk).await.expect("write");
                }
                st.finish();
                st
            }));
        }
        let mut readers = Vec::new();
        for _ in 0..streams {
            let mut rs = within("accept", rl.accept_circuit_stream())
                .await
                .expect("accept")
                .expect("stream");
            readers.push(tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                let mut n = 0usize;
                loop {
                    let k = rs.read(&mut buf).await.expect("read");
                    if k == 0 {
                        break n;
                    }
                    n += k;
                }
            }));
        }
        let mut total = 0usize;
        for r in readers {
            total += within("reader", r).await.expect("reader");
        }
        for w in writers {
            let _ = within("writer", w).await;
        }
        let secs = start.elapsed().as_secs_f64();
        eprintln!(
            "{streams} stream(s): {total} bytes in {secs:.2} s = {:.0} Mbit/s",
            total as f64 * 8.0 / secs / 1e6
        );
    }
}

/// Certificate rotation: connections accepted after `set_server_identity`
/// see the new certificate, and `handshake_with` serves exactly the
/// identity it is given (whatever the endpoint serves by then).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotated_server_identity_is_served_to_new_connections() {
    let (s, first) = server(QuicLimits::default());
    let c = client(QuicLimits::default());
    let ((_, _, info), _) = pair(&c, &s).await;
    assert_eq!(info.peer_cert.as_deref(), Some(first.as_slice()));

    let (c2, k2) = cert();
    let second = s.server_identity(c2.clone(), k2).expect("identity");
    assert_eq!(second.cert(), c2.as_slice());
    s.set_server_identity(&second);
    let ((_, _, info), (_, _, rinfo)) = pair(&c, &s).await;
    assert_eq!(info.peer_cert.as_deref(), Some(c2.as_slice()));
    assert_eq!(rinfo.own_cert.as_deref(), Some(c2.as_slice()));

    // An identity picked by the caller wins over the endpoint's current one.
    let (c3, k3) = cert();
    let third = s.server_identity(c3.clone(), k3).expect("identity");
    let addr = s.local_addr().expect("addr");
    let (a, b) = within("handshake_with", async {
        tokio::join!(
            async {
                let (l, mut ctrl, info) = c.connect(addr).await.expect("connect");
                ctrl.write_all(b"x").await.expect("write");
                (l, ctrl, info)
            },
            async {
                s.accept()
                    .await
                    .expect("incoming")
                    .handshake_with(&third)
                    .await
            }
        )
    })
    .await;
    let (_l, _ctrl, info) = a;
    assert_eq!(info.peer_cert.as_deref(), Some(c3.as_slice()));
    assert_eq!(
        b.expect("accept").2.own_cert.as_deref(),
        Some(c3.as_slice())
    );
    // A client-only transport has no identity to derive from.
    let (c4, k4) = cert();
    assert!(c.server_identity(c4, k4).is_err());
}

/// A link driven without a channel (the fairness benchmark's probes) sets
/// the weight of a `cubic-per-circuit` controller itself, clamped to the
/// cap; other controllers have none to set.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn congestion_weight_is_set_by_hand_and_clamped() {
    use onionmix_link::quic::{MAX_CIRCUIT_WEIGHT, QuicCongestion};
    let cpc = QuicLimits {
        congestion: QuicCongestion::CubicPerCircuit,
        ..QuicLimits::default()
    };
    let (s, _) = server(cpc.clone());
    let c = client(cpc);
    let ((link, _ctrl, _), _peer) = pair(&c, &s).await;
    assert_eq!(link.congestion_weight(), Some(1));
    assert!(link.set_congestion_weight(3));
    assert_eq!(link.congestion_weight(), Some(3));
    assert!(link.set_congestion_weight(99));
    assert_eq!(link.congestion_weight(), Some(MAX_CIRCUIT_WEIGHT));
    assert!(link.set_congestion_weight(0));
    assert_eq!(link.congestion_weight(), Some(1));

    let cubic = QuicLimits {
        congestion: QuicCongestion::Cubic,
        ..QuicLimits::default()
    };
    let (s, _) = server(cubic.clone());
    let c = client(cubic);
    let ((link, _ctrl, _), _peer) = pair(&c, &s).await;
    assert!(!link.set_congestion_weight(2));
    assert_eq!(link.congestion_weight(), None);
}
