//! Starting Loopix networks (`onionmix testnet start --spec loopix`): the
//! mix crate generates keys, configs and the directory; we start the
//! processes, wait until every node has bound its socket, and write
//! network.json so `status` and `stop` work as for Tor networks.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use onionmix_mix::testnet::{LoopixSpec, Readiness};

use crate::launcher::{LaunchError, LaunchOptions, Network};
use crate::netinfo::{NetworkInfo, NodeInfo};
use crate::proc;
use crate::spec::{Implementation, Role};

/// Start a Loopix network in `dir`.
pub fn start(
    name: &str,
    spec: &LoopixSpec,
    dir: &Path,
    opts: &LaunchOptions,
) -> Result<Network, LaunchError> {
    let t0 = Instant::now();
    let step = |what: &str, msg: &str| {
        if opts.progress {
            eprintln!("[{:6.1}s] {what:<10} {msg}", t0.elapsed().as_secs_f64());
        }
    };
    std::fs::create_dir_all(dir)
        .map_err(|e| LaunchError::plain(format!("cannot create {}: {e}", dir.display())))?;
    let dir = dir
        .canonicalize()
        .map_err(|e| LaunchError::plain(format!("{}: {e}", dir.display())))?;
    step("keys", "generating keys, configs and the directory");
    let (_g, procs) = onionmix_mix::testnet::generate(spec, &dir).map_err(LaunchError::plain)?;
    step("start", &format!("starting {} processes", procs.len()));
    let mut nodes: Vec<NodeInfo> = Vec::new();
    let mut children = Vec::new();
    for p in &procs {
        let mut cmd = Command::new(&opts.onionmix_bin);
        cmd.args(&p.argv);
        let child = proc::spawn(cmd, &p.log)
            .map_err(|e| LaunchError::plain(format!("cannot start {}: {e}", p.name)))?;
        let pid = child.id();
        children.push(child);
        let role = match p.role {
            onionmix_mix::loopix::config::Role::Mix => Role::Mix,
            onionmix_mix::loopix::config::Role::Provider => Role::Provider,
            onionmix_mix::loopix::config::Role::Client => Role::MixClient,
        };
        nodes.push(NodeInfo {
            name: p.name.clone(),
            implementation: Implementation::Onionmix,
            roles: vec![role],
            address: spec.host.clone(),
            or_port: None,
            dir_port: None,
            socks_port: None,
            control_port: None,
            fingerprint: None,
            v3ident: None,
            pid,
            start_time: proc::start_time(pid).unwrap_or(0),
            data_dir: p
                .config
                .parent()
                .map(Path::to_path_buf)
                .unwrap_or_else(|| dir.clone()),
            log: p.log.clone(),
            links: Vec::new(),
        });
    }
    let mut info = NetworkInfo {
        spec: name.into(),
        dir: dir.clone(),
        ready_unix: 0,
        bootstrap_secs: 0.0,
        nodes,
        sink: None,
        emulator: None,
        onion_services: Vec::new(),
    };
    let deadline = t0 + opts.timeout.unwrap_or(Duration::from_secs(60));
    step("ready?", "waiting for every node to bind its socket");
    loop {
        let mut pending = None;
        for (i, p) in procs.iter().enumerate() {
            if let Ok(Some(st)) = children[i].try_wait() {
                let n = &info.nodes[i];
                let e = LaunchError::for_node(format!("node exited during start-up ({st})"), n);
                crate::launcher::stop_info(&info);
                return Err(e);
            }
            let Readiness::FileExists(f) = &p.ready;
            if !f.exists() && pending.is_none() {
                pending = Some(i);
            }
        }
        let Some(i) = pending else { break };
        if Instant::now() > deadline {
            let e = LaunchError::for_node("node not ready in time", &info.nodes[i]);
            crate::launcher::stop_info(&info);
            return Err(e);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    info.ready_unix = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    info.bootstrap_secs = t0.elapsed().as_secs_f64();
    info.save().map_err(LaunchError::plain)?;
    step(
        "ready",
        &format!(
            "network.json written to {}",
            NetworkInfo::path(&dir).display()
        ),
    );
    Ok(Network::from_parts(info, children))
}
