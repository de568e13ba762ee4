//! crates/frontend: the SOCKS4/4a/5 server handshake and the `.onion` /
//! `.exit` name checks.

use std::net::{IpAddr, Ipv4Addr};

use onionmix_cell::relay::TargetHost;
use onionmix_frontend::addr::{HostKind, classify, encode_onion_v3, parse_onion_v3};
use onionmix_frontend::socks::{
    SocksError, SocksHandshake, SocksRequest, reply_code, reply_hostname,
};

use crate::input::chunks;

#[derive(Debug, PartialEq)]
enum Outcome {
    Request(SocksRequest),
    Failed(SocksError),
    Incomplete,
}

/// Feed `input` in the given pieces the way the SOCKS listener does:
/// append to a buffer, let the machine consume whole messages, keep the
/// rest. Returns the replies written and how it ended.
fn drive(input: &[u8], pieces: &[std::ops::Range<usize>]) -> (Vec<u8>, Outcome) {
    let mut hs = SocksHandshake::new();
    let mut buf = Vec::new();
    let mut replies = Vec::new();
    for r in pieces {
        buf.extend_from_slice(&input[r.clone()]);
        match hs.handle(&buf) {
            Ok(step) => {
                assert!(step.consumed <= buf.len());
                buf.drain(..step.consumed);
                replies.extend_from_slice(&step.reply);
                if let Some(req) = step.request {
                    assert!(hs.is_done());
                    return (replies, Outcome::Request(req));
                }
            }
            Err(e) => {
                if let Some(r) = hs.error_reply(&e) {
                    replies.extend_from_slice(&r);
                }
                return (replies, Outcome::Failed(e));
            }
        }
    }
    (replies, Outcome::Incomplete)
}

/// A SOCKS client's bytes (SOCKS4, SOCKS4a, SOCKS5 with or without
/// username/password). First byte: how to split the rest. Fed whole and
/// fed in pieces the handshake must answer the same and end the same.
pub fn socks(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let whole: Vec<std::ops::Range<usize>> = std::iter::once(0..rest.len())
        .filter(|r| !r.is_empty())
        .collect();
    let (r1, o1) = drive(rest, &whole);
    let (r2, o2) = drive(rest, &chunks(rest.len(), &[sel, sel >> 4, 0]));
    assert_eq!(o1, o2, "SOCKS fed in pieces ends differently");
    // On an error the replies to earlier messages in the same read are
    // not returned (the machine hands back only the error), so replies
    // are compared when the handshake did not fail.
    if !matches!(o1, Outcome::Failed(_)) {
        assert_eq!(r1, r2, "SOCKS fed in pieces answers differently");
    }
    if let Outcome::Request(req) = o1 {
        assert!(!(req.port == 0 && req.cmd == onionmix_frontend::socks::SocksCmd::Connect));
        let _ = req.reply(
            reply_code::SUCCEEDED,
            Some((IpAddr::V4(Ipv4Addr::LOCALHOST), 80)),
        );
        let _ = req.reply(reply_code::GENERAL_FAILURE, None);
        if let TargetHost::Hostname(h) = &req.host {
            // What the client decides before anything leaves the process.
            let kind = classify(h);
            let _ = kind.is_local_only();
            let _ = reply_hostname(h);
        }
    }
    // The same bytes as a datagram after UDP ASSOCIATE: what parses
    // encodes back to bytes that parse the same.
    if let Ok((host, port, payload)) = onionmix_frontend::socks_udp::parse(rest) {
        let again = onionmix_frontend::socks_udp::encode(&host, port, payload)
            .expect("a parsed name fits its length byte");
        let back = onionmix_frontend::socks_udp::parse(&again).expect("our own header parses");
        assert_eq!(back, (host, port, payload));
    }
}

/// Hostnames a SOCKS client asks for: `.onion` and `.exit` classification
/// and v3 onion address decoding. A decoded address encodes back to the
/// same label.
pub fn onion_addr(data: &[u8]) {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let HostKind::Onion { key } = classify(s) {
        let label = s
            .trim_end_matches('.')
            .to_ascii_lowercase()
            .strip_suffix(".onion")
            .map(|r| r.rsplit('.').next().unwrap_or(r).to_string())
            .unwrap_or_default();
        assert_eq!(encode_onion_v3(&key), label, "onion address round trip");
    }
    if let Ok(key) = parse_onion_v3(s) {
        assert!(encode_onion_v3(&key).eq_ignore_ascii_case(s));
        assert_eq!(parse_onion_v3(&encode_onion_v3(&key)), Ok(key));
    }
}
