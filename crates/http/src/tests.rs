#![allow(clippy::unwrap_used, clippy::expect_used)]

use super::*;
use proptest::prelude::*;

fn req(b: &[u8]) -> Result<Option<RequestHead>, HttpError> {
    parse_request_head(b, &Limits::DEFAULT)
}

fn resp(b: &[u8]) -> Result<Option<ResponseHead>, HttpError> {
    parse_response_head(b, &Limits::DEFAULT)
}

#[test]
fn request_head_fields() {
    let raw = b"GET /tor/keys/all HTTP/1.0\r\nHost: a\r\nAccept-Encoding:  deflate, identity \r\n\r\nBODY";
    let h = req(raw).unwrap().unwrap();
    assert_eq!(h.method, "GET");
    assert_eq!(h.path, "/tor/keys/all");
    assert_eq!(h.version, Version::Http10);
    assert_eq!(h.head_len, raw.len() - 4);
    assert_eq!(h.header("accept-encoding"), Some("deflate, identity"));
    assert_eq!(h.header("ACCEPT-ENCODING"), Some("deflate, identity"));
    assert_eq!(h.header("host"), Some("a"));
    assert_eq!(h.header("missing"), None);
    assert_eq!(h.headers.len(), 2);
    assert!(h.wants_close());
    assert_eq!(h.body_framing(10).unwrap(), BodyFraming::Length(0));
    let names: Vec<&str> = h.headers.iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["Host", "Accept-Encoding"]);
}

#[test]
fn keep_alive_and_close() {
    let h = req(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap().unwrap();
    assert!(!h.wants_close());
    let h = req(b"GET / HTTP/1.1\r\nConnection: keep-alive, Close\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(h.wants_close());
    // HTTP/1.0 keep-alive is not supported: always closes.
    let h = req(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(h.wants_close());
}

#[test]
fn response_head_fields() {
    let raw = b"HTTP/1.1 404 Not found\r\nContent-Length: 0\r\n\r\n";
    let h = resp(raw).unwrap().unwrap();
    assert_eq!((h.version, h.status), (Version::Http11, 404));
    assert_eq!(h.reason, "Not found");
    assert_eq!(h.head_len, raw.len());
    // No reason phrase, bare LF line endings.
    let h = resp(b"HTTP/1.0 200\nX: y\n\n").unwrap().unwrap();
    assert_eq!((h.status, h.reason.as_str()), (200, ""));
    assert_eq!(h.header("x"), Some("y"));
    // The reason is sanitised for logs.
    let h = resp(b"HTTP/1.0 400 bad\tthing \xc3\xa9\r\n\r\n")
        .unwrap()
        .unwrap();
    assert!(h.reason.chars().all(|c| c.is_ascii_graphic() || c == ' '));
}

#[test]
fn incomplete_heads_need_more() {
    let raw = b"POST /tor/ HTTP/1.0\r\nContent-Length: 5\r\n\r\n";
    for cut in 0..raw.len() {
        assert_eq!(req(&raw[..cut]), Ok(None), "cut {cut}");
    }
    assert!(req(raw).unwrap().is_some());
    let raw = b"HTTP/1.0 200 OK\r\nContent-Length: 5\r\n\r\n";
    for cut in 0..raw.len() {
        assert_eq!(resp(&raw[..cut]), Ok(None), "cut {cut}");
    }
}

#[test]
fn malformed_heads_are_refused() {
    for bad in [
        &b"GET /tor/ HTTP/2\r\n\r\n"[..],
        b"GET /tor/ HTTP/1.2\r\n\r\n",
        b"GET /tor/x y HTTP/1.0\r\n\r\n",
        b"GET /tor/x\r\n\r\n",
        b"GET /tor/ HTTP/1.0\r\nnocolon\r\n\r\n",
        b"GET /tor/ HTTP/1.0\r\nBad Name: x\r\n\r\n",
        b"GET /tor/ HTTP/1.0\r\nX: a\x00b\r\n\r\n",
        b"G\x00T / HTTP/1.0\r\n\r\n",
        b"GET /tor/\xff HTTP/1.0\r\n\r\n",
        b" GET / HTTP/1.0\r\n\r\n",
    ] {
        assert!(req(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
    }
    for bad in [
        &b"SMTP 200 OK\r\n\r\n"[..],
        b"HTTP/1.0 20 OK\r\n\r\n",
        b"HTTP/1.0 2000 OK\r\n\r\n",
        b"HTTP/1.0 abc OK\r\n\r\n",
        b"HTTP/2 200 OK\r\n\r\n",
    ] {
        assert!(resp(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
    }
}

#[test]
fn non_utf8_header_values_are_refused() {
    assert_eq!(
        req(b"GET / HTTP/1.0\r\nX: \xff\xfe\r\n\r\n"),
        Err(HttpError::NotUtf8("header value"))
    );
}

#[test]
fn head_size_and_header_count_caps() {
    // Junk without an end: refused once the cap is reached, not before.
    let junk = vec![b'a'; MAX_HEAD_LEN - 1];
    assert_eq!(req(&junk), Ok(None));
    let junk = vec![b'a'; MAX_HEAD_LEN];
    assert_eq!(
        req(&junk),
        Err(HttpError::HeadTooLarge {
            limit: MAX_HEAD_LEN
        })
    );
    // A head of exactly the limit is accepted, one byte more is not.
    let mut head = b"GET / HTTP/1.0\r\nX: ".to_vec();
    head.resize(MAX_HEAD_LEN - 4, b'v');
    head.extend_from_slice(b"\r\n\r\n");
    assert_eq!(head.len(), MAX_HEAD_LEN);
    assert!(req(&head).unwrap().is_some());
    head.insert(20, b'v');
    assert!(matches!(req(&head), Err(HttpError::HeadTooLarge { .. })));
    // A lower limit.
    let small = Limits::new(64, 2);
    let long = format!("GET /{} HTTP/1.0\r\n\r\n", "a".repeat(64));
    assert_eq!(
        parse_request_head(long.as_bytes(), &small),
        Err(HttpError::HeadTooLarge { limit: 64 })
    );
    assert_eq!(
        parse_request_head(b"GET / HTTP/1.0\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n", &small),
        Err(HttpError::TooManyHeaders { limit: 2 })
    );
    // Limits above the hard caps are lowered to them.
    assert_eq!(Limits::new(usize::MAX, usize::MAX), Limits::DEFAULT);
    let many: String = (0..=MAX_HEADERS).map(|i| format!("H{i}: v\r\n")).collect();
    let raw = format!("GET / HTTP/1.0\r\n{many}\r\n");
    assert_eq!(
        req(raw.as_bytes()),
        Err(HttpError::TooManyHeaders { limit: MAX_HEADERS })
    );
}

fn cl(values: &[&str], max: usize) -> Result<Option<usize>, HttpError> {
    let mut raw = String::from("POST / HTTP/1.0\r\n");
    for v in values {
        raw.push_str(&format!("Content-Length: {v}\r\n"));
    }
    raw.push_str("\r\n");
    req(raw.as_bytes())
        .unwrap()
        .unwrap()
        .headers
        .content_length(max)
}

#[test]
fn content_length_is_strict() {
    assert_eq!(cl(&[], 10), Ok(None));
    assert_eq!(cl(&["5"], 10), Ok(Some(5)));
    assert_eq!(cl(&["0005"], 10), Ok(Some(5)));
    assert_eq!(cl(&["  7  "], 10), Ok(Some(7)));
    assert_eq!(cl(&["10"], 10), Ok(Some(10)));
    assert_eq!(cl(&["5", "5"], 10), Ok(Some(5)));
    assert_eq!(
        cl(&["5", "6"], 10),
        Err(HttpError::ConflictingContentLength)
    );
    for bad in ["", "+5", "-1", "5 5", "5,5", "0x10", "1e3", "５"] {
        assert!(
            matches!(cl(&[bad], 10), Err(HttpError::BadContentLength(_))),
            "{bad:?}"
        );
    }
    assert_eq!(
        cl(&["11"], 10),
        Err(HttpError::BodyTooLarge { len: 11, limit: 10 })
    );
    assert_eq!(
        cl(&["18446744073709551615"], usize::MAX - 1),
        Err(HttpError::BodyTooLarge {
            len: u64::MAX,
            limit: usize::MAX - 1
        })
    );
    // Beyond u64: a clear error, no wrap-around.
    assert!(matches!(
        cl(&["18446744073709551616"], usize::MAX),
        Err(HttpError::BadContentLength(_))
    ));
    assert!(matches!(
        cl(&["99999999999999999999999999999"], usize::MAX),
        Err(HttpError::BadContentLength(_))
    ));
}

#[test]
fn transfer_encoding() {
    let h = |te: &str, extra: &str| {
        let raw = format!("HTTP/1.1 200 OK\r\nTransfer-Encoding: {te}\r\n{extra}\r\n");
        resp(raw.as_bytes()).unwrap().unwrap()
    };
    assert_eq!(
        h("chunked", "").body_framing(10, false),
        Ok(BodyFraming::Chunked)
    );
    assert_eq!(
        h("Chunked", "").body_framing(10, false),
        Ok(BodyFraming::Chunked)
    );
    assert!(matches!(
        h("gzip, chunked", "").body_framing(10, false),
        Err(HttpError::UnsupportedTransferEncoding(_))
    ));
    assert!(matches!(
        h("chunked", "Transfer-Encoding: chunked\r\n").body_framing(10, false),
        Err(HttpError::UnsupportedTransferEncoding(_))
    ));
    assert_eq!(
        h("chunked", "Content-Length: 3\r\n").body_framing(10, false),
        Err(HttpError::AmbiguousLength)
    );
    // Responses without a length run to the close; some never have a body.
    let r = resp(b"HTTP/1.0 200 OK\r\n\r\n").unwrap().unwrap();
    assert_eq!(r.body_framing(10, false), Ok(BodyFraming::UntilClose));
    assert_eq!(r.body_framing(10, true), Ok(BodyFraming::Length(0)));
    let r = resp(b"HTTP/1.1 204 No Content\r\n\r\n").unwrap().unwrap();
    assert_eq!(r.body_framing(10, false), Ok(BodyFraming::Length(0)));
}

#[test]
fn whole_requests() {
    let full = b"POST /tor/ HTTP/1.0\r\nContent-Length: 5\r\n\r\nhelloNEXT";
    for cut in 0..full.len() - 4 {
        assert_eq!(
            parse_request(&full[..cut], &Limits::DEFAULT, 100),
            Ok(None),
            "cut {cut}"
        );
    }
    let r = parse_request(full, &Limits::DEFAULT, 100).unwrap().unwrap();
    assert_eq!((r.method(), r.path()), ("POST", "/tor/"));
    assert_eq!(r.body, b"hello");
    assert_eq!(r.wire_len(), full.len() - 4);
    assert_eq!(
        parse_request(full, &Limits::DEFAULT, 4),
        Err(HttpError::BodyTooLarge { len: 5, limit: 4 })
    );
    assert_eq!(
        parse_request(
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            &Limits::DEFAULT,
            100
        ),
        Err(HttpError::LengthRequired)
    );
}

#[test]
fn whole_responses() {
    let l = Limits::DEFAULT;
    let r = parse_response(
        b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabcdef",
        &l,
        10,
        false,
    )
    .unwrap();
    assert_eq!(r.body, b"abc");
    assert!(matches!(
        parse_response(
            b"HTTP/1.0 200 OK\r\nContent-Length: 9\r\n\r\nabc",
            &l,
            10,
            false
        ),
        Err(HttpError::Truncated(_))
    ));
    let r = parse_response(b"HTTP/1.0 200 OK\r\n\r\nuntil close", &l, 100, false).unwrap();
    assert_eq!(r.body, b"until close");
    assert!(matches!(
        parse_response(b"HTTP/1.0 200 OK\r\n\r\nuntil close", &l, 5, false),
        Err(HttpError::BodyTooLarge { .. })
    ));
    let r = parse_response(
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
        &l,
        100,
        false,
    )
    .unwrap();
    assert_eq!(r.body, b"abcde");
    assert!(matches!(
        parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n",
            &l,
            100,
            false
        ),
        Err(HttpError::Truncated(_))
    ));
    assert!(matches!(
        parse_response(b"HTTP/1.0 200 OK\r\nX: y", &l, 100, false),
        Err(HttpError::Truncated(_))
    ));
    let r = parse_response(
        b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\n",
        &l,
        10,
        true,
    )
    .unwrap();
    assert!(r.body.is_empty());
}

fn dechunk(input: &[u8], max: usize) -> Result<(Vec<u8>, usize, bool), HttpError> {
    let mut d = ChunkedDecoder::new(max);
    let mut out = Vec::new();
    let used = d.push(input, &mut out)?;
    Ok((out, used, d.is_done()))
}

#[test]
fn chunked_decoding() {
    let (out, used, done) = dechunk(b"4\r\nWiki\r\n5\r\npedia\r\n0\r\n\r\nNEXT", 100).unwrap();
    assert_eq!((out.as_slice(), used, done), (&b"Wikipedia"[..], 24, true));
    // Extensions and trailer fields.
    let raw = b"A;name=val\r\n0123456789\r\n0\r\nExpires: never\r\nX: y\r\n\r\nrest";
    let (out, used, done) = dechunk(raw, 100).unwrap();
    assert_eq!(
        (out.as_slice(), used, done),
        (&b"0123456789"[..], raw.len() - 4, true)
    );
    // Byte by byte gives the same.
    let mut d = ChunkedDecoder::new(100);
    let mut out = Vec::new();
    for b in &raw[..raw.len() - 4] {
        assert!(!d.is_done());
        assert_eq!(d.push(std::slice::from_ref(b), &mut out), Ok(1));
    }
    assert!(d.is_done());
    assert_eq!(out, b"0123456789");
    assert_eq!(d.decoded_len(), 10);
    assert_eq!(d.push(b"more", &mut out), Ok(0));
    // Incomplete is not done.
    let (_, _, done) = dechunk(b"4\r\nWi", 100).unwrap();
    assert!(!done);
}

#[test]
fn chunked_errors() {
    for bad in [
        &b"\r\n"[..],
        b"x\r\n",
        b"-1\r\n",
        b"4\r\nWikiXX",
        b"4\nWiki\r\n",
        b"4 4\r\n",
        b"10000000000000000\r\n",
        b"0\r\nbad trailer\r\n\r\n",
    ] {
        assert!(
            dechunk(bad, usize::MAX).is_err(),
            "{:?}",
            String::from_utf8_lossy(bad)
        );
    }
    assert_eq!(
        dechunk(b"5\r\nhello\r\n6\r\n", 10),
        Err(HttpError::BodyTooLarge { len: 11, limit: 10 })
    );
    assert!(matches!(
        dechunk(b"ffffffffffffffff\r\n", usize::MAX),
        Err(HttpError::BodyTooLarge { .. }) | Ok(_)
    ));
    let long = format!("1;{}\r\n", "e".repeat(5000));
    assert!(matches!(
        dechunk(long.as_bytes(), 100),
        Err(HttpError::BadChunk(_))
    ));
}

/// A valid request head built from parts, and what parsing must give.
fn arb_request() -> impl Strategy<Value = (Vec<u8>, RequestHead)> {
    (
        prop::sample::select(vec!["GET", "POST", "HEAD", "PUT"]),
        "/[a-zA-Z0-9/._~+-]{0,40}",
        any::<bool>(),
        prop::collection::vec(("[A-Za-z][A-Za-z0-9-]{0,15}", "[ -~]{0,40}"), 0..8),
        any::<bool>(),
    )
        .prop_map(|(method, path, v11, headers, lf_only)| {
            let nl = if lf_only { "\n" } else { "\r\n" };
            let version = if v11 {
                Version::Http11
            } else {
                Version::Http10
            };
            let mut raw = format!("{method} {path} {}{nl}", version.as_str());
            let mut hs = Vec::new();
            for (n, v) in headers {
                raw.push_str(&format!("{n}: {v}{nl}"));
                hs.push(Header {
                    name: n,
                    value: v.trim_matches([' ', '\t']).to_string(),
                });
            }
            raw.push_str(nl);
            let head = RequestHead {
                method: method.to_string(),
                path,
                version,
                headers: Headers(hs),
                head_len: raw.len(),
            };
            (raw.into_bytes(), head)
        })
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        let l = Limits::new(512, 8);
        let _ = parse_request_head(&bytes, &l);
        let _ = parse_response_head(&bytes, &l);
        let _ = parse_request(&bytes, &l, 1000);
        let _ = parse_response(&bytes, &l, 1000, false);
        let _ = dechunk(&bytes, 1000);
        if let Ok(Some(h)) = parse_request_head(&bytes, &l) {
            let _ = h.body_framing(1000);
            prop_assert!(h.head_len <= bytes.len());
        }
        if let Ok(Some(h)) = parse_response_head(&bytes, &l) {
            let _ = h.body_framing(1000, false);
            prop_assert!(h.head_len <= bytes.len());
        }
    }

    #[test]
    fn http_like_bytes_never_panic(
        parts in prop::collection::vec(prop::sample::select(vec![
            "GET ", "HTTP/1.1 ", "HTTP/1.0", " 200 ", "/tor/", "\r\n", "\n", "\r",
            "Content-Length: ", "Transfer-Encoding: chunked", "0", "18446744073709551616",
            ":", " ", "\t", "\u{0}", "\u{ff}", "5\r\nhello\r\n", "0\r\n\r\n", ";ext",
        ]), 0..40)
    ) {
        let bytes = parts.concat().into_bytes();
        let l = Limits::DEFAULT;
        let _ = parse_request(&bytes, &l, 1 << 20);
        let _ = parse_response(&bytes, &l, 1 << 20, false);
        let _ = dechunk(&bytes, 1 << 20);
    }

    #[test]
    fn split_heads_parse_the_same((raw, want) in arb_request(), body in prop::collection::vec(any::<u8>(), 0..16)) {
        for cut in 0..raw.len() {
            prop_assert_eq!(req(&raw[..cut]), Ok(None));
        }
        let mut all = raw.clone();
        all.extend_from_slice(&body);
        prop_assert_eq!(req(&all), Ok(Some(want.clone())));
        prop_assert_eq!(req(&raw), Ok(Some(want)));
    }

    #[test]
    fn split_responses_parse_the_same(
        status in 100u16..1000,
        reason in "[ -~]{0,30}",
        body in prop::collection::vec(any::<u8>(), 0..64),
        cut in any::<prop::sample::Index>(),
    ) {
        let raw = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Length: {}\r\n\r\n",
            body.len()
        );
        let mut all = raw.clone().into_bytes();
        all.extend_from_slice(&body);
        let whole = resp(&all).unwrap().unwrap();
        prop_assert_eq!(whole.status, status);
        prop_assert_eq!(whole.head_len, raw.len());
        let cut = cut.index(raw.len());
        prop_assert_eq!(resp(&all[..cut]), Ok(None));
        prop_assert_eq!(resp(&all[..raw.len()]), Ok(Some(whole)));
    }

    #[test]
    fn chunked_split_anywhere_decodes_the_same(
        body in prop::collection::vec(any::<u8>(), 0..300),
        sizes in prop::collection::vec(1usize..40, 1..20),
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut enc = Vec::new();
        let mut rest = body.as_slice();
        let mut i = 0;
        while !rest.is_empty() {
            let n = sizes[i % sizes.len()].min(rest.len());
            enc.extend_from_slice(format!("{n:x}\r\n").as_bytes());
            enc.extend_from_slice(&rest[..n]);
            enc.extend_from_slice(b"\r\n");
            rest = &rest[n..];
            i += 1;
        }
        enc.extend_from_slice(b"0\r\n\r\n");
        let mut points: Vec<usize> = cuts.iter().map(|c| c.index(enc.len() + 1)).collect();
        points.push(0);
        points.push(enc.len());
        points.sort_unstable();
        let mut d = ChunkedDecoder::new(body.len());
        let mut out = Vec::new();
        for w in points.windows(2) {
            let piece = &enc[w[0]..w[1]];
            prop_assert_eq!(d.push(piece, &mut out), Ok(piece.len()));
        }
        prop_assert!(d.is_done());
        prop_assert_eq!(out, body);
    }
}

#[cfg(feature = "tokio")]
mod async_io {
    use super::*;
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn heads_and_requests_from_a_slow_stream() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let raw = b"POST /tor/ HTTP/1.0\r\nContent-Length: 5\r\n\r\nhelloGET / HTTP/1.1\r\n\r\n";
        tokio::spawn(async move {
            for b in raw {
                client.write_all(std::slice::from_ref(b)).await.unwrap();
                tokio::task::yield_now().await;
            }
            // Keep the stream open until the reader is done.
            tokio::time::sleep(Duration::from_secs(5)).await;
        });
        let mut buf = Vec::new();
        let t = Duration::from_secs(5);
        let r = io::read_request(&mut server, &mut buf, &Limits::DEFAULT, 100, t)
            .await
            .unwrap();
        assert_eq!(r.body, b"hello");
        let h = io::read_request_head(&mut server, &mut buf, &Limits::DEFAULT, t)
            .await
            .unwrap();
        assert_eq!((h.method.as_str(), h.path.as_str()), ("GET", "/"));
        assert!(buf.is_empty());
    }

    #[tokio::test]
    async fn timeouts_closes_and_caps() {
        let (_client, mut server) = tokio::io::duplex(64);
        let mut buf = Vec::new();
        let e = io::read_response_head(
            &mut server,
            &mut buf,
            &Limits::DEFAULT,
            Duration::from_millis(50),
        )
        .await;
        assert!(matches!(e, Err(ReadError::TimedOut)));

        let mut s: &[u8] = b"HTTP/1.0 200 OK\r\nX";
        let e = io::read_response_head(&mut s, &mut buf, &Limits::DEFAULT, Duration::from_secs(1))
            .await;
        assert!(matches!(e, Err(ReadError::Closed(18))));

        let big = vec![b'a'; 100_000];
        let mut s: &[u8] = &big;
        let mut buf = Vec::new();
        let e = io::read_request_head(
            &mut s,
            &mut buf,
            &Limits::new(1000, 8),
            Duration::from_secs(1),
        )
        .await;
        assert!(matches!(
            e,
            Err(ReadError::Http(HttpError::HeadTooLarge { limit: 1000 }))
        ));
        assert!(buf.len() <= 1000 + READ_CHUNK);

        let mut s: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
        let mut buf = Vec::new();
        let h = io::read_response_head(&mut s, &mut buf, &Limits::DEFAULT, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(h.status, 200);
        assert_eq!(buf, b"ok");
    }
}

#[test]
fn blocking_read() {
    let mut s: &[u8] = b"GET /bytes/5 HTTP/1.0\r\n\r\nrest";
    let mut buf = Vec::new();
    let h = blocking::read_request_head(&mut s, &mut buf, &Limits::DEFAULT).unwrap();
    assert_eq!(h.path, "/bytes/5");
    assert_eq!(buf, b"rest");
    let mut s: &[u8] = b"GET /bytes/5 HTTP/1.0\r\n";
    let mut buf = Vec::new();
    assert!(matches!(
        blocking::read_request_head(&mut s, &mut buf, &Limits::DEFAULT),
        Err(ReadError::Closed(_))
    ));
}
