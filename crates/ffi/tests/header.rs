//! The committed C header is what cbindgen generates from the crate now:
//! the test fails when `include/onionmix.h` is stale. To regenerate it:
//! `ONIONMIX_BLESS_HEADER=1 cargo test --release -p onionmix-ffi --test header`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::process::Command;

#[test]
fn committed_header_is_current() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).expect("cbindgen.toml");
    let bindings = cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/lib.rs"))
        .generate()
        .expect("cbindgen parses the crate");
    let mut fresh = Vec::new();
    bindings.write(&mut fresh);
    let path = dir.join("include/onionmix.h");
    if std::env::var_os("ONIONMIX_BLESS_HEADER").is_some() {
        std::fs::write(&path, &fresh).unwrap();
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == fresh,
        "{} is stale: regenerate it with \
         `ONIONMIX_BLESS_HEADER=1 cargo test --release -p onionmix-ffi --test header`",
        path.display()
    );
    let text = String::from_utf8(fresh).unwrap();
    // Every exported function is declared.
    for f in [
        "onionmix_version",
        "onionmix_last_error_message",
        "onionmix_error_name",
        "onionmix_log_init",
        "onionmix_client_start",
        "onionmix_client_start_with_socks",
        "onionmix_client_socks_port",
        "onionmix_client_wait_bootstrapped",
        "onionmix_client_bootstrap_percent",
        "onionmix_client_connect",
        "onionmix_client_new_identity",
        "onionmix_client_stop",
        "onionmix_stream_set_timeout",
        "onionmix_stream_read",
        "onionmix_stream_write",
        "onionmix_stream_close",
    ] {
        assert!(text.contains(&format!("{f}(")), "{f} missing");
    }
    assert!(text.contains("typedef struct onionmix_client onionmix_client;"));
}

/// The header compiles as C99 and as C++ (`cc`, `c++`; skipped with the
/// project's policy when there is no compiler).
#[test]
fn header_compiles_as_c_and_cpp() {
    let have = |c: &str| {
        Command::new(c)
            .arg("--version")
            .output()
            .map_err(|e| format!("`{c}`: {e}"))
            .and_then(|o| {
                o.status
                    .success()
                    .then_some(())
                    .ok_or(format!("`{c}` failed"))
            })
            .map_err(|e| format!("{e}; install a C/C++ compiler: apt-get install build-essential"))
    };
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("use.c");
    std::fs::write(
        &src,
        "#include \"onionmix.h\"\n\
         int main(void) {\n\
           onionmix_client *c = 0;\n\
           onionmix_error e = onionmix_client_stop(&c);\n\
           return e == ONIONMIX_ERROR_OK ? 0 : 1;\n\
         }\n",
    )
    .unwrap();
    for (compiler, args) in [
        ("cc", &["-std=c99", "-x", "c"][..]),
        ("cc", &["-std=c11", "-x", "c"][..]),
        ("c++", &["-std=c++11", "-x", "c++"][..]),
    ] {
        if !onionmix_testsupport::require_or_skip("header_compiles_as_c_and_cpp", have(compiler)) {
            return;
        }
        let o = Command::new(compiler)
            .args(["-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only"])
            .args(args)
            .arg("-I")
            .arg(dir.join("include"))
            .arg(&src)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{compiler} {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    }
}
