//! Crash-safe file replacement: see the crate README.
//!
//! The temporary file lives in the target's directory (so the rename is
//! atomic), starts with a dot (directory scanners that skip dot files never
//! pick it up) and is named after the process and a per-process counter, so
//! concurrent writers of one target never write into each other's file; the
//! last rename wins and every reader sees one whole version.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// The temporary name used for one write of `path`.
fn temp_path(path: &Path) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let mut tmp = std::ffi::OsString::from(".");
    tmp.push(name);
    tmp.push(format!(".{}.{n}.tmp", std::process::id()));
    Ok(path.with_file_name(tmp))
}

fn write_with(path: &Path, data: &[u8], private: bool) -> io::Result<()> {
    let tmp = temp_path(path)?;
    let result = (|| {
        let mut opts = OpenOptions::new();
        opts.write(true).create_new(true);
        #[cfg(unix)]
        if private {
            use std::os::unix::fs::OpenOptionsExt;
            opts.mode(0o600);
        }
        #[cfg(not(unix))]
        let _ = private;
        let mut f = opts.open(&tmp)?;
        f.write_all(data)?;
        f.sync_all()?;
        drop(f);
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
        return result;
    }
    // Make the rename itself durable; a directory that cannot be opened
    // or synced (some file systems) does not undo the write.
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// Replace `path` with `data` atomically and durably.
pub fn write_atomic(path: &Path, data: impl AsRef<[u8]>) -> io::Result<()> {
    write_with(path, data.as_ref(), false)
}

/// [`write_atomic`] for secrets: the new file has mode 0600 from the start.
pub fn write_private_atomic(path: &Path, data: impl AsRef<[u8]>) -> io::Result<()> {
    write_with(path, data.as_ref(), true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_and_leaves_no_temporary_files() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("state.json");
        write_atomic(&p, "one").unwrap();
        write_atomic(&p, b"two").unwrap();
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "two");
        let names: Vec<_> = std::fs::read_dir(d.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
    }

    #[test]
    fn concurrent_writers_never_mix_their_data() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("guards.json");
        let bodies: Vec<Vec<u8>> = (0..8u8).map(|i| vec![b'a' + i; 64 * 1024]).collect();
        let (p, bodies) = (&p, &bodies);
        std::thread::scope(|s| {
            for b in bodies {
                s.spawn(move || {
                    for _ in 0..20 {
                        write_atomic(p, b).unwrap();
                        let now = std::fs::read(p).unwrap();
                        assert!(bodies.contains(&now), "a torn or mixed file");
                    }
                });
            }
        });
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_failed_write_keeps_the_old_file() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("x");
        write_atomic(&p, "old").unwrap();
        // The target is now a non-empty directory: rename fails.
        let q = d.path().join("dir");
        std::fs::create_dir(&q).unwrap();
        std::fs::write(q.join("f"), "f").unwrap();
        assert!(write_atomic(&q, "new").is_err());
        assert_eq!(std::fs::read_to_string(&p).unwrap(), "old");
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 2);
        assert!(write_atomic(Path::new("/"), "x").is_err());
    }

    #[cfg(unix)]
    #[test]
    fn private_files_are_0600() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("secret_key");
        write_private_atomic(&p, "k").unwrap();
        let mode = std::fs::metadata(&p).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
