//! Start the link emulator for a spec's `[emulation]`: one namespace per node, a free subnet.

use std::path::Path;
use std::time::Duration;

use super::{LaunchError, LaunchOptions};

/// Start the link emulator with one namespace per node (and the sink).
pub(super) fn start_emulator(
    topo: &onionmix_emu::Topology,
    names: &[(String, &crate::spec::NodeGroup)],
    sink: bool,
    dir: &Path,
    opts: &LaunchOptions,
) -> Result<onionmix_emu::run::EmulatorHandle, LaunchError> {
    onionmix_emu::netns::check_privileges().map_err(|e| {
        LaunchError::new(format!(
            "{e}\nThis spec emulates links; that needs root (CAP_NET_ADMIN). Without it, \
             run the same network on plain loopback with `--no-emulation`."
        ))
    })?;
    let _ =
        onionmix_emu::netns::cleanup_stale("om", Path::new(onionmix_emu::netns::DEFAULT_REGISTRY));
    let mut topo = topo.clone();
    let mut all: Vec<String> = names.iter().map(|(n, _)| n.clone()).collect();
    if sink {
        all.push("sink".into());
    }
    for n in &topo.nodes {
        if !all.contains(&n.name) {
            return Err(LaunchError::new(format!(
                "[emulation] names node {:?}, which the spec does not have (nodes: {})",
                n.name,
                all.join(", ")
            )));
        }
    }
    for n in all {
        if !topo.nodes.iter().any(|x| x.name == n) {
            topo.nodes.push(onionmix_emu::NodeSpec {
                name: n,
                address: None,
                uplink: None,
                downlink: None,
            });
        }
    }
    // A spec that does not choose its address space gets a free /24 of
    // 10.77.0.0/16, picked under a host-wide lock held until the emulator
    // has claimed it (its guard route), so two networks started at once
    // (parallel tests, two users) never pick the same one.
    let auto = topo.subnet == onionmix_emu::Topology::default().subnet
        && topo.nodes.iter().all(|n| n.address.is_none());
    let _lock = if auto {
        let lock = subnet_lock()?;
        topo.subnet = pick_free_subnet()?;
        Some(lock)
    } else {
        None
    };
    let cfg = onionmix_emu::run::EmuConfig::new(dir.join("emu"), topo);
    onionmix_emu::run::spawn(&opts.onionmix_bin, &cfg, Duration::from_secs(30))
        .map_err(|e| LaunchError::new(format!("link emulator: {e}")))
}

/// Host-wide lock for choosing an emulated subnet (released on drop).
fn subnet_lock() -> Result<std::fs::File, LaunchError> {
    let reg = Path::new(onionmix_emu::netns::DEFAULT_REGISTRY);
    std::fs::create_dir_all(reg)
        .map_err(|e| LaunchError::new(format!("cannot create {}: {e}", reg.display())))?;
    let path = reg.join("subnet.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| LaunchError::new(format!("cannot open {}: {e}", path.display())))?;
    f.lock()
        .map_err(|e| LaunchError::new(format!("cannot lock {}: {e}", path.display())))?;
    Ok(f)
}

/// The first 10.77.N.0/24 (N = 100..=249) no route or address overlaps.
fn pick_free_subnet() -> Result<onionmix_emu::profile::Subnet, LaunchError> {
    let mut last = String::new();
    for n in 100u8..=249 {
        let s = onionmix_emu::profile::Subnet {
            network: std::net::Ipv4Addr::new(10, 77, n, 0),
            prefix: 24,
        };
        match onionmix_emu::netns::check_subnet_free(&s) {
            Ok(()) => return Ok(s),
            Err(e @ onionmix_emu::EmuError::SubnetInUse { .. }) => last = e.to_string(),
            Err(e) => return Err(LaunchError::new(format!("link emulator: {e}"))),
        }
    }
    Err(LaunchError::new(format!(
        "link emulator: no free /24 in 10.77.100.0-10.77.249.0 (last: {last}); \
         stop other emulated networks or set `subnet` in [emulation]"
    )))
}
