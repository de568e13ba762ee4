//! The one HTTP/1 head parser of onionmix.
//!
//! Every HTTP/1.0 and HTTP/1.1 message onionmix reads from a peer (directory
//! requests and answers, descriptor uploads, the testbed sink and its
//! clients, the emulator's probe server) goes through this crate. Heads are
//! parsed by [`httparse`]; this crate adds what every caller needs around
//! it, once:
//!
//! - a hard cap on the head size and on the header count ([`Limits`]); an
//!   incomplete head is `Ok(None)` ("read more") until the cap is reached,
//!   then [`HttpError::HeadTooLarge`];
//! - typed access to the method, path, status and headers, with
//!   case-insensitive header lookup ([`Headers`]);
//! - strict `Content-Length` (ASCII digits only, repeated headers must
//!   agree, checked `u64` to `usize` against a caller-given maximum body
//!   size) and `Transfer-Encoding: chunked` ([`BodyFraming`],
//!   [`ChunkedDecoder`]);
//! - typed errors ([`HttpError`]); no input makes it panic.
//!
//! The crate is sans-IO: it works on byte buffers. With the `tokio`
//! feature, [`io`] reads heads and whole requests from an `AsyncRead` with
//! a size cap and a caller-supplied timeout; [`blocking`] does the same over
//! `std::io::Read`. Both call the parsers here and nothing else.

#![forbid(unsafe_code)]

mod chunked;

pub mod blocking;
#[cfg(feature = "tokio")]
pub mod io;

pub use chunked::ChunkedDecoder;

/// Hard cap on a head (request or status line plus headers plus the blank
/// line), in bytes. [`Limits`] can lower it, never raise it.
pub const MAX_HEAD_LEN: usize = 16 * 1024;
/// Hard cap on the number of header fields in one head.
pub const MAX_HEADERS: usize = 64;
/// Longest reason phrase kept (the rest is cut off).
const MAX_REASON_LEN: usize = 200;

/// Size limits for one head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    max_head_len: usize,
    max_headers: usize,
}

impl Limits {
    /// The hard caps: [`MAX_HEAD_LEN`] bytes, [`MAX_HEADERS`] headers.
    pub const DEFAULT: Limits = Limits {
        max_head_len: MAX_HEAD_LEN,
        max_headers: MAX_HEADERS,
    };

    /// Limits no larger than the hard caps (larger values are lowered to
    /// them).
    pub const fn new(max_head_len: usize, max_headers: usize) -> Limits {
        Limits {
            max_head_len: if max_head_len < MAX_HEAD_LEN {
                max_head_len
            } else {
                MAX_HEAD_LEN
            },
            max_headers: if max_headers < MAX_HEADERS {
                max_headers
            } else {
                MAX_HEADERS
            },
        }
    }

    /// Largest head accepted, in bytes.
    pub const fn max_head_len(&self) -> usize {
        self.max_head_len
    }

    /// Most header fields accepted.
    pub const fn max_headers(&self) -> usize {
        self.max_headers
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

/// Why a message was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpError {
    /// The head did not end within the size limit.
    #[error("HTTP head exceeds {limit} bytes")]
    HeadTooLarge {
        /// The limit in force.
        limit: usize,
    },
    /// More header fields than the limit.
    #[error("more than {limit} HTTP header fields")]
    TooManyHeaders {
        /// The limit in force.
        limit: usize,
    },
    /// The head is not valid HTTP/1.x.
    #[error("malformed HTTP head: {0}")]
    Malformed(&'static str),
    /// A header value or the path is not UTF-8.
    #[error("HTTP {0} is not UTF-8")]
    NotUtf8(&'static str),
    /// A `Content-Length` value is not a plain decimal number.
    #[error("bad Content-Length {0:?}")]
    BadContentLength(String),
    /// Several `Content-Length` headers with different values.
    #[error("conflicting Content-Length headers")]
    ConflictingContentLength,
    /// Both `Transfer-Encoding` and `Content-Length` (RFC 9112 §6.3: a
    /// message smuggling risk, refused).
    #[error("both Transfer-Encoding and Content-Length")]
    AmbiguousLength,
    /// A transfer coding other than a single `chunked`.
    #[error("unsupported Transfer-Encoding {0:?}")]
    UnsupportedTransferEncoding(String),
    /// A request body without `Content-Length` (chunked request bodies are
    /// not accepted: HTTP 411).
    #[error("request body without Content-Length")]
    LengthRequired,
    /// The body is larger than the caller's maximum.
    #[error("HTTP body of {len} bytes exceeds {limit}")]
    BodyTooLarge {
        /// Declared or received length (saturated at `u64::MAX`).
        len: u64,
        /// The limit in force.
        limit: usize,
    },
    /// Bad chunked framing.
    #[error("bad chunked body: {0}")]
    BadChunk(&'static str),
    /// The message ended early.
    #[error("HTTP message truncated: {0}")]
    Truncated(String),
}

/// The HTTP version of a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// HTTP/1.0
    Http10,
    /// HTTP/1.1
    Http11,
}

impl Version {
    fn from_minor(minor: Option<u8>) -> Result<Version, HttpError> {
        match minor {
            Some(0) => Ok(Version::Http10),
            Some(1) => Ok(Version::Http11),
            _ => Err(HttpError::Malformed("invalid HTTP version")),
        }
    }

    /// `"HTTP/1.0"` or `"HTTP/1.1"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Version::Http10 => "HTTP/1.0",
            Version::Http11 => "HTTP/1.1",
        }
    }
}

/// One header field: the name as sent, the value with surrounding
/// whitespace removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Name as sent (an HTTP token, so ASCII).
    pub name: String,
    /// Value (UTF-8; leading and trailing spaces and tabs removed).
    pub value: String,
}

/// The header fields of one head, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Headers(Vec<Header>);

/// How the body of a message is delimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFraming {
    /// Exactly this many bytes (`Content-Length`, or 0 for a request
    /// without one and for responses that never have a body).
    Length(usize),
    /// `Transfer-Encoding: chunked`: decode with [`ChunkedDecoder`].
    Chunked,
    /// A response body that runs until the server closes the connection
    /// (what stock tor sends for compressed directory documents). The
    /// caller bounds what it reads.
    UntilClose,
}

fn trim_ows(s: &str) -> &str {
    s.trim_matches([' ', '\t'])
}

/// Printable ASCII and spaces only, at most `max` characters: safe for logs
/// and error messages.
pub fn sanitize(s: &str, max: usize) -> String {
    s.chars()
        .filter(|c| c.is_ascii_graphic() || *c == ' ')
        .take(max)
        .collect()
}

impl Headers {
    fn from_httparse(raw: &[httparse::Header<'_>]) -> Result<Headers, HttpError> {
        let mut out = Vec::with_capacity(raw.len());
        for h in raw {
            let value =
                std::str::from_utf8(h.value).map_err(|_| HttpError::NotUtf8("header value"))?;
            out.push(Header {
                name: h.name.to_string(),
                value: trim_ows(value).to_string(),
            });
        }
        Ok(Headers(out))
    }

    /// The first value of the header `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    }

    /// Every value of the header `name` (case-insensitive), in order.
    pub fn get_all<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.0
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value.as_str())
    }

    /// All fields as (name, value), in order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|h| (h.name.as_str(), h.value.as_str()))
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// No fields at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether a comma-separated header `name` lists `token`
    /// (case-insensitive), e.g. `has_token("connection", "close")`.
    pub fn has_token(&self, name: &str, token: &str) -> bool {
        self.get_all(name)
            .flat_map(|v| v.split(','))
            .any(|t| trim_ows(t).eq_ignore_ascii_case(token))
    }

    /// The `Content-Length`, parsed strictly: ASCII digits only, every
    /// `Content-Length` header with the same value, and no more than
    /// `max_body` (else [`HttpError::BodyTooLarge`]). `None` if absent.
    pub fn content_length(&self, max_body: usize) -> Result<Option<usize>, HttpError> {
        let mut found: Option<u64> = None;
        for v in self.get_all("content-length") {
            if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                return Err(HttpError::BadContentLength(sanitize(v, 40)));
            }
            // Only digits, so the one failure is overflow.
            let n: u64 = v
                .parse()
                .map_err(|_| HttpError::BadContentLength(sanitize(v, 40)))?;
            match found {
                Some(f) if f != n => return Err(HttpError::ConflictingContentLength),
                _ => found = Some(n),
            }
        }
        match found {
            None => Ok(None),
            Some(n) => match usize::try_from(n) {
                Ok(len) if len <= max_body => Ok(Some(len)),
                _ => Err(HttpError::BodyTooLarge {
                    len: n,
                    limit: max_body,
                }),
            },
        }
    }

    /// Whether the body is chunked: `Ok(false)` without
    /// `Transfer-Encoding`, `Ok(true)` for exactly one coding `chunked`,
    /// an error for any other transfer coding.
    pub fn is_chunked(&self) -> Result<bool, HttpError> {
        let mut codings = self
            .get_all("transfer-encoding")
            .flat_map(|v| v.split(','))
            .map(trim_ows);
        match (codings.next(), codings.next()) {
            (None, _) => Ok(false),
            (Some(c), None) if c.eq_ignore_ascii_case("chunked") => Ok(true),
            (Some(c), _) => Err(HttpError::UnsupportedTransferEncoding(sanitize(c, 40))),
        }
    }

    /// The body framing these headers declare; `otherwise` when they
    /// declare none.
    fn framing(&self, max_body: usize, otherwise: BodyFraming) -> Result<BodyFraming, HttpError> {
        let chunked = self.is_chunked()?;
        let length = self.content_length(max_body)?;
        match (chunked, length) {
            (true, Some(_)) => Err(HttpError::AmbiguousLength),
            (true, None) => Ok(BodyFraming::Chunked),
            (false, Some(n)) => Ok(BodyFraming::Length(n)),
            (false, None) => Ok(otherwise),
        }
    }
}

/// A parsed request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestHead {
    /// Method as sent (an HTTP token, e.g. `GET`).
    pub method: String,
    /// Request target as sent (visible ASCII or UTF-8, no spaces).
    pub path: String,
    /// HTTP version.
    pub version: Version,
    /// Header fields.
    pub headers: Headers,
    /// Length of the head in the buffer, blank line included: the body
    /// starts here.
    pub head_len: usize,
}

impl RequestHead {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }

    /// Whether the connection closes after this request: HTTP/1.0 (its
    /// keep-alive extension is not supported) or `Connection: close`.
    pub fn wants_close(&self) -> bool {
        self.version == Version::Http10 || self.headers.has_token("connection", "close")
    }

    /// How the request body is delimited; a request without
    /// `Content-Length` or `Transfer-Encoding` has none (`Length(0)`).
    pub fn body_framing(&self, max_body: usize) -> Result<BodyFraming, HttpError> {
        self.headers.framing(max_body, BodyFraming::Length(0))
    }
}

/// A parsed response head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseHead {
    /// HTTP version.
    pub version: Version,
    /// Status code (three digits).
    pub status: u16,
    /// Reason phrase, printable ASCII only, at most 200 characters.
    pub reason: String,
    /// Header fields.
    pub headers: Headers,
    /// Length of the head in the buffer, blank line included: the body
    /// starts here.
    pub head_len: usize,
}

impl ResponseHead {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name)
    }

    /// How the response body is delimited. Answers to `HEAD` requests
    /// (`head_request`) and 1xx, 204 and 304 answers have no body; a
    /// response that declares no length runs until the connection closes.
    pub fn body_framing(
        &self,
        max_body: usize,
        head_request: bool,
    ) -> Result<BodyFraming, HttpError> {
        if head_request || self.status < 200 || self.status == 204 || self.status == 304 {
            return Ok(BodyFraming::Length(0));
        }
        self.headers.framing(max_body, BodyFraming::UntilClose)
    }
}

fn httparse_error(e: httparse::Error, limits: &Limits) -> HttpError {
    match e {
        httparse::Error::TooManyHeaders => HttpError::TooManyHeaders {
            limit: limits.max_headers,
        },
        httparse::Error::HeaderName => HttpError::Malformed("invalid header name"),
        httparse::Error::HeaderValue => HttpError::Malformed("invalid header value"),
        httparse::Error::NewLine => HttpError::Malformed("invalid line ending"),
        httparse::Error::Status => HttpError::Malformed("invalid status code"),
        httparse::Error::Token => HttpError::Malformed("invalid method, target or token"),
        httparse::Error::Version => HttpError::Malformed("invalid HTTP version"),
    }
}

/// The part of `buf` the parser may look at, and what an incomplete head
/// means for a buffer of this length.
fn window<'a>(buf: &'a [u8], limits: &Limits) -> &'a [u8] {
    &buf[..buf.len().min(limits.max_head_len)]
}

fn partial<T>(buf: &[u8], limits: &Limits) -> Result<Option<T>, HttpError> {
    if buf.len() >= limits.max_head_len {
        Err(HttpError::HeadTooLarge {
            limit: limits.max_head_len,
        })
    } else {
        Ok(None)
    }
}

/// Parse a request head at the start of `buf`. `Ok(None)`: the head is not
/// complete yet (read more); an error once it cannot complete within
/// `limits` or is malformed. Bytes after the head (see
/// [`RequestHead::head_len`]) are not looked at.
pub fn parse_request_head(buf: &[u8], limits: &Limits) -> Result<Option<RequestHead>, HttpError> {
    let mut storage = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut storage[..limits.max_headers]);
    match req.parse(window(buf, limits)) {
        Ok(httparse::Status::Complete(head_len)) => {
            let (Some(method), Some(path)) = (req.method, req.path) else {
                return Err(HttpError::Malformed("incomplete request line"));
            };
            Ok(Some(RequestHead {
                method: method.to_string(),
                path: path.to_string(),
                version: Version::from_minor(req.version)?,
                headers: Headers::from_httparse(req.headers)?,
                head_len,
            }))
        }
        Ok(httparse::Status::Partial) => partial(buf, limits),
        Err(e) => Err(httparse_error(e, limits)),
    }
}

/// Parse a response head at the start of `buf`; like
/// [`parse_request_head`].
pub fn parse_response_head(buf: &[u8], limits: &Limits) -> Result<Option<ResponseHead>, HttpError> {
    let mut storage = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut resp = httparse::Response::new(&mut storage[..limits.max_headers]);
    match resp.parse(window(buf, limits)) {
        Ok(httparse::Status::Complete(head_len)) => {
            let Some(status) = resp.code else {
                return Err(HttpError::Malformed("incomplete status line"));
            };
            Ok(Some(ResponseHead {
                version: Version::from_minor(resp.version)?,
                status,
                reason: sanitize(resp.reason.unwrap_or(""), MAX_REASON_LEN),
                headers: Headers::from_httparse(resp.headers)?,
                head_len,
            }))
        }
        Ok(httparse::Status::Partial) => partial(buf, limits),
        Err(e) => Err(httparse_error(e, limits)),
    }
}

/// A whole request: head and `Content-Length` body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The head.
    pub head: RequestHead,
    /// The body (empty without `Content-Length`).
    pub body: Vec<u8>,
}

impl Request {
    /// Method.
    pub fn method(&self) -> &str {
        &self.head.method
    }

    /// Request target.
    pub fn path(&self) -> &str {
        &self.head.path
    }

    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.head.headers.get(name)
    }

    /// Bytes the request took in the buffer (head and body).
    pub fn wire_len(&self) -> usize {
        self.head.head_len.saturating_add(self.body.len())
    }
}

/// Parse a whole request at the start of `buf`: the head and a body of
/// `Content-Length` bytes (at most `max_body`). `Ok(None)`: more bytes are
/// needed. Chunked request bodies are refused ([`HttpError::LengthRequired`]),
/// as tor's directory server does. Bytes after the request are not looked
/// at.
pub fn parse_request(
    buf: &[u8],
    limits: &Limits,
    max_body: usize,
) -> Result<Option<Request>, HttpError> {
    let Some(head) = parse_request_head(buf, limits)? else {
        return Ok(None);
    };
    let len = match head.body_framing(max_body)? {
        BodyFraming::Length(n) => n,
        BodyFraming::Chunked | BodyFraming::UntilClose => return Err(HttpError::LengthRequired),
    };
    let end = head
        .head_len
        .checked_add(len)
        .ok_or(HttpError::BodyTooLarge {
            len: u64::try_from(len).unwrap_or(u64::MAX),
            limit: max_body,
        })?;
    let Some(body) = buf.get(head.head_len..end) else {
        return Ok(None);
    };
    Ok(Some(Request {
        body: body.to_vec(),
        head,
    }))
}

/// A whole response: head and decoded (de-chunked) body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The head.
    pub head: ResponseHead,
    /// The body, de-chunked (content codings such as `deflate` are left to
    /// the caller).
    pub body: Vec<u8>,
}

/// Parse a whole response from `buf`, which holds everything the server
/// sent before it closed the connection. The body is `Content-Length`
/// bytes (anything after them is ignored), de-chunked, or the rest of the
/// buffer; at most `max_body` bytes. `head_request`: the request was a
/// `HEAD` (no body follows).
pub fn parse_response(
    buf: &[u8],
    limits: &Limits,
    max_body: usize,
    head_request: bool,
) -> Result<Response, HttpError> {
    let Some(head) = parse_response_head(buf, limits)? else {
        return Err(HttpError::Truncated(format!(
            "stream ended inside the response head after {} bytes",
            buf.len()
        )));
    };
    let rest = buf.get(head.head_len..).unwrap_or_default();
    let body = match head.body_framing(max_body, head_request)? {
        BodyFraming::Length(n) => match rest.get(..n) {
            Some(b) => b.to_vec(),
            None => {
                return Err(HttpError::Truncated(format!(
                    "got {} of {n} body bytes",
                    rest.len()
                )));
            }
        },
        BodyFraming::UntilClose => {
            if rest.len() > max_body {
                return Err(HttpError::BodyTooLarge {
                    len: u64::try_from(rest.len()).unwrap_or(u64::MAX),
                    limit: max_body,
                });
            }
            rest.to_vec()
        }
        BodyFraming::Chunked => {
            let mut dec = ChunkedDecoder::new(max_body);
            let mut out = Vec::new();
            dec.push(rest, &mut out)?;
            if !dec.is_done() {
                return Err(HttpError::Truncated(
                    "stream ended inside a chunked body".into(),
                ));
            }
            out
        }
    };
    Ok(Response { head, body })
}

/// Errors reading a message from a stream ([`io`], [`blocking`]).
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The bytes are not an acceptable HTTP message.
    #[error(transparent)]
    Http(#[from] HttpError),
    /// Reading failed.
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
    /// The caller's timeout expired first.
    #[error("timed out reading the HTTP message")]
    TimedOut,
    /// The peer closed the connection before the message was complete.
    #[error("connection closed after {0} bytes of an incomplete HTTP message")]
    Closed(usize),
}

/// Bytes read from the stream per call by the read helpers; a buffer grows
/// at most this much past what the parser accepts.
pub(crate) const READ_CHUNK: usize = 8 * 1024;

#[cfg(test)]
mod tests;
