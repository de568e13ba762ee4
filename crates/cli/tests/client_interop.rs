//! Issue 2 interop: the onionmix client over a stock tor 0.4.9 network
//! started by the launcher (`tor-basic-onionmix-client`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

mod common_net;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use onionmix_testbed::socks::{self, SocksError, Target};
use onionmix_testbed::spec::Implementation;

#[test]
fn onionmix_client_over_stock_tor_network() {
    if !common_net::tor_available("onionmix_client_over_stock_tor_network") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let net = common_net::start("tor-basic-onionmix-client", tmp.path());
    let info = net.info().clone();
    let ours = info.clients(Some(Implementation::Onionmix))[0]
        .socks_addr()
        .unwrap();
    let stock = info.clients(Some(Implementation::Tor))[0]
        .socks_addr()
        .unwrap();
    let sink = info.sink.clone().unwrap();
    let host = sink.http.ip().to_string();
    let port = sink.http.port();

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        // 1 MiB and 20 MiB, verified.
        for n in [1u64 << 20, 20 << 20] {
            let (r, t) = common_net::download(ours, &host, port, n, None)
                .await
                .unwrap();
            assert_eq!(r.status, 200);
            assert_eq!(r.body.len() as u64, n);
            assert!(r.sha256_ok(), "SHA-256 mismatch for {n} bytes");
            eprintln!("{n} bytes in {t:?} (ttfb {:?})", r.first_byte);
        }

        // 20 parallel streams over 2 isolated circuits (SOCKS usernames).
        let om = info.clients(Some(Implementation::Onionmix))[0].clone();
        // status.json is rewritten about every second (atomically).
        let built = |om: &onionmix_testbed::netinfo::NodeInfo| -> u64 {
            let v: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(om.data_dir.join("status.json")).unwrap(),
            )
            .unwrap();
            v["circuits_built"].as_u64().unwrap()
        };
        let before = built(&om);
        let mut tasks = Vec::new();
        for i in 0..20 {
            let host = host.clone();
            tasks.push(tokio::spawn(async move {
                let user = if i % 2 == 0 { "alice" } else { "bob" };
                common_net::download(ours, &host, port, 300_000 + i, Some((user, "x"))).await
            }));
        }
        for t in tasks {
            match t.await.unwrap() {
                Ok((r, _)) => assert!(r.sha256_ok()),
                Err(e) => panic!(
                    "parallel download failed: {e}\n--- onionmix client log ---\n{}",
                    onionmix_testbed::proc::tail(
                        &info.clients(Some(Implementation::Onionmix))[0].log,
                        30
                    )
                ),
            }
        }

        common_net::wait_for(
            "20 streams with 2 SOCKS identities use 2 new circuits",
            Duration::from_secs(30),
            Duration::from_millis(200),
            || (built(&om) >= before + 2).then_some(()),
        );

        // A hostname resolved by the exit: connect by name, and RESOLVE.
        let (r, _) = common_net::download(ours, &sink.hostname, port, 4096, None)
            .await
            .unwrap();
        assert!(r.sha256_ok());
        let ip = socks::resolve(ours, &sink.hostname, None, Duration::from_secs(30))
            .await
            .unwrap();
        assert_eq!(ip, sink.http.ip());

        // A closed port: the same SOCKS error as the stock client gives,
        // within a bounded time.
        let (_held, closed) =
            onionmix_testsupport::ports::closed_port("127.0.0.1".parse().unwrap()).unwrap();
        let mut codes = Vec::new();
        for proxy in [ours, stock] {
            let t0 = Instant::now();
            let err = socks::connect(proxy, &Target::Addr(closed), None, Duration::from_secs(60))
                .await
                .unwrap_err();
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "closed port took {:?}",
                t0.elapsed()
            );
            match err {
                SocksError::Reply { code } => codes.push(code),
                other => panic!("expected a SOCKS reply, got {other}"),
            }
        }
        assert_ne!(codes[0], 0);
        assert_eq!(
            codes[0], codes[1],
            "onionmix vs stock tor SOCKS reply for a closed port"
        );

        // Bad SOCKS input is refused while other streams keep working.
        for junk in [
            // SOCKS4 BIND (unsupported), SOCKS5 command 7, an HTTP request.
            &b"\x04\x02\x00\x50\x7f\x00\x00\x01\x00"[..],
            b"GET / HTTP/1.1\r\n\r\n",
            b"\x05\x01\x00\x05\x07\x00\x01\x7f\x00\x00\x01\x00\x50",
        ] {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio::net::TcpStream::connect(ours).await.unwrap();
            s.write_all(junk).await.unwrap();
            // The connection is closed by the client after its reply (an
            // HTTP request gets tor's "not an HTTP proxy" page first).
            let mut got = Vec::new();
            let r = tokio::time::timeout(Duration::from_secs(30), s.read_to_end(&mut got)).await;
            assert!(r.is_ok(), "client kept a bad SOCKS connection open");
            if junk.starts_with(b"GET ") {
                assert!(
                    got.starts_with(b"HTTP/1.0 501 "),
                    "{:?}",
                    String::from_utf8_lossy(&got)
                );
            }
        }
        let (r, _) = common_net::download(ours, &host, port, 100_000, None)
            .await
            .unwrap();
        assert!(r.sha256_ok());

        // A relay killed mid-transfer: the stream fails cleanly, the next
        // request succeeds through a fresh circuit. We start a large
        // transfer and, once 1 MiB has arrived, kill the guard of the
        // circuit that carries it (from our client's control port: its
        // state file's first guard need not be the one this circuit
        // uses). Our client closes a whole conflux set when one leg
        // closes, so the stream must end; what it received must be a
        // prefix of the body.
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        const SIZE: u64 = 400 << 20;
        let mut s = socks::connect(
            ours,
            &Target::Addr(sink.http),
            None,
            Duration::from_secs(60),
        )
        .await
        .unwrap();
        s.write_all(
            format!("GET /bytes/{SIZE} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                .as_bytes(),
        )
        .await
        .unwrap();
        let mut pending = Vec::new();
        let head = onionmix_http::io::read_response_head(
            &mut s,
            &mut pending,
            &onionmix_http::Limits::new(8 * 1024, 64),
            Duration::from_secs(60),
        )
        .await
        .expect("response head");
        assert_eq!(head.status, 200);
        let mut got = pending.len() as u64;
        let mut buf = vec![0u8; 65536];
        while got < 1 << 20 {
            let n = tokio::time::timeout(Duration::from_secs(60), s.read(&mut buf))
                .await
                .expect("first MiB")
                .unwrap();
            assert!(n > 0, "stream ended early");
            got += n as u64;
        }
        let control = SocketAddr::new(om.address.parse().unwrap(), om.control_port.unwrap());
        let cookie = om.data_dir.join("control_auth_cookie");
        let path = common_net::path_of_stream(control, &cookie, sink.http)
            .await
            .expect("the stream's circuit in stream-status and circuit-status");
        let victim = info
            .nodes
            .iter()
            .find(|n| n.fingerprint.as_deref() == Some(&path[0].0))
            .expect("the stream's guard is a node of the network")
            .clone();
        eprintln!("killing guard {} mid-transfer", victim.name);
        let t_kill = Instant::now();
        assert!(onionmix_testbed::proc::stop(
            victim.pid,
            victim.start_time,
            Duration::from_secs(5)
        ));
        loop {
            match tokio::time::timeout(Duration::from_secs(60), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => got += n as u64,
                Err(_) => panic!("stream still open 60 s after its guard died"),
            }
        }
        assert!(
            got < SIZE,
            "the transfer survived the death of its circuit's guard {}",
            victim.name
        );
        eprintln!(
            "stream ended {:?} after the kill ({got} of {SIZE} bytes)",
            t_kill.elapsed()
        );
        let log = info.clients(Some(Implementation::Onionmix))[0].log.clone();
        let r = common_net::download(ours, &host, port, 1 << 20, None).await;
        let (r, _) = r.unwrap_or_else(|e| {
            panic!(
                "request after the guard died failed: {e}\n{}",
                onionmix_testbed::proc::tail(&log, 40)
            )
        });
        assert!(r.sha256_ok());
    });
    drop(net);
}
