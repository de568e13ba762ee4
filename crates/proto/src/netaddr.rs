//! Which addresses are internal (tor's `tor_addr_is_internal`): private,
//! loopback, link-local, shared-address-space and unspecified ranges, for
//! IPv4, IPv6 and IPv4 mapped into IPv6. One definition for every check
//! that keeps a node from reaching, or being sent to, its own network: a
//! client refusing a private destination, a relay refusing to extend to
//! one, an authority refusing to list one.
//! Also the one grouping of addresses for per-address limits
//! ([`limit_key`]).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The key under which per-address limits count a peer: IPv4 addresses
/// as they are, IPv6 by /64 (one host usually has a whole /64). An IPv4
/// address mapped into IPv6 (`::ffff:a.b.c.d`, how a dual-stack socket
/// reports an IPv4 peer) is its IPv4 address: by /64 every IPv4 peer of
/// such a socket would share one key.
pub fn limit_key(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V4(v) => IpAddr::V4(v),
        IpAddr::V6(a) => {
            let s = a.segments();
            IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
        }
    }
}

/// Whether no relay can be at `ip`: multicast, broadcast or reserved
/// (240/4), IPv4-mapped too. A relay refuses to extend there, over TCP or
/// QUIC, whatever else it allows.
pub fn is_unroutable(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v) => v.is_multicast() || v.is_broadcast() || v.octets()[0] >= 240,
        IpAddr::V6(v) => v.is_multicast(),
    }
}

/// Whether `ip` is internal: not to be reached through, or by, the
/// public network.
pub fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v) => is_internal_v4(v),
        IpAddr::V6(v) => is_internal_v6(v),
    }
}

/// IPv4: 0/8, 10/8, 100.64/10, 127/8, 169.254/16, 172.16/12, 192.168/16.
pub fn is_internal_v4(v: Ipv4Addr) -> bool {
    let o = v.octets();
    o[0] == 0
        || o[0] == 10
        || (o[0] == 100 && (o[1] & 0xC0) == 64)
        || o[0] == 127
        || (o[0] == 169 && o[1] == 254)
        || (o[0] == 172 && (o[1] & 0xF0) == 16)
        || (o[0] == 192 && o[1] == 168)
}

/// IPv6: `::`, `::1`, fc00::/7, fe80::/10, fec0::/10, and IPv4-mapped
/// (`::ffff:a.b.c.d`) internal addresses.
pub fn is_internal_v6(v: Ipv6Addr) -> bool {
    if let Some(v4) = v.to_ipv4_mapped() {
        return is_internal_v4(v4);
    }
    let s = v.segments();
    v.is_unspecified()
        || v.is_loopback()
        || (s[0] & 0xFE00) == 0xFC00
        || (s[0] & 0xFFC0) == 0xFE80
        || (s[0] & 0xFFC0) == 0xFEC0
}

/// Whether a host name is one tor takes for this machine (`localhost`,
/// `local`, and names ending in `.local` or `.localhost`), whatever a
/// resolver would say.
pub fn is_local_hostname(name: &str) -> bool {
    let n = name.trim_end_matches('.').to_ascii_lowercase();
    n == "localhost" || n == "local" || n.ends_with(".local") || n.ends_with(".localhost")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap_or_else(|_| panic!("{s}"))
    }

    #[test]
    fn limit_keys_and_unroutable_addresses() {
        assert_eq!(limit_key(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(limit_key(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_ne!(
            limit_key(ip("::ffff:192.0.2.7")),
            limit_key(ip("::ffff:198.51.100.1"))
        );
        assert_eq!(limit_key(ip("2001:db8:1:2:3:4:5:6")), ip("2001:db8:1:2::"));
        for s in [
            "224.0.0.251",
            "239.255.255.250",
            "255.255.255.255",
            "240.0.0.1",
            "ff02::fb",
            "::ffff:224.0.0.251",
        ] {
            assert!(is_unroutable(ip(s)), "{s}");
        }
        for s in ["192.0.2.7", "10.0.0.1", "2001:db8::1", "::ffff:192.0.2.7"] {
            assert!(!is_unroutable(ip(s)), "{s}");
        }
    }

    #[test]
    fn internal_ranges_as_tor() {
        for s in [
            "0.1.2.3",
            "10.77.0.1",
            "100.64.0.1",
            "100.127.255.255",
            "127.0.0.1",
            "169.254.1.1",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "::",
            "::1",
            "fc00::1",
            "fd12::1",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
        ] {
            assert!(is_internal(ip(s)), "{s}");
        }
        for s in [
            "1.1.1.1",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.0.1",
            "172.32.0.1",
            "192.169.0.1",
            "2001:db8::1",
            "::ffff:1.1.1.1",
            "ff02::1",
        ] {
            assert!(!is_internal(ip(s)), "{s}");
        }
    }

    #[test]
    fn local_names() {
        for n in [
            "localhost",
            "LOCALHOST.",
            "local",
            "printer.local",
            "a.localhost",
        ] {
            assert!(is_local_hostname(n), "{n}");
        }
        for n in ["example.com", "localhost.example", "notlocal"] {
            assert!(!is_local_hostname(n), "{n}");
        }
    }
}
