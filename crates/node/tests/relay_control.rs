//! A relay's control port (in-process relays, no directory): tor's
//! authentication, the relay's GETINFO / GETCONF / SETCONF answers,
//! ORCONN and BW events and traffic counters while a client builds a
//! circuit through it, SIGNAL SHUTDOWN (no new links, exit after the
//! wait), HALT, TAKEOWNERSHIP, and bad input.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use tokio::io::AsyncWriteExt;

mod common;

use common::control::{Ctl, T};
use onionmix_link::TlsTransport;
use onionmix_node::client::chanmgr::ChanMgr;
use onionmix_node::client::circuit::{self, HopTarget};
use onionmix_node::relay::{self, RelayCtx, config::RelayConfig};
use onionmix_testsupport::ports::free_port;

struct Relay {
    ctx: Arc<RelayCtx>,
    hop: HopTarget,
    control: SocketAddr,
    config: std::path::PathBuf,
}

async fn start_relay(dir: &Path, nick: &str, extra: &str) -> Relay {
    let data = dir.join(nick);
    std::fs::create_dir_all(&data).unwrap();
    let control = free_port("127.0.0.1").unwrap();
    let config = data.join("relay.toml");
    std::fs::write(
        &config,
        format!(
            "data_dir = {:?}\nnickname = {nick:?}\nor_listen = \"127.0.0.1:0\"\ntesting_network = true\n\
             control_port = \"127.0.0.1:{control}\"\n{extra}\n",
            data.display().to_string()
        ),
    )
    .unwrap();
    let cfg = RelayConfig::load(&config).unwrap();
    let keys = relay::load_or_generate_keys(&cfg.data_dir).unwrap();
    let ctx = relay::make_ctx(cfg, keys, None).unwrap();
    let addr = relay::start(ctx.clone()).await.unwrap();
    let hop = HopTarget::local_relay(&ctx, addr);
    Relay {
        ctx,
        hop,
        control: format!("127.0.0.1:{control}").parse().unwrap(),
        config,
    }
}

async fn shutdown_requested(r: &Relay) -> bool {
    tokio::time::timeout(T, r.ctx.control.shutdown.notified())
        .await
        .is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_control_port_answers_as_a_relay() {
    let tmp = tempfile::tempdir().unwrap();
    let guard = start_relay(tmp.path(), "guard", "").await;
    let middle = start_relay(tmp.path(), "middle", "").await;
    let fp = hex::encode_upper(guard.ctx.rsa_id);

    // Cookie file readable by us only; PROTOCOLINFO before authenticating;
    // anything else closes the connection.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let m = std::fs::metadata(guard.ctx.cfg.data_dir.join("control_auth_cookie"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(m & 0o777, 0o600);
    }
    let mut c = Ctl::connect(guard.control).await;
    let pi = c.cmd("PROTOCOLINFO 1").await;
    assert!(
        pi.contains("250-AUTH METHODS=COOKIE,SAFECOOKIE COOKIEFILE="),
        "{pi}"
    );
    assert!(pi.contains("250-VERSION Tor=\"0.4.9.11 (onionmix-"), "{pi}");
    assert_eq!(
        c.cmd("GETINFO fingerprint").await,
        "514 Authentication required.\r\n"
    );
    assert!(c.closed().await);

    let mut c = Ctl::auth(guard.control, &guard.ctx.cfg.data_dir).await;
    let or = guard.hop.or_addr;
    assert_eq!(
        c.cmd("GETINFO fingerprint net/listeners/or address").await,
        format!(
            "250-fingerprint={fp}\r\n250-net/listeners/or=\"{or}\"\r\n250-address=127.0.0.1\r\n250 OK\r\n"
        )
    );
    let canon = std::fs::canonicalize(&guard.config).unwrap();
    assert_eq!(
        c.cmd("GETINFO config-file process/pid").await,
        format!(
            "250-config-file={}\r\n250-process/pid={}\r\n250 OK\r\n",
            canon.display(),
            std::process::id()
        )
    );
    assert_eq!(
        c.cmd("GETINFO status/bootstrap-phase status/circuit-established status/enough-dir-info")
            .await,
        "250-status/bootstrap-phase=NOTICE BOOTSTRAP PROGRESS=0 TAG=starting SUMMARY=\"Starting\"\r\n\
         250-status/circuit-established=0\r\n250-status/enough-dir-info=0\r\n250 OK\r\n"
    );
    assert_eq!(
        c.cmd("GETINFO status/good-server-descriptor status/reachability-succeeded")
            .await,
        "250-status/good-server-descriptor=0\r\n250-status/reachability-succeeded=OR=0 DIR=1\r\n250 OK\r\n"
    );
    assert_eq!(
        c.cmd("GETINFO circuit-status").await,
        "250-circuit-status=\r\n250 OK\r\n"
    );
    // As tor: every ns/ key is empty while there is no consensus.
    assert_eq!(
        c.cmd("GETINFO ns/all ns/id/nothex").await,
        "250-ns/all=\r\n250-ns/id/nothex=\r\n250 OK\r\n"
    );
    assert_eq!(
        c.cmd("GETINFO stream-status nosuch").await,
        "552 Unrecognized key \"nosuch\"\r\n"
    );
    assert_eq!(
        c.cmd("GETCONF Nickname SocksPort ExitRelay").await,
        "250-Nickname=guard\r\n250-SocksPort=0\r\n250 ExitRelay=0\r\n"
    );
    assert!(
        c.cmd("GETCONF ORPort")
            .await
            .starts_with(&format!("250 ORPort=127.0.0.1:{}", or.port()))
    );
    assert_eq!(
        c.cmd("SETCONF Nickname=other").await,
        "553 Unable to set option: Nickname cannot be changed on a running onionmix relay\r\n"
    );
    assert_eq!(c.cmd("SETCONF Nickname=guard").await, "250 OK\r\n");
    assert_eq!(
        c.cmd(&format!(
            "SETCONF __OwningControllerProcess={}",
            std::process::id()
        ))
        .await,
        "250 OK\r\n"
    );
    assert_eq!(
        c.cmd("RESETCONF __OwningControllerProcess").await,
        "250 OK\r\n"
    );
    assert_eq!(
        c.cmd("EXTENDCIRCUIT 0").await,
        "551 Building circuits is not available on an onionmix relay\r\n"
    );
    assert_eq!(
        c.cmd("CLOSECIRCUIT 3").await,
        "552 Unknown circuit \"3\"\r\n"
    );

    // A client builds guard -> middle: the guard opens a link to the
    // middle (ORCONN LAUNCHED, CONNECTED), the middle sees the guard's
    // (CONNECTED); cells are counted on both.
    let mut m = Ctl::auth(middle.control, &middle.ctx.cfg.data_dir).await;
    assert_eq!(m.cmd("SETEVENTS ORCONN").await, "250 OK\r\n");
    assert_eq!(c.cmd("SETEVENTS ORCONN BW SIGNAL").await, "250 OK\r\n");
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    let chan = mgr.get(&guard.hop).await.unwrap();
    let circ = circuit::build(chan, vec![guard.hop.clone(), middle.hop.clone()], T)
        .await
        .expect("2-hop circuit");
    let mfp = hex::encode_upper(middle.ctx.rsa_id);
    let l = c.event("650 ORCONN ").await;
    assert!(
        l.starts_with(&format!("650 ORCONN ${mfp} LAUNCHED ID=")),
        "{l}"
    );
    let l = c.event("650 ORCONN ").await;
    assert!(
        l.starts_with(&format!("650 ORCONN ${mfp} CONNECTED ID=")),
        "{l}"
    );
    let l = m.event("650 ORCONN ").await;
    assert!(
        l.starts_with(&format!("650 ORCONN ${fp} CONNECTED ID=")),
        "{l}"
    );
    let bw = c.event("650 BW ").await;
    assert!(bw.ends_with("\r\n"), "{bw}");
    let st = c.cmd("GETINFO orconn-status").await;
    assert!(st.contains(&format!("${mfp} CONNECTED")), "{st}");
    drop(circ);
    for r in [&guard, &middle] {
        let t = &r.ctx.control.traffic;
        let rd = t.read.load(std::sync::atomic::Ordering::Relaxed);
        let wr = t.written.load(std::sync::atomic::Ordering::Relaxed);
        assert!(
            rd > 0 && wr > 0,
            "{}: read {rd} written {wr}",
            r.hop.nickname
        );
    }
    let tr = c.cmd("GETINFO traffic/read").await;
    assert!(!tr.starts_with("250-traffic/read=0\r\n"), "{tr}");

    // SIGNAL RELOAD re-reads the file; the event follows.
    assert_eq!(c.cmd("SIGNAL RELOAD").await, "250 OK\r\n");
    assert_eq!(c.event("650 SIGNAL ").await, "650 SIGNAL RELOAD\r\n");

    // Bad input: an unterminated quote, a line past 64 KiB.
    assert!(c.cmd("GETCONF \"Nickname").await.starts_with("552 "));
    let mut long = vec![b'A'; 70 * 1024];
    long.extend_from_slice(b"\r\n");
    c.w.write_all(&long).await.unwrap();
    assert_eq!(c.reply().await, "500 Line too long.\r\n");
    assert!(c.closed().await);
    // The port keeps serving.
    let mut c = Ctl::auth(guard.control, &guard.ctx.cfg.data_dir).await;
    assert_eq!(
        c.cmd("GETINFO fingerprint").await,
        format!("250-fingerprint={fp}\r\n250 OK\r\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_shutdown_halt_and_ownership() {
    let tmp = tempfile::tempdir().unwrap();

    // SHUTDOWN: a notice, no new links, the exit after the wait.
    let r = start_relay(tmp.path(), "slow", "shutdown_wait_secs = 2").await;
    let mut c = Ctl::auth(r.control, &r.ctx.cfg.data_dir).await;
    assert_eq!(c.cmd("SETEVENTS NOTICE").await, "250 OK\r\n");
    assert_eq!(c.cmd("SIGNAL SHUTDOWN").await, "250 OK\r\n");
    assert_eq!(
        c.event("650 NOTICE ").await,
        "650 NOTICE Interrupt: we have stopped accepting new connections, and will shut down in 2 seconds. Interrupt again to exit now.\r\n"
    );
    let mgr = ChanMgr::new(TlsTransport::client().unwrap());
    assert!(
        mgr.get(&r.hop).await.is_err(),
        "a link opened after SHUTDOWN"
    );
    assert!(shutdown_requested(&r).await);

    // HALT: at once.
    let r = start_relay(tmp.path(), "halt", "").await;
    let mut c = Ctl::auth(r.control, &r.ctx.cfg.data_dir).await;
    assert_eq!(c.cmd("SIGNAL HALT").await, "250 OK\r\n");
    assert!(shutdown_requested(&r).await);

    // TAKEOWNERSHIP: the relay stops when the owner's connection closes.
    let r = start_relay(tmp.path(), "owned", "").await;
    let mut c = Ctl::auth(r.control, &r.ctx.cfg.data_dir).await;
    assert_eq!(c.cmd("TAKEOWNERSHIP").await, "250 OK\r\n");
    assert_eq!(c.cmd("QUIT").await, "250 closing connection\r\n");
    drop(c);
    assert!(shutdown_requested(&r).await);

    // A control port off loopback needs allow_public_control.
    let bad = RelayConfig::parse(&format!(
        "data_dir = {:?}\nnickname = \"x\"\nor_listen = \"127.0.0.1:0\"\ncontrol_port = \"0.0.0.0:9051\"\n",
        tmp.path().display().to_string()
    ));
    assert!(bad.unwrap_err().contains("allow_public_control"));
}
