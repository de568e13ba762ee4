//! Helpers for tests that start stock `tor` processes, and a raw
//! control-port connection (`control`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[allow(unused_imports)]
pub use onionmix_testsupport::tor_available;

pub mod control;

/// A free loopback port (from the shared allocator: never handed out twice).
pub fn free_port() -> u16 {
    onionmix_testsupport::ports::free_port("127.0.0.1").expect("a free port")
}

/// Seconds since the Unix epoch (for certificates and handshakes).
pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// The configuration of a client whose only authority is unreachable
/// (nothing listens at its address): it starts and serves its ports but
/// never bootstraps. `extra`: more lines (ports, options).
pub fn offline_client_config(data_dir: &Path, extra: &str) -> String {
    let dead = free_port();
    format!(
        r#"
data_dir = {:?}
{extra}
[[authority]]
nickname = "nowhere"
v3ident = "0123456789ABCDEF0123456789ABCDEF01234567"
fingerprint = "0123456789ABCDEF0123456789ABCDEF01234567"
dir_addr = "127.0.0.1:{dead}"
or_addr = "127.0.0.1:{dead}"
"#,
        data_dir.display().to_string()
    )
}

/// A tor process killed on drop.
pub struct TorProc {
    pub child: Child,
    pub dir: PathBuf,
}

impl Drop for TorProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Start tor with `torrc` text in `dir`.
pub fn start_tor(dir: &Path, torrc: &str) -> TorProc {
    let path = dir.join("torrc");
    std::fs::write(&path, torrc).expect("write torrc");
    let log = std::fs::File::create(dir.join("tor.log")).expect("create log");
    let child = Command::new("tor")
        .arg("-f")
        .arg(&path)
        .stdout(log)
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn tor");
    TorProc {
        child,
        dir: dir.to_owned(),
    }
}

/// Wait until `f` returns Some, or panic with the tor log tail.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    log: &Path,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    let start = Instant::now();
    loop {
        if let Some(v) = f() {
            return v;
        }
        if start.elapsed() > timeout {
            let tail = std::fs::read_to_string(log).unwrap_or_default();
            let tail: Vec<&str> = tail.lines().rev().take(30).collect();
            panic!(
                "timed out waiting for {what}; log tail:\n{}",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
