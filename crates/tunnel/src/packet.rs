//! IP packets from applications: header checks with every length
//! checked (and the IPv4 header, TCP and UDP checksums), the per-mode policy, and the packets the tunnel answers with
//! itself (DNS over UDP, ICMP unreachable, TCP RST).
//!
//! The packet is checked and (in anonymity mode) normalized in place;
//! [`inspect`] returns what to do with it.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::ops::Range;

use crate::counters::{self, Counters, DropReason};

pub(crate) mod build;
pub use build::{
    Unreachable, fix_transport_checksum, icmp_unreachable, tcp_rst_for_syn, udp_packet,
};

/// IP protocol numbers used here.
pub mod proto {
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
}

/// How strictly packets are normalized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// Drop fragments, IPv4 options and IPv6 extension headers; set the
    /// TTL/hop limit to a fixed value; clear DSCP/ECN and the flow label.
    #[default]
    Anonymity,
    /// Pass them (fragments go to the TCP stack for reassembly).
    Compatibility,
}

/// What becomes of UDP that is not DNS to the resolver and is not carried
/// (or whose flow could not be carried: see [`Policy::carry_udp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum UdpPolicy {
    /// Answer ICMP (v6) port unreachable, so applications fail fast.
    #[default]
    IcmpUnreachable,
    /// Drop silently.
    Drop,
}

/// The packet policy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Anonymity or compatibility.
    pub mode: Mode,
    /// Non-DNS UDP that is not carried.
    pub udp: UdpPolicy,
    /// Carry non-DNS UDP through the network (UDP flows, proposal 339's
    /// UDP streams over onionmix exits); flows that cannot be carried get
    /// `udp`.
    pub carry_udp: bool,
    /// The resolver's IPv4 address (port 53).
    pub resolver_v4: Ipv4Addr,
    /// The resolver's IPv6 address, if any.
    pub resolver_v6: Option<Ipv6Addr>,
    /// TTL / hop limit written in anonymity mode and in our own packets.
    pub hop_limit: u8,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            mode: Mode::Anonymity,
            udp: UdpPolicy::IcmpUnreachable,
            carry_udp: false,
            resolver_v4: Ipv4Addr::new(198, 18, 0, 1),
            resolver_v6: None,
            hop_limit: 64,
        }
    }
}

/// A TCP segment's header fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpInfo {
    /// Application side.
    pub src: SocketAddr,
    /// Destination.
    pub dst: SocketAddr,
    /// The flag byte (FIN 0x01, SYN 0x02, RST 0x04, ACK 0x10).
    pub flags: u8,
    /// Sequence number.
    pub seq: u32,
    /// Payload bytes.
    pub payload_len: usize,
}

/// TCP flag bits.
pub mod tcp_flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

impl TcpInfo {
    /// A connection request: SYN without ACK.
    pub fn is_syn(&self) -> bool {
        self.flags & (tcp_flags::SYN | tcp_flags::ACK | tcp_flags::RST) == tcp_flags::SYN
    }
}

/// What to do with a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A TCP segment: to the flow table and the TCP stack (the packet as
    /// it now is, possibly normalized).
    Tcp(TcpInfo),
    /// DNS to the resolver: the UDP payload is `payload` of the packet.
    Dns {
        /// The application's socket.
        src: SocketAddr,
        /// The resolver's.
        dst: SocketAddr,
        /// Where the query is in the packet.
        payload: Range<usize>,
    },
    /// Other UDP, to carry (the policy carries UDP).
    Udp {
        /// The application's socket.
        src: SocketAddr,
        /// The destination.
        dst: SocketAddr,
        /// Where the payload is in the packet.
        payload: Range<usize>,
    },
    /// A fragment (compatibility mode): to the TCP stack, which
    /// reassembles.
    Reassemble,
    /// Send this packet back to the application.
    Reply(Vec<u8>),
    /// Dropped (and counted).
    Drop(DropReason),
}

/// The IP layer of a checked packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpInfo {
    /// Source.
    pub src: IpAddr,
    /// Destination.
    pub dst: IpAddr,
    /// The upper-layer protocol.
    pub proto: u8,
    /// Where the upper-layer header starts.
    pub l4: usize,
    /// Part of a fragmented datagram.
    pub fragment: bool,
    /// IPv4 options present.
    pub options: bool,
    /// IPv6 extension headers present.
    pub extensions: bool,
}

fn be16(b: &[u8], i: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(i)?, *b.get(i.checked_add(1)?)?]))
}

fn be32(b: &[u8], i: usize) -> Option<u32> {
    let s = b.get(i..i.checked_add(4)?)?;
    Some(u32::from_be_bytes(<[u8; 4]>::try_from(s).ok()?))
}

/// The Internet checksum (RFC 1071) over the concatenation of `parts`.
pub fn checksum(parts: &[&[u8]]) -> u16 {
    let mut sum: u32 = 0;
    let mut odd: Option<u8> = None;
    for p in parts {
        for &b in p.iter() {
            match odd.take() {
                Some(hi) => {
                    sum = sum.wrapping_add(u32::from(u16::from_be_bytes([hi, b])));
                    // Fold as we go: no overflow for any length.
                    sum = (sum & 0xffff) + (sum >> 16);
                }
                None => odd = Some(b),
            }
        }
    }
    if let Some(hi) = odd {
        sum = sum.wrapping_add(u32::from(u16::from_be_bytes([hi, 0])));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !u16::try_from(sum).unwrap_or(0xffff)
}

/// Check the IP header (v4 or v6); lengths must match the buffer
/// exactly, as a TUN device delivers one packet per read.
pub fn parse_ip(p: &[u8]) -> Result<IpInfo, DropReason> {
    match p.first().map(|b| b >> 4) {
        Some(4) => parse_v4(p),
        Some(6) => parse_v6(p),
        _ => Err(DropReason::Malformed),
    }
}

fn parse_v4(p: &[u8]) -> Result<IpInfo, DropReason> {
    let m = DropReason::Malformed;
    let ihl = usize::from(p.first().ok_or(m)? & 0x0f) * 4;
    let total = usize::from(be16(p, 2).ok_or(m)?);
    if ihl < 20 || total != p.len() || total < ihl {
        return Err(m);
    }
    let header = p.get(..ihl).ok_or(m)?;
    if checksum(&[header]) != 0 {
        return Err(m);
    }
    let frag = be16(p, 6).ok_or(m)?;
    let more = frag & 0x2000 != 0;
    let offset = frag & 0x1fff;
    let src = Ipv4Addr::from(be32(p, 12).ok_or(m)?);
    let dst = Ipv4Addr::from(be32(p, 16).ok_or(m)?);
    Ok(IpInfo {
        src: IpAddr::V4(src),
        dst: IpAddr::V4(dst),
        proto: *p.get(9).ok_or(m)?,
        l4: ihl,
        fragment: more || offset != 0,
        options: ihl > 20,
        extensions: false,
    })
}

const V6_HEADER: usize = 40;

fn parse_v6(p: &[u8]) -> Result<IpInfo, DropReason> {
    let m = DropReason::Malformed;
    let payload = usize::from(be16(p, 4).ok_or(m)?);
    if p.len() < V6_HEADER || V6_HEADER.checked_add(payload) != Some(p.len()) {
        return Err(m);
    }
    let src = <[u8; 16]>::try_from(p.get(8..24).ok_or(m)?).map_err(|_| m)?;
    let dst = <[u8; 16]>::try_from(p.get(24..40).ok_or(m)?).map_err(|_| m)?;
    let mut next = *p.get(6).ok_or(m)?;
    let mut at = V6_HEADER;
    let mut extensions = false;
    let mut fragment = false;
    // Walk the extension headers (RFC 8200 §4), a bounded number.
    for _ in 0..8 {
        let len = match next {
            // Hop-by-hop, routing, destination options: 8-octet units
            // past the first 8.
            0 | 43 | 60 => (usize::from(*p.get(at.checked_add(1).ok_or(m)?).ok_or(m)?) + 1) * 8,
            44 => {
                // Offset (13 bits) and M flag; none of them: an atomic
                // fragment (RFC 6946), a whole datagram.
                let fo = be16(p, at.checked_add(2).ok_or(m)?).ok_or(m)?;
                fragment |= fo & 0xfff9 != 0;
                8
            }
            // Authentication header: 4-octet units, plus 2.
            51 => (usize::from(*p.get(at.checked_add(1).ok_or(m)?).ok_or(m)?) + 2) * 4,
            _ => {
                return Ok(IpInfo {
                    src: IpAddr::V6(Ipv6Addr::from(src)),
                    dst: IpAddr::V6(Ipv6Addr::from(dst)),
                    proto: next,
                    l4: at,
                    fragment,
                    options: false,
                    extensions,
                });
            }
        };
        extensions = true;
        next = *p.get(at).ok_or(m)?;
        at = at.checked_add(len).ok_or(m)?;
        if at > p.len() {
            return Err(m);
        }
    }
    Err(m)
}

/// Whether the tunnel refuses packets between these addresses:
/// multicast, broadcast, unspecified or loopback on either side.
fn refused_address(src: IpAddr, dst: IpAddr) -> bool {
    let bad = |a: IpAddr| match a {
        IpAddr::V4(v4) => {
            v4.is_multicast() || v4.is_broadcast() || v4.is_unspecified() || v4.is_loopback()
        }
        IpAddr::V6(v6) => v6.is_multicast() || v6.is_unspecified() || v6.is_loopback(),
    };
    bad(src) || bad(dst)
}

/// Anonymity mode's rewrite: fixed TTL/hop limit, no DSCP/ECN, no flow
/// label; the IPv4 header checksum fixed.
fn normalize(p: &mut [u8], ip: &IpInfo, hop_limit: u8) {
    match ip.src {
        IpAddr::V4(_) => {
            if let Some(tos) = p.get_mut(1) {
                *tos = 0;
            }
            if let Some(ttl) = p.get_mut(8) {
                *ttl = hop_limit;
            }
            if let Some(c) = p.get_mut(10..12) {
                c.fill(0);
            }
            let sum = p.get(..ip.l4).map(|h| checksum(&[h]));
            if let (Some(sum), Some(c)) = (sum, p.get_mut(10..12)) {
                c.copy_from_slice(&sum.to_be_bytes());
            }
        }
        IpAddr::V6(_) => {
            if let Some(h) = p.get_mut(..4) {
                h.copy_from_slice(&[0x60, 0, 0, 0]);
            }
            if let Some(hl) = p.get_mut(7) {
                *hl = hop_limit;
            }
        }
    }
}

/// Decide what to do with a packet from an application, normalizing it
/// in place in anonymity mode. Drops are counted in `c`.
pub fn inspect(policy: &Policy, c: &mut Counters, p: &mut [u8]) -> Verdict {
    let v = decide(policy, c, p);
    if let Verdict::Drop(r) = v {
        c.drop(r);
    }
    v
}

fn decide(policy: &Policy, c: &mut Counters, p: &mut [u8]) -> Verdict {
    let ip = match parse_ip(p) {
        Ok(ip) => ip,
        Err(r) => return Verdict::Drop(r),
    };
    if refused_address(ip.src, ip.dst) {
        return Verdict::Drop(DropReason::Address);
    }
    if policy.mode == Mode::Anonymity {
        if ip.fragment {
            return Verdict::Drop(DropReason::Fragment);
        }
        if ip.options {
            return Verdict::Drop(DropReason::Ipv4Options);
        }
        if ip.extensions {
            return Verdict::Drop(DropReason::Ipv6Extension);
        }
        normalize(p, &ip, policy.hop_limit);
    } else if ip.fragment {
        return match ip.proto {
            proto::TCP | proto::UDP => Verdict::Reassemble,
            _ => Verdict::Drop(DropReason::Protocol),
        };
    }
    let Some(l4) = p.get(ip.l4..) else {
        return Verdict::Drop(DropReason::Malformed);
    };
    match ip.proto {
        proto::TCP => tcp(&ip, l4),
        proto::UDP => udp(policy, c, &ip, p),
        _ => Verdict::Drop(DropReason::Protocol),
    }
}

fn tcp(ip: &IpInfo, l4: &[u8]) -> Verdict {
    let parse = || -> Option<TcpInfo> {
        let sport = be16(l4, 0)?;
        let dport = be16(l4, 2)?;
        let seq = be32(l4, 4)?;
        let doff = usize::from(l4.get(12)? >> 4) * 4;
        let flags = *l4.get(13)?;
        if doff < 20 || doff > l4.len() || sport == 0 || dport == 0 {
            return None;
        }
        Some(TcpInfo {
            src: SocketAddr::new(ip.src, sport),
            dst: SocketAddr::new(ip.dst, dport),
            flags,
            seq,
            payload_len: l4.len().checked_sub(doff)?,
        })
    };
    match parse() {
        Some(t) if transport_ok(ip, proto::TCP, l4) => Verdict::Tcp(t),
        _ => Verdict::Drop(DropReason::Malformed),
    }
}

/// Whether the TCP or UDP checksum of `l4` is right (an IPv4 UDP
/// checksum of 0 means none was computed).
fn transport_ok(ip: &IpInfo, proto: u8, l4: &[u8]) -> bool {
    if proto == proto::UDP && ip.src.is_ipv4() && be16(l4, 6) == Some(0) {
        return true;
    }
    build::l4_checksum(ip.src, ip.dst, proto, l4) == Some(0)
}

fn udp(policy: &Policy, c: &mut Counters, ip: &IpInfo, p: &[u8]) -> Verdict {
    let parse = || -> Option<(u16, u16, Range<usize>)> {
        let l4 = p.get(ip.l4..)?;
        let sport = be16(l4, 0)?;
        let dport = be16(l4, 2)?;
        let len = usize::from(be16(l4, 4)?);
        if len < 8 || len > l4.len() {
            return None;
        }
        let start = ip.l4.checked_add(8)?;
        Some((sport, dport, start..ip.l4.checked_add(len)?))
    };
    let Some((sport, dport, payload)) = parse() else {
        return Verdict::Drop(DropReason::Malformed);
    };
    let datagram = ip.l4..payload.end;
    if !p
        .get(datagram)
        .is_some_and(|u| transport_ok(ip, proto::UDP, u))
    {
        return Verdict::Drop(DropReason::Malformed);
    }
    let to_resolver = match ip.dst {
        IpAddr::V4(d) => d == policy.resolver_v4,
        IpAddr::V6(d) => Some(d) == policy.resolver_v6,
    };
    if to_resolver && dport == 53 && sport != 0 {
        return Verdict::Dns {
            src: SocketAddr::new(ip.src, sport),
            dst: SocketAddr::new(ip.dst, dport),
            payload,
        };
    }
    if policy.carry_udp && sport != 0 && dport != 0 {
        return Verdict::Udp {
            src: SocketAddr::new(ip.src, sport),
            dst: SocketAddr::new(ip.dst, dport),
            payload,
        };
    }
    match udp_fallback(policy, c, p) {
        Some(r) => Verdict::Reply(r),
        None => Verdict::Drop(DropReason::Udp),
    }
}

/// The answer the policy gives a UDP packet it does not carry: ICMP port
/// unreachable (counted), or none (the caller counts the drop).
pub fn udp_fallback(policy: &Policy, c: &mut Counters, p: &[u8]) -> Option<Vec<u8>> {
    match policy.udp {
        UdpPolicy::Drop => None,
        UdpPolicy::IcmpUnreachable => {
            let r = icmp_unreachable(p, Unreachable::Port, policy.hop_limit)?;
            counters::inc(&mut c.icmp_unreachable);
            Some(r)
        }
    }
}

#[cfg(test)]
mod tests;
