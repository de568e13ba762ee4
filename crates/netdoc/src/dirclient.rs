//! Sans-IO HTTP/1.0 directory client codec (dir-spec §6 and appendix B).
//!
//! [`DirRequest`] builds the `GET` request bytes for the documents a client
//! needs to bootstrap; [`ResponseParser`] consumes the reply from any byte
//! stream (a DirPort TCP connection or a `BEGIN_DIR` stream) and yields a
//! decoded [`DirResponse`].
//!
//! Framing follows what stock tor directory servers do: an `HTTP/1.0` status
//! line, headers, a blank line, then a body that runs until the server closes
//! the stream (compressed replies carry no `Content-Length`) or for exactly
//! `Content-Length` bytes when that header is present.  The status line and
//! headers are parsed by the workspace's one HTTP head parser
//! (`onionmix-http`: strict `Content-Length`; a chunked transfer coding,
//! which directory servers never use, is refused).  The caller feeds bytes
//! with [`ResponseParser::push`], may stop reading as soon as
//! [`ResponseParser::is_complete`] is true, and calls
//! [`ResponseParser::finish`] at end of stream.
//!
//! Every size is bounded: the header block ([`MAX_HEADER_LEN`]), the raw body
//! (compressed) and the decoded body both stop at the request's
//! `max_body_len`, so a decompression bomb is cut off at the same limit.

use std::fmt::Write as _;
use std::io::Read as _;

use crate::MdDigest;

/// Largest header block (status line + headers) accepted, in bytes.
pub const MAX_HEADER_LEN: usize = onionmix_http::MAX_HEAD_LEN;
/// Largest number of header lines accepted.
pub const MAX_HEADERS: usize = onionmix_http::MAX_HEADERS;
/// Limits for the response head (the shared parser's hard caps).
const HEAD_LIMITS: onionmix_http::Limits = onionmix_http::Limits::new(MAX_HEADER_LEN, MAX_HEADERS);
/// dir-spec §4.3: at most 92 microdescriptor digests per request
/// (squid URL length limit).
pub const MAX_MICRODESCS_PER_REQUEST: usize = 92;
/// dir-spec appendix B: at most 96 fingerprints per request.
pub const MAX_FINGERPRINTS_PER_REQUEST: usize = 96;

/// Default decoded body limit for a consensus (tor's `MAX_DIR_DL_SIZE`).
pub const DEFAULT_MAX_CONSENSUS_LEN: usize = 16 * 1024 * 1024;
/// Default decoded body limit for authority key certificates.
pub const DEFAULT_MAX_CERTS_LEN: usize = 1024 * 1024;
/// Default decoded body limit for one batch of microdescriptors
/// (92 microdescriptors with very long family lines still fit).
pub const DEFAULT_MAX_MICRODESCS_LEN: usize = 4 * 1024 * 1024;

/// What the request asks for; used by the caller to route the response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DirRequestKind {
    /// `/tor/status-vote/current/consensus-microdesc[/<F>+...]`
    MicrodescConsensus,
    /// `/tor/keys/fp/<F>+<F>` or `/tor/keys/all`
    AuthorityCerts,
    /// `/tor/micro/d/<D>-<D>`; the digests requested, in order.
    Microdescs(Vec<MdDigest>),
}

/// One directory GET request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirRequest {
    path: String,
    kind: DirRequestKind,
    max_body_len: usize,
    accept_encoding: &'static str,
}

/// Errors building requests or parsing responses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DirClientError {
    /// A request was built with no items, or with more than the spec allows.
    #[error("bad request: {0}")]
    BadRequest(String),
    /// The server answered with a status other than 200.
    #[error("directory server answered {code} {reason}")]
    HttpStatus {
        /// HTTP status code.
        code: u16,
        /// Reason phrase as sent (sanitised to printable ASCII).
        reason: String,
    },
    /// The status line or a header was not valid HTTP.
    #[error("malformed HTTP response: {0}")]
    Malformed(String),
    /// The stream ended before the header block or the declared body was complete.
    #[error("truncated response: {0}")]
    Truncated(String),
    /// The header block, raw body or decoded body exceeded its limit.
    #[error("response too large: {what} exceeds {limit} bytes")]
    TooLarge {
        /// Which part was too large.
        what: &'static str,
        /// The limit in force.
        limit: usize,
    },
    /// The server used a Content-Encoding this client did not ask for.
    #[error("unsupported Content-Encoding {0:?}")]
    UnsupportedEncoding(String),
    /// The compressed body could not be decoded.
    #[error("cannot decompress body: {0}")]
    Decompress(String),
    /// Data was pushed after `finish` or after a fatal error.
    #[error("response parser already failed or finished")]
    Finished,
}

impl DirRequest {
    fn new(path: String, kind: DirRequestKind, max_body_len: usize) -> Self {
        DirRequest {
            path,
            kind,
            max_body_len,
            accept_encoding: "deflate, identity",
        }
    }

    /// The current microdescriptor-flavoured consensus.
    pub fn microdesc_consensus() -> Self {
        Self::new(
            "/tor/status-vote/current/consensus-microdesc".to_string(),
            DirRequestKind::MicrodescConsensus,
            DEFAULT_MAX_CONSENSUS_LEN,
        )
    }

    /// The current microdesc consensus, only if signed by more than half of
    /// `authorities` (v3 identity fingerprints).  Fingerprints are shortened
    /// to 3 bytes (6 hex digits) and sorted, as tor does.
    pub fn microdesc_consensus_signed_by(authorities: &[[u8; 20]]) -> Result<Self, DirClientError> {
        if authorities.is_empty() || authorities.len() > MAX_FINGERPRINTS_PER_REQUEST {
            return Err(DirClientError::BadRequest(format!(
                "{} authority fingerprints (need 1..={MAX_FINGERPRINTS_PER_REQUEST})",
                authorities.len()
            )));
        }
        let mut short: Vec<String> = authorities
            .iter()
            .map(|fp| hex::encode_upper(&fp[..3]))
            .collect();
        short.sort();
        short.dedup();
        Ok(Self::new(
            format!(
                "/tor/status-vote/current/consensus-microdesc/{}",
                short.join("+")
            ),
            DirRequestKind::MicrodescConsensus,
            DEFAULT_MAX_CONSENSUS_LEN,
        ))
    }

    /// Key certificates of the authorities with these identity fingerprints
    /// (`/tor/keys/fp/<F1>+<F2>`).
    pub fn authority_certs(fingerprints: &[[u8; 20]]) -> Result<Self, DirClientError> {
        if fingerprints.is_empty() || fingerprints.len() > MAX_FINGERPRINTS_PER_REQUEST {
            return Err(DirClientError::BadRequest(format!(
                "{} certificate fingerprints (need 1..={MAX_FINGERPRINTS_PER_REQUEST})",
                fingerprints.len()
            )));
        }
        let fps: Vec<String> = fingerprints.iter().map(hex::encode_upper).collect();
        Ok(Self::new(
            format!("/tor/keys/fp/{}", fps.join("+")),
            DirRequestKind::AuthorityCerts,
            DEFAULT_MAX_CERTS_LEN,
        ))
    }

    /// All current key certificates the server knows (`/tor/keys/all`).
    pub fn all_authority_certs() -> Self {
        Self::new(
            "/tor/keys/all".to_string(),
            DirRequestKind::AuthorityCerts,
            DEFAULT_MAX_CERTS_LEN,
        )
    }

    /// Microdescriptors with these sha256 digests (1 to 92 of them).
    pub fn microdescs(digests: &[MdDigest]) -> Result<Self, DirClientError> {
        if digests.is_empty() || digests.len() > MAX_MICRODESCS_PER_REQUEST {
            return Err(DirClientError::BadRequest(format!(
                "{} microdescriptor digests (need 1..={MAX_MICRODESCS_PER_REQUEST})",
                digests.len()
            )));
        }
        let mut path = String::with_capacity(13 + digests.len() * 44);
        path.push_str("/tor/micro/d/");
        for (i, d) in digests.iter().enumerate() {
            if i > 0 {
                path.push('-');
            }
            path.push_str(&crate::b64_unpadded(d));
        }
        Ok(Self::new(
            path,
            DirRequestKind::Microdescs(digests.to_vec()),
            DEFAULT_MAX_MICRODESCS_LEN,
        ))
    }

    /// Split any number of digests into requests of at most
    /// [`MAX_MICRODESCS_PER_REQUEST`] digests each (none if `digests` is empty).
    pub fn microdesc_batches(digests: &[MdDigest]) -> Vec<Self> {
        digests
            .chunks(MAX_MICRODESCS_PER_REQUEST)
            .filter_map(|c| Self::microdescs(c).ok())
            .collect()
    }

    /// Override the decoded body limit.
    #[must_use]
    pub fn with_max_body_len(mut self, max_body_len: usize) -> Self {
        self.max_body_len = max_body_len;
        self
    }

    /// Advertise only `deflate` (dir-spec §6.1: anonymous requests over
    /// multi-hop circuits should not advertise more, to avoid fingerprinting).
    #[must_use]
    pub fn deflate_only(mut self) -> Self {
        self.accept_encoding = "deflate";
        self
    }

    /// URL path of the request.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// What this request fetches.
    pub fn kind(&self) -> &DirRequestKind {
        &self.kind
    }

    /// Decoded body limit used by [`DirRequest::response_parser`].
    pub fn max_body_len(&self) -> usize {
        self.max_body_len
    }

    /// The request bytes.  `host` adds a `Host:` header (useful on a DirPort;
    /// tor sends none over `BEGIN_DIR`).
    pub fn encode(&self, host: Option<&str>) -> Vec<u8> {
        let mut s = String::with_capacity(self.path.len() + 96);
        let _ = write!(s, "GET {} HTTP/1.0\r\n", self.path);
        if let Some(h) = host {
            // Never let a caller-supplied host inject header lines.
            let h: String = h.chars().filter(|c| c.is_ascii_graphic()).collect();
            let _ = write!(s, "Host: {h}\r\n");
        }
        let _ = write!(s, "Accept-Encoding: {}\r\n\r\n", self.accept_encoding);
        s.into_bytes()
    }

    /// A response parser with this request's body limit.
    pub fn response_parser(&self) -> ResponseParser {
        ResponseParser::new(self.max_body_len)
    }
}

/// A complete, decoded directory response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirResponse {
    /// HTTP status code (always 200 for responses returned by `finish`).
    pub status: u16,
    /// Header (name, value) pairs in order; names as sent.
    pub headers: Vec<(String, String)>,
    /// The decoded body.
    pub body: Vec<u8>,
}

impl DirResponse {
    /// First header with this name (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The body as UTF-8 text (directory documents are ASCII).
    pub fn body_text(&self) -> Result<&str, DirClientError> {
        std::str::from_utf8(&self.body)
            .map_err(|e| DirClientError::Malformed(format!("body is not UTF-8: {e}")))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Identity,
    Deflate,
    Gzip,
}

#[derive(Debug)]
struct Head {
    status: u16,
    headers: Vec<(String, String)>,
    encoding: Encoding,
    content_length: Option<usize>,
}

#[derive(Debug)]
enum State {
    Header,
    Body(Head),
    Failed,
}

/// Incremental parser for one directory response.
#[derive(Debug)]
pub struct ResponseParser {
    max_body_len: usize,
    buf: Vec<u8>,
    state: State,
}

impl ResponseParser {
    /// A parser whose raw and decoded bodies may not exceed `max_body_len`.
    pub fn new(max_body_len: usize) -> Self {
        ResponseParser {
            max_body_len,
            buf: Vec::new(),
            state: State::Header,
        }
    }

    /// Feed bytes read from the stream.  Fails early on a malformed header,
    /// a non-200 status, an unsupported encoding or an oversized reply.
    pub fn push(&mut self, data: &[u8]) -> Result<(), DirClientError> {
        let r = self.push_inner(data);
        if r.is_err() {
            self.state = State::Failed;
            self.buf = Vec::new();
        }
        r
    }

    fn push_inner(&mut self, data: &[u8]) -> Result<(), DirClientError> {
        match &self.state {
            State::Failed => return Err(DirClientError::Finished),
            State::Header => {
                // Bound the buffer while we still look for the header end.
                let room = MAX_HEADER_LEN.saturating_add(self.max_body_len.saturating_add(1));
                let take = data.len().min(room.saturating_sub(self.buf.len()));
                self.buf.extend_from_slice(&data[..take]);
                let parsed = onionmix_http::parse_response_head(&self.buf, &HEAD_LIMITS)
                    .map_err(http_error)?;
                if let Some(head) = parsed {
                    let head_len = head.head_len;
                    let head = check_head(head, self.max_body_len)?;
                    let body: Vec<u8> = self.buf[head_len..].to_vec();
                    self.buf = body;
                    self.state = State::Body(head);
                    self.check_body_len()?;
                }
                if take < data.len() {
                    return Err(DirClientError::TooLarge {
                        what: "raw body",
                        limit: self.max_body_len,
                    });
                }
            }
            State::Body(_) => {
                if self.buf.len().saturating_add(data.len()) > self.max_body_len {
                    return Err(DirClientError::TooLarge {
                        what: "raw body",
                        limit: self.max_body_len,
                    });
                }
                self.buf.extend_from_slice(data);
                self.check_body_len()?;
            }
        }
        Ok(())
    }

    fn check_body_len(&self) -> Result<(), DirClientError> {
        if let State::Body(head) = &self.state {
            if self.buf.len() > self.max_body_len {
                return Err(DirClientError::TooLarge {
                    what: "raw body",
                    limit: self.max_body_len,
                });
            }
            if let Some(cl) = head.content_length
                && self.buf.len() > cl
            {
                return Err(DirClientError::Malformed(format!(
                    "more body bytes than Content-Length {cl}"
                )));
            }
        }
        Ok(())
    }

    /// True once the header block was read and, if the server sent a
    /// `Content-Length`, the whole body arrived.  Without `Content-Length`
    /// the body ends only at end of stream.
    pub fn is_complete(&self) -> bool {
        match &self.state {
            State::Body(head) => head.content_length == Some(self.buf.len()),
            _ => false,
        }
    }

    /// HTTP status, once the header block has been parsed.
    pub fn status(&self) -> Option<u16> {
        match &self.state {
            State::Body(h) => Some(h.status),
            _ => None,
        }
    }

    /// The stream ended (or the caller stops reading): check completeness
    /// and decode the body.
    pub fn finish(self) -> Result<DirResponse, DirClientError> {
        let head = match self.state {
            State::Failed => return Err(DirClientError::Finished),
            State::Header => {
                return Err(DirClientError::Truncated(format!(
                    "stream ended inside the header block after {} bytes",
                    self.buf.len()
                )));
            }
            State::Body(h) => h,
        };
        if let Some(cl) = head.content_length
            && self.buf.len() != cl
        {
            return Err(DirClientError::Truncated(format!(
                "got {} of {cl} body bytes",
                self.buf.len()
            )));
        }
        let body = match head.encoding {
            Encoding::Identity => self.buf,
            Encoding::Deflate => inflate_concatenated(&self.buf, self.max_body_len)?,
            Encoding::Gzip => {
                let mut out = Vec::new();
                flate2::read::MultiGzDecoder::new(&self.buf[..])
                    .take(self.max_body_len as u64 + 1)
                    .read_to_end(&mut out)
                    .map_err(|e| DirClientError::Decompress(e.to_string()))?;
                if out.len() > self.max_body_len {
                    return Err(DirClientError::TooLarge {
                        what: "decoded body",
                        limit: self.max_body_len,
                    });
                }
                out
            }
        };
        Ok(DirResponse {
            status: head.status,
            headers: head.headers,
            body,
        })
    }
}

/// Parse a complete response held in memory (stream already at its end).
pub fn parse_response(bytes: &[u8], max_body_len: usize) -> Result<DirResponse, DirClientError> {
    let mut p = ResponseParser::new(max_body_len);
    p.push(bytes)?;
    p.finish()
}

fn sanitize(s: &str) -> String {
    onionmix_http::sanitize(s, 200)
}

/// The shared parser's errors in this codec's terms.
fn http_error(e: onionmix_http::HttpError) -> DirClientError {
    use onionmix_http::HttpError as H;
    match e {
        H::HeadTooLarge { limit } => DirClientError::TooLarge {
            what: "header block",
            limit,
        },
        H::TooManyHeaders { limit } => DirClientError::TooLarge {
            what: "header count",
            limit,
        },
        H::BodyTooLarge { limit, .. } => DirClientError::TooLarge {
            what: "raw body",
            limit,
        },
        other => DirClientError::Malformed(other.to_string()),
    }
}

/// What this codec needs from a parsed head: a 200, a known
/// Content-Encoding, and the body's framing (Content-Length or the end
/// of the stream, as stock tor sends; no chunked transfer coding).
fn check_head(
    head: onionmix_http::ResponseHead,
    max_body_len: usize,
) -> Result<Head, DirClientError> {
    if head.status != 200 {
        return Err(DirClientError::HttpStatus {
            code: head.status,
            reason: head.reason,
        });
    }
    let encoding = match head.header("content-encoding") {
        None => Encoding::Identity,
        Some(v) => match v.to_ascii_lowercase().as_str() {
            "" | "identity" => Encoding::Identity,
            "deflate" => Encoding::Deflate,
            "gzip" | "x-gzip" => Encoding::Gzip,
            other => return Err(DirClientError::UnsupportedEncoding(sanitize(other))),
        },
    };
    let content_length = match head.body_framing(max_body_len, false).map_err(http_error)? {
        onionmix_http::BodyFraming::Length(n) => Some(n),
        onionmix_http::BodyFraming::UntilClose => None,
        onionmix_http::BodyFraming::Chunked => {
            return Err(DirClientError::Malformed(
                "chunked transfer coding (directory servers do not use it)".into(),
            ));
        }
    };
    Ok(Head {
        status: head.status,
        headers: head
            .headers
            .iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect(),
        encoding,
        content_length,
    })
}

/// Inflate one or more concatenated zlib streams ("deflate" in tor's HTTP),
/// stopping at `limit` decoded bytes.
fn inflate_concatenated(input: &[u8], limit: usize) -> Result<Vec<u8>, DirClientError> {
    let mut out: Vec<u8> = Vec::new();
    let mut rest = input;
    while !rest.is_empty() {
        let mut dec = flate2::Decompress::new(true);
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            let before_in = dec.total_in();
            let before_out = dec.total_out();
            let status = dec
                .decompress(
                    &rest[before_in as usize..],
                    &mut chunk,
                    flate2::FlushDecompress::None,
                )
                .map_err(|e| DirClientError::Decompress(e.to_string()))?;
            let produced = (dec.total_out() - before_out) as usize;
            if out.len() + produced > limit {
                return Err(DirClientError::TooLarge {
                    what: "decoded body",
                    limit,
                });
            }
            out.extend_from_slice(&chunk[..produced]);
            match status {
                flate2::Status::StreamEnd => break,
                flate2::Status::Ok | flate2::Status::BufError => {
                    let consumed = dec.total_in() - before_in;
                    if consumed == 0 && produced == 0 {
                        return Err(DirClientError::Truncated(
                            "compressed body ends inside a zlib stream".into(),
                        ));
                    }
                }
            }
        }
        rest = &rest[dec.total_in() as usize..];
        // Tolerate trailing whitespace/NULs after the last stream.
        if rest.iter().all(|b| b.is_ascii_whitespace() || *b == 0) {
            break;
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use std::io::Write as _;

    fn deflate(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn request_encoding() {
        let r = DirRequest::microdesc_consensus();
        assert_eq!(
            r.encode(None),
            b"GET /tor/status-vote/current/consensus-microdesc HTTP/1.0\r\nAccept-Encoding: deflate, identity\r\n\r\n"
        );
        let r = DirRequest::authority_certs(&[[0xAB; 20], [0x01; 20]]).unwrap();
        assert_eq!(
            r.path(),
            format!("/tor/keys/fp/{}+{}", "AB".repeat(20), "01".repeat(20))
        );
        let host = r.encode(Some("127.0.0.1:7000\r\nX: y"));
        assert!(
            String::from_utf8(host)
                .unwrap()
                .contains("Host: 127.0.0.1:7000X:y\r\n")
        );
        let r = DirRequest::microdesc_consensus_signed_by(&[[0xFF; 20], [0x12; 20]]).unwrap();
        assert_eq!(
            r.path(),
            "/tor/status-vote/current/consensus-microdesc/121212+FFFFFF"
        );
    }

    #[test]
    fn microdesc_batching() {
        let digests: Vec<MdDigest> = (0..200u32)
            .map(|i| {
                let mut d = [0u8; 32];
                d[..4].copy_from_slice(&i.to_be_bytes());
                d
            })
            .collect();
        let reqs = DirRequest::microdesc_batches(&digests);
        assert_eq!(reqs.len(), 3);
        let sizes: Vec<usize> = reqs
            .iter()
            .map(|r| match r.kind() {
                DirRequestKind::Microdescs(d) => d.len(),
                _ => 0,
            })
            .collect();
        assert_eq!(sizes, vec![92, 92, 16]);
        assert!(DirRequest::microdescs(&digests[..93]).is_err());
        assert!(DirRequest::microdescs(&[]).is_err());
        let one = DirRequest::microdescs(&digests[..2]).unwrap();
        let parts: Vec<&str> = one.path()["/tor/micro/d/".len()..].split('-').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0].len(), 43);
        assert!(!parts[0].contains('='));
    }

    #[test]
    fn identity_with_content_length_incremental() {
        let body = b"hello directory\n";
        let raw = format!(
            "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nContent-Encoding: identity\r\n\r\n",
            body.len()
        );
        let mut all = raw.into_bytes();
        all.extend_from_slice(body);
        let mut p = ResponseParser::new(1000);
        for b in &all {
            assert!(!p.is_complete());
            p.push(std::slice::from_ref(b)).unwrap();
        }
        assert!(p.is_complete());
        let r = p.finish().unwrap();
        assert_eq!(r.body, body);
        assert_eq!(r.header("content-length"), Some("16"));
    }

    #[test]
    fn deflate_concatenated_streams() {
        let mut body = deflate(b"first\n");
        body.extend(deflate(b"second\n"));
        let mut raw = b"HTTP/1.0 200 OK\r\nContent-Encoding: deflate\r\n\r\n".to_vec();
        raw.extend(&body);
        let r = parse_response(&raw, 1000).unwrap();
        assert_eq!(r.body, b"first\nsecond\n");
    }

    #[test]
    fn errors() {
        let r = parse_response(b"HTTP/1.0 404 Not found\r\n\r\n", 100);
        assert_eq!(
            r,
            Err(DirClientError::HttpStatus {
                code: 404,
                reason: "Not found".into()
            })
        );
        let r = parse_response(b"HTTP/1.0 200 OK\r\nContent-Length: 10\r\n\r\nabc", 100);
        assert!(matches!(r, Err(DirClientError::Truncated(_))));
        let r = parse_response(b"HTTP/1.0 200 OK\r\nContent-Le", 100);
        assert!(matches!(r, Err(DirClientError::Truncated(_))));
        let r = parse_response(b"HTTP/1.0 200 OK\r\n\r\n0123456789abc", 10);
        assert!(matches!(r, Err(DirClientError::TooLarge { .. })));
        let bomb = deflate(&vec![b'a'; 100_000]);
        let mut raw = b"HTTP/1.0 200 OK\r\nContent-Encoding: deflate\r\n\r\n".to_vec();
        raw.extend(&bomb);
        let r = parse_response(&raw, 10_000);
        assert!(matches!(
            r,
            Err(DirClientError::TooLarge {
                what: "decoded body",
                ..
            })
        ));
        let mut trunc = b"HTTP/1.0 200 OK\r\nContent-Encoding: deflate\r\n\r\n".to_vec();
        let full = deflate(&vec![b'x'; 5000]);
        trunc.extend(&full[..full.len() / 2]);
        assert!(parse_response(&trunc, 100_000).is_err());
        let r = parse_response(
            b"HTTP/1.0 200 OK\r\nContent-Encoding: x-zstd\r\n\r\nzz",
            100,
        );
        assert!(matches!(r, Err(DirClientError::UnsupportedEncoding(_))));
        let r = parse_response(b"SMTP 200 OK\r\n\r\n", 100);
        assert!(matches!(r, Err(DirClientError::Malformed(_))));
    }

    #[test]
    fn header_too_large() {
        // A head that never ends within the limit.
        let mut p = ResponseParser::new(10);
        let mut junk = b"HTTP/1.0 200 OK\r\nX: ".to_vec();
        junk.resize(MAX_HEADER_LEN + 100, b'a');
        assert!(matches!(
            p.push(&junk),
            Err(DirClientError::TooLarge { .. })
        ));
        assert_eq!(p.push(b"x"), Err(DirClientError::Finished));
        // Bytes that are not HTTP at all fail at once (the shared parser
        // sees the bad status line without waiting for the head's end).
        let mut p = ResponseParser::new(10);
        let junk = vec![b'a'; MAX_HEADER_LEN + 100];
        assert!(matches!(p.push(&junk), Err(DirClientError::Malformed(_))));
        assert_eq!(p.push(b"x"), Err(DirClientError::Finished));
        // Too many header lines.
        let many: String = (0..=MAX_HEADERS).map(|i| format!("H{i}: v\r\n")).collect();
        let raw = format!("HTTP/1.0 200 OK\r\n{many}\r\n");
        assert!(matches!(
            parse_response(raw.as_bytes(), 10),
            Err(DirClientError::TooLarge {
                what: "header count",
                ..
            })
        ));
    }

    #[test]
    fn content_length_is_strict() {
        for bad in [
            &b"HTTP/1.0 200 OK\r\nContent-Length: -1\r\n\r\n"[..],
            b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            b"HTTP/1.0 200 OK\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        ] {
            assert!(
                matches!(parse_response(bad, 100), Err(DirClientError::Malformed(_))),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        // A declared length above the limit is refused before the body.
        let mut p = ResponseParser::new(100);
        assert!(matches!(
            p.push(b"HTTP/1.0 200 OK\r\nContent-Length: 101\r\n\r\n"),
            Err(DirClientError::TooLarge {
                what: "raw body",
                ..
            })
        ));
        // Repeated equal lengths and bare-LF heads are fine.
        let r = parse_response(
            b"HTTP/1.0 200 OK\nContent-Length: 2\nContent-Length: 2\n\nok",
            100,
        )
        .unwrap();
        assert_eq!(r.body, b"ok");
    }
}
