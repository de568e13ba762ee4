//! Channel cells: framing (tor-spec §3) and the link/circuit-level
//! messages (§4, §5.1, §5.4).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use bytes::{Buf, BufMut, BytesMut};

use crate::{CellError, PAYLOAD_LEN, Reader};

/// A channel cell command.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChanCmd(pub u8);

impl ChanCmd {
    /// PADDING (fixed).
    pub const PADDING: ChanCmd = ChanCmd(0);
    /// CREATE (TAP; removed in 0.4.9, never sent).
    pub const CREATE: ChanCmd = ChanCmd(1);
    /// CREATED (TAP).
    pub const CREATED: ChanCmd = ChanCmd(2);
    /// RELAY.
    pub const RELAY: ChanCmd = ChanCmd(3);
    /// DESTROY.
    pub const DESTROY: ChanCmd = ChanCmd(4);
    /// CREATE_FAST.
    pub const CREATE_FAST: ChanCmd = ChanCmd(5);
    /// CREATED_FAST.
    pub const CREATED_FAST: ChanCmd = ChanCmd(6);
    /// VERSIONS (variable).
    pub const VERSIONS: ChanCmd = ChanCmd(7);
    /// NETINFO.
    pub const NETINFO: ChanCmd = ChanCmd(8);
    /// RELAY_EARLY.
    pub const RELAY_EARLY: ChanCmd = ChanCmd(9);
    /// CREATE2.
    pub const CREATE2: ChanCmd = ChanCmd(10);
    /// CREATED2.
    pub const CREATED2: ChanCmd = ChanCmd(11);
    /// PADDING_NEGOTIATE.
    pub const PADDING_NEGOTIATE: ChanCmd = ChanCmd(12);
    /// VPADDING (variable).
    pub const VPADDING: ChanCmd = ChanCmd(128);
    /// CERTS (variable).
    pub const CERTS: ChanCmd = ChanCmd(129);
    /// AUTH_CHALLENGE (variable).
    pub const AUTH_CHALLENGE: ChanCmd = ChanCmd(130);
    /// AUTHENTICATE (variable).
    pub const AUTHENTICATE: ChanCmd = ChanCmd(131);
    /// AUTHORIZE (variable, unused).
    pub const AUTHORIZE: ChanCmd = ChanCmd(132);

    /// Whether cells with this command are variable-length (link v3+).
    pub fn is_var(self) -> bool {
        self.0 == 7 || self.0 >= 128
    }
    /// A human-readable name for logs.
    pub fn name(self) -> &'static str {
        match self.0 {
            0 => "PADDING",
            1 => "CREATE",
            2 => "CREATED",
            3 => "RELAY",
            4 => "DESTROY",
            5 => "CREATE_FAST",
            6 => "CREATED_FAST",
            7 => "VERSIONS",
            8 => "NETINFO",
            9 => "RELAY_EARLY",
            10 => "CREATE2",
            11 => "CREATED2",
            12 => "PADDING_NEGOTIATE",
            128 => "VPADDING",
            129 => "CERTS",
            130 => "AUTH_CHALLENGE",
            131 => "AUTHENTICATE",
            132 => "AUTHORIZE",
            _ => "UNKNOWN",
        }
    }
}

impl std::fmt::Debug for ChanCmd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.name(), self.0)
    }
}

/// One cell as it travels on a channel: circuit ID, command and payload.
/// For fixed-size cells the payload is exactly [`PAYLOAD_LEN`] bytes.
#[derive(Clone, PartialEq, Eq)]
pub struct RawCell {
    /// Circuit ID (0 for channel-level cells).
    pub circ_id: u32,
    /// Command.
    pub cmd: ChanCmd,
    /// Payload (fixed cells: exactly 509 bytes).
    pub payload: BytesMut,
}

impl std::fmt::Debug for RawCell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawCell")
            .field("circ_id", &self.circ_id)
            .field("cmd", &self.cmd)
            .field("len", &self.payload.len())
            .finish()
    }
}

impl RawCell {
    /// A fixed-size cell with `body` copied in and zero padding.
    pub fn fixed(circ_id: u32, cmd: ChanCmd, body: &[u8]) -> Result<RawCell, CellError> {
        if body.len() > PAYLOAD_LEN {
            return Err(CellError::DoesNotFit(cmd.name()));
        }
        let mut payload = BytesMut::with_capacity(PAYLOAD_LEN);
        payload.extend_from_slice(body);
        payload.resize(PAYLOAD_LEN, 0);
        Ok(RawCell {
            circ_id,
            cmd,
            payload,
        })
    }
    /// A variable-length cell.
    pub fn var(circ_id: u32, cmd: ChanCmd, body: &[u8]) -> Result<RawCell, CellError> {
        if body.len() > u16::MAX as usize {
            return Err(CellError::DoesNotFit(cmd.name()));
        }
        Ok(RawCell {
            circ_id,
            cmd,
            payload: BytesMut::from(body),
        })
    }
    /// The payload of a fixed-size cell as an array reference.
    pub fn body_mut(&mut self) -> Option<&mut [u8; PAYLOAD_LEN]> {
        (&mut self.payload[..]).try_into().ok()
    }
    /// The payload of a fixed-size cell as an array reference.
    pub fn body(&self) -> Option<&[u8; PAYLOAD_LEN]> {
        (&self.payload[..]).try_into().ok()
    }
}

/// Frames cells on a byte stream. Starts with 2-byte circuit IDs (for the
/// VERSIONS exchange) and switches to 4 bytes once link v4+ is negotiated.
#[derive(Debug, Clone)]
pub struct CellCodec {
    circ_id_len: usize,
}

impl Default for CellCodec {
    fn default() -> Self {
        Self::new()
    }
}

impl CellCodec {
    /// A codec for the start of a connection (2-byte circuit IDs).
    ///
    /// Variable-length cells of any length their 16-bit field can give
    /// are framed, as tor frames them: a peer may pad with a VPADDING of
    /// up to 65,535 bytes. (The link handshake bounds its own total.)
    pub fn new() -> Self {
        CellCodec { circ_id_len: 2 }
    }
    /// Set the negotiated link protocol version.
    pub fn set_link_version(&mut self, v: u16) {
        self.circ_id_len = if v >= 4 { 4 } else { 2 };
    }
    /// Circuit ID length now in use.
    pub fn circ_id_len(&self) -> usize {
        self.circ_id_len
    }
    /// Wire length of a fixed-size cell.
    pub fn fixed_len(&self) -> usize {
        self.circ_id_len + 1 + PAYLOAD_LEN
    }

    /// The circuit ID, command and wire length of the complete cell at the
    /// front of `buf`, without consuming it; `None` if the cell is not
    /// complete yet.
    pub fn peek_frame(&self, buf: &[u8]) -> Result<Option<(u32, ChanCmd, usize)>, CellError> {
        let Some(total) = self.frame_len(buf) else {
            return Ok(None);
        };
        if buf.len() < total {
            return Ok(None);
        }
        let cmd = ChanCmd(buf[self.circ_id_len]);
        let circ_id = if self.circ_id_len == 4 {
            u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]])
        } else {
            u16::from_be_bytes([buf[0], buf[1]]) as u32
        };
        Ok(Some((circ_id, cmd, total)))
    }

    /// The wire length of the cell at the front of `buf` as its header
    /// gives it, before the rest has arrived; `None` until the header has.
    pub fn frame_len(&self, buf: &[u8]) -> Option<usize> {
        let hdr = self.circ_id_len + 1;
        let cmd = ChanCmd(*buf.get(self.circ_id_len)?);
        if cmd.is_var() {
            let len = u16::from_be_bytes([*buf.get(hdr)?, *buf.get(hdr + 1)?]) as usize;
            Some(hdr + 2 + len)
        } else {
            Some(hdr + PAYLOAD_LEN)
        }
    }

    /// Split one complete cell off the front of `buf`, if there is one.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Option<RawCell>, CellError> {
        let Some((circ_id, cmd, total)) = self.peek_frame(buf)? else {
            return Ok(None);
        };
        let body_off = self.circ_id_len + 1 + if cmd.is_var() { 2 } else { 0 };
        buf.advance(body_off);
        let payload = buf.split_to(total - body_off);
        Ok(Some(RawCell {
            circ_id,
            cmd,
            payload,
        }))
    }

    /// Append a fixed-size cell in wire form to `out` without building a
    /// [`RawCell`] (the hot path for relay cells).
    pub fn encode_fixed(
        &self,
        circ_id: u32,
        cmd: ChanCmd,
        body: &[u8; PAYLOAD_LEN],
        out: &mut BytesMut,
    ) {
        if self.circ_id_len == 2 {
            out.put_u16(circ_id as u16);
        } else {
            out.put_u32(circ_id);
        }
        out.put_u8(cmd.0);
        out.extend_from_slice(body);
    }

    /// Append `cell` in wire form to `out`.
    pub fn encode(&self, cell: &RawCell, out: &mut BytesMut) -> Result<(), CellError> {
        if self.circ_id_len == 2 {
            let id = u16::try_from(cell.circ_id)
                .map_err(|_| CellError::invalid("circuit id", "too large for link v3"))?;
            out.put_u16(id);
        } else {
            out.put_u32(cell.circ_id);
        }
        out.put_u8(cell.cmd.0);
        if cell.cmd.is_var() {
            let len = u16::try_from(cell.payload.len())
                .map_err(|_| CellError::DoesNotFit(cell.cmd.name()))?;
            out.put_u16(len);
            out.extend_from_slice(&cell.payload);
        } else {
            if cell.payload.len() > PAYLOAD_LEN {
                return Err(CellError::DoesNotFit(cell.cmd.name()));
            }
            out.extend_from_slice(&cell.payload);
            out.put_bytes(0, PAYLOAD_LEN - cell.payload.len());
        }
        Ok(())
    }
}

/// VERSIONS payload: the link protocol versions a party supports.
pub fn encode_versions(versions: &[u16]) -> Vec<u8> {
    versions.iter().flat_map(|v| v.to_be_bytes()).collect()
}

/// Parse a VERSIONS payload.
pub fn parse_versions(p: &[u8]) -> Result<Vec<u16>, CellError> {
    if !p.len().is_multiple_of(2) {
        return Err(CellError::invalid("VERSIONS", "odd length"));
    }
    Ok(p.chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .collect())
}

/// CERTS cell certificate types (tor-spec §4.2).
pub mod cert_type {
    /// X.509 link certificate (legacy RSA link auth).
    pub const LINK_X509: u8 = 1;
    /// Self-signed RSA-1024 identity certificate.
    pub const RSA_ID_X509: u8 = 2;
    /// RSA authentication certificate (legacy).
    pub const RSA_AUTH_X509: u8 = 3;
    /// Ed25519 identity -> signing key.
    pub const ED_ID_SIGN: u8 = 4;
    /// Ed25519 signing key -> TLS link certificate digest.
    pub const ED_SIGN_LINK: u8 = 5;
    /// Ed25519 signing key -> authentication key.
    pub const ED_SIGN_AUTH: u8 = 6;
    /// RSA identity -> Ed25519 identity cross-certificate.
    pub const RSA_ED_CROSSCERT: u8 = 7;
}

/// A CERTS cell: a list of (type, certificate bytes).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Certs {
    /// Certificates in the order received.
    pub certs: Vec<(u8, Vec<u8>)>,
}

impl Certs {
    /// Parse a CERTS payload. Duplicate types are an error (tor-spec §4.2).
    pub fn parse(p: &[u8]) -> Result<Certs, CellError> {
        let mut r = Reader::new(p);
        let n = r.u8("CERTS count")?;
        let mut certs = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let t = r.u8("cert type")?;
            let len = r.u16("cert length")? as usize;
            let body = r.take(len, "cert body")?;
            if certs.iter().any(|(ct, _)| *ct == t) {
                return Err(CellError::invalid(
                    "CERTS",
                    format!("duplicate cert type {t}"),
                ));
            }
            certs.push((t, body.to_vec()));
        }
        Ok(Certs { certs })
    }
    /// Encode as a CERTS payload.
    pub fn encode(&self) -> Result<Vec<u8>, CellError> {
        let n = u8::try_from(self.certs.len()).map_err(|_| CellError::DoesNotFit("CERTS"))?;
        let mut out = vec![n];
        for (t, body) in &self.certs {
            let len = u16::try_from(body.len()).map_err(|_| CellError::DoesNotFit("CERTS"))?;
            out.push(*t);
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(body);
        }
        Ok(out)
    }
    /// The certificate of a given type, if present.
    pub fn get(&self, t: u8) -> Option<&[u8]> {
        self.certs
            .iter()
            .find(|(ct, _)| *ct == t)
            .map(|(_, b)| b.as_slice())
    }
}

/// An AUTH_CHALLENGE cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthChallenge {
    /// 32 random bytes.
    pub challenge: [u8; 32],
    /// Supported authentication methods.
    pub methods: Vec<u16>,
}

impl AuthChallenge {
    /// Parse an AUTH_CHALLENGE payload.
    pub fn parse(p: &[u8]) -> Result<Self, CellError> {
        let mut r = Reader::new(p);
        let challenge = r.array::<32>("challenge")?;
        let n = r.u16("n methods")?;
        let mut methods = Vec::with_capacity(n.min(64) as usize);
        for _ in 0..n {
            methods.push(r.u16("method")?);
        }
        Ok(AuthChallenge { challenge, methods })
    }
    /// Encode as a payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.challenge.to_vec();
        out.extend_from_slice(&(self.methods.len() as u16).to_be_bytes());
        for m in &self.methods {
            out.extend_from_slice(&m.to_be_bytes());
        }
        out
    }
}

/// An AUTHENTICATE cell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Authenticate {
    /// Authentication method (3 = Ed25519-SHA256-RFC5705).
    pub auth_type: u16,
    /// The authenticator.
    pub body: Vec<u8>,
}

impl Authenticate {
    /// Parse an AUTHENTICATE payload.
    pub fn parse(p: &[u8]) -> Result<Self, CellError> {
        let mut r = Reader::new(p);
        let auth_type = r.u16("auth type")?;
        let len = r.u16("auth length")? as usize;
        let body = r.take(len, "authenticator")?.to_vec();
        Ok(Authenticate { auth_type, body })
    }
    /// Encode as a payload.
    pub fn encode(&self) -> Result<Vec<u8>, CellError> {
        let len =
            u16::try_from(self.body.len()).map_err(|_| CellError::DoesNotFit("AUTHENTICATE"))?;
        let mut out = self.auth_type.to_be_bytes().to_vec();
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&self.body);
        Ok(out)
    }
}

/// A NETINFO cell (tor-spec §4.5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Netinfo {
    /// Sender's clock (clients send 0).
    pub time: u32,
    /// The address the sender sees for the receiver.
    pub other_addr: Option<IpAddr>,
    /// The sender's own addresses.
    pub my_addrs: Vec<IpAddr>,
}

fn read_netinfo_addr(r: &mut Reader<'_>) -> Result<Option<IpAddr>, CellError> {
    let t = r.u8("addr type")?;
    let len = r.u8("addr len")? as usize;
    let v = r.take(len, "addr value")?;
    Ok(match (t, len) {
        (4, 4) => Some(IpAddr::V4(Ipv4Addr::new(v[0], v[1], v[2], v[3]))),
        (6, 16) => {
            let mut a = [0u8; 16];
            a.copy_from_slice(v);
            Some(IpAddr::V6(Ipv6Addr::from(a)))
        }
        _ => None,
    })
}

fn write_netinfo_addr(out: &mut Vec<u8>, a: Option<&IpAddr>) {
    match a {
        Some(IpAddr::V4(v4)) => {
            out.extend_from_slice(&[4, 4]);
            out.extend_from_slice(&v4.octets());
        }
        Some(IpAddr::V6(v6)) => {
            out.extend_from_slice(&[6, 16]);
            out.extend_from_slice(&v6.octets());
        }
        None => out.extend_from_slice(&[4, 4, 0, 0, 0, 0]),
    }
}

impl Netinfo {
    /// Parse a NETINFO payload; unknown address types are ignored.
    pub fn parse(p: &[u8]) -> Result<Self, CellError> {
        let mut r = Reader::new(p);
        let time = r.u32("netinfo time")?;
        let other_addr = read_netinfo_addr(&mut r)?;
        let n = r.u8("n my addrs")?;
        let mut my_addrs = Vec::new();
        for _ in 0..n {
            if let Some(a) = read_netinfo_addr(&mut r)? {
                my_addrs.push(a);
            }
        }
        Ok(Netinfo {
            time,
            other_addr,
            my_addrs,
        })
    }
    /// Encode as a payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.time.to_be_bytes().to_vec();
        write_netinfo_addr(&mut out, self.other_addr.as_ref());
        let n = self.my_addrs.len().min(8);
        out.push(n as u8);
        for a in self.my_addrs.iter().take(n) {
            write_netinfo_addr(&mut out, Some(a));
        }
        out
    }
}

/// Handshake type for ntor.
pub const HTYPE_NTOR: u16 = 2;
/// Handshake type for ntor-v3.
pub const HTYPE_NTOR_V3: u16 = 3;

/// A CREATE2 cell, or the handshake part of an EXTEND2 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Create2 {
    /// Handshake type.
    pub htype: u16,
    /// Client handshake data.
    pub hdata: Vec<u8>,
}

impl Create2 {
    /// Parse from a reader positioned at HTYPE.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, CellError> {
        let htype = r.u16("htype")?;
        let hlen = r.u16("hlen")? as usize;
        let hdata = r.take(hlen, "hdata")?.to_vec();
        Ok(Create2 { htype, hdata })
    }
    /// Parse a CREATE2 payload.
    pub fn parse(p: &[u8]) -> Result<Self, CellError> {
        Self::read(&mut Reader::new(p))
    }
    /// Append to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.htype.to_be_bytes());
        out.extend_from_slice(&(self.hdata.len() as u16).to_be_bytes());
        out.extend_from_slice(&self.hdata);
    }
    /// Encode as a CREATE2 payload.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(4 + self.hdata.len());
        self.write(&mut out);
        out
    }
}

/// A CREATED2 cell, or the body of EXTENDED2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Created2 {
    /// Server handshake data.
    pub hdata: Vec<u8>,
}

impl Created2 {
    /// Parse a CREATED2 / EXTENDED2 body.
    pub fn parse(p: &[u8]) -> Result<Self, CellError> {
        let mut r = Reader::new(p);
        let hlen = r.u16("hlen")? as usize;
        let hdata = r.take(hlen, "hdata")?.to_vec();
        Ok(Created2 { hdata })
    }
    /// Encode.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = (self.hdata.len() as u16).to_be_bytes().to_vec();
        out.extend_from_slice(&self.hdata);
        out
    }
}

/// DESTROY / TRUNCATED reasons (tor-spec §5.4).
pub mod destroy_reason {
    /// No reason given.
    pub const NONE: u8 = 0;
    /// Tor protocol violation.
    pub const PROTOCOL: u8 = 1;
    /// Internal error.
    pub const INTERNAL: u8 = 2;
    /// A client sent TRUNCATE.
    pub const REQUESTED: u8 = 3;
    /// Hibernating.
    pub const HIBERNATING: u8 = 4;
    /// Out of memory, sockets or circuit IDs.
    pub const RESOURCELIMIT: u8 = 5;
    /// Unable to reach relay.
    pub const CONNECTFAILED: u8 = 6;
    /// Relay identity was not as expected.
    pub const OR_IDENTITY: u8 = 7;
    /// The channel carrying the circuit closed.
    pub const CHANNEL_CLOSED: u8 = 8;
    /// Circuit expired.
    pub const FINISHED: u8 = 9;
    /// Circuit construction took too long.
    pub const TIMEOUT: u8 = 10;
    /// Destroyed without a client TRUNCATE.
    pub const DESTROYED: u8 = 11;
    /// Unknown onion service.
    pub const NOSUCHSERVICE: u8 = 12;

    /// Name for logs.
    pub fn name(r: u8) -> &'static str {
        match r {
            0 => "NONE",
            1 => "PROTOCOL",
            2 => "INTERNAL",
            3 => "REQUESTED",
            4 => "HIBERNATING",
            5 => "RESOURCELIMIT",
            6 => "CONNECTFAILED",
            7 => "OR_IDENTITY",
            8 => "CHANNEL_CLOSED",
            9 => "FINISHED",
            10 => "TIMEOUT",
            11 => "DESTROYED",
            12 => "NOSUCHSERVICE",
            _ => "UNKNOWN",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fixed_roundtrip_v4() {
        let mut c = CellCodec::new();
        c.set_link_version(5);
        let cell = RawCell::fixed(0x8000_0001, ChanCmd::CREATE2, b"hello").unwrap();
        let mut out = BytesMut::new();
        c.encode(&cell, &mut out).unwrap();
        assert_eq!(out.len(), 514);
        // Partial input yields nothing.
        let mut part = BytesMut::from(&out[..300]);
        assert!(c.decode(&mut part).unwrap().is_none());
        let got = c.decode(&mut out).unwrap().unwrap();
        assert_eq!(got, cell);
        assert!(out.is_empty());
    }

    #[test]
    fn versions_cell_uses_two_byte_circid() {
        let c = CellCodec::new();
        let cell = RawCell::var(0, ChanCmd::VERSIONS, &encode_versions(&[4, 5])).unwrap();
        let mut out = BytesMut::new();
        c.encode(&cell, &mut out).unwrap();
        assert_eq!(&out[..], &[0, 0, 7, 0, 4, 0, 4, 0, 5]);
        let got = c.decode(&mut out).unwrap().unwrap();
        assert_eq!(parse_versions(&got.payload).unwrap(), vec![4, 5]);
    }

    /// As tor: a variable-length cell of the largest length its field
    /// allows is a cell (a 64 KiB VPADDING does not close the link), and
    /// nothing is framed before all of it arrived.
    #[test]
    fn largest_var_cell_is_framed() {
        let mut c = CellCodec::new();
        c.set_link_version(4);
        let mut buf = BytesMut::from(&[0u8, 0, 0, 0, 128, 0xff, 0xff][..]);
        buf.resize(7 + 65534, 0x55);
        assert!(c.decode(&mut buf).unwrap().is_none(), "one byte is missing");
        buf.extend_from_slice(&[0x55, 0, 0, 0, 0, 0]);
        let cell = c.decode(&mut buf).unwrap().unwrap();
        assert_eq!(cell.cmd, ChanCmd::VPADDING);
        assert_eq!(cell.payload.len(), 65535);
        assert_eq!(&buf[..], &[0, 0, 0, 0, 0], "the next cell's start is left");
    }

    #[test]
    fn netinfo_roundtrip() {
        let n = Netinfo {
            time: 0,
            other_addr: Some("127.0.0.1".parse().unwrap()),
            my_addrs: vec!["::1".parse().unwrap(), "10.1.2.3".parse().unwrap()],
        };
        assert_eq!(Netinfo::parse(&n.encode()).unwrap(), n);
    }

    #[test]
    fn certs_roundtrip_and_duplicates() {
        let c = Certs {
            certs: vec![(2, vec![1, 2, 3]), (4, vec![9; 140])],
        };
        let enc = c.encode().unwrap();
        assert_eq!(Certs::parse(&enc).unwrap(), c);
        let dup = Certs {
            certs: vec![(2, vec![1]), (2, vec![2])],
        };
        assert!(Certs::parse(&dup.encode().unwrap()).is_err());
    }

    proptest::proptest! {
        #[test]
        fn decoders_never_panic(data in proptest::collection::vec(proptest::num::u8::ANY, 0..2048), v in 3u16..6) {
            let mut c = CellCodec::new();
            c.set_link_version(v);
            let mut buf = BytesMut::from(&data[..]);
            while let Ok(Some(cell)) = c.decode(&mut buf) {
                let _ = Certs::parse(&cell.payload);
                let _ = AuthChallenge::parse(&cell.payload);
                let _ = Authenticate::parse(&cell.payload);
                let _ = Netinfo::parse(&cell.payload);
                let _ = Create2::parse(&cell.payload);
                let _ = Created2::parse(&cell.payload);
                let _ = parse_versions(&cell.payload);
            }
        }
    }
}
