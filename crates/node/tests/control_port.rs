//! The client's control and metrics ports without a network: a client whose
//! authority is unreachable still serves both (and SOCKS). Authentication,
//! tor's replies, and bad input: long lines, bad quoting, unauthenticated
//! commands, floods of connections and commands.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

mod common;

use common::control::{Ctl, T};
use common::{free_port, offline_client_config};
use onionmix_node::client::Client;
use onionmix_node::client::config::ClientConfig;

struct Fixture {
    client: Client,
    dir: tempfile::TempDir,
    control: SocketAddr,
    metrics: SocketAddr,
}

async fn start(extra: &str) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let (socks, control, metrics) = (free_port(), free_port(), free_port());
    let text = offline_client_config(
        dir.path(),
        &format!(
            "socks_listen = \"127.0.0.1:{socks}\"\ncontrol_port = \"127.0.0.1:{control}\"\n\
             control_socket = {:?}\nmetrics_port = \"127.0.0.1:{metrics}\"\n\
             max_control_connections = 8\n{extra}",
            dir.path().join("control.sock").display().to_string(),
        ),
    );
    let cfg = ClientConfig::parse(&text).unwrap();
    let client = Client::start(cfg).await.unwrap();
    Fixture {
        control: client.control_addr.unwrap(),
        metrics: client.metrics_addr.unwrap(),
        client,
        dir,
    }
}

/// A SOCKS5 CONNECT to a `.onion` name is answered at once (host
/// unreachable), bootstrapped or not: proof the SOCKS port serves.
async fn socks_answers(client: &Client) -> bool {
    socks_answers_at(client.socks_addr).await
}

/// A SOCKS5 CONNECT to `name` port 80 sent on `a` (no reply read); None
/// if nothing listens there.
async fn socks_connect(a: SocketAddr, name: &[u8]) -> Option<TcpStream> {
    let mut s = TcpStream::connect(a).await.ok()?;
    s.write_all(b"\x05\x01\x00").await.unwrap();
    let mut b = [0u8; 2];
    s.read_exact(&mut b).await.unwrap();
    let mut req = vec![5, 1, 0, 3, name.len() as u8];
    req.extend_from_slice(name);
    req.extend_from_slice(&[0, 80]);
    s.write_all(&req).await.unwrap();
    Some(s)
}

async fn socks_answers_at(a: SocketAddr) -> bool {
    let name = b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.onion";
    let Some(mut s) = socks_connect(a, name).await else {
        return false;
    };
    let mut rep = [0u8; 10];
    matches!(
        tokio::time::timeout(T, s.read_exact(&mut rep)).await,
        Ok(Ok(_))
    ) && rep[0] == 5
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authentication_and_replies_like_tor() {
    let f = start("").await;
    let cookie_path = f.dir.path().join("control_auth_cookie");
    let meta = std::fs::metadata(&cookie_path).unwrap();
    assert_eq!(meta.len(), 32);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    }
    // PROTOCOLINFO, then nothing but authentication.
    let mut c = Ctl::connect(f.control).await;
    let pi = c.cmd("PROTOCOLINFO 1").await;
    let canon = std::fs::canonicalize(&cookie_path).unwrap();
    assert_eq!(
        pi,
        format!(
            "250-PROTOCOLINFO 1\r\n250-AUTH METHODS=COOKIE,SAFECOOKIE COOKIEFILE=\"{}\"\r\n250-VERSION Tor=\"{}\"\r\n250 OK\r\n",
            canon.display(),
            onionmix_node::control::version()
        )
    );
    assert_eq!(
        c.cmd("GETINFO version").await,
        "514 Authentication required.\r\n"
    );
    assert!(c.closed().await);
    // Bad cookie: 515 and closed.
    let mut c = Ctl::connect(f.control).await;
    assert_eq!(
        c.cmd(&format!("AUTHENTICATE {}", "00".repeat(32))).await,
        "515 Authentication failed: Authentication cookie did not match expected value.\r\n"
    );
    assert!(c.closed().await);
    // Bad quoting: 512 and closed.
    let mut c = Ctl::connect(f.control).await;
    assert!(c.cmd("AUTHENTICATE \"abc").await.starts_with("512 "));
    assert!(c.closed().await);

    let mut c = Ctl::auth(f.control, f.dir.path()).await;
    let r = c
        .cmd("GETINFO version status/circuit-established net/listeners/socks dormant")
        .await;
    assert_eq!(
        r,
        format!(
            "250-version={}\r\n250-status/circuit-established=0\r\n250-net/listeners/socks=\"{}\"\r\n250-dormant=0\r\n250 OK\r\n",
            onionmix_node::control::version(),
            f.client.socks_addr
        )
    );
    assert!(
        c.cmd("GETINFO status/bootstrap-phase")
            .await
            .starts_with("250-status/bootstrap-phase=NOTICE BOOTSTRAP PROGRESS=")
    );
    assert_eq!(
        c.cmd("GETINFO fingerprint").await,
        "551 Not running in server mode\r\n"
    );
    assert_eq!(
        c.cmd("GETINFO nosuch").await,
        "552 Unrecognized key \"nosuch\"\r\n"
    );
    assert_eq!(
        c.cmd(
            "GETCONF SocksPort DisableNetwork __LeaveStreamsUnattached __OwningControllerProcess"
        )
        .await,
        format!(
            "250-SocksPort={}\r\n250-DisableNetwork=0\r\n250-__LeaveStreamsUnattached=0\r\n250 __OwningControllerProcess\r\n",
            f.client.socks_addr
        )
    );
    assert_eq!(
        c.cmd("SETCONF DisableNetwork=1 __LeaveStreamsUnattached=1")
            .await,
        "250 OK\r\n"
    );
    assert_eq!(
        c.cmd("GETCONF DisableNetwork __LeaveStreamsUnattached")
            .await,
        "250-DisableNetwork=1\r\n250 __LeaveStreamsUnattached=1\r\n"
    );
    assert_eq!(
        c.cmd("RESETCONF DisableNetwork __LeaveStreamsUnattached")
            .await,
        "250 OK\r\n"
    );
    assert_eq!(
        c.cmd("GETCONF DisableNetwork __LeaveStreamsUnattached")
            .await,
        "250-DisableNetwork=0\r\n250 __LeaveStreamsUnattached=0\r\n"
    );
    assert_eq!(
        c.cmd("SETCONF nosuch=1").await,
        "552 Unrecognized option: Unknown option 'nosuch'.  Failing.\r\n"
    );
    assert!(c.cmd("SETCONF DisableNetwork=2").await.starts_with("513 "));
    assert!(
        c.cmd("SETCONF MaxCircuitDirtiness=1")
            .await
            .starts_with("553 ")
    );
    assert_eq!(c.cmd("SIGNAL NEWNYM").await, "250 OK\r\n");
    assert_eq!(c.cmd("SIGNAL DORMANT").await, "250 OK\r\n");
    assert_eq!(
        c.cmd("GETINFO dormant").await,
        "250-dormant=1\r\n250 OK\r\n"
    );
    assert_eq!(c.cmd("SIGNAL ACTIVE").await, "250 OK\r\n");
    assert_eq!(
        c.cmd("EXTENDCIRCUIT 0 $0123456789ABCDEF0123456789ABCDEF01234567")
            .await,
        "551 Couldn't start circuit\r\n"
    );
    assert_eq!(
        c.cmd("CLOSECIRCUIT 99").await,
        "552 Unknown circuit \"99\"\r\n"
    );
    assert_eq!(
        c.cmd("ATTACHSTREAM 5 1").await,
        "552 Unknown stream \"5\"\r\n"
    );
    assert_eq!(c.cmd("SETEVENTS CIRC STREAM BW").await, "250 OK\r\n");
    // A BW event within a few seconds (one a second).
    let ev = c.reply().await;
    assert!(ev.starts_with("650 BW "), "{ev}");
    assert_eq!(c.cmd("QUIT").await, "250 closing connection\r\n");
    assert!(c.closed().await);

    // The unix socket, mode 0600.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let sock = f.dir.path().join("control.sock");
        assert_eq!(
            std::fs::metadata(&sock).unwrap().permissions().mode() & 0o777,
            0o600
        );
        let mut s = tokio::net::UnixStream::connect(&sock).await.unwrap();
        s.write_all(b"PROTOCOLINFO\r\n").await.unwrap();
        let mut buf = vec![0u8; 512];
        let n = tokio::time::timeout(T, s.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("250-PROTOCOLINFO 1\r\n"));
    }

    // Metrics.
    let mut m = TcpStream::connect(f.metrics).await.unwrap();
    m.write_all(b"GET /metrics HTTP/1.0\r\n\r\n").await.unwrap();
    let mut body = String::new();
    tokio::time::timeout(T, m.read_to_string(&mut body))
        .await
        .unwrap()
        .unwrap();
    assert!(body.starts_with("HTTP/1.0 200 OK\r\n"), "{body}");
    assert!(
        body.contains("onionmix_client_circuits{state=\"built\"} 0"),
        "{body}"
    );
    assert!(
        body.contains("onionmix_client_circuit_build_seconds_bucket{le=\"+Inf\"}"),
        "{body}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_and_floods_leave_socks_serving() {
    let f = start("").await;
    // A line past the limit: 500 and closed.
    let mut c = Ctl::connect(f.control).await;
    let long = vec![b'A'; 70 * 1024];
    let _ = c.w.write_all(&long).await;
    assert_eq!(c.reply().await, "500 Line too long.\r\n");
    assert!(c.closed().await);
    // A data block past the limit, after authenticating: 500 (if the
    // reply gets through before the close) and the connection ends.
    let mut c = Ctl::auth(f.control, f.dir.path()).await;
    c.send(b"+LOADCONF\r\n").await;
    let mut line = vec![b'x'; 1000];
    line.extend_from_slice(b"\r\n");
    for _ in 0..1200 {
        if c.w.write_all(&line).await.is_err() {
            break;
        }
    }
    let mut got = String::new();
    let r = tokio::time::timeout(T, c.r.read_line(&mut got))
        .await
        .unwrap();
    assert!(
        r.is_err() || got.is_empty() || got == "500 Command too long.\r\n",
        "{got:?}"
    );
    // Bad arguments after authenticating: an error for each, the
    // connection stays and answers the next command.
    let mut c = Ctl::auth(f.control, f.dir.path()).await;
    for (bad, want) in [
        ("SETCONF SocksPort=\"9050", "512 Bad arguments to SETCONF: "),
        (
            "SETCONF DisableNetwork=\"\\q\"",
            "512 Bad arguments to SETCONF: ",
        ),
        (
            "GETCONF \"DisableNetwork\"",
            "552 Unrecognized configuration key ",
        ),
        ("SETEVENTS CIRC NOSUCH", "552 Unrecognized event \"NOSUCH\""),
        ("SIGNAL", "512 "),
        ("SIGNAL NOSUCH", "552 Unrecognized signal code \"NOSUCH\""),
        ("ATTACHSTREAM", "512 "),
        ("EXTENDCIRCUIT 7", "552 Unknown circuit \"7\""),
        ("EXTENDCIRCUIT 0 $00 purpose=\"x", "512 "),
        ("CLOSESTREAM 1", "512 "),
        ("ADD_ONION NEW:BEST Port=\"80", "512 "),
    ] {
        let r = c.cmd(bad).await;
        assert!(r.starts_with(want), "{bad:?} -> {r:?}");
    }
    // Bytes that are not UTF-8, a NUL, a bare CR: answered, not fatal.
    c.send(b"GETINFO \xff\xfe\x00x\r\n").await;
    assert!(c.reply().await.starts_with("552 Unrecognized key "));
    c.send(b"GETINFO\rversion\r\n").await;
    assert!(c.reply().await.ends_with("\r\n"));
    assert_eq!(
        c.cmd("GETINFO traffic/read").await,
        "250-traffic/read=0\r\n250 OK\r\n"
    );
    // A flood of pipelined commands on one connection: every one answered,
    // in order.
    drop(c);
    let mut c = Ctl::auth(f.control, f.dir.path()).await;
    for _ in 0..30 {
        c.send("GETINFO traffic/read\r\n".repeat(100).as_bytes())
            .await;
        for _ in 0..100 {
            assert_eq!(c.reply().await, "250-traffic/read=0\r\n250 OK\r\n");
        }
    }
    // A flood of connections that never authenticate: each new one past
    // the limit (8) closes the oldest unauthenticated one, so a controller
    // arriving while the flood is held still gets in; SOCKS still answers.
    // (No other connection of this test is open from here on.)
    drop(c);
    let mut held = Vec::new();
    for _ in 0..40 {
        if let Ok(s) = TcpStream::connect(f.control).await {
            held.push(s);
        }
    }
    assert!(
        socks_answers(&f.client).await,
        "SOCKS stopped answering under a control flood"
    );
    let mut c = Ctl::auth(f.control, f.dir.path()).await;
    assert_eq!(
        c.cmd("GETINFO traffic/read").await,
        "250-traffic/read=0\r\n250 OK\r\n",
        "a controller gets in while the idle flood is held"
    );
    let bus = &f.client.hub.bus;
    let ord = std::sync::atomic::Ordering::Relaxed;
    assert!(bus.evicted.load(ord) >= 32, "{}", bus.evicted.load(ord));
    // The flood's connections were closed by the client, all but the
    // newest few.
    let mut closed = 0;
    for mut s in held {
        let mut b = [0u8; 1];
        if matches!(
            tokio::time::timeout(Duration::from_secs(2), s.read(&mut b)).await,
            Ok(Ok(0) | Err(_))
        ) {
            closed += 1;
        }
    }
    assert!(closed >= 32, "only {closed} of 40 idle connections closed");
    // Authenticated controllers are never closed for others: with the 8
    // slots held by authenticated ones, a ninth connection is refused.
    let mut ctls = vec![c];
    for _ in 1..8 {
        ctls.push(Ctl::auth(f.control, f.dir.path()).await);
    }
    let mut extra = TcpStream::connect(f.control).await.unwrap();
    let mut b = [0u8; 1];
    let r = tokio::time::timeout(T, extra.read(&mut b)).await.unwrap();
    assert!(matches!(r, Ok(0) | Err(_)), "a ninth connection was served");
    assert!(
        bus.refused.load(ord) > 0,
        "the connection limit never applied"
    );
    for c in &mut ctls {
        assert_eq!(
            c.cmd("GETINFO traffic/read").await,
            "250-traffic/read=0\r\n250 OK\r\n"
        );
    }
    drop(ctls);
    assert!(socks_answers(&f.client).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owning_controller_connection_ends_the_client() {
    let f = start("").await;
    let mut c = Ctl::auth(f.control, f.dir.path()).await;
    assert_eq!(c.cmd("TAKEOWNERSHIP").await, "250 OK\r\n");
    drop(c);
    assert!(
        tokio::time::timeout(T, f.client.shutdown_requested())
            .await
            .is_ok(),
        "the client did not ask to shut down when its owner left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_authentication() {
    // "foo", hashed by stock tor 0.4.9.11.
    let f = start(r#"hashed_control_password = ["16:FBFFEECCA4EDC15860ACEB0B713CD5928A19ED3073A89F39F9BE4A1746"]"#).await;
    assert!(
        !f.dir.path().join("control_auth_cookie").exists(),
        "no cookie unless asked for"
    );
    let mut c = Ctl::connect(f.control).await;
    assert!(
        c.cmd("PROTOCOLINFO")
            .await
            .contains("250-AUTH METHODS=HASHEDPASSWORD\r\n")
    );
    assert_eq!(c.cmd("AUTHENTICATE \"foo\"").await, "250 OK\r\n");
    assert_eq!(
        c.cmd("GETINFO dormant").await,
        "250-dormant=0\r\n250 OK\r\n"
    );
    let mut c = Ctl::connect(f.control).await;
    assert_eq!(
        c.cmd("AUTHENTICATE \"bar\"").await,
        "515 Authentication failed: Password did not match HashedControlPassword value from configuration\r\n"
    );
    assert!(c.closed().await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owning_controller_process_exit_ends_the_client() {
    let f = start("").await;
    let mut owner = std::process::Command::new("sleep")
        .arg("60")
        .spawn()
        .unwrap();
    let mut c = Ctl::auth(f.control, f.dir.path()).await;
    assert_eq!(
        c.cmd(&format!("SETCONF __OwningControllerProcess={}", owner.id()))
            .await,
        "250 OK\r\n"
    );
    assert_eq!(
        c.cmd("GETCONF __OwningControllerProcess").await,
        format!("250 __OwningControllerProcess={}\r\n", owner.id())
    );
    // Still there: no shutdown.
    assert!(
        tokio::time::timeout(Duration::from_secs(2), f.client.shutdown_requested())
            .await
            .is_err()
    );
    owner.kill().unwrap();
    owner.wait().unwrap();
    assert!(
        tokio::time::timeout(T, f.client.shutdown_requested())
            .await
            .is_ok(),
        "the client did not notice its owning process exit"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setconf_socksport_moves_the_listener() {
    let f = start("").await;
    let old = f.client.socks_addr;
    let new: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
    let mut c = Ctl::auth(f.control, f.dir.path()).await;
    assert_eq!(
        c.cmd(&format!("SETCONF SocksPort={new}")).await,
        "250 OK\r\n"
    );
    assert_eq!(
        c.cmd("GETCONF SocksPort").await,
        format!("250 SocksPort={new}\r\n")
    );
    assert_eq!(
        c.cmd("GETINFO net/listeners/socks").await,
        format!("250-net/listeners/socks=\"{new}\"\r\n250 OK\r\n")
    );
    assert!(socks_answers_at(new).await);
    let mut gone = false;
    for _ in 0..50 {
        if TcpStream::connect(old).await.is_err() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(gone, "the old SOCKS listener still accepts");
    assert!(
        c.cmd("SETCONF SocksPort=\"9050 IsolateDestAddr\"")
            .await
            .starts_with("513 ")
    );
    assert!(
        c.cmd("SETCONF SocksPort=10.1.2.3:9050")
            .await
            .starts_with("553 ")
    );
    assert_eq!(c.cmd("RESETCONF SocksPort").await, "250 OK\r\n");
    assert_eq!(
        c.cmd("GETCONF SocksPort").await,
        format!("250 SocksPort={old}\r\n")
    );
    assert!(socks_answers_at(old).await);
}

/// Ephemeral services and client-authorization keys over a real control
/// connection, before any bootstrap: ADD_ONION answers at once (the
/// service waits for the network), belongs to its connection (gone when
/// it closes, unless Detach), and `Flags=Permanent` credentials go to
/// `client_onion_auth_dir` as tor names them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemeral_onions_and_client_auth_without_network() {
    let auth_dir = tempfile::tempdir().unwrap();
    let f = start(&format!(
        "client_onion_auth_dir = {:?}",
        auth_dir.path().display().to_string()
    ))
    .await;
    let mut c = Ctl::auth(f.control, f.dir.path()).await;
    let r = c.cmd("ADD_ONION NEW:BEST Port=80").await;
    let id = r
        .strip_prefix("250-ServiceID=")
        .and_then(|x| x.split("\r\n").next())
        .unwrap()
        .to_string();
    assert_eq!(id.len(), 56);
    assert!(r.contains("\r\n250-PrivateKey=ED25519-V3:"), "{r}");
    assert!(r.ends_with("\r\n250 OK\r\n"), "{r}");
    let d = c
        .cmd("ADD_ONION NEW:BEST Flags=Detach,DiscardPK Port=81,127.0.0.1:8081")
        .await;
    let did = d
        .strip_prefix("250-ServiceID=")
        .and_then(|x| x.split("\r\n").next())
        .unwrap()
        .to_string();
    assert_eq!(d, format!("250-ServiceID={did}\r\n250 OK\r\n"));
    assert_eq!(
        c.cmd("GETINFO onions/current onions/detached").await,
        format!("250-onions/current={id}\r\n250-onions/detached={did}\r\n250 OK\r\n")
    );
    assert_eq!(f.client.onions.len(), 2);
    // Another connection sees neither as its own and cannot remove the
    // first; closing the first connection removes its service only.
    let mut other = Ctl::auth(f.control, f.dir.path()).await;
    assert_eq!(
        other.cmd(&format!("DEL_ONION {id}")).await,
        "552 Unknown Onion Service id\r\n"
    );
    drop(c);
    onionmix_testsupport::wait_for(
        "the closed connection's service to go",
        Duration::from_secs(20),
        Duration::from_millis(50),
        || (f.client.onions.len() == 1).then_some(()),
    );
    assert_eq!(
        other.cmd("GETINFO onions/detached").await,
        format!("250-onions/detached={did}\r\n250 OK\r\n")
    );
    assert_eq!(other.cmd(&format!("DEL_ONION {did}")).await, "250 OK\r\n");
    assert!(f.client.onions.is_empty());

    // Client authorization, stored for good with Flags=Permanent.
    let secret = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, [7u8; 32]);
    assert_eq!(
        other
            .cmd(&format!(
                "ONION_CLIENT_AUTH_ADD {id} x25519:{secret} Flags=Permanent ClientName=alice"
            ))
            .await,
        "250 OK\r\n"
    );
    let file = auth_dir.path().join(format!("{id}.auth_private"));
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.starts_with(&format!("{id}:descriptor:x25519:")),
        "{text}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    assert_eq!(
        other.cmd("ONION_CLIENT_AUTH_VIEW").await,
        format!(
            "250-ONION_CLIENT_AUTH_VIEW\r\n250-CLIENT {id} x25519:{secret} Flags=Permanent ClientName=alice\r\n250 OK\r\n"
        )
    );
    assert_eq!(
        other.cmd(&format!("ONION_CLIENT_AUTH_REMOVE {id}")).await,
        "250 OK\r\n"
    );
    assert!(!file.exists());
}

/// The unix control socket takes the whole protocol (cookie
/// authentication, events, signals), and the client obeys RELOAD (a
/// SIGNAL event, as tor) and SHUTDOWN.
#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signals_over_the_unix_socket() {
    let f = start("").await;
    let cookie = std::fs::read(f.dir.path().join("control_auth_cookie")).unwrap();
    let s = tokio::net::UnixStream::connect(f.dir.path().join("control.sock"))
        .await
        .unwrap();
    let (r, mut w) = s.into_split();
    let mut r = tokio::io::BufReader::new(r);
    // One reply (or event): lines up to the one with a space after its code.
    async fn reply(r: &mut tokio::io::BufReader<tokio::net::unix::OwnedReadHalf>) -> String {
        let mut out = String::new();
        loop {
            let mut line = String::new();
            let n = tokio::time::timeout(T, r.read_line(&mut line))
                .await
                .unwrap()
                .unwrap();
            assert!(n > 0, "the socket closed after {out:?}");
            out.push_str(&line);
            if line.as_bytes().get(3) == Some(&b' ') {
                return out;
            }
        }
    }
    for (cmd, want) in [
        (
            format!("AUTHENTICATE {}", hex::encode(&cookie)),
            "250 OK\r\n",
        ),
        ("SETEVENTS SIGNAL".to_string(), "250 OK\r\n"),
        ("SIGNAL RELOAD".to_string(), "250 OK\r\n"),
    ] {
        w.write_all(format!("{cmd}\r\n").as_bytes()).await.unwrap();
        assert_eq!(reply(&mut r).await, want, "{cmd}");
    }
    assert_eq!(reply(&mut r).await, "650 SIGNAL RELOAD\r\n");
    // Still running.
    assert!(socks_answers(&f.client).await);
    w.write_all(b"SIGNAL SHUTDOWN\r\n").await.unwrap();
    assert_eq!(reply(&mut r).await, "250 OK\r\n");
    assert!(
        tokio::time::timeout(T, f.client.shutdown_requested())
            .await
            .is_ok(),
        "SIGNAL SHUTDOWN did not end the client"
    );
}

/// Tor's automatic dormancy (`DormantClientTimeout`): an idle client goes
/// dormant by itself; a new SOCKS stream wakes it, and an open stream
/// keeps it awake (`DormantTimeoutDisabledByIdleStreams`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_client_goes_dormant_and_a_stream_wakes_it() {
    // Timeouts under 10 minutes need a testing network, as in tor.
    let f = start(
        "testing_network = true\ndormant_client_timeout_secs = 2\nstream_timeout_secs = 20\n",
    )
    .await;
    let mut c = Ctl::auth(f.control, f.dir.path()).await;
    assert_eq!(
        c.cmd(
            "GETCONF DormantClientTimeout DormantTimeoutEnabled DormantTimeoutDisabledByIdleStreams"
        )
        .await,
        "250-DormantClientTimeout=2\r\n250-DormantTimeoutEnabled=1\r\n250 DormantTimeoutDisabledByIdleStreams=1\r\n"
    );
    async fn wait_dormant(c: &mut Ctl, want: &str) {
        let line = format!("250-dormant={want}\r\n250 OK\r\n");
        for _ in 0..600 {
            if c.cmd("GETINFO dormant").await == line {
                return;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("GETINFO dormant never became {want}");
    }
    wait_dormant(&mut c, "1").await;

    // A stream waiting for a bootstrap that never comes: it wakes the
    // client and, while it is open, keeps it awake.
    let s = socks_connect(f.client.socks_addr, b"example.com")
        .await
        .expect("SOCKS port");
    wait_dormant(&mut c, "0").await;
    // Three timeouts long, read only while the stream is still listed.
    let until = tokio::time::Instant::now() + Duration::from_secs(6);
    let mut checked = 0;
    while tokio::time::Instant::now() < until {
        let streams = c.cmd("GETINFO stream-status").await;
        let dormant = c.cmd("GETINFO dormant").await;
        let still_open = c.cmd("GETINFO stream-status").await;
        if streams.contains("example.com:80") && still_open.contains("example.com:80") {
            assert_eq!(dormant, "250-dormant=0\r\n250 OK\r\n", "{streams}");
            checked += 1;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(checked > 0, "the stream was never listed");
    // Once it ends (its stream timeout), idleness puts the client to
    // sleep again.
    drop(s);
    wait_dormant(&mut c, "1").await;
}
