//! Interoperability with the stock `tor` binary's key directories:
//! tor-written keys load with our code, and our key directories are
//! accepted by tor (same fingerprints, signing certificate kept, and
//! `tor-print-ed-signing-cert` reads our certificate's expiry).
//!
//! Skipped (with a message) when `tor` is not installed, unless
//! `ONIONMIX_REQUIRE_INTEROP=1`, in which case a missing tor fails.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use onionmix_crypto::certs::Ed25519Cert;
use onionmix_crypto::keys::{RelayKeys, decode_tagged};

/// Kills the child on drop (also on panic).
struct Guard(Child);
impl Drop for Guard {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn run_with_timeout(cmd: &mut Command, limit: Duration) -> String {
    let child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut g = Guard(child);
    let start = Instant::now();
    loop {
        if let Some(status) = g.0.try_wait().expect("wait") {
            let mut out = String::new();
            use std::io::Read;
            if let Some(mut s) = g.0.stdout.take() {
                let _ = s.read_to_string(&mut out);
            }
            if let Some(mut s) = g.0.stderr.take() {
                let _ = s.read_to_string(&mut out);
            }
            assert!(status.success(), "command failed: {status}\n{out}");
            return out;
        }
        assert!(start.elapsed() < limit, "command timed out");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn list_fingerprint(datadir: &Path) -> String {
    run_with_timeout(
        Command::new("tor")
            .arg("--list-fingerprint")
            .arg("--DataDirectory")
            .arg(datadir)
            .args([
                "--ORPort",
                "127.0.0.1:1",
                "--PublishServerDescriptor",
                "0",
                "--SocksPort",
                "0",
            ])
            .args(["--Nickname", "onionmixtest", "--Log", "notice stdout"]),
        Duration::from_secs(120),
    )
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs()
}

#[test]
fn tor_written_keys_load() {
    if !onionmix_testsupport::tor_available("tor_interop") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let out = list_fingerprint(dir.path());
    let fp = std::fs::read_to_string(dir.path().join("fingerprint")).expect("fingerprint file");
    let hexfp = fp
        .split_whitespace()
        .nth(1)
        .expect("fingerprint")
        .to_string();
    let mut rng = rand::rngs::OsRng;
    let keys = RelayKeys::load(&dir.path().join("keys"), &mut rng, now()).expect("load tor's keys");
    assert_eq!(hex::encode_upper(keys.rsa_id()), hexfp, "{out}");
    assert!(keys.ed_identity.is_some());
    let c = Ed25519Cert::parse(&keys.ed_signing_cert).expect("cert");
    c.verify(Some(&keys.ed_id()), now())
        .expect("tor's signing cert verifies");
    // The ntor key tor wrote works in a handshake with our code.
    let (client, skin) =
        onionmix_crypto::NtorClient::new(keys.rsa_id(), keys.ntor.public(), &mut rng);
    let (reply, sk) =
        onionmix_crypto::ntor_server(&keys.rsa_id(), &keys.ntor_keys(), &skin, &mut rng)
            .expect("server");
    assert_eq!(client.finish(&reply).expect("client"), sk);
}

#[test]
fn our_keys_accepted_by_tor() {
    if !onionmix_testsupport::tor_available("tor_interop") {
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = rand::rngs::OsRng;
    let t = now();
    let keys = RelayKeys::generate(&mut rng, t).expect("generate");
    let kdir = dir.path().join("keys");
    keys.save(&kdir).expect("save");
    let cert_before = std::fs::read(kdir.join("ed25519_signing_cert")).expect("cert");
    let out = list_fingerprint(dir.path());
    let fp = std::fs::read_to_string(dir.path().join("fingerprint")).expect("fingerprint file");
    assert_eq!(
        fp.split_whitespace().nth(1),
        Some(hex::encode_upper(keys.rsa_id()).as_str()),
        "{out}"
    );
    let fped =
        std::fs::read_to_string(dir.path().join("fingerprint-ed25519")).expect("ed fingerprint");
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode(keys.ed_id());
    assert_eq!(fped.split_whitespace().nth(1), Some(b64.as_str()), "{out}");
    // tor kept our signing key and certificate (it replaces invalid ones).
    let cert_after = std::fs::read(kdir.join("ed25519_signing_cert")).expect("cert");
    assert_eq!(
        cert_before, cert_after,
        "tor replaced our signing cert:\n{out}"
    );

    // tor's own tool reads the expiry of our certificate.
    if Command::new("tor-print-ed-signing-cert")
        .arg("--help")
        .output()
        .is_ok()
    {
        let printed = run_with_timeout(
            Command::new("tor-print-ed-signing-cert").arg(kdir.join("ed25519_signing_cert")),
            Duration::from_secs(30),
        );
        let (_, raw) = decode_tagged("ed25519v1-cert", &cert_after).expect("tagged");
        let exp = Ed25519Cert::parse(raw).expect("cert").expires_unix();
        assert!(
            printed.contains(&format!("UNIX timestamp: {exp}")),
            "{printed}"
        );
    }
}
