//! What a QUIC link refuses: another ALPN, unidirectional streams (no
//! credit; a peer ignoring that commits STREAM_LIMIT_ERROR, which quinn
//! enforces), datagrams; that dropping the last link handle closes the
//! connection and frees its slot, as closing it does; what a circuit
//! stream's reader holds (a partial cell while idle, at most its budget
//! per read) and what a waiting run of cells pins.

use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;

const LONG: Duration = Duration::from_secs(30);

fn server() -> QuicTransport {
    let ck = rcgen::generate_simple_self_signed(vec!["www.example.invalid".into()])
        .expect("certificate");
    QuicTransport::server(
        "127.0.0.1:0".parse().expect("address"),
        ck.cert.der().to_vec(),
        ck.signing_key.serialize_der(),
        QuicLimits::default(),
    )
    .expect("server")
}

fn client() -> QuicTransport {
    QuicTransport::client(
        "127.0.0.1:0".parse().expect("address"),
        QuicLimits::default(),
    )
    .expect("client")
}

/// Connect and accept; the control stream carries one byte.
async fn pair(c: &QuicTransport, s: &QuicTransport) -> (QuicLink, QuicLink) {
    let addr = s.local_addr().expect("addr");
    let (a, b) = tokio::time::timeout(LONG, async {
        tokio::join!(
            async {
                let (l, mut ctrl, _) = c.connect(addr).await.expect("connect");
                ctrl.write_all(b"v").await.expect("write");
                (l, ctrl)
            },
            async {
                s.accept()
                    .await
                    .expect("incoming")
                    .handshake()
                    .await
                    .expect("handshake")
            }
        )
    })
    .await
    .expect("in time");
    // Streams are kept alive by the links' owners in real use; here the
    // control streams may go.
    drop(a.1);
    (a.0, b.0)
}

#[tokio::test]
async fn another_alpn_is_refused() {
    let s = server();
    let addr = s.local_addr().expect("addr");
    let _accepting = tokio::spawn({
        let s = s.clone();
        async move {
            while let Some(inc) = s.accept().await {
                let _ = inc.handshake().await;
            }
        }
    });
    let cfg = QuicLimits::default()
        .client_config_with_alpn(b"h3")
        .expect("config");
    let c = client();
    let connecting = c
        .endpoint
        .connect_with(cfg, addr, crate::certpolicy::SNI)
        .expect("connect");
    let res = tokio::time::timeout(LONG, connecting)
        .await
        .expect("in time");
    let err = res.expect_err("a connection with ALPN h3 must fail");
    eprintln!("refused: {err}");
}

#[tokio::test]
async fn unidirectional_streams_get_no_credit() {
    let s = server();
    let c = client();
    let (il, rl) = pair(&c, &s).await;
    // Our own limits allow the peer no unidirectional stream, so quinn
    // will not even let us open one towards it.
    let opened = tokio::time::timeout(Duration::from_millis(500), il.conn.open_uni()).await;
    assert!(opened.is_err(), "no credit for unidirectional streams");
    assert!(rl.close_reason().is_none());
}

#[tokio::test]
async fn datagrams_are_not_offered() {
    let s = server();
    let c = client();
    let (il, rl) = pair(&c, &s).await;
    assert!(il.conn.max_datagram_size().is_none());
    assert!(rl.conn.max_datagram_size().is_none());
    assert!(il.conn.send_datagram(Bytes::from_static(b"x")).is_err());
}

#[tokio::test]
async fn dropping_the_last_link_closes_the_connection() {
    let s = server();
    let c = client();
    let (il, rl) = pair(&c, &s).await;
    let il2 = il.clone();
    drop(il);
    assert!(il2.close_reason().is_none(), "a clone keeps it open");
    assert_eq!(c.open_connections(), 1);
    let stream = il2.open_circuit_stream().await.expect("stream");
    drop(il2);
    // The held stream does not keep the connection (or its slot).
    assert_eq!(c.open_connections(), 0);
    let code = tokio::time::timeout(LONG, rl.closed_with_code())
        .await
        .expect("in time");
    assert_eq!(code, Some(codes::NO_ERROR));
    drop(stream);
}

/// Closing a link frees its slot at once, though handles to it remain
/// (a channel registry may keep a closed channel's for a while).
#[tokio::test]
async fn closing_a_link_frees_its_slot_while_handles_remain() {
    let s = server();
    let c = client();
    let (il, rl) = pair(&c, &s).await;
    assert_eq!(c.open_connections(), 1);
    let kept = il.clone();
    il.close(codes::NO_ERROR);
    assert_eq!(c.open_connections(), 0);
    assert!(kept.close_reason().is_some());
    // Closing again, and dropping the handles, give back nothing twice.
    kept.close(codes::NO_ERROR);
    drop((il, kept));
    assert_eq!(c.open_connections(), 0);
    let code = tokio::time::timeout(LONG, rl.closed_with_code())
        .await
        .expect("in time");
    assert_eq!(code, Some(codes::NO_ERROR));
    assert_eq!(s.open_connections(), 1, "the server's link is not closed");
    rl.close(codes::NO_ERROR);
    assert_eq!(s.open_connections(), 0);
}

/// On loopback (MTU 65536) path MTU discovery takes a link's packets past
/// Ethernet's 1452 bytes up to [`QuicLimits::max_udp_payload`] (the
/// per-packet work of a bulk transfer is what QUIC links pay over TLS),
/// and a bulk transfer in such packets loses none to oversized segmented
/// sends (with 16 KiB packets, three in four were).
#[tokio::test]
async fn loopback_links_discover_large_packets() {
    let s = server();
    let c = client();
    let (il, rl) = pair(&c, &s).await;
    let want = QuicLimits::default().max_udp_payload;
    let grown = tokio::time::timeout(LONG, async {
        loop {
            let (a, b) = (il.path_stats().mtu, rl.path_stats().mtu);
            if a == want && b == want {
                return (a, b);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        grown.is_ok(),
        "MTUs {} / {}, want {want}",
        il.path_stats().mtu,
        rl.path_stats().mtu
    );
    const BULK: usize = 4 << 20;
    let mut tx = il.open_circuit_stream().await.expect("stream");
    let writer = tokio::spawn(async move {
        tx.write_all(&vec![0x5a; BULK]).await.expect("write");
        tx.finish();
        tx
    });
    let mut rx = tokio::time::timeout(LONG, rl.accept_circuit_stream())
        .await
        .expect("in time")
        .expect("accept")
        .expect("stream");
    let mut got = Vec::new();
    tokio::time::timeout(LONG, rx.read_to_end(&mut got))
        .await
        .expect("in time")
        .expect("read");
    assert_eq!(got.len(), BULK);
    let _tx = writer.await.expect("writer");
    let st = il.path_stats();
    assert!(
        st.lost_packets * 20 <= st.sent_packets,
        "lost {} of {} packets",
        st.lost_packets,
        st.sent_packets
    );
}

/// The endpoint's UDP socket gets the kernel buffers asked for, as far
/// as the kernel's cap allows (Linux reports twice what it granted); 0
/// leaves the system default; an ask past the bound is a configuration
/// error.
#[tokio::test]
async fn udp_socket_buffers_are_sized_as_asked() {
    let cap = |name: &str| -> Option<usize> {
        std::fs::read_to_string(format!("/proc/sys/net/core/{name}"))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    };
    let t = client();
    let got = t.socket_buffers();
    let (rcv, snd) = (
        got.receive.expect("SO_RCVBUF"),
        got.send.expect("SO_SNDBUF"),
    );
    if let (Some(rmax), Some(wmax)) = (cap("rmem_max"), cap("wmem_max")) {
        let ask = DEFAULT_UDP_SOCKET_BUFFER;
        assert_eq!(rcv, 2 * ask.min(rmax), "receive buffer (rmem_max {rmax})");
        assert_eq!(snd, 2 * ask.min(wmax), "send buffer (wmem_max {wmax})");
    }
    let small = QuicLimits {
        udp_socket_buffer: 64 * 1024,
        ..QuicLimits::default()
    };
    let t = QuicTransport::client("127.0.0.1:0".parse().expect("address"), small).expect("client");
    if cfg!(target_os = "linux") {
        assert_eq!(t.socket_buffers().receive, Some(128 * 1024));
    }
    let untouched = QuicLimits {
        udp_socket_buffer: 0,
        ..QuicLimits::default()
    };
    let t =
        QuicTransport::client("127.0.0.1:0".parse().expect("address"), untouched).expect("client");
    if let Some(def) = cap("rmem_default") {
        assert_eq!(
            t.socket_buffers().receive,
            Some(def),
            "the default, untouched"
        );
    }
    let huge = QuicLimits {
        udp_socket_buffer: config::MAX_UDP_SOCKET_BUFFER + 1,
        ..QuicLimits::default()
    };
    let err = QuicTransport::client("127.0.0.1:0".parse().expect("address"), huge)
        .expect_err("past the bound");
    assert!(matches!(err, LinkError::Config(_)), "{err:?}");
}

/// A circuit stream waiting for more holds no read buffer: what is left
/// of a partial cell moves to an allocation of its own before it waits
/// (a byte stream's reader keeps at least 16 KiB of spare room), so tens
/// of thousands of idle circuits cost their partial cells, not 32 KiB
/// each.
#[tokio::test]
async fn an_idle_circuit_stream_keeps_only_its_partial_cell() {
    use crate::io::CellSource;
    let s = server();
    let c = client();
    let (il, rl) = pair(&c, &s).await;
    let mut out = il.open_circuit_stream().await.expect("stream");
    // One cell and 100 bytes of the next (514-byte cells).
    out.write_all(&[7u8; 614]).await.expect("write");
    let stream = tokio::time::timeout(LONG, rl.accept_circuit_stream())
        .await
        .expect("in time")
        .expect("accept")
        .expect("a stream");
    let (_send, recv) = stream.into_split();
    let mut recv = stream::ChunkSource::new(recv);
    let mut buf = bytes::BytesMut::new();
    while buf.len() < 614 {
        let n = tokio::time::timeout(LONG, recv.fill(&mut buf))
            .await
            .expect("in time")
            .expect("read");
        assert!(n > 0, "the stream ended early");
    }
    assert_eq!(buf.len(), 614);
    // The reader takes the whole cell off the front...
    let cell = buf.split_to(514);
    // ...and waits for the rest of the next one (nothing comes).
    let waited = tokio::time::timeout(Duration::from_millis(200), recv.fill(&mut buf)).await;
    assert!(waited.is_err(), "nothing more was sent");
    assert_eq!(&buf[..], &[7u8; 100][..]);
    assert!(
        buf.capacity() <= 1024,
        "waiting with {} bytes of buffer",
        buf.capacity()
    );
    drop(cell);
    drop(out);
}

/// Accept the next circuit stream `rl`'s peer opened, as a cell source.
async fn accept_source(rl: &QuicLink) -> stream::ChunkSource {
    let stream = tokio::time::timeout(LONG, rl.accept_circuit_stream())
        .await
        .expect("in time")
        .expect("accept")
        .expect("a stream");
    stream::ChunkSource::new(stream.into_split().1)
}

/// One fill of a circuit stream takes at most `FILL_BUDGET` bytes however
/// much has arrived; the bytes come whole and in order, then the end
/// (after the last bytes, not with them); a reset after data reaches the
/// reader with the peer's code.
#[tokio::test]
async fn a_fill_takes_at_most_its_budget_then_the_end_or_the_reset() {
    use crate::io::CellSource;
    use stream::FILL_BUDGET;
    let s = server();
    let c = client();
    let (il, rl) = pair(&c, &s).await;

    // 300 KiB, then FIN.
    let data: Vec<u8> = (0..300 * 1024u32).map(|i| (i % 251) as u8).collect();
    let mut out = il.open_circuit_stream().await.expect("stream");
    out.write_all(&data).await.expect("write");
    out.finish();
    let mut src = accept_source(&rl).await;
    // Let it all arrive, so one fill could take more than its budget.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut buf = bytes::BytesMut::new();
    loop {
        let before = buf.len();
        let n = tokio::time::timeout(LONG, src.fill(&mut buf))
            .await
            .expect("in time")
            .expect("read");
        assert!(n <= FILL_BUDGET, "{n} bytes in one fill");
        assert_eq!(buf.len(), before + n);
        if n == 0 {
            break;
        }
    }
    assert_eq!(&buf[..], &data[..]);
    // The end stays the end.
    let n = src.fill(&mut buf).await.expect("still the end");
    assert_eq!(n, 0);

    // Some bytes, then a reset: the reader gets the code.
    let mut out = il.open_circuit_stream().await.expect("stream");
    out.write_all(&[1u8; 1000]).await.expect("write");
    let mut src = accept_source(&rl).await;
    let mut buf = bytes::BytesMut::new();
    let n = tokio::time::timeout(LONG, src.fill(&mut buf))
        .await
        .expect("in time")
        .expect("read");
    assert!(n > 0);
    out.reset(codes::destroy_code(3));
    let code = loop {
        match tokio::time::timeout(LONG, src.fill(&mut buf))
            .await
            .expect("in time")
        {
            Ok(0) => panic!("the end, not the reset"),
            Ok(_) => {}
            Err(e) => break stream::peer_reset_code(&e),
        }
    };
    assert_eq!(code, Some(u64::from(codes::destroy_code(3))));
}

/// A run cut from a producer's buffer keeps the whole buffer alive;
/// one that must wait is copied out, one that goes at once is not.
#[test]
fn a_waiting_run_does_not_pin_its_producers_buffer() {
    let mut parent = bytes::BytesMut::from(&[5u8; 16 * 1024][..]);
    let range = parent.as_ptr() as usize..parent.as_ptr() as usize + parent.len();
    let run = parent.split_to(514);
    let at = run.as_ptr() as usize;
    let kept = chan::own_if_waiting(run, 0);
    assert_eq!(kept.as_ptr() as usize, at);
    let owned = chan::own_if_waiting(parent.split_to(514), 1);
    assert!(!range.contains(&(owned.as_ptr() as usize)));
    assert_eq!(&owned[..], &[5u8; 514][..]);
    assert_eq!(owned.capacity(), 514);
}
