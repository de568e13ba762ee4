//! Start a network from a spec, wait until it is usable, write
//! `network.json`; stop exactly the processes it started.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::netinfo::{NetworkInfo, NodeInfo, SinkInfo};
use crate::proc;
use crate::spec::{Implementation, Role, Spec};
use crate::torrc;

/// Options for [`start`].
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// The onionmix binary (for onionmix nodes and the sink).
    pub onionmix_bin: PathBuf,
    /// The stock tor binary.
    pub tor_bin: String,
    /// Override the spec's bootstrap timeout (default: the environment
    /// variable [`BOOTSTRAP_TIMEOUT_ENV`] in seconds, if set).
    pub timeout: Option<Duration>,
    /// Print step lines to stderr.
    pub progress: bool,
    /// Address every node listens on (loopback mode).
    pub address: String,
    /// Ignore the spec's `[emulation]` table and run on loopback.
    pub no_emulation: bool,
    /// Run every node under libfaketime with this file as the clock offset
    /// (`FAKETIME_TIMESTAMP_FILE`, e.g. `+0`, then `+3d`), so a test can
    /// move all nodes' wall clocks together. Monotonic time is untouched.
    pub clock_file: Option<PathBuf>,
}

/// Where Debian's `faketime` package puts libfaketime.
pub const LIBFAKETIME_PATHS: &[&str] = &[
    "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
    "/usr/lib/faketime/libfaketime.so.1",
];

/// The libfaketime library, if installed.
pub fn libfaketime() -> Option<PathBuf> {
    LIBFAKETIME_PATHS
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

/// Environment variable that overrides every spec's bootstrap timeout
/// (seconds); tests set it for a loaded machine.
pub const BOOTSTRAP_TIMEOUT_ENV: &str = "ONIONMIX_BOOTSTRAP_TIMEOUT_SECS";

impl LaunchOptions {
    /// Defaults with the given onionmix binary.
    pub fn new(onionmix_bin: PathBuf) -> Self {
        let timeout = std::env::var(BOOTSTRAP_TIMEOUT_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|s| *s > 0)
            .map(Duration::from_secs);
        LaunchOptions {
            onionmix_bin,
            tor_bin: "tor".into(),
            timeout,
            progress: true,
            address: "127.0.0.1".into(),
            no_emulation: false,
            clock_file: None,
        }
    }
}

/// Why a network could not be started.
#[derive(Debug, thiserror::Error)]
#[error("{msg}{}{}", node.as_ref().map(|n| format!(" [node {n}]")).unwrap_or_default(), if log_tail.is_empty() { String::new() } else { format!("\n--- last lines of its log ---\n{log_tail}") })]
pub struct LaunchError {
    /// What went wrong.
    pub msg: String,
    /// Which node, if one is to blame.
    pub node: Option<String>,
    /// The end of that node's log.
    pub log_tail: String,
}

impl LaunchError {
    /// An error not tied to a node.
    pub fn plain(msg: impl Into<String>) -> Self {
        Self::new(msg)
    }
    /// An error blamed on `n`, with its log tail.
    pub fn for_node(msg: impl Into<String>, n: &NodeInfo) -> Self {
        Self::node(msg, n)
    }
    fn new(msg: impl Into<String>) -> Self {
        LaunchError {
            msg: msg.into(),
            node: None,
            log_tail: String::new(),
        }
    }
    fn node(msg: impl Into<String>, n: &NodeInfo) -> Self {
        LaunchError {
            msg: msg.into(),
            node: Some(n.name.clone()),
            log_tail: proc::tail(&n.log, 25),
        }
    }
}

/// A running network. Dropping it stops only the link emulator (if any);
/// use [`Network::stop`], [`Network::detach`] or [`NetworkGuard`].
pub struct Network {
    /// What is running.
    pub info: NetworkInfo,
    children: Vec<Child>,
    emu: Option<onionmix_emu::run::EmulatorHandle>,
}

impl std::fmt::Debug for Network {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Network").field("info", &self.info).finish()
    }
}

impl Network {
    /// Load a network started earlier (by another process).
    pub fn load(dir: &Path) -> Result<Network, String> {
        Ok(Network {
            info: NetworkInfo::load(dir)?,
            children: Vec::new(),
            emu: None,
        })
    }

    /// A network from its parts (other launchers in this crate).
    pub(crate) fn from_parts(info: NetworkInfo, children: Vec<Child>) -> Network {
        Network {
            info,
            children,
            emu: None,
        }
    }

    /// Leave the processes running when this value is dropped (the CLI's
    /// `testnet start` exits while the network keeps running).
    pub fn detach(mut self) {
        if let Some(h) = self.emu.take() {
            std::mem::forget(h);
        }
        self.children.clear();
    }

    /// Stop every process the network started. Returns the names of any
    /// that would not die.
    pub fn stop(mut self) -> Vec<String> {
        let survivors = stop_info(&self.info);
        for c in &mut self.children {
            let _ = c.try_wait();
        }
        if let Some(h) = self.emu.take() {
            let _ = h.stop(Duration::from_secs(10));
        }
        survivors
    }
}

/// Run `cmd` under libfaketime (`lib`) with `clock_file` as its clock
/// offset; monotonic time is not changed.
pub fn with_faketime(cmd: &mut Command, lib: &Path, clock_file: &Path) {
    cmd.env("LD_PRELOAD", lib)
        .env("FAKETIME_TIMESTAMP_FILE", clock_file)
        .env("FAKETIME_DONT_FAKE_MONOTONIC", "1")
        .env("FAKETIME_CACHE_DURATION", "1")
        // libfaketime 0.9.10 otherwise rewrites the deadline of
        // pthread_cond_timedwait on a monotonic condition variable and
        // stock tor's worker-thread start-up times out at once ("Can't
        // create worker thread pool").
        .env("FAKETIME_FORCE_MONOTONIC_FIX", "0");
}

impl Network {
    /// Restart the stock tor node `name` (not under the link emulator) with
    /// its torrc and data directory: stop it by pid, start it again (under
    /// libfaketime with `clock_file` when given), record the new pid.
    pub fn restart_tor_node(
        &mut self,
        name: &str,
        tor_bin: impl AsRef<std::ffi::OsStr>,
        clock_file: Option<&Path>,
    ) -> Result<(), String> {
        if self.emu.is_some() {
            return Err("restarting nodes under the link emulator is not supported".into());
        }
        let idx = self
            .info
            .nodes
            .iter()
            .position(|n| n.name == name && n.implementation == Implementation::Tor)
            .ok_or_else(|| format!("no stock tor node {name}"))?;
        let node = &self.info.nodes[idx];
        if !proc::stop(node.pid, node.start_time, Duration::from_secs(10)) {
            return Err(format!("{name} would not stop"));
        }
        let mut cmd = Command::new(tor_bin);
        cmd.arg("-f").arg(node.data_dir.join("torrc"));
        if let Some(f) = clock_file {
            let lib = libfaketime().ok_or("a clock file needs libfaketime")?;
            with_faketime(&mut cmd, &lib, f);
        }
        let child = proc::spawn(cmd, &node.log).map_err(|e| format!("cannot start {name}: {e}"))?;
        let pid = child.id();
        self.children.push(child);
        let node = &mut self.info.nodes[idx];
        node.pid = pid;
        node.start_time = proc::start_time(pid).unwrap_or(0);
        self.info.save().map_err(|e| format!("network.json: {e}"))
    }
}

/// Stop the processes recorded in `info` (by pid and start time).
pub fn stop_info(info: &NetworkInfo) -> Vec<String> {
    let mut procs: Vec<(String, u32, u64)> = info
        .nodes
        .iter()
        .map(|n| (n.name.clone(), n.pid, n.start_time))
        .collect();
    if let Some(s) = &info.sink {
        procs.push(("sink".into(), s.pid, s.start_time));
    }
    // Signal all first so they shut down in parallel.
    let handles: Vec<_> = procs
        .into_iter()
        .map(|(name, pid, st)| {
            std::thread::spawn(move || (name, proc::stop(pid, st, Duration::from_secs(10))))
        })
        .collect();
    let mut survivors: Vec<String> = handles
        .into_iter()
        .filter_map(|h| h.join().ok())
        .filter(|(_, ok)| !ok)
        .map(|(n, _)| n)
        .collect();
    if let Some(e) = &info.emulator
        && proc::alive(e.pid, e.start_time)
        && onionmix_emu::run::stop(&e.state_dir, Duration::from_secs(10)).is_err()
    {
        survivors.push("emulator".into());
    }
    survivors
}

/// Stops the network when dropped (also on panic): for tests.
#[derive(Debug)]
pub struct NetworkGuard(pub Option<Network>);

impl NetworkGuard {
    /// Take the network out of the guard (it will not be stopped on drop).
    pub fn into_inner(mut self) -> Option<Network> {
        self.0.take()
    }

    /// The network's description.
    pub fn info(&self) -> &NetworkInfo {
        // Invariant: the option is only taken in Drop.
        match &self.0 {
            Some(n) => &n.info,
            None => unreachable_info(),
        }
    }
}

fn unreachable_info() -> &'static NetworkInfo {
    static EMPTY: std::sync::OnceLock<NetworkInfo> = std::sync::OnceLock::new();
    EMPTY.get_or_init(|| NetworkInfo {
        spec: String::new(),
        dir: PathBuf::new(),
        ready_unix: 0,
        bootstrap_secs: 0.0,
        nodes: Vec::new(),
        sink: None,
        emulator: None,
        onion_services: Vec::new(),
    })
}

impl Drop for NetworkGuard {
    fn drop(&mut self) {
        if let Some(n) = self.0.take() {
            n.stop();
        }
    }
}

struct Planned {
    info: NodeInfo,
    role: Role,
    extra: Vec<String>,
    ed_or_v3: Option<String>,
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

struct Progress {
    on: bool,
    t0: Instant,
}

impl Progress {
    fn step(&self, what: &str, msg: &str) {
        if self.on {
            eprintln!(
                "[{:6.1}s] {what:<10} {msg}",
                self.t0.elapsed().as_secs_f64()
            );
        }
    }
}

/// Start the network described by `spec` in `dir`.
pub fn start(spec: &Spec, dir: &Path, opts: &LaunchOptions) -> Result<Network, LaunchError> {
    let p = Progress {
        on: opts.progress,
        t0: Instant::now(),
    };
    if NetworkInfo::path(dir).exists() {
        if let Ok(old) = NetworkInfo::load(dir) {
            let running = old.nodes.iter().any(|n| proc::alive(n.pid, n.start_time));
            if running {
                return Err(LaunchError::new(format!(
                    "a network is already running in {}; stop it first with `onionmix testnet stop --dir {}`",
                    dir.display(),
                    dir.display()
                )));
            }
        }
        let _ = std::fs::remove_file(NetworkInfo::path(dir));
    }
    std::fs::create_dir_all(dir)
        .map_err(|e| LaunchError::new(format!("cannot create {}: {e}", dir.display())))?;
    let dir = dir
        .canonicalize()
        .map_err(|e| LaunchError::new(format!("{}: {e}", dir.display())))?;
    // Node names, in spec order.
    let mut names: Vec<(String, &crate::spec::NodeGroup)> = Vec::new();
    let mut counters: std::collections::HashMap<(Implementation, Role), usize> = Default::default();
    for g in &spec.nodes {
        for _ in 0..g.count {
            let idx = counters.entry((g.implementation, g.role)).or_default();
            let prefix = match g.implementation {
                Implementation::Tor => "",
                Implementation::Onionmix => "om",
            };
            names.push((format!("{prefix}{}{}", g.role.short(), idx), g));
            *idx += 1;
        }
    }

    // Link emulation: namespaces, TUNs and the emulator process first, so
    // every node knows its address.
    let emu = match (&spec.emulation, opts.no_emulation) {
        (Some(topo), false) => {
            p.step("emulator", "starting the link emulator");
            Some(start_emulator(topo, &names, spec.sink, &dir, opts)?)
        }
        _ => None,
    };
    let addr_of = |name: &str| -> String {
        emu.as_ref()
            .and_then(|h| h.ready.node(name))
            .map(|n| n.address.to_string())
            .unwrap_or_else(|| opts.address.clone())
    };
    // With emulation every node has its own address, so ports are fixed;
    // on loopback they come from this process's locked port blocks (never
    // the same port twice, never one another launcher is planning with).
    let port = |fixed: u16| -> Result<u16, LaunchError> {
        if emu.is_some() {
            return Ok(fixed);
        }
        proc::free_port(&opts.address).map_err(|e| LaunchError::new(format!("no free port: {e}")))
    };

    // Plan nodes: addresses, ports, data dirs.
    let mut planned: Vec<Planned> = Vec::new();
    for (name, g) in &names {
        let name = name.clone();
        let data_dir = dir.join(&name);
        std::fs::create_dir_all(&data_dir)
            .map_err(|e| LaunchError::new(format!("cannot create {}: {e}", data_dir.display())))?;
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let _ = std::fs::set_permissions(&data_dir, std::fs::Permissions::from_mode(0o700));
        }
        let or_port = if g.role.is_relay() {
            Some(port(5000)?)
        } else {
            None
        };
        let dir_port = if g.role == Role::Authority
            || (g.implementation == Implementation::Tor && g.role.is_relay())
        {
            Some(port(7000)?)
        } else {
            None
        };
        let socks_port = if g.role == Role::Client {
            Some(port(9050)?)
        } else {
            None
        };
        // Every client gets a control port (cookie authentication): the
        // measurement suite reads stock tor's circuit build times from CIRC
        // events; controllers (stem, Bine) drive either client.
        let control_port = if g.role == Role::Client {
            Some(port(9051)?)
        } else {
            None
        };
        planned.push(Planned {
            info: NodeInfo {
                name: name.clone(),
                implementation: g.implementation,
                roles: vec![g.role],
                address: addr_of(&name),
                or_port,
                dir_port,
                socks_port,
                control_port,
                fingerprint: None,
                v3ident: None,
                pid: 0,
                start_time: 0,
                log: data_dir.join(format!("{name}.log")),
                data_dir,
            },
            role: g.role,
            extra: if g.implementation == Implementation::Tor {
                g.torrc.clone()
            } else {
                g.config.clone()
            },
            ed_or_v3: None,
        });
    }
    let sink_addr = addr_of("sink");

    // Sink ports.
    let sink_ports = if spec.sink {
        Some((port(8080)?, port(7)?, port(53)?))
    } else {
        None
    };
    let sink_https = if spec.sink { Some(port(8443)?) } else { None };

    // Identities.
    p.step(
        "keys",
        &format!("generating identities for {} nodes", planned.len()),
    );
    for n in planned.iter_mut() {
        let i = &mut n.info;
        match (i.implementation, n.role) {
            (Implementation::Tor, Role::Authority) => {
                let dp = i.dir_port.unwrap_or(0);
                let v3 = torrc::gencert(&i.data_dir, &format!("{}:{dp}", i.address))
                    .map_err(|e| LaunchError::node(e, i))?;
                i.v3ident = Some(v3.clone());
                n.ed_or_v3 = Some(v3);
                let fp =
                    torrc::list_fingerprint(&opts.tor_bin, &i.data_dir, i.or_port.unwrap_or(0))
                        .map_err(|e| LaunchError::node(e, i))?;
                i.fingerprint = Some(fp);
            }
            (Implementation::Tor, Role::Relay | Role::Exit) => {
                let fp =
                    torrc::list_fingerprint(&opts.tor_bin, &i.data_dir, i.or_port.unwrap_or(0))
                        .map_err(|e| LaunchError::node(e, i))?;
                i.fingerprint = Some(fp);
            }
            (Implementation::Onionmix, Role::Relay | Role::Exit) => {
                write_onionmix_relay_config(
                    i,
                    n.role,
                    &[],
                    sink_dns(&sink_addr, sink_ports),
                    &n.extra,
                )
                .map_err(|e| LaunchError::node(e, i))?;
                let out = Command::new(&opts.onionmix_bin)
                    .args(["relay", "--config"])
                    .arg(i.data_dir.join("relay.toml"))
                    .arg("--list-fingerprint")
                    .output()
                    .map_err(|e| LaunchError::node(format!("cannot run onionmix: {e}"), i))?;
                let text = String::from_utf8_lossy(&out.stdout);
                let fp: String = text
                    .split_whitespace()
                    .nth(1)
                    .unwrap_or_default()
                    .to_string();
                if !out.status.success() || fp.len() != 40 {
                    return Err(LaunchError::node(
                        format!(
                            "onionmix relay --list-fingerprint failed: {}{}",
                            text,
                            String::from_utf8_lossy(&out.stderr)
                        ),
                        i,
                    ));
                }
                i.fingerprint = Some(fp);
            }
            (Implementation::Onionmix, Role::Authority) => {
                write_onionmix_authority_config(i, &[], &n.extra, spec.voting_schedule())
                    .map_err(|e| LaunchError::node(e, i))?;
                let out = Command::new(&opts.onionmix_bin)
                    .args(["authority", "--config"])
                    .arg(i.data_dir.join("authority.toml"))
                    .arg("--list-fingerprint")
                    .output()
                    .map_err(|e| LaunchError::node(format!("cannot run onionmix: {e}"), i))?;
                let text = String::from_utf8_lossy(&out.stdout);
                let f: Vec<&str> = text.split_whitespace().collect();
                match f[..] {
                    [_, fp, v3] if out.status.success() && fp.len() == 40 && v3.len() == 40 => {
                        i.fingerprint = Some(fp.to_string());
                        i.v3ident = Some(v3.to_string());
                        n.ed_or_v3 = Some(v3.to_string());
                    }
                    _ => {
                        return Err(LaunchError::node(
                            format!(
                                "onionmix authority --list-fingerprint failed: {}{}",
                                text,
                                String::from_utf8_lossy(&out.stderr)
                            ),
                            i,
                        ));
                    }
                }
            }
            (
                _,
                Role::Client | Role::Mix | Role::Provider | Role::MixClient | Role::OnionService,
            ) => {}
        }
    }

    // Directory authority lines / entries.
    let auths: Vec<&NodeInfo> = planned
        .iter()
        .filter(|n| n.role == Role::Authority)
        .map(|n| &n.info)
        .collect();
    let dirauth_lines: Vec<String> = auths
        .iter()
        .map(|a| {
            torrc::dirauthority_line(
                &a.name,
                a.or_port.unwrap_or(0),
                a.v3ident.as_deref().unwrap_or(""),
                &a.address,
                a.dir_port.unwrap_or(0),
                a.fingerprint.as_deref().unwrap_or(""),
            )
        })
        .collect();
    let auth_entries: Vec<AuthEntry> = auths
        .iter()
        .map(|a| AuthEntry {
            nickname: a.name.clone(),
            v3ident: a.v3ident.clone().unwrap_or_default(),
            fingerprint: a.fingerprint.clone().unwrap_or_default(),
            dir_addr: format!("{}:{}", a.address, a.dir_port.unwrap_or(0)),
            or_addr: format!("{}:{}", a.address, a.or_port.unwrap_or(0)),
        })
        .collect();

    // Configs.
    p.step("configs", "writing torrc and onionmix configs");
    let resolv = sink_ports.map(|(_, _, dns)| {
        let path = dir.join("resolv.conf");
        let _ = std::fs::write(&path, format!("nameserver {sink_addr}:{dns}\n"));
        path
    });
    let sink_targets = sink_ports.map(|(http, echo, _)| {
        let ip: std::net::IpAddr = sink_addr.parse().unwrap_or([127, 0, 0, 1].into());
        (SocketAddr::new(ip, http), SocketAddr::new(ip, echo))
    });
    for n in &planned {
        let i = &n.info;
        match i.implementation {
            Implementation::Tor => {
                // An onion service's own lines first: the spec's lines may
                // add options for it.
                let extra: Vec<String> = match (n.role, sink_targets) {
                    (Role::OnionService, Some((http, echo))) => {
                        let mut l = crate::onion::torrc_lines(&i.data_dir, http, echo);
                        l.extend(n.extra.iter().cloned());
                        l
                    }
                    _ => n.extra.clone(),
                };
                let t = torrc::render(&torrc::TorNode {
                    nick: &i.name,
                    role: n.role,
                    data_dir: &i.data_dir,
                    addr: &i.address,
                    or_port: i.or_port,
                    dir_port: i.dir_port,
                    socks_port: i.socks_port,
                    control_port: i.control_port,
                    resolv_conf: resolv.as_deref(),
                    dirauths: &dirauth_lines,
                    extra: &extra,
                    voting: spec.voting_schedule(),
                });
                std::fs::write(i.data_dir.join("torrc"), t)
                    .map_err(|e| LaunchError::node(e.to_string(), i))?;
            }
            Implementation::Onionmix => match n.role {
                Role::Client => write_onionmix_client_config(i, &auth_entries, &n.extra)
                    .map_err(|e| LaunchError::node(e, i))?,
                Role::Relay | Role::Exit => write_onionmix_relay_config(
                    i,
                    n.role,
                    &auth_entries,
                    sink_dns(&sink_addr, sink_ports),
                    &n.extra,
                )
                .map_err(|e| LaunchError::node(e, i))?,
                Role::Authority => write_onionmix_authority_config(
                    i,
                    &auth_entries,
                    &n.extra,
                    spec.voting_schedule(),
                )
                .map_err(|e| LaunchError::node(e, i))?,
                Role::OnionService => {
                    let (http, echo) = sink_targets
                        .ok_or_else(|| LaunchError::node("an onion service needs the sink", i))?;
                    let block = crate::onion::onionmix_block(&i.data_dir, http, echo, &n.extra);
                    write_onionmix_service_config(i, &auth_entries, &block)
                        .map_err(|e| LaunchError::node(e, i))?
                }
                Role::Mix | Role::Provider | Role::MixClient => {}
            },
        }
    }

    // Commands run inside the node's namespace when emulated.
    let faketime = match &opts.clock_file {
        Some(f) => {
            let lib = libfaketime().ok_or_else(|| {
                LaunchError::new(
                    "a clock file needs libfaketime: apt-get install -y faketime".to_string(),
                )
            })?;
            if !f.exists() {
                std::fs::write(f, "+0\n")
                    .map_err(|e| LaunchError::new(format!("cannot write {}: {e}", f.display())))?;
            }
            Some((lib, f.clone()))
        }
        None => None,
    };
    let mk = |name: &str, program: &std::ffi::OsStr| -> Command {
        let mut c = emu
            .as_ref()
            .and_then(|h| h.command(name, program))
            .unwrap_or_else(|| Command::new(program));
        if let Some((lib, file)) = &faketime {
            with_faketime(&mut c, lib, file);
        }
        c
    };

    // Start: sink, authorities, relays, then clients.
    let mut children: Vec<Child> = Vec::new();
    let mut started: Vec<NodeInfo> = Vec::new();
    let mut sink_info = None;
    let fail = |children: &mut Vec<Child>,
                started: &[NodeInfo],
                sink: &Option<SinkInfo>,
                e: LaunchError| {
        let info = NetworkInfo {
            spec: spec.name.clone(),
            dir: dir.clone(),
            ready_unix: 0,
            bootstrap_secs: 0.0,
            nodes: started.to_vec(),
            sink: sink.clone(),
            emulator: None,
            onion_services: Vec::new(),
        };
        stop_info(&info);
        for c in children.iter_mut() {
            let _ = c.wait();
        }
        e
    };
    if let Some((http, echo, dns)) = sink_ports {
        let log = dir.join("sink.log");
        let mut cmd = mk("sink", opts.onionmix_bin.as_os_str());
        cmd.args([
            "sink",
            "--http",
            &format!("{sink_addr}:{http}"),
            "--echo",
            &format!("{sink_addr}:{echo}"),
            "--dns",
            &format!("{sink_addr}:{dns}"),
        ]);
        let tls_ca = dir.join("sink-ca.pem");
        if let Some(https) = sink_https {
            cmd.arg("--https")
                .arg(format!("{sink_addr}:{https}"))
                .arg("--tls-ca")
                .arg(&tls_ca);
        }
        let child = proc::spawn(cmd, &log)
            .map_err(|e| LaunchError::new(format!("cannot start the sink: {e}")))?;
        let pid = child.id();
        children.push(child);
        let st = proc::start_time(pid).unwrap_or(0);
        let parse = |p: u16| -> SocketAddr {
            SocketAddr::new(sink_addr.parse().unwrap_or([127, 0, 0, 1].into()), p)
        };
        sink_info = Some(SinkInfo {
            http: parse(http),
            echo: parse(echo),
            dns: parse(dns),
            https: sink_https.map(parse),
            tls_ca: sink_https.map(|_| tls_ca),
            hostname: crate::sink::SINK_HOSTNAME.into(),
            pid,
            start_time: st,
            log,
        });
    }
    let order = [
        Role::Authority,
        Role::Relay,
        Role::Exit,
        Role::OnionService,
        Role::Client,
    ];
    p.step(
        "start",
        &format!(
            "starting {} processes",
            planned.len() + usize::from(spec.sink)
        ),
    );
    for role in order {
        for n in planned.iter().filter(|n| n.role == role) {
            let mut info = n.info.clone();
            let cmd = match info.implementation {
                Implementation::Tor => {
                    let mut c = mk(&info.name, std::ffi::OsStr::new(&opts.tor_bin));
                    c.arg("-f").arg(info.data_dir.join("torrc"));
                    c
                }
                Implementation::Onionmix => {
                    let mut c = mk(&info.name, opts.onionmix_bin.as_os_str());
                    match role {
                        Role::Client => c
                            .arg("client")
                            .arg("--config")
                            .arg(info.data_dir.join("client.toml")),
                        Role::Authority => c
                            .arg("authority")
                            .arg("--config")
                            .arg(info.data_dir.join("authority.toml")),
                        Role::OnionService => c
                            .arg("onion-service")
                            .arg("--config")
                            .arg(info.data_dir.join("service.toml")),
                        _ => c
                            .arg("relay")
                            .arg("--config")
                            .arg(info.data_dir.join("relay.toml")),
                    };
                    c
                }
            };
            let child = match proc::spawn(cmd, &info.log) {
                Ok(c) => c,
                Err(e) => {
                    let err = LaunchError::node(format!("cannot start: {e}"), &info);
                    return Err(fail(&mut children, &started, &sink_info, err));
                }
            };
            info.pid = child.id();
            info.start_time = proc::start_time(info.pid).unwrap_or(0);
            children.push(child);
            started.push(info);
        }
    }

    // Wait for readiness.
    let timeout = opts
        .timeout
        .unwrap_or(Duration::from_secs(spec.bootstrap_timeout_secs));
    let deadline = p.t0 + timeout;
    let n_relays = started
        .iter()
        .filter(|n| n.roles.iter().any(|r| r.is_relay()))
        .count();
    let auth_dir = started
        .iter()
        .find(|n| n.has_role(Role::Authority))
        .and_then(|n| n.dir_addr());
    // Onion services: their addresses now (both implementations write the
    // hostname file at start); reachability from every client is checked
    // once the clients work.
    let mut onion_services = Vec::new();
    for n in started.iter().filter(|n| n.has_role(Role::OnionService)) {
        match crate::onion::info(n, Duration::from_secs(30)) {
            Ok(s) => onion_services.push(s),
            Err(e) => {
                let err = LaunchError::node(e, n);
                return Err(fail(&mut children, &started, &sink_info, err));
            }
        }
    }
    let mut onion_wait: Option<crate::onion::OnionWait> = None;
    let mut last_count = usize::MAX;
    let mut consensus_ok = false;
    let mut clients_done = 0;
    // Stock relays and exits (not authorities) that must hold the full
    // consensus themselves: see `DirWait`.
    let mut dir_wait = DirWait::new(
        started
            .iter()
            .filter(|n| {
                n.implementation == Implementation::Tor
                    && !n.has_role(Role::Authority)
                    && n.roles.iter().any(|r| r.is_relay())
            })
            .cloned()
            .collect(),
    );
    p.step(
        "consensus",
        &format!("waiting for a consensus listing all {n_relays} relays"),
    );
    loop {
        // A node that exited is a failure.
        for (i, c) in children.iter_mut().enumerate() {
            if let Ok(Some(status)) = c.try_wait() {
                let (name, log) = if i == 0 && spec.sink {
                    ("sink".to_string(), dir.join("sink.log"))
                } else {
                    let idx = i - usize::from(spec.sink);
                    started
                        .get(idx)
                        .map(|n| (n.name.clone(), n.log.clone()))
                        .unwrap_or(("?".into(), dir.join("sink.log")))
                };
                let err = LaunchError {
                    msg: format!("node exited during start-up ({status})"),
                    node: Some(name),
                    log_tail: proc::tail(&log, 25),
                };
                return Err(fail(&mut children, &started, &sink_info, err));
            }
        }
        if !consensus_ok && let Some(a) = auth_dir {
            let n = count_consensus_relays(a);
            if n != last_count {
                if n > 0 {
                    p.step("consensus", &format!("{n}/{n_relays} relays listed"));
                }
                last_count = n;
            }
            if n >= n_relays {
                consensus_ok = true;
                p.step("consensus", "complete");
            }
        }
        let clients: Vec<&NodeInfo> = started
            .iter()
            .filter(|n| n.has_role(Role::Client))
            .collect();
        let done = clients
            .iter()
            .filter(|c| {
                std::fs::read_to_string(&c.log).is_ok_and(|l| l.contains("Bootstrapped 100%"))
            })
            .count();
        if done != clients_done {
            clients_done = done;
            p.step(
                "bootstrap",
                &format!("{done}/{} clients at 100%", clients.len()),
            );
        }
        if consensus_ok && !dir_wait.done() {
            let before = dir_wait.ready_count();
            dir_wait.poll(n_relays);
            if dir_wait.ready_count() != before || dir_wait.done() {
                p.step(
                    "dirinfo",
                    &format!(
                        "{}/{} stock relays hold a consensus listing all {n_relays} relays",
                        dir_wait.ready_count(),
                        dir_wait.len()
                    ),
                );
            }
        }
        if consensus_ok && dir_wait.done() && done == clients.len() {
            // Bootstrapped is not yet usable (stock tor may still fail its
            // first streams): require an echo round trip through each client.
            let echo = sink_info.as_ref().map(|s| s.echo);
            let usable = match echo {
                Some(echo) => clients
                    .iter()
                    .filter_map(|c| c.socks_addr())
                    .all(|socks| echo_through_socks(socks, echo)),
                None => true,
            };
            if usable && onion_wait.is_none() {
                p.step("traffic", "every client carried a round trip to the sink");
                onion_wait = Some(crate::onion::OnionWait::new(&clients, &onion_services));
            }
        }
        if let Some(w) = onion_wait.as_mut() {
            let before = w.progress().0;
            w.poll();
            let (ok, all) = w.progress();
            if ok != before && all > 0 {
                p.step(
                    "onion",
                    &format!("{ok}/{all} client-service pairs carried a round trip"),
                );
            }
            if w.done() {
                break;
            }
        }
        if Instant::now() > deadline {
            // Blame a client that has not bootstrapped, else a stock relay
            // without the consensus, else the first authority.
            let lagging = dir_wait.first_missing();
            let culprit = if consensus_ok {
                clients
                    .iter()
                    .find(|c| {
                        !std::fs::read_to_string(&c.log)
                            .is_ok_and(|l| l.contains("Bootstrapped 100%"))
                    })
                    .copied()
                    .or(lagging)
            } else {
                started.iter().find(|n| n.has_role(Role::Authority))
            };
            if let Some(pair) = onion_wait.as_ref().and_then(|w| w.first_missing()) {
                let svc = pair.rsplit(" -> ").next().unwrap_or_default().to_string();
                let err = match started.iter().find(|n| n.name == svc) {
                    Some(n) => LaunchError::node(
                        format!("onion service not reachable within {timeout:?} ({pair})"),
                        n,
                    ),
                    None => LaunchError::new(format!("onion service not reachable ({pair})")),
                };
                return Err(fail(&mut children, &started, &sink_info, err));
            }
            let msg = if consensus_ok && done == clients.len() && lagging.is_some() {
                format!("relay holds no consensus listing all {n_relays} relays within {timeout:?}")
            } else if consensus_ok {
                format!("client did not reach Bootstrapped 100% within {timeout:?}")
            } else {
                format!(
                    "no consensus listing all {n_relays} relays within {timeout:?} (last seen: {})",
                    if last_count == usize::MAX {
                        0
                    } else {
                        last_count
                    }
                )
            };
            let err = match culprit {
                Some(c) => LaunchError::node(msg, c),
                None => LaunchError::new(msg),
            };
            return Err(fail(&mut children, &started, &sink_info, err));
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    if let Some(s) = &sink_info
        && TcpStream::connect_timeout(&s.http, Duration::from_secs(2)).is_err()
    {
        let err = LaunchError {
            msg: "the sink is not accepting connections".into(),
            node: Some("sink".into()),
            log_tail: proc::tail(&s.log, 25),
        };
        return Err(fail(&mut children, &started, &sink_info, err));
    }
    let info = NetworkInfo {
        spec: spec.name.clone(),
        dir: dir.clone(),
        ready_unix: now_unix(),
        bootstrap_secs: p.t0.elapsed().as_secs_f64(),
        nodes: started,
        sink: sink_info,
        onion_services,
        emulator: emu.as_ref().map(|h| crate::netinfo::EmulatorInfo {
            state_dir: h.state_dir.clone(),
            pid: h.ready.pid,
            start_time: h.ready.pid_start,
            subnet: h.ready.subnet.clone(),
        }),
    };
    info.save().map_err(LaunchError::new)?;
    p.step(
        "ready",
        &format!(
            "network.json written to {}",
            NetworkInfo::path(&dir).display()
        ),
    );
    Ok(Network {
        info,
        children,
        emu,
    })
}

/// Start the link emulator with one namespace per node (and the sink).
fn start_emulator(
    topo: &onionmix_emu::Topology,
    names: &[(String, &crate::spec::NodeGroup)],
    sink: bool,
    dir: &Path,
    opts: &LaunchOptions,
) -> Result<onionmix_emu::run::EmulatorHandle, LaunchError> {
    onionmix_emu::netns::check_privileges().map_err(|e| {
        LaunchError::new(format!(
            "{e}\nThis spec emulates links; that needs root (CAP_NET_ADMIN). Without it, \
             run the same network on plain loopback with `--no-emulation`."
        ))
    })?;
    let _ =
        onionmix_emu::netns::cleanup_stale("om", Path::new(onionmix_emu::netns::DEFAULT_REGISTRY));
    let mut topo = topo.clone();
    let mut all: Vec<String> = names.iter().map(|(n, _)| n.clone()).collect();
    if sink {
        all.push("sink".into());
    }
    for n in &topo.nodes {
        if !all.contains(&n.name) {
            return Err(LaunchError::new(format!(
                "[emulation] names node {:?}, which the spec does not have (nodes: {})",
                n.name,
                all.join(", ")
            )));
        }
    }
    for n in all {
        if !topo.nodes.iter().any(|x| x.name == n) {
            topo.nodes.push(onionmix_emu::NodeSpec {
                name: n,
                address: None,
                uplink: None,
                downlink: None,
            });
        }
    }
    // A spec that does not choose its address space gets a free /24 of
    // 10.77.0.0/16, picked under a host-wide lock held until the emulator
    // has claimed it (its guard route), so two networks started at once
    // (parallel tests, two users) never pick the same one.
    let auto = topo.subnet == onionmix_emu::Topology::default().subnet
        && topo.nodes.iter().all(|n| n.address.is_none());
    let _lock = if auto {
        let lock = subnet_lock()?;
        topo.subnet = pick_free_subnet()?;
        Some(lock)
    } else {
        None
    };
    let cfg = onionmix_emu::run::EmuConfig::new(dir.join("emu"), topo);
    onionmix_emu::run::spawn(&opts.onionmix_bin, &cfg, Duration::from_secs(30))
        .map_err(|e| LaunchError::new(format!("link emulator: {e}")))
}

/// Host-wide lock for choosing an emulated subnet (released on drop).
fn subnet_lock() -> Result<std::fs::File, LaunchError> {
    let reg = Path::new(onionmix_emu::netns::DEFAULT_REGISTRY);
    std::fs::create_dir_all(reg)
        .map_err(|e| LaunchError::new(format!("cannot create {}: {e}", reg.display())))?;
    let path = reg.join("subnet.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| LaunchError::new(format!("cannot open {}: {e}", path.display())))?;
    f.lock()
        .map_err(|e| LaunchError::new(format!("cannot lock {}: {e}", path.display())))?;
    Ok(f)
}

/// The first 10.77.N.0/24 (N = 100..=249) no route or address overlaps.
fn pick_free_subnet() -> Result<onionmix_emu::profile::Subnet, LaunchError> {
    let mut last = String::new();
    for n in 100u8..=249 {
        let s = onionmix_emu::profile::Subnet {
            network: std::net::Ipv4Addr::new(10, 77, n, 0),
            prefix: 24,
        };
        match onionmix_emu::netns::check_subnet_free(&s) {
            Ok(()) => return Ok(s),
            Err(e @ onionmix_emu::EmuError::SubnetInUse { .. }) => last = e.to_string(),
            Err(e) => return Err(LaunchError::new(format!("link emulator: {e}"))),
        }
    }
    Err(LaunchError::new(format!(
        "link emulator: no free /24 in 10.77.100.0-10.77.249.0 (last: {last}); \
         stop other emulated networks or set `subnet` in [emulation]"
    )))
}

/// Waits until every stock (tor) relay and exit holds a microdesc
/// consensus listing every relay.
///
/// A stock exit refuses a BEGIN whose previous hop it does not know as a
/// relay (neither in its consensus nor among its descriptors): it logs
/// "Attempt by ... to open a stream from unknown relay. Closing." and
/// answers END reason MISC (`RefuseUnknownExits`, on by default). Relays
/// fetch the consensus on an exponential back-off that grows while the
/// authorities answer 404 (before the first consensus exists), so an exit
/// can get its first consensus 30 s or more after the client has
/// bootstrapped; meanwhile every stream through it fails, and after three
/// such ENDs the client gives up with SOCKS "general failure".
///
/// A relay's `cached-microdesc-consensus` is read (or, failing that, its
/// DirPort asked for the consensus); a relay that does not
/// have it yet gets SIGHUP, which makes tor reset its download back-off and
/// fetch at once (sent only after its log shows "Bootstrapped 0%", i.e.
/// once tor's signal handlers are installed, and at most every 10 s).
struct DirWait {
    nodes: Vec<NodeInfo>,
    ready: Vec<bool>,
    last_poll: Option<Instant>,
    last_nudge: Vec<Option<Instant>>,
}

impl DirWait {
    const POLL: Duration = Duration::from_secs(1);
    const NUDGE: Duration = Duration::from_secs(10);

    fn new(nodes: Vec<NodeInfo>) -> Self {
        let n = nodes.len();
        DirWait {
            nodes,
            ready: vec![false; n],
            last_poll: None,
            last_nudge: vec![None; n],
        }
    }
    fn len(&self) -> usize {
        self.nodes.len()
    }
    fn ready_count(&self) -> usize {
        self.ready.iter().filter(|r| **r).count()
    }
    fn done(&self) -> bool {
        self.ready.iter().all(|r| *r)
    }
    fn first_missing(&self) -> Option<&NodeInfo> {
        self.nodes
            .iter()
            .zip(&self.ready)
            .find(|(_, r)| !**r)
            .map(|(n, _)| n)
    }
    /// Check the relays not yet ready (at most once a second) and nudge
    /// the ones still without the full consensus.
    fn poll(&mut self, n_relays: usize) {
        if self.last_poll.is_some_and(|t| t.elapsed() < Self::POLL) {
            return;
        }
        self.last_poll = Some(Instant::now());
        for (i, n) in self.nodes.iter().enumerate() {
            if self.ready[i] {
                continue;
            }
            // Its data directory holds the consensus tor uses; else ask its
            // DirPort (the same document, as a directory cache serves it).
            let cached = std::fs::read_to_string(n.data_dir.join("cached-microdesc-consensus"))
                .is_ok_and(|c| c.lines().filter(|l| l.starts_with("r ")).count() >= n_relays);
            let ready = cached
                || n.dir_addr()
                    .is_some_and(|a| count_consensus_relays(a) >= n_relays);
            if ready {
                self.ready[i] = true;
                continue;
            }
            let due = self.last_nudge[i].is_none_or(|t| t.elapsed() >= Self::NUDGE);
            let started =
                std::fs::read_to_string(&n.log).is_ok_and(|l| l.contains("Bootstrapped 0%"));
            if due && started && proc::reload(n.pid, n.start_time) {
                self.last_nudge[i] = Some(Instant::now());
            }
        }
    }
}

/// Count `r ` lines in the current microdesc consensus a directory (an
/// authority, or a stock relay's DirPort) serves.
pub fn count_consensus_relays(dir_addr: SocketAddr) -> usize {
    match http_get_plain(dir_addr, "/tor/status-vote/current/consensus-microdesc") {
        Some(body) => body.lines().filter(|l| l.starts_with("r ")).count(),
        None => 0,
    }
}

/// A minimal blocking HTTP/1.0 GET (identity encoding) for readiness checks.
pub fn http_get_plain(addr: SocketAddr, path: &str) -> Option<String> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAccept-Encoding: identity\r\n\r\n"
    )
    .ok()?;
    const MAX: usize = 16 * 1024 * 1024;
    let mut buf = Vec::new();
    s.take(MAX as u64).read_to_end(&mut buf).ok()?;
    let resp =
        onionmix_http::parse_response(&buf, &onionmix_http::Limits::DEFAULT, MAX, false).ok()?;
    (resp.head.status == 200).then(|| String::from_utf8_lossy(&resp.body).into_owned())
}

struct AuthEntry {
    nickname: String,
    v3ident: String,
    fingerprint: String,
    dir_addr: String,
    or_addr: String,
}

fn auth_toml(auths: &[AuthEntry]) -> String {
    let mut s = String::new();
    for a in auths {
        s.push_str(&format!(
            "\n[[authority]]\nnickname = {:?}\nv3ident = {:?}\nfingerprint = {:?}\ndir_addr = {:?}\nor_addr = {:?}\n",
            a.nickname, a.v3ident, a.fingerprint, a.dir_addr, a.or_addr
        ));
    }
    s
}

fn write_onionmix_authority_config(
    i: &NodeInfo,
    auths: &[AuthEntry],
    extra: &[String],
    (interval, vote, dist): (u64, u64, u64),
) -> Result<(), String> {
    // The spec's voting schedule (default tor's testing one: 20 s
    // interval, 4 s delays).
    let mut s = format!(
        "data_dir = {:?}\nnickname = {:?}\nor_listen = \"{}:{}\"\ndir_listen = \"{}:{}\"\n\
         contact = \"onionmix-testnet@example.invalid\"\ntesting_network = true\n\
         voting_interval_secs = {interval}\nvote_delay_secs = {vote}\ndist_delay_secs = {dist}\n\
         reachability_interval_secs = 10\n",
        i.data_dir.display().to_string(),
        i.name,
        i.address,
        i.or_port.unwrap_or(0),
        i.address,
        i.dir_port.unwrap_or(0)
    );
    for l in extra {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str(&auth_toml(auths));
    std::fs::write(i.data_dir.join("authority.toml"), s).map_err(|e| e.to_string())
}

fn write_onionmix_client_config(
    i: &NodeInfo,
    auths: &[AuthEntry],
    extra: &[String],
) -> Result<(), String> {
    let mut s = format!(
        "data_dir = {:?}\nsocks_listen = \"{}:{}\"\ntesting_network = true\npaths_needed_to_build_circuits = 0.67\n",
        i.data_dir.display().to_string(),
        i.address,
        i.socks_port.unwrap_or(0)
    );
    if let Some(p) = i.control_port {
        s.push_str(&format!(
            "control_port = \"{}:{p}\"\ncookie_authentication = true\n",
            i.address
        ));
    }
    if !i.address.starts_with("127.") {
        // Emulated networks: the SOCKS port is on the node's own address
        // in its namespace, reached from the host endpoint.
        s.push_str("allow_public_socks = true\nallow_public_control = true\n");
    }
    for l in extra {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str(&auth_toml(auths));
    std::fs::write(i.data_dir.join("client.toml"), s).map_err(|e| e.to_string())
}

/// An onionmix onion-service process: the client schema (no SOCKS port is
/// opened by `onionmix onion-service`) with the service block.
fn write_onionmix_service_config(
    i: &NodeInfo,
    auths: &[AuthEntry],
    block: &str,
) -> Result<(), String> {
    let mut s = format!(
        "data_dir = {:?}\ntesting_network = true\npaths_needed_to_build_circuits = 0.67\n",
        i.data_dir.display().to_string(),
    );
    s.push_str(&auth_toml(auths));
    s.push_str(block);
    std::fs::write(i.data_dir.join("service.toml"), s).map_err(|e| e.to_string())
}

fn sink_dns(sink_addr: &str, ports: Option<(u16, u16, u16)>) -> Option<String> {
    ports.map(|(_, _, dns)| format!("{sink_addr}:{dns}"))
}

fn write_onionmix_relay_config(
    i: &NodeInfo,
    role: Role,
    auths: &[AuthEntry],
    nameserver: Option<String>,
    extra: &[String],
) -> Result<(), String> {
    let mut s = format!(
        "data_dir = {:?}\nnickname = {:?}\nor_listen = \"{}:{}\"\ntesting_network = true\n",
        i.data_dir.display().to_string(),
        i.name,
        i.address,
        i.or_port.unwrap_or(0)
    );
    if role == Role::Exit {
        s.push_str(&format!(
            "exit = true\nexit_policy = [\"accept {}/8:*\"]\nexit_policy_reject_private = false\n",
            torrc_net(&i.address)
        ));
        if let Some(ns) = nameserver {
            s.push_str(&format!("nameserver = \"{ns}\"\n"));
        }
    }
    for l in extra {
        s.push_str(l);
        s.push('\n');
    }
    s.push_str(&auth_toml(auths));
    std::fs::write(i.data_dir.join("relay.toml"), s).map_err(|e| e.to_string())
}

fn torrc_net(addr: &str) -> String {
    let first = addr.split('.').next().unwrap_or("127");
    format!("{first}.0.0.0")
}

/// One SOCKS5 CONNECT to `target` through `socks`, send a probe and expect
/// it echoed back (blocking; short timeouts).
pub fn echo_through_socks(socks: SocketAddr, target: SocketAddr) -> bool {
    let attempt = || -> std::io::Result<bool> {
        let mut s = TcpStream::connect_timeout(&socks, Duration::from_secs(2))?;
        s.set_read_timeout(Some(Duration::from_secs(10)))?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(&[5, 1, 0])?;
        let mut r = [0u8; 2];
        s.read_exact(&mut r)?;
        if r != [5, 0] {
            return Ok(false);
        }
        let mut req = vec![5, 1, 0];
        match target {
            SocketAddr::V4(a) => {
                req.push(1);
                req.extend_from_slice(&a.ip().octets());
            }
            SocketAddr::V6(a) => {
                req.push(4);
                req.extend_from_slice(&a.ip().octets());
            }
        }
        req.extend_from_slice(&target.port().to_be_bytes());
        s.write_all(&req)?;
        let mut head = [0u8; 4];
        s.read_exact(&mut head)?;
        if head[1] != 0 {
            return Ok(false);
        }
        let rest = match head[3] {
            1 => 6,
            4 => 18,
            _ => return Ok(false),
        };
        let mut skip = vec![0u8; rest];
        s.read_exact(&mut skip)?;
        s.write_all(b"onionmix-ready")?;
        let mut back = [0u8; 14];
        s.read_exact(&mut back)?;
        Ok(&back == b"onionmix-ready")
    };
    attempt().unwrap_or(false)
}
