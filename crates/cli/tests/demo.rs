//! The README's main job: `onionmix demo` starts the all-onionmix network
//! (nothing but the onionmix binary needed), carries verified downloads,
//! prints the timing table and stops every process it started.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

#[test]
fn main_job_runs_an_onionmix_network() {
    let tmp = tempfile::tempdir().unwrap();
    let out = common_net::onionmix_cmd()
        .args(["demo", "--runs", "2", "--sizes", "51200,1048576", "--dir"])
        .arg(tmp.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{stdout}\n{stderr}");
    assert!(!stderr.contains("failed:"), "{stderr}");
    for row in ["new circuit", "50 KiB", "1 MiB"] {
        let line = stdout
            .lines()
            .find(|l| l.contains("omclient0 (onionmix) @ onionmix-basic") && l.contains(row))
            .unwrap_or_else(|| panic!("no {row} row:\n{stdout}"));
        // Two successful runs per row.
        assert!(line.split_whitespace().any(|w| w == "2"), "{line}");
    }
    assert!(
        stderr.contains("network onionmix-basic stopped"),
        "{stderr}"
    );
    // Every process the demo started is gone.
    let net: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("onionmix-basic/network.json")).unwrap(),
    )
    .unwrap();
    for n in net["nodes"].as_array().unwrap() {
        let pid = n["pid"].as_u64().unwrap() as u32;
        let start = n["start_time"].as_u64().unwrap();
        assert!(
            !onionmix_testbed::proc::alive(pid, start),
            "{} still running",
            n["name"]
        );
    }
}
