//! crates/testbed: the sink's HTTP request handling and DNS server, and
//! the control-port events read from stock tor.

use std::net::{IpAddr, Ipv4Addr};

use onionmix_http::parse_request_head;
use onionmix_node::relay::dns;
use onionmix_testbed::sink::{self, SinkAnswer, TEST_DOMAIN, answer_for, dns_answer, dns_question};
use onionmix_testbed::torctl::{parse_circ_event, parse_iso_usec};

/// A request head at the sink: parsed with the sink's limits and
/// answered (the decision only, no bytes are generated).
pub fn sink_http(data: &[u8]) {
    let Ok(Some(head)) = parse_request_head(data, &sink::HEAD_LIMITS) else {
        return;
    };
    match answer_for(&head) {
        SinkAnswer::Bytes { n, digest } => {
            assert!(n <= sink::MAX_BYTES);
            let prefix = if digest { "/bytes/" } else { "/stream/" };
            assert!(head.path.starts_with(prefix));
            assert!(head.method == "GET" || head.method == "HEAD");
        }
        SinkAnswer::Index => assert_eq!(head.path, "/"),
        _ => {}
    }
}

/// A DNS query at the sink's resolver. Whatever it answers, an exit's
/// resolver must read: the sink's address for A queries under the test
/// domain, nothing otherwise. Also the other direction: a query the exit
/// builds for a name from the input must be read back as that name.
pub fn sink_dns(data: &[u8]) {
    let ip = Ipv4Addr::new(10, 9, 8, 7);
    if let Some((name, qtype, qend)) = dns_question(data) {
        assert!(qend <= data.len());
        let r = dns_answer(data, ip).expect("a question gets an answer");
        let id = u16::from_be_bytes([data[0], data[1]]);
        let addrs = dns::parse(&r, id).expect("exits read the sink's answers");
        let ours = name == TEST_DOMAIN || name.ends_with(&format!(".{TEST_DOMAIN}"));
        if ours && qtype == 1 {
            assert_eq!(addrs, vec![IpAddr::V4(ip)]);
        } else {
            assert!(addrs.is_empty());
        }
    }
    if let Ok(name) = std::str::from_utf8(data)
        && let Some(q) = dns::query(0x1234, name, 1)
    {
        // Both sides use the one codec (onionmix-tunnel's `dns::wire`):
        // whatever query an exit builds, the sink reads.
        let (n, t, end) = dns_question(&q).expect("the sink reads an exit's query");
        if name.bytes().all(|b| b.is_ascii_graphic()) {
            assert_eq!(n, name.trim_end_matches('.').to_ascii_lowercase());
        }
        assert_eq!((t, end), (1, q.len()));
    }
}

/// A line from stock tor's control port (`650 CIRC ...` events and their
/// ISO times), as the testbed's circuit watcher reads them.
pub fn torctl_event(data: &[u8]) {
    let Ok(line) = std::str::from_utf8(data) else {
        return;
    };
    if let Some(ev) = parse_circ_event(line) {
        assert!(!ev.id.is_empty() && !ev.id.contains(' '));
        assert!(!ev.status.is_empty());
        if let Some(t) = ev.created_unix {
            assert!(t.is_finite() && t >= 0.0);
        }
    }
    if let Some(t) = parse_iso_usec(line.trim()) {
        assert!(t.is_finite() && t >= 0.0);
    }
}
