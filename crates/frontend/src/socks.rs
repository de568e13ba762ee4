//! SOCKS server side (SOCKS5, SOCKS4 and SOCKS4a, with tor's RESOLVE and
//! RESOLVE_PTR extensions), sans-IO.
//!
//! Feed the bytes a SOCKS client sends into [`SocksHandshake::handle`]; it
//! returns bytes to write back, and eventually a [`SocksRequest`]. The
//! driver then opens the stream and writes [`SocksRequest::reply`] with the
//! outcome (in the client's SOCKS version).
//!
//! A client may pipeline: a SOCKS5 client that offers a single method
//! knows which one the server must pick, so it can send its greeting, its
//! username/password (when that is the method offered), its request and
//! the first application bytes without waiting for any reply (what tor's
//! parser accepts, and what proposal 181 suggests for optimistic data).
//! [`SocksHandshake::handle`] consumes every complete message in its input
//! and stops at the end of the request; bytes past [`Step::consumed`] then
//! belong to the application stream.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use onionmix_cell::relay::{TargetHost, end_reason, validate_hostname};

/// SOCKS5 reply codes (RFC 1928 §6).
pub mod reply_code {
    /// Succeeded.
    pub const SUCCEEDED: u8 = 0x00;
    /// General SOCKS server failure.
    pub const GENERAL_FAILURE: u8 = 0x01;
    /// Connection not allowed by ruleset.
    pub const NOT_ALLOWED: u8 = 0x02;
    /// Network unreachable.
    pub const NET_UNREACHABLE: u8 = 0x03;
    /// Host unreachable.
    pub const HOST_UNREACHABLE: u8 = 0x04;
    /// Connection refused.
    pub const CONNECTION_REFUSED: u8 = 0x05;
    /// TTL expired (Tor uses it for timeouts).
    pub const TTL_EXPIRED: u8 = 0x06;
    /// Command not supported.
    pub const COMMAND_NOT_SUPPORTED: u8 = 0x07;
    /// Address type not supported.
    pub const ADDRTYPE_NOT_SUPPORTED: u8 = 0x08;
    /// Tor's extended errors for onion services (prop 304,
    /// socks-extensions.txt), sent only on ports with `ExtendedErrors`.
    /// Onion service descriptor not found.
    pub const ONION_DESC_NOT_FOUND: u8 = 0xF0;
    /// Onion service descriptor invalid.
    pub const ONION_DESC_INVALID: u8 = 0xF1;
    /// Onion service introduction failed.
    pub const ONION_INTRO_FAILED: u8 = 0xF2;
    /// Onion service rendezvous failed.
    pub const ONION_REND_FAILED: u8 = 0xF3;
    /// Onion service client authorization missing.
    pub const ONION_MISSING_CLIENT_AUTH: u8 = 0xF4;
    /// Onion service client authorization wrong.
    pub const ONION_WRONG_CLIENT_AUTH: u8 = 0xF5;
    /// Invalid onion service address.
    pub const ONION_BAD_ADDRESS: u8 = 0xF6;
    /// Onion service introduction timed out.
    pub const ONION_INTRO_TIMEDOUT: u8 = 0xF7;
}

/// SOCKS4 reply codes.
pub mod socks4_code {
    /// Request granted.
    pub const GRANTED: u8 = 90;
    /// Request rejected or failed.
    pub const REJECTED: u8 = 91;
}

/// The SOCKS version a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocksVersion {
    /// SOCKS4 or SOCKS4a.
    V4,
    /// SOCKS5.
    V5,
}

/// Map a relay END reason to the SOCKS5 reply a stock tor client would give.
pub fn end_reason_to_reply(reason: u8) -> u8 {
    use reply_code::*;
    match reason {
        end_reason::RESOLVEFAILED | end_reason::NOROUTE => HOST_UNREACHABLE,
        end_reason::CONNECTREFUSED | end_reason::CONNRESET => CONNECTION_REFUSED,
        end_reason::EXITPOLICY => NOT_ALLOWED,
        end_reason::TIMEOUT => TTL_EXPIRED,
        _ => GENERAL_FAILURE,
    }
}

/// SOCKS commands we accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocksCmd {
    /// CONNECT (0x01).
    Connect,
    /// Tor's RESOLVE (0xF0).
    Resolve,
    /// Tor's RESOLVE_PTR (0xF1).
    ResolvePtr,
    /// UDP ASSOCIATE (0x03, SOCKS5 only): the address and port are where
    /// the client will send its datagrams from (zero: not known yet);
    /// datagrams then carry [`crate::socks_udp`] headers.
    UdpAssociate,
}

/// A complete SOCKS request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SocksRequest {
    /// What to do.
    pub cmd: SocksCmd,
    /// Target host.
    pub host: TargetHost,
    /// Target port.
    pub port: u16,
    /// Username/password given (used for stream isolation). For SOCKS4
    /// the user id, with an empty password, when one was given.
    pub auth: Option<(Vec<u8>, Vec<u8>)>,
    /// The client's SOCKS version (replies are encoded in it).
    pub version: SocksVersion,
}

impl SocksRequest {
    /// The reply to this request, in the client's SOCKS version. `code` is a
    /// SOCKS5 code from [`reply_code`]; SOCKS4 clients get "granted" for
    /// success and "rejected" for anything else.
    pub fn reply(&self, code: u8, bound: Option<(IpAddr, u16)>) -> Vec<u8> {
        reply_for(self.version, code, bound)
    }
}

/// A reply in `version`'s encoding (see [`SocksRequest::reply`]).
pub fn reply_for(version: SocksVersion, code: u8, bound: Option<(IpAddr, u16)>) -> Vec<u8> {
    match version {
        SocksVersion::V5 => reply(code, bound),
        SocksVersion::V4 => {
            let cd = if code == reply_code::SUCCEEDED {
                socks4_code::GRANTED
            } else {
                socks4_code::REJECTED
            };
            let (ip, port) = match bound {
                Some((IpAddr::V4(a), p)) => (a.octets(), p),
                _ => ([0; 4], 0),
            };
            let mut out = vec![0, cd];
            out.extend_from_slice(&port.to_be_bytes());
            out.extend_from_slice(&ip);
            out
        }
    }
}

/// What a SOCKS port answers to an HTTP request (a browser configured
/// to use it as an HTTP proxy): an HTTP error, with tor's status line, so
/// that the user sees what is wrong instead of an empty reply.
pub const NOT_AN_HTTP_PROXY_REPLY: &[u8] = b"HTTP/1.0 501 Tor is not an HTTP Proxy\r\n\
Content-Type: text/html; charset=utf-8\r\n\
Connection: close\r\n\
\r\n\
<html><head><title>This is a SOCKS proxy, not an HTTP proxy</title></head>\n\
<body><h1>This is a SOCKS proxy, not an HTTP proxy</h1>\n\
<p>This port speaks SOCKS4a and SOCKS5. Configure your application to use\n\
it as a SOCKS proxy (for curl: <code>--proxy socks5h://host:port</code>),\n\
with host names resolved by the proxy.</p></body></html>\n";

/// The username prefix of proposal 351 (`<torS0X>`): a username that
/// starts with it selects an extended SOCKS behaviour; only `<torS0X>0`
/// (legacy isolation by username and password) is known, and any other
/// is refused, as tor 0.4.9 refuses it.
pub const TOR_SOCKS_EXT_PREFIX: &[u8] = b"<torS0X>";

/// Why a SOCKS handshake failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum SocksError {
    /// Not SOCKS4 or SOCKS5.
    #[error("unsupported SOCKS version {0}")]
    Version(u8),
    /// An HTTP request sent to the SOCKS port (first byte `G`, `H`, `P` or
    /// `C`): answered with [`NOT_AN_HTTP_PROXY_REPLY`].
    #[error("an HTTP request on a SOCKS port")]
    HttpRequest,
    /// A proposal 351 username (`<torS0X>...`) of a kind we do not know.
    #[error("unsupported extended SOCKS username format")]
    ExtendedUsername,
    /// No acceptable authentication method offered.
    #[error("no acceptable authentication method")]
    NoMethod,
    /// Malformed message.
    #[error("malformed SOCKS message: {0}")]
    Malformed(&'static str),
    /// Unsupported command.
    #[error("unsupported SOCKS command {0:#x}")]
    Command(u8),
    /// Unsupported address type.
    #[error("unsupported address type {0:#x}")]
    AddrType(u8),
    /// Bad hostname.
    #[error("bad hostname: {0}")]
    Hostname(String),
}

impl SocksError {
    /// The SOCKS reply to send for this error, if a reply is possible.
    pub fn reply_code(&self) -> Option<u8> {
        match self {
            SocksError::Version(_)
            | SocksError::NoMethod
            | SocksError::HttpRequest
            | SocksError::ExtendedUsername => None,
            SocksError::Command(_) => Some(reply_code::COMMAND_NOT_SUPPORTED),
            SocksError::AddrType(_) => Some(reply_code::ADDRTYPE_NOT_SUPPORTED),
            SocksError::Malformed(_) | SocksError::Hostname(_) => Some(reply_code::GENERAL_FAILURE),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Greeting,
    Request4,
    UserPass,
    Request,
    Done,
}

/// Result of feeding bytes to the handshake.
#[derive(Debug, Default)]
pub struct Step {
    /// How many input bytes were consumed.
    pub consumed: usize,
    /// Bytes to write back to the client.
    pub reply: Vec<u8>,
    /// The request, once complete.
    pub request: Option<SocksRequest>,
}

/// Longest SOCKS4 user id or SOCKS4a hostname accepted (tor's limit on
/// SOCKS addresses is 256 bytes with the terminating NUL).
pub const MAX_SOCKS4_FIELD: usize = 255;

/// Largest message the handshake accepts: a SOCKS4a request with a user id
/// and a hostname of the maximum length (longer than any SOCKS5 message).
pub const MAX_MSG: usize = 8 + 2 * (MAX_SOCKS4_FIELD + 1);

/// Server side of the SOCKS5 negotiation.
#[derive(Debug)]
pub struct SocksHandshake {
    state: State,
    auth: Option<(Vec<u8>, Vec<u8>)>,
    version: Option<SocksVersion>,
    /// Replies to the messages that came before a failed one in the same
    /// input (a pipelining client): still owed to the client.
    unsent: Vec<u8>,
}

impl Default for SocksHandshake {
    fn default() -> Self {
        Self::new()
    }
}

impl SocksHandshake {
    /// A new handshake.
    pub fn new() -> Self {
        SocksHandshake {
            state: State::Greeting,
            auth: None,
            version: None,
            unsent: Vec::new(),
        }
    }

    /// The client's SOCKS version, once its first byte has been seen.
    pub fn version(&self) -> Option<SocksVersion> {
        self.version
    }

    /// What to send for a failed handshake: the replies owed to the
    /// messages before the failed one, then the failure in the client's
    /// version where a reply is possible; None if there is nothing to send.
    pub fn error_reply(&self, e: &SocksError) -> Option<Vec<u8>> {
        let mut out = self.unsent.clone();
        if let Some(r) = self.failure_reply(e) {
            out.extend_from_slice(&r);
        }
        (!out.is_empty()).then_some(out)
    }

    fn failure_reply(&self, e: &SocksError) -> Option<Vec<u8>> {
        match (self.version, e) {
            (_, SocksError::HttpRequest) => Some(NOT_AN_HTTP_PROXY_REPLY.to_vec()),
            (Some(SocksVersion::V5), SocksError::NoMethod) => Some(vec![5, 0xFF]),
            // A SOCKS5 request whose version byte is wrong still gets a
            // SOCKS5 failure, as from tor.
            (Some(SocksVersion::V5), SocksError::Version(_)) if self.state == State::Request => {
                Some(reply(reply_code::GENERAL_FAILURE, None))
            }
            (Some(v), _) => e.reply_code().map(|c| reply_for(v, c, None)),
            (None, _) => None,
        }
    }

    /// Whether the request has been read.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Consume as much of `input` as forms complete messages.
    pub fn handle(&mut self, input: &[u8]) -> Result<Step, SocksError> {
        let mut step = Step::default();
        loop {
            let rest = &input[step.consumed..];
            let used = match self.state {
                State::Greeting => self.greeting(rest, &mut step),
                State::Request4 => self.request4(rest, &mut step),
                State::UserPass => self.userpass(rest, &mut step),
                State::Request => self.request(rest, &mut step),
                State::Done => Ok(None),
            };
            let used = match used {
                Ok(u) => u,
                Err(e) => {
                    self.unsent = std::mem::take(&mut step.reply);
                    return Err(e);
                }
            };
            match used {
                Some(n) => step.consumed += n,
                None => return Ok(step),
            }
        }
    }

    fn greeting(&mut self, b: &[u8], step: &mut Step) -> Result<Option<usize>, SocksError> {
        if b.is_empty() {
            return Ok(None);
        }
        match b[0] {
            4 => {
                self.version = Some(SocksVersion::V4);
                self.state = State::Request4;
                return Ok(Some(0));
            }
            5 => self.version = Some(SocksVersion::V5),
            b'G' | b'H' | b'P' | b'C' => return Err(SocksError::HttpRequest),
            v => return Err(SocksError::Version(v)),
        }
        if b.len() < 2 {
            return Ok(None);
        }
        let n = b[1] as usize;
        if n == 0 {
            return Err(SocksError::Malformed("no methods"));
        }
        if b.len() < 2 + n {
            return Ok(None);
        }
        let methods = &b[2..2 + n];
        if methods.contains(&2) {
            step.reply.extend_from_slice(&[5, 2]);
            self.state = State::UserPass;
        } else if methods.contains(&0) {
            step.reply.extend_from_slice(&[5, 0]);
            self.state = State::Request;
        } else {
            // [`Self::error_reply`] gives the "no acceptable method" reply.
            return Err(SocksError::NoMethod);
        }
        Ok(Some(2 + n))
    }

    fn userpass(&mut self, b: &[u8], step: &mut Step) -> Result<Option<usize>, SocksError> {
        if b.len() < 2 {
            return Ok(None);
        }
        if b[0] != 1 {
            return Err(SocksError::Malformed("username/password version"));
        }
        let ulen = b[1] as usize;
        if b.len() < 2 + ulen + 1 {
            return Ok(None);
        }
        let plen = b[2 + ulen] as usize;
        let total = 3 + ulen + plen;
        if b.len() < total {
            return Ok(None);
        }
        let user = b[2..2 + ulen].to_vec();
        let pass = b[3 + ulen..total].to_vec();
        if user.starts_with(TOR_SOCKS_EXT_PREFIX) && user != b"<torS0X>0" {
            return Err(SocksError::ExtendedUsername);
        }
        self.auth = Some((user, pass));
        step.reply.extend_from_slice(&[1, 0]);
        self.state = State::Request;
        Ok(Some(total))
    }

    fn request(&mut self, b: &[u8], step: &mut Step) -> Result<Option<usize>, SocksError> {
        // A username/password message after "no authentication" was
        // chosen (socks-extensions §1.1: tor takes it, for isolation).
        if b.first() == Some(&1) && self.auth.is_none() {
            return self.userpass(b, step);
        }
        if b.len() < 5 {
            return Ok(None);
        }
        if b[0] != 5 {
            return Err(SocksError::Version(b[0]));
        }
        let cmd = match b[1] {
            1 => SocksCmd::Connect,
            3 => SocksCmd::UdpAssociate,
            0xF0 => SocksCmd::Resolve,
            0xF1 => SocksCmd::ResolvePtr,
            c => return Err(SocksError::Command(c)),
        };
        let (host, addr_end) = match b[3] {
            1 => {
                if b.len() < 4 + 4 + 2 {
                    return Ok(None);
                }
                (
                    TargetHost::Ip(IpAddr::V4(Ipv4Addr::new(b[4], b[5], b[6], b[7]))),
                    8,
                )
            }
            4 => {
                if b.len() < 4 + 16 + 2 {
                    return Ok(None);
                }
                let mut a = [0u8; 16];
                a.copy_from_slice(&b[4..20]);
                (TargetHost::Ip(IpAddr::V6(Ipv6Addr::from(a))), 20)
            }
            3 => {
                let n = b[4] as usize;
                if b.len() < 5 + n + 2 {
                    return Ok(None);
                }
                let name = std::str::from_utf8(&b[5..5 + n])
                    .map_err(|_| SocksError::Hostname("not UTF-8".into()))?;
                (parse_name(name)?, 5 + n)
            }
            t => return Err(SocksError::AddrType(t)),
        };
        let port = u16::from_be_bytes([b[addr_end], b[addr_end + 1]]);
        if cmd == SocksCmd::Connect && port == 0 {
            return Err(SocksError::Malformed("port 0"));
        }
        if cmd == SocksCmd::ResolvePtr && !matches!(host, TargetHost::Ip(_)) {
            // tor: "address type not supported" for a name.
            return Err(SocksError::AddrType(3));
        }
        step.request = Some(SocksRequest {
            cmd,
            host,
            port,
            auth: self.auth.take(),
            version: SocksVersion::V5,
        });
        self.state = State::Done;
        Ok(Some(addr_end + 2))
    }

    /// SOCKS4: VN=4 CD DSTPORT DSTIP USERID NUL; SOCKS4a: DSTIP 0.0.0.x
    /// (x != 0) followed by HOSTNAME NUL.
    fn request4(&mut self, b: &[u8], step: &mut Step) -> Result<Option<usize>, SocksError> {
        if b.len() < 8 {
            return Ok(None);
        }
        // SOCKS4 has no RESOLVE_PTR in tor (its reply has no room for a
        // name).
        let cmd = match b[1] {
            1 => SocksCmd::Connect,
            0xF0 => SocksCmd::Resolve,
            c => return Err(SocksError::Command(c)),
        };
        let port = u16::from_be_bytes([b[2], b[3]]);
        let ip = Ipv4Addr::new(b[4], b[5], b[6], b[7]);
        let Some((user, after_user)) = nul_field(&b[8..])? else {
            return Ok(None);
        };
        let o = ip.octets();
        let is_4a = o[0] == 0 && o[1] == 0 && o[2] == 0 && o[3] != 0;
        let (host, used) = if is_4a {
            let Some((name, after_name)) = nul_field(&b[8 + after_user..])? else {
                return Ok(None);
            };
            let name =
                std::str::from_utf8(name).map_err(|_| SocksError::Hostname("not UTF-8".into()))?;
            (parse_name(name)?, 8 + after_user + after_name)
        } else {
            (TargetHost::Ip(IpAddr::V4(ip)), 8 + after_user)
        };
        if cmd == SocksCmd::Connect && port == 0 {
            return Err(SocksError::Malformed("port 0"));
        }
        if host == TargetHost::Ip(IpAddr::V4(Ipv4Addr::UNSPECIFIED)) {
            return Err(SocksError::Malformed("destination 0.0.0.0"));
        }
        step.request = Some(SocksRequest {
            cmd,
            host,
            port,
            auth: (!user.is_empty()).then(|| (user.to_vec(), Vec::new())),
            version: SocksVersion::V4,
        });
        self.state = State::Done;
        Ok(Some(used))
    }
}

/// A NUL-terminated field of at most [`MAX_SOCKS4_FIELD`] bytes: the field
/// and the bytes used (with the NUL), or None if the NUL has not arrived.
fn nul_field(b: &[u8]) -> Result<Option<(&[u8], usize)>, SocksError> {
    match b.iter().take(MAX_SOCKS4_FIELD + 1).position(|c| *c == 0) {
        Some(i) => Ok(Some((&b[..i], i + 1))),
        None if b.len() > MAX_SOCKS4_FIELD => Err(SocksError::Malformed("SOCKS4 field too long")),
        None => Ok(None),
    }
}

/// A hostname from the client: a literal address is treated as one.
fn parse_name(name: &str) -> Result<TargetHost, SocksError> {
    if let Ok(ip) = name.parse::<IpAddr>() {
        return Ok(TargetHost::Ip(ip));
    }
    validate_hostname(name).map_err(|e| SocksError::Hostname(e.to_string()))?;
    Ok(TargetHost::Hostname(name.to_ascii_lowercase()))
}

/// Encode a SOCKS5 reply with a bound address (use `None` for 0.0.0.0:0).
pub fn reply(code: u8, bound: Option<(IpAddr, u16)>) -> Vec<u8> {
    let mut out = vec![5, code, 0];
    match bound {
        Some((IpAddr::V4(a), p)) => {
            out.push(1);
            out.extend_from_slice(&a.octets());
            out.extend_from_slice(&p.to_be_bytes());
        }
        Some((IpAddr::V6(a), p)) => {
            out.push(4);
            out.extend_from_slice(&a.octets());
            out.extend_from_slice(&p.to_be_bytes());
        }
        None => out.extend_from_slice(&[1, 0, 0, 0, 0, 0, 0]),
    }
    out
}

/// Encode a successful RESOLVE_PTR reply carrying a hostname.
pub fn reply_hostname(name: &str) -> Vec<u8> {
    let n = name.len().min(255);
    let mut out = vec![5, 0, 0, 3, n as u8];
    out.extend_from_slice(&name.as_bytes()[..n]);
    out.extend_from_slice(&[0, 0]);
    out
}

/// The reverse-lookup name for an address (in-addr.arpa / ip6.arpa).
pub fn ptr_name(ip: IpAddr) -> String {
    match ip {
        IpAddr::V4(a) => {
            let o = a.octets();
            format!("{}.{}.{}.{}.in-addr.arpa", o[3], o[2], o[1], o[0])
        }
        IpAddr::V6(a) => {
            let mut s = String::new();
            for b in a.octets().iter().rev() {
                s.push_str(&format!("{:x}.{:x}.", b & 0xf, b >> 4));
            }
            s.push_str("ip6.arpa");
            s
        }
    }
}

#[cfg(test)]
mod tests;
