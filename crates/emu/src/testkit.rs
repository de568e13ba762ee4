//! Helpers for tests and benchmarks that run real traffic through the
//! emulator: the root check with the project's skip/require policy, and a
//! [`TestNet`] that starts an emulator process and runs probe programs
//! inside its namespaces (`<onionmix> emulator probe ...`).

use crate::netns;
use crate::probe::{self, ChildGuard};
use crate::profile::Topology;
use crate::run::{self, EmuConfig, EmulatorHandle};
use crate::status::StatusSnapshot;
use serde::Deserialize;
use std::io;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The environment variable that turns "skip" into "fail".
pub const REQUIRE_ENV: &str = "ONIONMIX_REQUIRE_INTEROP";

/// True if the emulator can run here. Otherwise prints a skip message and
/// returns false, or panics when `ONIONMIX_REQUIRE_INTEROP=1`.
pub fn privileged_or_skip(test: &str) -> bool {
    match netns::check_privileges() {
        Ok(()) => true,
        Err(e) => {
            if std::env::var(REQUIRE_ENV).as_deref() == Ok("1") {
                panic!("{test}: {REQUIRE_ENV}=1 but the link emulator cannot run: {e}");
            }
            eprintln!(
                "SKIP {test}: the link emulator needs root (run the tests as root, e.g. `sudo -E cargo test -p onionmix --test emu_...`): {e}"
            );
            false
        }
    }
}

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

    /// Stop the emulator cleanly.
    pub fn stop(self) -> Result<(), crate::EmuError> {
        self.handle.stop(Duration::from_secs(10))
    }
}

/// Shorthand for building probe argument lists.
pub fn args(v: &[&dyn std::fmt::Display]) -> Vec<String> {
    v.iter().map(|a| a.to_string()).collect()
}
