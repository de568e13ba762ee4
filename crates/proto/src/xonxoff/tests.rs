use std::time::{Duration, Instant};

use super::*;

fn params() -> CcParams {
    CcParams::default()
}

#[test]
fn xoff_when_the_buffer_passes_the_limit_then_xon_when_it_drains() {
    let p = params();
    let t = Instant::now();
    let mut rx = FlowRx::new(&p, false);
    let limit = 500 * 498;
    assert_eq!(rx.on_buffered(limit, t), None);
    assert!(!rx.xoff_sent());
    assert_eq!(rx.on_buffered(limit + 1, t), Some(StreamFlowMsg::Xoff));
    assert!(rx.xoff_sent());
    // Only one XOFF while it is outstanding.
    assert_eq!(rx.on_buffered(limit + 5000, t), None);
    // Draining part of it: no XON yet.
    let t1 = t + Duration::from_millis(100);
    assert_eq!(rx.on_drained(100_000, 150_000, t1), None);
    // Empty: XON. The rate over the drain is known by now.
    let t2 = t + Duration::from_millis(500);
    match rx.on_drained(150_000, 0, t2) {
        Some(StreamFlowMsg::Xon(_)) => {}
        other => panic!("expected XON, got {other:?}"),
    }
    assert!(!rx.xoff_sent());
    assert_eq!((rx.xoffs_sent, rx.xons_sent), (1, 1));
}

#[test]
fn drain_rate_is_measured_in_kilobytes_per_second() {
    let p = params();
    let t0 = Instant::now();
    let mut rx = FlowRx::new(&p, true);
    // Buffering starts; then 1 MB drains over one second in 10 steps.
    rx.on_drained(0, 400_000, t0);
    let mut t = t0;
    for _ in 0..10 {
        t += Duration::from_millis(100);
        rx.on_drained(100_000, 300_000, t);
    }
    // About 1000 KB/s (each estimate spans one xon_rate's worth of bytes).
    let r = rx.drain_rate();
    assert!((800..=1300).contains(&r), "rate {r}");
}

#[test]
fn advisory_xon_when_the_rate_changes() {
    let p = params();
    let t0 = Instant::now();
    let mut rx = FlowRx::new(&p, true);
    rx.on_buffered(600 * 498, t0);
    assert!(rx.xoff_sent());
    let mut t = t0;
    let mut xons = Vec::new();
    // Drain at ~1 MB/s until empty: XON with the rate.
    for i in 0..6 {
        t += Duration::from_millis(50);
        let left = 300_000usize.saturating_sub(50_000 * (i + 1));
        if let Some(m) = rx.on_drained(50_000, left, t) {
            xons.push(m);
        }
    }
    assert!(matches!(xons.last(), Some(StreamFlowMsg::Xon(r)) if *r > 0));
    let first = rx.drain_rate();
    // Now the buffer stays long and drains ten times slower: once the new
    // rate is measured, an advisory XON goes out (no XOFF outstanding).
    let mut advisory = None;
    for _ in 0..40 {
        t += Duration::from_millis(50);
        if let Some(m) = rx.on_drained(10_000, 200_000, t) {
            advisory = Some(m);
            break;
        }
    }
    match advisory {
        Some(StreamFlowMsg::Xon(r)) => assert!(r < first * 3 / 4, "{r} vs {first}"),
        other => panic!("expected an advisory XON, got {other:?}"),
    }
}

#[test]
fn client_flags_xoff_and_xon_before_enough_data_was_sent() {
    let p = params();
    let mut tx = FlowTx::new(&p, true);
    tx.on_sent(1000);
    assert_eq!(tx.on_xoff(), Ok(false));
    assert!(tx.xoff(), "flagged, but obeyed (as tor does)");
    let mut tx = FlowTx::new(&p, true);
    for _ in 0..500 {
        tx.on_sent(498);
    }
    assert_eq!(tx.on_xoff(), Ok(true));
    assert!(tx.xoff());
    // A second XOFF without XON.
    assert_eq!(tx.on_xoff(), Ok(false));
    let mut tx = FlowTx::new(&p, true);
    for _ in 0..500 {
        tx.on_sent(498);
    }
    tx.on_xoff().unwrap();
    assert_eq!(tx.on_xon(100), Ok(true));
    assert!(!tx.xoff());
    assert_eq!(tx.rate_kbps(), 100);
    // More XONs than the data explains.
    assert_eq!(tx.on_xon(100), Ok(false));
    // An exit does not check.
    let mut tx = FlowTx::new(&p, false);
    assert_eq!(tx.on_xoff(), Ok(true));
    assert_eq!(tx.on_xoff(), Ok(true));
    assert_eq!(tx.on_xon(0), Ok(true));
}

#[test]
fn window_streams_send_sendmes_per_fifty_cells_consumed() {
    let t = Instant::now();
    let mut rx = StreamRx::window();
    for _ in 0..120 {
        rx.on_data().unwrap();
    }
    let mut out = Vec::new();
    rx.on_drained(49, 0, 0, t, &mut out);
    assert!(out.is_empty());
    rx.on_drained(71, 0, 0, t, &mut out);
    assert_eq!(out, vec![StreamFlowMsg::Sendme, StreamFlowMsg::Sendme]);
    assert_eq!(rx.on_buffered(1 << 30, t), None);
    let mut tx = StreamTx::Window(PackageWindow::stream());
    assert_eq!(tx.on_xoff(), Err(FlowError::UnexpectedXonXoff));
    assert_eq!(tx.on_sendme(), Err(FlowError::UnexpectedSendme));
    let mut tx = StreamTx::Flow(FlowTx::new(&params(), false));
    assert_eq!(tx.on_sendme(), Err(FlowError::StreamSendmeWithCc));
}

#[test]
fn token_bucket_paces_to_the_advised_rate() {
    let t0 = Instant::now();
    let mut b = TokenBucket::default();
    assert_eq!(b.take(1 << 20, t0), None, "unlimited before any XON");
    b.set_rate_kbps(10, t0); // 10 000 bytes/s, burst 10 000
    let mut sent = 0u64;
    let mut t = t0;
    let end = t0 + Duration::from_secs(2);
    while t < end {
        match b.take(498, t) {
            None => sent += 498,
            Some(w) => t += w,
        }
    }
    // Burst plus two seconds at the rate.
    assert!((25_000..=31_000).contains(&sent), "sent {sent}");
    b.set_rate_kbps(0, t);
    assert_eq!(b.take(1 << 20, t), None);
}

#[test]
fn a_stalled_reader_is_not_measured_as_a_slow_one() {
    let p = params();
    let t0 = Instant::now();
    let mut rx = FlowRx::new(&p, true);
    // The application stops reading: data piles up and we send XOFF.
    let mut sent_xoff = false;
    for i in 1..=600usize {
        let t = t0 + Duration::from_millis(i as u64);
        if rx.on_buffered(i * 498, t) == Some(StreamFlowMsg::Xoff) {
            sent_xoff = true;
        }
    }
    assert!(sent_xoff);
    // Three seconds later it reads again, 64 KiB a millisecond: the XON
    // advertises that speed, not the stall.
    let mut t = t0 + Duration::from_secs(3);
    let mut left = 600 * 498;
    let mut xon = None;
    while left > 0 {
        t += Duration::from_millis(1);
        let w = left.min(65_536);
        left -= w;
        if let Some(m) = rx.on_drained(w, left, t) {
            xon = Some(m);
        }
    }
    match xon {
        Some(StreamFlowMsg::Xon(r)) => assert!(r == 0 || r > 10_000, "advertised {r} kB/s"),
        other => panic!("expected XON, got {other:?}"),
    }
}
