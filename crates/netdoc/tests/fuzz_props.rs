//! Property tests: parsers never panic on random or mutated input.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::LazyLock;

use common::*;
use onionmix_netdoc::dirclient::parse_response;
use onionmix_netdoc::{
    AuthCertificate, AuthorityConfig, GuardParams, GuardSet, Microdesc, PortPolicy, Protocols,
    ResponseParser, UnverifiedConsensus, parse_microdescs,
};
use proptest::prelude::*;

static CONSENSUS: LazyLock<String> = LazyLock::new(consensus_text);
static KEYS: LazyLock<String> = LazyLock::new(|| data("keys-all"));
static MDS: LazyLock<String> = LazyLock::new(|| data("microdescs"));
static RAW: LazyLock<Vec<u8>> = LazyLock::new(|| data_bytes("raw-consensus-deflate.http"));

#[derive(Debug, Clone)]
enum Mutation {
    Flip(usize, u8),
    Delete(usize, usize),
    Insert(usize, Vec<u8>),
    Truncate(usize),
    DupLine(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Flip(i, b)),
        (any::<usize>(), 1usize..200).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (
            any::<usize>(),
            proptest::collection::vec(any::<u8>(), 1..40)
        )
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        any::<usize>().prop_map(Mutation::Truncate),
        any::<usize>().prop_map(Mutation::DupLine),
        (
            any::<usize>(),
            prop::sample::select(vec![
                b"\n".to_vec(),
                b" ".to_vec(),
                b"-----BEGIN SIGNATURE-----\n".to_vec(),
                b"r x AAAAAAAAAAAAAAAAAAAAAAAAAAA 2038-01-01 00:00:00 1.2.3.4 1 0\n".to_vec(),
                b"p accept 1-65535\n".to_vec(),
                b"family $00\n".to_vec(),
                b"=".to_vec(),
                b"w Bandwidth=99999999999\n".to_vec(),
                b"\r\n".to_vec(),
                b"\0".to_vec(),
            ])
        )
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
    ]
}

fn apply(base: &[u8], muts: &[Mutation]) -> Vec<u8> {
    let mut v = base.to_vec();
    for m in muts {
        if v.is_empty() {
            break;
        }
        match m {
            Mutation::Flip(i, b) => {
                let i = i % v.len();
                v[i] = *b;
            }
            Mutation::Delete(i, n) => {
                let i = i % v.len();
                let end = (i + n).min(v.len());
                v.drain(i..end);
            }
            Mutation::Insert(i, data) => {
                let i = i % (v.len() + 1);
                v.splice(i..i, data.iter().copied());
            }
            Mutation::Truncate(i) => v.truncate(i % (v.len() + 1)),
            Mutation::DupLine(i) => {
                let i = i % v.len();
                let start = v[..i]
                    .iter()
                    .rposition(|b| *b == b'\n')
                    .map_or(0, |p| p + 1);
                let end = v[i..]
                    .iter()
                    .position(|b| *b == b'\n')
                    .map_or(v.len(), |p| i + p + 1);
                let line = v[start..end].to_vec();
                v.splice(end..end, line);
            }
        }
    }
    v
}

fn text(v: &[u8]) -> String {
    String::from_utf8_lossy(v).into_owned()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn http_random(bytes in proptest::collection::vec(any::<u8>(), 0..2000), limit in 0usize..5000) {
        let _ = parse_response(&bytes, limit);
    }

    #[test]
    fn http_mutated(muts in proptest::collection::vec(mutation(), 1..6), split in any::<usize>()) {
        let v = apply(&RAW, &muts);
        let _ = parse_response(&v, 1 << 20);
        let mut p = ResponseParser::new(1 << 20);
        let s = split % (v.len() + 1);
        if p.push(&v[..s]).is_ok() && p.push(&v[s..]).is_ok() {
            let _ = p.finish();
        }
    }

    #[test]
    fn http_header_fragments(status in "[A-Z/0-9. ]{0,20}", hdrs in proptest::collection::vec("[A-Za-z-]{0,12}:? ?[ -~]{0,20}", 0..8), body in proptest::collection::vec(any::<u8>(), 0..100)) {
        let mut raw = format!("{status}\r\n");
        for h in hdrs {
            raw.push_str(&h);
            raw.push_str("\r\n");
        }
        raw.push_str("\r\n");
        let mut v = raw.into_bytes();
        v.extend(body);
        let _ = parse_response(&v, 1000);
    }

    #[test]
    fn consensus_mutated(muts in proptest::collection::vec(mutation(), 1..6)) {
        let t = text(&apply(CONSENSUS.as_bytes(), &muts));
        if let Ok(u) = UnverifiedConsensus::parse(&t) {
            let _ = u.verify(&authorities(), &[], now(), Default::default());
        }
    }

    #[test]
    fn consensus_random(s in "\\PC{0,600}") {
        let _ = UnverifiedConsensus::parse(&format!("network-status-version 3 microdesc\n{s}"));
        let _ = UnverifiedConsensus::parse(&s);
    }

    #[test]
    fn certs_mutated(muts in proptest::collection::vec(mutation(), 1..6)) {
        let t = text(&apply(KEYS.as_bytes(), &muts));
        let _ = AuthCertificate::parse_all(&t, now());
        let _ = AuthCertificate::parse(&t, now());
    }

    #[test]
    fn microdescs_mutated(muts in proptest::collection::vec(mutation(), 1..6)) {
        let t = text(&apply(MDS.as_bytes(), &muts));
        let b = parse_microdescs(&t);
        prop_assert!(b.microdescs.len() + b.errors.len() <= 65_537);
        let _ = Microdesc::parse(&t);
    }

    #[test]
    fn microdescs_random(s in "\\PC{0,400}") {
        let _ = parse_microdescs(&s);
        let _ = parse_microdescs(&format!("onion-key\n{s}"));
    }

    #[test]
    fn small_values(s in "[ -~]{0,60}") {
        let _ = s.parse::<PortPolicy>();
        let _ = s.parse::<Protocols>();
        let _ = AuthorityConfig::from_dirauthority_line(&s);
        let _ = GuardSet::from_json(&s, GuardParams::default());
        if let Ok(p) = s.parse::<PortPolicy>() {
            // Display/parse round trip.
            prop_assert_eq!(p.to_string().parse::<PortPolicy>().unwrap(), p);
        }
    }

    #[test]
    fn policy_roundtrip(ranges in proptest::collection::vec((1u16..=65535, 0u16..300), 0..20)) {
        let r: Vec<(u16, u16)> = ranges.iter().map(|&(a, n)| (a, a.saturating_add(n))).collect();
        let p = PortPolicy::accepting(&r);
        let back: PortPolicy = p.to_string().parse().unwrap();
        prop_assert_eq!(&back, &p);
        for &(a, b) in &r {
            prop_assert!(p.allows_port(a) && p.allows_port(b));
        }
    }
}
