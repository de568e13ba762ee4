//! Tor's link handshake (VERSIONS, CERTS, AUTH_CHALLENGE, AUTHENTICATE,
//! NETINFO) run unchanged over a QUIC link's control stream, with the
//! relay glue: CERTS type 5 covers the QUIC TLS certificate, AUTHENTICATE
//! binds QUIC's TLS exporter. Peers failing either are refused as on TLS.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use onionmix_cell::{ChanCmd, RawCell};
use onionmix_crypto::keys::RelayKeys;
use onionmix_crypto::x509::TlsIdentity;
use onionmix_link::quic::codes;
use onionmix_link::tls::AUTH3_EXPORTER_LABEL;
use onionmix_link::{QuicLimits, QuicLink, QuicStream, QuicTransport, spawn_channel_io};
use onionmix_node::glue::{
    RelayInitiatorAuth, RelayLinkIdentity, drive_initiator_handshake, drive_responder_handshake,
    responder_verifier,
};
use onionmix_proto::channel::{
    Accepted, Established, ExpectedPeer, InitiatorHandshake, ResponderHandshake,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

mod common;
use common::now;

const LONG: Duration = Duration::from_secs(30);
const LOCAL: IpAddr = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);

struct Relay {
    link: Arc<RelayLinkIdentity>,
    /// The TLS identity the QUIC endpoint serves.
    served: TlsIdentity,
    rsa_id: [u8; 20],
    ed_id: [u8; 32],
}

/// A relay's keys and link identity. With `certify_other`, its CERTS
/// cell's type 5 certificate covers a different TLS certificate than the
/// one it serves.
fn relay(certify_other: bool) -> Relay {
    let mut rng = rand::rngs::OsRng;
    let keys = RelayKeys::generate(&mut rng, now()).unwrap();
    let served = TlsIdentity::generate(&mut rng, &keys.rsa_identity, now(), 86400).unwrap();
    let certified = if certify_other {
        TlsIdentity::generate(&mut rng, &keys.rsa_identity, now(), 86400).unwrap()
    } else {
        served.clone()
    };
    let (rsa_id, ed_id) = (keys.rsa_id(), keys.ed_id());
    let link = Arc::new(RelayLinkIdentity::new(keys, &certified, now()).unwrap());
    Relay {
        link,
        served,
        rsa_id,
        ed_id,
    }
}

fn serve(r: &Relay) -> QuicTransport {
    QuicTransport::server(
        "127.0.0.1:0".parse().unwrap(),
        r.served.cert_der.clone(),
        r.served.key_pkcs8_der.to_vec(),
        QuicLimits::default(),
    )
    .unwrap()
}

/// Accept one link on `t` and run the responder handshake as `me`.
async fn respond_once(
    t: QuicTransport,
    me: Arc<RelayLinkIdentity>,
) -> Result<(Accepted, QuicLink, QuicStream, BytesMut), String> {
    let inc = t.accept().await.ok_or("endpoint closed")?;
    let peer = inc.remote_address();
    let (link, mut ctrl, _info) = inc.handshake().await.map_err(|e| e.to_string())?;
    let hs = ResponderHandshake::new(me.as_ref(), now(), vec![LOCAL], Some(peer.ip()));
    let l = link.clone();
    let exporter = move |_: &QuicStream, ctx: &[u8; 32]| l.export(AUTH3_EXPORTER_LABEL, ctx).ok();
    match drive_responder_handshake(&mut ctrl, hs, exporter, LONG).await {
        Ok((acc, left)) => Ok((acc, link, ctrl, left)),
        Err(e) => {
            link.close(e.quic_close_code());
            Err(e.to_string())
        }
    }
}

/// How the initiator computes TLSSECRETS.
enum Secrets {
    /// As specified: this connection's exporter, context CID.
    Right,
    /// From another QUIC connection to the same responder.
    OtherConnection,
}

/// Connect to `addr` as `me`, expecting `expect`, and run the initiator
/// handshake with authentication.
async fn initiate(
    t: &QuicTransport,
    addr: SocketAddr,
    me: &Relay,
    expect: ExpectedPeer,
    secrets: Secrets,
) -> Result<(Established, QuicLink, QuicStream, BytesMut), String> {
    // For the replay case, the other connection is made first (the
    // responder accepts in order).
    let other = match secrets {
        Secrets::Right => None,
        Secrets::OtherConnection => {
            let (other, _c, _) = t.connect(addr).await.map_err(|e| e.to_string())?;
            Some(other)
        }
    };
    let (link, mut ctrl, info) = t.connect(addr).await.map_err(|e| e.to_string())?;
    let digest = info.responder_cert_digest().ok_or("no responder cert")?;
    let tlssecrets = other
        .as_ref()
        .unwrap_or(&link)
        .export(AUTH3_EXPORTER_LABEL, &me.link.cid())
        .map_err(|e| e.to_string())?;
    let auth = RelayInitiatorAuth {
        id: &me.link,
        tlssecrets,
    };
    let verifier = responder_verifier();
    let hs = InitiatorHandshake::new(Some(expect), verifier.as_ref(), digest, now())
        .with_auth(&auth, vec![LOCAL])
        .with_peer_addr(addr.ip());
    match drive_initiator_handshake(&mut ctrl, hs, LONG).await {
        Ok((est, left)) => Ok((est, link, ctrl, left)),
        Err(e) => {
            link.close(e.quic_close_code());
            Err(e.to_string())
        }
    }
}

fn expect(r: &Relay) -> ExpectedPeer {
    ExpectedPeer {
        rsa_id: r.rsa_id,
        ed_id: Some(r.ed_id),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tor_handshake_over_quic_then_cells_and_circuit_streams() {
    let a = relay(false);
    let b = relay(false);
    let tb = serve(&b);
    let addr = tb.local_addr().unwrap();
    let ta = QuicTransport::client("127.0.0.1:0".parse().unwrap(), QuicLimits::default()).unwrap();
    let resp = tokio::spawn(respond_once(tb.clone(), b.link.clone()));
    let (est, ilink, ictrl, ileft) =
        tokio::time::timeout(LONG, initiate(&ta, addr, &a, expect(&b), Secrets::Right))
            .await
            .unwrap()
            .unwrap();
    let (acc, rlink, rctrl, rleft) = tokio::time::timeout(LONG, resp)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    // Each side proved who it is.
    assert_eq!(est.peer.rsa_id, b.rsa_id);
    assert_eq!(est.peer.ed_id, b.ed_id);
    let ap = acc.peer.expect("initiator authenticated");
    assert_eq!(ap.rsa_id, a.rsa_id);
    assert_eq!(ap.ed_id, a.ed_id);
    assert!(est.link_version >= 4 && est.link_version == acc.link_version);

    // Channel-level cells flow on the control stream through the usual
    // channel I/O tasks.
    let ci = spawn_channel_io(ictrl, est.codec.clone(), ileft);
    let mut cr = spawn_channel_io(rctrl, acc.codec.clone(), rleft);
    let mut out = BytesMut::new();
    let pad = RawCell::var(0, ChanCmd::VPADDING, &[0u8; 7]).unwrap();
    est.codec.encode(&pad, &mut out).unwrap();
    assert!(ci.tx.send_now(out));
    let batch = tokio::time::timeout(LONG, cr.rx.recv())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(batch[0].cmd, ChanCmd::VPADDING);

    // A circuit gets its own stream, opened by the CREATE2 sender, in the
    // same cell framing (4-byte circuit IDs; the initiator sets the high
    // bit).
    let circ_id = 0x8000_0001u32;
    let mut s = ilink.open_circuit_stream().await.unwrap();
    let mut out = BytesMut::new();
    let create2 = RawCell::fixed(circ_id, ChanCmd::CREATE2, &[0, 2, 0, 0]).unwrap();
    est.codec.encode(&create2, &mut out).unwrap();
    s.write_all(&out).await.unwrap();
    let mut rs = tokio::time::timeout(LONG, rlink.accept_circuit_stream())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let mut buf = BytesMut::new();
    let cell = loop {
        if let Some(c) = acc.codec.decode(&mut buf).unwrap() {
            break c;
        }
        let n = tokio::time::timeout(LONG, rs.read_buf(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0, "stream ended early");
    };
    assert_eq!(cell.cmd, ChanCmd::CREATE2);
    assert_eq!(cell.circ_id, circ_id);
    drop(ci);
    ilink.close(codes::NO_ERROR);
    tb.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_identity_is_refused() {
    let a = relay(false);
    let b = relay(false);
    let c = relay(false);
    let tb = serve(&b);
    let addr = tb.local_addr().unwrap();
    let ta = QuicTransport::client("127.0.0.1:0".parse().unwrap(), QuicLimits::default()).unwrap();
    let resp = tokio::spawn(respond_once(tb.clone(), b.link.clone()));
    // A wanted C but reached B.
    let err = tokio::time::timeout(LONG, initiate(&ta, addr, &a, expect(&c), Secrets::Right))
        .await
        .unwrap()
        .expect_err("a relay with the wrong identity must be refused");
    assert!(err.contains("identity mismatch"), "{err}");
    // The responder sees the link closed.
    let rerr = tokio::time::timeout(LONG, resp)
        .await
        .unwrap()
        .unwrap()
        .expect_err("the responder's handshake cannot complete");
    eprintln!("responder: {rerr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certs_for_another_tls_certificate_are_refused() {
    let a = relay(false);
    let b = relay(true);
    let tb = serve(&b);
    let addr = tb.local_addr().unwrap();
    let ta = QuicTransport::client("127.0.0.1:0".parse().unwrap(), QuicLimits::default()).unwrap();
    let _resp = tokio::spawn(respond_once(tb.clone(), b.link.clone()));
    let err = tokio::time::timeout(LONG, initiate(&ta, addr, &a, expect(&b), Secrets::Right))
        .await
        .unwrap()
        .expect_err("CERTS that certify another TLS certificate must be refused");
    assert!(err.contains("certificate check failed"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticate_bound_to_another_connection_is_refused() {
    let a = relay(false);
    let b = relay(false);
    let tb = serve(&b);
    let addr = tb.local_addr().unwrap();
    let ta = QuicTransport::client("127.0.0.1:0".parse().unwrap(), QuicLimits::default()).unwrap();
    // The responder's first accepted connection is the one TLSSECRETS
    // comes from (it never starts a handshake); the second is the link.
    let tb2 = tb.clone();
    let blink = b.link.clone();
    let resp = tokio::spawn(async move {
        let first = tb2.accept().await.unwrap();
        let _keep = tokio::spawn(first.handshake());
        respond_once(tb2, blink).await
    });
    let init = tokio::time::timeout(
        LONG,
        initiate(&ta, addr, &a, expect(&b), Secrets::OtherConnection),
    )
    .await
    .unwrap();
    let rerr = tokio::time::timeout(LONG, resp)
        .await
        .unwrap()
        .unwrap()
        .expect_err("AUTHENTICATE with another connection's exporter must be refused");
    eprintln!("responder refused: {rerr}");
    assert!(rerr.contains("certificate check failed"), "{rerr}");
    // The initiator finished its side (it does not wait for a verdict)
    // and then finds the link closed with AUTH_FAILED.
    let (_est, ilink, _c, _l) = init.expect("initiator side completes");
    let code = tokio::time::timeout(LONG, ilink.closed_with_code())
        .await
        .unwrap();
    assert_eq!(code, Some(codes::AUTH_FAILED));
}
