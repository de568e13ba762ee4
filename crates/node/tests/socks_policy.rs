//! What the client's SOCKS port refuses by itself, before any network is
//! used (a client whose only authority is unreachable): internal
//! destinations (tor's `ClientRejectInternalAddresses`, on outside testing
//! networks), HTTP requests (an HTTP error page, as tor's), and proposal
//! 351 usernames other than `<torS0X>0` (closed without a reply).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;

use common::{free_port, offline_client_config};
use onionmix_node::client::Client;
use onionmix_node::client::config::ClientConfig;

/// Generous: every answer here is local and immediate.
const T: Duration = Duration::from_secs(20);

async fn client(extra: &str) -> (Client, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let text = offline_client_config(
        dir.path(),
        &format!("socks_listen = \"127.0.0.1:{}\"\n{extra}", free_port()),
    );
    let c = Client::start(ClientConfig::parse(&text).unwrap())
        .await
        .unwrap();
    (c, dir)
}

/// SOCKS5 CONNECT (no authentication) to `host` (a name, or an address
/// literal given as a name); the reply code, or None if nothing came
/// within `wait`.
async fn connect(socks: SocketAddr, host: &str, wait: Duration) -> Option<u8> {
    let mut s = TcpStream::connect(socks).await.unwrap();
    let mut req = vec![5, 1, 0, 5, 1, 0, 3, host.len() as u8];
    req.extend_from_slice(host.as_bytes());
    req.extend_from_slice(&80u16.to_be_bytes());
    s.write_all(&req).await.unwrap();
    let mut b = [0u8; 12];
    match tokio::time::timeout(wait, s.read_exact(&mut b)).await {
        Ok(Ok(_)) => {
            assert_eq!(&b[..2], &[5, 0], "method reply");
            assert_eq!(b[2], 5, "reply version");
            Some(b[3])
        }
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_destinations_are_refused_at_once() {
    let (c, _dir) = client("").await;
    for host in [
        "127.0.0.1",
        "10.1.2.3",
        "192.168.0.1",
        "::1",
        "::ffff:127.0.0.1",
        "localhost",
        "printer.local",
    ] {
        assert_eq!(
            connect(c.socks_addr, host, T).await,
            Some(1),
            "{host}: general failure at once, nothing sent anywhere"
        );
    }
    // A public destination is not refused: it waits for bootstrap.
    assert_eq!(
        connect(c.socks_addr, "192.0.2.1", Duration::from_millis(1500)).await,
        None
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_destinations_pass_when_allowed() {
    let (c, _dir) = client("client_reject_internal_addresses = false").await;
    assert_eq!(
        connect(c.socks_addr, "127.0.0.1", Duration::from_millis(1500)).await,
        None,
        "waits for bootstrap like any destination"
    );
    // A testing network allows them unless told otherwise.
    let (t, _dir) = client("testing_network = true").await;
    assert_eq!(
        connect(t.socks_addr, "10.1.2.3", Duration::from_millis(1500)).await,
        None
    );
    let (t, _dir) = client("testing_network = true\nclient_reject_internal_addresses = true").await;
    assert_eq!(connect(t.socks_addr, "10.1.2.3", T).await, Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_requests_and_unknown_extended_usernames() {
    let (c, _dir) = client("").await;
    let mut s = TcpStream::connect(c.socks_addr).await.unwrap();
    s.write_all(b"GET http://example.com/ HTTP/1.1\r\nHost: example.com\r\n\r\n")
        .await
        .unwrap();
    let mut page = Vec::new();
    tokio::time::timeout(T, s.read_to_end(&mut page))
        .await
        .unwrap()
        .unwrap();
    let page = String::from_utf8_lossy(&page);
    assert!(
        page.starts_with("HTTP/1.0 501 Tor is not an HTTP Proxy\r\n"),
        "{page}"
    );
    // `<torS0X>1...` (an Arti RPC object) is not something we know: the
    // connection is closed after the method reply, with no auth reply.
    let mut s = TcpStream::connect(c.socks_addr).await.unwrap();
    let user = b"<torS0X>1obj";
    let mut m = vec![5, 1, 2, 1, user.len() as u8];
    m.extend_from_slice(user);
    m.extend_from_slice(&[1, b'x']);
    s.write_all(&m).await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(T, s.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got, vec![5, 2], "method chosen, then closed");
}
