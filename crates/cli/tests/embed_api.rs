//! The embeddable client API (`onionmix-embed`) on a private all-onionmix
//! network with an onion service (`onionmix-hs`): bootstrap in this
//! process (no SOCKS port), 1 MiB downloads from the sink (through an exit
//! and through the onion service) checked against its SHA-256, isolation
//! tokens (different tokens never share a circuit, the same token does),
//! a new identity (fresh circuits, open streams unharmed, new streams
//! work), refused targets, shutdown (open streams end; the state
//! directory serves a second client).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

use std::time::{Duration, Instant};

use onionmix_embed::{ClientConfig, DataStream, EmbedError, IsolationToken, OnionmixClient};
use onionmix_testbed::http;
use tokio::io::AsyncReadExt;

/// GET `/bytes/<n>` from the sink over `s`; checks status, length and the
/// sink's SHA-256 header.
async fn fetch(s: &mut DataStream, host: &str, n: u64, who: &str) {
    let r = tokio::time::timeout(
        Duration::from_secs(180),
        http::get(s, host, &format!("/bytes/{n}"), Instant::now()),
    )
    .await
    .unwrap_or_else(|_| panic!("{who}: download timed out"))
    .unwrap_or_else(|e| panic!("{who}: {e}"));
    assert_eq!(r.status, 200, "{who}");
    assert_eq!(r.body.len() as u64, n, "{who}");
    assert!(r.sha256_ok(), "{who}: SHA-256 mismatch");
}

#[test]
fn embedded_client_on_an_onionmix_network() {
    let _serial = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let net = common_net::start("onionmix-hs", &tmp.path().join("net"));
    let info = net.info().clone();
    let sink = info.sink.as_ref().expect("sink").http;
    let onion = info
        .onion_services
        .first()
        .expect("an onion service")
        .clone();
    // The launcher's client configuration names the network's
    // authorities; the embedded client gets its own state directory and
    // no control port.
    let node = info.clients(None).into_iter().next().expect("a client");
    let text = std::fs::read_to_string(node.data_dir.join("client.toml")).unwrap();
    let mut cfg = ClientConfig::parse(&text).unwrap();
    cfg.data_dir = tmp.path().join("embedded");
    cfg.control_port = None;
    cfg.metrics_port = None;

    let host = sink.ip().to_string();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let client = OnionmixClient::launch(cfg).await.unwrap();
        let mut events = client.bootstrap_events();
        let seen = tokio::spawn(async move {
            let mut seen = vec![events.borrow_and_update().progress];
            while events.changed().await.is_ok() {
                let p = events.borrow_and_update().progress;
                seen.push(p);
                if p == 100 {
                    break;
                }
            }
            seen
        });
        client
            .wait_bootstrapped(common_net::TEST_BOOTSTRAP_TIMEOUT)
            .await
            .unwrap();
        assert!(client.is_bootstrapped());
        let st = client.bootstrap_status();
        assert_eq!((st.progress, st.tag), (100, "done"));
        let seen = tokio::time::timeout(Duration::from_secs(10), seen)
            .await
            .expect("bootstrap events end at 100")
            .unwrap();
        assert_eq!(seen.last(), Some(&100), "phases seen: {seen:?}");
        // A watch keeps only the latest phase: phases set back to back
        // (75 then 95) may be seen as one; never out of order.
        assert!(seen.is_sorted(), "phases seen: {seen:?}");
        // No SOCKS port: the client's status says it listens nowhere.
        assert_eq!(client.status()["socks"], "0.0.0.0:0");

        // Targets refused before anything leaves the process.
        assert!(matches!(
            client.connect(&host, 0).await,
            Err(EmbedError::BadTarget(_))
        ));
        assert!(matches!(
            client.connect("", 80).await,
            Err(EmbedError::BadTarget(_))
        ));
        assert!(matches!(
            client.connect("bad.onion", 80).await,
            Err(EmbedError::BadOnion(_))
        ));
        assert!(matches!(
            client.connect("x.exit", 80).await,
            Err(EmbedError::ExitNotation)
        ));

        // 1 MiB through the unisolated token.
        let mut s = client.connect(&host, sink.port()).await.unwrap();
        fetch(&mut s, &host, 1 << 20, "default token, 1 MiB").await;
        let first = s.circuit().expect("exit stream").clone();
        assert_eq!(first.path.len(), 3, "{:?}", first.path);

        // Isolation tokens: different tokens, different circuits; the same
        // token, the same circuit (all streams open at once).
        let (t1, t2) = (IsolationToken::new(), IsolationToken::new());
        let mut a = client.connect_with(&host, sink.port(), &t1).await.unwrap();
        let mut b = client.connect_with(&host, sink.port(), &t2).await.unwrap();
        let mut a2 = client.connect_with(&host, sink.port(), &t1).await.unwrap();
        let (ca, cb, ca2) = (
            a.circuit().unwrap().clone(),
            b.circuit().unwrap().clone(),
            a2.circuit().unwrap().clone(),
        );
        assert!(!ca.same_circuit(&cb), "two tokens shared a circuit");
        assert!(
            !ca.same_circuit(&first),
            "a token shared the default circuit"
        );
        assert!(ca.same_circuit(&ca2), "one token got two circuits");
        fetch(&mut a, &host, 1000, "token 1").await;
        fetch(&mut b, &host, 1000, "token 2").await;
        // A hostname goes to the exit as is (the exits resolve the sink's
        // test name; this process never does).
        let name = onionmix_testbed::sink::SINK_HOSTNAME;
        let mut n = client.connect(name, sink.port()).await.unwrap();
        fetch(&mut n, name, 1000, "by hostname").await;
        drop(n);
        fetch(&mut a2, &host, 1000, "token 1 again").await;

        // A new identity: the next stream gets a new circuit (the old one
        // is still open: its stream holds it), and it works.
        let before = client.connect(&host, sink.port()).await.unwrap();
        let old = before.circuit().unwrap().clone();
        assert!(old.same_circuit(&first), "default token changed circuit");
        client.new_identity().await;
        let mut after = client.connect(&host, sink.port()).await.unwrap();
        let new = after.circuit().unwrap().clone();
        assert!(old.is_open(), "the old stream's circuit was torn down");
        assert!(!new.same_circuit(&old), "new identity reused a circuit");
        fetch(&mut after, &host, 1 << 20, "after new identity, 1 MiB").await;
        drop((s, a, b, a2, after));

        // The onion service, by name: no exit circuit.
        let mut o = client
            .connect(&onion.address, onion.http_port)
            .await
            .unwrap();
        assert!(o.circuit().is_none());
        fetch(&mut o, &onion.address, 1 << 20, "onion service, 1 MiB").await;
        drop(o);

        // Shutdown stops every task of the client: a stream still open
        // ends (reads end of file or fail, never hang).
        let mut before = before;
        client.shutdown().await;
        let mut buf = [0u8; 16];
        let r = tokio::time::timeout(Duration::from_secs(30), before.read(&mut buf))
            .await
            .expect("a stream outlived the client's shutdown");
        assert!(matches!(r, Ok(0) | Err(_)), "{r:?}");
    });
    // The state directory is free again: a second client bootstraps from
    // it and fetches.
    rt.block_on(async {
        let mut cfg = ClientConfig::parse(&text).unwrap();
        cfg.data_dir = tmp.path().join("embedded");
        cfg.control_port = None;
        cfg.metrics_port = None;
        let client = OnionmixClient::bootstrapped(cfg, common_net::TEST_BOOTSTRAP_TIMEOUT)
            .await
            .unwrap();
        let mut s = client.connect(&host, sink.port()).await.unwrap();
        fetch(&mut s, &host, 1000, "second client").await;
        client.shutdown().await;
    });
    drop(net);
}
