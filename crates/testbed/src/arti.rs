//! Arti (the Tor Project's Rust client, `cargo install arti`) as a client
//! of a running test network: its configuration (the network's
//! authorities, fallback directory caches taken from the authorities'
//! descriptors, path rules that allow one host), and a process handle that
//! stops exactly the `arti` it started.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::launcher::http_get_plain;
use crate::netinfo::NetworkInfo;
use crate::spec::Role;

/// The Arti release the interop tests are written against.
pub const ARTI_VERSION: &str = "2.7.0";
/// How to install it.
pub const ARTI_INSTALL: &str = "cargo install arti --version 2.7.0 --locked";

/// Whether `arti` is installed (and which version).
pub fn arti_check() -> Result<String, String> {
    let out = Command::new("arti").arg("--version").output();
    match out {
        Ok(o) if o.status.success() => {
            let v = String::from_utf8_lossy(&o.stdout);
            Ok(v.lines().next().unwrap_or("").trim().to_string())
        }
        _ => Err(format!(
            "Arti (`arti`) is not installed; install it with: {ARTI_INSTALL}"
        )),
    }
}

/// One fallback directory cache for Arti's configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fallback {
    /// RSA identity, 40 hex digits.
    pub rsa_identity: String,
    /// Ed25519 identity, unpadded base64.
    pub ed_identity: String,
    /// `IP:ORPort`.
    pub orport: String,
}

/// The fallbacks in a `/tor/server/all` answer: every descriptor that
/// names its ORPort, RSA fingerprint and Ed25519 master key and advertises
/// `tunnelled-dir-server`.
pub fn fallbacks_from_descriptors(text: &str) -> Vec<Fallback> {
    let mut out = Vec::new();
    let mut cur: Option<(String, Option<String>, Option<String>, bool)> = None;
    let mut finish = |c: Option<(String, Option<String>, Option<String>, bool)>| {
        if let Some((orport, Some(rsa), Some(ed), true)) = c {
            out.push(Fallback {
                rsa_identity: rsa,
                ed_identity: ed,
                orport,
            });
        }
    };
    for line in text.lines() {
        let mut w = line.split_whitespace();
        match w.next() {
            Some("router") => {
                finish(cur.take());
                let (_, ip, port) = (w.next(), w.next(), w.next());
                if let (Some(ip), Some(port)) = (ip, port) {
                    cur = Some((format!("{ip}:{port}"), None, None, false));
                }
            }
            Some("fingerprint") => {
                let fp: String = w.collect();
                if let Some(c) = cur.as_mut()
                    && fp.len() == 40
                    && fp.bytes().all(|b| b.is_ascii_hexdigit())
                {
                    c.1 = Some(fp.to_ascii_uppercase());
                }
            }
            Some("master-key-ed25519") => {
                if let (Some(c), Some(k)) = (cur.as_mut(), w.next()) {
                    c.2 = Some(k.trim_end_matches('=').to_string());
                }
            }
            Some("tunnelled-dir-server") => {
                if let Some(c) = cur.as_mut() {
                    c.3 = true;
                }
            }
            _ => {}
        }
    }
    finish(cur.take());
    out
}

/// Arti's configuration for `info`'s network, with a SOCKS port, state and
/// cache under `dir`.
pub fn config(info: &NetworkInfo, socks: SocketAddr, dir: &Path) -> Result<String, String> {
    let auths: Vec<_> = info
        .nodes
        .iter()
        .filter(|n| n.has_role(Role::Authority))
        .collect();
    let v3idents: Vec<String> = auths.iter().filter_map(|a| a.v3ident.clone()).collect();
    if v3idents.is_empty() {
        return Err("the network has no authority with a v3 identity".into());
    }
    let descs = auths
        .iter()
        .filter_map(|a| a.dir_addr())
        .find_map(|d| http_get_plain(d, "/tor/server/all"))
        .ok_or("no authority answered /tor/server/all")?;
    let fallbacks = fallbacks_from_descriptors(&descs);
    if fallbacks.is_empty() {
        return Err("no directory cache among the authorities' descriptors".into());
    }
    let q = |s: &str| format!("{s:?}");
    let mut c = String::new();
    let _ = writeln!(c, "[proxy]\nsocks_listen = {}\n", q(&socks.to_string()));
    let _ = writeln!(
        c,
        "[storage]\ncache_dir = {}\nstate_dir = {}\n\n[storage.permissions]\ndangerously_trust_everyone = true\n",
        q(&dir.join("cache").display().to_string()),
        q(&dir.join("state").display().to_string())
    );
    // Every relay of a test network shares 127.0.0.1: no subnet families.
    let _ = writeln!(
        c,
        "[path_rules]\nipv4_subnet_family_prefix = 33\nipv6_subnet_family_prefix = 129\n"
    );
    let _ = writeln!(c, "[address_filter]\nallow_local_addrs = true\n");
    let _ = writeln!(c, "[logging]\nconsole = \"info\"\n");
    // CI runs as root; Arti refuses that unless told.
    let _ = writeln!(c, "[application]\nallow_running_as_root = true\n");
    let _ = writeln!(c, "[tor_network]\nfallback_caches = [");
    for f in &fallbacks {
        let _ = writeln!(
            c,
            "  {{ rsa_identity = {}, ed_identity = {}, orports = [{}] }},",
            q(&f.rsa_identity),
            q(&f.ed_identity),
            q(&f.orport)
        );
    }
    let _ = writeln!(c, "]\n\n[tor_network.authorities]\nv3idents = [");
    for v in &v3idents {
        let _ = writeln!(c, "  {},", q(v));
    }
    let _ = writeln!(c, "]");
    Ok(c)
}

/// A running `arti proxy`, stopped (by pid) when dropped.
pub struct ArtiClient {
    pid: u32,
    start_time: u64,
    /// Its SOCKS address.
    pub socks: SocketAddr,
    /// Its log (stdout and stderr).
    pub log: PathBuf,
}

impl ArtiClient {
    /// Write the configuration under `dir` and start `arti proxy`.
    pub fn start(info: &NetworkInfo, dir: &Path) -> Result<ArtiClient, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let port = onionmix_testsupport::ports::free_port("127.0.0.1")
            .map_err(|e| format!("no free port: {e}"))?;
        let socks: SocketAddr = SocketAddr::from(([127, 0, 0, 1], port));
        let cfg = config(info, socks, dir)?;
        let cfg_path = dir.join("arti.toml");
        onionmix_fsutil::write_atomic(&cfg_path, cfg)
            .map_err(|e| format!("{}: {e}", cfg_path.display()))?;
        let log = dir.join("arti.log");
        let mut cmd = Command::new("arti");
        cmd.arg("proxy").arg("-c").arg(&cfg_path);
        let child = crate::proc::spawn(cmd, &log).map_err(|e| format!("starting arti: {e}"))?;
        let pid = child.id();
        let start_time = crate::proc::start_time(pid).unwrap_or(0);
        Ok(ArtiClient {
            pid,
            start_time,
            socks,
            log,
        })
    }

    /// Wait until Arti says it is bootstrapped enough to build circuits.
    pub fn wait_bootstrapped(&self, limit: Duration) -> Result<Duration, String> {
        let t0 = Instant::now();
        while t0.elapsed() < limit {
            if !crate::proc::alive(self.pid, self.start_time) {
                return Err(format!(
                    "arti exited:\n{}",
                    crate::proc::tail(&self.log, 30)
                ));
            }
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains("Sufficiently bootstrapped") {
                return Ok(t0.elapsed());
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        Err(format!(
            "arti not bootstrapped after {limit:?}:\n{}",
            crate::proc::tail(&self.log, 30)
        ))
    }
}

impl Drop for ArtiClient {
    fn drop(&mut self) {
        crate::proc::stop(self.pid, self.start_time, Duration::from_secs(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallbacks_need_both_identities_and_a_dir_cache() {
        let text = "router a 127.0.0.1 5001 0 0\n\
                    master-key-ed25519 AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA\n\
                    fingerprint ABCD ABCD ABCD ABCD ABCD ABCD ABCD ABCD ABCD ABCD\n\
                    tunnelled-dir-server\n\
                    router b 127.0.0.1 5002 0 0\n\
                    fingerprint ABCD ABCD ABCD ABCD ABCD ABCD ABCD ABCD ABCD ABCE\n\
                    tunnelled-dir-server\n\
                    router c 127.0.0.1 5003 0 0\n\
                    master-key-ed25519 BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB\n\
                    fingerprint ABCD ABCD ABCD ABCD ABCD ABCD ABCD ABCD ABCD ABCF\n";
        assert_eq!(
            fallbacks_from_descriptors(text),
            vec![Fallback {
                rsa_identity: "ABCD".repeat(10),
                ed_identity: "A".repeat(43),
                orport: "127.0.0.1:5001".into(),
            }]
        );
    }
}
