//! UDP streams (proposal 339, as onionmix implements it; see
//! docs/udp-over-tor.md): CONNECT_UDP (16) asks the exit for a UDP socket
//! connected to one target, CONNECTED_UDP (17) answers with the exit's
//! bound address and the target's, and each DATAGRAM (18) carries one
//! datagram (at most 498 bytes: no fragmentation). Only exits that
//! advertise `Datagram=1` ever receive these.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::{TargetHost, validate_hostname};
use crate::{CellError, RELAY_DATA_LEN, Reader};

/// Address types of proposal 339's `address` (as in RESOLVED).
pub mod addr_type {
    /// A hostname.
    pub const HOSTNAME: u8 = 0x00;
    /// IPv4.
    pub const IPV4: u8 = 0x04;
    /// IPv6.
    pub const IPV6: u8 = 0x06;
}

fn write_addr(out: &mut Vec<u8>, host: &TargetHost, port: u16) -> Result<(), CellError> {
    match host {
        TargetHost::Ip(IpAddr::V4(a)) => {
            out.extend_from_slice(&[addr_type::IPV4, 4]);
            out.extend_from_slice(&a.octets());
        }
        TargetHost::Ip(IpAddr::V6(a)) => {
            out.extend_from_slice(&[addr_type::IPV6, 16]);
            out.extend_from_slice(&a.octets());
        }
        TargetHost::Hostname(h) => {
            let n = u8::try_from(h.len()).map_err(|_| CellError::DoesNotFit("UDP address"))?;
            out.extend_from_slice(&[addr_type::HOSTNAME, n]);
            out.extend_from_slice(h.as_bytes());
        }
    }
    out.extend_from_slice(&port.to_be_bytes());
    Ok(())
}

fn read_addr(r: &mut Reader<'_>) -> Result<(TargetHost, u16), CellError> {
    let t = r.u8("UDP address type")?;
    let len = usize::from(r.u8("UDP address length")?);
    let v = r.take(len, "UDP address")?;
    let bad = |why: &str| CellError::invalid("UDP address", why.to_string());
    let host = match (t, len) {
        (addr_type::IPV4, 4) => TargetHost::Ip(IpAddr::V4(Ipv4Addr::new(v[0], v[1], v[2], v[3]))),
        (addr_type::IPV6, 16) => {
            let a: [u8; 16] = v.try_into().map_err(|_| bad("IPv6 length"))?;
            TargetHost::Ip(IpAddr::V6(Ipv6Addr::from(a)))
        }
        (addr_type::HOSTNAME, _) => {
            if v.contains(&0) {
                return Err(bad("NUL in hostname"));
            }
            let h = std::str::from_utf8(v).map_err(|_| bad("hostname not UTF-8"))?;
            validate_hostname(h)?;
            TargetHost::Hostname(h.to_ascii_lowercase())
        }
        _ => return Err(bad("type and length")),
    };
    let port = r.u16("UDP port")?;
    Ok((host, port))
}

/// CONNECT_UDP: a UDP socket at the exit, connected to `host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectUdp {
    /// As in BEGIN (IPv6 okay, IPv4 not okay, IPv6 preferred).
    pub flags: u32,
    /// The target.
    pub host: TargetHost,
    /// The target's port (not 0).
    pub port: u16,
}

impl ConnectUdp {
    /// Encode the body.
    pub fn encode(&self) -> Result<Vec<u8>, CellError> {
        let mut out = self.flags.to_be_bytes().to_vec();
        write_addr(&mut out, &self.host, self.port)?;
        Ok(out)
    }
    /// Parse a body (anything after the address is ignored).
    pub fn parse(d: &[u8]) -> Result<Self, CellError> {
        let mut r = Reader::new(d);
        let flags = r.u32("CONNECT_UDP flags")?;
        let (host, port) = read_addr(&mut r)?;
        if port == 0 {
            return Err(CellError::invalid("CONNECT_UDP", "port 0"));
        }
        Ok(ConnectUdp { flags, host, port })
    }
}

/// CONNECTED_UDP: the exit's bound address and the target's address (both
/// addresses, never hostnames).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectedUdp {
    /// Where the exit's socket is bound.
    pub ours: SocketAddr,
    /// Where it is connected.
    pub theirs: SocketAddr,
}

impl ConnectedUdp {
    /// Encode the body.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(40);
        for a in [self.ours, self.theirs] {
            // Addresses always fit.
            let _ = write_addr(&mut out, &TargetHost::Ip(a.ip()), a.port());
        }
        out
    }
    /// Parse a body.
    pub fn parse(d: &[u8]) -> Result<Self, CellError> {
        let mut r = Reader::new(d);
        let mut one = || -> Result<SocketAddr, CellError> {
            match read_addr(&mut r)? {
                (TargetHost::Ip(ip), port) => Ok(SocketAddr::new(ip, port)),
                (TargetHost::Hostname(_), _) => {
                    Err(CellError::invalid("CONNECTED_UDP", "hostname address"))
                }
            }
        };
        let ours = one()?;
        let theirs = one()?;
        Ok(ConnectedUdp { ours, theirs })
    }
}

/// The largest datagram one DATAGRAM message carries.
pub const MAX_DATAGRAM: usize = RELAY_DATA_LEN;
