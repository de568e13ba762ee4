//! A Tor channel over a QUIC link (`spawn_quic_channel_io`): circuits on
//! their own streams, DESTROY as a stream reset, channel cells on the
//! control stream; a circuit whose stream the peer does not read blocks
//! nobody else and is destroyed when its queue passes the limit; a peer
//! breaking the mapping loses that circuit only (or, on the control
//! stream, the link), a variable-length header on a circuit stream as
//! soon as it arrives; with per-circuit CUBIC the link's controller
//! stands for the circuits that send; what circuit readers hold for a
//! reactor that falls behind counts as the link's memory; an orderly
//! close delivers the control stream's queue first; a peer stopping the
//! control stream loses the link.

use std::time::Duration;

use bytes::BytesMut;
use onionmix_cell::chan::destroy_reason;
use onionmix_cell::{CellCodec, ChanCmd, PAYLOAD_LEN, RawCell};
use onionmix_link::quic::QuicCongestion;
use onionmix_link::quic::{STREAM_BACKPRESSURE_SHARE, codes, peer_reset_code};
use onionmix_link::{
    ChannelIo, QuicLimits, QuicLink, QuicStream, QuicTransport, spawn_quic_channel_io,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::*;

fn codec() -> CellCodec {
    let mut c = CellCodec::new();
    c.set_link_version(5);
    c
}

/// One fixed-size cell in wire form, its payload starting with `first`.
fn cell(circ: u32, cmd: ChanCmd, first: &[u8]) -> BytesMut {
    let mut body = [0u8; PAYLOAD_LEN];
    body[..first.len()].copy_from_slice(first);
    let mut out = BytesMut::new();
    codec().encode_fixed(circ, cmd, &body, &mut out);
    out
}

/// `n` RELAY cells for `circ`, numbered in their first two bytes.
fn relays(circ: u32, n: u16) -> BytesMut {
    let mut out = BytesMut::new();
    for i in 0..n {
        out.extend_from_slice(&cell(circ, ChanCmd::RELAY, &i.to_be_bytes()));
    }
    out
}

/// The next `n` cells the reactor side receives.
async fn recv(io: &mut ChannelIo, n: usize) -> Vec<RawCell> {
    let mut got = Vec::new();
    while got.len() < n {
        let batch = within("cells", io.rx.recv())
            .await
            .expect("channel open")
            .expect("cells, not an error");
        got.extend(batch);
    }
    got
}

/// Nothing arrives for a while (a short wait: only used after the cells
/// that would have arrived before were seen).
async fn quiet(io: &mut ChannelIo) {
    if let Ok(Some(b)) = tokio::time::timeout(Duration::from_millis(300), io.rx.recv()).await {
        panic!("unexpected: {b:?}");
    }
}

/// A connected pair: the initiator's channel runs over the QUIC mapping;
/// the responder is returned raw (link and control stream), with both
/// endpoints (keep them while the links are used).
async fn setup(
    limits: QuicLimits,
    accept_circuits: bool,
) -> (ChannelIo, QuicLink, QuicStream, [QuicTransport; 2]) {
    let (s, _) = server(limits.clone());
    let c = client(limits.clone());
    let ((il, ictrl, _), (rl, rctrl, _)) = pair(&c, &s).await;
    let io = spawn_quic_channel_io(il, ictrl, codec(), BytesMut::new(), accept_circuits)
        .expect("channel");
    (io, rl, rctrl, [s, c])
}

/// Read one framed cell from a raw stream.
async fn read_cell(s: &mut QuicStream, buf: &mut BytesMut) -> Result<RawCell, std::io::Error> {
    loop {
        if let Some(c) = codec().decode(buf).expect("framing") {
            return Ok(c);
        }
        if within("read", s.read_buf(buf)).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// Read until the stream ends; the peer's reset code.
async fn reset_code(s: &mut QuicStream) -> Option<u64> {
    let mut sink = vec![0u8; 64 * 1024];
    loop {
        match within("reset", s.read(&mut sink)).await {
            Ok(0) => return None,
            Ok(_) => {}
            Err(e) => return peer_reset_code(&e),
        }
    }
}

/// The peer opens a stream for `circ` with a CREATE2 followed by `then`,
/// which breaks the mapping: the reactor sees the CREATE2, then a DESTROY
/// (PROTOCOL), and the stream is reset with that reason.
async fn created_then_destroyed(a: &mut ChannelIo, rl: &QuicLink, circ: u32, then: &[u8]) {
    let mut s = rl.open_circuit_stream().await.expect("open");
    let mut out = cell(circ, ChanCmd::CREATE2, &[]);
    out.extend_from_slice(then);
    s.write_all(&out).await.expect("write");
    let got = recv(a, 2).await;
    assert_eq!((got[0].circ_id, got[0].cmd), (circ, ChanCmd::CREATE2));
    assert_eq!((got[1].circ_id, got[1].cmd), (circ, ChanCmd::DESTROY));
    assert_eq!(got[1].payload[0], destroy_reason::PROTOCOL);
    let protocol = u64::from(codes::destroy_code(destroy_reason::PROTOCOL));
    assert_eq!(reset_code(&mut s).await, Some(protocol));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn circuits_travel_on_their_own_streams_and_destroy_resets() {
    let limits = QuicLimits::default();
    let (s, _) = server(limits.clone());
    let c = client(limits.clone());
    let ((il, ictrl, _), (rl, rctrl, _)) = pair(&c, &s).await;
    let mut a = spawn_quic_channel_io(il, ictrl, codec(), BytesMut::new(), true).expect("channel");
    let mut b = spawn_quic_channel_io(rl, rctrl, codec(), BytesMut::new(), true).expect("channel");
    assert_eq!(a.tx.transport(), "quic");
    let (x, y) = (0x8000_0001u32, 0x8000_0002u32);

    // Interleaved cells of two circuits and a channel cell, in one write.
    let mut out = BytesMut::new();
    out.extend_from_slice(&cell(x, ChanCmd::CREATE2, &[1]));
    out.extend_from_slice(&cell(y, ChanCmd::CREATE2, &[2]));
    out.extend_from_slice(&cell(0, ChanCmd::PADDING, &[]));
    for i in 0..3u16 {
        out.extend_from_slice(&cell(x, ChanCmd::RELAY, &i.to_be_bytes()));
        out.extend_from_slice(&cell(y, ChanCmd::RELAY, &i.to_be_bytes()));
    }
    assert!(a.tx.send_now(out));
    let got = recv(&mut b, 9).await;
    assert_eq!(got.iter().filter(|c| c.cmd == ChanCmd::PADDING).count(), 1);
    for id in [x, y] {
        let mine: Vec<&RawCell> = got.iter().filter(|c| c.circ_id == id).collect();
        assert_eq!(mine.len(), 4);
        assert_eq!(mine[0].cmd, ChanCmd::CREATE2);
        for (i, c) in mine[1..].iter().enumerate() {
            assert_eq!(c.cmd, ChanCmd::RELAY);
            assert_eq!(&c.payload[..2], &(i as u16).to_be_bytes());
        }
    }

    // The answers come back on the same streams.
    let mut back = BytesMut::new();
    back.extend_from_slice(&cell(x, ChanCmd::CREATED2, &[9]));
    back.extend_from_slice(&cell(y, ChanCmd::CREATED2, &[9]));
    back.extend_from_slice(&relays(y, 2));
    assert!(b.tx.send_now(back));
    let got = recv(&mut a, 4).await;
    assert_eq!(got.iter().filter(|c| c.cmd == ChanCmd::CREATED2).count(), 2);

    // DESTROY x: the peer's reactor gets a DESTROY with the reason; later
    // cells of x are dropped on both sides; y is untouched.
    assert!(a.tx.send_now(cell(x, ChanCmd::DESTROY, &[destroy_reason::REQUESTED])));
    let got = recv(&mut b, 1).await;
    assert_eq!((got[0].circ_id, got[0].cmd), (x, ChanCmd::DESTROY));
    assert_eq!(got[0].payload[0], destroy_reason::REQUESTED);
    assert!(a.tx.send_now(relays(x, 1)));
    assert!(b.tx.send_now(relays(x, 1)));
    assert!(a.tx.send_now(relays(y, 1)));
    let got = recv(&mut b, 1).await;
    assert_eq!((got[0].circ_id, got[0].cmd), (y, ChanCmd::RELAY));
    quiet(&mut b).await;
    quiet(&mut a).await;
    assert_eq!(a.tx.queued_bytes(), 0);

    // Closing one side's channel ends the other's; a circuit still open
    // (y) may first be reported destroyed with CHANNEL_CLOSED (its stream
    // is reset with that reason before the connection closes).
    a.tx.close();
    let end = within("close", async {
        loop {
            match b.rx.recv().await {
                Some(Ok(cells)) => {
                    for c in cells {
                        assert_eq!((c.circ_id, c.cmd), (y, ChanCmd::DESTROY));
                        assert_eq!(c.payload[0], destroy_reason::CHANNEL_CLOSED);
                    }
                }
                end => return end,
            }
        }
    })
    .await;
    assert!(matches!(end, Some(Err(_)) | None), "{end:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_circuit_blocks_nobody_else_and_its_queue_is_bounded() {
    let limits = QuicLimits {
        max_circuit_queue: 2 << 20,
        ..QuicLimits::default()
    };
    let (mut a, rl, _rctrl, _ends) = setup(limits.clone(), true).await;
    let (x, y) = (0x8000_0011u32, 0x8000_0012u32);
    // x first, with 1.5 MiB behind it; then y with 200 cells.
    let mut out = cell(x, ChanCmd::CREATE2, &[]);
    out.extend_from_slice(&relays(x, 3000));
    assert!(a.tx.send_now(out));
    let mut out = cell(y, ChanCmd::CREATE2, &[]);
    out.extend_from_slice(&relays(y, 200));
    assert!(a.tx.send_now(out));

    // The peer reads y completely and never reads x past its first cell.
    let mut streams = Vec::new();
    for _ in 0..2 {
        let mut s = within("accept", rl.accept_circuit_stream())
            .await
            .expect("accept")
            .expect("stream");
        let mut buf = BytesMut::new();
        let first = read_cell(&mut s, &mut buf).await.expect("first cell");
        assert_eq!(first.cmd, ChanCmd::CREATE2);
        streams.push((first.circ_id, s, buf));
    }
    let (_, mut sx, _) = streams.remove(streams.iter().position(|s| s.0 == x).expect("x"));
    let (_, mut sy, mut buf_y) = streams.remove(0);
    for i in 0..200u16 {
        let c = read_cell(&mut sy, &mut buf_y).await.expect("y cell");
        assert_eq!((c.circ_id, &c.payload[..2]), (y, &i.to_be_bytes()[..]));
    }

    // x waits for flow control: its backlog is queued, but counts towards
    // the channel's back-pressure only up to its share.
    within("x backlog", async {
        while a.tx.circuit_queued_bytes(x) < 512 * 1024 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(a.tx.queued_bytes() <= STREAM_BACKPRESSURE_SHARE);
    assert!(a.tx.memory_bytes() >= a.tx.circuit_queued_bytes(x));
    assert_eq!(a.tx.circuit_queued_bytes(y), 0);

    // y keeps flowing meanwhile.
    assert!(a.tx.send_now(relays(y, 50)));
    for i in 0..50u16 {
        let c = read_cell(&mut sy, &mut buf_y).await.expect("y cell");
        assert_eq!(&c.payload[..2], &i.to_be_bytes());
    }

    // Past the queue limit x is destroyed: RESOURCELIMIT to our reactor
    // and as the stream's reset code; its queue is freed.
    assert!(a.tx.send_now(relays(x, 3000)));
    let got = recv(&mut a, 1).await;
    assert_eq!((got[0].circ_id, got[0].cmd), (x, ChanCmd::DESTROY));
    assert_eq!(got[0].payload[0], destroy_reason::RESOURCELIMIT);
    assert_eq!(
        reset_code(&mut sx).await,
        Some(u64::from(codes::destroy_code(
            destroy_reason::RESOURCELIMIT
        )))
    );
    within("x freed", async {
        while a.tx.memory_bytes() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert_eq!(a.tx.queued_bytes(), 0);
}

/// Wait until `f` holds, polling (bounded by [`within`]).
async fn until(what: &str, mut f: impl FnMut() -> bool) {
    within(what, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// The reactor stops reading its inbound queue while the peer sends: a
/// circuit stream's reader then waits holding what it has read, and a
/// new circuit's stream waits holding its CREATE; both count in the
/// channel's memory (the OOM handler's measure). Destroying the waiting
/// circuit frees its share at once; once the reactor reads again every
/// cell of the other arrives in order and the count returns to 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_circuit_readers_hold_for_a_slow_reactor_counts_as_memory() {
    // One stream's window takes 4000 cells, more than the reactor's queue
    // (32 batches of at most 64 cells): the reader must wait.
    const CELLS: u16 = 4000;
    let limits = QuicLimits {
        stream_receive_window: 4 << 20,
        ..QuicLimits::default()
    };
    let (mut a, rl, _rctrl, _ends) = setup(limits, true).await;
    assert_eq!(a.tx.memory_bytes(), 0);
    let (x, y) = (0x40, 0x41);
    let mut sx = rl.open_circuit_stream().await.expect("open");
    let mut out = cell(x, ChanCmd::CREATE2, &[]);
    out.extend_from_slice(&relays(x, CELLS));
    within("write x", sx.write_all(&out)).await.expect("write");
    until("x's reader holds cells", || a.tx.memory_bytes() > 0).await;
    // Nothing is queued towards the peer: it is all the reader's, and a
    // waiting reader reads no more, so the count stays put.
    assert_eq!(a.tx.queued_bytes(), 0);
    let held_x = a.tx.memory_bytes();
    assert!(held_x >= codec().fixed_len(), "{held_x}");

    // y's stream arrives: its CREATE waits too, and counts.
    let mut sy = rl.open_circuit_stream().await.expect("open");
    let mut out = cell(y, ChanCmd::CREATE2, &[]);
    out.extend_from_slice(&relays(y, 20));
    within("write y", sy.write_all(&out)).await.expect("write");
    until("y's CREATE counted", || a.tx.memory_bytes() > held_x).await;

    // Destroying y (which the reactor never saw) frees its share at once
    // and resets its stream.
    assert!(a.tx.send_now(cell(y, ChanCmd::DESTROY, &[destroy_reason::REQUESTED])));
    until("y's share freed", || a.tx.memory_bytes() == held_x).await;
    let requested = u64::from(codes::destroy_code(destroy_reason::REQUESTED));
    assert_eq!(reset_code(&mut sy).await, Some(requested));

    // The reactor reads again: x's cells all arrive, in order; none of y.
    let got = recv(&mut a, usize::from(CELLS) + 1).await;
    assert_eq!((got[0].circ_id, got[0].cmd), (x, ChanCmd::CREATE2));
    for (i, c) in got[1..].iter().enumerate() {
        assert_eq!((c.circ_id, c.cmd), (x, ChanCmd::RELAY));
        assert_eq!(&c.payload[..2], &(i as u16).to_be_bytes());
    }
    quiet(&mut a).await;
    until("nothing held", || a.tx.memory_bytes() == 0).await;
}

/// An orderly close delivers what was queued on the control stream
/// before it, as a TLS channel's close delivers its queue before the FIN:
/// the connection closes once the peer has acknowledged it all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_orderly_close_delivers_the_control_queue_first() {
    const CELLS: usize = 2000;
    let limits = QuicLimits::default();
    let (s, _) = server(limits.clone());
    let c = client(limits.clone());
    let ((il, ictrl, _), (rl, rctrl, _)) = pair(&c, &s).await;
    let a = spawn_quic_channel_io(il, ictrl, codec(), BytesMut::new(), true).expect("channel");
    let mut b = spawn_quic_channel_io(rl, rctrl, codec(), BytesMut::new(), true).expect("channel");
    let mut out = BytesMut::new();
    for _ in 0..CELLS {
        out.extend_from_slice(&cell(0, ChanCmd::PADDING, &[]));
    }
    assert!(a.tx.send_now(out));
    a.tx.close();
    let mut got = 0;
    let end = within("all cells, then the end", async {
        loop {
            match b.rx.recv().await {
                Some(Ok(batch)) => {
                    assert!(batch.iter().all(|c| c.cmd == ChanCmd::PADDING));
                    got += batch.len();
                }
                other => return other,
            }
        }
    })
    .await;
    assert!(matches!(end, Some(Err(_)) | None), "{end:?}");
    assert_eq!(got, CELLS);
}

/// A peer that stops our control stream (STOP_SENDING) breaks the
/// mapping: the link closes with PROTOCOL at once, even when nothing was
/// being written on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_stopping_the_control_stream_closes_the_link() {
    let (mut a, rl, rctrl, _ends) = setup(QuicLimits::default(), true).await;
    let (_send, mut recv) = rctrl.into_split();
    recv.stop(quinn::VarInt::from_u32(0)).expect("stop");
    let code = within("close", rl.closed_with_code()).await;
    assert_eq!(code, Some(codes::PROTOCOL));
    let end = within("the reactor hears", a.rx.recv()).await;
    assert!(matches!(end, Some(Err(_)) | None), "{end:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peer_mistakes_end_only_their_circuit() {
    let (mut a, rl, mut rctrl, _ends) = setup(QuicLimits::default(), true).await;
    let destroy_protocol = Some(u64::from(codes::destroy_code(destroy_reason::PROTOCOL)));
    // A stream whose first cell does not create a circuit: reset, and the
    // reactor hears nothing.
    let mut s1 = rl.open_circuit_stream().await.expect("open");
    s1.write_all(&relays(7, 1)).await.expect("write");
    assert_eq!(reset_code(&mut s1).await, destroy_protocol);

    // A cell of another circuit on a circuit's stream: that circuit is
    // destroyed with PROTOCOL.
    let (x, y, w) = (0x11u32, 0x12u32, 0x13u32);
    created_then_destroyed(&mut a, &rl, x, &relays(99, 1)).await;

    // The peer resets a circuit's stream: a DESTROY with its reason.
    let mut s3 = rl.open_circuit_stream().await.expect("open");
    s3.write_all(&cell(y, ChanCmd::CREATE2, &[]))
        .await
        .expect("write");
    let got = recv(&mut a, 1).await;
    assert_eq!((got[0].circ_id, got[0].cmd), (y, ChanCmd::CREATE2));
    s3.destroy(destroy_reason::FINISHED);
    let got = recv(&mut a, 1).await;
    assert_eq!((got[0].circ_id, got[0].cmd), (y, ChanCmd::DESTROY));
    assert_eq!(got[0].payload[0], destroy_reason::FINISHED);

    // A second stream for a circuit ID in use is refused; the first
    // circuit carries on.
    let mut s4 = rl.open_circuit_stream().await.expect("open");
    s4.write_all(&cell(w, ChanCmd::CREATE2, &[]))
        .await
        .expect("write");
    let got = recv(&mut a, 1).await;
    assert_eq!((got[0].circ_id, got[0].cmd), (w, ChanCmd::CREATE2));
    let mut s5 = rl.open_circuit_stream().await.expect("open");
    s5.write_all(&cell(w, ChanCmd::CREATE2, &[]))
        .await
        .expect("write");
    assert_eq!(reset_code(&mut s5).await, destroy_protocol);
    let mut reply = cell(w, ChanCmd::CREATED2, &[]);
    reply.extend_from_slice(&relays(w, 1));
    assert!(a.tx.send_now(reply));
    let mut buf = BytesMut::new();
    assert_eq!(
        read_cell(&mut s4, &mut buf).await.expect("cell").cmd,
        ChanCmd::CREATED2
    );
    assert_eq!(
        read_cell(&mut s4, &mut buf).await.expect("cell").cmd,
        ChanCmd::RELAY
    );
    quiet(&mut a).await;

    // A circuit cell on the control stream ends the link (PROTOCOL).
    rctrl.write_all(&relays(w, 1)).await.expect("write");
    let end = within("end", a.rx.recv()).await;
    assert!(matches!(end, Some(Err(_))), "{end:?}");
    assert_eq!(
        within("closed", rl.closed_with_code()).await,
        Some(codes::PROTOCOL)
    );
}

/// A variable-length cell header on a circuit stream (which carries only
/// fixed-size cells) is refused when the header arrives, not after its
/// body of up to 64 KiB was buffered: a peer cannot park that much on each
/// of a link's streams, neither as the first cell (where the first-cell
/// wait would otherwise hold it until `open_stream_timeout`) nor later
/// (where nothing bounds the wait).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_variable_length_header_on_a_circuit_stream_is_refused_at_once() {
    // Longer than any wait here: a refusal seen comes from the header.
    let limits = QuicLimits {
        open_stream_timeout: Duration::from_secs(600),
        ..QuicLimits::default()
    };
    let (mut a, rl, _rctrl, _ends) = setup(limits, true).await;
    let destroy_protocol = Some(u64::from(codes::destroy_code(destroy_reason::PROTOCOL)));
    // VPADDING (128) announcing 65535 bytes, followed by 1000 of them.
    let var_header = |circ: u32| {
        let mut b = BytesMut::new();
        b.extend_from_slice(&circ.to_be_bytes());
        b.extend_from_slice(&[128, 0xff, 0xff]);
        b.extend_from_slice(&[0u8; 1000]);
        b
    };
    let mut s1 = rl.open_circuit_stream().await.expect("open");
    s1.write_all(&var_header(0x21)).await.expect("write");
    assert_eq!(reset_code(&mut s1).await, destroy_protocol);

    // After its CREATE2: the circuit is destroyed with PROTOCOL.
    created_then_destroyed(&mut a, &rl, 0x22, &var_header(0x22)).await;
    quiet(&mut a).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_refuses_circuit_streams_and_abort_closes_at_once() {
    let (a, rl, _rctrl, _ends) = setup(QuicLimits::default(), false).await;
    let mut s = rl.open_circuit_stream().await.expect("open");
    s.write_all(&cell(0x12, ChanCmd::CREATE2, &[]))
        .await
        .expect("write");
    assert_eq!(
        reset_code(&mut s).await,
        Some(u64::from(codes::destroy_code(destroy_reason::PROTOCOL)))
    );
    // A circuit of ours with a backlog, then the memory-pressure handler's
    // abort: the connection closes with RESOURCE and the queues are freed.
    let x = 0x8000_0021u32;
    let mut out = cell(x, ChanCmd::CREATE2, &[]);
    out.extend_from_slice(&relays(x, 2000));
    assert!(a.tx.send_now(out));
    a.tx.abort();
    // CONNECTION_CLOSE is sent once; right after a burst it can be lost on
    // a busy loopback (the peer's socket buffer full). Then the peer learns
    // of the close from the next packet it sends (answered by a stateless
    // reset), as it would on a real network.
    let code = match tokio::time::timeout(Duration::from_secs(5), rl.closed_with_code()).await {
        Ok(code) => code,
        Err(_) => {
            if let Ok(mut s) = rl.open_circuit_stream().await {
                let _ = s.write_all(b"poke").await;
            }
            within("closed after a poke", rl.closed_with_code()).await
        }
    };
    assert!(matches!(code, Some(codes::RESOURCE) | None), "{code:?}");
    within("freed", async {
        while a.tx.memory_bytes() > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(!a.tx.send_now(relays(x, 1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_circuit_cubic_stands_for_the_circuits_that_send() {
    let limits = QuicLimits {
        congestion: QuicCongestion::CubicPerCircuit,
        ..QuicLimits::default()
    };
    let (s, _) = server(limits.clone());
    let c = client(limits.clone());
    let ((il, ictrl, _), (rl, _rctrl, _)) = pair(&c, &s).await;
    let link = il.clone();
    let a = spawn_quic_channel_io(il, ictrl, codec(), BytesMut::new(), true).expect("channel");
    assert_eq!(link.congestion_weight(), Some(1));

    // Two circuits; the peer reads both streams to the end.
    let (x, y) = (0x8000_0041u32, 0x8000_0042u32);
    assert!(a.tx.send_now(cell(x, ChanCmd::CREATE2, &[])));
    assert!(a.tx.send_now(cell(y, ChanCmd::CREATE2, &[])));
    for _ in 0..2 {
        let mut st = within("accept", rl.accept_circuit_stream())
            .await
            .expect("accept")
            .expect("stream");
        tokio::spawn(async move {
            let mut sink = vec![0u8; 64 * 1024];
            while matches!(st.read(&mut sink).await, Ok(n) if n > 0) {}
        });
    }

    // Both send: the controller stands for two flows.
    within("weight 2", async {
        while link.congestion_weight() != Some(2) {
            assert!(a.tx.send_now(relays(x, 4)));
            assert!(a.tx.send_now(relays(y, 4)));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    // Only x sends: back to one.
    within("weight 1", async {
        while link.congestion_weight() != Some(1) {
            assert!(a.tx.send_now(relays(x, 4)));
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;

    // Other controllers have no weight.
    let (s2, _) = server(QuicLimits::default());
    let c2 = client(QuicLimits::default());
    let ((other, _, _), _) = pair(&c2, &s2).await;
    assert_eq!(other.congestion_weight(), None);
}
