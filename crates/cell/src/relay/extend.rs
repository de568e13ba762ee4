//! Link specifiers and EXTEND2 / EXTENDED2 bodies (tor-spec §5.1.2).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV4, SocketAddrV6};

use crate::chan::Create2;
use crate::{CellError, RELAY_DATA_LEN, Reader};

/// Link specifier type of onionmix's QUIC link hint (`docs/quic-links.md`):
/// the next hop accepts QUIC links on this UDP port of the address in the
/// IPv4 / IPv6 specifier. Two bytes, the port. Not a tor-spec type; relays
/// that do not know it ignore it (tor-spec §5.1.2: "Nodes MUST ignore
/// unrecognized specifiers").
pub const LSTYPE_ONIONMIX_QUIC: u8 = 0xF1;

/// A link specifier (tor-spec §5.1.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkSpec {
    /// TLS-over-TCP, IPv4.
    Ipv4(SocketAddrV4),
    /// TLS-over-TCP, IPv6.
    Ipv6(SocketAddrV6),
    /// RSA identity digest.
    LegacyId([u8; 20]),
    /// Ed25519 identity.
    Ed25519Id([u8; 32]),
    /// Unrecognized specifier (kept for forwarding).
    Unknown(u8, Vec<u8>),
}

impl LinkSpec {
    /// onionmix's QUIC hint: the next hop takes QUIC links on UDP `port`
    /// ([`LSTYPE_ONIONMIX_QUIC`]).
    pub fn onionmix_quic(port: u16) -> LinkSpec {
        LinkSpec::Unknown(LSTYPE_ONIONMIX_QUIC, port.to_be_bytes().to_vec())
    }
    /// The UDP port of an onionmix QUIC hint; None for any other specifier
    /// (or a hint of the wrong length, or port 0).
    pub fn quic_port(&self) -> Option<u16> {
        match self {
            LinkSpec::Unknown(LSTYPE_ONIONMIX_QUIC, b) => match b[..] {
                [hi, lo] => Some(u16::from_be_bytes([hi, lo])).filter(|p| *p != 0),
                _ => None,
            },
            _ => None,
        }
    }
    /// Append `LSTYPE LSLEN LSPEC` (an unknown specifier's body is cut to
    /// 255 bytes).
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            LinkSpec::Ipv4(a) => {
                out.extend_from_slice(&[0, 6]);
                out.extend_from_slice(&a.ip().octets());
                out.extend_from_slice(&a.port().to_be_bytes());
            }
            LinkSpec::Ipv6(a) => {
                out.extend_from_slice(&[1, 18]);
                out.extend_from_slice(&a.ip().octets());
                out.extend_from_slice(&a.port().to_be_bytes());
            }
            LinkSpec::LegacyId(id) => {
                out.extend_from_slice(&[2, 20]);
                out.extend_from_slice(id);
            }
            LinkSpec::Ed25519Id(id) => {
                out.extend_from_slice(&[3, 32]);
                out.extend_from_slice(id);
            }
            LinkSpec::Unknown(t, b) => {
                out.push(*t);
                out.push(b.len().min(255) as u8);
                out.extend_from_slice(&b[..b.len().min(255)]);
            }
        }
    }
    /// Read one `LSTYPE LSLEN LSPEC`.
    pub fn read(r: &mut Reader<'_>) -> Result<Self, CellError> {
        let t = r.u8("lstype")?;
        let len = r.u8("lslen")? as usize;
        let b = r.take(len, "lspec")?;
        let bad = || CellError::invalid("link specifier", format!("type {t} with length {len}"));
        Ok(match t {
            0 => {
                if len != 6 {
                    return Err(bad());
                }
                LinkSpec::Ipv4(SocketAddrV4::new(
                    Ipv4Addr::new(b[0], b[1], b[2], b[3]),
                    u16::from_be_bytes([b[4], b[5]]),
                ))
            }
            1 => {
                if len != 18 {
                    return Err(bad());
                }
                let mut a = [0u8; 16];
                a.copy_from_slice(&b[..16]);
                LinkSpec::Ipv6(SocketAddrV6::new(
                    Ipv6Addr::from(a),
                    u16::from_be_bytes([b[16], b[17]]),
                    0,
                    0,
                ))
            }
            2 => LinkSpec::LegacyId(b.try_into().map_err(|_| bad())?),
            3 => LinkSpec::Ed25519Id(b.try_into().map_err(|_| bad())?),
            _ => LinkSpec::Unknown(t, b.to_vec()),
        })
    }
}

/// An EXTEND2 message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extend2 {
    /// Where and who the next hop is.
    pub specs: Vec<LinkSpec>,
    /// The handshake to forward in CREATE2.
    pub create: Create2,
}

impl Extend2 {
    /// Encode the body.
    pub fn encode(&self) -> Result<Vec<u8>, CellError> {
        let mut out =
            vec![u8::try_from(self.specs.len()).map_err(|_| CellError::DoesNotFit("EXTEND2"))?];
        for s in &self.specs {
            s.write(&mut out);
        }
        self.create.write(&mut out);
        if out.len() > RELAY_DATA_LEN {
            return Err(CellError::DoesNotFit("EXTEND2"));
        }
        Ok(out)
    }
    /// Parse an EXTEND2 body. Duplicate identity specifiers are rejected.
    pub fn parse(d: &[u8]) -> Result<Self, CellError> {
        let mut r = Reader::new(d);
        let n = r.u8("nspec")?;
        let mut specs = Vec::with_capacity(n as usize);
        let (mut rsa, mut ed) = (0, 0);
        for _ in 0..n {
            let s = LinkSpec::read(&mut r)?;
            match s {
                LinkSpec::LegacyId(_) => rsa += 1,
                LinkSpec::Ed25519Id(_) => ed += 1,
                _ => {}
            }
            specs.push(s);
        }
        if rsa > 1 || ed > 1 {
            return Err(CellError::invalid(
                "EXTEND2",
                "duplicate identity specifier",
            ));
        }
        let create = Create2::read(&mut r)?;
        Ok(Extend2 { specs, create })
    }
    /// The IPv4 address to connect to, if given.
    pub fn ipv4(&self) -> Option<SocketAddrV4> {
        self.specs.iter().find_map(|s| match s {
            LinkSpec::Ipv4(a) => Some(*a),
            _ => None,
        })
    }
    /// The IPv6 address to connect to, if given.
    pub fn ipv6(&self) -> Option<SocketAddrV6> {
        self.specs.iter().find_map(|s| match s {
            LinkSpec::Ipv6(a) => Some(*a),
            _ => None,
        })
    }
    /// The RSA identity, if given.
    pub fn rsa_id(&self) -> Option<[u8; 20]> {
        self.specs.iter().find_map(|s| match s {
            LinkSpec::LegacyId(a) => Some(*a),
            _ => None,
        })
    }
    /// The Ed25519 identity, if given.
    pub fn ed_id(&self) -> Option<[u8; 32]> {
        self.specs.iter().find_map(|s| match s {
            LinkSpec::Ed25519Id(a) => Some(*a),
            _ => None,
        })
    }
    /// The UDP port of onionmix's QUIC hint, if given.
    pub fn quic_port(&self) -> Option<u16> {
        self.specs.iter().find_map(LinkSpec::quic_port)
    }
}
