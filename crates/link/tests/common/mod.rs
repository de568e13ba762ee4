//! Helpers shared by the QUIC link tests: endpoints on loopback with a
//! throwaway certificate, and a connected pair.
#![allow(dead_code)] // each test file uses a subset

use std::net::SocketAddr;
use std::time::Duration;

use onionmix_link::{QuicLimits, QuicLink, QuicStream, QuicTransport, TlsInfo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Generous bound for anything a test waits on (the machine is busy).
pub const LONG: Duration = Duration::from_secs(30);

pub fn loopback() -> SocketAddr {
    "127.0.0.1:0".parse().expect("address")
}

pub fn cert() -> (Vec<u8>, Vec<u8>) {
    let ck = rcgen::generate_simple_self_signed(vec!["www.example.invalid".into()]).expect("cert");
    (ck.cert.der().to_vec(), ck.signing_key.serialize_der())
}

pub fn server(limits: QuicLimits) -> (QuicTransport, Vec<u8>) {
    let (c, k) = cert();
    let t = QuicTransport::server(loopback(), c.clone(), k, limits).expect("server");
    (t, c)
}

pub fn client(limits: QuicLimits) -> QuicTransport {
    QuicTransport::client(loopback(), limits).expect("client")
}

pub async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(LONG, f)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// Connect `from` to `to` and accept there; returns both ends.
pub async fn pair(
    from: &QuicTransport,
    to: &QuicTransport,
) -> (
    (QuicLink, QuicStream, TlsInfo),
    (QuicLink, QuicStream, TlsInfo),
) {
    let addr = to.local_addr().expect("addr");
    let accept = async {
        let inc = to.accept().await.expect("incoming");
        inc.handshake().await
    };
    let connect = async {
        let (link, mut ctrl, info) = from.connect(addr).await?;
        // The control stream becomes visible to the peer with its first
        // bytes (VERSIONS, in a real link).
        ctrl.write_all(b"hello").await?;
        Ok::<_, onionmix_link::LinkError>((link, ctrl, info))
    };
    let (a, b) = within("connect+accept", async { tokio::join!(connect, accept) }).await;
    let a = a.expect("connect");
    let mut b = b.expect("accept");
    let mut buf = [0u8; 5];
    within("hello", b.1.read_exact(&mut buf))
        .await
        .expect("read hello");
    assert_eq!(&buf, b"hello");
    (a, b)
}
