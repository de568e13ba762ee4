//! The tunnel's system plumbing, for real: a fresh network namespace whose
//! only interfaces are `lo` and our TUN device, the default route through
//! the TUN, the namespace's resolv.conf, a packet sent inside the namespace
//! arriving on the TUN in this process, and the namespace gone afterwards.
//! Needs root and `ip`, `bash`; skipped otherwise (fails when
//! ONIONMIX_REQUIRE_INTEROP=1).

use onionmix_node::tunnel::dev::{MAX_PACKET, TunDevice};
use onionmix_node::tunnel::is_root;
use onionmix_node::tunnel::netns::{self, Namespace};
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

fn check() -> Result<(), String> {
    onionmix_testsupport::root_and_tools_check(&["ip", "bash"], "apt-get install iproute2 bash")?;
    if !std::path::Path::new("/dev/net/tun").exists() {
        return Err("/dev/net/tun missing".into());
    }
    Ok(())
}

async fn run_in(ns: &Namespace, prog: &str, args: &[&str]) -> (bool, String) {
    let out = tokio::time::timeout(Duration::from_secs(60), ns.command(prog, args).output())
        .await
        .expect("command timed out")
        .expect("spawn ip netns exec");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[tokio::test]
async fn namespace_routes_only_through_the_tun() {
    if !onionmix_testsupport::require_or_skip("namespace_routes_only_through_the_tun", check()) {
        return;
    }
    let ns = Namespace::create().expect("create namespace");
    let name = ns.name().to_string();
    assert!(netns::exists(&name));
    let tun_name = format!("omxt{}", std::process::id());
    let dev = TunDevice::create(&tun_name).expect("create tun");
    dev.move_into(&ns, Ipv4Addr::new(10, 255, 0, 1), 32, None)
        .expect("configure tun in namespace");
    let resolver = IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1));
    ns.write_resolv_conf(resolver).expect("resolv.conf");

    // Only lo and the TUN: nothing else can carry a packet out.
    let (ok, links) = run_in(&ns, "ip", &["-o", "link", "show"]).await;
    assert!(ok);
    let names: Vec<&str> = links
        .lines()
        .filter_map(|l| l.split(':').nth(1).map(str::trim))
        .map(|n| n.split('@').next().unwrap_or(n))
        .collect();
    assert_eq!(names.len(), 2, "interfaces in the namespace: {links}");
    assert!(names.contains(&"lo") && names.contains(&tun_name.as_str()));

    let (ok, routes) = run_in(&ns, "ip", &["route", "show", "default"]).await;
    assert!(ok);
    assert!(routes.contains(&format!("dev {tun_name}")), "{routes}");

    let (ok, resolv) = run_in(&ns, "cat", &["/etc/resolv.conf"]).await;
    assert!(ok);
    assert!(resolv.contains("nameserver 198.18.0.1"), "{resolv}");

    // A UDP datagram sent inside the namespace comes out of our TUN fd.
    let (ok, _) = run_in(
        &ns,
        "bash",
        &["-c", "echo onionmix > /dev/udp/198.18.0.5/5353"],
    )
    .await;
    assert!(ok);
    let mut buf = vec![0u8; MAX_PACKET];
    let found = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let n = dev.recv(&mut buf).await.expect("read tun");
            let p = buf.get(..n).unwrap_or_default();
            // IPv4, UDP, to 198.18.0.5 (skip IPv6 neighbour discovery etc.).
            if p.len() >= 28
                && p.first().map(|b| b >> 4) == Some(4)
                && p.get(9) == Some(&17)
                && p.get(16..20) == Some(&[198, 18, 0, 5][..])
            {
                return p.to_vec();
            }
        }
    })
    .await
    .expect("no packet on the tun within 30 s");
    assert!(found.ends_with(b"onionmix\n"));

    drop(dev);
    drop(ns);
    assert!(!netns::exists(&name), "namespace {name} left behind");
    assert!(!std::path::Path::new("/etc/netns").join(&name).exists());
}

#[test]
fn not_root_is_a_clear_error() {
    if is_root() {
        return;
    }
    let e = Namespace::create().expect_err("must fail without root");
    assert!(e.to_string().contains("needs root"), "{e}");
}
