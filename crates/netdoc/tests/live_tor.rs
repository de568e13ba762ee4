//! Live interop: bootstrap directory information from a private network of
//! stock tor 0.4.9 processes (3 authorities, 2 relays, one exit) using only
//! this crate's codec, verification, NetDir and path selection.
//!
//! Skips (with a message) when `tor`/`tor-gencert` are not installed; fails
//! instead when `ONIONMIX_REQUIRE_INTEROP=1`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use onionmix_netdoc::{
    AuthCertificate, AuthorityConfig, ConsensusError, DirRequest, ExitTarget, NetDir, PathBuilder,
    PathConfig, TimeTolerance, UnverifiedConsensus, parse_microdescs,
};

/// Kills exactly the processes this test started, also on panic.
struct Procs(Vec<Child>);
impl Drop for Procs {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> u16 {
    onionmix_testsupport::ports::free_port("127.0.0.1").expect("a free port")
}

fn fingerprint(dir: &Path, orport: u16) -> String {
    let out = Command::new("tor")
        .args(["--list-fingerprint", "--quiet", "--DataDirectory"])
        .arg(dir)
        .args(["--ORPort", &orport.to_string(), "--Log", "err stderr"])
        .output()
        .unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    let line = s.lines().last().expect("fingerprint line");
    line.split_whitespace().skip(1).collect::<String>()
}

const COMMON: &str = "TestingTorNetwork 1
PathsNeededToBuildCircuits 0.67
TestingDirAuthVoteExit *
TestingDirAuthVoteHSDir *
TestingDirAuthVoteGuard *
TestingMinExitFlagThreshold 0
V3AuthNIntervalsValid 2
Sandbox 0
SocksPort 0
ControlPort 0
Address 127.0.0.1
AssumeReachable 1
";

fn fetch(addr: &str, req: &DirRequest) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(&req.encode(Some(addr)))
        .map_err(|e| e.to_string())?;
    let mut p = req.response_parser();
    let mut buf = [0u8; 8192];
    loop {
        let n = s.read(&mut buf).map_err(|e| e.to_string())?;
        if n == 0 {
            break;
        }
        p.push(&buf[..n]).map_err(|e| e.to_string())?;
        if p.is_complete() {
            break;
        }
    }
    p.finish().map(|r| r.body).map_err(|e| e.to_string())
}

#[test]
fn bootstrap_from_stock_tor_authorities() {
    if !onionmix_testsupport::tor_available("bootstrap_from_stock_tor_authorities") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path();
    let mut dirauth = String::new();
    let mut auth_dirs: Vec<(PathBuf, u16, u16)> = Vec::new();
    for i in 1..=3 {
        let d = base.join(format!("auth{i}"));
        std::fs::create_dir_all(d.join("keys")).unwrap();
        let (orp, dirp) = (free_port(), free_port());
        let mut child = Command::new("tor-gencert")
            .current_dir(d.join("keys"))
            .args(["--create-identity-key", "-m", "12", "-a"])
            .arg(format!("127.0.0.1:{dirp}"))
            .args(["--passphrase-fd", "0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(b"\n").unwrap();
        assert!(child.wait().unwrap().success());
        let cert = std::fs::read_to_string(d.join("keys/authority_certificate")).unwrap();
        let v3 = cert
            .lines()
            .find_map(|l| l.strip_prefix("fingerprint "))
            .unwrap()
            .to_string();
        let fp = fingerprint(&d, orp);
        dirauth.push_str(&format!(
            "DirAuthority auth{i} orport={orp} no-v2 v3ident={v3} 127.0.0.1:{dirp} {fp}\n"
        ));
        auth_dirs.push((d, orp, dirp));
    }
    let mut procs = Procs(Vec::new());
    let mut start = |d: &Path, torrc: String| {
        std::fs::write(d.join("torrc"), torrc).unwrap();
        let c = Command::new("tor")
            .arg("-f")
            .arg(d.join("torrc"))
            .arg("--quiet")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        procs.0.push(c);
    };
    for (i, (d, orp, dirp)) in auth_dirs.iter().enumerate() {
        start(
            d,
            format!(
                "{COMMON}DataDirectory {}\nNickname auth{}\nORPort {orp}\nDirPort {dirp}\n\
                 AuthoritativeDirectory 1\nV3AuthoritativeDirectory 1\nV3AuthVotingInterval 20\n\
                 V3AuthVoteDelay 4\nV3AuthDistDelay 4\nTestingV3AuthInitialVotingInterval 20\n\
                 TestingV3AuthInitialVoteDelay 4\nTestingV3AuthInitialDistDelay 4\n\
                 ExitPolicy reject *:*\n{dirauth}",
                d.display(),
                i + 1
            ),
        );
    }
    for i in 1..=2 {
        let d = base.join(format!("relay{i}"));
        std::fs::create_dir_all(&d).unwrap();
        let exit = if i == 1 {
            "ExitRelay 1\nExitPolicy accept *:80\nExitPolicy reject *:*\nExitPolicyRejectPrivate 0\n"
        } else {
            "ExitPolicy reject *:*\n"
        };
        start(
            &d,
            format!(
                "{COMMON}DataDirectory {}\nNickname relay{i}\nORPort {}\n{exit}{dirauth}",
                d.display(),
                free_port()
            ),
        );
    }
    let authorities: Vec<AuthorityConfig> = dirauth
        .lines()
        .map(|l| AuthorityConfig::from_dirauthority_line(l).unwrap())
        .collect();
    let addr = authorities[0].dir_addr.unwrap().to_string();

    // Wait for a consensus listing all 5 relays with their microdescs.
    let deadline = Instant::now() + Duration::from_secs(150);
    let mut certs: Vec<AuthCertificate> = Vec::new();
    loop {
        assert!(Instant::now() < deadline, "no complete consensus in time");
        std::thread::sleep(Duration::from_secs(2));
        let Ok(body) = fetch(&addr, &DirRequest::microdesc_consensus()) else {
            continue;
        };
        let text = String::from_utf8(body).unwrap();
        let unverified = UnverifiedConsensus::parse(&text).unwrap();
        let now = SystemTime::now();
        let missing = unverified.missing_certificates(&authorities, &certs, now);
        if !missing.is_empty() {
            let Ok(body) = fetch(&addr, &DirRequest::authority_certs(&missing).unwrap()) else {
                continue;
            };
            let text = String::from_utf8(body).unwrap();
            for c in AuthCertificate::parse_all(&text, now) {
                certs.push(c.unwrap());
            }
        }
        let consensus = match unverified.verify(&authorities, &certs, now, TimeTolerance::default())
        {
            Ok(c) => c,
            // Early consensuses may be signed by only some authorities.
            Err(ConsensusError::InsufficientSignatures { .. }) => continue,
            Err(e) => panic!("verify failed: {e}"),
        };
        if consensus.relays().len() < 5 {
            continue;
        }
        let mut nd = NetDir::new(consensus);
        for req in DirRequest::microdesc_batches(&nd.missing_microdescs()) {
            let Ok(body) = fetch(&addr, &req) else {
                continue;
            };
            let batch = parse_microdescs(std::str::from_utf8(&body).unwrap());
            assert!(batch.errors.is_empty(), "{:?}", batch.errors);
            nd.add_microdescs(batch.microdescs);
        }
        if !nd.missing_microdescs().is_empty() {
            continue;
        }
        assert!(nd.has_enough_dir_info(Some(0.67)));
        let relay1 = nd.relays().find(|r| r.nickname == "relay1").unwrap();
        assert!(relay1.ipv4_policy.allows_port(80));
        let cfg = PathConfig::testing_network();
        let pb = PathBuilder::new(&nd, &cfg);
        let mut rng = rand::thread_rng();
        let path = pb.exit_path(&mut rng, ExitTarget::Port(80)).unwrap();
        assert_eq!(path[2], relay1.id());
        break;
    }
    drop(procs);
}
