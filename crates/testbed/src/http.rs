//! A tiny HTTP/1.1 GET client over any stream, recording the timestamps
//! OnionPerf-style measurements need. Heads and framing are parsed by the
//! workspace's one HTTP parser (`onionmix-http`).

use std::time::{Duration, Instant};

use onionmix_http::io::read_response_head;
use onionmix_http::{BodyFraming, ChunkedDecoder, Limits, ReadError};
use sha2::{Digest, Sha256};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Largest body accepted.
pub const MAX_BODY: usize = 1 << 30;
/// Time allowed for the rest of the response head once its first byte
/// came.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(120);

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
    /// The response head or framing was refused by the HTTP parser.
    #[error("bad response: {0}")]
    Http(#[from] onionmix_http::HttpError),
    /// The connection closed before the body was complete.
    #[error("connection closed after {got} of {want} body bytes")]
    Truncated {
        /// Bytes received.
        got: usize,
        /// Content-Length.
        want: usize,
    },
}

impl From<ReadError> for HttpError {
    fn from(e: ReadError) -> Self {
        match e {
            ReadError::Http(e) => HttpError::Http(e),
            ReadError::Io(e) => HttpError::Io(e),
            ReadError::TimedOut => HttpError::Bad("timed out waiting for the response head"),
            ReadError::Closed(_) => HttpError::Bad("closed before the response head"),
        }
    }
}

/// Send `GET path` and read the whole response (`Content-Length`, chunked
/// or close-delimited body, at most [`MAX_BODY`] bytes). Timestamps are
/// measured from `start`. Progress marks are taken at 512 KiB and 1 MiB.
/// The head must arrive within [`HEAD_TIMEOUT`]; callers bound the whole
/// exchange.
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
    let mut tmp = vec![0u8; 64 * 1024];
    // The first read times the first byte; the parser takes it from there.
    let n = s.read(&mut tmp).await?;
    if n == 0 {
        return Err(HttpError::Bad("closed before the response head"));
    }
    let first_byte = start.elapsed();
    let mut buf = tmp[..n].to_vec();
    let head = read_response_head(s, &mut buf, &Limits::DEFAULT, HEAD_TIMEOUT).await?;
    let status = head.status;
    let headers: Vec<(String, String)> = head
        .headers
        .iter()
        .map(|(n, v)| (n.to_ascii_lowercase(), v.to_string()))
        .collect();
    let marks = [512 * 1024u64, 1024 * 1024];
    let mut progress = Vec::new();
    let note = |have: usize, len: Option<usize>, progress: &mut Vec<(u64, Duration)>| {
        for m in marks {
            if have as u64 >= m
                && !progress.iter().any(|(x, _)| *x == m)
                && len.is_none_or(|len| m <= len as u64)
            {
                progress.push((m, start.elapsed()));
            }
        }
    };
    let body = match head.body_framing(MAX_BODY, false)? {
        BodyFraming::Length(len) => {
            let mut body = buf;
            if body.len() > len {
                // Only the declared length belongs to this response.
                body.truncate(len);
            }
            body.reserve(len - body.len());
            note(body.len(), Some(len), &mut progress);
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
                note(body.len(), Some(len), &mut progress);
            }
            body
        }
        BodyFraming::Chunked => {
            let mut dec = ChunkedDecoder::new(MAX_BODY);
            let mut body = Vec::new();
            dec.push(&buf, &mut body)?;
            note(body.len(), None, &mut progress);
            while !dec.is_done() {
                let n = s.read(&mut tmp).await?;
                if n == 0 {
                    return Err(HttpError::Bad("closed inside a chunked body"));
                }
                dec.push(&tmp[..n], &mut body)?;
                note(body.len(), None, &mut progress);
            }
            body
        }
        BodyFraming::UntilClose => {
            let mut body = buf;
            note(body.len(), None, &mut progress);
            loop {
                let n = s.read(&mut tmp).await?;
                if n == 0 {
                    break;
                }
                if body.len().saturating_add(n) > MAX_BODY {
                    return Err(HttpError::Bad("body too large"));
                }
                body.extend_from_slice(&tmp[..n]);
                note(body.len(), None, &mut progress);
            }
            body
        }
    };
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    /// A one-shot server that reads a request head, writes `answer`, closes.
    async fn serve(answer: &'static [u8]) -> std::net::SocketAddr {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let a = l.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut s, _) = l.accept().await.unwrap();
            let mut buf = vec![0u8; 4096];
            let _ = s.read(&mut buf).await;
            s.write_all(answer).await.unwrap();
            let _ = s.shutdown().await;
        });
        a
    }

    async fn fetch(answer: &'static [u8]) -> Result<Response, HttpError> {
        let a = serve(answer).await;
        let mut s = tokio::net::TcpStream::connect(a).await.unwrap();
        get(&mut s, "x", "/", Instant::now()).await
    }

    #[tokio::test]
    async fn chunked_and_close_delimited_bodies() {
        let r = fetch(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n")
            .await
            .unwrap();
        assert_eq!(r.body, b"abcde");
        let r = fetch(b"HTTP/1.0 200 OK\r\nX-A: b\r\n\r\nuntil the end")
            .await
            .unwrap();
        assert_eq!((r.status, r.body.as_slice()), (200, &b"until the end"[..]));
        assert_eq!(r.header("x-a"), Some("b"));
    }

    #[tokio::test]
    async fn bad_responses_are_errors() {
        assert!(matches!(
            fetch(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc").await,
            Err(HttpError::Truncated { got: 3, want: 10 })
        ));
        assert!(matches!(
            fetch(b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab").await,
            Err(HttpError::Http(
                onionmix_http::HttpError::ConflictingContentLength
            ))
        ));
        assert!(matches!(
            fetch(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n").await,
            Err(HttpError::Http(_))
        ));
        assert!(matches!(
            fetch(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n").await,
            Err(HttpError::Http(onionmix_http::HttpError::BadChunk(_)))
        ));
        assert!(matches!(
            fetch(b"SSH-2.0-x\r\n\r\n").await,
            Err(HttpError::Http(_))
        ));
        assert!(matches!(
            fetch(b"HTTP/1.1 200 OK\r\n").await,
            Err(HttpError::Bad(_))
        ));
    }
}
