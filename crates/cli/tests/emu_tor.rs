//! A whole stock-tor network (the tor-basic shape: 3 authorities, 2 relays,
//! 2 exits, 1 client, plus the sink) bootstraps through the emulator with
//! 20 ms one-way delay on every link, and carries a verified download. Each
//! node runs in its own namespace with its own address; the test (root
//! namespace) reaches the client's SOCKS port over the unimpaired host
//! endpoint. This is the recipe the launcher integration follows (see
//! docs/emulator.md). Needs root and stock tor (`apt-get install tor`).

mod common_net;

use onionmix_emu::probe::{ChildGuard, body_byte};
use onionmix_emu::testkit::TestNet;
use onionmix_emu::{LinkProfile, NodeSpec, Topology};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const SUBNET: &str = "10.77.20.0/24";
const OR_PORT: u16 = 5000;
const DIR_PORT: u16 = 7000;
const SOCKS_PORT: u16 = 9050;
const SINK_PORT: u16 = 80;
const DELAY_MS: f64 = 20.0;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_onionmix"))
}

#[derive(Clone, Copy, PartialEq)]
enum Role {
    Auth,
    Relay,
    Exit,
    Client,
}

struct Node {
    name: String,
    role: Role,
    addr: Ipv4Addr,
    dir: PathBuf,
    fingerprint: String,
    v3ident: String,
}

fn run_ok(cmd: &mut Command, what: &str) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn keys(n: &mut Node) {
    let keys = n.dir.join("keys");
    std::fs::create_dir_all(&keys).expect("keys dir");
    if n.role == Role::Auth {
        let mut c = Command::new("tor-gencert");
        c.current_dir(&keys)
            .args(["--create-identity-key", "-m", "12", "-a"])
            .arg(format!("{}:{DIR_PORT}", n.addr))
            .args(["--passphrase-fd", "0"])
            .stdin(std::process::Stdio::null());
        run_ok(&mut c, "tor-gencert");
        let cert = std::fs::read_to_string(keys.join("authority_certificate")).expect("cert");
        n.v3ident = cert
            .lines()
            .find_map(|l| l.strip_prefix("fingerprint "))
            .expect("fingerprint line")
            .trim()
            .to_string();
    }
    if n.role != Role::Client {
        let out = run_ok(
            Command::new("tor")
                .arg("--list-fingerprint")
                .arg("--DataDirectory")
                .arg(&n.dir)
                .args(["--ORPort", &OR_PORT.to_string()]),
            "tor --list-fingerprint",
        );
        let line = out.lines().last().expect("fingerprint output");
        n.fingerprint = line.split_whitespace().skip(1).collect::<String>();
        assert_eq!(n.fingerprint.len(), 40, "{out}");
    }
}

fn torrc(n: &Node, auths: &[String]) -> String {
    let mut t = vec![
        "TestingTorNetwork 1".to_string(),
        format!("DataDirectory {}", n.dir.display()),
        format!("Log notice file {}", n.dir.join("notice.log").display()),
        format!("Nickname {}", n.name),
        "RunAsDaemon 0".into(),
        "Sandbox 0".into(),
        "PathsNeededToBuildCircuits 0.67".into(),
        "TestingDirAuthVoteExit *".into(),
        "TestingDirAuthVoteHSDir *".into(),
        "TestingDirAuthVoteGuard *".into(),
        "TestingMinExitFlagThreshold 0".into(),
        "V3AuthNIntervalsValid 2".into(),
        "ControlPort 0".into(),
    ];
    t.extend(auths.iter().cloned());
    if n.role == Role::Client {
        t.push(format!("SocksPort {}:{SOCKS_PORT}", n.addr));
        t.push("SocksPolicy accept *".into());
        t.push("ClientRejectInternalAddresses 0".into());
    } else {
        t.push("SocksPort 0".into());
        t.push(format!("Address {}", n.addr));
        t.push(format!("ORPort {}:{OR_PORT}", n.addr));
        t.push(format!("DirPort {}:{DIR_PORT}", n.addr));
        t.push("AssumeReachable 1".into());
    }
    match n.role {
        Role::Exit => {
            t.push("ExitRelay 1".into());
            t.push(format!("ExitPolicy accept {SUBNET}:*"));
            t.push("ExitPolicyRejectPrivate 0".into());
        }
        Role::Auth | Role::Relay => t.push("ExitPolicy reject *:*".into()),
        Role::Client => {}
    }
    if n.role == Role::Auth {
        for l in [
            "AuthoritativeDirectory 1",
            "V3AuthoritativeDirectory 1",
            "V3AuthVotingInterval 20",
            "V3AuthVoteDelay 4",
            "V3AuthDistDelay 4",
            "TestingV3AuthInitialVotingInterval 20",
            "TestingV3AuthInitialVoteDelay 4",
            "TestingV3AuthInitialDistDelay 4",
        ] {
            t.push(l.into());
        }
    }
    t.join("\n") + "\n"
}

/// SOCKS5 CONNECT to `target` through `socks`, then GET /bytes/<n>.
/// Returns (time to first body byte after sending GET, body).
fn download(socks: SocketAddr, target: SocketAddr, n: u64) -> std::io::Result<(Duration, Vec<u8>)> {
    let mut s = TcpStream::connect_timeout(&socks, Duration::from_secs(5))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    s.write_all(&[5, 1, 0])?;
    let mut r = [0u8; 2];
    s.read_exact(&mut r)?;
    if r != [5, 0] {
        return Err(std::io::Error::other(format!("socks method {r:?}")));
    }
    let ip = match target.ip() {
        std::net::IpAddr::V4(a) => a.octets(),
        std::net::IpAddr::V6(_) => return Err(std::io::Error::other("v4 only")),
    };
    let mut req = vec![5, 1, 0, 1];
    req.extend_from_slice(&ip);
    req.extend_from_slice(&target.port().to_be_bytes());
    s.write_all(&req)?;
    let mut rep = [0u8; 10];
    s.read_exact(&mut rep)?;
    if rep[1] != 0 {
        return Err(std::io::Error::other(format!("socks reply {}", rep[1])));
    }
    let t0 = Instant::now();
    s.write_all(format!("GET /bytes/{n} HTTP/1.0\r\nHost: sink\r\n\r\n").as_bytes())?;
    let mut first = None;
    let mut all = Vec::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let k = s.read(&mut buf)?;
        if k == 0 {
            break;
        }
        first.get_or_insert_with(|| t0.elapsed());
        all.extend_from_slice(&buf[..k]);
    }
    let resp =
        onionmix_http::parse_response(&all, &onionmix_http::Limits::DEFAULT, all.len(), false)
            .map_err(std::io::Error::other)?;
    if resp.head.status != 200 {
        return Err(std::io::Error::other(format!(
            "HTTP {} {}",
            resp.head.status, resp.head.reason
        )));
    }
    Ok((first.unwrap_or_default(), resp.body))
}

#[test]
fn emu_tor_basic_20ms_bootstraps_and_downloads() {
    if !common_net::emulator_available("emu_tor_basic_20ms_bootstraps_and_downloads")
        || !common_net::tor_available("emu_tor_basic_20ms_bootstraps_and_downloads")
    {
        return;
    }
    let mut plan = vec![];
    for i in 0..3 {
        plan.push((format!("auth{i}"), Role::Auth));
    }
    for i in 0..2 {
        plan.push((format!("relay{i}"), Role::Relay));
    }
    for i in 0..2 {
        plan.push((format!("exit{i}"), Role::Exit));
    }
    plan.push(("client0".to_string(), Role::Client));
    let mut topo = Topology::uniform(&[], LinkProfile::delay(DELAY_MS), 1);
    topo.subnet = SUBNET.parse().expect("subnet");
    for (name, _) in &plan {
        topo.nodes.push(NodeSpec::new(name.clone()));
    }
    topo.nodes.push(NodeSpec::new("sink"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let net = TestNet::start(exe(), &tmp.path().join("emu"), topo).expect("emulator starts");

    let mut nodes: Vec<Node> = plan
        .iter()
        .map(|(name, role)| Node {
            name: name.clone(),
            role: *role,
            addr: net.addr(name),
            dir: tmp.path().join(name),
            fingerprint: String::new(),
            v3ident: String::new(),
        })
        .collect();
    for n in nodes.iter_mut() {
        std::fs::create_dir_all(&n.dir).expect("data dir");
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&n.dir, std::fs::Permissions::from_mode(0o700)).expect("chmod");
        keys(n);
    }
    let auths: Vec<String> = nodes
        .iter()
        .filter(|n| n.role == Role::Auth)
        .map(|n| {
            format!(
                "DirAuthority {} orport={OR_PORT} no-v2 v3ident={} {}:{DIR_PORT} {}",
                n.name, n.v3ident, n.addr, n.fingerprint
            )
        })
        .collect();

    let sink_addr = net.sock("sink", SINK_PORT);
    let _sink = net
        .server(
            "sink",
            &["http-sink".into(), format!("--listen={sink_addr}")],
        )
        .expect("sink");
    let mut tors: Vec<ChildGuard> = Vec::new();
    let t_start = Instant::now();
    for n in &nodes {
        let rc = n.dir.join("torrc");
        std::fs::write(&rc, torrc(n, &auths)).expect("torrc");
        let mut c = net.handle.command(&n.name, "tor").expect("node");
        c.arg("-f").arg(&rc).stderr(std::process::Stdio::null());
        tors.push(ChildGuard::spawn(c, format!("tor {}", n.name)).expect("tor starts"));
    }
    // Bootstrap: the client's log says 100%.
    let client = nodes
        .iter()
        .find(|n| n.role == Role::Client)
        .expect("client");
    let log = client.dir.join("notice.log");
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        if text.contains("Bootstrapped 100%") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "client did not bootstrap in 240 s; log tail: {}",
            text.lines().rev().take(8).collect::<Vec<_>>().join(" | ")
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let bootstrap = t_start.elapsed();
    eprintln!(
        "tor-basic with {DELAY_MS} ms per link bootstrapped in {:.1} s",
        bootstrap.as_secs_f64()
    );

    // Verified download through client -> guard -> middle -> exit -> sink.
    let socks = SocketAddr::new(client.addr.into(), SOCKS_PORT);
    let n = 1 << 20;
    let deadline = Instant::now() + Duration::from_secs(120);
    let (ttfb, body, total) = loop {
        let t0 = Instant::now();
        match download(socks, sink_addr, n) {
            Ok((ttfb, body)) => break (ttfb, body, t0.elapsed()),
            Err(e) => {
                assert!(Instant::now() < deadline, "download never succeeded: {e}");
                eprintln!("download attempt failed ({e}); retrying");
                std::thread::sleep(Duration::from_secs(2));
            }
        }
    };
    assert_eq!(body.len() as u64, n, "length");
    assert!(
        body.iter()
            .enumerate()
            .all(|(i, b)| *b == body_byte(i as u64)),
        "body content differs from the sink's pattern"
    );
    eprintln!(
        "1 MiB verified: TTFB {:.0} ms (after CONNECTED), total {:.0} ms incl. SOCKS/BEGIN",
        ttfb.as_secs_f64() * 1000.0,
        total.as_secs_f64() * 1000.0
    );
    // The request and the first byte cross client->guard->middle->exit->sink
    // and back: 4 emulated links each way, at least 160 ms.
    assert!(
        ttfb >= Duration::from_millis(160),
        "TTFB {ttfb:?} < 8 x 20 ms: links not delayed?"
    );
    let st = net.status(Duration::from_millis(1100)).expect("status");
    let to_sink: u64 = st
        .links
        .iter()
        .filter(|l| l.info.to == "sink" && l.info.from.starts_with("exit"))
        .map(|l| l.counters.tx_packets)
        .sum();
    assert!(to_sink > 10, "exit->sink traffic went through the emulator");
    assert!(st.global.host_packets > 0, "SOCKS over the host endpoint");
    assert_eq!(
        st.global.drop_malformed + st.global.drop_bad_source + st.global.write_errors,
        0
    );
    eprintln!("{}", st.render_table(false));
    drop(tors);
    net.stop().expect("clean stop");
}
