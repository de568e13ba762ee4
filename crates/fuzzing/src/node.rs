//! crates/node (and the exit policies of crates/proto it applies): the
//! exit's DNS answers, directory requests arriving by `BEGIN_DIR` and at
//! an authority's DirPort, and exit policies from descriptors and votes.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use onionmix_node::authority::http as dirport;
use onionmix_node::relay::{dircache, dns, exit};
use onionmix_proto::exitpolicy::{ExitPolicy, PortSummary, Rule};

/// A DNS answer to the exit's resolver (the message ID is the answer's
/// own first two bytes, so the fuzzer need not guess it). Also the exit's
/// query builder on a name from the input, which must produce a query the
/// answer parser can skip past.
pub fn exit_dns(data: &[u8]) {
    if data.len() >= 2 {
        let id = u16::from_be_bytes([data[0], data[1]]);
        if let Some(addrs) = dns::parse(data, id) {
            assert!(addrs.len() <= 64);
        }
    }
    if let Ok(name) = std::str::from_utf8(data)
        && let Some(q) = dns::query(7, name, 1)
    {
        // A query echoed back as an empty answer parses to no addresses.
        let mut r = q.clone();
        r[2] |= 0x80;
        assert_eq!(dns::parse(&r, 7), Some(Vec::new()));
    }
}

/// A raw HTTP request as a relay's directory cache (`BEGIN_DIR`) and an
/// authority's DirPort read it. Both must agree with the exit's "is the
/// request complete" check.
pub fn dir_request(data: &[u8]) {
    let cache = dircache::parse_request(data);
    let auth = dirport::parse_request(data);
    let complete = exit::dir_request_complete(data);
    if let Ok(g) = &cache {
        assert!(g.path.starts_with("/tor/"));
        assert!(g.path.len() <= 8192);
    }
    if let Ok(Some(r)) = &auth {
        assert!(r.path().starts_with("/tor/"));
        assert!(r.wire_len() <= data.len());
        // The DirPort's body limit is below BEGIN_DIR's, so the request is
        // complete there too.
        assert!(matches!(complete, Ok(true)) || r.body.len() > exit::MAX_DIR_REQUEST);
    }
}

/// Ports to probe a policy at: both ends of every range and around them.
fn probe_ports(ranges: &[(u16, u16)]) -> Vec<u16> {
    let mut v = vec![1, 22, 80, 443, 65535];
    for &(a, b) in ranges.iter().take(64) {
        v.extend([a.saturating_sub(1), a, b, b.saturating_add(1)]);
    }
    v
}

/// Exit policies: a rule list (a descriptor's accept/reject lines, one
/// per input line) and a port summary (a vote's or microdescriptor's `p`
/// line, the first line). A summary must print to a value that parses
/// back to the same ports; a policy's summary must print and parse too.
pub fn exit_policy(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let first = text.lines().next().unwrap_or("");
    if let Ok(s) = PortSummary::parse(first) {
        let line = s.to_line_value();
        let back = PortSummary::parse(&line).expect("a printed summary parses");
        for p in probe_ports(&s.accept) {
            assert_eq!(
                s.allows(p),
                back.allows(p),
                "port {p}: {first:?} printed as {line:?}"
            );
        }
        assert_eq!(back.to_line_value(), line);
    }
    let lines: Vec<&str> = text.lines().take(256).collect();
    for l in &lines {
        let _ = Rule::parse(l);
    }
    let Ok(policy) = ExitPolicy::parse(&lines) else {
        return;
    };
    let policy = if data.len().is_multiple_of(2) {
        policy.with_private_rejected()
    } else {
        policy
    };
    for ip in [
        IpAddr::V4(Ipv4Addr::new(10, 1, 2, 3)),
        IpAddr::V4(Ipv4Addr::new(93, 184, 216, 34)),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        IpAddr::V6("2001:db8::1".parse().expect("literal")),
    ] {
        for port in [0, 1, 80, 443, 65535] {
            let _ = policy.allows(&ip, port);
        }
    }
    for v6 in [false, true] {
        let s = policy.summary(v6);
        let line = s.to_line_value();
        let back = PortSummary::parse(&line).expect("our summary parses");
        for p in probe_ports(&s.accept) {
            assert_eq!(s.allows(p), back.allows(p), "port {p}: summary {line:?}");
            let _ = policy.allows_port_somewhere(p, v6);
        }
    }
}
