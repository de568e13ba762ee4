//! The authority's small HTTP/1.0 codec (DirPort server side, and the
//! client side of vote and signature exchange). Every size and wait is
//! bounded.

use std::io::Write as _;
use std::net::SocketAddr;
use std::time::Duration;

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

/// A parsed request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `GET` or `POST` (others are answered 405).
    pub method: String,
    /// Path.
    pub path: String,
    /// Headers, names lowercased.
    pub headers: Vec<(String, String)>,
    /// Body (POST).
    pub body: Vec<u8>,
}

impl Request {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Parse a request from `buf`: `Ok(None)` if more bytes are needed.
pub fn parse_request(buf: &[u8]) -> Result<Option<Request>, &'static str> {
    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
        if buf.len() > MAX_HEAD {
            return Err("request head too large");
        }
        return Ok(None);
    };
    if end > MAX_HEAD {
        return Err("request head too large");
    }
    let head = std::str::from_utf8(&buf[..end]).map_err(|_| "request is not UTF-8")?;
    let mut lines = head.split("\r\n");
    let first = lines.next().ok_or("empty request")?;
    let mut parts = first.split(' ');
    let (Some(method), Some(path), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err("malformed request line");
    };
    if !version.starts_with("HTTP/1.") {
        return Err("not HTTP/1.x");
    }
    if !path.starts_with("/tor/")
        || path.len() > 8192
        || !path.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err("bad path");
    }
    let mut headers = Vec::new();
    for l in lines {
        let (n, v) = l.split_once(':').ok_or("malformed header")?;
        if headers.len() >= 64 {
            return Err("too many headers");
        }
        headers.push((n.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let mut req = Request {
        method: method.to_string(),
        path: path.to_string(),
        headers,
        body: Vec::new(),
    };
    let len: usize = match req.header("content-length") {
        Some(v) => v.parse().map_err(|_| "bad Content-Length")?,
        None => 0,
    };
    if len > MAX_BODY {
        return Err("body too large");
    }
    let have = buf.len() - (end + 4);
    if have < len {
        return Ok(None);
    }
    req.body = buf[end + 4..end + 4 + len].to_vec();
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
    let read = async {
        let mut chunk = [0u8; 16 * 1024];
        loop {
            match parse_request(&buf) {
                Ok(Some(r)) => return Ok(r),
                Ok(None) => {}
                Err(e) => return Err(e),
            }
            let n = sock.read(&mut chunk).await.map_err(|_| "read error")?;
            if n == 0 {
                return Err("connection closed mid-request");
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    let resp = match tokio::time::timeout(REQUEST_TIMEOUT, read).await {
        Ok(Ok(req)) => handler(req),
        Ok(Err(e)) => response(400, e, b"", false),
        Err(_) => return,
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
    let end = out
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("no response head")?;
    let head = String::from_utf8_lossy(&out[..end]).to_string();
    let status = head.lines().next().unwrap_or("");
    let mut it = status.splitn(3, ' ');
    let _ = it.next();
    let code: u16 = it
        .next()
        .and_then(|c| c.parse().ok())
        .ok_or("bad status line")?;
    let reason = it.next().unwrap_or("").to_string();
    let body = &out[end + 4..];
    let deflated = head.lines().any(|l| {
        l.to_ascii_lowercase()
            .starts_with("content-encoding: deflate")
    });
    let body = if deflated {
        let mut d = std::io::Read::take(flate2::read::ZlibDecoder::new(body), MAX_RESPONSE as u64);
        let mut v = Vec::new();
        std::io::Read::read_to_end(&mut d, &mut v).map_err(|e| e.to_string())?;
        v
    } else {
        body.to_vec()
    };
    if code == 200 {
        Ok((code, String::from_utf8_lossy(&body).to_string()))
    } else {
        Ok((code, reason))
    }
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
        assert_eq!(
            (r.method.as_str(), r.body.as_slice()),
            ("POST", &b"hello"[..])
        );
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
