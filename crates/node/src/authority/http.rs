//! The authority's small HTTP/1.0 codec (DirPort server side, and the
//! client side of vote and signature exchange). Heads, `Content-Length`
//! and framing are the shared parser's (`onionmix-http`); this module adds
//! the directory path check and tor's `deflate` answers. Every size and
//! wait is bounded.

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

use onionmix_http::{HttpError, Limits, ReadError};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest request head.
pub const MAX_HEAD: usize = 16 * 1024;
/// Largest request body (a vote of a large network).
pub const MAX_BODY: usize = 4 << 20;
/// Largest response read by the client side.
pub const MAX_RESPONSE: usize = 8 << 20;
/// Time allowed to receive a request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A parsed request: head and `Content-Length` body.
pub use onionmix_http::Request;

/// Head limits (the shared parser's hard caps: [`MAX_HEAD`] bytes, 64
/// headers).
const LIMITS: Limits = Limits::new(MAX_HEAD, onionmix_http::MAX_HEADERS);
/// Longest request path accepted.
const MAX_PATH: usize = 8192;

/// Why a request was refused (answered 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// Not an acceptable HTTP request.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// The path is not a directory path (`/tor/...`, visible ASCII).
    #[error("bad path")]
    BadPath,
}

/// A directory path: `/tor/...`, visible ASCII, bounded.
fn check_path(req: &Request) -> Result<(), RequestError> {
    let path = req.path();
    if !path.starts_with("/tor/")
        || path.len() > MAX_PATH
        || !path.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(RequestError::BadPath);
    }
    Ok(())
}

/// Parse a request from `buf`: `Ok(None)` if more bytes are needed.
pub fn parse_request(buf: &[u8]) -> Result<Option<Request>, RequestError> {
    let Some(req) = onionmix_http::parse_request(buf, &LIMITS, MAX_BODY)? else {
        return Ok(None);
    };
    check_path(&req)?;
    Ok(Some(req))
}

fn clean_reason(r: &str) -> String {
    let s: String = r
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() || c == ' ' {
                c
            } else {
                ' '
            }
        })
        .take(200)
        .collect();
    if s.is_empty() { "-".into() } else { s }
}

/// Build a response; `deflate` compresses the body (zlib, tor's
/// "deflate").
pub fn response(code: u16, reason: &str, body: &[u8], deflate: bool) -> Vec<u8> {
    let (body, enc) = if deflate && !body.is_empty() {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        let ok = e.write_all(body).is_ok();
        match (ok, e.finish()) {
            (true, Ok(z)) => (z, Some("deflate")),
            _ => (body.to_vec(), None),
        }
    } else {
        (body.to_vec(), None)
    };
    let mut out = format!(
        "HTTP/1.0 {code} {}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n",
        clean_reason(reason),
        body.len()
    );
    if let Some(e) = enc {
        out.push_str(&format!("Content-Encoding: {e}\r\n"));
    }
    out.push_str("\r\n");
    let mut v = out.into_bytes();
    v.extend_from_slice(&body);
    v
}

/// Read one request from `sock`, answer it with `handler`, close.
pub async fn serve_one<F: FnOnce(Request) -> Vec<u8>>(mut sock: TcpStream, handler: F) {
    let mut buf = Vec::new();
    let read =
        onionmix_http::io::read_request(&mut sock, &mut buf, &LIMITS, MAX_BODY, REQUEST_TIMEOUT)
            .await;
    let resp = match read {
        Ok(req) => match check_path(&req) {
            Ok(()) => handler(req),
            Err(e) => response(400, &e.to_string(), b"", false),
        },
        Err(ReadError::Http(e)) => response(400, &e.to_string(), b"", false),
        Err(ReadError::Closed(_)) => response(400, "connection closed mid-request", b"", false),
        Err(ReadError::Io(_)) => response(400, "read error", b"", false),
        Err(ReadError::TimedOut) => return,
    };
    let _ = tokio::time::timeout(REQUEST_TIMEOUT, sock.write_all(&resp)).await;
    let _ = sock.shutdown().await;
}

async fn exchange(addr: SocketAddr, req: Vec<u8>) -> Result<(u16, String), String> {
    let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    s.write_all(&req).await.map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    (&mut s)
        .take(MAX_RESPONSE as u64)
        .read_to_end(&mut out)
        .await
        .map_err(|e| e.to_string())?;
    let head = onionmix_http::parse_response_head(&out, &Limits::DEFAULT)
        .map_err(|e| e.to_string())?
        .ok_or("no response head")?;
    let code = head.status;
    if code != 200 {
        return Ok((code, head.reason));
    }
    let resp = onionmix_http::parse_response(&out, &Limits::DEFAULT, MAX_RESPONSE, false)
        .map_err(|e| e.to_string())?;
    let deflated = resp
        .head
        .header("content-encoding")
        .is_some_and(|v| v.eq_ignore_ascii_case("deflate"));
    let body = if deflated {
        let mut d = std::io::Read::take(
            flate2::read::ZlibDecoder::new(&resp.body[..]),
            MAX_RESPONSE as u64,
        );
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut d, &mut v).map_err(|e| e.to_string())?;
        v
    } else {
        resp.body
    };
    Ok((code, String::from_utf8_lossy(&body).to_string()))
}

/// GET `path` from `addr`: (status, body on 200 else reason).
pub async fn get(addr: SocketAddr, path: &str) -> Result<(u16, String), String> {
    let req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n");
    exchange(addr, req.into_bytes()).await
}

/// POST `body` to `path` at `addr`: (status, reason).
pub async fn post(addr: SocketAddr, path: &str, body: &str) -> Result<(u16, String), String> {
    let mut req = format!(
        "POST {path} HTTP/1.0\r\nHost: {addr}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    req.extend_from_slice(body.as_bytes());
    exchange(addr, req).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn requests_parse_incrementally_and_bad_ones_are_refused() {
        let full = b"POST /tor/ HTTP/1.0\r\nContent-Length: 5\r\n\r\nhello";
        for cut in 0..full.len() {
            assert_eq!(parse_request(&full[..cut]), Ok(None), "cut {cut}");
        }
        let r = parse_request(full).unwrap().unwrap();
        assert_eq!((r.method(), r.body.as_slice()), ("POST", &b"hello"[..]));
        assert!(parse_request(b"GET /etc/passwd HTTP/1.0\r\n\r\n").is_err());
        assert!(parse_request(b"GET /tor/ HTTP/2\r\n\r\n").is_err());
        assert!(
            parse_request(b"GET /tor/ HTTP/1.0\r\nContent-Length: 99999999999\r\n\r\n").is_err()
        );
        assert!(parse_request(b"GET /tor/ HTTP/1.0\r\nnocolon\r\n\r\n").is_err());
        assert!(parse_request(&vec![b'a'; MAX_HEAD + 1]).is_err());
    }

    #[test]
    fn responses_compress_and_sanitize() {
        let r = response(400, "bad\r\nInjected: x", b"", false);
        let head = String::from_utf8(r).unwrap();
        assert!(head.starts_with("HTTP/1.0 400 bad  Injected: x\r\n"));
        let z = response(200, "OK", b"hello hello hello", true);
        let at = z.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let mut d = flate2::read::ZlibDecoder::new(&z[at..]);
        let mut s = String::new();
        std::io::Read::read_to_string(&mut d, &mut s).unwrap();
        assert_eq!(s, "hello hello hello");
    }
}
