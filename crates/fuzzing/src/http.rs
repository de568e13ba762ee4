//! crates/http: request and response heads, whole messages, and chunked
//! body framing.

use onionmix_http::{
    BodyFraming, ChunkedDecoder, Limits, parse_request, parse_request_head, parse_response,
    parse_response_head,
};

use crate::input::chunks;

/// Limits by the selector's bits 0-1: the hard caps and two small ones.
fn limits(sel: u8) -> Limits {
    match sel & 3 {
        0 | 1 => Limits::DEFAULT,
        2 => Limits::new(256, 8),
        _ => Limits::new(8 * 1024, 64),
    }
}

/// Prefix lengths to re-parse: eight spread over the input plus one from
/// the selector.
fn prefixes(len: usize, sel: u8) -> impl Iterator<Item = usize> {
    (1..8)
        .map(move |i| len * i / 8)
        .chain(std::iter::once(usize::from(sel) % (len + 1)))
}

/// An HTTP request head and a whole request (directory requests,
/// descriptor uploads, the sink). A head that parses from a prefix must
/// parse the same from the whole buffer (a head split anywhere parses the
/// same), an error on a prefix stays an error, and a whole request's
/// body is what its Content-Length says.
pub fn http_request(data: &[u8]) {
    let Some((&sel, buf)) = data.split_first() else {
        return;
    };
    let lim = limits(sel);
    let full = parse_request_head(buf, &lim);
    for k in prefixes(buf.len(), sel) {
        match parse_request_head(&buf[..k], &lim) {
            Ok(Some(h)) => assert_eq!(full.as_ref(), Ok(&Some(h)), "prefix {k} parses differently"),
            Ok(None) => {}
            Err(_) => assert!(full.is_err(), "prefix {k} fails but the whole head parses"),
        }
    }
    let Ok(Some(head)) = full else { return };
    assert!(head.head_len <= buf.len().min(lim.max_head_len()));
    let _ = head.wants_close();
    let _ = head.header("host");
    let max_body = 1 << (sel >> 4);
    let framing = head.body_framing(max_body);
    match parse_request(buf, &lim, max_body) {
        Ok(Some(req)) => {
            assert_eq!(req.head, head);
            assert_eq!(framing, Ok(BodyFraming::Length(req.body.len())));
            assert!(req.wire_len() <= buf.len());
            assert_eq!(&buf[head.head_len..req.wire_len()], &req.body[..]);
        }
        Ok(None) => {
            assert!(matches!(framing, Ok(BodyFraming::Length(n)) if head.head_len + n > buf.len()))
        }
        Err(_) => assert!(!matches!(framing, Ok(BodyFraming::Length(_)))),
    }
}

/// An HTTP response head and a whole response (directory answers, the
/// sink's answers to workload clients). Prefix consistency as for
/// requests; a chunked body decodes the same fed in pieces.
pub fn http_response(data: &[u8]) {
    let Some((&sel, buf)) = data.split_first() else {
        return;
    };
    let lim = limits(sel);
    let full = parse_response_head(buf, &lim);
    for k in prefixes(buf.len(), sel) {
        match parse_response_head(&buf[..k], &lim) {
            Ok(Some(h)) => assert_eq!(full.as_ref(), Ok(&Some(h)), "prefix {k} parses differently"),
            Ok(None) => {}
            Err(_) => assert!(full.is_err(), "prefix {k} fails but the whole head parses"),
        }
    }
    let head_request = sel & 4 != 0;
    let max_body = 1 << (sel >> 4);
    let whole = parse_response(buf, &lim, max_body, head_request);
    let Ok(Some(head)) = full else {
        assert!(whole.is_err());
        return;
    };
    assert!(head.reason.len() <= 200);
    assert!(
        head.reason
            .bytes()
            .all(|b| b.is_ascii_graphic() || b == b' ')
    );
    let framing = head.body_framing(max_body, head_request);
    let Ok(resp) = whole else { return };
    assert_eq!(resp.head, head);
    assert!(resp.body.len() <= max_body);
    if framing == Ok(BodyFraming::Chunked) {
        let mut dec = ChunkedDecoder::new(max_body);
        let mut out = Vec::new();
        for r in chunks(buf.len() - head.head_len, &[sel, 0, 7]) {
            let piece = &buf[head.head_len..][r];
            dec.push(piece, &mut out)
                .expect("decoded whole, so decodes in pieces");
            if dec.is_done() {
                break;
            }
        }
        assert!(dec.is_done());
        assert_eq!(out, resp.body, "chunked body fed in pieces differs");
    }
}

/// A chunked body on its own. First byte: the body limit and how to
/// split. Fed whole and in pieces: the same bytes, the same end, the
/// same verdict.
pub fn http_chunked(data: &[u8]) {
    let Some((&sel, body)) = data.split_first() else {
        return;
    };
    let max_body = 1 << (sel & 15);
    let mut a = ChunkedDecoder::new(max_body);
    let mut out_a = Vec::new();
    let ra = a.push(body, &mut out_a);
    let mut b = ChunkedDecoder::new(max_body);
    let mut out_b = Vec::new();
    let mut used_b = 0;
    let mut rb = Ok(0);
    for r in chunks(body.len(), &[sel >> 4, sel, 1]) {
        if b.is_done() {
            break;
        }
        match b.push(&body[r], &mut out_b) {
            Ok(n) => used_b += n,
            Err(e) => {
                rb = Err(e);
                break;
            }
        }
    }
    assert_eq!(
        ra.is_ok(),
        rb.is_ok(),
        "chunked verdict depends on splitting"
    );
    if let Ok(used_a) = ra {
        assert_eq!(out_a, out_b, "chunked output depends on splitting");
        assert_eq!(a.is_done(), b.is_done());
        assert_eq!(used_a, used_b);
        assert_eq!(a.decoded_len(), out_a.len());
        assert!(out_a.len() <= max_body);
    }
}
