//! Onion services over onionmix relays with stock tor at both ends: stock
//! tor authorities, ONLY onionmix relays and exits (the authorities vote
//! HSDir for our relays alone, and the stock client and service exclude the
//! authorities from their paths), so every HSDir, introduction point and
//! rendezvous point is ours. A stock tor onion service (started here, not
//! by the launcher) serves the sink's HTTP port; the launcher's stock tor
//! client downloads 1 MiB and 20 MiB from its .onion address, SHA-256
//! verified. Our relays' own counters (`stats.json`) must show that they
//! stored and served the descriptor, relayed the introduction (with the
//! service's proposal 305 DoS extension), and joined and spliced the
//! rendezvous circuits.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use common_net::tor_available;
use onionmix_testbed::launcher::{self, LaunchOptions, NetworkGuard};
use onionmix_testbed::netinfo::{NetworkInfo, NodeInfo};
use onionmix_testbed::socks::{self, Target};
use onionmix_testbed::spec::Spec;
use onionmix_testbed::{http, proc};

const OUR_RELAYS: [&str; 7] = [
    "omrelay0", "omrelay1", "omrelay2", "omrelay3", "omrelay4", "omexit0", "omexit1",
];

/// Introduction points a stock service wants (they must be Stable).
const STABLE_WANTED: usize = 3;

/// The network: stock authorities that give HSDir to our relays only
/// (routerset options add up over torrc lines, so `/Option` first clears
/// the launcher's `TestingDirAuthVoteHSDir *`; `...IsStrict` denies the
/// flag to everyone else), five onionmix relays, two
/// onionmix exits, and a stock client that never uses an authority as a
/// hop (routersets take nicknames).
///
/// Why seven of ours: until they have hours of stability data, stock
/// authorities vote Stable only for relays whose uptime is at least the
/// median of the active relays' (dirauth `voteflags.c`). Uptimes follow
/// start times to the second, so which relays get Stable depends on how
/// the processes' starts fell on the clock: with three authorities
/// started first and six relays of ours, as few as two of ours can be
/// Stable (CI saw one of six without it for ten minutes). With seven, at
/// least three are, whatever the timing: enough for the service's
/// introduction points.
fn spec() -> Spec {
    let text = format!(
        r#"
name = "hs-onionmix-relays"
description = "stock tor authorities and client; only onionmix relays and exits"
[[nodes]]
impl = "tor"
role = "authority"
count = 3
torrc = ["/TestingDirAuthVoteHSDir", "TestingDirAuthVoteHSDir {hsdirs}", "TestingDirAuthVoteHSDirIsStrict 1"]
[[nodes]]
impl = "onionmix"
role = "relay"
count = 5
config = ["stats_interval_secs = 1"]
[[nodes]]
impl = "onionmix"
role = "exit"
count = 2
config = ["stats_interval_secs = 1"]
[[nodes]]
impl = "tor"
role = "client"
count = 1
torrc = ["ExcludeNodes auth0,auth1,auth2"]
"#,
        hsdirs = OUR_RELAYS.join(",")
    );
    Spec::parse("hs-onionmix-relays", &text).expect("spec")
}

/// A process started by this test, killed (by pid) on drop.
struct Extra(Child);
impl Drop for Extra {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn node<'a>(info: &'a NetworkInfo, name: &str) -> &'a NodeInfo {
    info.nodes
        .iter()
        .find(|n| n.name == name)
        .unwrap_or_else(|| panic!("no node {name}"))
}

/// The flags of `name` in a consensus (empty if not listed).
fn flags(cons: &str, name: &str) -> Vec<String> {
    let Some(start) = cons.find(&format!("\nr {name} ")) else {
        return Vec::new();
    };
    cons[start + 1..]
        .lines()
        .find(|l| l.starts_with("s "))
        .map(|l| l.split(' ').skip(1).map(str::to_string).collect())
        .unwrap_or_default()
}

/// The sum of counter `name` over our relays' `stats.json`.
fn hs_total(info: &NetworkInfo, name: &str) -> u64 {
    OUR_RELAYS
        .iter()
        .map(|r| {
            let p = node(info, r).data_dir.join("stats.json");
            std::fs::read_to_string(&p)
                .ok()
                .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
                .and_then(|j| j["hs"][name].as_u64())
                .unwrap_or(0)
        })
        .sum()
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !f() {
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// Start a stock tor onion service from the client's torrc (so it knows
/// the network and excludes the authorities too), serving `target` on
/// port 80. Returns the process, its log and its hostname file.
fn start_service(info: &NetworkInfo, dir: &Path, target: SocketAddr) -> (Extra, PathBuf, PathBuf) {
    let base = std::fs::read_to_string(node(info, "client0").data_dir.join("torrc")).unwrap();
    let data = dir.join("onion-service");
    let hs_dir = data.join("hs");
    std::fs::create_dir_all(&data).unwrap();
    let mut torrc: String = base
        .lines()
        .filter(|l| {
            !l.starts_with("DataDirectory")
                && !l.starts_with("SocksPort")
                && !l.starts_with("ControlPort")
                && !l.starts_with("CookieAuthentication")
                && !l.starts_with("Nickname")
        })
        .map(|l| format!("{l}\n"))
        .collect();
    // The DoS defence makes the service send proposal 305's extension in
    // ESTABLISH_INTRO (to HSIntro=5 introduction points: ours), with
    // limits high enough not to refuse our one client.
    torrc.push_str(&format!(
        "DataDirectory {}\nSocksPort 0\nHiddenServiceDir {}\nHiddenServicePort 80 {target}\n\
         HiddenServiceEnableIntroDoSDefense 1\nHiddenServiceEnableIntroDoSRatePerSec 100\n\
         HiddenServiceEnableIntroDoSBurstPerSec 500\nLog info file {}\n",
        data.display(),
        hs_dir.display(),
        data.join("info.log").display(),
    ));
    std::fs::write(data.join("torrc"), torrc).unwrap();
    let log = data.join("tor.log");
    let mut cmd = Command::new("tor");
    cmd.arg("-f").arg(data.join("torrc"));
    let child = proc::spawn(cmd, &log).unwrap();
    (Extra(child), log, hs_dir.join("hostname"))
}

/// GET `/bytes/<n>` from `onion` through the client's SOCKS port.
async fn download(
    proxy: SocketAddr,
    onion: &str,
    n: u64,
) -> Result<(http::Response, Duration), String> {
    let t0 = Instant::now();
    let mut s = socks::connect(
        proxy,
        &Target::Host(onion.to_string(), 80),
        None,
        Duration::from_secs(120),
    )
    .await
    .map_err(|e| e.to_string())?;
    let r = tokio::time::timeout(
        Duration::from_secs(600),
        http::get(&mut s, onion, &format!("/bytes/{n}"), t0),
    )
    .await
    .map_err(|_| "download timed out".to_string())?
    .map_err(|e| e.to_string())?;
    Ok((r, t0.elapsed()))
}

#[test]
fn stock_onion_service_over_onionmix_relays() {
    if !tor_available("stock_onion_service_over_onionmix_relays") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let mut opts = LaunchOptions::new(env!("CARGO_BIN_EXE_onionmix").into());
    opts.timeout = Some(common_net::TEST_BOOTSTRAP_TIMEOUT);
    let net = NetworkGuard(Some(
        launcher::start(&spec(), &dir, &opts).unwrap_or_else(|e| panic!("network start: {e}")),
    ));
    let info = net.info().clone();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let auth = node(&info, "auth0").dir_addr().unwrap();

    // Our relays get HSDir (they advertise HSDir=2 and hidden-service-dir),
    // the authorities do not; intro points need Stable (three of ours, see
    // `spec`), guards Fast. A young network's flags move, and on a busy
    // machine a reachability test or an upload can miss a voting period:
    // wait (generously), and on a timeout say which flags were missing.
    let t0 = Instant::now();
    let mut missing = String::new();
    loop {
        let cons = launcher::http_get_plain(auth, "/tor/status-vote/current/consensus")
            .unwrap_or_default();
        missing.clear();
        let stable = OUR_RELAYS
            .iter()
            .filter(|r| flags(&cons, r).iter().any(|x| x == "Stable"))
            .count();
        if stable < STABLE_WANTED {
            missing.push_str(&format!("{stable} of ours Stable; "));
        }
        for r in OUR_RELAYS {
            let f = flags(&cons, r);
            let lack: Vec<&str> = ["HSDir", "Fast", "Running", "Valid", "V2Dir"]
                .into_iter()
                .filter(|want| !f.iter().any(|x| x == want))
                .collect();
            if !lack.is_empty() {
                missing.push_str(&format!("{r} lacks {lack:?}; "));
            }
        }
        for a in ["auth0", "auth1", "auth2"] {
            if flags(&cons, a).iter().any(|x| x == "HSDir") {
                missing.push_str(&format!("{a} has HSDir; "));
            }
        }
        if missing.is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(600),
            "timed out waiting for the HSDir/Stable/Fast flags: {missing}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    eprintln!("flags as wanted after {:?}", t0.elapsed());
    let cons = common_net::dir_get(auth, "/tor/status-vote/current/consensus");
    let start = cons.find("\nr omrelay0 ").unwrap();
    let pr = cons[start..]
        .lines()
        .find(|l| l.starts_with("pr "))
        .unwrap()
        .to_string();
    for want in ["HSDir=2", "HSIntro=4-5", "HSRend=2"] {
        assert!(pr.split(' ').any(|p| p == want), "{want} missing: {pr}");
    }

    let sink = info.sink.as_ref().expect("sink");
    let (_service, svc_log, hostname) = start_service(&info, &dir, sink.http);
    wait_until(
        "the service writes its hostname",
        Duration::from_secs(60),
        || hostname.exists(),
    );
    let onion = std::fs::read_to_string(&hostname)
        .unwrap()
        .trim()
        .to_string();
    assert!(onion.ends_with(".onion"), "{onion}");

    // The service establishes its introduction points (on our relays) and
    // uploads its descriptors (to our HSDirs).
    wait_until(
        "three introduction points and a stored descriptor on our relays",
        Duration::from_secs(300),
        || hs_total(&info, "intro_established") >= 3 && hs_total(&info, "hsdir_stored") >= 1,
    );
    eprintln!(
        "service published: {} descriptors stored, {} intro circuits",
        hs_total(&info, "hsdir_stored"),
        hs_total(&info, "intro_established")
    );

    let socks = node(&info, "client0").socks_addr().unwrap();
    for (n, what) in [(1u64 << 20, "1 MiB"), (20 << 20, "20 MiB")] {
        // The first connection may come before every HSDir has the
        // descriptor; tor's client retries HSDirs itself, we retry the
        // whole connection a few times.
        let mut last = String::new();
        let mut done = None;
        for _ in 0..5 {
            match rt.block_on(download(socks, &onion, n)) {
                Ok(x) => {
                    done = Some(x);
                    break;
                }
                Err(e) => {
                    last = e;
                    std::thread::sleep(Duration::from_secs(5));
                }
            }
        }
        let Some((r, t)) = done else {
            panic!(
                "{what} from {onion} failed: {last}\nservice log:\n{}\nclient log:\n{}",
                proc::tail(&svc_log, 40),
                proc::tail(&node(&info, "client0").log, 40)
            );
        };
        assert_eq!(r.status, 200, "{what}");
        assert_eq!(r.body.len() as u64, n, "{what}: body length");
        assert!(r.sha256_ok(), "{what}: SHA-256 mismatch");
        eprintln!(
            "{what} from the onion service verified in {t:?} ({:.2} MiB/s)",
            n as f64 / (1 << 20) as f64 / t.as_secs_f64()
        );
    }

    // Our relays did every onion-service job (counters reach stats.json
    // within a second or two).
    let want_spliced = (21u64 << 20) / 498;
    wait_until(
        "our relays' counters show every role",
        Duration::from_secs(30),
        || {
            hs_total(&info, "hsdir_fetch_served") >= 1
                && hs_total(&info, "introduce1_relayed") >= 1
                && hs_total(&info, "rend_joined") >= 1
                && hs_total(&info, "rend_cells_spliced") >= want_spliced
        },
    );
    let names = [
        "hsdir_stored",
        "hsdir_fetch_served",
        "intro_established",
        "intro_dos_from_extension",
        "introduce1_relayed",
        "rend_established",
        "rend_joined",
        "rend_cells_spliced",
    ];
    for n in names {
        eprintln!("{n}: {}", hs_total(&info, n));
    }
    assert!(
        hs_total(&info, "intro_dos_from_extension") >= 1,
        "the service's DoS extension reached our introduction points"
    );
    // Nothing of ours was refused along the way.
    for n in [
        "hsdir_invalid",
        "intro_bad_mac",
        "intro_bad_signature",
        "intro_malformed",
        "introduce1_malformed",
        "rend1_unknown_cookie",
    ] {
        assert_eq!(hs_total(&info, n), 0, "{n}");
    }
    drop(net);
}
