//! Helpers shared by the workspace's tests (see README.md).

pub mod ports;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// The environment variable that turns "skip" into "fail" (CI sets it).
pub const REQUIRE_ENV: &str = "ONIONMIX_REQUIRE_INTEROP";

/// True when a missing interop peer must fail the test.
pub fn interop_required() -> bool {
    std::env::var(REQUIRE_ENV).as_deref() == Ok("1")
}

/// The project's policy for a missing peer: `Ok` -> true; otherwise print
/// `SKIP <test>: <why>` and return false, or panic when
/// `ONIONMIX_REQUIRE_INTEROP=1`.
pub fn require_or_skip(test: &str, check: Result<(), String>) -> bool {
    match check {
        Ok(()) => true,
        Err(why) => {
            if interop_required() {
                panic!("{test}: {REQUIRE_ENV}=1 but {why}");
            }
            eprintln!("SKIP {test}: {why}");
            false
        }
    }
}

fn runs(cmd: &str, arg: &str) -> bool {
    Command::new(cmd)
        .arg(arg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// Whether stock tor (`tor` and `tor-gencert`) is installed.
pub fn tor_check() -> Result<(), String> {
    let tor_ok = Command::new("tor")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if tor_ok && runs("tor-gencert", "--help") {
        Ok(())
    } else {
        Err("stock tor (`tor`, `tor-gencert`) is not installed; install it with: apt-get install -y tor".into())
    }
}

/// [`require_or_skip`] for stock tor.
pub fn tor_available(test: &str) -> bool {
    require_or_skip(test, tor_check())
}

/// Whether this process runs as root (network namespaces, TUN devices).
pub fn root_check() -> Result<(), String> {
    let root = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
        .unwrap_or(false);
    if root {
        Ok(())
    } else {
        Err("needs root for network namespaces and TUN devices (run the tests as root, e.g. `sudo -E cargo test ...`)".into())
    }
}

/// Root, and every program in `programs` runs (`<program> -V`); the error
/// names what is missing and `install` (e.g. `apt-get install curl`).
pub fn root_and_tools_check(programs: &[&str], install: &str) -> Result<(), String> {
    root_check()?;
    for p in programs {
        let ran = std::process::Command::new(p)
            .arg("-V")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status()
            .is_ok();
        if !ran {
            return Err(format!("{p} missing: {install}"));
        }
    }
    Ok(())
}

/// [`require_or_skip`] for root.
pub fn root_available(test: &str) -> bool {
    require_or_skip(test, root_check())
}

/// The repository's top directory.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The Python interpreter of the sphinxmix reference venv
/// (`ONIONMIX_SPHINXMIX_PYTHON`, or `.venv/bin/python` at the top), checked
/// by importing the reference.
pub fn sphinxmix_python_check() -> Result<PathBuf, String> {
    let py = std::env::var_os("ONIONMIX_SPHINXMIX_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv/bin/python"));
    let ok = py.exists()
        && Command::new(&py)
            .args(["-c", "import sphinxmix, petlib.pack"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if ok {
        Ok(py)
    } else {
        Err(format!(
            "the Python sphinxmix reference is not at {} (run `bash scripts/sphinxmix/setup-venv.sh` or set ONIONMIX_SPHINXMIX_PYTHON)",
            py.display()
        ))
    }
}

/// [`require_or_skip`] for the sphinxmix reference; its Python on success.
pub fn sphinxmix_python(test: &str) -> Option<PathBuf> {
    match sphinxmix_python_check() {
        Ok(p) => Some(p),
        Err(e) => {
            require_or_skip(test, Err(e));
            None
        }
    }
}

/// The Python interpreter of the stem venv (`ONIONMIX_STEM_PYTHON`, or
/// `.venv-stem/bin/python` at the top), checked by importing stem 1.8.2.
pub fn stem_python_check() -> Result<PathBuf, String> {
    let py = std::env::var_os("ONIONMIX_STEM_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".venv-stem/bin/python"));
    let ok = py.exists()
        && Command::new(&py)
            .args([
                "-c",
                "import stem, stem.control; assert stem.__version__ == '1.8.2'",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
    if ok {
        Ok(py)
    } else {
        Err(format!(
            "stem 1.8.2 is not at {} (run `bash scripts/stem/setup-venv.sh` or set ONIONMIX_STEM_PYTHON)",
            py.display()
        ))
    }
}

/// Whether the Go toolchain is installed (for the Bine interop program).
pub fn go_check() -> Result<PathBuf, String> {
    let go = std::env::var_os("ONIONMIX_GO")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("go"));
    let ok = Command::new(&go)
        .arg("version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        Ok(go)
    } else {
        Err("the Go toolchain is not installed (for the Bine program in scripts/bine); install it with: apt-get install -y golang-go".into())
    }
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Hold this for the whole of a heavy test (one that starts a private
/// network or an emulator): heavy tests of one binary then run one after
/// another. A test that panicked while holding it does not poison the rest.
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// Poll `f` every `every` until it gives a value; panic naming `what` after
/// `timeout`. Deadlines should be generous: a loaded 2-core machine is slow,
/// and the test is about the behaviour, not the bound.
pub fn wait_for<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Option<T>,
) -> T {
    poll(what, timeout, every, || f().ok_or(None))
}

/// As [`wait_for`], but `f` says what it saw when it is not done yet
/// (`Err`), and the panic after `timeout` quotes the last of it: a test
/// that times out then shows how far it got.
pub fn wait_for_seen<T, S: std::fmt::Debug>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Result<T, S>,
) -> T {
    poll(what, timeout, every, || {
        f().map_err(|s| Some(format!("{s:?}")))
    })
}

fn poll<T>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut f: impl FnMut() -> Result<T, Option<String>>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        match f() {
            Ok(v) => return v,
            Err(seen) => assert!(
                Instant::now() < deadline,
                "timed out after {timeout:?}: {what}{}",
                seen.map(|s| format!(" (last seen: {s})"))
                    .unwrap_or_default()
            ),
        }
        std::thread::sleep(every);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_for_returns_the_value() {
        let mut n = 0;
        let v = wait_for(
            "counter",
            Duration::from_secs(5),
            Duration::from_millis(1),
            || {
                n += 1;
                (n >= 3).then_some(n)
            },
        );
        assert_eq!(v, 3);
    }

    #[test]
    #[should_panic(expected = "timed out")]
    fn wait_for_panics_after_the_deadline() {
        wait_for::<()>(
            "never",
            Duration::from_millis(20),
            Duration::from_millis(5),
            || None,
        );
    }

    #[test]
    fn skip_unless_required() {
        if !interop_required() {
            assert!(!require_or_skip("t", Err("missing".into())));
        }
        assert!(require_or_skip("t", Ok(())));
    }
}
