//! SOCKS5 UDP datagrams (RFC 1928 §7): after UDP ASSOCIATE, every datagram
//! between the client and the proxy's relay port starts with
//! `RSV(2) FRAG(1) ATYP DST.ADDR DST.PORT`, then the payload. Fragments
//! (FRAG != 0) are not supported (RFC 1928 makes them optional): such
//! datagrams are refused, as are malformed ones.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use onionmix_cell::relay::TargetHost;

use crate::socks::SocksError;

/// Longest header: a 255-byte hostname.
pub const MAX_HEADER: usize = 4 + 1 + 255 + 2;

/// The header for a datagram to or from `host:port`, then `payload`.
/// `None` for a hostname longer than 255 bytes.
pub fn encode(host: &TargetHost, port: u16, payload: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(MAX_HEADER.saturating_add(payload.len()));
    out.extend_from_slice(&[0, 0, 0]);
    match host {
        TargetHost::Ip(IpAddr::V4(a)) => {
            out.push(1);
            out.extend_from_slice(&a.octets());
        }
        TargetHost::Ip(IpAddr::V6(a)) => {
            out.push(4);
            out.extend_from_slice(&a.octets());
        }
        TargetHost::Hostname(h) => {
            out.push(3);
            out.push(u8::try_from(h.len()).ok()?);
            out.extend_from_slice(h.as_bytes());
        }
    }
    out.extend_from_slice(&port.to_be_bytes());
    out.extend_from_slice(payload);
    Some(out)
}

/// Split a datagram into its address, port and payload.
pub fn parse(d: &[u8]) -> Result<(TargetHost, u16, &[u8]), SocksError> {
    let m = SocksError::Malformed("UDP request header");
    let head = d.get(..4).ok_or(m.clone())?;
    if head[0] != 0 || head[1] != 0 {
        return Err(m);
    }
    if head[2] != 0 {
        return Err(SocksError::Malformed("UDP fragments are not supported"));
    }
    let (host, at) = match head[3] {
        1 => {
            let a: [u8; 4] = d
                .get(4..8)
                .ok_or(m.clone())?
                .try_into()
                .map_err(|_| m.clone())?;
            (TargetHost::Ip(IpAddr::V4(Ipv4Addr::from(a))), 8)
        }
        4 => {
            let a: [u8; 16] = d
                .get(4..20)
                .ok_or(m.clone())?
                .try_into()
                .map_err(|_| m.clone())?;
            (TargetHost::Ip(IpAddr::V6(Ipv6Addr::from(a))), 20)
        }
        3 => {
            let n = usize::from(*d.get(4).ok_or(m.clone())?);
            let end = 5usize.checked_add(n).ok_or(m.clone())?;
            let name = d.get(5..end).ok_or(m.clone())?;
            let name =
                std::str::from_utf8(name).map_err(|_| SocksError::Hostname("not UTF-8".into()))?;
            onionmix_cell::relay::validate_hostname(name)
                .map_err(|e| SocksError::Hostname(e.to_string()))?;
            (TargetHost::Hostname(name.to_ascii_lowercase()), end)
        }
        t => return Err(SocksError::AddrType(t)),
    };
    let p = d
        .get(at..at.checked_add(2).ok_or(m.clone())?)
        .ok_or(m.clone())?;
    let port = u16::from_be_bytes([p[0], p[1]]);
    let payload = d.get(at + 2..).ok_or(m)?;
    Ok((host, port, payload))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn round_trips_and_refusals() {
        for host in [
            TargetHost::Ip("192.0.2.1".parse().unwrap()),
            TargetHost::Ip("2001:db8::1".parse().unwrap()),
            TargetHost::Hostname("echo.example".into()),
        ] {
            let d = encode(&host, 7, b"ping").unwrap();
            let (h, p, payload) = parse(&d).unwrap();
            assert_eq!((h, p, payload), (host.clone(), 7, &b"ping"[..]));
            // Every truncation is an error, never a panic.
            for n in 0..d.len() - 4 {
                assert!(parse(&d[..n]).is_err(), "{n}");
            }
        }
        let mut frag = encode(&TargetHost::Hostname("a.b".into()), 1, b"x").unwrap();
        frag[2] = 1;
        assert!(parse(&frag).is_err());
        let mut rsv = frag.clone();
        rsv[2] = 0;
        rsv[0] = 1;
        assert!(parse(&rsv).is_err());
        assert!(parse(&[0, 0, 0, 9, 1, 2]).is_err());
        assert!(encode(&TargetHost::Hostname("a".repeat(256)), 1, b"").is_none());
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_datagrams_never_panic(d in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = parse(&d);
        }
    }
}
