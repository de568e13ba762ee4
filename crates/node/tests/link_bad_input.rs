//! Bad input at the link layer: each broken responder makes that one
//! channel fail with a clear error, and the client keeps opening good
//! channels afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use onionmix_cell::chan::encode_versions;
use onionmix_cell::{CellCodec, ChanCmd, RawCell};
use onionmix_crypto::keys::RelayKeys;
use onionmix_crypto::x509::TlsIdentity;
use onionmix_link::TlsTransport;
use onionmix_node::client::chanmgr::ChanMgr;
use onionmix_node::client::circuit::HopTarget;
use onionmix_node::glue::RelayLinkIdentity;
use onionmix_node::relay::{self, config::RelayConfig};

use common::now;

#[derive(Clone, Copy)]
enum Misbehave {
    /// CERTS whose link certificate certifies a different TLS certificate.
    WrongTlsCert,
    /// A CERTS cell full of garbage.
    GarbageCerts,
    /// A variable-length cell claiming 65535 bytes in the handshake (past
    /// its 64 KiB limit; after the handshake such a cell is framed, as
    /// tor frames it).
    Oversized,
    /// Half a TLS record, then close.
    TruncatedTls,
}

/// A fake responder that misbehaves in one way. Returns its address and
/// the identity it claims.
async fn fake_relay(how: Misbehave) -> (SocketAddr, HopTarget) {
    let mut rng = rand::rngs::OsRng;
    let keys = RelayKeys::generate(&mut rng, now()).unwrap();
    let served = TlsIdentity::generate(&mut rng, &keys.rsa_identity, now(), 86400).unwrap();
    let other = TlsIdentity::generate(&mut rng, &keys.rsa_identity, now(), 86400).unwrap();
    let target_ids = (keys.rsa_id(), keys.ed_id(), keys.ntor.public());
    // The CERTS we send certify `other`, not the TLS cert we serve.
    let link = Arc::new(RelayLinkIdentity::new(keys, &other, now()).unwrap());
    let transport =
        TlsTransport::server(served.cert_der.clone(), served.key_pkcs8_der.to_vec()).unwrap();
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    tokio::spawn(async move {
        let Ok((tcp, _)) = l.accept().await else {
            return;
        };
        if let Misbehave::TruncatedTls = how {
            let mut tcp = tcp;
            let mut buf = [0u8; 512];
            let _ = tcp.read(&mut buf).await;
            // A handshake record header promising 16 KiB, then 10 bytes.
            let _ = tcp
                .write_all(&[0x16, 0x03, 0x03, 0x40, 0x00, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
                .await;
            return;
        }
        let Ok((mut tls, _)) = transport.accept(tcp).await else {
            return;
        };
        let mut buf = [0u8; 1024];
        let _ = tls.read(&mut buf).await;
        let mut out = BytesMut::new();
        let mut codec = CellCodec::new();
        let v = RawCell::var(0, ChanCmd::VERSIONS, &encode_versions(&[4, 5])).unwrap();
        codec.encode(&v, &mut out).unwrap();
        codec.set_link_version(5);
        match how {
            Misbehave::WrongTlsCert => {
                use onionmix_proto::channel::ResponderIdentity;
                let c = RawCell::var(0, ChanCmd::CERTS, link.certs_payload()).unwrap();
                codec.encode(&c, &mut out).unwrap();
            }
            Misbehave::GarbageCerts => {
                let c = RawCell::var(0, ChanCmd::CERTS, &[3, 2, 0, 5, 1, 2]).unwrap();
                codec.encode(&c, &mut out).unwrap();
            }
            Misbehave::Oversized => out.extend_from_slice(&[0, 0, 0, 0, 129, 0xff, 0xff]),
            Misbehave::TruncatedTls => {}
        }
        let _ = tls.write_all(&out).await;
        let _ = tls.flush().await;
        tokio::time::sleep(Duration::from_secs(3)).await;
    });
    let target = HopTarget {
        nickname: "fake".into(),
        rsa_id: target_ids.0,
        ed_id: Some(target_ids.1),
        or_addr: addr,
        ntor_key: target_ids.2,
        ntor_v3: false,
        optimistic_data: true,
        flowctrl_cc: false,
        quic_port: None,
        datagram: false,
        params: None,
    };
    (addr, target)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_responders_fail_cleanly() {
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let cases = [
        (Misbehave::WrongTlsCert, "TLS"),
        (Misbehave::GarbageCerts, "malformed"),
        (Misbehave::Oversized, "handshake too long"),
        (Misbehave::TruncatedTls, ""),
    ];
    for (how, want) in cases {
        let (_addr, target) = fake_relay(how).await;
        let err = tokio::time::timeout(Duration::from_secs(30), mgr.connect(&target))
            .await
            .expect("a broken responder must not hang the client")
            .expect_err("a broken responder must be refused")
            .to_string();
        eprintln!("refused as expected: {err}");
        assert!(err.contains(want), "error {err:?} should mention {want:?}");
    }

    // The client still opens a good channel afterwards.
    let tmp = tempfile::tempdir().unwrap();
    let cfg = RelayConfig::parse(&format!(
        "data_dir = {:?}\nnickname = \"good\"\nor_listen = \"127.0.0.1:0\"\n",
        tmp.path().display().to_string()
    ))
    .unwrap();
    let keys = relay::load_or_generate_keys(&cfg.data_dir).unwrap();
    let ctx = relay::make_ctx(cfg, keys, None).unwrap();
    let addr = relay::start(ctx.clone()).await.unwrap();
    let good = HopTarget::local_relay(&ctx, addr);
    mgr.get(&good).await.expect("good relay after broken ones");
}
