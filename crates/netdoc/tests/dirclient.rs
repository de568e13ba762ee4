//! The HTTP codec on raw responses captured from a stock tor DirPort.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use common::*;
use onionmix_netdoc::dirclient::{DEFAULT_MAX_CONSENSUS_LEN, parse_response};
use onionmix_netdoc::{DirClientError, DirRequest, ResponseParser};
use rand::{Rng, SeedableRng};

#[test]
fn captured_deflate_consensus() {
    let raw = data_bytes("raw-consensus-deflate.http");
    let r = parse_response(&raw, DEFAULT_MAX_CONSENSUS_LEN).unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-encoding"), Some("deflate"));
    assert_eq!(r.body_text().unwrap(), consensus_text());
}

#[test]
fn captured_identity_consensus() {
    let raw = data_bytes("raw-consensus-identity.http");
    let r = DirRequest::microdesc_consensus().response_parser();
    let mut p = r;
    p.push(&raw).unwrap();
    let r = p.finish().unwrap();
    assert_eq!(r.body_text().unwrap(), consensus_text());
}

#[test]
fn captured_keys_and_microdescs() {
    let r = parse_response(&data_bytes("raw-keys-deflate.http"), 1 << 20).unwrap();
    assert_eq!(r.body_text().unwrap(), data("keys-all"));
    let r = parse_response(&data_bytes("raw-micro-deflate.http"), 1 << 20).unwrap();
    assert_eq!(r.body_text().unwrap(), data("microdescs"));
}

#[test]
fn captured_404() {
    let r = parse_response(&data_bytes("raw-micro-404.http"), 1 << 20);
    assert_eq!(
        r,
        Err(DirClientError::HttpStatus {
            code: 404,
            reason: "Not found".into()
        })
    );
}

#[test]
fn random_chunking_gives_same_result() {
    let raw = data_bytes("raw-consensus-deflate.http");
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
    for _ in 0..20 {
        let mut p = ResponseParser::new(DEFAULT_MAX_CONSENSUS_LEN);
        let mut off = 0;
        while off < raw.len() {
            let n = rng.gen_range(1..=300).min(raw.len() - off);
            p.push(&raw[off..off + n]).unwrap();
            off += n;
        }
        assert_eq!(p.status(), Some(200));
        assert_eq!(p.finish().unwrap().body_text().unwrap(), consensus_text());
    }
}

#[test]
fn truncated_and_oversized() {
    let raw = data_bytes("raw-consensus-deflate.http");
    // Cut inside the compressed body: no Content-Length, so the zlib stream
    // itself reveals the truncation.
    let cut = &raw[..raw.len() - 100];
    assert!(matches!(
        parse_response(cut, DEFAULT_MAX_CONSENSUS_LEN),
        Err(DirClientError::Truncated(_) | DirClientError::Decompress(_))
    ));
    // Decoded body above the limit.
    assert!(matches!(
        parse_response(&raw, 4000),
        Err(DirClientError::TooLarge { .. })
    ));
    // Identity body above the limit.
    let raw = data_bytes("raw-consensus-identity.http");
    assert!(matches!(
        parse_response(&raw, 1000),
        Err(DirClientError::TooLarge { .. })
    ));
}

#[test]
fn requests_for_the_network() {
    let auths = authorities();
    let fps: Vec<[u8; 20]> = auths.iter().map(|a| a.v3ident).collect();
    let r = DirRequest::authority_certs(&fps).unwrap();
    assert!(
        r.path()
            .starts_with("/tor/keys/fp/73EB8750A9DB5F6931BD2734F577C69D33FC92EC+")
    );
    let nd = netdir();
    let digests: Vec<[u8; 32]> = nd.listed().iter().map(|r| r.md_digest).collect();
    let reqs = DirRequest::microdesc_batches(&digests);
    assert_eq!(reqs.len(), 1);
    // Same URL shape that produced the captured response with curl.
    assert!(reqs[0].path().starts_with("/tor/micro/d/"));
    assert_eq!(reqs[0].path().matches('-').count(), 6);
    let text = String::from_utf8(reqs[0].encode(Some("127.0.0.1:27111"))).unwrap();
    assert!(text.starts_with("GET /tor/micro/d/"));
    assert!(text.ends_with("Accept-Encoding: deflate, identity\r\n\r\n"));
}
