//! Tests of the control-port helpers against fake control ports.
#![allow(clippy::unwrap_used)]
use super::*;
use tokio::io::AsyncReadExt;

#[test]
fn circ_bw_events_parse() {
    let e = parse_circ_bw(
        "650 CIRC_BW ID=36 READ=1527 WRITTEN=2036 TIME=2026-11-24T13:32:44.814297 DELIVERED_READ=187 OVERHEAD_READ=1307 DELIVERED_WRITTEN=384 OVERHEAD_WRITTEN=1608 SS=1 CWND=124 RTT=0 MIN_RTT=0\r\n",
    )
    .unwrap();
    assert_eq!(e.id, "36");
    assert_eq!(e.slow_start, Some(true));
    assert_eq!(
        (e.cwnd, e.rtt_ms, e.min_rtt_ms),
        (Some(124), Some(0), Some(0))
    );
    let e = parse_circ_bw("650 CIRC_BW ID=2 READ=11198 WRITTEN=3054 TIME=x").unwrap();
    assert_eq!((e.cwnd, e.slow_start), (None, None));
    assert!(parse_circ_bw("650 CIRC 7 BUILT").is_none());
    assert!(parse_circ_bw("650 CIRC_BW READ=1").is_none());
}

#[test]
fn circ_events_parse() {
    let e = parse_circ_event(
        "650 CIRC 7 LAUNCHED BUILD_FLAGS=NEED_CAPACITY PURPOSE=GENERAL TIME_CREATED=2026-11-23T10:00:00.000000\r\n",
    )
    .unwrap();
    assert_eq!(e.id, "7");
    assert_eq!(e.status, "LAUNCHED");
    assert_eq!(e.purpose.as_deref(), Some("GENERAL"));
    let e = parse_circ_event(
        "650 CIRC 7 BUILT $AAAA~a,$BBBB~b,$CCCC~c BUILD_FLAGS=NEED_CAPACITY PURPOSE=CONFLUX_UNLINKED\r\n",
    )
    .unwrap();
    assert_eq!(e.status, "BUILT");
    assert!(counts(e.purpose.as_deref()));
    assert!(!counts(Some("MEASURE_TIMEOUT")));
    let e = parse_circ_event(
        "650 CIRC_MINOR 12 PURPOSE_CHANGED $A~a,$B~b,$C~c BUILD_FLAGS=NEED_CAPACITY,NEED_UPTIME PURPOSE=CONFLUX_LINKED TIME_CREATED=2026-11-23T10:00:00.000000 OLD_PURPOSE=CONFLUX_UNLINKED\r\n",
    )
    .unwrap();
    assert_eq!(
        (e.id.as_str(), e.status.as_str()),
        ("12", "PURPOSE_CHANGED")
    );
    assert_eq!(e.purpose.as_deref(), Some("CONFLUX_LINKED"));
    assert!(parse_circ_event("650 STREAM 1 NEW 0 x:80").is_none());
    assert!(parse_circ_event("650 CIRC ").is_none());
    assert!(parse_circ_event("250 OK").is_none());
    let e = parse_circ_event(
        "650 CIRC 9 BUILT $A~a PURPOSE=GENERAL TIME_CREATED=2026-11-23T10:00:00.250000",
    )
    .unwrap();
    assert_eq!(e.created_unix, Some(1_795_428_000.25));
    assert_eq!(parse_iso_usec("1970-01-01T00:00:00.000000"), Some(0.0));
    assert_eq!(parse_iso_usec("2000-03-01T00:00:01.5"), Some(951_868_801.5));
    assert_eq!(parse_iso_usec("2000-02-29T00:00:00"), Some(951_782_400.0));
    assert_eq!(
        parse_iso_usec("2024-02-29T12:00:00.000000"),
        Some(1_709_208_000.0)
    );
    for bad in [
        "",
        "2026-02-31T00:00:00.0",
        "2026-02-29T00:00:00",
        "2026-11-23T24:00:00.0",
        "2026-11-23T10:00:60.0",
        "1969-12-31T23:59:59.0",
        "+2026-11-23T10:00:00.0",
        "2026-11-23T10:00:00.",
        "2026-11-23T10:00:00.1234567890",
        "2026-11-23T10:00:00.0Z",
        "2026-13-01T00:00:00.0",
        "2026-11-23 10:00:00",
        "2026-11-23T25:00:00.0",
        "2026-11-23T10:00:00.x",
        "a-b-cTd:e:f",
    ] {
        assert_eq!(parse_iso_usec(bad), None, "{bad}");
    }
}

/// Unix seconds as tor's `TIME_CREATED` (UTC, microseconds).
fn iso(unix: f64) -> String {
    const ISO: &[BorrowedFormatItem<'static>] =
        format_description!("[year]-[month]-[day]T[hour]:[minute]:[second].[subsecond digits:6]");
    let secs = unix.floor() as i64;
    let usec = ((unix - secs as f64) * 1e6) as i64;
    (time::OffsetDateTime::from_unix_timestamp(secs).unwrap() + time::Duration::microseconds(usec))
        .format(ISO)
        .unwrap()
}

/// A fake tor control port: checks the cookie and SETEVENTS, writes
/// `first`, waits 30 ms, writes `second`, then holds the connection
/// for `hold`.
async fn fake_tor(l: tokio::net::TcpListener, first: String, second: String, hold: Duration) {
    let (mut s, _) = l.accept().await.unwrap();
    let mut got = Vec::new();
    let mut b = [0u8; 256];
    while !got.ends_with(b"\r\n") {
        let n = s.read(&mut b).await.unwrap();
        got.extend_from_slice(&b[..n]);
    }
    let want = format!("AUTHENTICATE {}\r\n", hex::encode([7u8; 32]));
    assert_eq!(String::from_utf8_lossy(&got), want);
    s.write_all(b"250 OK\r\n").await.unwrap();
    got.clear();
    while !got.ends_with(b"\r\n") {
        let n = s.read(&mut b).await.unwrap();
        got.extend_from_slice(&b[..n]);
    }
    assert_eq!(&got, b"SETEVENTS CIRC\r\n");
    s.write_all(b"250 OK\r\n").await.unwrap();
    s.write_all(first.as_bytes()).await.unwrap();
    tokio::time::sleep(Duration::from_millis(30)).await;
    s.write_all(second.as_bytes()).await.unwrap();
    // Hold the connection for `hold`, or until the watcher hangs up.
    let _ = tokio::time::timeout(hold, s.read(&mut b)).await;
}

#[test]
fn iso_round_trip() {
    for t in [0.0, 951_868_801.5, 1_795_428_000.25, 4_102_444_799.999_999] {
        let back = parse_iso_usec(&iso(t)).unwrap();
        assert!((back - t).abs() < 2e-6, "{t} {} {back}", iso(t));
    }
    assert_eq!(iso(1_795_428_000.25), "2026-11-23T10:00:00.250000");
}

/// A control port answering AUTHENTICATE and one GETINFO with `answer`.
async fn fake_getinfo(l: tokio::net::TcpListener, answer: &'static str) -> String {
    let (s, _) = l.accept().await.unwrap();
    let (rd, mut wr) = s.into_split();
    let mut rd = BufReader::new(rd);
    let mut auth = String::new();
    rd.read_line(&mut auth).await.unwrap();
    wr.write_all(b"250 OK\r\n").await.unwrap();
    let mut q = String::new();
    rd.read_line(&mut q).await.unwrap();
    wr.write_all(answer.as_bytes()).await.unwrap();
    q
}

#[tokio::test]
async fn getinfo_reads_one_value() {
    let tmp = tempfile::tempdir().unwrap();
    let cookie = tmp.path().join("control_auth_cookie");
    std::fs::write(&cookie, [7u8; 32]).unwrap();
    for (answer, want) in [
        (
            "250-sr/current=zxJao+gBmFMSezvz/VXkEWEQJD5b/z+7AXNCGoLFVW0=\r\n250 OK\r\n",
            Ok("zxJao+gBmFMSezvz/VXkEWEQJD5b/z+7AXNCGoLFVW0="),
        ),
        ("250-sr/current=\r\n250 OK\r\n", Ok("")),
        ("552 Unrecognized key \"sr/current\"\r\n", Err("552")),
    ] {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(fake_getinfo(l, answer));
        let got = getinfo(addr, &cookie, "sr/current", Duration::from_secs(5)).await;
        assert_eq!(server.await.unwrap(), "GETINFO sr/current\r\n");
        match (got, want) {
            (Ok(v), Ok(w)) => assert_eq!(v, w),
            (Err(e), Err(w)) => assert!(e.contains(w), "{e}"),
            (got, want) => panic!("{answer:?}: got {got:?}, want {want:?}"),
        }
    }
    assert!(
        getinfo(
            "127.0.0.1:1".parse().unwrap(),
            &cookie,
            "a b",
            Duration::from_secs(1)
        )
        .await
        .is_err()
    );
}

/// Data-block values: every line up to the lone `.`, even lines whose
/// fourth byte is a space (a three-digit stream ID), dot-unescaped.
#[tokio::test]
async fn getinfo_lines_reads_data_blocks() {
    let tmp = tempfile::tempdir().unwrap();
    let cookie = tmp.path().join("control_auth_cookie");
    std::fs::write(&cookie, [7u8; 32]).unwrap();
    let cases: [(&'static str, Result<Vec<&str>, &str>); 4] = [
        (
            "250+stream-status=\r\n123 SUCCEEDED 7 127.0.0.1:80\r\n45 NEW 0 x:1\r\n..dot\r\n.\r\n250 OK\r\n",
            Ok(vec!["123 SUCCEEDED 7 127.0.0.1:80", "45 NEW 0 x:1", ".dot"]),
        ),
        ("250-stream-status=\r\n250 OK\r\n", Ok(vec![])),
        (
            "250-stream-status=1 NEW 0 a:1\r\n250 OK\r\n",
            Ok(vec!["1 NEW 0 a:1"]),
        ),
        ("552 Unrecognized key \"stream-status\"\r\n", Err("552")),
    ];
    for (answer, want) in cases {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(fake_getinfo(l, answer));
        let got = getinfo_lines(addr, &cookie, "stream-status", Duration::from_secs(5)).await;
        assert_eq!(server.await.unwrap(), "GETINFO stream-status\r\n");
        match (got, want) {
            (Ok(v), Ok(w)) => assert_eq!(v, w),
            (Err(e), Err(w)) => assert!(e.contains(w), "{e}"),
            (got, want) => panic!("{answer:?}: got {got:?}, want {want:?}"),
        }
    }
}

/// Circuits: 1 built after 30 ms (no TIME_CREATED: timed from
/// LAUNCHED), 2 failed, 3 timeout-measuring, 4 built but never seen
/// launched, 5 created 500 ms before (TIME_CREATED), 6 one-hop, and
/// 1 reported BUILT again after a later extension: only 1 and 5
/// count, once each.
#[tokio::test]
async fn watch_against_a_fake_control_port() {
    let tmp = tempfile::tempdir().unwrap();
    let cookie_path = tmp.path().join("control_auth_cookie");
    std::fs::write(&cookie_path, [7u8; 32]).unwrap();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let created = iso(now_unix() - 0.5);
    let first = format!(
        "650 CIRC 1 LAUNCHED PURPOSE=GENERAL\r\n\
         650 CIRC 2 LAUNCHED PURPOSE=GENERAL\r\n\
         650 CIRC 3 LAUNCHED PURPOSE=MEASURE_TIMEOUT\r\n\
         650 CIRC 5 LAUNCHED BUILD_FLAGS=NEED_CAPACITY PURPOSE=GENERAL TIME_CREATED={created}\r\n\
         650 CIRC 6 LAUNCHED BUILD_FLAGS=ONEHOP_TUNNEL,IS_INTERNAL,NEED_CAPACITY PURPOSE=GENERAL\r\n"
    );
    let second = format!(
        "650 CIRC 1 EXTENDED $A~a PURPOSE=GENERAL\r\n\
         650 CIRC 1 BUILT $A~a,$B~b,$C~c PURPOSE=GENERAL\r\n\
         650 CIRC 2 FAILED PURPOSE=GENERAL REASON=TIMEOUT\r\n\
         650 CIRC 3 BUILT $A~a PURPOSE=MEASURE_TIMEOUT\r\n\
         650 CIRC 4 BUILT $A~a PURPOSE=GENERAL TIME_CREATED=2020-01-01T00:00:00.000000\r\n\
         650 CIRC 5 BUILT $A~a,$B~b,$C~c BUILD_FLAGS=NEED_CAPACITY PURPOSE=GENERAL TIME_CREATED={created}\r\n\
         650 CIRC 6 BUILT $A~a BUILD_FLAGS=ONEHOP_TUNNEL,IS_INTERNAL,NEED_CAPACITY PURPOSE=GENERAL\r\n\
         650 CIRC 1 BUILT $A~a,$B~b,$D~d PURPOSE=GENERAL\r\n"
    );
    let server = tokio::spawn(fake_tor(l, first, second, Duration::from_secs(60)));
    let w = watch_circuits(addr, &cookie_path, Duration::from_secs(5))
        .await
        .unwrap();
    // The fake sends everything within ~30 ms and then holds the
    // connection until the watcher hangs up (60 s at most).
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let seen = w.finish().await;
    assert!(seen.ended_early.is_none(), "{seen:?}");
    let times = seen.build_ms;
    assert_eq!(times.len(), 2, "{times:?}");
    // Lower bounds are the fake's own delays (30 ms between LAUNCHED and
    // BUILT; created 500 ms before); upper bounds only rule out a wrong
    // origin, with room for a slow scheduler.
    assert!(times[0] >= 25.0 && times[0] < 5_000.0, "{times:?}");
    assert!(times[1] >= 480.0 && times[1] < 10_000.0, "{times:?}");
    server.await.unwrap();

    // Tor going away mid-run is reported, not hidden.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let server = tokio::spawn(fake_tor(
        l,
        String::new(),
        String::new(),
        Duration::from_millis(10),
    ));
    let w = watch_circuits(addr, &cookie_path, Duration::from_secs(5))
        .await
        .unwrap();
    server.await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let seen = w.finish().await;
    assert!(
        seen.ended_early.as_deref().unwrap_or("").contains("closed"),
        "{seen:?}"
    );

    // A wrong-sized cookie and a refused one: clear errors.
    std::fs::write(&cookie_path, [1u8; 5]).unwrap();
    let e = watch_circuits(addr, &cookie_path, Duration::from_secs(1))
        .await
        .err()
        .unwrap();
    assert!(e.contains("not 32"), "{e}");
    std::fs::write(&cookie_path, [1u8; 32]).unwrap();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut b = [0u8; 256];
        let _ = s.read(&mut b).await.unwrap();
        s.write_all(b"515 Authentication failed: Wrong length on authentication cookie.\r\n")
            .await
            .unwrap();
    });
    let e = watch_circuits(addr, &cookie_path, Duration::from_secs(2))
        .await
        .err()
        .unwrap();
    assert!(e.contains("refused the cookie"), "{e}");
}

#[tokio::test]
async fn signal_newnym_authenticates_and_checks_the_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let cookie = tmp.path().join("control_auth_cookie");
    std::fs::write(&cookie, [7u8; 32]).unwrap();
    for (answer, ok) in [
        ("250 OK\r\n", true),
        ("552 Unrecognized signal code \"NEWNYM\"\r\n", false),
    ] {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let server = tokio::spawn(fake_getinfo(l, answer));
        let got = signal(addr, &cookie, "NEWNYM", Duration::from_secs(5)).await;
        assert_eq!(server.await.unwrap(), "SIGNAL NEWNYM\r\n");
        assert_eq!(got.is_ok(), ok, "{got:?}");
    }
    let bad = signal(
        "127.0.0.1:1".parse().unwrap(),
        &cookie,
        "NEW NYM",
        Duration::from_secs(1),
    );
    assert!(bad.await.unwrap_err().contains("bad signal"));
}

/// A control port that does not know a relay at first (552), then fails
/// `fail_builds` builds (as stock tor's circuit build timeout does), then
/// builds the circuit, announces a stream and takes it back at the end:
/// the commands `pin_streams` sent, in order.
/// A control port that makes `pin_streams` wait; `attaches` counts the
/// ATTACHSTREAM commands it has answered.
async fn fake_pinning_port(
    l: tokio::net::TcpListener,
    fail_builds: usize,
    attaches: std::sync::Arc<std::sync::atomic::AtomicUsize>,
) -> Vec<String> {
    let (s, _) = l.accept().await.unwrap();
    let (rd, mut wr) = s.into_split();
    let mut rd = BufReader::new(rd);
    let mut seen = Vec::new();
    let mut extends = 0;
    loop {
        let mut q = String::new();
        if rd.read_line(&mut q).await.unwrap_or(0) == 0 {
            return seen;
        }
        let q = q.trim_end().to_string();
        let answer = if q.starts_with("EXTENDCIRCUIT") {
            extends += 1;
            if extends == 1 {
                "552 No such router \"$BB\"\r\n".to_string()
            } else if extends <= 1 + fail_builds {
                format!(
                    "250 EXTENDED {extends}\r\n650 CIRC {extends} LAUNCHED\r\n\
                     650 CIRC {extends} FAILED $AA PURPOSE=GENERAL REASON=TIMEOUT\r\n"
                )
            } else {
                "250 EXTENDED 9\r\n650 CIRC 9 LAUNCHED\r\n650 CIRC 9 BUILT $AA,$BB\r\n".to_string()
            }
        } else if q == "SETCONF __LeaveStreamsUnattached=1" {
            // Stream 4 as stock tor announces it (NEW, then
            // CONTROLLER_WAIT before the attach is answered); stream 5's
            // first attach is refused, then it waits.
            concat!(
                "250 OK\r\n",
                "650 STREAM 4 NEW 0 10.0.0.1:80\r\n",
                "650 STREAM 4 CONTROLLER_WAIT 0 10.0.0.1:80\r\n",
                "650 STREAM 5 NEW 0 10.0.0.1:80\r\n",
            )
            .to_string()
        } else if q == "ATTACHSTREAM 5 9" && !seen.contains(&q) {
            "555 Connection is not managed by controller.\r\n650 STREAM 5 CONTROLLER_WAIT 0 10.0.0.1:80\r\n"
                .to_string()
        } else if q == "QUIT" {
            seen.push(q);
            return seen;
        } else {
            "250 OK\r\n".to_string()
        };
        let attach = q.starts_with("ATTACHSTREAM");
        if !q.starts_with("AUTHENTICATE") {
            seen.push(q);
        }
        // The client may close without reading the last answers.
        let _ = wr.write_all(answer.as_bytes()).await;
        if attach {
            attaches.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

#[tokio::test]
async fn pin_streams_waits_for_a_relay_the_client_does_not_know_yet() {
    let tmp = tempfile::tempdir().unwrap();
    let cookie = tmp.path().join("control_auth_cookie");
    std::fs::write(&cookie, [7u8; 32]).unwrap();
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let attaches = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let server = tokio::spawn(fake_pinning_port(l, 2, attaches.clone()));
    let path = ["$AA".to_string(), "$BB".to_string()];
    let pinned = pin_streams(addr, &cookie, &path, Duration::from_secs(20))
        .await
        .expect("pinned after two failed builds");
    assert_eq!(pinned.circ, "9");
    // The streams announced after SETCONF get attached, each once (a
    // second ATTACHSTREAM would detach stream 4 again), stream 5 again
    // after its first attach was refused.
    // Wait for all three attaches (not a fixed time: a busy machine may
    // not run this runtime's tasks for a while).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while attaches.load(std::sync::atomic::Ordering::SeqCst) < 3 {
        assert!(std::time::Instant::now() < deadline, "three attaches");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(pinned.finish().await, Ok(2));
    let seen = server.await.unwrap();
    assert_eq!(
        seen,
        [
            "SETEVENTS STREAM CIRC",
            "EXTENDCIRCUIT 0 $AA,$BB",
            "EXTENDCIRCUIT 0 $AA,$BB",
            "EXTENDCIRCUIT 0 $AA,$BB",
            "EXTENDCIRCUIT 0 $AA,$BB",
            "SETCONF __LeaveStreamsUnattached=1",
            "ATTACHSTREAM 4 9",
            "ATTACHSTREAM 5 9",
            "ATTACHSTREAM 5 9",
            "SETCONF __LeaveStreamsUnattached=0",
            "CLOSECIRCUIT 9",
            "QUIT",
        ]
    );

    // A circuit that fails every build is given up after
    // PIN_BUILD_ATTEMPTS builds, naming the failures.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let server = tokio::spawn(fake_pinning_port(
        l,
        100,
        std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0)),
    ));
    let err = pin_streams(addr, &cookie, &path, Duration::from_secs(20))
        .await
        .err()
        .expect("gave up");
    assert_eq!(
        err.matches("REASON=TIMEOUT").count(),
        PIN_BUILD_ATTEMPTS,
        "{err}"
    );
    let seen = server.await.unwrap();
    let extends = seen
        .iter()
        .filter(|q| q.starts_with("EXTENDCIRCUIT"))
        .count();
    assert_eq!(extends, 1 + PIN_BUILD_ATTEMPTS);

    // Any other refusal is an error at once.
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (s, _) = l.accept().await.unwrap();
        let (rd, mut wr) = s.into_split();
        let mut rd = BufReader::new(rd);
        let mut q = String::new();
        for answer in ["250 OK\r\n", "250 OK\r\n", "512 Syntax error\r\n"] {
            q.clear();
            rd.read_line(&mut q).await.unwrap();
            wr.write_all(answer.as_bytes()).await.unwrap();
        }
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let err = pin_streams(addr, &cookie, &path, Duration::from_secs(20))
        .await
        .err()
        .expect("refused");
    assert!(err.contains("512 Syntax error"), "{err}");
}
