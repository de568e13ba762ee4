//! Records the commit the binary is built from (`git describe --always
//! --dirty`, or `unknown` outside a git checkout) as `ONIONMIX_GIT_COMMIT`,
//! so the records `measure` and `compare` write name the code that ran,
//! not whatever the checkout holds when a long run ends.

use std::path::Path;
use std::process::Command;

fn main() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    // Described again when the commit, the index or the sources change.
    // Only paths that exist: cargo reruns a script for a missing one on
    // every build.
    let mut watch = vec![
        root.join("crates"),
        root.join("Cargo.toml"),
        root.join("Cargo.lock"),
    ];
    if let Some(git_dir) = git(&root, &["rev-parse", "--absolute-git-dir"]) {
        let g = Path::new(&git_dir);
        watch.push(g.join("HEAD"));
        watch.push(g.join("index"));
        watch.push(g.join("packed-refs"));
        if let Some(r) = git(&root, &["symbolic-ref", "-q", "HEAD"]) {
            watch.push(g.join(r));
        }
    }
    for p in watch.iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let commit = git(&root, &["describe", "--always", "--dirty"])
        .filter(|c| c.bytes().all(|b| b.is_ascii_graphic()))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=ONIONMIX_GIT_COMMIT={commit}");
}

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    if !out.status.success() {
        return None;
    }
    let s = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (!s.is_empty()).then_some(s)
}
