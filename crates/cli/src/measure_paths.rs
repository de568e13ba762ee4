//! `onionmix measure` with the workload's `paths` and `hops`
//! (docs/measure.md): the same client measured through its SOCKS port and
//! through `onionmix tunnel` in front of it, each a series of its own, and
//! every stream pinned to one circuit of `hops` relays through the
//! client's control port.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};

use onionmix_testbed::netinfo::NetworkInfo;
use onionmix_testbed::spec::Role;
use onionmix_testbed::workload::{Endpoint, TunnelVia, WorkloadConfig};

/// An `onionmix tunnel` the measurement runs (stopped on drop).
pub struct TunnelChild {
    child: Child,
    /// Its namespace.
    pub netns: String,
}

impl TunnelChild {
    /// Start a long-running tunnel in front of `socks`; returns once its
    /// namespace is up.
    pub fn start(socks: SocketAddr, work: &std::path::Path) -> anyhow::Result<TunnelChild> {
        let netns = format!("omxm{}", std::process::id() % 1_000_000);
        std::fs::create_dir_all(work)?;
        let status = work.join(format!("{netns}.json"));
        let _ = std::fs::remove_file(&status);
        let log = std::fs::File::create(work.join(format!("{netns}.log")))?;
        let child = Command::new(std::env::current_exe()?)
            .args([
                "tunnel",
                "--socks",
                &socks.to_string(),
                "--namespace",
                &netns,
            ])
            .arg("--status-file")
            .arg(&status)
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .context("starting onionmix tunnel")?;
        let mut t = TunnelChild { child, netns };
        let t0 = Instant::now();
        while !status.exists() {
            if let Ok(Some(st)) = t.child.try_wait() {
                bail!(
                    "onionmix tunnel ended at once ({st}); see {}",
                    work.join(format!("{}.log", t.netns)).display()
                );
            }
            if t0.elapsed() > Duration::from_secs(60) {
                bail!("onionmix tunnel did not come up within 60 s");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(t)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for TunnelChild {
    fn drop(&mut self) {
        // SIGTERM: a clean stop that removes the namespace.
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(30) {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The endpoints `cfg.paths` asks for, from the SOCKS endpoint `base`
/// (a tunnel is started for `tunnel`; keep it while measuring).
pub fn endpoints(
    cfg: &WorkloadConfig,
    base: Endpoint,
    info: &NetworkInfo,
    client_pid: u32,
) -> anyhow::Result<(Vec<Endpoint>, Option<TunnelChild>)> {
    let suffix = |via: &str| match cfg.hops {
        Some(h) => format!(" {via}, {h} hops"),
        None if cfg.paths.len() > 1 => format!(" {via}"),
        None => String::new(),
    };
    let mut eps = Vec::new();
    let mut tunnel = None;
    for p in &cfg.paths {
        match p.as_str() {
            "socks" => eps.push(Endpoint {
                label: format!("{}{}", base.label, suffix("SOCKS")),
                ..base.clone()
            }),
            "tunnel" => {
                let sink = info
                    .sink
                    .as_ref()
                    .ok_or_else(|| anyhow::anyhow!("the network has no sink"))?;
                let t = TunnelChild::start(base.socks, &info.dir.join("measure-tunnel"))?;
                eps.push(Endpoint {
                    label: format!("{}{}", base.label, suffix("tunnel")),
                    tunnel: Some(TunnelVia {
                        netns: t.netns.clone(),
                        resolver: SocketAddr::new(
                            onionmix_tunnel::packet::Policy::default()
                                .resolver_v4
                                .into(),
                            53,
                        ),
                        host: sink.hostname.clone(),
                    }),
                    cpu: vec![("client".into(), client_pid), ("tunnel".into(), t.pid())],
                    // Circuit build times are the client's: on the SOCKS
                    // series only.
                    status_json: None,
                    fresh: None,
                    ..base.clone()
                });
                tunnel = Some(t);
            }
            other => bail!("unknown path {other:?}"),
        }
    }
    Ok((eps, tunnel))
}

/// Fingerprints (`$HEX`) of the network's nodes with role `r`, in spec
/// order.
fn role_fingerprints(info: &NetworkInfo, r: Role) -> Vec<String> {
    info.nodes
        .iter()
        .filter(|n| n.roles.contains(&r))
        .filter_map(|n| n.fingerprint.clone())
        .map(|f| format!("${}", f.replace(' ', "")))
        .collect()
}

/// The relays of a `hops`-long circuit: `hops - 1` of the network's
/// middle relays, then one of its exits (fingerprints).
pub fn pinned_path(info: &NetworkInfo, hops: usize) -> anyhow::Result<Vec<String>> {
    let relays = role_fingerprints(info, Role::Relay);
    let exits = role_fingerprints(info, Role::Exit);
    let (Some(exit), true) = (exits.first(), relays.len() + 1 >= hops) else {
        bail!(
            "{hops} hops need {} relays and an exit; {} has {} relays and {} exits",
            hops - 1,
            info.spec,
            relays.len(),
            exits.len()
        );
    };
    let mut path: Vec<String> = relays.into_iter().take(hops - 1).collect();
    path.push(exit.clone());
    Ok(path)
}

/// The circuits the workload's `circuits` gives the measured clients, in
/// client order (fingerprints; `None` for all when it names none).
pub fn client_circuits(
    cfg: &WorkloadConfig,
    info: &NetworkInfo,
    clients: usize,
) -> anyhow::Result<Vec<Option<Vec<String>>>> {
    if cfg.circuits.is_empty() {
        return Ok(vec![None; clients]);
    }
    if cfg.circuits.len() < clients {
        bail!(
            "circuits names {} paths; {} has {clients} clients (one path each)",
            cfg.circuits.len(),
            info.spec
        );
    }
    let relays = role_fingerprints(info, Role::Relay);
    let exits = role_fingerprints(info, Role::Exit);
    let path = |hops: &Vec<String>| -> anyhow::Result<Vec<String>> {
        hops.iter()
            .map(|h| {
                let (role, n) = onionmix_testbed::workload::parse_hop(h)
                    .ok_or_else(|| anyhow::anyhow!("circuits: bad hop {h:?}"))?;
                let nodes = if role == "relay" { &relays } else { &exits };
                nodes.get(n).cloned().ok_or_else(|| {
                    anyhow::anyhow!(
                        "circuits: {} has {} {role} nodes, no {h}",
                        info.spec,
                        nodes.len()
                    )
                })
            })
            .collect()
    };
    cfg.circuits[..clients]
        .iter()
        .map(|p| path(p).map(Some))
        .collect()
}

/// Pin the measured client's streams for `cfg.hops` (if set) while `f`
/// runs; what `f` returns.
pub fn with_pinned<T>(
    cfg: &WorkloadConfig,
    info: &NetworkInfo,
    control: Option<&(SocketAddr, PathBuf)>,
    f: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let Some(h) = cfg.hops else {
        return f();
    };
    let (addr, cookie) =
        control.ok_or_else(|| anyhow::anyhow!("hops = {h}: the client has no control port"))?;
    let path = pinned_path(info, h)?;
    // Its own runtime: the attaching task runs while `f` runs its own.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?;
    let pinned = rt
        .block_on(onionmix_testbed::torctl::pin_streams(
            *addr,
            cookie,
            &path,
            Duration::from_secs(120),
        ))
        .map_err(anyhow::Error::msg)
        .with_context(|| format!("pinning streams to a {h}-hop circuit"))?;
    eprintln!(
        "streams pinned to circuit {} ({})",
        pinned.circ,
        path.join(",")
    );
    let out = f();
    match rt.block_on(pinned.finish()) {
        Ok(n) => eprintln!("{n} streams attached to the {h}-hop circuit"),
        // The records say which streams failed; the run is kept.
        Err(e) => eprintln!("warning: pinning broke during the measurement: {e}"),
    }
    out
}
