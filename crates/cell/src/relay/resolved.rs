//! RESOLVED (tor-spec §6.4): the answers to a RESOLVE.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::{CellError, RELAY_DATA_LEN, Reader};

/// One answer in a RESOLVED message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolvedAnswer {
    /// A hostname (reverse lookups).
    Hostname(String, u32),
    /// An address.
    Ip(IpAddr, u32),
    /// Transient error.
    TransientError,
    /// Permanent error.
    NontransientError,
}

/// Encode a RESOLVED body.
pub fn encode_resolved(answers: &[ResolvedAnswer]) -> Vec<u8> {
    let mut out = Vec::new();
    for a in answers {
        let (t, v, ttl): (u8, Vec<u8>, u32) = match a {
            ResolvedAnswer::Hostname(h, ttl) => {
                (0, h.as_bytes()[..h.len().min(255)].to_vec(), *ttl)
            }
            ResolvedAnswer::Ip(IpAddr::V4(a), ttl) => (4, a.octets().to_vec(), *ttl),
            ResolvedAnswer::Ip(IpAddr::V6(a), ttl) => (6, a.octets().to_vec(), *ttl),
            ResolvedAnswer::TransientError => (0xF0, b"Error resolving hostname".to_vec(), 0),
            ResolvedAnswer::NontransientError => (0xF1, b"Error resolving hostname".to_vec(), 0),
        };
        if out.len() + 2 + v.len() + 4 > RELAY_DATA_LEN {
            break;
        }
        out.push(t);
        out.push(v.len() as u8);
        out.extend_from_slice(&v);
        out.extend_from_slice(&ttl.to_be_bytes());
    }
    out
}

/// Parse a RESOLVED body.
pub fn parse_resolved(d: &[u8]) -> Result<Vec<ResolvedAnswer>, CellError> {
    let mut r = Reader::new(d);
    let mut out = Vec::new();
    while r.remaining() > 0 {
        let t = r.u8("answer type")?;
        let len = r.u8("answer len")? as usize;
        let v = r.take(len, "answer value")?;
        let ttl = r.u32("answer ttl")?;
        out.push(match (t, len) {
            (0, _) => ResolvedAnswer::Hostname(
                String::from_utf8(v.to_vec())
                    .map_err(|_| CellError::invalid("RESOLVED", "hostname not UTF-8"))?,
                ttl,
            ),
            (4, 4) => ResolvedAnswer::Ip(IpAddr::V4(Ipv4Addr::new(v[0], v[1], v[2], v[3])), ttl),
            (6, 16) => {
                let mut a = [0u8; 16];
                a.copy_from_slice(v);
                ResolvedAnswer::Ip(IpAddr::V6(Ipv6Addr::from(a)), ttl)
            }
            (0xF0, _) => ResolvedAnswer::TransientError,
            (0xF1, _) => ResolvedAnswer::NontransientError,
            _ => continue,
        });
    }
    Ok(out)
}
