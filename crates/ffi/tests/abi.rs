//! The C ABI called as C would call it, without a network: NULL pointers,
//! bad UTF-8, a bad configuration path, a client that cannot bootstrap
//! (its one authority listens nowhere), connect before the bootstrap with
//! a short timeout, stop and close twice, streams outliving nothing.
#![allow(unsafe_code)] // raw pointers are what this ABI takes
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::{CStr, CString, c_char};
use std::ptr;
use std::time::{Duration, Instant};

use onionmix::*;

fn last_error() -> String {
    let p = onionmix_last_error_message();
    assert!(!p.is_null(), "no last error message");
    // SAFETY: the library's NUL-terminated string, valid until the next call.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

fn c(s: &str) -> CString {
    CString::new(s).unwrap()
}

/// A client configuration whose one authority listens nowhere (SOCKS, if
/// opened, on any free loopback port).
fn unreachable_config(dir: &std::path::Path) -> CString {
    let text = format!(
        "data_dir = {:?}\ntesting_network = true\nsocks_listen = \"127.0.0.1:0\"\n[[authority]]\nnickname = \"a\"\n\
         v3ident = \"{}\"\nfingerprint = \"{}\"\ndir_addr = \"127.0.0.1:1\"\n\
         or_addr = \"127.0.0.1:2\"\n",
        dir.join("state"),
        "AB".repeat(20),
        "CD".repeat(20)
    );
    let path = dir.join("client.toml");
    std::fs::write(&path, text).unwrap();
    c(path.to_str().unwrap())
}

#[test]
fn version_and_error_names() {
    // SAFETY: a static NUL-terminated string.
    let v = unsafe { CStr::from_ptr(onionmix_version()) };
    assert_eq!(v.to_str().unwrap(), env!("CARGO_PKG_VERSION"));
    // SAFETY: as above.
    let n = unsafe { CStr::from_ptr(onionmix_error_name(OnionmixError::Timeout as i32)) };
    assert_eq!(n.to_str().unwrap(), "ONIONMIX_ERROR_TIMEOUT");
}

#[test]
fn null_pointers_are_refused() {
    let path = c("/nonexistent/client.toml");
    let mut client: *mut Client = ptr::null_mut();
    let mut stream: *mut Stream = ptr::null_mut();
    let mut buf = [0u8; 8];
    // SAFETY: every pointer is NULL or valid; NULLs are what is tested.
    unsafe {
        assert_eq!(
            onionmix_client_start(ptr::null(), ptr::null(), &mut client),
            OnionmixError::NullArgument
        );
        assert!(last_error().contains("config_path"), "{}", last_error());
        assert_eq!(
            onionmix_client_start(path.as_ptr(), ptr::null(), ptr::null_mut()),
            OnionmixError::NullArgument
        );
        assert_eq!(
            onionmix_client_wait_bootstrapped(ptr::null(), 1),
            OnionmixError::NullArgument
        );
        assert_eq!(
            onionmix_client_bootstrap_percent(ptr::null()),
            OnionmixError::NullArgument as i32
        );
        assert_eq!(
            onionmix_client_connect(ptr::null(), path.as_ptr(), 80, 0, 1, &mut stream),
            OnionmixError::NullArgument
        );
        assert!(stream.is_null());
        assert_eq!(
            onionmix_client_new_identity(ptr::null()),
            OnionmixError::NullArgument
        );
        assert_eq!(
            onionmix_client_stop(ptr::null_mut()),
            OnionmixError::NullArgument
        );
        assert_eq!(
            onionmix_stream_read(ptr::null(), buf.as_mut_ptr(), buf.len()),
            OnionmixError::NullArgument as isize
        );
        assert_eq!(
            onionmix_stream_write(ptr::null(), buf.as_ptr(), buf.len()),
            OnionmixError::NullArgument as isize
        );
        assert_eq!(
            onionmix_stream_set_timeout(ptr::null(), 5),
            OnionmixError::NullArgument
        );
        assert_eq!(
            onionmix_stream_close(ptr::null_mut()),
            OnionmixError::NullArgument
        );
        // A NULL client or stream behind the pointer: already freed.
        assert_eq!(onionmix_client_stop(&mut client), OnionmixError::Ok);
        assert_eq!(onionmix_stream_close(&mut stream), OnionmixError::Ok);
    }
    assert!(onionmix_last_error_message().is_null());
}

#[test]
fn bad_utf8_and_bad_config_paths() {
    let bad = [b'/', b't', 0xff, 0xfe, 0];
    let mut client: *mut Client = ptr::dangling_mut(); // overwritten
    // SAFETY: NUL-terminated strings and a writable out pointer.
    unsafe {
        assert_eq!(
            onionmix_client_start(bad.as_ptr().cast::<c_char>(), ptr::null(), &mut client),
            OnionmixError::InvalidUtf8
        );
        assert!(client.is_null(), "out is cleared on failure");
        assert!(last_error().contains("UTF-8"), "{}", last_error());
        let missing = c("/nonexistent/onionmix/client.toml");
        assert_eq!(
            onionmix_client_start(missing.as_ptr(), ptr::null(), &mut client),
            OnionmixError::Config
        );
        assert!(last_error().contains("/nonexistent"), "{}", last_error());
        let tmp = tempfile::tempdir().unwrap();
        let junk = tmp.path().join("junk.toml");
        std::fs::write(&junk, "this is not [toml").unwrap();
        let junk = c(junk.to_str().unwrap());
        assert_eq!(
            onionmix_client_start(junk.as_ptr(), ptr::null(), &mut client),
            OnionmixError::Config
        );
        // A good configuration with a bad data_dir string, then with a
        // state directory that cannot be made (under a file).
        let cfg = unreachable_config(tmp.path());
        assert_eq!(
            onionmix_client_start(cfg.as_ptr(), bad.as_ptr().cast::<c_char>(), &mut client),
            OnionmixError::InvalidUtf8
        );
        let file = tmp.path().join("a-file");
        std::fs::write(&file, b"x").unwrap();
        let under_file = c(file.join("state").to_str().unwrap());
        assert_eq!(
            onionmix_client_start(cfg.as_ptr(), under_file.as_ptr(), &mut client),
            OnionmixError::Setup
        );
        assert!(client.is_null());
    }
}

#[test]
fn a_client_that_cannot_bootstrap() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = unreachable_config(tmp.path());
    let dir = c(tmp.path().join("ffi-state").to_str().unwrap());
    let mut client: *mut Client = ptr::null_mut();
    let mut stream: *mut Stream = ptr::null_mut();
    // SAFETY: valid strings, out pointers and a live client until stopped.
    unsafe {
        assert_eq!(
            onionmix_client_start(cfg.as_ptr(), dir.as_ptr(), &mut client),
            OnionmixError::Ok,
            "{:?}",
            onionmix_last_error_message()
        );
        assert!(!client.is_null());
        assert!(
            tmp.path().join("ffi-state").is_dir(),
            "data_dir argument used"
        );
        assert_eq!(onionmix_client_socks_port(client), 0, "no SOCKS port");
        let p = onionmix_client_bootstrap_percent(client);
        assert!((0..100).contains(&p), "{p}");
        assert_eq!(
            onionmix_client_wait_bootstrapped(client, 200),
            OnionmixError::BootstrapTimeout
        );
        assert!(last_error().contains("200 ms"), "{}", last_error());

        // Refused targets, before anything is sent.
        let host = c("example.com");
        assert_eq!(
            onionmix_client_connect(client, host.as_ptr(), 0, 0, 1000, &mut stream),
            OnionmixError::BadTarget
        );
        let onion = c("bad.onion");
        assert_eq!(
            onionmix_client_connect(client, onion.as_ptr(), 80, 0, 1000, &mut stream),
            OnionmixError::BadOnion
        );
        let exit = c("x.exit");
        assert_eq!(
            onionmix_client_connect(client, exit.as_ptr(), 80, 7, 1000, &mut stream),
            OnionmixError::ExitNotation
        );
        let bad = [b'h', 0xc3, 0];
        assert_eq!(
            onionmix_client_connect(
                client,
                bad.as_ptr().cast::<c_char>(),
                80,
                0,
                1000,
                &mut stream
            ),
            OnionmixError::InvalidUtf8
        );
        assert_eq!(
            onionmix_client_connect(client, host.as_ptr(), 80, 0, 1000, ptr::null_mut()),
            OnionmixError::NullArgument
        );
        // Connect before the bootstrap: waits for it, within the timeout.
        let t0 = Instant::now();
        assert_eq!(
            onionmix_client_connect(client, host.as_ptr(), 80, 0, 300, &mut stream),
            OnionmixError::Timeout
        );
        assert!(t0.elapsed() >= Duration::from_millis(300));
        assert!(stream.is_null());

        // Stop frees the client and clears the pointer; twice is harmless.
        let t0 = Instant::now();
        assert_eq!(onionmix_client_stop(&mut client), OnionmixError::Ok);
        assert!(client.is_null());
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "stop waited out its grace"
        );
        assert_eq!(onionmix_client_stop(&mut client), OnionmixError::Ok);

        // The state directory is free again: a second client starts.
        assert_eq!(
            onionmix_client_start(cfg.as_ptr(), dir.as_ptr(), &mut client),
            OnionmixError::Ok
        );
        assert_eq!(onionmix_client_stop(&mut client), OnionmixError::Ok);
    }
}

#[test]
fn blocking_calls_inside_a_runtime_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = unreachable_config(tmp.path());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut client: *mut Client = ptr::null_mut();
    let code = rt.block_on(async {
        // SAFETY: valid string and out pointer.
        unsafe { onionmix_client_start(cfg.as_ptr(), ptr::null(), &mut client) }
    });
    assert_eq!(code, OnionmixError::InsideRuntime);
    assert!(client.is_null());
}

#[test]
fn socks_port_mode() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = unreachable_config(tmp.path());
    let mut client: *mut Client = ptr::null_mut();
    // SAFETY: valid strings, out pointer and a live client until stopped.
    unsafe {
        assert_eq!(
            onionmix_client_socks_port(ptr::null()),
            OnionmixError::NullArgument as i32
        );
        assert_eq!(
            onionmix_client_start_with_socks(cfg.as_ptr(), ptr::null(), ptr::null_mut()),
            OnionmixError::NullArgument
        );
        assert_eq!(
            onionmix_client_start_with_socks(cfg.as_ptr(), ptr::null(), &mut client),
            OnionmixError::Ok
        );
        let port = onionmix_client_socks_port(client);
        assert!(port > 0 && port <= 65535, "{port}");
        let port = u16::try_from(port).unwrap();
        // A SOCKS5 greeting (no authentication) gets the method choice.
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        s.write_all(&[5, 1, 0]).unwrap();
        let mut reply = [0u8; 2];
        s.read_exact(&mut reply).unwrap();
        assert_eq!(reply, [5, 0]);
        drop(s);
        assert_eq!(onionmix_client_stop(&mut client), OnionmixError::Ok);
        // Stopped: the port is closed.
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err());
    }
}
