//! Drivers of the transparent tunnel (`onionmix tunnel`, issue 16).
//!
//! The sans-IO core (`onionmix-tunnel`) decides what to do with each IP
//! packet; this module owns the operating-system side: the per-program
//! network namespace ([`netns`]), the TUN device inside it ([`dev`]),
//! and the packet loop ([`driver`]: TUN -> core -> user-space TCP, fallback
//! DNS and UDP streams -> an [`driver::Upstream`]).

pub mod dev;
pub mod driver;
pub mod netns;
pub mod procnet;

use std::net::{Ipv4Addr, Ipv6Addr};

/// The namespace's own IPv4 address (on the TUN device).
pub const APP_V4: Ipv4Addr = Ipv4Addr::new(10, 255, 0, 1);
/// The namespace's own IPv6 address (a ULA outside the synthetic /64).
pub const APP_V6: Ipv6Addr = Ipv6Addr::new(0xfd6f, 0x6e69, 0x6f6e, 0x7400, 0, 0, 0, 1);
/// The tunnel resolver's IPv6 address (in the default synthetic /64,
/// reserved there).
pub const RESOLVER_V6: Ipv6Addr = Ipv6Addr::new(0xfd6f, 0x6e69, 0x6f6e, 0x7475, 0, 0, 0, 1);

/// Errors of the tunnel drivers' system plumbing.
#[derive(Debug, thiserror::Error)]
pub enum SysError {
    /// Creating namespaces and TUN devices needs root (CAP_NET_ADMIN and
    /// CAP_SYS_ADMIN).
    #[error(
        "onionmix tunnel needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN) to create a network namespace and a TUN device"
    )]
    NotRoot,
    /// A helper program (`ip`) could not be started.
    #[error("cannot run {program}: {source}")]
    Spawn {
        /// The program.
        program: String,
        /// Why.
        source: std::io::Error,
    },
    /// A helper command failed.
    #[error("`{command}` failed: {stderr}")]
    Command {
        /// The command line.
        command: String,
        /// What it printed on stderr.
        stderr: String,
    },
    /// An invalid name (interface or namespace).
    #[error("invalid name {0:?}")]
    Name(String),
    /// Any other I/O error.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Whether this process runs as root (effective uid 0).
pub fn is_root() -> bool {
    // /proc/self/status "Uid:" has real, effective, saved, fs uids.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// Run `ip` with `args`, turning a non-zero exit into [`SysError::Command`].
pub(crate) fn ip(args: &[&str]) -> Result<(), SysError> {
    let out = std::process::Command::new("ip")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|source| SysError::Spawn {
            program: "ip".into(),
            source,
        })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(SysError::Command {
            command: format!("ip {}", args.join(" ")),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

/// Check an interface or namespace name: 1..=15 bytes of `[A-Za-z0-9_-]`.
pub(crate) fn check_name(name: &str) -> Result<(), SysError> {
    let ok = !name.is_empty()
        && name.len() <= 15
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(())
    } else {
        Err(SysError::Name(name.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(check_name("omx-1-2").is_ok());
        assert!(check_name("").is_err());
        assert!(check_name("a-name-longer-than-15").is_err());
        assert!(check_name("bad/name").is_err());
        assert!(check_name("bad name").is_err());
    }
}
