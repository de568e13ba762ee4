//! Interop: our link handshake, CREATE2/ntor, tor1 relay crypto and a
//! BEGIN_DIR stream against one stock tor relay.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

mod common;

use std::time::Duration;

use onionmix_link::TlsTransport;
use onionmix_node::client::chanmgr::ChanMgr;
use onionmix_node::client::circuit::{self, HopTarget};
use onionmix_node::reactor::{StreamEvent, StreamRequest};

fn read_relay_target(dir: &std::path::Path, or_port: u16) -> Option<HopTarget> {
    let fp = std::fs::read_to_string(dir.join("fingerprint")).ok()?;
    let hex_id = fp.split_whitespace().nth(1)?;
    let rsa_id: [u8; 20] = hex::decode(hex_id).ok()?.try_into().ok()?;
    let ed = std::fs::read_to_string(dir.join("fingerprint-ed25519")).ok()?;
    let ed_b64 = ed.split_whitespace().nth(1)?;
    let ed_id = base64_decode_unpadded(ed_b64)?;
    let ntor = std::fs::read(dir.join("keys/secret_onion_key_ntor")).ok()?;
    // "== c25519v1: onion ==" header (32 bytes), secret (32), public (32).
    let ntor_key: [u8; 32] = ntor.get(64..96)?.try_into().ok()?;
    Some(HopTarget {
        nickname: "stocktor".into(),
        rsa_id,
        ed_id: Some(ed_id),
        or_addr: format!("127.0.0.1:{or_port}").parse().ok()?,
        ntor_key,
        ntor_v3: false,
        optimistic_data: true,
        flowctrl_cc: false,
        quic_port: None,
        datagram: false,
        params: None,
    })
}

fn base64_decode_unpadded(s: &str) -> Option<[u8; 32]> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(s.trim_end_matches('='))
        .ok()?
        .try_into()
        .ok()
}

#[test]
fn one_hop_begin_dir_against_stock_tor() {
    if !common::tor_available("one_hop_begin_dir_against_stock_tor") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let or_port = common::free_port();
    let dir_port = common::free_port();
    let torrc = format!(
        "DataDirectory {d}\nORPort 127.0.0.1:{or_port}\nDirPort 127.0.0.1:{dir_port}\nAddress 127.0.0.1\n\
         Nickname stocktor\nSocksPort 0\nPublishServerDescriptor 0\nAssumeReachable 1\nExitRelay 0\n\
         Sandbox 0\nLog notice stdout\nContactInfo test@example.invalid\n",
        d = tmp.path().display()
    );
    let _tor = common::start_tor(tmp.path(), &torrc);
    let log = tmp.path().join("tor.log");
    let target = common::wait_for("tor keys and ORPort", Duration::from_secs(60), &log, || {
        let t = read_relay_target(tmp.path(), or_port)?;
        std::net::TcpStream::connect(t.or_addr).ok()?;
        Some(t)
    });

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mgr = ChanMgr::new(TlsTransport::client().unwrap());
        let chan = mgr
            .get(&target)
            .await
            .expect("link handshake with stock tor");
        assert_eq!(chan.peer_rsa_id, target.rsa_id);
        let circ = circuit::build(chan, vec![target.clone()], Duration::from_secs(20))
            .await
            .expect("CREATE2/ntor with stock tor");
        let (mut stream, ev) = circ
            .open_stream(StreamRequest::BeginDir, Duration::from_secs(20))
            .await
            .expect("BEGIN_DIR");
        assert!(matches!(ev, StreamEvent::Connected(_)));
        stream
            .write_all(b"GET /tor/server/authority HTTP/1.0\r\n\r\n")
            .await
            .unwrap();
        let body = stream
            .read_to_end(1 << 20, Duration::from_secs(20))
            .await
            .unwrap();
        let text = String::from_utf8_lossy(&body);
        // An unpublished relay answers 404 for its own descriptor: what
        // matters is a well-formed HTTP answer through our crypto.
        assert!(
            text.starts_with("HTTP/1.0 "),
            "got: {}",
            &text[..text.len().min(200)]
        );

        // A wrong expected identity is refused.
        let mut wrong = target.clone();
        wrong.rsa_id[0] ^= 1;
        let err = mgr.connect(&wrong).await.unwrap_err().to_string();
        assert!(err.contains("identity mismatch"), "{err}");
    });
}
