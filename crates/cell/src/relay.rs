//! Relay cells (tor-spec §6.1, the tor1 "format v0" layout) and the relay
//! messages a client, relay or exit needs.
//!
//! A relay cell body is 509 bytes: Command(1) Recognized(2) StreamID(2)
//! Digest(4) Length(2) Data(Length) Padding. DATA is handled on the hot
//! path through [`header`] and [`data`] without building a message.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::chan::Created2;
use crate::{CellBody, CellError, PAYLOAD_LEN, RELAY_DATA_LEN, Reader};

pub mod conflux;
mod extend;
pub use extend::{Extend2, LSTYPE_ONIONMIX_QUIC, LinkSpec};
mod flow;
pub use conflux::{ConfluxLink, Nonce};
mod resolved;
pub mod udp;
pub use flow::{Sendme, Xon, encode_xoff, parse_xoff};
pub use resolved::{ResolvedAnswer, encode_resolved, parse_resolved};
pub use udp::{ConnectUdp, ConnectedUdp};

/// Offset of the Data field in a relay cell body.
pub const DATA_OFFSET: usize = 11;

/// A relay command.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct RelayCmd(pub u8);

impl RelayCmd {
    /// BEGIN.
    pub const BEGIN: RelayCmd = RelayCmd(1);
    /// DATA.
    pub const DATA: RelayCmd = RelayCmd(2);
    /// END.
    pub const END: RelayCmd = RelayCmd(3);
    /// CONNECTED.
    pub const CONNECTED: RelayCmd = RelayCmd(4);
    /// SENDME.
    pub const SENDME: RelayCmd = RelayCmd(5);
    /// EXTEND (TAP, legacy).
    pub const EXTEND: RelayCmd = RelayCmd(6);
    /// EXTENDED (legacy).
    pub const EXTENDED: RelayCmd = RelayCmd(7);
    /// TRUNCATE.
    pub const TRUNCATE: RelayCmd = RelayCmd(8);
    /// TRUNCATED.
    pub const TRUNCATED: RelayCmd = RelayCmd(9);
    /// DROP (long-range padding).
    pub const DROP: RelayCmd = RelayCmd(10);
    /// RESOLVE.
    pub const RESOLVE: RelayCmd = RelayCmd(11);
    /// RESOLVED.
    pub const RESOLVED: RelayCmd = RelayCmd(12);
    /// BEGIN_DIR.
    pub const BEGIN_DIR: RelayCmd = RelayCmd(13);
    /// EXTEND2.
    pub const EXTEND2: RelayCmd = RelayCmd(14);
    /// EXTENDED2.
    pub const EXTENDED2: RelayCmd = RelayCmd(15);
    /// CONFLUX_LINK (proposal 329).
    pub const CONFLUX_LINK: RelayCmd = RelayCmd(19);
    /// CONFLUX_LINKED.
    pub const CONFLUX_LINKED: RelayCmd = RelayCmd(20);
    /// CONFLUX_LINKED_ACK.
    pub const CONFLUX_LINKED_ACK: RelayCmd = RelayCmd(21);
    /// CONFLUX_SWITCH.
    pub const CONFLUX_SWITCH: RelayCmd = RelayCmd(22);
    /// CONNECT_UDP (proposal 339; tor-spec reserves 16-18 for UDP).
    pub const CONNECT_UDP: RelayCmd = RelayCmd(16);
    /// CONNECTED_UDP (proposal 339).
    pub const CONNECTED_UDP: RelayCmd = RelayCmd(17);
    /// DATAGRAM (proposal 339): one UDP datagram.
    pub const DATAGRAM: RelayCmd = RelayCmd(18);
    /// XOFF (prop 324; tor's `RELAY_COMMAND_XOFF` is 43).
    pub const XOFF: RelayCmd = RelayCmd(43);
    /// XON (prop 324; `RELAY_COMMAND_XON` is 44).
    pub const XON: RelayCmd = RelayCmd(44);

    /// Name for logs.
    pub fn name(self) -> &'static str {
        match self.0 {
            1 => "BEGIN",
            2 => "DATA",
            3 => "END",
            4 => "CONNECTED",
            5 => "SENDME",
            6 => "EXTEND",
            7 => "EXTENDED",
            8 => "TRUNCATE",
            9 => "TRUNCATED",
            10 => "DROP",
            11 => "RESOLVE",
            12 => "RESOLVED",
            13 => "BEGIN_DIR",
            14 => "EXTEND2",
            15 => "EXTENDED2",
            19 => "CONFLUX_LINK",
            20 => "CONFLUX_LINKED",
            21 => "CONFLUX_LINKED_ACK",
            22 => "CONFLUX_SWITCH",
            16 => "CONNECT_UDP",
            17 => "CONNECTED_UDP",
            18 => "DATAGRAM",
            32 => "ESTABLISH_INTRO",
            33 => "ESTABLISH_RENDEZVOUS",
            34 => "INTRODUCE1",
            35 => "INTRODUCE2",
            36 => "RENDEZVOUS1",
            37 => "RENDEZVOUS2",
            38 => "INTRO_ESTABLISHED",
            39 => "RENDEZVOUS_ESTABLISHED",
            40 => "INTRODUCE_ACK",
            43 => "XOFF",
            44 => "XON",
            _ => "UNKNOWN",
        }
    }
    /// Whether this command counts against circuit flow-control windows
    /// (DATA also against stream windows; DATAGRAM only against the
    /// circuit's, as proposal 339 asks).
    pub fn counts_for_flow_control(self) -> bool {
        self == RelayCmd::DATA || self == RelayCmd::DATAGRAM
    }
}

impl std::fmt::Debug for RelayCmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

/// The unencrypted relay header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RelayHeader {
    /// Relay command.
    pub cmd: RelayCmd,
    /// Recognized field (0 when the cell is for us).
    pub recognized: u16,
    /// Stream ID (0 for circuit-level messages).
    pub stream_id: u16,
    /// First 4 bytes of the running digest.
    pub digest: [u8; 4],
    /// Length of the data field.
    pub length: u16,
}

/// Read the relay header of a decrypted cell body.
pub fn header(body: &CellBody) -> RelayHeader {
    RelayHeader {
        cmd: RelayCmd(body[0]),
        recognized: u16::from_be_bytes([body[1], body[2]]),
        stream_id: u16::from_be_bytes([body[3], body[4]]),
        digest: [body[5], body[6], body[7], body[8]],
        length: u16::from_be_bytes([body[9], body[10]]),
    }
}

/// The data field of a decrypted cell body, with its length checked.
pub fn data(body: &CellBody) -> Result<&[u8], CellError> {
    let len = u16::from_be_bytes([body[9], body[10]]) as usize;
    if len > RELAY_DATA_LEN {
        return Err(CellError::invalid(
            "relay length",
            format!("{len} > {RELAY_DATA_LEN}"),
        ));
    }
    Ok(&body[DATA_OFFSET..DATA_OFFSET + len])
}

/// Write an unencrypted relay cell: header with Recognized=0 and Digest=0,
/// then `data`, then padding (four zero bytes and then whatever `pad`
/// writes into the rest; pass a random filler per tor-spec §6.1).
pub fn write(
    body: &mut CellBody,
    cmd: RelayCmd,
    stream_id: u16,
    data: &[u8],
    pad: impl FnOnce(&mut [u8]),
) -> Result<(), CellError> {
    if data.len() > RELAY_DATA_LEN {
        return Err(CellError::DoesNotFit(cmd.name()));
    }
    body[0] = cmd.0;
    body[1..3].copy_from_slice(&[0, 0]);
    body[3..5].copy_from_slice(&stream_id.to_be_bytes());
    body[5..9].copy_from_slice(&[0; 4]);
    body[9..11].copy_from_slice(&(data.len() as u16).to_be_bytes());
    let end = DATA_OFFSET + data.len();
    body[DATA_OFFSET..end].copy_from_slice(data);
    let zero_end = (end + 4).min(PAYLOAD_LEN);
    body[end..zero_end].fill(0);
    pad(&mut body[zero_end..]);
    Ok(())
}

/// END reasons (tor-spec §6.3).
pub mod end_reason {
    /// Catch-all.
    pub const MISC: u8 = 1;
    /// Couldn't look up hostname.
    pub const RESOLVEFAILED: u8 = 2;
    /// Remote host refused connection.
    pub const CONNECTREFUSED: u8 = 3;
    /// Exit policy refuses.
    pub const EXITPOLICY: u8 = 4;
    /// Circuit is being destroyed.
    pub const DESTROY: u8 = 5;
    /// Connection closed normally.
    pub const DONE: u8 = 6;
    /// Connection timed out.
    pub const TIMEOUT: u8 = 7;
    /// Routing error.
    pub const NOROUTE: u8 = 8;
    /// Hibernating.
    pub const HIBERNATING: u8 = 9;
    /// Internal error.
    pub const INTERNAL: u8 = 10;
    /// Out of resources.
    pub const RESOURCELIMIT: u8 = 11;
    /// Connection reset.
    pub const CONNRESET: u8 = 12;
    /// Protocol violation.
    pub const TORPROTOCOL: u8 = 13;
    /// BEGIN_DIR to a non-directory.
    pub const NOTDIRECTORY: u8 = 14;

    /// Name for logs.
    pub fn name(r: u8) -> &'static str {
        match r {
            1 => "MISC",
            2 => "RESOLVEFAILED",
            3 => "CONNECTREFUSED",
            4 => "EXITPOLICY",
            5 => "DESTROY",
            6 => "DONE",
            7 => "TIMEOUT",
            8 => "NOROUTE",
            9 => "HIBERNATING",
            10 => "INTERNAL",
            11 => "RESOURCELIMIT",
            12 => "CONNRESET",
            13 => "TORPROTOCOL",
            14 => "NOTDIRECTORY",
            _ => "UNKNOWN",
        }
    }
}

/// Where a BEGIN asks the exit to connect.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum TargetHost {
    /// A DNS name (resolved by the exit).
    Hostname(String),
    /// A literal address.
    Ip(IpAddr),
}

impl std::fmt::Display for TargetHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TargetHost::Hostname(h) => f.write_str(h),
            TargetHost::Ip(IpAddr::V4(a)) => write!(f, "{a}"),
            TargetHost::Ip(IpAddr::V6(a)) => write!(f, "[{a}]"),
        }
    }
}

/// Longest hostname accepted in BEGIN/RESOLVE (DNS limit).
pub const MAX_HOSTNAME_LEN: usize = 255;

/// Check a hostname the way an exit would before resolving it.
pub fn validate_hostname(h: &str) -> Result<(), CellError> {
    if h.is_empty() || h.len() > MAX_HOSTNAME_LEN {
        return Err(CellError::invalid("hostname", "empty or longer than 255"));
    }
    if !h
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
    {
        return Err(CellError::invalid("hostname", "illegal character"));
    }
    Ok(())
}

/// BEGIN flags (tor-spec §6.2).
pub mod begin_flags {
    /// IPv6 okay.
    pub const IPV6_OK: u32 = 1;
    /// IPv4 not okay.
    pub const IPV4_NOT_OK: u32 = 2;
    /// IPv6 preferred.
    pub const IPV6_PREFERRED: u32 = 4;
}

/// A BEGIN message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Begin {
    /// Target host.
    pub host: TargetHost,
    /// Target port (1..=65535).
    pub port: u16,
    /// Flags.
    pub flags: u32,
}

impl Begin {
    /// Encode the body.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = format!("{}:{}", self.host, self.port).into_bytes();
        out.push(0);
        if self.flags != 0 {
            out.extend_from_slice(&self.flags.to_be_bytes());
        }
        out
    }
    /// Parse a BEGIN body.
    pub fn parse(d: &[u8]) -> Result<Self, CellError> {
        let nul = d
            .iter()
            .position(|&b| b == 0)
            .ok_or(CellError::Truncated("BEGIN addrport"))?;
        let s = std::str::from_utf8(&d[..nul])
            .map_err(|_| CellError::invalid("BEGIN", "addrport is not UTF-8"))?;
        let (host_s, port_s) = s
            .rsplit_once(':')
            .ok_or_else(|| CellError::invalid("BEGIN", "no port"))?;
        let port: u16 = port_s
            .parse()
            .map_err(|_| CellError::invalid("BEGIN", "bad port"))?;
        if port == 0 {
            return Err(CellError::invalid("BEGIN", "port 0"));
        }
        let host = parse_host(host_s)?;
        let rest = &d[nul + 1..];
        let flags = if rest.len() >= 4 {
            u32::from_be_bytes([rest[0], rest[1], rest[2], rest[3]])
        } else {
            0
        };
        Ok(Begin { host, port, flags })
    }
}

fn parse_host(s: &str) -> Result<TargetHost, CellError> {
    if let Some(inner) = s.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
        let a: Ipv6Addr = inner
            .parse()
            .map_err(|_| CellError::invalid("address", "bad IPv6 literal"))?;
        return Ok(TargetHost::Ip(IpAddr::V6(a)));
    }
    if let Ok(a) = s.parse::<Ipv4Addr>() {
        return Ok(TargetHost::Ip(IpAddr::V4(a)));
    }
    validate_hostname(s)?;
    Ok(TargetHost::Hostname(s.to_ascii_lowercase()))
}

/// A CONNECTED message.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Connected {
    /// Address the exit connected to, with its TTL.
    pub addr: Option<(IpAddr, u32)>,
}

impl Connected {
    /// Encode the body.
    pub fn encode(&self) -> Vec<u8> {
        match self.addr {
            None => Vec::new(),
            Some((IpAddr::V4(a), ttl)) => {
                let mut v = a.octets().to_vec();
                v.extend_from_slice(&ttl.to_be_bytes());
                v
            }
            Some((IpAddr::V6(a), ttl)) => {
                let mut v = vec![0, 0, 0, 0, 6];
                v.extend_from_slice(&a.octets());
                v.extend_from_slice(&ttl.to_be_bytes());
                v
            }
        }
    }
    /// Parse a CONNECTED body (empty bodies are allowed, e.g. BEGIN_DIR).
    pub fn parse(d: &[u8]) -> Result<Self, CellError> {
        if d.len() < 4 {
            return Ok(Connected::default());
        }
        let mut r = Reader::new(d);
        let v4 = r.array::<4>("connected addr")?;
        if v4 != [0, 0, 0, 0] {
            let ttl = r.u32("ttl").unwrap_or(u32::MAX);
            return Ok(Connected {
                addr: Some((IpAddr::V4(Ipv4Addr::from(v4)), ttl)),
            });
        }
        if r.remaining() == 0 {
            return Ok(Connected::default());
        }
        let t = r.u8("connected addr type")?;
        if t != 6 {
            return Err(CellError::invalid("CONNECTED", "unknown address type"));
        }
        let a = r.array::<16>("connected ipv6")?;
        let ttl = r.u32("ttl").unwrap_or(u32::MAX);
        Ok(Connected {
            addr: Some((IpAddr::V6(Ipv6Addr::from(a)), ttl)),
        })
    }
}

/// An END message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    /// Reason (see [`end_reason`]).
    pub reason: u8,
    /// For EXITPOLICY: the address refused and its TTL.
    pub addr: Option<(IpAddr, u32)>,
}

impl End {
    /// A plain END with a reason.
    pub fn new(reason: u8) -> Self {
        End { reason, addr: None }
    }
    /// Encode the body.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![self.reason];
        if let Some((a, ttl)) = self.addr {
            match a {
                IpAddr::V4(a) => v.extend_from_slice(&a.octets()),
                IpAddr::V6(a) => v.extend_from_slice(&a.octets()),
            }
            v.extend_from_slice(&ttl.to_be_bytes());
        }
        v
    }
    /// Parse an END body (empty means MISC).
    pub fn parse(d: &[u8]) -> Self {
        let Some(&reason) = d.first() else {
            return End::new(end_reason::MISC);
        };
        let rest = &d[1..];
        let addr = if reason == end_reason::EXITPOLICY {
            match rest.len() {
                8 => Some((
                    IpAddr::V4(Ipv4Addr::new(rest[0], rest[1], rest[2], rest[3])),
                    u32::from_be_bytes([rest[4], rest[5], rest[6], rest[7]]),
                )),
                20 => {
                    let mut a = [0u8; 16];
                    a.copy_from_slice(&rest[..16]);
                    Some((
                        IpAddr::V6(Ipv6Addr::from(a)),
                        u32::from_be_bytes([rest[16], rest[17], rest[18], rest[19]]),
                    ))
                }
                _ => None,
            }
        } else {
            None
        };
        End { reason, addr }
    }
}

/// A decoded relay message (DATA borrows from the cell).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RelayMsg<'a> {
    /// BEGIN.
    Begin(Begin),
    /// DATA.
    Data(&'a [u8]),
    /// END.
    End(End),
    /// CONNECTED.
    Connected(Connected),
    /// SENDME.
    Sendme(Sendme),
    /// EXTEND2.
    Extend2(Extend2),
    /// EXTENDED2.
    Extended2(Created2),
    /// TRUNCATE.
    Truncate,
    /// TRUNCATED with a reason.
    Truncated(u8),
    /// DROP.
    Drop,
    /// RESOLVE of a hostname or in-addr.arpa name.
    Resolve(String),
    /// RESOLVED.
    Resolved(Vec<ResolvedAnswer>),
    /// BEGIN_DIR.
    BeginDir,
    /// XON (stream flow control on congestion-controlled circuits).
    Xon(Xon),
    /// XOFF.
    Xoff,
    /// CONFLUX_LINK (client to exit).
    ConfluxLink(ConfluxLink),
    /// CONFLUX_LINKED (exit to client).
    ConfluxLinked(ConfluxLink),
    /// CONFLUX_LINKED_ACK (client to exit; its body is ignored).
    ConfluxLinkedAck,
    /// CONFLUX_SWITCH with the relative sequence number.
    ConfluxSwitch(u32),
    /// CONNECT_UDP (proposal 339).
    ConnectUdp(ConnectUdp),
    /// CONNECTED_UDP (proposal 339).
    ConnectedUdp(ConnectedUdp),
    /// DATAGRAM: one UDP datagram (proposal 339).
    Datagram(&'a [u8]),
    /// Anything else (ignored, but counted for digests).
    Unknown(RelayCmd, &'a [u8]),
}

impl<'a> RelayMsg<'a> {
    /// Decode the message in a decrypted, recognized relay cell body.
    pub fn decode(body: &'a CellBody) -> Result<(u16, RelayMsg<'a>), CellError> {
        let h = header(body);
        let d = data(body)?;
        Ok((h.stream_id, Self::parse(h.cmd, d)?))
    }

    /// Parse the data field `d` of a relay message with command `cmd`.
    pub fn parse(cmd: RelayCmd, d: &'a [u8]) -> Result<RelayMsg<'a>, CellError> {
        let msg = match cmd {
            RelayCmd::BEGIN => RelayMsg::Begin(Begin::parse(d)?),
            RelayCmd::DATA => RelayMsg::Data(d),
            RelayCmd::END => RelayMsg::End(End::parse(d)),
            RelayCmd::CONNECTED => RelayMsg::Connected(Connected::parse(d)?),
            RelayCmd::SENDME => RelayMsg::Sendme(Sendme::parse(d)?),
            RelayCmd::EXTEND2 => RelayMsg::Extend2(Extend2::parse(d)?),
            RelayCmd::EXTENDED2 => RelayMsg::Extended2(Created2::parse(d)?),
            RelayCmd::TRUNCATE => RelayMsg::Truncate,
            RelayCmd::TRUNCATED => RelayMsg::Truncated(d.first().copied().unwrap_or(0)),
            RelayCmd::DROP => RelayMsg::Drop,
            RelayCmd::RESOLVE => {
                let nul = d.iter().position(|&b| b == 0).unwrap_or(d.len());
                let s = std::str::from_utf8(&d[..nul])
                    .map_err(|_| CellError::invalid("RESOLVE", "not UTF-8"))?;
                validate_hostname(s)?;
                RelayMsg::Resolve(s.to_ascii_lowercase())
            }
            RelayCmd::RESOLVED => RelayMsg::Resolved(parse_resolved(d)?),
            RelayCmd::BEGIN_DIR => RelayMsg::BeginDir,
            RelayCmd::XON => RelayMsg::Xon(Xon::parse(d)?),
            RelayCmd::XOFF => {
                parse_xoff(d)?;
                RelayMsg::Xoff
            }
            RelayCmd::CONFLUX_LINK => RelayMsg::ConfluxLink(ConfluxLink::parse(d)?),
            RelayCmd::CONFLUX_LINKED => RelayMsg::ConfluxLinked(ConfluxLink::parse(d)?),
            RelayCmd::CONFLUX_LINKED_ACK => RelayMsg::ConfluxLinkedAck,
            RelayCmd::CONFLUX_SWITCH => RelayMsg::ConfluxSwitch(conflux::parse_switch(d)?),
            RelayCmd::CONNECT_UDP => RelayMsg::ConnectUdp(ConnectUdp::parse(d)?),
            RelayCmd::CONNECTED_UDP => RelayMsg::ConnectedUdp(ConnectedUdp::parse(d)?),
            RelayCmd::DATAGRAM => RelayMsg::Datagram(d),
            c => RelayMsg::Unknown(c, d),
        };
        Ok(msg)
    }

    /// The command of this message.
    pub fn cmd(&self) -> RelayCmd {
        match self {
            RelayMsg::Begin(_) => RelayCmd::BEGIN,
            RelayMsg::Data(_) => RelayCmd::DATA,
            RelayMsg::End(_) => RelayCmd::END,
            RelayMsg::Connected(_) => RelayCmd::CONNECTED,
            RelayMsg::Sendme(_) => RelayCmd::SENDME,
            RelayMsg::Extend2(_) => RelayCmd::EXTEND2,
            RelayMsg::Extended2(_) => RelayCmd::EXTENDED2,
            RelayMsg::Truncate => RelayCmd::TRUNCATE,
            RelayMsg::Truncated(_) => RelayCmd::TRUNCATED,
            RelayMsg::Drop => RelayCmd::DROP,
            RelayMsg::Resolve(_) => RelayCmd::RESOLVE,
            RelayMsg::Resolved(_) => RelayCmd::RESOLVED,
            RelayMsg::BeginDir => RelayCmd::BEGIN_DIR,
            RelayMsg::Xon(_) => RelayCmd::XON,
            RelayMsg::Xoff => RelayCmd::XOFF,
            RelayMsg::ConfluxLink(_) => RelayCmd::CONFLUX_LINK,
            RelayMsg::ConfluxLinked(_) => RelayCmd::CONFLUX_LINKED,
            RelayMsg::ConfluxLinkedAck => RelayCmd::CONFLUX_LINKED_ACK,
            RelayMsg::ConfluxSwitch(_) => RelayCmd::CONFLUX_SWITCH,
            RelayMsg::ConnectUdp(_) => RelayCmd::CONNECT_UDP,
            RelayMsg::ConnectedUdp(_) => RelayCmd::CONNECTED_UDP,
            RelayMsg::Datagram(_) => RelayCmd::DATAGRAM,
            RelayMsg::Unknown(c, _) => *c,
        }
    }

    /// Encode the message body (not the header).
    pub fn encode_body(&self) -> Result<Vec<u8>, CellError> {
        Ok(match self {
            RelayMsg::Begin(b) => b.encode(),
            RelayMsg::Data(d) => d.to_vec(),
            RelayMsg::End(e) => e.encode(),
            RelayMsg::Connected(c) => c.encode(),
            RelayMsg::Sendme(s) => s.encode(),
            RelayMsg::Extend2(e) => e.encode()?,
            RelayMsg::Extended2(c) => c.encode(),
            RelayMsg::Truncate | RelayMsg::Drop => Vec::new(),
            RelayMsg::BeginDir => Vec::new(),
            RelayMsg::Truncated(r) => vec![*r],
            RelayMsg::Resolve(h) => {
                let mut v = h.as_bytes().to_vec();
                v.push(0);
                v
            }
            RelayMsg::Resolved(a) => encode_resolved(a),
            RelayMsg::Xon(x) => x.encode(),
            RelayMsg::Xoff => encode_xoff(),
            RelayMsg::ConfluxLink(l) | RelayMsg::ConfluxLinked(l) => l.encode(),
            RelayMsg::ConfluxLinkedAck => Vec::new(),
            RelayMsg::ConfluxSwitch(s) => conflux::encode_switch(*s).to_vec(),
            RelayMsg::ConnectUdp(c) => c.encode()?,
            RelayMsg::ConnectedUdp(c) => c.encode(),
            RelayMsg::Datagram(d) => d.to_vec(),
            RelayMsg::Unknown(_, d) => d.to_vec(),
        })
    }

    /// Write this message into an unencrypted relay cell body.
    pub fn write_cell(
        &self,
        stream_id: u16,
        body: &mut CellBody,
        pad: impl FnOnce(&mut [u8]),
    ) -> Result<(), CellError> {
        let data = self.encode_body()?;
        write(body, self.cmd(), stream_id, &data, pad)
    }
}
#[cfg(test)]
mod tests;
