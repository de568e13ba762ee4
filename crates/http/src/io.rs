//! Reading HTTP messages from a `tokio::io::AsyncRead`, with the parsers
//! of this crate, a size cap ([`Limits`], a maximum body) and a
//! caller-supplied timeout.
//!
//! Every helper takes the connection's read buffer: bytes already in it
//! are parsed first, and bytes read past the message stay in it for the
//! next one (keep-alive, pipelining, or a body the caller streams itself).

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::{
    HttpError, Limits, READ_CHUNK, ReadError, Request, RequestHead, ResponseHead, parse_request,
    parse_request_head, parse_response_head,
};

/// Read into `buf` until `parse` finds a message. The parsers of this
/// crate fail once `buf` is past their limits, so `buf` grows at most
/// [`READ_CHUNK`] bytes past them.
async fn read_until<R, T, F>(
    r: &mut R,
    buf: &mut Vec<u8>,
    timeout: Duration,
    mut parse: F,
) -> Result<T, ReadError>
where
    R: AsyncRead + Unpin + ?Sized,
    F: FnMut(&[u8]) -> Result<Option<T>, HttpError>,
{
    let read = async {
        let mut chunk = [0u8; READ_CHUNK];
        loop {
            if let Some(v) = parse(buf)? {
                return Ok(v);
            }
            let n = r.read(&mut chunk).await?;
            if n == 0 {
                return Err(ReadError::Closed(buf.len()));
            }
            buf.extend_from_slice(&chunk[..n]);
        }
    };
    tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| ReadError::TimedOut)?
}

/// Read one request head within `timeout`. On success the head's bytes are
/// removed from `buf`, which keeps any body bytes that came with it.
pub async fn read_request_head<R>(
    r: &mut R,
    buf: &mut Vec<u8>,
    limits: &Limits,
    timeout: Duration,
) -> Result<RequestHead, ReadError>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let head = read_until(r, buf, timeout, |b| parse_request_head(b, limits)).await?;
    buf.drain(..head.head_len);
    Ok(head)
}

/// Read one response head within `timeout`; like [`read_request_head`].
pub async fn read_response_head<R>(
    r: &mut R,
    buf: &mut Vec<u8>,
    limits: &Limits,
    timeout: Duration,
) -> Result<ResponseHead, ReadError>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let head = read_until(r, buf, timeout, |b| parse_response_head(b, limits)).await?;
    buf.drain(..head.head_len);
    Ok(head)
}

/// Read one whole request (head and `Content-Length` body of at most
/// `max_body` bytes) within `timeout`; its bytes are removed from `buf`.
pub async fn read_request<R>(
    r: &mut R,
    buf: &mut Vec<u8>,
    limits: &Limits,
    max_body: usize,
    timeout: Duration,
) -> Result<Request, ReadError>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let req = read_until(r, buf, timeout, |b| parse_request(b, limits, max_body)).await?;
    buf.drain(..req.wire_len().min(buf.len()));
    Ok(req)
}
