//! Namespaces, TUN devices, addresses and routes (needs root), and the
//! removal of what crashed runs left behind.
//!
//! Naming: every run has a 6-hex-digit run id. Node `N` lives in namespace
//! `<prefix>-<run>-<N>`; its TUN device is `<prefix><run>n<index>`; the host
//! endpoint's TUN in the root namespace is `<prefix><run>h`. A record
//! `<registry>/<run>.json` is written before anything is created and removed
//! after everything is gone; [`cleanup_stale`] only ever touches state named
//! in a record whose emulator process is dead.

use crate::profile::{ConfigError, Resolved, Subnet};
use crate::sys;
use serde::{Deserialize, Serialize};
use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Write};
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Default namespace/interface prefix.
pub const DEFAULT_PREFIX: &str = "om";
/// Where run records live.
pub const DEFAULT_REGISTRY: &str = "/run/onionmix-emu";
/// Metric and protocol number of the guard route (`unreachable <subnet>`)
/// that keeps root-namespace traffic for the emulated subnet on this machine
/// even when the emulator is not running.
pub const GUARD_METRIC: u32 = 4242;
pub const GUARD_PROTO: u32 = 242;

/// Errors of the emulator library.
#[derive(Debug, thiserror::Error)]
pub enum EmuError {
    #[error(
        "the link emulator needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN) to create network namespaces and TUN devices: {detail}. \
         Run it as root (e.g. with sudo), or start the network without emulation (the unemulated loopback mode: all nodes on 127.0.0.1, every link zero delay)"
    )]
    PermissionDenied { detail: String },
    #[error(
        "`ip` (iproute2) is not available: {0}. Install it (apt-get install iproute2) or use the unemulated loopback mode"
    )]
    NoIpTool(String),
    #[error(
        "/dev/net/tun is not usable: {0}. Load the tun module (modprobe tun) or use the unemulated loopback mode"
    )]
    NoTun(String),
    #[error("`{cmd}` failed: {stderr}")]
    Command { cmd: String, stderr: String },
    #[error(
        "subnet {subnet} overlaps `{existing}` in the root namespace; choose another subnet (topology `subnet = ...`)"
    )]
    SubnetInUse { subnet: String, existing: String },
    #[error("bad prefix `{0}`: 1 to 4 lowercase letters")]
    BadPrefix(String),
    #[error("config: {0}")]
    Config(#[from] ConfigError),
    #[error("emulator: {0}")]
    Emulator(String),
    #[error("timed out: {0}")]
    Timeout(String),
    #[error("{ctx}: {source}")]
    Io {
        ctx: String,
        #[source]
        source: io::Error,
    },
}

/// Older name kept for callers that spell it this way.
pub type NetnsError = EmuError;

pub(crate) fn io_err(ctx: impl Into<String>) -> impl FnOnce(io::Error) -> EmuError {
    let ctx = ctx.into();
    move |source| EmuError::Io { ctx, source }
}

/// Check that this process can create namespaces and TUN devices, with a
/// clear error (suggesting the unemulated loopback mode) when it cannot.
pub fn check_privileges() -> Result<(), EmuError> {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let cap_eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    const CAP_NET_ADMIN: u64 = 1 << 12;
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    if cap_eff & CAP_NET_ADMIN == 0 || cap_eff & CAP_SYS_ADMIN == 0 {
        let who = if sys::geteuid() == 0 {
            "running as uid 0 but without those capabilities (a restricted container?)".to_string()
        } else {
            format!("running as uid {}", sys::geteuid())
        };
        return Err(EmuError::PermissionDenied { detail: who });
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            return Err(EmuError::NoIpTool(
                String::from_utf8_lossy(&o.stderr).into_owned(),
            ));
        }
        Err(e) => return Err(EmuError::NoIpTool(e.to_string())),
    }
    if let Err(e) = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/net/tun")
    {
        if e.kind() == io::ErrorKind::PermissionDenied {
            return Err(EmuError::PermissionDenied {
                detail: format!("/dev/net/tun: {e}"),
            });
        }
        return Err(EmuError::NoTun(e.to_string()));
    }
    Ok(())
}

/// True if this process has what [`check_privileges`] asks for.
pub fn have_privileges() -> bool {
    check_privileges().is_ok()
}

/// A fresh run id: 6 lowercase hex digits.
pub fn new_run_id() -> String {
    let mut b = [0u8; 3];
    if let Ok(mut f) = File::open("/dev/urandom") {
        let _ = io::Read::read_exact(&mut f, &mut b);
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let v = (u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]))
        ^ (t & 0xff_ffff)
        ^ std::process::id();
    format!("{:06x}", v & 0xff_ffff)
}

pub fn validate_prefix(prefix: &str) -> Result<(), EmuError> {
    if prefix.is_empty() || prefix.len() > 4 || !prefix.chars().all(|c| c.is_ascii_lowercase()) {
        return Err(EmuError::BadPrefix(prefix.to_string()));
    }
    Ok(())
}

pub fn validate_run_id(run: &str) -> Result<(), EmuError> {
    if run.len() != 6
        || !run
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase())
    {
        return Err(EmuError::Emulator(format!(
            "bad run id `{run}`: 6 lowercase hex digits"
        )));
    }
    Ok(())
}

/// Namespace name of a node.
pub fn ns_name(prefix: &str, run: &str, node: &str) -> String {
    format!("{prefix}-{run}-{node}")
}

/// TUN device name of node number `index` (or the host with None).
pub fn tun_name(prefix: &str, run: &str, index: Option<usize>) -> String {
    match index {
        Some(i) => format!("{prefix}{run}n{i}"),
        None => format!("{prefix}{run}h"),
    }
}

/// Open a TCP connection to `addr` from inside namespace `ns` (a node's
/// namespace, so the connection crosses that node's emulated links), on
/// a thread made for it that then ends; `done` gets the connected
/// stream or the error. The socket stays in `ns` whichever thread uses
/// it afterwards.
pub fn connect_from(
    ns: &str,
    addr: std::net::SocketAddr,
    timeout: Duration,
    done: impl FnOnce(io::Result<std::net::TcpStream>) + Send + 'static,
) -> io::Result<()> {
    run_in(ns, move || {
        done(std::net::TcpStream::connect_timeout(&addr, timeout));
    })
    .map(|_| ())
}

/// Run `f` on a thread made for it inside namespace `ns` (sockets it opens
/// belong to `ns`); its handle. `f` does not run if entering fails.
pub fn run_in<T: Send + 'static>(
    ns: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> io::Result<std::thread::JoinHandle<io::Result<T>>> {
    if ns.is_empty() || ns.len() > 64 || ns.contains('/') || ns.starts_with('.') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("bad namespace name `{ns}`"),
        ));
    }
    let file = File::open(Path::new("/run/netns").join(ns))?;
    std::thread::Builder::new()
        .name("netns".into())
        .spawn(move || sys::setns_net(&file).map(|()| f()))
}

/// A command that runs `program` inside namespace `ns` (`ip netns exec`).
/// The spawned child's pid is the program's pid (ip execs it).
pub fn command_in(ns: &str, program: impl AsRef<OsStr>) -> Command {
    let mut c = Command::new("ip");
    c.arg("netns").arg("exec").arg(ns).arg(program);
    c
}

fn run_ip(args: &[&str], stdin: Option<&str>) -> Result<String, EmuError> {
    let mut c = Command::new("ip");
    c.args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        });
    let mut child = c.spawn().map_err(|e| EmuError::NoIpTool(e.to_string()))?;
    if let Some(input) = stdin
        && let Some(mut si) = child.stdin.take()
    {
        si.write_all(input.as_bytes())
            .map_err(io_err("writing to ip -batch"))?;
    }
    let out = child.wait_with_output().map_err(io_err("waiting for ip"))?;
    if !out.status.success() {
        return Err(EmuError::Command {
            cmd: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Namespaces that currently exist (names from `ip netns list`).
pub fn list_namespaces() -> Vec<String> {
    run_ip(&["netns", "list"], None)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect()
}

/// Pids of processes inside namespace `ns`.
pub fn pids_in(ns: &str) -> Vec<u32> {
    run_ip(&["netns", "pids", ns], None)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .collect()
}

/// Start time (clock ticks since boot) of a process, to tell a live owner
/// from an unrelated process that reused its pid.
pub fn pid_start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22; the command name (field 2) may contain spaces, so count from
    // the closing parenthesis.
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// True if `pid` is the process that started at `start` and has not exited
/// (a zombie, exited but not yet reaped by its parent, counts as gone).
pub fn process_alive(pid: u32, start: u64) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let Some(close) = stat.rfind(')') else {
        return false;
    };
    let rest = stat.get(close + 2..).unwrap_or("");
    let mut f = rest.split_whitespace();
    let state = f.next().unwrap_or("X");
    if state == "Z" || state == "X" {
        return false;
    }
    f.nth(18).and_then(|v| v.parse::<u64>().ok()) == Some(start)
}

/// Kill the processes left in namespace `ns`: SIGTERM, then SIGKILL after
/// `grace`. Returns the pids that were signalled.
pub fn kill_processes_in(ns: &str, grace: Duration) -> Vec<u32> {
    let me = std::process::id();
    let pids: Vec<u32> = pids_in(ns).into_iter().filter(|p| *p != me).collect();
    if pids.is_empty() {
        return pids;
    }
    for p in &pids {
        let _ = sys::kill(*p, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if pids.iter().all(|p| sys::kill(*p, 0).is_err()) {
            return pids;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    for p in &pids {
        let _ = sys::kill(*p, libc::SIGKILL);
    }
    pids
}

/// What a run created, written before creating it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub run_id: String,
    pub prefix: String,
    pub pid: u32,
    pub pid_start: u64,
    pub namespaces: Vec<String>,
    pub subnet: String,
    pub guard_route: bool,
    pub state_dir: PathBuf,
}

fn record_path(registry: &Path, run: &str) -> PathBuf {
    registry.join(format!("{run}.json"))
}

fn write_record(registry: &Path, rec: &RunRecord) -> Result<(), EmuError> {
    std::fs::create_dir_all(registry)
        .map_err(io_err(format!("creating {}", registry.display())))?;
    let p = record_path(registry, &rec.run_id);
    let body = serde_json::to_vec_pretty(rec)
        .map_err(|e| EmuError::Emulator(format!("encoding run record: {e}")))?;
    onionmix_fsutil::write_atomic(&p, body).map_err(io_err(format!("writing {}", p.display())))?;
    Ok(())
}

fn guard_route_args(subnet: &str, verb: &'static str) -> Vec<String> {
    vec![
        "route".into(),
        verb.into(),
        "unreachable".into(),
        subnet.into(),
        "metric".into(),
        GUARD_METRIC.to_string(),
        "proto".into(),
        GUARD_PROTO.to_string(),
    ]
}

fn del_guard_route(subnet: &str) -> Result<(), EmuError> {
    let args = guard_route_args(subnet, "del");
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    run_ip(&a, None).map(|_| ())
}

/// Remove everything one record names (processes in its namespaces, the
/// namespaces, the guard route) and then the record. Returns problems.
fn remove_run(registry: &Path, rec: &RunRecord) -> Vec<String> {
    let mut problems = Vec::new();
    let existing = list_namespaces();
    for ns in &rec.namespaces {
        if !existing.iter().any(|e| e == ns) {
            continue;
        }
        let killed = kill_processes_in(ns, Duration::from_secs(2));
        if !killed.is_empty() {
            tracing::warn!(ns = %ns, ?killed, "killed processes left in an emulator namespace");
        }
        if let Err(e) = run_ip(&["netns", "del", ns], None) {
            problems.push(e.to_string());
        }
    }
    if rec.guard_route
        && let Err(e) = del_guard_route(&rec.subnet)
        && !e.to_string().contains("No such process")
    {
        problems.push(e.to_string());
    }
    if problems.is_empty() {
        let _ = std::fs::remove_file(record_path(registry, &rec.run_id));
    }
    problems
}

/// What [`cleanup_stale`] did.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct CleanupReport {
    /// Runs whose state was removed.
    pub removed_runs: Vec<String>,
    /// Runs still alive (left alone).
    pub live_runs: Vec<String>,
    /// Namespaces with our prefix but no record: not ours to remove.
    pub unowned_namespaces: Vec<String>,
    /// Things that could not be removed.
    pub problems: Vec<String>,
}

/// Remove namespaces, guard routes and leftover processes of runs with
/// `prefix` whose emulator process is gone. TUN devices need no cleanup:
/// the kernel deletes them when their owner's descriptors close.
pub fn cleanup_stale(prefix: &str, registry: &Path) -> Result<CleanupReport, EmuError> {
    validate_prefix(prefix)?;
    let mut rep = CleanupReport::default();
    let mut known_ns = Vec::new();
    if let Ok(rd) = std::fs::read_dir(registry) {
        for ent in rd.flatten() {
            let path = ent.path();
            if path.extension() != Some(OsStr::new("json")) {
                continue;
            }
            let Ok(text) = std::fs::read_to_string(&path) else {
                continue;
            };
            let Ok(rec) = serde_json::from_str::<RunRecord>(&text) else {
                rep.problems
                    .push(format!("{}: not a run record, left alone", path.display()));
                continue;
            };
            if rec.prefix != prefix {
                continue;
            }
            known_ns.extend(rec.namespaces.iter().cloned());
            if process_alive(rec.pid, rec.pid_start) {
                rep.live_runs.push(rec.run_id.clone());
                continue;
            }
            let problems = remove_run(registry, &rec);
            if problems.is_empty() {
                tracing::info!(run = %rec.run_id, "removed stale emulator state");
                rep.removed_runs.push(rec.run_id.clone());
            } else {
                rep.problems.extend(problems);
            }
        }
    }
    let ours = format!("{prefix}-");
    for ns in list_namespaces() {
        if ns.starts_with(&ours) && !known_ns.contains(&ns) {
            rep.unowned_namespaces.push(ns);
        }
    }
    Ok(rep)
}

/// Parse the destination of an `ip -4 -o route`/`addr` line into a subnet.
fn parse_dest(tok: &str) -> Option<Subnet> {
    let (a, p) = match tok.split_once('/') {
        Some((a, p)) => (a, p.parse::<u8>().ok()?),
        None => (tok, 32),
    };
    let addr: Ipv4Addr = a.parse().ok()?;
    if p > 32 {
        return None;
    }
    let mask = if p == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(p))
    };
    Some(Subnet {
        network: Ipv4Addr::from(u32::from(addr) & mask),
        prefix: p,
    })
}

/// Error if `subnet` overlaps a route or address of the root namespace
/// (ignoring the default route).
pub fn check_subnet_free(subnet: &Subnet) -> Result<(), EmuError> {
    let routes = run_ip(&["-4", "-o", "route", "show", "table", "all"], None)?;
    for line in routes.lines() {
        let mut toks = line.split_whitespace();
        let mut first = toks.next().unwrap_or("");
        if matches!(
            first,
            "unreachable" | "blackhole" | "prohibit" | "unicast" | "local" | "broadcast" | "throw"
        ) {
            first = toks.next().unwrap_or("");
        }
        if first == "default" {
            continue;
        }
        // Local/broadcast entries of the local table belong to addresses,
        // which the address check below reports more clearly.
        if line.starts_with("local") || line.starts_with("broadcast") {
            continue;
        }
        if let Some(d) = parse_dest(first)
            && d.prefix > 0
            && d.overlaps(subnet)
        {
            return Err(EmuError::SubnetInUse {
                subnet: subnet.to_string(),
                existing: line.trim().to_string(),
            });
        }
    }
    let addrs = run_ip(&["-4", "-o", "addr", "show"], None)?;
    for line in addrs.lines() {
        let toks: Vec<&str> = line.split_whitespace().collect();
        if let Some(i) = toks.iter().position(|t| *t == "inet")
            && let Some(d) = toks
                .get(i + 1)
                .and_then(|t| parse_dest(t.split('/').next().unwrap_or("")))
            && subnet.contains(d.network)
        {
            return Err(EmuError::SubnetInUse {
                subnet: subnet.to_string(),
                existing: line.trim().to_string(),
            });
        }
    }
    Ok(())
}

/// One node's place in the emulated network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodePlacement {
    pub name: String,
    pub namespace: String,
    pub interface: String,
    pub address: Ipv4Addr,
}

/// The namespaces and TUN devices of one run. Dropping it tears everything
/// down (processes left in the namespaces are killed).
pub struct NetSetup {
    registry: PathBuf,
    record: RunRecord,
    /// TUN descriptors: nodes in topology order, then the host (if any).
    tuns: Vec<File>,
    pub nodes: Vec<NodePlacement>,
    pub host_interface: Option<String>,
    torn_down: bool,
}

impl NetSetup {
    /// Create namespaces, TUN devices, addresses and routes for `resolved`.
    pub fn create(
        prefix: &str,
        run_id: &str,
        registry: &Path,
        resolved: &Resolved,
        host_endpoint: bool,
        state_dir: &Path,
    ) -> Result<NetSetup, EmuError> {
        validate_prefix(prefix)?;
        validate_run_id(run_id)?;
        check_privileges()?;
        let rep = cleanup_stale(prefix, registry)?;
        if !rep.removed_runs.is_empty() {
            tracing::info!(runs = ?rep.removed_runs, "cleaned up stale emulator runs");
        }
        for p in &rep.problems {
            tracing::warn!("stale cleanup: {p}");
        }
        check_subnet_free(&resolved.subnet)?;
        let me = std::process::id();
        let record = RunRecord {
            run_id: run_id.to_string(),
            prefix: prefix.to_string(),
            pid: me,
            pid_start: pid_start_time(me).unwrap_or(0),
            namespaces: resolved
                .nodes
                .iter()
                .map(|n| ns_name(prefix, run_id, &n.name))
                .collect(),
            subnet: resolved.subnet.to_string(),
            guard_route: true,
            state_dir: state_dir.to_path_buf(),
        };
        write_record(registry, &record)?;
        let mut setup = NetSetup {
            registry: registry.to_path_buf(),
            record,
            tuns: Vec::new(),
            nodes: Vec::new(),
            host_interface: None,
            torn_down: false,
        };
        // From here on, an error drops `setup`, which removes what exists.
        let subnet = resolved.subnet.to_string();
        let ga = guard_route_args(&subnet, "add");
        let ga: Vec<&str> = ga.iter().map(String::as_str).collect();
        run_ip(&ga, None)?;
        let plen = resolved.subnet.prefix;
        for (i, n) in resolved.nodes.iter().enumerate() {
            let ns = ns_name(prefix, run_id, &n.name);
            let ifname = tun_name(prefix, run_id, Some(i));
            run_ip(&["netns", "add", &ns], None)?;
            let tun = sys::open_tun(&ifname).map_err(|e| {
                if e.kind() == io::ErrorKind::PermissionDenied {
                    EmuError::PermissionDenied {
                        detail: format!("creating TUN {ifname}: {e}"),
                    }
                } else {
                    EmuError::NoTun(format!("creating TUN {ifname}: {e}"))
                }
            })?;
            setup.tuns.push(tun);
            run_ip(&["link", "set", "dev", &ifname, "netns", &ns], None)?;
            let batch = format!(
                "link set dev lo up\n\
                 link set dev {ifname} addrgenmode none\n\
                 link set dev {ifname} mtu 1500 txqueuelen 10000\n\
                 addr add {}/{plen} dev {ifname}\n\
                 link set dev {ifname} up\n",
                n.address
            );
            run_ip(&["-n", &ns, "-batch", "-"], Some(&batch))?;
            setup.nodes.push(NodePlacement {
                name: n.name.clone(),
                namespace: ns,
                interface: ifname,
                address: n.address,
            });
        }
        if host_endpoint {
            let ifname = tun_name(prefix, run_id, None);
            let tun = sys::open_tun(&ifname)
                .map_err(|e| EmuError::NoTun(format!("creating TUN {ifname}: {e}")))?;
            setup.tuns.push(tun);
            let batch = format!(
                "link set dev {ifname} addrgenmode none\n\
                 link set dev {ifname} mtu 1500 txqueuelen 10000\n\
                 addr add {}/{plen} dev {ifname}\n\
                 link set dev {ifname} up\n",
                resolved.host_address
            );
            run_ip(&["-batch", "-"], Some(&batch))?;
            setup.host_interface = Some(ifname);
        }
        Ok(setup)
    }

    pub fn run_id(&self) -> &str {
        &self.record.run_id
    }

    pub fn record(&self) -> &RunRecord {
        &self.record
    }

    /// The TUN descriptors, nodes first then the host: index = endpoint id.
    pub fn tuns(&self) -> &[File] {
        &self.tuns
    }

    /// Remove everything; returns problems (also logged).
    pub fn teardown(&mut self) -> Vec<String> {
        if self.torn_down {
            return Vec::new();
        }
        self.torn_down = true;
        // Close the TUN descriptors first: the devices vanish with them.
        self.tuns.clear();
        let problems = remove_run(&self.registry, &self.record);
        for p in &problems {
            tracing::warn!("teardown: {p}");
        }
        problems
    }
}

impl Drop for NetSetup {
    fn drop(&mut self) {
        self.teardown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_interface_limits() {
        let run = new_run_id();
        validate_run_id(&run).expect("valid");
        assert!(tun_name("omxx", &run, Some(9999)).len() < 16);
        assert!(tun_name("omxx", &run, None).len() < 16);
        assert_eq!(ns_name("om", "abc123", "guard"), "om-abc123-guard");
        assert!(validate_prefix("om").is_ok());
        assert!(validate_prefix("OM").is_err());
        assert!(validate_prefix("toolong").is_err());
        assert!(validate_run_id("xyz").is_err());
    }

    #[test]
    fn connect_from_refuses_bad_namespace_names() {
        let a: std::net::SocketAddr = "127.0.0.1:1".parse().expect("addr");
        for bad in ["", "../x", "a/b", ".hidden", "om-no-such-namespace-here"] {
            let r = connect_from(bad, a, Duration::from_millis(10), |_| {});
            assert!(r.is_err(), "{bad:?}");
        }
    }

    #[test]
    fn dest_parsing() {
        assert_eq!(
            parse_dest("10.77.3.0/24"),
            Some(Subnet {
                network: Ipv4Addr::new(10, 77, 3, 0),
                prefix: 24
            })
        );
        assert_eq!(parse_dest("192.0.2.1").map(|s| s.prefix), Some(32));
        assert_eq!(parse_dest("nonsense"), None);
    }

    #[test]
    fn own_start_time_is_readable() {
        let me = std::process::id();
        let st = pid_start_time(me).expect("readable");
        assert!(process_alive(me, st));
        assert!(!process_alive(me, st + 1));
    }

    #[test]
    fn stale_record_of_dead_process_is_removed() {
        // Only exercises the record bookkeeping (no namespaces listed), so it
        // runs without privileges.
        let dir = tempfile::tempdir().expect("tempdir");
        let rec = RunRecord {
            run_id: "dead01".into(),
            prefix: "omt".into(),
            pid: u32::MAX / 2,
            pid_start: 1,
            namespaces: vec![],
            subnet: "10.99.0.0/24".into(),
            guard_route: false,
            state_dir: dir.path().to_path_buf(),
        };
        write_record(dir.path(), &rec).expect("write");
        let rep = cleanup_stale("omt", dir.path()).expect("cleanup");
        assert_eq!(rep.removed_runs, vec!["dead01".to_string()]);
        assert!(!record_path(dir.path(), "dead01").exists());
        // A record of a live process stays.
        let me = std::process::id();
        let live = RunRecord {
            run_id: "a1ve01".into(),
            pid: me,
            pid_start: pid_start_time(me).expect("start"),
            ..rec
        };
        write_record(dir.path(), &live).expect("write");
        let rep = cleanup_stale("omt", dir.path()).expect("cleanup");
        assert_eq!(rep.live_runs, vec!["a1ve01".to_string()]);
        assert!(record_path(dir.path(), "a1ve01").exists());
    }
}
