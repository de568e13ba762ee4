//! The emulator process and the API a launcher uses to start, query and
//! stop it.
//!
//! The process (`onionmix emulator --config <file>`) creates the namespaces
//! and TUN devices, writes `emulator-ready.json` into its state directory,
//! then forwards packets on one thread: `ppoll` on every TUN descriptor with
//! a nanosecond timeout taken from the engine's next deadline (timer slack
//! set to 1 us), so packets leave within tens of microseconds of their due
//! time. Every `status_interval_ms` it rewrites `emulator-status.json`. On
//! SIGTERM/SIGINT/SIGHUP it writes a final status, closes the TUNs, deletes
//! the namespaces and exits 0.

use crate::engine::{Engine, Limits};
use crate::netns::{self, EmuError, NetSetup, NodePlacement, io_err};
use crate::profile::Topology;
use crate::status::{Lateness, StatusSnapshot};
use crate::sys;
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::io::{Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// File names inside the state directory.
pub const CONFIG_FILE: &str = "emulator.toml";
pub const READY_FILE: &str = "emulator-ready.json";
pub const STATUS_FILE: &str = "emulator-status.json";
pub const LOG_FILE: &str = "emulator.log";

/// The emulator process configuration (`onionmix emulator --config`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmuConfig {
    /// Directory for the ready, status and log files (created if missing).
    pub state_dir: PathBuf,
    /// Run id (6 lowercase hex digits); default: a fresh random one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Prefix of namespace and interface names (1-4 lowercase letters).
    #[serde(default = "default_prefix")]
    pub prefix: String,
    /// Where run records are kept for stale-state cleanup.
    #[serde(default = "default_registry")]
    pub registry: PathBuf,
    /// Give the root namespace an unimpaired endpoint (first subnet address).
    #[serde(default = "yes")]
    pub host_endpoint: bool,
    /// How often the status file is rewritten.
    #[serde(default = "default_status_interval")]
    pub status_interval_ms: u64,
    /// Create all core links up front so status lists them before traffic.
    #[serde(default = "yes")]
    pub create_all_links: bool,
    /// SCHED_FIFO priority for the forwarding thread (0: normal
    /// scheduling). Keeps packet timing precise on a loaded machine.
    #[serde(default = "default_rt")]
    pub realtime_priority: u8,
    /// Stop (cleanly, as on SIGTERM) when the process that spawned the
    /// emulator exits, even by SIGKILL. For tests; a launcher whose `start`
    /// command exits must leave this false.
    #[serde(default)]
    pub exit_with_parent: bool,
    #[serde(default)]
    pub limits: Limits,
    pub topology: Topology,
}

fn default_rt() -> u8 {
    10
}

fn default_prefix() -> String {
    netns::DEFAULT_PREFIX.to_string()
}
fn default_registry() -> PathBuf {
    PathBuf::from(netns::DEFAULT_REGISTRY)
}
fn yes() -> bool {
    true
}
fn default_status_interval() -> u64 {
    1000
}

impl EmuConfig {
    /// A config with defaults for everything but the state dir and topology.
    pub fn new(state_dir: impl Into<PathBuf>, topology: Topology) -> Self {
        EmuConfig {
            state_dir: state_dir.into(),
            run_id: None,
            prefix: default_prefix(),
            registry: default_registry(),
            host_endpoint: true,
            status_interval_ms: default_status_interval(),
            create_all_links: true,
            realtime_priority: default_rt(),
            exit_with_parent: false,
            limits: Limits::default(),
            topology,
        }
    }

    pub fn from_toml(s: &str) -> Result<Self, EmuError> {
        toml::from_str(s)
            .map_err(|e| EmuError::Config(crate::profile::ConfigError::Toml(e.to_string())))
    }

    pub fn to_toml(&self) -> Result<String, EmuError> {
        toml::to_string(self)
            .map_err(|e| EmuError::Config(crate::profile::ConfigError::Toml(e.to_string())))
    }

    /// Check everything that can be checked without privileges.
    pub fn validate(&self) -> Result<(), EmuError> {
        netns::validate_prefix(&self.prefix)?;
        if let Some(r) = &self.run_id {
            netns::validate_run_id(r)?;
        }
        if self.status_interval_ms == 0 || self.status_interval_ms > 60_000 {
            return Err(EmuError::Emulator(
                "status_interval_ms must be in 1..=60000".into(),
            ));
        }
        self.topology.resolve()?;
        Ok(())
    }
}

/// Written once the network exists: where every node lives.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadyInfo {
    pub run_id: String,
    pub pid: u32,
    pub pid_start: u64,
    pub prefix: String,
    pub registry: PathBuf,
    pub subnet: String,
    /// Address of the root namespace's endpoint, if enabled.
    pub host_address: Option<Ipv4Addr>,
    pub host_interface: Option<String>,
    pub nodes: Vec<NodePlacement>,
}

impl ReadyInfo {
    pub fn node(&self, name: &str) -> Option<&NodePlacement> {
        self.nodes.iter().find(|n| n.name == name)
    }

    /// A command running `program` inside node `name`'s namespace.
    pub fn command(&self, name: &str, program: impl AsRef<std::ffi::OsStr>) -> Option<Command> {
        self.node(name)
            .map(|n| netns::command_in(&n.namespace, program))
    }
}

pub fn read_ready(state_dir: &Path) -> Result<ReadyInfo, EmuError> {
    let p = state_dir.join(READY_FILE);
    let text = std::fs::read_to_string(&p).map_err(io_err(format!("reading {}", p.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| EmuError::Emulator(format!("{}: bad ready file: {e}", p.display())))
}

pub fn read_status(state_dir: &Path) -> Result<StatusSnapshot, EmuError> {
    StatusSnapshot::read(&state_dir.join(STATUS_FILE))
}

fn write_json_atomic<T: Serialize>(path: &Path, v: &T) -> Result<(), EmuError> {
    let body =
        serde_json::to_vec_pretty(v).map_err(|e| EmuError::Emulator(format!("encoding: {e}")))?;
    onionmix_fsutil::write_atomic(path, body).map_err(io_err(format!("writing {}", path.display())))
}

/// Run the emulator in this process until SIGTERM/SIGINT/SIGHUP.
pub fn run_emulator(cfg: EmuConfig) -> Result<(), EmuError> {
    // Block termination signals before anything else (and before any thread
    // exists) so they arrive through the signalfd.
    let sigfd = sys::termination_signalfd().map_err(io_err("signalfd"))?;
    if cfg.exit_with_parent {
        let ppid = sys::term_with_parent().map_err(io_err("PR_SET_PDEATHSIG"))?;
        if ppid == 1 {
            return Err(EmuError::Emulator(
                "exit_with_parent is set but the parent is already gone".into(),
            ));
        }
    }
    cfg.validate()?;
    netns::check_privileges()?;
    let resolved = cfg.topology.resolve()?;
    let run_id = cfg.run_id.clone().unwrap_or_else(netns::new_run_id);
    std::fs::create_dir_all(&cfg.state_dir)
        .map_err(io_err(format!("creating {}", cfg.state_dir.display())))?;
    let ready_path = cfg.state_dir.join(READY_FILE);
    let status_path = cfg.state_dir.join(STATUS_FILE);
    let _ = std::fs::remove_file(&ready_path);
    let mut setup = NetSetup::create(
        &cfg.prefix,
        &run_id,
        &cfg.registry,
        &resolved,
        cfg.host_endpoint,
        &cfg.state_dir,
    )?;
    let mut engine = Engine::new(resolved.clone(), cfg.host_endpoint, cfg.limits);
    if cfg.create_all_links {
        engine.create_all_links();
    }
    let me = std::process::id();
    let ready = ReadyInfo {
        run_id: run_id.clone(),
        pid: me,
        pid_start: netns::pid_start_time(me).unwrap_or(0),
        prefix: cfg.prefix.clone(),
        registry: cfg.registry.clone(),
        subnet: resolved.subnet.to_string(),
        host_address: cfg.host_endpoint.then_some(resolved.host_address),
        host_interface: setup.host_interface.clone(),
        nodes: setup.nodes.clone(),
    };
    if let Err(e) = sys::set_timer_slack(1000) {
        tracing::warn!("could not set timer slack: {e}; timing will be coarser");
    }
    if cfg.realtime_priority > 0
        && let Err(e) = sys::set_realtime(cfg.realtime_priority)
    {
        tracing::warn!("could not get SCHED_FIFO: {e}; timing may suffer on a loaded machine");
    }
    let start = Instant::now();
    let status_every = cfg.status_interval_ms * 1_000_000;
    let mut lateness = Lateness::default();
    StatusSnapshot::from_engine(&engine, &run_id, 0, true, lateness).write_atomic(&status_path)?;
    write_json_atomic(&ready_path, &ready)?;
    tracing::info!(
        run = %run_id,
        nodes = resolved.nodes.len(),
        "link emulator ready"
    );
    let result = forward_loop(
        &mut engine,
        setup.tuns(),
        &sigfd,
        start,
        status_every,
        &status_path,
        &run_id,
        &mut lateness,
    );
    let uptime = start.elapsed().as_millis() as u64;
    let _ = std::fs::remove_file(&ready_path);
    let problems = setup.teardown();
    let _ = StatusSnapshot::from_engine(&engine, &run_id, uptime, false, lateness)
        .write_atomic(&status_path);
    tracing::info!(run = %run_id, "link emulator stopped");
    result?;
    if problems.is_empty() {
        Ok(())
    } else {
        Err(EmuError::Emulator(format!(
            "teardown incomplete: {}",
            problems.join("; ")
        )))
    }
}

#[allow(clippy::too_many_arguments)]
fn forward_loop(
    engine: &mut Engine,
    tuns: &[File],
    sigfd: &File,
    start: Instant,
    status_every: u64,
    status_path: &Path,
    run_id: &str,
    lateness: &mut Lateness,
) -> Result<(), EmuError> {
    let now_ns = || start.elapsed().as_nanos() as u64;
    let mut fds: Vec<sys::PollFd> = tuns.iter().map(|f| sys::pollfd(f.as_raw_fd())).collect();
    fds.push(sys::pollfd(sigfd.as_raw_fd()));
    let sig_index = fds.len() - 1;
    let mut buf = vec![0u8; 65_536];
    let mut next_status = status_every;
    const READ_BATCH: usize = 64;
    loop {
        let now = now_ns();
        while let Some(d) = engine.poll_output(now) {
            lateness.record(now.saturating_sub(d.due));
            match tuns.get(d.dst) {
                Some(mut f) => {
                    if f.write(&d.pkt).is_err() {
                        engine.note_write_error();
                    }
                }
                None => engine.note_write_error(),
            }
            engine.recycle(d.pkt);
        }
        if now >= next_status {
            let snap =
                StatusSnapshot::from_engine(engine, run_id, now / 1_000_000, true, *lateness);
            if let Err(e) = snap.write_atomic(status_path) {
                tracing::warn!("status file: {e}");
            }
            next_status = now + status_every;
        }
        let deadline = engine
            .next_deadline()
            .map_or(next_status, |d| d.min(next_status));
        let now = now_ns();
        if deadline <= now {
            // Due already: skip the sleep but still look at the descriptors.
            sys::ppoll(&mut fds, Some(Duration::ZERO)).map_err(io_err("ppoll"))?;
        } else {
            sys::ppoll(&mut fds, Some(Duration::from_nanos(deadline - now)))
                .map_err(io_err("ppoll"))?;
        }
        if fds[sig_index].revents != 0 {
            let mut sb = [0u8; 128];
            let _ = (&*sigfd).read(&mut sb);
            tracing::info!("termination signal received");
            return Ok(());
        }
        for (i, pfd) in fds.iter_mut().enumerate().take(sig_index) {
            let rev = pfd.revents;
            if rev == 0 {
                continue;
            }
            if rev & (libc::POLLERR | libc::POLLHUP | libc::POLLNVAL) != 0 {
                tracing::error!(endpoint = i, "TUN descriptor failed; no longer reading it");
                pfd.fd = -1;
                continue;
            }
            let mut f = &tuns[i];
            for _ in 0..READ_BATCH {
                match f.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let _ = engine.ingress(now_ns(), i, &buf[..n]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        tracing::warn!(endpoint = i, "TUN read: {e}");
                        break;
                    }
                }
            }
        }
    }
}

/// A running emulator process started by [`spawn`].
pub struct EmulatorHandle {
    child: Option<Child>,
    pub ready: ReadyInfo,
    pub state_dir: PathBuf,
}

/// Start `exe emulator --config <state_dir>/emulator.toml` as a detached
/// process (own process group, output to `<state_dir>/emulator.log`) and
/// wait until its network exists.
pub fn spawn(exe: &Path, cfg: &EmuConfig, timeout: Duration) -> Result<EmulatorHandle, EmuError> {
    cfg.validate()?;
    netns::check_privileges()?;
    std::fs::create_dir_all(&cfg.state_dir)
        .map_err(io_err(format!("creating {}", cfg.state_dir.display())))?;
    let cfg_path = cfg.state_dir.join(CONFIG_FILE);
    std::fs::write(&cfg_path, cfg.to_toml()?)
        .map_err(io_err(format!("writing {}", cfg_path.display())))?;
    let ready_path = cfg.state_dir.join(READY_FILE);
    let _ = std::fs::remove_file(&ready_path);
    let log_path = cfg.state_dir.join(LOG_FILE);
    let log =
        File::create(&log_path).map_err(io_err(format!("creating {}", log_path.display())))?;
    let log2 = log.try_clone().map_err(io_err("dup log"))?;
    use std::os::unix::process::CommandExt;
    let mut child = Command::new(exe)
        .arg("emulator")
        .arg("--config")
        .arg(&cfg_path)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log2)
        .process_group(0)
        .spawn()
        .map_err(io_err(format!("starting {}", exe.display())))?;
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(r) = read_ready(&cfg.state_dir) {
            return Ok(EmulatorHandle {
                child: Some(child),
                ready: r,
                state_dir: cfg.state_dir.clone(),
            });
        }
        if let Ok(Some(st)) = child.try_wait() {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(10).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(EmuError::Emulator(format!(
                "emulator exited ({st}) before it was ready: {}",
                tail.join(" | ")
            )));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            let _ = netns::cleanup_stale(&cfg.prefix, &cfg.registry);
            return Err(EmuError::Timeout(format!(
                "emulator not ready after {timeout:?} (log: {})",
                log_path.display()
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl EmulatorHandle {
    pub fn pid(&self) -> u32 {
        self.ready.pid
    }

    /// A command running `program` inside node `name`'s namespace.
    pub fn command(&self, name: &str, program: impl AsRef<std::ffi::OsStr>) -> Option<Command> {
        self.ready.command(name, program)
    }

    pub fn status(&self) -> Result<StatusSnapshot, EmuError> {
        read_status(&self.state_dir)
    }

    /// SIGTERM, wait up to `timeout`, then SIGKILL and clean up.
    pub fn stop(mut self, timeout: Duration) -> Result<(), EmuError> {
        let r = stop(&self.state_dir, timeout);
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
        r
    }
}

impl Drop for EmulatorHandle {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            if matches!(c.try_wait(), Ok(None)) {
                let _ = stop(&self.state_dir, Duration::from_secs(5));
            }
            let _ = c.wait();
        }
    }
}

/// Stop the emulator whose state directory is `state_dir` (usable from a
/// process other than the one that started it, e.g. `testnet stop`):
/// SIGTERM, wait up to `timeout` for a clean exit, else SIGKILL and remove
/// what it left. Succeeds if it was not running.
pub fn stop(state_dir: &Path, timeout: Duration) -> Result<(), EmuError> {
    let ready = match read_ready(state_dir) {
        Ok(r) => r,
        // No ready file: it exited cleanly already (it removes the file), or
        // never got ready.
        Err(_) => return Ok(()),
    };
    let alive = || netns::process_alive(ready.pid, ready.pid_start);
    if alive() {
        let _ = sys::kill(ready.pid, libc::SIGTERM);
        let deadline = Instant::now() + timeout;
        while alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        if alive() {
            tracing::warn!(pid = ready.pid, "emulator did not stop in time; killing it");
            let _ = sys::kill(ready.pid, libc::SIGKILL);
            let deadline = Instant::now() + Duration::from_secs(5);
            while alive() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    let _ = std::fs::remove_file(state_dir.join(READY_FILE));
    let rep = netns::cleanup_stale(&ready.prefix, &ready.registry)?;
    if rep.problems.is_empty() {
        Ok(())
    } else {
        Err(EmuError::Emulator(format!(
            "cleanup after stop: {}",
            rep.problems.join("; ")
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::LinkProfile;

    #[test]
    fn config_toml_round_trip() {
        let mut c = EmuConfig::new(
            "/tmp/x",
            Topology::uniform(&["a", "b"], LinkProfile::delay(20.0), 9),
        );
        c.run_id = Some("0a0b0c".into());
        let s = c.to_toml().expect("toml");
        let d = EmuConfig::from_toml(&s).expect("parse");
        assert_eq!(c, d);
        d.validate().expect("valid");
        let bad = EmuConfig {
            prefix: "Bad".into(),
            ..d
        };
        assert!(bad.validate().is_err());
    }
}
