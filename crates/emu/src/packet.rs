//! IP header validation: the only thing the emulator reads from a packet is
//! its source and destination address, and only after checking that the
//! header is complete and self-consistent.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why a packet was not forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// Shorter than the minimal header of its version.
    Truncated,
    /// Version nibble is neither 4 nor 6.
    BadVersion,
    /// IPv4 IHL < 5 or beyond the packet, or total length inconsistent.
    BadHeader,
}

/// Source and destination of a validated packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addrs {
    pub src: IpAddr,
    pub dst: IpAddr,
}

/// Validate an IPv4 or IPv6 header and return its addresses.
pub fn parse(pkt: &[u8]) -> Result<Addrs, ParseError> {
    let first = *pkt.first().ok_or(ParseError::Truncated)?;
    match first >> 4 {
        4 => {
            if pkt.len() < 20 {
                return Err(ParseError::Truncated);
            }
            let ihl = usize::from(first & 0x0f) * 4;
            if ihl < 20 || ihl > pkt.len() {
                return Err(ParseError::BadHeader);
            }
            let total = usize::from(u16::from_be_bytes([pkt[2], pkt[3]]));
            if total < ihl || total > pkt.len() {
                return Err(ParseError::BadHeader);
            }
            let src = Ipv4Addr::new(pkt[12], pkt[13], pkt[14], pkt[15]);
            let dst = Ipv4Addr::new(pkt[16], pkt[17], pkt[18], pkt[19]);
            Ok(Addrs {
                src: IpAddr::V4(src),
                dst: IpAddr::V4(dst),
            })
        }
        6 => {
            if pkt.len() < 40 {
                return Err(ParseError::Truncated);
            }
            let payload = usize::from(u16::from_be_bytes([pkt[4], pkt[5]]));
            // Jumbograms (payload length 0 with a hop-by-hop option) are not
            // used on a 1500-byte TUN; anything longer than the buffer is bad.
            if 40 + payload > pkt.len() {
                return Err(ParseError::BadHeader);
            }
            let mut s = [0u8; 16];
            let mut d = [0u8; 16];
            s.copy_from_slice(&pkt[8..24]);
            d.copy_from_slice(&pkt[24..40]);
            Ok(Addrs {
                src: IpAddr::V6(Ipv6Addr::from(s)),
                dst: IpAddr::V6(Ipv6Addr::from(d)),
            })
        }
        _ => Err(ParseError::BadVersion),
    }
}

/// IP protocol number of UDP.
pub const PROTO_UDP: u8 = 17;

/// Whether a (validated) packet carries UDP: IPv4 protocol 17, or IPv6
/// next header 17 right after the fixed header (extension headers are not
/// followed).
pub fn is_udp(pkt: &[u8]) -> bool {
    match pkt.first().map(|b| b >> 4) {
        Some(4) => pkt.get(9) == Some(&PROTO_UDP),
        Some(6) => pkt.get(6) == Some(&PROTO_UDP),
        _ => false,
    }
}

#[cfg(test)]
pub(crate) fn ipv4_udp(src: Ipv4Addr, dst: Ipv4Addr, payload_len: usize) -> Vec<u8> {
    let total = 20 + 8 + payload_len;
    let mut p = vec![0u8; total];
    p[0] = 0x45;
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p[8] = 64;
    p[9] = 17;
    p[12..16].copy_from_slice(&src.octets());
    p[16..20].copy_from_slice(&dst.octets());
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_v4_and_v6() {
        let p = ipv4_udp(Ipv4Addr::new(10, 0, 0, 2), Ipv4Addr::new(10, 0, 0, 3), 10);
        let a = parse(&p).expect("valid");
        assert_eq!(a.dst, IpAddr::V4(Ipv4Addr::new(10, 0, 0, 3)));
        let mut v6 = vec![0u8; 48];
        v6[0] = 0x60;
        v6[5] = 8;
        v6[39] = 1;
        let a = parse(&v6).expect("valid v6");
        assert_eq!(a.dst, IpAddr::V6(Ipv6Addr::LOCALHOST));
    }

    #[test]
    fn rejects_bad_headers() {
        assert_eq!(parse(&[]), Err(ParseError::Truncated));
        assert_eq!(parse(&[0x45; 10]), Err(ParseError::Truncated));
        assert_eq!(parse(&[0x15; 40]), Err(ParseError::BadVersion));
        let mut p = ipv4_udp(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 4);
        p[0] = 0x44; // IHL 16 bytes
        assert_eq!(parse(&p), Err(ParseError::BadHeader));
        let mut p = ipv4_udp(Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 4);
        p[3] = 200; // total length beyond the buffer
        assert_eq!(parse(&p), Err(ParseError::BadHeader));
        let mut v6 = vec![0u8; 40];
        v6[0] = 0x60;
        v6[5] = 1;
        assert_eq!(parse(&v6), Err(ParseError::BadHeader));
    }

    proptest! {
        #[test]
        fn never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse(&bytes);
        }
    }
}
