//! Issue 11 items 3 and 4: DirPort slowloris and ORPort channel floods from
//! addresses the network does not know.
//!
//! On `onionmix-basic` (relays closing circuitless client channels after
//! 45-68 s), from 127.0.0.0/8 addresses other than the nodes' own:
//! - every authority's DirPort is held by idle connections that are
//!   re-opened as soon as they close, many more than the 300 that used to
//!   stop voting;
//! - one relay's ORPort gets thousands of completed link handshakes
//!   (TLS, VERSIONS, NETINFO; no circuits), one address trying more than its
//!   share.
//!
//! Meanwhile the authorities keep publishing consensuses and a fresh client
//! (no cached state) bootstraps and carries a verified download. Each
//! flooding address holds at most its share of ORPort channels; the relay
//! closes the idle ones by itself, and its resident memory comes back
//! within 2x of what it was before the flood.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use onionmix_link::TlsTransport;
use onionmix_proto::channel::{ExpectedPeer, InitiatorHandshake};
use onionmix_testbed::launcher::{self, LaunchOptions, NetworkGuard};
use onionmix_testbed::spec::Role;
use onionmix_testbed::spec::Spec;

/// Relays' idle timeout for client channels in this test (tor: 180 s).
const IDLE_SECS: u64 = 45;
/// ORPort connections the relay lets one unknown address hold.
const PER_ADDR: usize = 100;

fn rss_bytes(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// A flooding source address: 127.0.<a>.<b>, never a node's 127.0.0.1.
fn src(a: u8, b: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(127, 0, a, b))
}

/// TLS + VERSIONS + CERTS/AUTH_CHALLENGE + NETINFO as a client, from
/// `local`; returns the open stream (no circuits are ever made).
async fn link_handshake(
    local: IpAddr,
    addr: SocketAddr,
    rsa_id: [u8; 20],
) -> Result<onionmix_link::tls::TlsStream, String> {
    let transport = TlsTransport::client().map_err(|e| e.to_string())?;
    let (mut tls, info) = transport
        .connect_from(Some(local), addr)
        .await
        .map_err(|e| e.to_string())?;
    let digest = info.responder_cert_digest().ok_or("no certificate")?;
    let verifier = onionmix_node::glue::responder_verifier();
    let now = onionmix_node::clock::now_unix();
    let hs = InitiatorHandshake::new(
        Some(ExpectedPeer {
            rsa_id,
            ed_id: None,
        }),
        verifier.as_ref(),
        digest,
        now,
    )
    .with_peer_addr(addr.ip());
    onionmix_node::glue::drive_initiator_handshake(&mut tls, hs, Duration::from_secs(60))
        .await
        .map_err(|e| e.to_string())?;
    Ok(tls)
}

/// `tries` link handshakes from `ip`, one after another; the streams that
/// completed, kept open.
async fn flood_from(
    ip: IpAddr,
    tries: usize,
    relay_or: SocketAddr,
    relay_id: [u8; 20],
) -> Vec<onionmix_link::tls::TlsStream> {
    let mut held = Vec::new();
    for _ in 0..tries {
        match tokio::time::timeout(
            Duration::from_secs(30),
            link_handshake(ip, relay_or, relay_id),
        )
        .await
        {
            Ok(Ok(s)) => held.push(s),
            _ => tokio::time::sleep(Duration::from_millis(60)).await,
        }
    }
    held
}

/// Hold idle DirPort connections from `sources` (8 slots each would be the
/// limit; we try `per_src`), re-opening each as soon as it closes, until
/// `stop`. Returns the number of connections opened.
fn dirport_slowloris(
    target: SocketAddr,
    sources: Vec<IpAddr>,
    per_src: usize,
    stop: Arc<AtomicBool>,
    opened: Arc<AtomicUsize>,
) {
    for ip in sources {
        for _ in 0..per_src {
            let stop = stop.clone();
            let opened = opened.clone();
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let Ok(sock) = tokio::net::TcpSocket::new_v4() else {
                        return;
                    };
                    if sock.bind(SocketAddr::new(ip, 0)).is_err() {
                        return;
                    }
                    let t = Instant::now();
                    match tokio::time::timeout(Duration::from_secs(5), sock.connect(target)).await {
                        Ok(Ok(mut s)) => {
                            opened.fetch_add(1, Ordering::Relaxed);
                            // Half a request line, then nothing.
                            let _ = s.write_all(b"GET /tor/status-vote/cur").await;
                            let mut b = [0u8; 512];
                            while !stop.load(Ordering::Relaxed) {
                                match tokio::time::timeout(
                                    Duration::from_millis(500),
                                    s.read(&mut b),
                                )
                                .await
                                {
                                    Ok(Ok(0)) | Ok(Err(_)) => break,
                                    _ => {}
                                }
                            }
                            // Refused at once: come back a little later.
                            if t.elapsed() < Duration::from_secs(1) {
                                tokio::time::sleep(Duration::from_millis(100)).await;
                            }
                        }
                        _ => tokio::time::sleep(Duration::from_millis(100)).await,
                    }
                }
            });
        }
    }
}

/// The `valid-after` line of the consensus `auth` serves now.
async fn valid_after(auth: SocketAddr) -> Option<String> {
    tokio::task::spawn_blocking(move || {
        launcher::http_get_plain(auth, "/tor/status-vote/current/consensus-microdesc")?
            .lines()
            .find(|l| l.starts_with("valid-after "))
            .map(str::to_string)
    })
    .await
    .ok()?
}

/// Start an onionmix client with no state, using the network's client
/// config with its own data directory and SOCKS port.
fn fresh_client(template: &Path, dir: &Path) -> (std::process::Child, SocketAddr) {
    let port = onionmix_testsupport::ports::free_port("127.0.0.1").unwrap();
    let socks: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    std::fs::create_dir_all(dir).unwrap();
    let cfg: String = std::fs::read_to_string(template)
        .unwrap()
        .lines()
        // The running client holds the control port.
        .filter(|l| !l.starts_with("control_port"))
        .map(|l| {
            if l.starts_with("data_dir") {
                format!("data_dir = {:?}", dir.display().to_string())
            } else if l.starts_with("socks_listen") {
                format!("socks_listen = \"{socks}\"")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let path = dir.join("client.toml");
    std::fs::write(&path, cfg).unwrap();
    let log = std::fs::File::create(dir.join("client.log")).unwrap();
    let child = common_net::onionmix_cmd()
        .args(["client", "--config"])
        .arg(&path)
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    (child, socks)
}

#[test]
fn floods_from_unknown_addresses_do_not_lock_out_the_network() {
    let _serial = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let mut spec = Spec::load("onionmix-basic").unwrap();
    for g in spec
        .nodes
        .iter_mut()
        .filter(|g| matches!(g.role, Role::Relay | Role::Exit))
    {
        g.config
            .push(format!("idle_client_channel_secs = {IDLE_SECS}"));
    }
    let mut opts = LaunchOptions::new(env!("CARGO_BIN_EXE_onionmix").into());
    opts.timeout = Some(common_net::TEST_BOOTSTRAP_TIMEOUT);
    let net = NetworkGuard(Some(
        launcher::start(&spec, &tmp.path().join("net"), &opts).expect("network start"),
    ));
    let info = net.info().clone();
    let sink = info.sink.clone().unwrap();
    let auths: Vec<SocketAddr> = info
        .nodes
        .iter()
        .filter(|n| n.has_role(Role::Authority))
        .map(|n| n.dir_addr().unwrap())
        .collect();
    let relay = info
        .nodes
        .iter()
        .find(|n| n.has_role(Role::Relay) && !n.has_role(Role::Authority))
        .unwrap()
        .clone();
    let relay_or: SocketAddr = format!("{}:{}", relay.address, relay.or_port.unwrap())
        .parse()
        .unwrap();
    let mut relay_id = [0u8; 20];
    hex::decode_to_slice(relay.fingerprint.as_deref().unwrap(), &mut relay_id).unwrap();
    let client_template = info.clients(None)[0].data_dir.join("client.toml");

    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let idle_rss = rss_bytes(relay.pid);
        assert!(idle_rss > 0, "relay RSS readable");
        let before = valid_after(auths[0])
            .await
            .expect("a consensus before the flood");

        // DirPort slowloris on every authority: 60 addresses x 10 idle
        // connections each, re-opened as they close.
        let stop = Arc::new(AtomicBool::new(false));
        let dir_opened = Arc::new(AtomicUsize::new(0));
        for (i, a) in auths.iter().enumerate() {
            let sources = (0..60u8).map(|b| src(10 + i as u8, b + 1)).collect();
            dirport_slowloris(*a, sources, 10, stop.clone(), dir_opened.clone());
        }

        // ORPort flood: one address tries 150 link handshakes and keeps
        // what it gets (it must get its share and no more), then 29 more
        // addresses take theirs; all kept open.
        let t0 = Instant::now();
        let first = flood_from(src(20, 1), 150, relay_or, relay_id).await;
        assert!(
            t0.elapsed() < Duration::from_secs(IDLE_SECS),
            "the first address's flood took {:?}, longer than the idle timeout",
            t0.elapsed()
        );
        assert_eq!(first.len(), PER_ADDR, "one address holds exactly its share");
        let mut tasks = Vec::new();
        for b in 1..30u8 {
            tasks.push(tokio::spawn(flood_from(
                src(20, b + 1),
                PER_ADDR,
                relay_or,
                relay_id,
            )));
        }
        let mut held = vec![first];
        for t in tasks {
            held.push(t.await.unwrap());
        }
        let flood_done = Instant::now();
        let per_src: Vec<usize> = held.iter().map(Vec::len).collect();
        let total: usize = per_src.iter().sum();
        let peak_rss = rss_bytes(relay.pid);
        eprintln!(
            "ORPort flood: {total} channels held ({per_src:?}); relay RSS {} -> {} KiB; \
             DirPort flood connections so far: {}",
            idle_rss / 1024,
            peak_rss / 1024,
            dir_opened.load(Ordering::Relaxed)
        );
        assert!(total >= 1000, "the flood really happened: {total}");
        assert!(dir_opened.load(Ordering::Relaxed) >= 600);

        // While both floods go on: a fresh client bootstraps and downloads,
        // and the authorities keep voting.
        let (mut child, socks) = fresh_client(&client_template, &tmp.path().join("fresh"));
        let t0 = Instant::now();
        loop {
            let r =
                common_net::download(socks, &sink.hostname, sink.http.port(), 1 << 20, None).await;
            if let Ok((resp, _)) = &r
                && resp.sha256_ok()
                && resp.body.len() == 1 << 20
            {
                break;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(240),
                "a fresh client could not download during the floods: {:?}",
                r.err()
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
        eprintln!(
            "fresh client bootstrapped and downloaded 1 MiB in {:?}",
            t0.elapsed()
        );
        let _ = child.kill();
        let _ = child.wait();
        let t0 = Instant::now();
        let after = loop {
            if let Some(va) = valid_after(auths[1]).await
                && va != before
            {
                break va;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(120),
                "no new consensus during the floods"
            );
            tokio::time::sleep(Duration::from_secs(5)).await;
        };
        eprintln!("consensus moved from {before:?} to {after:?} during the floods");

        // The relay closes the idle flood channels by itself (idle timeout
        // 20-30 s), and gives the memory back.
        let closed = Arc::new(AtomicUsize::new(0));
        let mut waits = Vec::new();
        for s in held.into_iter().flatten() {
            let closed = closed.clone();
            waits.push(tokio::spawn(async move {
                let mut s = s;
                let mut b = [0u8; 1024];
                let deadline = Duration::from_secs(IDLE_SECS * 3 / 2 + 90);
                let _ = tokio::time::timeout(deadline, async {
                    loop {
                        match s.read(&mut b).await {
                            Ok(0) | Err(_) => break,
                            Ok(_) => {}
                        }
                    }
                })
                .await
                .map(|_| closed.fetch_add(1, Ordering::Relaxed));
            }));
        }
        for w in waits {
            w.await.unwrap();
        }
        assert_eq!(
            closed.load(Ordering::Relaxed),
            total,
            "the relay closed every idle flood channel"
        );
        eprintln!(
            "idle flood channels closed {:?} after the flood",
            flood_done.elapsed()
        );
        stop.store(true, Ordering::Relaxed);
        // The relay trims its heap every 10 s once load falls.
        let t0 = Instant::now();
        let settled = loop {
            let r = rss_bytes(relay.pid);
            if r <= 2 * idle_rss {
                break r;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "relay RSS {} KiB, not back within 2x of idle {} KiB",
                r / 1024,
                idle_rss / 1024
            );
            tokio::time::sleep(Duration::from_secs(2)).await;
        };
        eprintln!(
            "relay RSS: idle {} KiB, flood {} KiB, after {} KiB",
            idle_rss / 1024,
            peak_rss / 1024,
            settled / 1024
        );
    });
    drop(net);
}
