//! Reading an HTTP head from a blocking `std::io::Read` with the parsers
//! of this crate. There is no timeout parameter: set one on the socket
//! (`set_read_timeout`); its expiry comes back as [`ReadError::Io`].

use std::io::Read;

use crate::{Limits, READ_CHUNK, ReadError, RequestHead, parse_request_head};

/// Read one request head. On success the head's bytes are removed from
/// `buf`, which keeps any bytes that came after it.
pub fn read_request_head<R: Read + ?Sized>(
    r: &mut R,
    buf: &mut Vec<u8>,
    limits: &Limits,
) -> Result<RequestHead, ReadError> {
    let mut chunk = [0u8; READ_CHUNK];
    loop {
        if let Some(head) = parse_request_head(buf, limits)? {
            buf.drain(..head.head_len);
            return Ok(head);
        }
        let n = r.read(&mut chunk)?;
        if n == 0 {
            return Err(ReadError::Closed(buf.len()));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}
