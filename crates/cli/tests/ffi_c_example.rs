//! The embedding examples on a private all-onionmix network: the C ABI
//! (`onionmix-ffi`) from C and the Rust API's own example. Builds the
//! library and the Rust example (`cargo build --release --workspace --lib
//! --examples`, up to date after `cargo test --workspace`), compiles
//! `crates/ffi/examples/c/fetch.c` with `cc` twice (linked with
//! `libonionmix.a`, and with `libonionmix.so` through an rpath), and runs
//! the three programs: each starts the client in its own process,
//! bootstraps, fetches 1 MiB from the sink over a stream and stops the
//! client. The body each writes must be the sink's 1 MiB with the right
//! SHA-256. A fourth program, `crates/ffi/tests/c/abi_net.c`, checks the
//! rest of the ABI from C on the same network (isolation tokens, a read
//! blocked in one thread while another writes, new identity, a read
//! timeout, streams outliving their client).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

/// Bytes each program fetches.
const BODY: u64 = 1 << 20;
/// Time a C program may take (bootstrap, fetch, stop) on a loaded machine.
const RUN_TIMEOUT: Duration = Duration::from_secs(600);

/// Whether a C compiler is here, with the project's skip/require policy.
fn cc_available() -> bool {
    onionmix_testsupport::require_or_skip(
        "ffi_c_example",
        Command::new("cc")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .map_err(|e| e.to_string())
            .and_then(|s| s.success().then_some(()).ok_or(s.to_string()))
            .map_err(|e| {
                format!("no C compiler (`cc`: {e}); install one: apt-get install build-essential")
            }),
    )
}

/// Build the static and shared libraries and the Rust example into the
/// target directory this test runs from; returns the directory holding
/// them (`<target>/release`).
fn build_libraries() -> PathBuf {
    // <target>/release/deps/ffi_c_example-<hash>
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test binary lives in <target>/<profile>/deps")
        .to_path_buf();
    assert_eq!(
        profile_dir.file_name().and_then(|n| n.to_str()),
        Some("release"),
        "run this test with --release (it builds the library in the same profile)"
    );
    let target_dir = profile_dir.parent().unwrap();
    let mut cargo = Command::new(env!("CARGO"));
    // Without the variables cargo set for this test (some build scripts
    // rerun when e.g. CARGO_MANIFEST_DIR changes, which would rebuild
    // their crates here and again in the next ordinary build).
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if k.starts_with("CARGO_PKG_")
            || k.starts_with("CARGO_BIN_")
            || [
                "CARGO_MANIFEST_DIR",
                "CARGO_MANIFEST_PATH",
                "CARGO_CRATE_NAME",
                "CARGO_PRIMARY_PACKAGE",
                "CARGO_TARGET_TMPDIR",
                "CARGO_RUSTC_CURRENT_DIR",
            ]
            .contains(&k.as_ref())
        {
            cargo.env_remove(k.as_ref());
        }
    }
    // The whole workspace's libraries and examples: the same feature
    // resolution as `cargo test --workspace`, whose build already made
    // them (`-p onionmix-ffi -p onionmix-embed` alone resolves features
    // differently and rebuilt 17 crates, minutes on a 2-core machine).
    let status = cargo
        .args(["build", "--release", "--workspace", "--lib", "--examples"])
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(onionmix_testsupport::repo_root())
        .status()
        .expect("cargo runs");
    assert!(status.success(), "building onionmix-ffi failed: {status}");
    for lib in ["libonionmix.a", "libonionmix.so", "examples/fetch"] {
        assert!(profile_dir.join(lib).is_file(), "{lib} not built");
    }
    profile_dir
}

/// Compile `src` (under `crates/ffi`) into `out`, linked with `link`
/// (arguments after the source file).
fn compile(src: &str, out: &Path, link: &[String]) {
    let ffi = onionmix_testsupport::repo_root().join("crates/ffi");
    let o = Command::new("cc")
        .args(["-O2", "-Wall", "-Wextra", "-Werror", "-pthread", "-I"])
        .arg(ffi.join("include"))
        .arg(ffi.join(src))
        .args(link)
        .arg("-o")
        .arg(out)
        .output()
        .expect("cc runs");
    assert!(
        o.status.success(),
        "cc failed for {}:\n{}",
        out.display(),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Run `cmd` to its end within [`RUN_TIMEOUT`] (killed past it).
fn run(mut cmd: Command, who: &str) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let t0 = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            return child.wait_with_output().unwrap();
        }
        if t0.elapsed() > RUN_TIMEOUT {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{who}: still running after {RUN_TIMEOUT:?}; stderr:\n{}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn rust_and_c_examples_fetch_1_mib() {
    if !cc_available() {
        return;
    }
    let _serial = common_net::serial();
    let libdir = build_libraries();
    let tmp = tempfile::tempdir().unwrap();
    let static_bin = tmp.path().join("fetch-static");
    let shared_bin = tmp.path().join("fetch-shared");
    // The system libraries `cargo rustc -p onionmix-ffi --crate-type
    // staticlib -- --print native-static-libs` reports on Linux.
    let mut link = vec![libdir.join("libonionmix.a").display().to_string()];
    link.extend(
        [
            "-lgcc_s",
            "-lutil",
            "-lrt",
            "-lpthread",
            "-lm",
            "-ldl",
            "-lc",
        ]
        .map(String::from),
    );
    compile("examples/c/fetch.c", &static_bin, &link);
    let shared = [
        format!("-L{}", libdir.display()),
        "-lonionmix".into(),
        format!("-Wl,-rpath,{}", libdir.display()),
    ];
    compile("examples/c/fetch.c", &shared_bin, &shared);
    let abi_bin = tmp.path().join("abi-net");
    compile("tests/c/abi_net.c", &abi_bin, &shared);

    let net = common_net::start("onionmix-basic", &tmp.path().join("net"));
    let info = net.info().clone();
    let sink = info.sink.as_ref().expect("sink").http;
    // The launcher's client configuration names the network's authorities;
    // the C programs' clients get no control or metrics port (the
    // launcher's client holds those) and a state directory each.
    let node = info.clients(None).into_iter().next().expect("a client");
    let text = std::fs::read_to_string(node.data_dir.join("client.toml")).unwrap();
    let mut cfg: toml::Table = text.parse().unwrap();
    for key in ["control_port", "control_socket", "metrics_port"] {
        cfg.remove(key);
    }
    cfg.insert(
        "data_dir".into(),
        toml::Value::String(tmp.path().join("unused").display().to_string()),
    );
    let cfg_path = tmp.path().join("client.toml");
    std::fs::write(&cfg_path, toml::to_string(&cfg).unwrap()).unwrap();

    let want = onionmix_testbed::sink::digest(BODY);
    for (bin, kind) in [(&static_bin, "static"), (&shared_bin, "shared")] {
        let body_path = tmp.path().join(format!("body-{kind}"));
        let mut cmd = Command::new(bin);
        cmd.arg(&cfg_path)
            .arg(tmp.path().join(format!("state-{kind}")))
            .arg(sink.ip().to_string())
            .arg(sink.port().to_string())
            .arg(format!("/bytes/{BODY}"))
            .arg(&body_path);
        // The static build also shows the library's log (onionmix_log_init).
        if kind == "static" {
            cmd.env("ONIONMIX_LOG", "info");
        }
        let o = run(cmd, kind);
        let stdout = String::from_utf8_lossy(&o.stdout);
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.success(),
            "{kind}: fetch failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
            o.status
        );
        assert!(stdout.starts_with("HTTP/1.1 200"), "{kind}: {stdout}");
        assert!(stderr.contains("bootstrapped 100%"), "{kind}: {stderr}");
        assert!(stderr.contains("client stopped"), "{kind}: {stderr}");
        if kind == "static" {
            assert!(
                stderr.contains("INFO") && stderr.contains("embedded onionmix client started"),
                "{kind}: no log lines: {stderr}"
            );
        }
        let body = std::fs::read(&body_path).unwrap();
        assert_eq!(body.len() as u64, BODY, "{kind}: body length");
        let got = Sha256::digest(&body);
        assert_eq!(got.as_slice(), want.as_slice(), "{kind}: SHA-256 mismatch");
        // The program saw the sink's own digest header, and it agrees.
        assert!(
            stdout.contains(&format!("x-onionmix-sha256: {}", hex::encode(want))),
            "{kind}: {stdout}"
        );
        eprintln!("C example, {kind} library: 1 MiB verified");
    }

    // The rest of the ABI from C: isolation tokens, a blocked read while
    // another thread writes, new identity, a read timeout, streams
    // outliving their client.
    let mut cmd = Command::new(&abi_bin);
    cmd.arg(&cfg_path)
        .arg(tmp.path().join("state-abi"))
        .arg(sink.ip().to_string())
        .arg(sink.port().to_string());
    let o = run(cmd, "abi_net");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success() && stdout.contains("abi_net: all checks passed"),
        "abi_net failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    eprintln!("ABI from C: all checks passed");

    // The Rust example takes its state directory from the configuration.
    cfg.insert(
        "data_dir".into(),
        toml::Value::String(tmp.path().join("state-rust").display().to_string()),
    );
    std::fs::write(&cfg_path, toml::to_string(&cfg).unwrap()).unwrap();
    let body_path = tmp.path().join("body-rust");
    let mut cmd = Command::new(libdir.join("examples/fetch"));
    cmd.arg(&cfg_path)
        .arg(format!("http://{sink}/bytes/{BODY}"))
        .arg(&body_path);
    let o = run(cmd, "rust example");
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "Rust example failed ({}):\nstdout:\n{stdout}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(stdout.starts_with("HTTP/1.1 200"), "{stdout}");
    let body = std::fs::read(&body_path).unwrap();
    assert_eq!(body.len() as u64, BODY, "Rust example: body length");
    assert_eq!(
        Sha256::digest(&body).as_slice(),
        want.as_slice(),
        "Rust example: SHA-256 mismatch"
    );
    eprintln!("Rust example: 1 MiB verified");
    drop(net);
}
