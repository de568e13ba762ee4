//! Helpers for tests that start stock `tor` processes, and in-process
//! onionmix relays (`inproc`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: failures should panic
#![allow(dead_code)]

pub mod inproc;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

#[allow(unused_imports)]
pub use onionmix_testsupport::tor_available;

/// A free loopback port (from the shared allocator: never handed out twice).
pub fn free_port() -> u16 {
    onionmix_testsupport::ports::free_port("127.0.0.1").expect("a free port")
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
