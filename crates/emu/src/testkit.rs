//! Helpers for tests and benchmarks that run real traffic through the
//! emulator: a [`TestNet`] that starts an emulator process and runs probe programs
//! inside its namespaces (`<onionmix> emulator probe ...`).

use crate::probe::{self, ChildGuard};
use crate::profile::Topology;
use crate::run::{self, EmuConfig, EmulatorHandle};
use crate::status::StatusSnapshot;
use serde::Deserialize;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A running emulator plus the binary that provides the probe programs.
pub struct TestNet {
    pub handle: EmulatorHandle,
    exe: PathBuf,
}

impl TestNet {
    /// Start `exe emulator` with `topology`, state in `state_dir`.
    pub fn start(
        exe: &Path,
        state_dir: &Path,
        topology: Topology,
    ) -> Result<Self, crate::EmuError> {
        Self::start_with(exe, EmuConfig::new(state_dir, topology))
    }

    /// Start with a full config. `exit_with_parent` is forced on, so even a
    /// test process killed with SIGKILL leaves nothing behind.
    pub fn start_with(exe: &Path, mut cfg: EmuConfig) -> Result<Self, crate::EmuError> {
        cfg.exit_with_parent = true;
        let handle = run::spawn(exe, &cfg, Duration::from_secs(30))?;
        Ok(TestNet {
            handle,
            exe: exe.to_path_buf(),
        })
    }

    /// Address of node `name` (panics on an unknown node: test bug).
    pub fn addr(&self, name: &str) -> Ipv4Addr {
        match self.handle.ready.node(name) {
            Some(n) => n.address,
            None => panic!("test uses unknown node {name}"),
        }
    }

    pub fn sock(&self, name: &str, port: u16) -> SocketAddr {
        SocketAddr::new(self.addr(name).into(), port)
    }

    /// Spawn `exe emulator probe <args>` inside node `name`.
    pub fn spawn_probe(&self, name: &str, args: &[String]) -> io::Result<ChildGuard> {
        let mut c = self
            .handle
            .command(name, &self.exe)
            .ok_or_else(|| io::Error::other(format!("unknown node {name}")))?;
        c.arg("emulator").arg("probe").args(args);
        ChildGuard::spawn(
            c,
            format!(
                "probe {} in {name}",
                args.first().cloned().unwrap_or_default()
            ),
        )
    }

    /// Spawn a server probe and wait for its READY line.
    pub fn server(&self, name: &str, args: &[String]) -> io::Result<ChildGuard> {
        let mut g = self.spawn_probe(name, args)?;
        g.wait_ready(Duration::from_secs(15))?;
        Ok(g)
    }

    /// Run a client probe to completion and parse its JSON result.
    pub fn client<T: for<'de> Deserialize<'de>>(
        &self,
        name: &str,
        args: &[String],
        timeout: Duration,
    ) -> io::Result<T> {
        let out = self.spawn_probe(name, args)?.finish(timeout)?;
        probe::last_json(&out)
    }

    /// The status file, after waiting `settle` for the next rewrite.
    pub fn status(&self, settle: Duration) -> Result<StatusSnapshot, crate::EmuError> {
        std::thread::sleep(settle);
        self.handle.status()
    }

    /// Poll the status file until `pred` holds (the emulator rewrites it
    /// every `status_interval_ms`), or give the last snapshot after
    /// `timeout`. Tests wait for the counters they check instead of
    /// sleeping a fixed time.
    pub fn status_until(
        &self,
        timeout: Duration,
        mut pred: impl FnMut(&StatusSnapshot) -> bool,
    ) -> Result<StatusSnapshot, crate::EmuError> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let st = self.handle.status()?;
            if pred(&st) || std::time::Instant::now() >= deadline {
                return Ok(st);
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stop the emulator cleanly.
    pub fn stop(self) -> Result<(), crate::EmuError> {
        self.handle.stop(Duration::from_secs(10))
    }
}

/// Shorthand for building probe argument lists.
pub fn args(v: &[&dyn std::fmt::Display]) -> Vec<String> {
    v.iter().map(|a| a.to_string()).collect()
}
