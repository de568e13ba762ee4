//! Packets the tunnel writes itself: UDP (DNS answers), ICMP/ICMPv6
//! destination unreachable, and the TCP RST refusing a SYN. Checksums
//! included; no IPv4 options, no IPv6 extension headers.

use std::net::{IpAddr, SocketAddr};

use super::{IpInfo, be16, be32, checksum, parse_ip, proto, tcp_flags};

/// Why a destination is unreachable, as ICMP says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unreachable {
    /// No route (v4 code 0 net unreachable, v6 code 0 no route).
    Net,
    /// The host (v4 code 1, v6 code 3 address unreachable).
    Host,
    /// The port (v4 code 3, v6 code 4).
    Port,
    /// Administratively prohibited (v4 code 13, v6 code 1).
    Prohibited,
}

impl Unreachable {
    fn code_v4(self) -> u8 {
        match self {
            Unreachable::Net => 0,
            Unreachable::Host => 1,
            Unreachable::Port => 3,
            Unreachable::Prohibited => 13,
        }
    }
    fn code_v6(self) -> u8 {
        match self {
            Unreachable::Net => 0,
            Unreachable::Host => 3,
            Unreachable::Port => 4,
            Unreachable::Prohibited => 1,
        }
    }
}

/// An IP header for `upper` bytes of protocol `proto` from `src` to
/// `dst` (same family), followed by nothing yet.
pub(crate) fn ip_header(
    src: IpAddr,
    dst: IpAddr,
    proto: u8,
    upper: usize,
    hop_limit: u8,
) -> Option<Vec<u8>> {
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let total = u16::try_from(upper.checked_add(20)?).ok()?;
            let mut h = Vec::with_capacity(usize::from(total));
            h.extend_from_slice(&[0x45, 0]);
            h.extend_from_slice(&total.to_be_bytes());
            // ID 0, DF set (RFC 6864: an atomic datagram).
            h.extend_from_slice(&[0, 0, 0x40, 0, hop_limit, proto, 0, 0]);
            h.extend_from_slice(&s.octets());
            h.extend_from_slice(&d.octets());
            let sum = checksum(&[h.get(..20)?]);
            h.get_mut(10..12)?.copy_from_slice(&sum.to_be_bytes());
            Some(h)
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let len = u16::try_from(upper).ok()?;
            let mut h = Vec::with_capacity(40 + upper);
            h.extend_from_slice(&[0x60, 0, 0, 0]);
            h.extend_from_slice(&len.to_be_bytes());
            h.extend_from_slice(&[proto, hop_limit]);
            h.extend_from_slice(&s.octets());
            h.extend_from_slice(&d.octets());
            Some(h)
        }
        _ => None,
    }
}

/// The upper-layer checksum with the pseudo-header of `src`/`dst`.
pub(crate) fn l4_checksum(src: IpAddr, dst: IpAddr, proto: u8, l4: &[u8]) -> Option<u16> {
    let len = u32::try_from(l4.len()).ok()?;
    Some(match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let len16 = u16::try_from(len).ok()?.to_be_bytes();
            checksum(&[&s.octets(), &d.octets(), &[0, proto], &len16, l4])
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => checksum(&[
            &s.octets(),
            &d.octets(),
            &len.to_be_bytes(),
            &[0, 0, 0, proto],
            l4,
        ]),
        _ => return None,
    })
}

/// A UDP datagram from `src` to `dst` carrying `payload` (a DNS answer,
/// say). `None` when the families differ or it would be too long.
pub fn udp_packet(
    src: SocketAddr,
    dst: SocketAddr,
    payload: &[u8],
    hop_limit: u8,
) -> Option<Vec<u8>> {
    let len = u16::try_from(payload.len().checked_add(8)?).ok()?;
    let mut u = Vec::with_capacity(usize::from(len));
    u.extend_from_slice(&src.port().to_be_bytes());
    u.extend_from_slice(&dst.port().to_be_bytes());
    u.extend_from_slice(&len.to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    let mut sum = l4_checksum(src.ip(), dst.ip(), proto::UDP, &u)?;
    if sum == 0 {
        sum = 0xffff;
    }
    u.get_mut(6..8)?.copy_from_slice(&sum.to_be_bytes());
    let mut p = ip_header(src.ip(), dst.ip(), proto::UDP, u.len(), hop_limit)?;
    p.extend_from_slice(&u);
    Some(p)
}

/// Most of the offending packet quoted in an ICMP error, so the whole
/// error fits the minimum MTU: 576 bytes for IPv4 (RFC 1812 §4.3.2.3),
/// 1280 for IPv6 (RFC 4443 §2.4).
const QUOTE_V4: usize = 576 - 20 - 8;
const QUOTE_V6: usize = 1280 - 40 - 8;

/// ICMP (v4) or ICMPv6 destination unreachable in answer to packet
/// `orig` (a well-formed IP packet from an application), from its
/// destination to its source. `None` for a packet that is not well
/// formed, or itself ICMP (no errors about errors).
pub fn icmp_unreachable(orig: &[u8], why: Unreachable, hop_limit: u8) -> Option<Vec<u8>> {
    let ip: IpInfo = parse_ip(orig).ok()?;
    if ip.proto == proto::ICMP || ip.proto == proto::ICMPV6 {
        return None;
    }
    let (ty, code, quote, proto) = match ip.src {
        IpAddr::V4(_) => (3u8, why.code_v4(), QUOTE_V4, proto::ICMP),
        IpAddr::V6(_) => (1u8, why.code_v6(), QUOTE_V6, proto::ICMPV6),
    };
    let quoted = orig.get(..orig.len().min(quote))?;
    let mut m = Vec::with_capacity(8 + quoted.len());
    m.extend_from_slice(&[ty, code, 0, 0, 0, 0, 0, 0]);
    m.extend_from_slice(quoted);
    let sum = if proto == proto::ICMP {
        checksum(&[&m])
    } else {
        l4_checksum(ip.dst, ip.src, proto, &m)?
    };
    m.get_mut(2..4)?.copy_from_slice(&sum.to_be_bytes());
    let mut p = ip_header(ip.dst, ip.src, proto, m.len(), hop_limit)?;
    p.extend_from_slice(&m);
    Some(p)
}

/// The RST|ACK refusing connection request `syn` (RFC 9293 §3.10.7.1:
/// sequence 0, acknowledging the SYN and its data). `None` unless `syn`
/// is a well-formed TCP SYN without ACK.
pub fn tcp_rst_for_syn(syn: &[u8], hop_limit: u8) -> Option<Vec<u8>> {
    let ip = parse_ip(syn).ok()?;
    if ip.proto != proto::TCP || ip.fragment {
        return None;
    }
    let l4 = syn.get(ip.l4..)?;
    let flags = *l4.get(13)?;
    if flags & (tcp_flags::SYN | tcp_flags::ACK | tcp_flags::RST) != tcp_flags::SYN {
        return None;
    }
    let doff = usize::from(l4.get(12)? >> 4) * 4;
    if doff < 20 || doff > l4.len() {
        return None;
    }
    let data = u32::try_from(l4.len().checked_sub(doff)?).ok()?;
    let fin = u32::from(flags & tcp_flags::FIN != 0);
    // SYN counts one, data and FIN their share.
    let ack = be32(l4, 4)?
        .wrapping_add(1)
        .wrapping_add(data)
        .wrapping_add(fin);
    let mut t = Vec::with_capacity(20);
    t.extend_from_slice(&be16(l4, 2)?.to_be_bytes());
    t.extend_from_slice(&be16(l4, 0)?.to_be_bytes());
    t.extend_from_slice(&0u32.to_be_bytes());
    t.extend_from_slice(&ack.to_be_bytes());
    t.extend_from_slice(&[0x50, tcp_flags::RST | tcp_flags::ACK, 0, 0, 0, 0, 0, 0]);
    let sum = l4_checksum(ip.dst, ip.src, proto::TCP, &t)?;
    t.get_mut(16..18)?.copy_from_slice(&sum.to_be_bytes());
    let mut p = ip_header(ip.dst, ip.src, proto::TCP, t.len(), hop_limit)?;
    p.extend_from_slice(&t);
    Some(p)
}

/// Recompute the TCP or UDP checksum of a well-formed, unfragmented
/// packet in place (for tests and fuzzing inputs). `None` for anything
/// else.
pub fn fix_transport_checksum(p: &mut [u8]) -> Option<()> {
    let ip = parse_ip(p).ok()?;
    if ip.fragment {
        return None;
    }
    let (field, end) = match ip.proto {
        proto::TCP => (16, p.len()),
        proto::UDP => {
            let len = usize::from(be16(p, ip.l4.checked_add(4)?)?);
            (6, ip.l4.checked_add(len)?.min(p.len()))
        }
        _ => return None,
    };
    let at = ip.l4.checked_add(field)?;
    let end_field = at.checked_add(2)?;
    if end_field > end {
        return None;
    }
    p.get_mut(at..end_field)?.fill(0);
    let mut sum = l4_checksum(ip.src, ip.dst, ip.proto, p.get(ip.l4..end)?)?;
    if ip.proto == proto::UDP && sum == 0 {
        sum = 0xffff;
    }
    p.get_mut(at..end_field)?
        .copy_from_slice(&sum.to_be_bytes());
    Some(())
}
