//! A running network: stop, detach, restart a stock node; the guard that stops it on drop.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use super::libfaketime;
use crate::netinfo::NetworkInfo;
use crate::proc;
use crate::spec::Implementation;

/// A running network. Dropping it stops only the link emulator (if any);
/// use [`Network::stop`], [`Network::detach`] or [`NetworkGuard`].
pub struct Network {
    /// What is running.
    pub info: NetworkInfo,
    pub(super) children: Vec<Child>,
    pub(super) emu: Option<onionmix_emu::run::EmulatorHandle>,
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
