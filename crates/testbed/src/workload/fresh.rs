//! `access`'s fresh-client measurement: start a new client process and time its first fetch.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use onionmix_measure::record::Record;

use super::{Endpoint, WorkloadConfig, fetch, ms, record};

/// A fresh client like the measured one: same network configuration, new
/// data directory (no cached directory, no guards) and SOCKS port.
#[derive(Debug, Clone)]
pub enum FreshClient {
    /// `onionmix client --config`, from the measured client's config.
    Onionmix {
        /// The onionmix binary.
        bin: PathBuf,
        /// The measured client's `client.toml`.
        config: PathBuf,
        /// Where fresh clients' data directories go.
        work_dir: PathBuf,
        /// Run it where the measured client runs (emulated networks).
        place: Option<FreshPlace>,
    },
    /// Stock `tor -f`, from the measured client's torrc.
    Tor {
        /// The tor binary.
        bin: PathBuf,
        /// The measured client's `torrc`.
        torrc: PathBuf,
        /// Where fresh clients' data directories go.
        work_dir: PathBuf,
        /// Run it where the measured client runs (emulated networks).
        place: Option<FreshPlace>,
    },
}

/// The measured client's network namespace and address: a fresh client
/// started there reaches the network over the same emulated link.
#[derive(Debug, Clone)]
pub struct FreshPlace {
    /// Namespace name (`ip netns exec`).
    pub namespace: String,
    /// The client's address in it (the fresh SOCKS port listens there).
    pub address: std::net::IpAddr,
}

/// A started fresh client, killed (by its pid) and its data removed on drop.
struct Fresh {
    child: std::process::Child,
    data: PathBuf,
    socks: SocketAddr,
}

impl Drop for Fresh {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

fn start_fresh(f: &FreshClient, run: u32) -> Result<Fresh, String> {
    let port = crate::proc::free_port("127.0.0.1").map_err(|e| e.to_string())?;
    let (work_dir, place) = match f {
        FreshClient::Onionmix {
            work_dir, place, ..
        }
        | FreshClient::Tor {
            work_dir, place, ..
        } => (work_dir, place.as_ref()),
    };
    // In the measured client's namespace, its address (nothing else
    // listens on it but that client's own ports); otherwise loopback.
    let socks = match place {
        Some(p) => SocketAddr::new(p.address, port),
        None => SocketAddr::from(([127, 0, 0, 1], port)),
    };
    let tag = format!("fresh-{run}-{port}");
    let program = |bin: &PathBuf| match place {
        Some(p) => onionmix_emu::netns::command_in(&p.namespace, bin),
        None => std::process::Command::new(bin),
    };
    let data = work_dir.join(tag);
    std::fs::create_dir_all(&data).map_err(|e| e.to_string())?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700));
    }
    let cmd = match f {
        FreshClient::Onionmix { bin, config, .. } => {
            let base = std::fs::read_to_string(config).map_err(|e| e.to_string())?;
            let mut cfg = format!(
                "data_dir = {:?}\nsocks_listen = \"{socks}\"\n",
                data.display().to_string()
            );
            // The running client holds the control and metrics ports;
            // the fresh one runs without them.
            for l in base.lines() {
                if ![
                    "data_dir",
                    "socks_listen",
                    "control_port",
                    "control_socket",
                    "metrics_port",
                ]
                .iter()
                .any(|k| l.starts_with(k))
                {
                    cfg.push_str(l);
                    cfg.push('\n');
                }
            }
            let path = data.join("client.toml");
            std::fs::write(&path, cfg).map_err(|e| e.to_string())?;
            let mut c = program(bin);
            c.arg("client").arg("--config").arg(path);
            c
        }
        FreshClient::Tor { bin, torrc, .. } => {
            let base = std::fs::read_to_string(torrc).map_err(|e| e.to_string())?;
            let mut t = String::new();
            for l in base.lines() {
                if !l.starts_with("DataDirectory")
                    && !l.starts_with("SocksPort")
                    && !l.starts_with("Nickname")
                    && !l.starts_with("ControlPort")
                {
                    t.push_str(l);
                    t.push('\n');
                }
            }
            t.push_str(&format!(
                "DataDirectory {}\nSocksPort {socks}\n",
                data.display()
            ));
            let path = data.join("torrc");
            std::fs::write(&path, t).map_err(|e| e.to_string())?;
            let mut c = program(bin);
            c.arg("-f").arg(path);
            c
        }
    };
    let child = crate::proc::spawn(cmd, &data.join("client.log")).map_err(|e| e.to_string())?;
    Ok(Fresh { child, data, socks })
}

/// Start a fresh client and time spawn -> first byte of a 1000-byte fetch
/// (bootstrap, first circuit and the fetch; retried until `timeout`).
pub(super) async fn fresh_client_access(
    cfg: &WorkloadConfig,
    ep: &Endpoint,
    f: &FreshClient,
    run: u32,
    timeout: Duration,
) -> Record {
    let mut r = record(cfg, ep, run, "fresh-client", Some(1000));
    let t0 = Instant::now();
    let fresh = match start_fresh(f, run) {
        Ok(x) => x,
        Err(e) => {
            r.error = Some(format!("cannot start a fresh client: {e}"));
            return r;
        }
    };
    let probe = Endpoint {
        socks: fresh.socks,
        fresh: None,
        ..ep.clone()
    };
    loop {
        let left = timeout.saturating_sub(t0.elapsed());
        if left.is_zero() {
            r.error = Some("timeout".into());
            break;
        }
        let mut attempt = record(cfg, ep, run, "fresh-client", Some(1000));
        fetch(
            &probe,
            None,
            1000,
            0,
            cfg.optimistic_socks,
            left.min(Duration::from_secs(20)),
            &mut attempt,
        )
        .await;
        if attempt.ok() {
            r.metrics.insert("ttfb_ms".into(), ms(t0.elapsed()));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(fresh);
    r
}
