//! Starting, recognising and stopping node processes by pid.
//!
//! A process is identified by (pid, start time) so `stop` never signals an
//! unrelated process that reused a pid.
#![allow(unsafe_code)] // kill(2) through libc; see `signal`.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The start time of `pid` (field 22 of /proc/<pid>/stat), if it exists and
/// is not a zombie.
pub fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state).
    if fields.first() == Some(&"Z") {
        return None;
    }
    fields.get(19)?.parse().ok()
}

/// CPU time process `pid` has used so far, all its threads, user and
/// system (fields 14 and 15 of /proc/<pid>/stat).
pub fn cpu_time(pid: u32) -> Option<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.get(stat.rfind(')')? + 2..)?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3: utime is field 14, stime 15.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    // SAFETY: sysconf has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|h| *h > 0)?;
    let ticks = utime.checked_add(stime)?;
    Some(Duration::from_secs_f64(ticks as f64 / hz as f64))
}

/// Whether the process we started is still running.
pub fn alive(pid: u32, start: u64) -> bool {
    start_time(pid) == Some(start)
}

fn signal(pid: u32, sig: i32) {
    let Ok(p) = i32::try_from(pid) else { return };
    if p <= 1 {
        return;
    }
    // SAFETY: kill(2) has no memory-safety preconditions; we only pass a
    // positive pid that we verified belongs to a process we started.
    unsafe {
        libc::kill(p, sig);
    }
}

/// Send SIGHUP to a process we started (tor: reload the configuration and
/// retry directory downloads at once). Returns whether it was sent.
pub fn reload(pid: u32, start: u64) -> bool {
    if !alive(pid, start) {
        return false;
    }
    signal(pid, libc::SIGHUP);
    true
}

/// Stop a process we started: SIGTERM, wait up to `grace`, then SIGKILL.
/// Returns true if it is gone.
pub fn stop(pid: u32, start: u64, grace: Duration) -> bool {
    if !alive(pid, start) {
        return true;
    }
    signal(pid, libc::SIGTERM);
    let t = Instant::now();
    while t.elapsed() < grace {
        if !alive(pid, start) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    signal(pid, libc::SIGKILL);
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        if !alive(pid, start) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

/// Spawn `cmd` detached from the terminal's process group, with stdout and
/// stderr appended to `log`.
pub fn spawn(mut cmd: Command, log: &Path) -> std::io::Result<Child> {
    use std::os::unix::process::CommandExt;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    let f2 = f.try_clone()?;
    cmd.stdin(Stdio::null())
        .stdout(f)
        .stderr(f2)
        .process_group(0);
    cmd.spawn()
}

/// The last `n` lines of a file (for error messages).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    let start = lines.len().saturating_sub(n);
    lines[start..].join("\n")
}

pub use onionmix_testsupport::ports::{PORT_RANGE, free_port};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_and_stop_a_process() {
        let tmp = tempfile::tempdir().unwrap();
        let mut c = Command::new("sleep");
        c.arg("30");
        let mut child = spawn(c, &tmp.path().join("log")).unwrap();
        let pid = child.id();
        let st = start_time(pid).unwrap();
        assert!(alive(pid, st));
        // A wrong start time is never signalled.
        assert!(!alive(pid, st + 1));
        let waiter = std::thread::spawn(move || child.wait());
        assert!(stop(pid, st, Duration::from_secs(5)));
        let _ = waiter.join();
        assert!(!alive(pid, st));
    }
}
