//! A tiny HTTP/1.1 GET client over any stream, recording the timestamps
//! OnionPerf-style measurements need.

use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest response head accepted.
const MAX_HEAD: usize = 16 * 1024;
/// Largest body accepted.
pub const MAX_BODY: usize = 1 << 30;

/// A response with timings (relative to the `start` passed to [`get`]).
#[derive(Debug, Clone)]
pub struct Response {
    /// Status code.
    pub status: u16,
    /// Headers (lower-cased names).
    pub headers: Vec<(String, String)>,
    /// Body.
    pub body: Vec<u8>,
    /// When the request was written.
    pub request_sent: Duration,
    /// When the first response byte arrived.
    pub first_byte: Duration,
    /// When the last body byte arrived.
    pub last_byte: Duration,
    /// When body byte offsets 0.5 MiB and 1 MiB arrived (if reached).
    pub progress: Vec<(u64, Duration)>,
}

impl Response {
    /// Header value by lower-case name.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }
    /// Whether the body matches the sink's `X-Onionmix-Sha256` header.
    pub fn sha256_ok(&self) -> bool {
        match self.header("x-onionmix-sha256") {
            Some(h) => hex::encode(Sha256::digest(&self.body)) == h,
            None => false,
        }
    }
}

/// HTTP client errors.
#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    /// I/O failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The response is not valid HTTP.
    #[error("bad response: {0}")]
    Bad(&'static str),
    /// The connection closed before the body was complete.
    #[error("connection closed after {got} of {want} body bytes")]
    Truncated {
        /// Bytes received.
        got: usize,
        /// Content-Length.
        want: usize,
    },
}

/// Send `GET path` and read the whole response. Timestamps are measured
/// from `start`. Progress marks are taken at 512 KiB and 1 MiB.
pub async fn get<S>(
    s: &mut S,
    host: &str,
    path: &str,
    start: Instant,
) -> Result<Response, HttpError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let req = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: onionmix\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    s.flush().await?;
    let request_sent = start.elapsed();
    let mut buf = Vec::with_capacity(64 * 1024);
    let mut tmp = vec![0u8; 64 * 1024];
    let mut first_byte = None;
    let head_end = loop {
        if let Some(p) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        if buf.len() > MAX_HEAD {
            return Err(HttpError::Bad("header too long"));
        }
        let n = s.read(&mut tmp).await?;
        if n == 0 {
            return Err(HttpError::Bad("closed before the response head"));
        }
        first_byte.get_or_insert_with(|| start.elapsed());
        buf.extend_from_slice(&tmp[..n]);
    };
    let first_byte = first_byte.unwrap_or_else(|| start.elapsed());
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let status_line = lines.next().ok_or(HttpError::Bad("empty"))?;
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or(HttpError::Bad("bad status line"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let len: usize = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .and_then(|(_, v)| v.parse().ok())
        .ok_or(HttpError::Bad("no content-length"))?;
    if len > MAX_BODY {
        return Err(HttpError::Bad("body too large"));
    }
    let mut body = buf.split_off(head_end);
    body.reserve(len.saturating_sub(body.len()));
    let marks = [512 * 1024u64, 1024 * 1024];
    let mut progress = Vec::new();
    let note = |have: usize, progress: &mut Vec<(u64, Duration)>| {
        for m in marks {
            if have as u64 >= m && !progress.iter().any(|(x, _)| *x == m) && m <= len as u64 {
                progress.push((m, start.elapsed()));
            }
        }
    };
    note(body.len(), &mut progress);
    while body.len() < len {
        let want = (len - body.len()).min(tmp.len());
        let n = s.read(&mut tmp[..want]).await?;
        if n == 0 {
            return Err(HttpError::Truncated {
                got: body.len(),
                want: len,
            });
        }
        body.extend_from_slice(&tmp[..n]);
        note(body.len(), &mut progress);
    }
    Ok(Response {
        status,
        headers,
        body,
        request_sent,
        first_byte,
        last_byte: start.elapsed(),
        progress,
    })
}
