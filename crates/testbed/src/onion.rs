//! The `onion-service` node role: a v3 onion service whose virtual ports
//! lead to the sink (HTTP on [`HTTP_PORT`], echo on [`ECHO_PORT`]), run by
//! stock tor (`HiddenServiceDir` + `HiddenServicePort`) or by onionmix
//! (`onionmix onion-service` with an `[[onion_service]]` block); its
//! address and ports in `network.json`'s `onion_services`; and the
//! readiness check that every client reached every service once.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::netinfo::{NodeInfo, OnionServiceInfo};

/// The virtual port of the sink's HTTP server.
pub const HTTP_PORT: u16 = 80;
/// The virtual port of the sink's echo server.
pub const ECHO_PORT: u16 = 7;

/// The service's key directory inside the node's data directory.
pub fn service_dir(data_dir: &Path) -> PathBuf {
    data_dir.join("hs")
}

/// torrc lines for a stock tor onion service (before the spec's own lines,
/// which may add per-service options such as
/// `HiddenServicePoWDefensesEnabled 1`).
pub fn torrc_lines(data_dir: &Path, sink_http: SocketAddr, sink_echo: SocketAddr) -> Vec<String> {
    vec![
        format!("HiddenServiceDir {}", service_dir(data_dir).display()),
        format!("HiddenServicePort {HTTP_PORT} {sink_http}"),
        format!("HiddenServicePort {ECHO_PORT} {sink_echo}"),
    ]
}

/// The `[[onion_service]]` block of an onionmix service; the spec's
/// `config` lines go inside it (service options such as
/// `pow_defenses = true`).
pub fn onionmix_block(
    data_dir: &Path,
    sink_http: SocketAddr,
    sink_echo: SocketAddr,
    extra: &[String],
) -> String {
    let mut s = format!(
        "\n[[onion_service]]\ndir = {:?}\nports = [\"{HTTP_PORT} {sink_http}\", \"{ECHO_PORT} {sink_echo}\"]\n",
        service_dir(data_dir).display().to_string()
    );
    for l in extra {
        s.push_str(l);
        s.push('\n');
    }
    s
}

/// Read the service's address from its `hostname` file (tor and onionmix
/// both write it at start), waiting up to `limit`.
pub fn read_address(data_dir: &Path, limit: Duration) -> Option<String> {
    let path = service_dir(data_dir).join("hostname");
    let t0 = Instant::now();
    loop {
        if let Ok(t) = std::fs::read_to_string(&path) {
            let a = t.trim();
            if a.len() == 62 && a.ends_with(".onion") {
                return Some(a.to_string());
            }
        }
        if t0.elapsed() > limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `onion_services` entry of a started service node.
pub fn info(node: &NodeInfo, limit: Duration) -> Result<OnionServiceInfo, String> {
    let address = read_address(&node.data_dir, limit).ok_or_else(|| {
        format!(
            "{} wrote no hostname file in {}",
            node.name,
            service_dir(&node.data_dir).display()
        )
    })?;
    Ok(OnionServiceInfo {
        name: node.name.clone(),
        implementation: node.implementation,
        address,
        http_port: HTTP_PORT,
        echo_port: ECHO_PORT,
        pid: node.pid,
    })
}

/// One SOCKS5 CONNECT by name to `host:port` through `socks`, a probe sent
/// and expected back (blocking). Returns the SOCKS reply code on refusal.
pub fn echo_by_name(socks: SocketAddr, host: &str, port: u16, limit: Duration) -> Result<(), u8> {
    let attempt = || -> std::io::Result<Result<(), u8>> {
        let mut s = TcpStream::connect_timeout(&socks, Duration::from_secs(2))?;
        s.set_read_timeout(Some(limit))?;
        s.set_write_timeout(Some(Duration::from_secs(10)))?;
        s.write_all(&[5, 1, 0])?;
        let mut r = [0u8; 2];
        s.read_exact(&mut r)?;
        if r != [5, 0] {
            return Ok(Err(1));
        }
        let name = host.as_bytes();
        let Ok(len) = u8::try_from(name.len()) else {
            return Ok(Err(1));
        };
        let mut req = vec![5, 1, 0, 3, len];
        req.extend_from_slice(name);
        req.extend_from_slice(&port.to_be_bytes());
        s.write_all(&req)?;
        let mut head = [0u8; 4];
        s.read_exact(&mut head)?;
        if head[1] != 0 {
            return Ok(Err(head[1]));
        }
        let rest = match head[3] {
            1 => 6,
            4 => 18,
            3 => {
                let mut n = [0u8; 1];
                s.read_exact(&mut n)?;
                usize::from(n[0]) + 2
            }
            _ => return Ok(Err(1)),
        };
        let mut skip = vec![0u8; rest];
        s.read_exact(&mut skip)?;
        s.write_all(b"onionmix-onion-ready")?;
        let mut back = [0u8; 20];
        s.read_exact(&mut back)?;
        Ok(if &back == b"onionmix-onion-ready" {
            Ok(())
        } else {
            Err(1)
        })
    };
    attempt().unwrap_or(Err(1))
}

/// Readiness of onion services: which (client, service) pairs have
/// carried an echo round trip. Probes run in threads, one at a time per
/// pair, so a client that keeps a request pending (stock tor waits for a
/// descriptor it cannot find yet) does not hold up the others.
#[derive(Debug)]
pub struct OnionWait {
    pairs: Vec<(SocketAddr, String, String, String)>,
    done: Vec<bool>,
    inflight: Vec<Option<std::thread::JoinHandle<bool>>>,
    last_try: Vec<Option<Instant>>,
}

/// Time one probe may take.
const PROBE_TIMEOUT: Duration = Duration::from_secs(60);
/// Pause between probes of one pair.
const PROBE_INTERVAL: Duration = Duration::from_secs(2);

impl OnionWait {
    /// Every client against every service.
    pub fn new(clients: &[&NodeInfo], services: &[OnionServiceInfo]) -> Self {
        let mut pairs = Vec::new();
        for c in clients {
            let Some(socks) = c.socks_addr() else {
                continue;
            };
            for s in services {
                pairs.push((socks, s.address.clone(), c.name.clone(), s.name.clone()));
            }
        }
        let n = pairs.len();
        Self {
            pairs,
            done: vec![false; n],
            inflight: (0..n).map(|_| None).collect(),
            last_try: vec![None; n],
        }
    }

    /// Whether every pair worked.
    pub fn done(&self) -> bool {
        self.done.iter().all(|d| *d)
    }

    /// (worked, total).
    pub fn progress(&self) -> (usize, usize) {
        (self.done.iter().filter(|d| **d).count(), self.done.len())
    }

    /// The first pair still failing, as `client -> service`.
    pub fn first_missing(&self) -> Option<String> {
        self.pairs
            .iter()
            .zip(&self.done)
            .find(|(_, d)| !**d)
            .map(|((_, _, c, s), _)| format!("{c} -> {s}"))
    }

    /// Collect finished probes and start new ones for pairs not yet done.
    pub fn poll(&mut self) {
        for i in 0..self.pairs.len() {
            if self.done[i] {
                continue;
            }
            if let Some(h) = self.inflight[i].take() {
                if !h.is_finished() {
                    self.inflight[i] = Some(h);
                    continue;
                }
                if h.join().unwrap_or(false) {
                    self.done[i] = true;
                    continue;
                }
            }
            if self.last_try[i].is_some_and(|t| t.elapsed() < PROBE_INTERVAL) {
                continue;
            }
            let (socks, addr, _, _) = self.pairs[i].clone();
            self.last_try[i] = Some(Instant::now());
            self.inflight[i] = Some(std::thread::spawn(move || {
                echo_by_name(socks, &addr, ECHO_PORT, PROBE_TIMEOUT).is_ok()
            }));
        }
    }
}

/// Processes started next to a running network (extra services and
/// clients in tests): stopped by pid and start time when dropped.
#[derive(Debug, Default)]
pub struct ExtraProcs {
    procs: Vec<(String, std::process::Child, u64)>,
}

impl ExtraProcs {
    /// Start `cmd` with its output in `log`; returns the pid.
    pub fn spawn(
        &mut self,
        name: &str,
        cmd: std::process::Command,
        log: &Path,
    ) -> std::io::Result<u32> {
        let child = crate::proc::spawn(cmd, log)?;
        let pid = child.id();
        let st = crate::proc::start_time(pid).unwrap_or(0);
        self.procs.push((name.to_string(), child, st));
        Ok(pid)
    }

    /// Stop the process started as `name` (true if it is gone).
    pub fn stop(&mut self, name: &str) -> bool {
        let mut ok = true;
        self.procs.retain_mut(|(n, child, st)| {
            if n == name {
                ok &= crate::proc::stop(child.id(), *st, Duration::from_secs(10));
                let _ = child.try_wait();
                false
            } else {
                true
            }
        });
        ok
    }
}

impl Drop for ExtraProcs {
    fn drop(&mut self) {
        for (_, mut child, st) in self.procs.drain(..) {
            crate::proc::stop(child.id(), st, Duration::from_secs(10));
            let _ = child.try_wait();
        }
    }
}

/// A torrc for an extra stock tor process in the network `info`: a
/// client when `socks` is given, otherwise (no SOCKS port) a process for
/// onion services, which `extra` configures.
pub fn tor_torrc(
    info: &crate::netinfo::NetworkInfo,
    nick: &str,
    data_dir: &Path,
    socks: Option<u16>,
    extra: &[String],
) -> String {
    use crate::spec::Role;
    let dirauths: Vec<String> = info
        .nodes
        .iter()
        .filter(|n| n.has_role(Role::Authority))
        .map(crate::torrc::dirauthority_line_of)
        .collect();
    let addr = info
        .nodes
        .first()
        .map(|n| n.address.clone())
        .unwrap_or_else(|| "127.0.0.1".into());
    crate::torrc::render(&crate::torrc::TorNode {
        nick,
        role: if socks.is_some() {
            Role::Client
        } else {
            Role::OnionService
        },
        data_dir,
        addr: &addr,
        or_port: None,
        dir_port: None,
        socks_port: socks,
        control_port: None,
        resolv_conf: None,
        dirauths: &dirauths,
        extra,
        // Only authorities use it.
        voting: (0, 0, 0),
    })
}

/// A configuration for an extra onionmix process (client or onion
/// service) in the network `info`: `top` lines, the authorities, then
/// `tail` (e.g. an `[[onion_service]]` block).
pub fn onionmix_config(
    info: &crate::netinfo::NetworkInfo,
    data_dir: &Path,
    top: &[String],
    tail: &str,
) -> String {
    use crate::spec::Role;
    let mut s = format!(
        "data_dir = {:?}\ntesting_network = true\npaths_needed_to_build_circuits = 0.67\n",
        data_dir.display().to_string()
    );
    for l in top {
        s.push_str(l);
        s.push('\n');
    }
    for a in info.nodes.iter().filter(|n| n.has_role(Role::Authority)) {
        s.push_str(&format!(
            "\n[[authority]]\nnickname = {:?}\nv3ident = {:?}\nfingerprint = {:?}\ndir_addr = \"{}:{}\"\nor_addr = \"{}:{}\"\n",
            a.name,
            a.v3ident.as_deref().unwrap_or(""),
            a.fingerprint.as_deref().unwrap_or(""),
            a.address,
            a.dir_port.unwrap_or(0),
            a.address,
            a.or_port.unwrap_or(0),
        ));
    }
    s.push_str(tail);
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_lines() {
        let http: SocketAddr = "127.0.0.1:8080".parse().expect("a");
        let echo: SocketAddr = "127.0.0.1:7007".parse().expect("a");
        let l = torrc_lines(Path::new("/d"), http, echo);
        assert_eq!(l[0], "HiddenServiceDir /d/hs");
        assert_eq!(l[1], "HiddenServicePort 80 127.0.0.1:8080");
        assert_eq!(l[2], "HiddenServicePort 7 127.0.0.1:7007");
        let b = onionmix_block(Path::new("/d"), http, echo, &["pow_defenses = true".into()]);
        assert!(b.contains("[[onion_service]]\ndir = \"/d/hs\""));
        assert!(b.contains("ports = [\"80 127.0.0.1:8080\", \"7 127.0.0.1:7007\"]"));
        assert!(b.ends_with("pow_defenses = true\n"));
    }
}
