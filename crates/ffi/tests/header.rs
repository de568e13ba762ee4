//! The committed C header is what cbindgen generates from the crate now:
//! the test fails when `include/onionmix.h` is stale. To regenerate it:
//! `ONIONMIX_BLESS_HEADER=1 cargo test --release -p onionmix-ffi --test header`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

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
