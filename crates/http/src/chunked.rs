//! Incremental, bounded decoder for `Transfer-Encoding: chunked`
//! (RFC 9112 §7.1). Chunk-size lines are read by `httparse::parse_chunk_size`,
//! trailer fields by `httparse::parse_headers`.

use crate::{HttpError, MAX_HEAD_LEN, MAX_HEADERS};

/// Longest chunk-size line (size and extensions) accepted.
const MAX_CHUNK_LINE: usize = 4 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Reading a chunk-size line into `line`.
    Size,
    /// This many data bytes of the current chunk are still to come.
    Data(u64),
    /// The CRLF after a chunk's data; `line` holds what came of it.
    DataEnd,
    /// Trailer fields up to the final blank line, into `line`.
    Trailer,
    /// The last chunk and the trailer were read.
    Done,
}

/// Decodes a chunked body fed in pieces of any size. Decoded bytes are
/// appended to the caller's buffer; their total may not exceed the
/// `max_body` given at creation.
#[derive(Debug, Clone)]
pub struct ChunkedDecoder {
    state: State,
    line: Vec<u8>,
    max_body: usize,
    total: usize,
}

impl ChunkedDecoder {
    /// A decoder for a body of at most `max_body` decoded bytes.
    pub fn new(max_body: usize) -> Self {
        ChunkedDecoder {
            state: State::Size,
            line: Vec::new(),
            max_body,
            total: 0,
        }
    }

    /// Whether the whole body (last chunk and trailer) was read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Decoded bytes so far.
    pub fn decoded_len(&self) -> usize {
        self.total
    }

    /// Feed `input`; decoded data is appended to `out`. Returns how many
    /// bytes of `input` were used: all of them unless the body ended inside
    /// `input` (the rest belongs to whatever follows the message).
    pub fn push(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, HttpError> {
        let mut rest = input;
        loop {
            match self.state {
                State::Done => break,
                _ if rest.is_empty() => break,
                State::Size => {
                    if !self.take_line(&mut rest, MAX_CHUNK_LINE)? {
                        break;
                    }
                    let size = self.chunk_size()?;
                    self.line.clear();
                    if size == 0 {
                        self.state = State::Trailer;
                    } else {
                        let total = usize::try_from(size)
                            .ok()
                            .and_then(|s| self.total.checked_add(s))
                            .filter(|t| *t <= self.max_body);
                        if total.is_none() {
                            return Err(HttpError::BodyTooLarge {
                                len: u64::try_from(self.total)
                                    .unwrap_or(u64::MAX)
                                    .saturating_add(size),
                                limit: self.max_body,
                            });
                        }
                        self.state = State::Data(size);
                    }
                }
                State::Data(left) => {
                    let n = usize::try_from(left).unwrap_or(usize::MAX).min(rest.len());
                    out.extend_from_slice(&rest[..n]);
                    rest = &rest[n..];
                    // Checked when the chunk size was read.
                    self.total = self.total.saturating_add(n);
                    let left = left.saturating_sub(u64::try_from(n).unwrap_or(u64::MAX));
                    self.state = if left == 0 {
                        State::DataEnd
                    } else {
                        State::Data(left)
                    };
                }
                State::DataEnd => {
                    let want = 2usize.saturating_sub(self.line.len());
                    let n = want.min(rest.len());
                    self.line.extend_from_slice(&rest[..n]);
                    rest = &rest[n..];
                    if !b"\r\n".starts_with(&self.line) {
                        return Err(HttpError::BadChunk("chunk data not followed by CRLF"));
                    }
                    if self.line.len() == 2 {
                        self.line.clear();
                        self.state = State::Size;
                    }
                }
                State::Trailer => {
                    if !self.take_line(&mut rest, MAX_HEAD_LEN)? {
                        break;
                    }
                    if self.line.as_slice() == b"\r\n" || self.line.ends_with(b"\r\n\r\n") {
                        let mut storage = [httparse::EMPTY_HEADER; MAX_HEADERS];
                        match httparse::parse_headers(&self.line, &mut storage) {
                            Ok(httparse::Status::Complete(_)) => {}
                            Ok(httparse::Status::Partial) | Err(_) => {
                                return Err(HttpError::BadChunk("malformed trailer"));
                            }
                        }
                        self.line = Vec::new();
                        self.state = State::Done;
                    }
                }
            }
        }
        Ok(input.len() - rest.len())
    }

    /// Move bytes up to and including the next LF from `rest` to `line`;
    /// true when `line` now ends with a LF.
    fn take_line(&mut self, rest: &mut &[u8], max: usize) -> Result<bool, HttpError> {
        let (n, complete) = match rest.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (rest.len(), false),
        };
        if self.line.len().saturating_add(n) > max {
            return Err(HttpError::BadChunk("chunk line or trailer too long"));
        }
        self.line.extend_from_slice(&rest[..n]);
        *rest = &rest[n..];
        Ok(complete)
    }

    fn chunk_size(&self) -> Result<u64, HttpError> {
        if !self.line.first().is_some_and(u8::is_ascii_hexdigit) {
            return Err(HttpError::BadChunk("chunk size is not hexadecimal"));
        }
        match httparse::parse_chunk_size(&self.line) {
            Ok(httparse::Status::Complete((used, size))) if used == self.line.len() => Ok(size),
            Ok(_) => Err(HttpError::BadChunk("chunk size line without CRLF")),
            Err(httparse::InvalidChunkSize) => Err(HttpError::BadChunk("invalid chunk size")),
        }
    }
}
