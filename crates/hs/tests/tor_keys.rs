//! Stock tor's onion-service key files against ours, both ways: tor
//! creates a service's keys (with the network disabled, it still writes
//! them at start-up) and we must derive its `hostname` from its
//! `hs_ed25519_secret_key`; then tor must take a key file we wrote and name
//! the address we compute. Skips without stock tor (fails with
//! ONIONMIX_REQUIRE_INTEROP=1).

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use onionmix_hs::keys::ServiceIdentity;

/// Start tor with a hidden service directory `hs` and wait for `hostname`.
fn run_tor(dir: &Path, hs: &Path) -> String {
    let torrc = dir.join("torrc");
    std::fs::write(
        &torrc,
        format!(
            "DataDirectory {}\nHiddenServiceDir {}\nHiddenServicePort 80 127.0.0.1:9\n\
             SocksPort 0\nDisableNetwork 1\nLog notice file {}\n",
            dir.join("data").display(),
            hs.display(),
            dir.join("tor.log").display()
        ),
    )
    .expect("torrc");
    let mut child: Child = Command::new("tor")
        .arg("-f")
        .arg(&torrc)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tor");
    let hostname = hs.join("hostname");
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut got = None;
    while Instant::now() < deadline {
        if let Ok(s) = std::fs::read_to_string(&hostname)
            && s.trim_end().ends_with(".onion")
        {
            got = Some(s.trim().to_string());
            break;
        }
        if let Ok(Some(status)) = child.try_wait() {
            panic!("tor exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Stop exactly the process we started.
    let _ = child.kill();
    let _ = child.wait();
    got.expect("tor wrote no hostname within 60 s")
}

fn private_dir(p: &Path) {
    std::fs::create_dir_all(p).expect("mkdir");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700)).expect("chmod");
    }
}

#[test]
fn tor_key_files_both_ways() {
    if !onionmix_testsupport::tor_available("tor_key_files_both_ways") {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");

    // tor -> us.
    let hs = tmp.path().join("hs_tor");
    private_dir(&hs);
    let host = run_tor(tmp.path(), &hs);
    let secret = std::fs::read(hs.join("hs_ed25519_secret_key")).expect("secret key");
    let id = ServiceIdentity::from_tor_key_file(&secret).expect("we read tor's key file");
    assert_eq!(id.address().expect("address").to_string(), host);
    let public = std::fs::read(hs.join("hs_ed25519_public_key")).expect("public key");
    assert_eq!(id.to_tor_public_key_file(), public);
    assert_eq!(id.to_tor_key_file(), secret);

    // us -> tor.
    let ours = ServiceIdentity::generate(&mut rand::rngs::OsRng);
    let hs2 = tmp.path().join("hs_ours");
    private_dir(&hs2);
    std::fs::write(hs2.join("hs_ed25519_secret_key"), ours.to_tor_key_file()).expect("write");
    let host2 = run_tor(tmp.path(), &hs2);
    assert_eq!(ours.address().expect("address").to_string(), host2);
}
