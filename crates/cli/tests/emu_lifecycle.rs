//! Nothing is left behind: a clean stop removes namespaces, interfaces, the
//! guard route and the run record; after a crash (SIGKILL) the next start
//! removes the stale state; without privileges the emulator says so and
//! points at the unemulated loopback mode. Needs root.

mod common_net;

use onionmix_emu::run::EmuConfig;
use onionmix_emu::testkit::TestNet;
use onionmix_emu::{LinkProfile, Topology, netns};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_onionmix"))
}

fn links_with(prefix: &str) -> Vec<String> {
    let out = Command::new("ip")
        .args(["-o", "link", "show"])
        .output()
        .expect("ip link");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.split(':').nth(1).map(|s| s.trim().to_string()))
        .filter(|n| n.starts_with(prefix))
        .collect()
}

fn guard_routes(subnet: &str) -> usize {
    let out = Command::new("ip")
        .args(["-4", "route", "show"])
        .output()
        .expect("ip route");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("unreachable") && l.contains(subnet))
        .count()
}

fn config(state: &Path, registry: &Path) -> EmuConfig {
    let mut t = Topology::uniform(&["x", "y"], LinkProfile::delay(1.0), 1);
    t.subnet = "10.77.15.0/24".parse().expect("subnet");
    let mut c = EmuConfig::new(state, t);
    c.prefix = "omlc".into();
    c.registry = registry.to_path_buf();
    c
}

#[test]
fn emu_stop_and_crash_leave_nothing_behind() {
    let _serial = common_net::serial();
    if !common_net::emulator_available("emu_stop_and_crash_leave_nothing_behind") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let registry = dir.path().join("registry");

    // 1. Start, check what exists, crash it with SIGKILL.
    let net =
        TestNet::start_with(exe(), config(&dir.path().join("s1"), &registry)).expect("start 1");
    let run1 = net.handle.ready.run_id.clone();
    let ns1: Vec<String> = net
        .handle
        .ready
        .nodes
        .iter()
        .map(|n| n.namespace.clone())
        .collect();
    let all_ns = netns::list_namespaces();
    for ns in &ns1 {
        assert!(all_ns.contains(ns), "{ns} missing while running");
    }
    assert_eq!(
        links_with(&format!("omlc{run1}")).len(),
        1,
        "host TUN exists"
    );
    assert_eq!(guard_routes("10.77.15.0/24"), 1);
    // `onionmix emulator status` renders the counters.
    let out = Command::new(exe())
        .args(["emulator", "status", "--all", "--dir"])
        .arg(dir.path().join("s1"))
        .output()
        .expect("status cmd");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("core/x/y") && text.contains("q-hwm"),
        "{text}"
    );
    let pid = net.handle.pid();
    let st = Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status()
        .expect("kill");
    assert!(st.success());
    let t0 = Instant::now();
    while netns::process_alive(pid, net.handle.ready.pid_start)
        && t0.elapsed() < Duration::from_secs(30)
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        !netns::process_alive(pid, net.handle.ready.pid_start),
        "the emulator survived SIGKILL for 30 s"
    );
    // Stale: namespaces and guard route remain; the TUNs died with the fds.
    let all_ns = netns::list_namespaces();
    assert!(
        ns1.iter().all(|ns| all_ns.contains(ns)),
        "crash leaves namespaces (stale)"
    );
    assert!(
        links_with(&format!("omlc{run1}")).is_empty(),
        "TUNs vanish with the process"
    );
    assert!(registry.join(format!("{run1}.json")).exists());
    // Forget the crashed handle without its drop-time cleanup running first:
    // the next start must clean up by itself.
    std::mem::forget(net);

    // 2. A new start removes the stale state it owns.
    let net2 =
        TestNet::start_with(exe(), config(&dir.path().join("s2"), &registry)).expect("start 2");
    let all_ns = netns::list_namespaces();
    assert!(
        ns1.iter().all(|ns| !all_ns.contains(ns)),
        "stale namespaces removed on start"
    );
    assert!(!registry.join(format!("{run1}.json")).exists());
    assert_eq!(
        guard_routes("10.77.15.0/24"),
        1,
        "only the new run's guard route"
    );
    let run2 = net2.handle.ready.run_id.clone();
    let ns2: Vec<String> = net2
        .handle
        .ready
        .nodes
        .iter()
        .map(|n| n.namespace.clone())
        .collect();

    // 3. A clean stop leaves nothing.
    net2.stop().expect("clean stop");
    let all_ns = netns::list_namespaces();
    assert!(
        ns2.iter().all(|ns| !all_ns.contains(ns)),
        "namespaces removed on stop"
    );
    assert!(links_with(&format!("omlc{run2}")).is_empty());
    assert_eq!(guard_routes("10.77.15.0/24"), 0);
    assert!(!registry.join(format!("{run2}.json")).exists());
    let st = onionmix_emu::run::read_status(&dir.path().join("s2")).expect("final status");
    assert!(!st.running);
}

#[test]
fn emu_without_privileges_says_so_and_offers_loopback_mode() {
    let _serial = common_net::serial();
    if !common_net::emulator_available("emu_without_privileges_says_so_and_offers_loopback_mode") {
        return;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        eprintln!(
            "SKIP part: setpriv (util-linux) not installed; cannot drop privileges to test the message"
        );
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let cfg = config(&dir.path().join("state"), &dir.path().join("registry"));
    let path = dir.path().join("emu.toml");
    std::fs::write(&path, cfg.to_toml().expect("toml")).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let out = Command::new("setpriv")
        .args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
        ])
        .arg(exe())
        .args(["emulator", "--config"])
        .arg(&path)
        .output()
        .expect("setpriv runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must fail without privileges");
    assert!(err.contains("needs root"), "{err}");
    assert!(err.contains("loopback mode"), "{err}");
}
