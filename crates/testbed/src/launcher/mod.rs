//! Start a network from a spec, wait until it is usable, write
//! `network.json`; stop exactly the processes it started.
//!
//! This module owns the options, the error and the start sequence;
//! `network` the running network, `configs` node identities and config
//! files, `emulation` the link emulator's start, `ready` the readiness
//! checks.

mod configs;
mod emulation;
mod network;
mod ready;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::netinfo::{NetworkInfo, NodeInfo, SinkInfo};
use crate::proc;
use crate::spec::{Implementation, Links, Role, Spec};
use onionmix_link::quic::DEFAULT_UDP_SOCKET_BUFFER;

pub use network::{Network, NetworkGuard, stop_info, with_faketime};
pub use ready::{count_consensus_relays, echo_through_socks, http_get_plain};

use configs::{generate_identities, write_configs};
use emulation::start_emulator;
use ready::wait_ready;

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
    pub(super) fn new(msg: impl Into<String>) -> Self {
        LaunchError {
            msg: msg.into(),
            node: None,
            log_tail: String::new(),
        }
    }
    pub(super) fn node(msg: impl Into<String>, n: &NodeInfo) -> Self {
        LaunchError {
            msg: msg.into(),
            node: Some(n.name.clone()),
            log_tail: proc::tail(&n.log, 25),
        }
    }
}

struct Planned {
    pub(super) info: NodeInfo,
    pub(super) role: Role,
    pub(super) extra: Vec<String>,
    pub(super) ed_or_v3: Option<String>,
}

fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

struct Progress {
    on: bool,
    pub(super) t0: Instant,
}

impl Progress {
    pub(super) fn step(&self, what: &str, msg: &str) {
        if self.on {
            eprintln!(
                "[{:6.1}s] {what:<10} {msg}",
                self.t0.elapsed().as_secs_f64()
            );
        }
    }
}

/// A warning when the kernel will grant a QUIC network's endpoints less
/// UDP socket buffer than they ask for ([`DEFAULT_UDP_SOCKET_BUFFER`]):
/// it caps `SO_RCVBUF`/`SO_SNDBUF` at `net.core.rmem_max`/`wmem_max`
/// (`read` gives them by name), and with Linux's default 208 KiB a busy
/// relay's socket overflows and QUIC takes the drops for congestion
/// (`docs/quic-links.md` §1). `None` for TLS networks, or when the caps
/// are high enough or cannot be read.
fn udp_buffer_warning(spec: &Spec, read: impl Fn(&str) -> Option<usize>) -> Option<String> {
    if spec.links != Links::Quic {
        return None;
    }
    let want = DEFAULT_UDP_SOCKET_BUFFER;
    let low: Vec<String> = ["rmem_max", "wmem_max"]
        .into_iter()
        .filter_map(|k| {
            let v = read(k)?;
            (v < want).then(|| format!("net.core.{k} = {v}"))
        })
        .collect();
    if low.is_empty() {
        return None;
    }
    Some(format!(
        "{}: QUIC links get UDP socket buffers under the {want} bytes they ask for, and \
         datagrams the kernel drops under load count as congestion; raise the caps with \
         `sysctl -w net.core.rmem_max={want} net.core.wmem_max={want}`",
        low.join(", ")
    ))
}

/// Start the network described by `spec` in `dir`.
pub fn start(spec: &Spec, dir: &Path, opts: &LaunchOptions) -> Result<Network, LaunchError> {
    let p = Progress {
        on: opts.progress,
        t0: Instant::now(),
    };
    if let Some(w) = udp_buffer_warning(spec, |k| {
        std::fs::read_to_string(format!("/proc/sys/net/core/{k}"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }) {
        p.step("warning", &w);
        tracing::warn!("{w}");
    }
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
        // Every client, relay and authority gets a control port (cookie
        // authentication): the measurement suite reads stock tor's
        // circuit build times from CIRC events; controllers (stem, Bine)
        // drive either implementation's clients and relays.
        let control_port = if g.role == Role::Client || g.role.is_relay() {
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
                links: Vec::new(),
            },
            role: g.role,
            extra: if g.implementation == Implementation::Tor {
                g.torrc.clone()
            } else {
                let mut l = spec.link_config(g.role);
                l.extend(g.config.iter().cloned());
                l
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

    generate_identities(&mut planned, spec, opts, &p, &sink_addr, sink_ports)?;

    write_configs(&planned, spec, &dir, &p, &sink_addr, sink_ports)?;

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
    // Onion services start once the network's consensus is complete and
    // every stock relay holds it (see `ready::wait_ready`): started with
    // the rest, a stock service bootstraps from a consensus listing one or
    // two relays, picks its vanguards-lite layer-2 set and introduction
    // points from those, and its circuits fail ("Failed to find node for
    // hop #2"); each introduction point that fails 3 launches is shunned
    // for 300 s, so the service published nothing for minutes (CI
    // 2026-12-07).
    let mut deferred: Vec<(NodeInfo, Command)> = Vec::new();
    p.step(
        "start",
        &format!(
            "starting {} processes",
            planned.len() + usize::from(spec.sink)
                - planned
                    .iter()
                    .filter(|n| n.role == Role::OnionService)
                    .count()
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
            if role == Role::OnionService {
                deferred.push((info, cmd));
                continue;
            }
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

    let onion_services = match wait_ready(
        spec,
        &dir,
        opts,
        &p,
        &mut children,
        &mut started,
        deferred,
        &sink_info,
    ) {
        Ok(s) => s,
        Err(err) => return Err(fail(&mut children, &started, &sink_info, err)),
    };
    let mut info = NetworkInfo {
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
    info.refresh_links();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn udp_buffer_warning_names_the_low_caps_of_quic_networks() {
        let quic = Spec::load("onionmix-basic-quic").unwrap();
        let tls = Spec::load("onionmix-basic").unwrap();
        let want = DEFAULT_UDP_SOCKET_BUFFER;
        let caps = |r: usize, w: usize| {
            move |k: &str| match k {
                "rmem_max" => Some(r),
                "wmem_max" => Some(w),
                _ => None,
            }
        };
        // Linux's default on both: both named, with the fix.
        let w = udp_buffer_warning(&quic, caps(212_992, 212_992)).unwrap();
        assert!(w.contains("net.core.rmem_max = 212992"), "{w}");
        assert!(w.contains("net.core.wmem_max = 212992"), "{w}");
        assert!(w.contains(&format!("net.core.rmem_max={want}")), "{w}");
        // Only the low one is named.
        let w = udp_buffer_warning(&quic, caps(want, 4096)).unwrap();
        assert!(!w.contains("rmem_max ="), "{w}");
        assert!(w.contains("net.core.wmem_max = 4096"), "{w}");
        // High enough, unreadable, or a TLS network: nothing.
        assert_eq!(udp_buffer_warning(&quic, caps(want, 4 * want)), None);
        assert_eq!(udp_buffer_warning(&quic, |_: &str| None), None);
        assert_eq!(udp_buffer_warning(&tls, caps(1, 1)), None);
    }
}
