use super::{DrainTally, dir_request_complete, end_reason};
use std::time::Duration;

/// Writes between two looks of the reactor are summed and announced
/// once; a write after a look is announced again; nothing is lost.
#[test]
fn drain_tally_announces_once_and_loses_nothing() {
    let t = DrainTally::default();
    assert!(t.add(3, 1494), "the first write is announced");
    assert!(!t.add(2, 996), "the reactor was already told");
    assert!(!t.add(0, 0));
    assert_eq!(t.take(), (5, 2490));
    assert_eq!(t.take(), (0, 0), "a stale announcement finds nothing");
    assert!(t.add(1, 498), "after a look, the next write is announced");
    assert_eq!(t.take(), (1, 498));
}

/// However the exit task and the reactor interleave, every cell
/// written is accounted exactly once, and a write is never left
/// unannounced.
#[test]
fn drain_tally_under_concurrency() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let t = Arc::new(DrainTally::default());
    let announced = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let writer = {
        let (t, announced) = (t.clone(), announced.clone());
        std::thread::spawn(move || {
            for _ in 0..100_000 {
                if t.add(1, 10) {
                    announced.fetch_add(1, Ordering::SeqCst);
                }
            }
        })
    };
    let reactor = {
        let (t, announced, done) = (t.clone(), announced.clone(), done.clone());
        std::thread::spawn(move || {
            let (mut cells, mut bytes, mut handled) = (0u64, 0u64, 0u64);
            loop {
                let finished = done.load(Ordering::SeqCst);
                // Handle every announcement made so far.
                while handled < announced.load(Ordering::SeqCst) {
                    let (c, b) = t.take();
                    cells += u64::from(c);
                    bytes += b as u64;
                    handled += 1;
                }
                if finished {
                    return (cells, bytes);
                }
            }
        })
    };
    writer.join().unwrap();
    done.store(true, Ordering::SeqCst);
    let (cells, bytes) = reactor.join().unwrap();
    assert_eq!((cells, bytes), (100_000, 1_000_000));
}

#[test]
fn begin_dir_requests_wait_for_post_bodies() {
    assert_eq!(dir_request_complete(b"GET /tor/ HTTP/1.0\r\n"), Ok(false));
    assert_eq!(
        dir_request_complete(b"GET /tor/ HTTP/1.0\r\n\r\n"),
        Ok(true)
    );
    let post = b"POST /tor/ HTTP/1.0\r\nContent-Length: 4\r\n\r\nrout";
    for cut in 0..post.len() {
        assert_eq!(dir_request_complete(&post[..cut]), Ok(false), "cut {cut}");
    }
    assert_eq!(dir_request_complete(post), Ok(true));
    assert_eq!(
        dir_request_complete(b"POST /tor/ HTTP/1.0\r\ncontent-length: 0\r\n\r\n"),
        Ok(true)
    );
}

/// An exit never asks its resolver for a `.onion` name (BEGIN and
/// RESOLVE both come here): refused at once and counted, while an
/// ordinary name does reach the nameserver.
#[tokio::test]
async fn onion_names_never_reach_the_resolver() {
    use std::sync::atomic::Ordering;
    let ns = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = crate::relay::config::RelayConfig::parse(&format!(
        "data_dir = {:?}\nnickname = \"x\"\nor_listen = \"127.0.0.1:0\"\n\
         exit = true\nnameserver = \"{}\"\n",
        tmp.path().display().to_string(),
        ns.local_addr().unwrap()
    ))
    .unwrap();
    let keys = crate::relay::load_or_generate_keys(tmp.path()).unwrap();
    let ctx = crate::relay::make_ctx(cfg, keys, None).unwrap();
    for name in [
        "25njqamcweflpvkl73j4szahhihoc4xt3ktcgjnpaingr5yhkenl5sid.onion",
        "a.b.OnIoN.",
    ] {
        assert_eq!(
            super::lookup(&ctx, name, 80).await,
            Err(end_reason::RESOLVEFAILED),
            "{name}"
        );
    }
    assert_eq!(ctx.stats.onion_names_refused.load(Ordering::Relaxed), 2);
    let mut buf = [0u8; 512];
    assert!(
        tokio::time::timeout(Duration::from_millis(300), ns.recv_from(&mut buf))
            .await
            .is_err(),
        "the nameserver was asked"
    );
    // Positive control: another name is asked for (no answer: a
    // resolver error after its retries, not a refusal).
    let ask = tokio::spawn({
        let ctx = ctx.clone();
        async move { super::lookup(&ctx, "sink.onionmix.test", 80).await }
    });
    let (n, _) = tokio::time::timeout(Duration::from_secs(5), ns.recv_from(&mut buf))
        .await
        .expect("the nameserver is asked for an ordinary name")
        .unwrap();
    assert!(n > 12);
    ask.abort();
    assert_eq!(ctx.stats.onion_names_refused.load(Ordering::Relaxed), 2);
}

#[test]
fn onion_names_are_recognised() {
    for yes in [
        "a.onion",
        "x.y.ONION",
        "abc.onion.",
        ".onion",
        "onion.onion",
    ] {
        assert!(super::is_onion_name(yes), "{yes}");
    }
    for no in [
        "onion",
        "a.onion.example",
        "aonion",
        "",
        ".",
        "a.onio",
        "ab.onionx",
    ] {
        assert!(!super::is_onion_name(no), "{no}");
    }
    // Not ASCII near the end: no panic, no match.
    assert!(!super::is_onion_name("a.oni\u{f6}n"));
}

#[test]
fn begin_dir_lengths_are_checked() {
    // A peer-supplied length near usize::MAX used to overflow the
    // completeness check; it is now refused at once.
    let huge = format!(
        "POST /tor/ HTTP/1.0\r\nContent-Length: {}\r\n\r\n",
        usize::MAX
    );
    assert!(dir_request_complete(huge.as_bytes()).is_err());
    let over = format!(
        "POST /tor/ HTTP/1.0\r\nContent-Length: {}\r\n\r\n",
        super::MAX_DIR_REQUEST + 1
    );
    assert!(dir_request_complete(over.as_bytes()).is_err());
    for bad in [
        &b"POST /tor/ HTTP/1.0\r\nContent-Length: -1\r\n\r\n"[..],
        b"POST /tor/ HTTP/1.0\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        b"POST /tor/ HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"GET /tor/ HTTP/9.9\r\n\r\n",
    ] {
        assert!(dir_request_complete(bad).is_err());
    }
}
