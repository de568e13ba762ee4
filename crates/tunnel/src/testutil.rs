//! Packets for the unit tests.
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;

use crate::packet::build::{ip_header, l4_checksum};
use crate::packet::proto;

pub(crate) fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// A TCP segment with a valid checksum.
pub(crate) fn tcp_pkt(
    src: SocketAddr,
    dst: SocketAddr,
    flags: u8,
    seq: u32,
    payload: &[u8],
) -> Vec<u8> {
    let mut t = Vec::new();
    t.extend_from_slice(&src.port().to_be_bytes());
    t.extend_from_slice(&dst.port().to_be_bytes());
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&0u32.to_be_bytes());
    t.extend_from_slice(&[0x50, flags, 0xff, 0xff, 0, 0, 0, 0]);
    t.extend_from_slice(payload);
    let sum = l4_checksum(src.ip(), dst.ip(), proto::TCP, &t).unwrap();
    t[16..18].copy_from_slice(&sum.to_be_bytes());
    let mut p = ip_header(src.ip(), dst.ip(), proto::TCP, t.len(), 57).unwrap();
    p.extend_from_slice(&t);
    p
}
