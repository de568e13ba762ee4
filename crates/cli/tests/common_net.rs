//! Shared helpers for tests that start networks with the launcher.
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use onionmix_testbed::http;
use onionmix_testbed::launcher::{self, LaunchOptions, NetworkGuard};
use onionmix_testbed::netinfo::{NetworkInfo, NodeInfo};
use onionmix_testbed::socks::{self, Target};
use onionmix_testbed::spec::{Role, Spec};

#[allow(unused_imports)]
pub use onionmix_testsupport::{serial, tor_available, wait_for};

/// Whether the link emulator can run here (root, TUN, namespaces), with the
/// project's skip/require policy.
pub fn emulator_available(test: &str) -> bool {
    onionmix_testsupport::require_or_skip(
        test,
        onionmix_emu::netns::check_privileges()
            .map_err(|e| format!("the link emulator cannot run here: {e} (run the tests as root)")),
    )
}

/// GET a directory document over plain HTTP, retrying for up to 60 s (an
/// authority busy voting or signing on a loaded machine may not answer in
/// one try). Panics naming `path` if it never answers 200.
pub fn dir_get(addr: SocketAddr, path: &str) -> String {
    wait_for(
        &format!("GET {path} from {addr}"),
        Duration::from_secs(60),
        Duration::from_millis(500),
        || launcher::http_get_plain(addr, path),
    )
}

/// True if the consensus lists `name` with every flag in `flags`.
#[allow(dead_code)]
pub fn has_flags(cons: &str, name: &str, flags: &[&str]) -> bool {
    let Some(start) = cons.find(&format!("\nr {name} ")) else {
        return false;
    };
    let Some(s_line) = cons[start + 1..].lines().find(|l| l.starts_with("s ")) else {
        return false;
    };
    flags.iter().all(|f| s_line.split(' ').any(|x| x == *f))
}

/// Wait up to `limit` until the first authority's consensus gives every
/// exit of the network `flags`; false if it did not happen in time. A
/// young network's flags still move, and some clients (Arti) take only
/// Fast exits.
#[allow(dead_code)]
pub fn wait_for_exit_flags(info: &NetworkInfo, flags: &[&str], limit: Duration) -> bool {
    let Some(auth) = info
        .nodes
        .iter()
        .find(|n| n.roles.contains(&Role::Authority))
        .and_then(|n| n.dir_addr())
    else {
        return false;
    };
    let exits: Vec<&str> = info
        .nodes
        .iter()
        .filter(|n| n.roles.contains(&Role::Exit))
        .map(|n| n.name.as_str())
        .collect();
    let deadline = std::time::Instant::now() + limit;
    loop {
        let cons = launcher::http_get_plain(auth, "/tor/status-vote/current/consensus-microdesc")
            .unwrap_or_default();
        if exits.iter().all(|e| has_flags(&cons, e, flags)) {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            eprintln!("not every exit of {exits:?} has {flags:?} after {limit:?}");
            return false;
        }
        std::thread::sleep(Duration::from_secs(2));
    }
}

/// How long tests let a network bootstrap.
pub const TEST_BOOTSTRAP_TIMEOUT: Duration = Duration::from_secs(300);

/// The onionmix binary as a command, with the tests' bootstrap limit for
/// any network it starts (`testnet start`, `compare`, `demo`).
pub fn onionmix_cmd() -> std::process::Command {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_onionmix"));
    c.env(
        launcher::BOOTSTRAP_TIMEOUT_ENV,
        TEST_BOOTSTRAP_TIMEOUT.as_secs().to_string(),
    );
    c
}

/// Start a built-in network in `dir` with the test binary.
pub fn start(spec: &str, dir: &Path) -> NetworkGuard {
    start_spec(&Spec::load(spec).expect("spec"), dir)
}

/// Start a network from a (possibly modified) spec in `dir`.
pub fn start_spec(spec: &Spec, dir: &Path) -> NetworkGuard {
    let mut opts = LaunchOptions::new(env!("CARGO_BIN_EXE_onionmix").into());
    // The spec's bootstrap limit is a user default; tests allow for a
    // loaded 2-core machine (the behaviour is what they check, not the time).
    opts.timeout = Some(TEST_BOOTSTRAP_TIMEOUT);
    let net =
        launcher::start(spec, dir, &opts).unwrap_or_else(|e| panic!("network start failed: {e}"));
    NetworkGuard(Some(net))
}

/// Download `/bytes/<n>` from the sink through a SOCKS proxy; returns the
/// response (body verified by the caller) and the elapsed time.
pub async fn download(
    proxy: SocketAddr,
    host: &str,
    port: u16,
    n: u64,
    auth: Option<(&str, &str)>,
) -> Result<(http::Response, Duration), String> {
    let t0 = Instant::now();
    let mut s = socks::connect(
        proxy,
        &Target::Host(host.to_string(), port),
        auth,
        Duration::from_secs(60),
    )
    .await
    .map_err(|e| e.to_string())?;
    get_bytes(&mut s, host, n, t0).await
}

/// GET `/bytes/{n}` from the sink on `s` (within 120 s); the response and
/// the time since `t0`.
async fn get_bytes<S>(
    s: &mut S,
    host: &str,
    n: u64,
    t0: Instant,
) -> Result<(http::Response, Duration), String>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let r = tokio::time::timeout(
        Duration::from_secs(120),
        http::get(s, host, &format!("/bytes/{n}"), t0),
    )
    .await
    .map_err(|_| "download timed out".to_string())?
    .map_err(|e| e.to_string())?;
    Ok((r, t0.elapsed()))
}

/// [`download`] by a client that pipelines (proposal 181): its HTTP
/// request leaves with the SOCKS request, before any reply.
#[allow(dead_code)]
pub async fn download_pipelined(
    proxy: SocketAddr,
    host: &str,
    port: u16,
    n: u64,
) -> Result<(http::Response, Duration), String> {
    let t0 = Instant::now();
    let target = Target::Host(host.to_string(), port);
    let mut s = socks::connect_pipelined(proxy, &target, None, Duration::from_secs(60))
        .await
        .map_err(|e| e.to_string())?;
    get_bytes(&mut s, host, n, t0).await
}

/// The password the control-port tests' clients accept
/// (`HashedControlPassword`, besides the cookie).
pub const CONTROL_PASSWORD: &str = "correct horse";

/// A network for the control-port tests with stem: onionmix authorities
/// (3), relays (3) and exits (2), `onionmix_clients` onionmix clients and
/// one stock tor client, every client with a control port that accepts
/// [`CONTROL_PASSWORD`].
pub fn control_spec(name: &str, description: &str, onionmix_clients: usize) -> Spec {
    control_spec_with_relays(name, description, onionmix_clients, 3)
}

/// [`control_spec`] with `relays` middle relays (besides the three
/// authorities and two exits, all HSDirs).
pub fn control_spec_with_relays(
    name: &str,
    description: &str,
    onionmix_clients: usize,
    relays: usize,
) -> Spec {
    let hash = onionmix_frontend::control::auth::HashedPassword::new(
        CONTROL_PASSWORD.as_bytes(),
        [0x5a; 8],
    )
    .to_string();
    let text = format!(
        r#"
name = "{name}"
description = "{description}"
bootstrap_timeout_secs = 300

[[nodes]]
impl = "onionmix"
role = "authority"
count = 3

[[nodes]]
impl = "onionmix"
role = "relay"
count = {relays}

[[nodes]]
impl = "onionmix"
role = "exit"
count = 2

[[nodes]]
impl = "onionmix"
role = "client"
count = {onionmix_clients}
config = ['hashed_control_password = ["{hash}"]']

[[nodes]]
impl = "tor"
role = "client"
torrc = ["HashedControlPassword {hash}"]
"#
    );
    Spec::parse(name, &text).expect("spec")
}

/// `address:port` of one of a node's ports (panics when it has none).
pub fn node_addr(n: &NodeInfo, port: Option<u16>) -> String {
    format!("{}:{}", n.address, port.expect("port"))
}

/// Run a controller script or program with a deadline (killed by its pid
/// after `limit`); its last stdout line as JSON, or a panic naming `what`
/// with its output.
pub fn run_json(mut cmd: Command, what: &str, limit: Duration) -> serde_json::Value {
    let child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start: {e}"));
    let pid = child.id();
    let watchdog = std::thread::spawn(move || {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(500));
            if !Path::new(&format!("/proc/{pid}")).exists() {
                return;
            }
        }
        let _ = Command::new("kill").arg(pid.to_string()).status();
    });
    let out = child.wait_with_output().expect("wait");
    let _ = watchdog.join();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().last().unwrap_or("");
    serde_json::from_str(line).unwrap_or_else(|_| {
        panic!(
            "{what} failed ({}):\nstdout: {stdout}\nstderr: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Write a network spec into `dir`; its path.
pub fn write_spec(dir: &Path, text: &str) -> String {
    let p = dir.join("spec.toml");
    std::fs::write(&p, text).unwrap();
    p.display().to_string()
}

/// A node's `status.json` (null while it is being rewritten or absent).
pub fn node_status(node: &NodeInfo) -> serde_json::Value {
    std::fs::read_to_string(node.data_dir.join("status.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_default()
}

/// A counter (JSON pointer `ptr`) summed over nodes' `status.json`.
pub fn status_sum(nodes: &[&NodeInfo], ptr: &str) -> u64 {
    nodes
        .iter()
        .map(|n| {
            node_status(n)
                .pointer(ptr)
                .and_then(|v| v.as_u64())
                .unwrap_or(0)
        })
        .sum()
}

/// Wait (polling; nodes rewrite `status.json` about every second) until
/// the counter `ptr` summed over `nodes` reaches `at_least`; its value.
pub fn wait_for_status(nodes: &[&NodeInfo], ptr: &str, at_least: u64, limit: Duration) -> u64 {
    onionmix_testsupport::wait_for_seen(
        &format!("{ptr} >= {at_least}"),
        limit,
        Duration::from_millis(200),
        || {
            let v = status_sum(nodes, ptr);
            if v >= at_least { Ok(v) } else { Err(v) }
        },
    )
}

/// Send `n` bytes to the sink's echo port through `proxy` and check the
/// echo (an upload and a download on one stream), SHA-256.
pub async fn echo_verified(proxy: SocketAddr, echo: SocketAddr, n: usize) {
    use sha2::{Digest, Sha256};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s = socks::connect(proxy, &Target::Addr(echo), None, Duration::from_secs(60))
        .await
        .unwrap();
    let (mut rd, mut wr) = tokio::io::split(s);
    let data: Vec<u8> = (0..n).map(|i| (i * 7 % 253) as u8).collect();
    let want = Sha256::digest(&data);
    let writer = tokio::spawn(async move {
        wr.write_all(&data).await.unwrap();
        wr
    });
    let mut got = vec![0u8; n];
    tokio::time::timeout(Duration::from_secs(180), rd.read_exact(&mut got))
        .await
        .expect("echo in time")
        .unwrap();
    let _wr = writer.await.unwrap();
    assert_eq!(Sha256::digest(&got), want, "echo of {n} bytes differs");
}

/// What the tunnel tests need: root, `ip`, `curl`, `bash` (and `setpriv`
/// from util-linux for per-app isolation).
pub fn tunnel_tools() -> Result<(), String> {
    onionmix_testsupport::root_and_tools_check(
        &["ip", "curl", "bash", "setpriv"],
        "apt-get install iproute2 curl bash util-linux",
    )
}

/// A long-running `onionmix tunnel` (no `--exec`) in namespace `name`,
/// with its status file; killed (SIGKILL) on drop if still running.
pub struct TunnelProc {
    /// The process.
    pub child: std::process::Child,
    /// The namespace's name.
    pub name: String,
    /// Its status file.
    pub status: std::path::PathBuf,
}

impl TunnelProc {
    /// Start `onionmix tunnel --socks socks --namespace name --status-file
    /// dir/<name>.json [extra...]` and wait (up to 120 s) until its
    /// namespace is up (the status file exists).
    pub fn start(socks: SocketAddr, name: &str, dir: &Path, extra: &[&str]) -> TunnelProc {
        let status = dir.join(format!("{name}.json"));
        let log = std::fs::File::create(dir.join(format!("{name}.log"))).expect("log");
        let child = Command::new(env!("CARGO_BIN_EXE_onionmix"))
            .args(["tunnel", "--socks", &socks.to_string(), "--namespace", name])
            .arg("--status-file")
            .arg(&status)
            .args(extra)
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("start onionmix tunnel");
        let t = TunnelProc {
            child,
            name: name.to_string(),
            status,
        };
        wait_for(
            "the tunnel's status file",
            Duration::from_secs(120),
            Duration::from_millis(100),
            || t.status_json(),
        );
        t
    }

    /// The status file's JSON, once it is there.
    pub fn status_json(&self) -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(&self.status).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Run `program args` inside the namespace; its output (killed after
    /// `limit`).
    pub fn run(&self, program: &str, args: &[&str], limit: Duration) -> std::process::Output {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.name, program])
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("ip netns exec");
        let pid = child.id();
        let watchdog = std::thread::spawn(move || {
            let t0 = Instant::now();
            while t0.elapsed() < limit {
                std::thread::sleep(Duration::from_millis(200));
                if !Path::new(&format!("/proc/{pid}")).exists() {
                    return;
                }
            }
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        });
        let out = child.wait_with_output().expect("wait");
        let _ = watchdog.join();
        out
    }

    /// Stop it with SIGTERM (a clean shutdown) and wait; its exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return st;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(60),
                "the tunnel did not stop within 60 s of SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for TunnelProc {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
            // SIGKILL leaves the namespace behind.
            let _ = Command::new("ip")
                .args(["netns", "del", &self.name])
                .status();
        }
    }
}

/// Every name the sink's DNS server was asked (its log line `dns query
/// name=...`), in order: the exits resolve through it.
pub fn dns_queries(log: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .filter(|l| l.contains("dns query"))
        .filter_map(|l| {
            let plain = strip_ansi(l);
            let v = plain.split("name=").nth(1)?;
            Some(v.split_whitespace().next()?.to_string())
        })
        .collect()
}

/// The log is written with colours; drop the escape sequences.
fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c == '\x1b' {
            for c in it.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The path (`(fingerprint, nickname)` per hop, guard first) of the
/// circuit that carries a client's stream to `target`, from its control
/// port's `stream-status` and `circuit-status`; `None` when no succeeded
/// stream to `target` is listed or its circuit is not.
#[allow(dead_code)]
pub async fn path_of_stream(
    control: SocketAddr,
    cookie: &std::path::Path,
    target: SocketAddr,
) -> Option<Vec<(String, String)>> {
    let t = Duration::from_secs(10);
    let streams = onionmix_testbed::torctl::getinfo_lines(control, cookie, "stream-status", t)
        .await
        .ok()?;
    // "<id> SUCCEEDED <circuit id> <target>"
    let circ = streams.iter().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        (f.len() >= 4 && f[1] == "SUCCEEDED" && f[3] == target.to_string())
            .then(|| f[2].to_string())
    })?;
    let circuits = onionmix_testbed::torctl::getinfo_lines(control, cookie, "circuit-status", t)
        .await
        .ok()?;
    // "<id> BUILT $FP~guard,$FP~middle,$FP~exit ..."
    circuits.iter().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        if f.len() < 3 || f[0] != circ {
            return None;
        }
        f[2].split(',')
            .map(|hop| {
                let (fp, nick) = hop.split_once('~').unwrap_or((hop, ""));
                Some((fp.strip_prefix('$')?.to_string(), nick.to_string()))
            })
            .collect()
    })
}
