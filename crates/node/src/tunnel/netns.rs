//! A fresh network namespace per `onionmix tunnel --exec` run.
//!
//! The namespace is created with `ip netns add` under a unique name and
//! removed when the [`Namespace`] is dropped, also on error paths and
//! panics. Its resolv.conf lives in `/etc/netns/<name>/resolv.conf`, which
//! `ip netns exec` bind-mounts over /etc/resolv.conf for the command; the
//! directory is removed with the namespace. A new namespace has only `lo`
//! (down): whatever is moved into it (the TUN device) is its only way out,
//! which is what makes the tunnel fail closed.

use super::{SysError, check_name, ip};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

static NEXT: AtomicU32 = AtomicU32::new(0);

/// A network namespace owned by this process; deleted on drop.
#[derive(Debug)]
pub struct Namespace {
    name: String,
}

impl Namespace {
    /// Create a namespace named `omx<pid>-<n>` (unique per process and
    /// call) and bring its `lo` up.
    pub fn create() -> Result<Self, SysError> {
        Self::create_named(None)
    }

    /// Create a namespace named `name` (1-15 of `[A-Za-z0-9_-]`; it must
    /// not exist), or `omx<pid>-<n>` with `None`, and bring its `lo` up.
    pub fn create_named(name: Option<&str>) -> Result<Self, SysError> {
        if !super::is_root() {
            return Err(SysError::NotRoot);
        }
        let name = match name {
            Some(n) => n.to_string(),
            None => {
                let n = NEXT.fetch_add(1, Ordering::Relaxed);
                format!("omx{}-{n}", std::process::id())
            }
        };
        check_name(&name)?;
        ip(&["netns", "add", &name])?;
        // From here on, Drop cleans up.
        let ns = Namespace { name };
        ns.exec_ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    /// The namespace's name (as `ip netns` knows it).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Run `ip <args>` inside the namespace.
    pub fn exec_ip(&self, args: &[&str]) -> Result<(), SysError> {
        let mut all = vec!["-n", self.name.as_str()];
        all.extend_from_slice(args);
        ip(&all)
    }

    fn etc_dir(&self) -> PathBuf {
        PathBuf::from("/etc/netns").join(&self.name)
    }

    /// Write the namespace's resolv.conf: `nameserver <resolver>` only.
    pub fn write_resolv_conf(&self, resolver: IpAddr) -> Result<(), SysError> {
        let dir = self.etc_dir();
        std::fs::create_dir_all(&dir)?;
        std::fs::write(
            dir.join("resolv.conf"),
            format!(
                "# written by onionmix tunnel\nnameserver {resolver}\noptions attempts:2 timeout:5\n"
            ),
        )?;
        Ok(())
    }

    /// A command that runs `program args...` inside the namespace
    /// (`ip netns exec`), for the caller to spawn and wait on.
    pub fn command<S: AsRef<std::ffi::OsStr>>(
        &self,
        program: &str,
        args: &[S],
    ) -> tokio::process::Command {
        let mut c = tokio::process::Command::new("ip");
        c.arg("netns").arg("exec").arg(&self.name).arg(program);
        c.args(args);
        c
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name]) {
            tracing::warn!(ns = %self.name, error = %e, "could not delete network namespace");
        }
        let dir = self.etc_dir();
        if dir.exists()
            && let Err(e) = std::fs::remove_dir_all(&dir)
        {
            tracing::warn!(dir = %dir.display(), error = %e, "could not remove namespace config");
        }
    }
}

/// Whether a namespace of that name exists (`/run/netns/<name>`).
pub fn exists(name: &str) -> bool {
    PathBuf::from("/run/netns").join(name).exists()
}
