//! Leak tests of `onionmix tunnel`: packets are captured (an `AF_PACKET`
//! socket per namespace, `onionmix_emu::capture`; no tcpdump) on every
//! interface of the tunnel's namespace and of the host while traffic runs
//! through an onionmix network on loopback, and the tunnel process's own
//! sockets are audited (`/proc/<pid>/fd` against the socket tables) all
//! along. Then the client is killed (SIGKILL) in the middle of a 20 MiB
//! download, and new flows are tried.
//!
//! What must hold:
//! - the namespace has no interface but `lo` and the TUN, and `lo` carries
//!   only loopback traffic: the program's packets go into the tunnel or
//!   nowhere;
//! - no packet on the host carries the namespace's addresses or a
//!   synthetic address; the program tries listeners the test keeps on the
//!   host's own address (TCP and UDP), by address, before and after the
//!   kill: before, whatever reaches them comes from a socket of one of the
//!   network's exits (the testbed's exits accept that address: the flow
//!   went through the client); after, nothing reaches them;
//! - the tunnel process connects only to the client (its SOCKS port and
//!   the UDP relay it names, on the client's address);
//! - with the client killed, the running download fails, new flows fail
//!   (by name and by address), and from a few seconds after the kill no
//!   connection reaches the sink at all (the only way there was the
//!   client);
//! - the capture lost nothing (the kernel's drop counter is 0).
//!
//! Needs root, `ip`, `curl`, `bash`; skipped otherwise (fails when
//! ONIONMIX_REQUIRE_INTEROP=1).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

use common_net::TunnelProc;
use onionmix_emu::capture::{Capture, CaptureResult, summarize};
use onionmix_node::tunnel::{APP_V4, APP_V6, procnet};
use onionmix_testbed::spec::Implementation;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// The host's own address (else loopback, which the namespace cannot
/// reach anyway).
fn host_ip() -> IpAddr {
    let out = std::process::Command::new("ip")
        .args(["-4", "-o", "addr", "show", "scope", "global"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .skip_while(|w| *w != "inet")
        .nth(1)
        .and_then(|c| c.split('/').next().and_then(|a| a.parse().ok()))
        .unwrap_or(IpAddr::from([127, 0, 0, 1]))
}

/// Addresses that exist only inside the tunnel's namespace.
fn namespace_only(ip: IpAddr) -> bool {
    let synthetic_v4: onionmix_tunnel::mapping::AddrRange =
        onionmix_tunnel::mapping::DEFAULT_V4.parse().unwrap();
    let synthetic_v6: onionmix_tunnel::mapping::AddrRange =
        onionmix_tunnel::mapping::DEFAULT_V6.parse().unwrap();
    ip == IpAddr::V4(APP_V4)
        || ip == IpAddr::V6(APP_V6)
        || synthetic_v4.contains(ip)
        || synthetic_v6.contains(ip)
}

/// Sample the tunnel process's sockets until `stop`; every remote address
/// it had.
fn audit(pid: u32, stop: Arc<AtomicBool>) -> std::thread::JoinHandle<BTreeSet<(bool, SocketAddr)>> {
    std::thread::spawn(move || {
        let mut seen = BTreeSet::new();
        while !stop.load(Ordering::Relaxed) {
            for (tcp, s) in procnet::sockets_of(pid) {
                if !s.remote.ip().is_unspecified() {
                    seen.insert((tcp, s.remote));
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        seen
    })
}

/// Who reached the traps (TCP listener, UDP socket): for each connection
/// or datagram, when (from `t0`) and which exit's socket it came from
/// (`None`: no exit's).
type Hits = Vec<(Duration, SocketAddr, Option<String>)>;

fn trap(
    tcp: std::net::TcpListener,
    udp: std::net::UdpSocket,
    exits: Vec<(String, u32)>,
    t0: Instant,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Hits> {
    std::thread::spawn(move || {
        let owner = |peer: SocketAddr, tcp: bool| {
            exits.iter().find_map(|(name, pid)| {
                procnet::sockets_of(*pid)
                    .iter()
                    .any(|(t, s)| *t == tcp && s.local == peer)
                    .then(|| name.clone())
            })
        };
        let mut hits = Vec::new();
        let mut held = Vec::new();
        let mut buf = [0u8; 2048];
        while !stop.load(Ordering::Relaxed) {
            if let Ok((c, peer)) = tcp.accept() {
                hits.push((t0.elapsed(), peer, owner(peer, true)));
                // Held open: the exit's socket stays while we look.
                held.push(c);
            }
            if let Ok((_, peer)) = udp.recv_from(&mut buf) {
                hits.push((t0.elapsed(), peer, owner(peer, false)));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        hits
    })
}

fn syns_to(cap: &CaptureResult, port: u16, after: Duration) -> usize {
    cap.packets
        .iter()
        .filter(|p| p.at >= after)
        .filter_map(|p| summarize(&p.head))
        .filter(|s| {
            s.proto == 6
                && s.ports.is_some_and(|(_, d)| d == port)
                && s.tcp_flags.is_some_and(|f| f & 0x12 == 0x02)
        })
        .count()
}

#[test]
fn nothing_leaves_the_namespace_but_through_the_client() {
    if !onionmix_testsupport::require_or_skip(
        "nothing_leaves_the_namespace_but_through_the_client",
        common_net::tunnel_tools(),
    ) {
        return;
    }
    let _s = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let net = common_net::start("onionmix-basic", &dir);
    let info = net.info().clone();
    let sink = info.sink.clone().expect("sink");
    let client = info.clients(Some(Implementation::Onionmix))[0].clone();
    let socks = client.socks_addr().expect("socks");

    // Listeners a leak would reach: the host's own address.
    let host = host_ip();
    let tcp_trap = std::net::TcpListener::bind((host, 0)).unwrap();
    tcp_trap.set_nonblocking(true).unwrap();
    let trap_port = tcp_trap.local_addr().unwrap().port();
    let udp_trap = std::net::UdpSocket::bind((host, 0)).unwrap();
    udp_trap.set_nonblocking(true).unwrap();
    let udp_trap_port = udp_trap.local_addr().unwrap().port();

    let host_cap = Capture::start(None).expect("capture on the host");
    let t0 = Instant::now();
    let exits: Vec<(String, u32)> = info
        .nodes
        .iter()
        .filter(|n| n.roles.contains(&onionmix_testbed::spec::Role::Exit))
        .map(|n| (n.name.clone(), n.pid))
        .collect();
    let stop_trap = Arc::new(AtomicBool::new(false));
    let trapper = trap(tcp_trap, udp_trap, exits, t0, stop_trap.clone());
    let name = format!("omxleak{}", std::process::id() % 100_000);
    let tunnel = TunnelProc::start(socks, &name, tmp.path(), &[]);
    let ns_cap = Capture::start(Some(&name)).expect("capture in the namespace");
    let stop_audit = Arc::new(AtomicBool::new(false));
    let auditor = audit(tunnel.child.id(), stop_audit.clone());
    let long = Duration::from_secs(300);

    // Phase 1: the client is up. A download by name works; tries to
    // reach the host directly go into the tunnel.
    let body = tmp.path().join("body1");
    let url = format!(
        "http://{}:{}/bytes/{}",
        sink.hostname,
        sink.http.port(),
        1 << 20
    );
    let out = tunnel.run(
        "curl",
        &[
            "-sS",
            "--max-time",
            "240",
            "-o",
            body.to_str().unwrap(),
            &url,
        ],
        long,
    );
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let got = std::fs::read(&body).unwrap();
    assert_eq!(
        Sha256::digest(&got).as_slice(),
        onionmix_testbed::sink::digest(1 << 20)
    );
    let direct = format!("http://{host}:{trap_port}/");
    let udp_try = format!(
        "printf leak > /dev/udp/{host}/{udp_trap_port}; printf leak > /dev/udp/{host}/{udp_trap_port}; sleep 1"
    );
    // The trap accepts but never answers: curl times out.
    let _ = tunnel.run(
        "curl",
        &["-sS", "--max-time", "10", "-o", "/dev/null", &direct],
        long,
    );
    let _ = tunnel.run("bash", &["-c", &udp_try], long);

    // Phase 2: kill the client in the middle of a 20 MiB download.
    let body = tmp.path().join("body2");
    let url = format!(
        "http://{}:{}/bytes/{}",
        sink.hostname,
        sink.http.port(),
        20 << 20
    );
    let dl = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            &name,
            "curl",
            "-sS",
            "--max-time",
            "240",
            // Slow enough that the rest cannot arrive before the kill.
            "--limit-rate",
            "2M",
            "-o",
        ])
        .arg(&body)
        .arg(&url)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    common_net::wait_for(
        "2 MiB of the download",
        Duration::from_secs(240),
        Duration::from_millis(20),
        || std::fs::metadata(&body).ok().filter(|m| m.len() >= 2 << 20),
    );
    assert!(
        onionmix_testbed::proc::alive(client.pid, client.start_time),
        "the client is ours to kill"
    );
    let killed_at = t0.elapsed();
    std::process::Command::new("kill")
        .args(["-9", &client.pid.to_string()])
        .status()
        .unwrap();
    let out = dl.wait_with_output().unwrap();
    let len = std::fs::metadata(&body).map(|m| m.len()).unwrap_or(0);
    assert!(
        !out.status.success() && len < 20 << 20,
        "the download must fail with the client gone ({len} bytes, {})",
        out.status
    );

    // Phase 3: new flows, a few seconds after the kill (anything in
    // flight at the kill has settled by then).
    let quiet_from = killed_at + Duration::from_secs(5);
    while t0.elapsed() < quiet_from {
        std::thread::sleep(Duration::from_millis(100));
    }
    for u in [
        format!("http://{}:{}/bytes/10", sink.hostname, sink.http.port()),
        direct.clone(),
    ] {
        let out = tunnel.run(
            "curl",
            &["-sS", "--max-time", "30", "-o", "/dev/null", &u],
            long,
        );
        assert!(!out.status.success(), "{u} must fail without a client");
    }
    let _ = tunnel.run("bash", &["-c", &udp_try], long);
    let sink_addr = format!("http://{}/bytes/10", sink.http);
    let out = tunnel.run(
        "curl",
        &["-sS", "--max-time", "30", "-o", "/dev/null", &sink_addr],
        long,
    );
    assert!(
        !out.status.success(),
        "{sink_addr} must fail without a client"
    );

    // A clean stop; the namespace is gone.
    let st = tunnel.stop();
    assert!(st.success(), "onionmix tunnel after SIGTERM: {st}");
    stop_audit.store(true, Ordering::Relaxed);
    stop_trap.store(true, Ordering::Relaxed);
    let remotes = auditor.join().unwrap();
    let hits = trapper.join().unwrap();
    let ns = ns_cap.stop().expect("namespace capture");
    let hostc = host_cap.stop().expect("host capture");
    assert!(
        !onionmix_node::tunnel::netns::exists(&name),
        "namespace left behind"
    );

    // Nothing lost by the captures.
    assert_eq!(
        (ns.dropped, ns.overflow),
        (0, 0),
        "namespace capture incomplete"
    );
    assert_eq!(
        (hostc.dropped, hostc.overflow),
        (0, 0),
        "host capture incomplete"
    );
    // The namespace: only lo and the TUN; lo only loopback.
    let ifaces: BTreeSet<&str> = ns.packets.iter().map(|p| p.interface.as_str()).collect();
    assert!(
        ifaces.iter().all(|i| *i == "lo" || i.starts_with("omxtun")),
        "interfaces that carried packets in the namespace: {ifaces:?}"
    );
    assert!(ns.packets.iter().any(|p| p.interface.starts_with("omxtun")));
    for p in ns.packets.iter().filter(|p| p.interface == "lo") {
        if let Some(s) = summarize(&p.head) {
            assert!(
                s.src.is_loopback() && s.dst.is_loopback(),
                "on the namespace's lo: {s:?}"
            );
        }
    }
    // The host: no namespace address anywhere, nothing to the traps.
    for p in &hostc.packets {
        let Some(s) = summarize(&p.head) else {
            continue;
        };
        assert!(
            !namespace_only(s.src) && !namespace_only(s.dst),
            "a namespace address on the host ({}): {s:?}",
            p.interface
        );
    }
    // The traps: reached only from exits' sockets, and not after the kill.
    eprintln!("traps reached: {hits:?}");
    for (at, peer, owner) in &hits {
        assert!(
            owner.is_some(),
            "the trap was reached from {peer}, not by an exit"
        );
        assert!(
            *at < quiet_from,
            "the trap was reached after the kill ({at:?})"
        );
    }
    let to_trap_late = hostc
        .packets
        .iter()
        .filter(|p| p.at >= quiet_from)
        .filter_map(|p| summarize(&p.head))
        .filter(|s| {
            s.dst == host
                && s.ports.is_some_and(|(_, d)| {
                    (s.proto == 6 && d == trap_port) || (s.proto == 17 && d == udp_trap_port)
                })
        })
        .count();
    assert_eq!(to_trap_late, 0, "packets to the traps after the kill");
    // Before the kill exits reached the sink; after it, nothing did.
    assert!(syns_to(&hostc, sink.http.port(), Duration::ZERO) > 0);
    assert_eq!(
        syns_to(&hostc, sink.http.port(), quiet_from),
        0,
        "a connection reached the sink with the client dead"
    );
    // The tunnel process talked only to the client.
    assert!(!remotes.is_empty());
    for (tcp, r) in &remotes {
        assert_eq!(
            r.ip(),
            socks.ip(),
            "the tunnel's socket to {r} (tcp: {tcp})"
        );
        if *tcp {
            assert_eq!(*r, socks, "the tunnel's TCP socket to {r}");
        }
    }
    eprintln!(
        "captured {} packets in the namespace, {} on the host; tunnel remotes {remotes:?}",
        ns.packets.len(),
        hostc.packets.len()
    );
    drop(net);
}
