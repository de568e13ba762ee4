//! `onionmix_log_init` (in a test binary of its own: the logger is
//! process-wide): filter and UTF-8 checks, lines reaching a C callback with
//! its context, and a second installation refused.
#![allow(unsafe_code)] // raw pointers and an extern "C" callback are what this ABI takes
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::{CStr, CString, c_char, c_void};
use std::ptr;
use std::sync::Mutex;

use onionmix::*;

static LINES: Mutex<Vec<String>> = Mutex::new(Vec::new());
const CTX: usize = 0x5eed;

unsafe extern "C" fn collect(line: *const c_char, ctx: *mut c_void) {
    assert_eq!(ctx as usize, CTX);
    // SAFETY: the library passes a NUL-terminated line valid for the call.
    let s = unsafe { CStr::from_ptr(line) }
        .to_string_lossy()
        .into_owned();
    LINES.lock().unwrap().push(s);
}

#[test]
fn log_lines_reach_the_callback() {
    let bad_filter = CString::new("info,[[[").unwrap();
    let bad_utf8 = [0xffu8, 0];
    let filter = CString::new("info").unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = tmp.path().join("client.toml");
    std::fs::write(
        &cfg,
        format!(
            "data_dir = {:?}\ntesting_network = true\n[[authority]]\nnickname = \"a\"\n\
             v3ident = \"{}\"\nfingerprint = \"{}\"\ndir_addr = \"127.0.0.1:1\"\n\
             or_addr = \"127.0.0.1:2\"\n",
            tmp.path().join("state"),
            "AB".repeat(20),
            "CD".repeat(20)
        ),
    )
    .unwrap();
    let cfg = CString::new(cfg.to_str().unwrap()).unwrap();
    let mut client: *mut Client = ptr::null_mut();
    // SAFETY: valid strings, a thread-safe callback, a live client until
    // stopped.
    unsafe {
        assert_eq!(
            onionmix_log_init(bad_filter.as_ptr(), Some(collect), CTX as *mut c_void),
            OnionmixError::InvalidArgument
        );
        assert_eq!(
            onionmix_log_init(
                bad_utf8.as_ptr().cast::<c_char>(),
                Some(collect),
                CTX as *mut c_void
            ),
            OnionmixError::InvalidUtf8
        );
        assert_eq!(
            onionmix_log_init(filter.as_ptr(), Some(collect), CTX as *mut c_void),
            OnionmixError::Ok
        );
        assert_eq!(
            onionmix_log_init(ptr::null(), None, ptr::null_mut()),
            OnionmixError::Setup
        );
        assert_eq!(
            onionmix_client_start(cfg.as_ptr(), ptr::null(), &mut client),
            OnionmixError::Ok
        );
        assert_eq!(onionmix_client_stop(&mut client), OnionmixError::Ok);
    }
    let lines = LINES.lock().unwrap();
    assert!(
        lines
            .iter()
            .any(|l| l.contains("INFO") && l.contains("embedded onionmix client started")),
        "{lines:?}"
    );
    assert!(lines.iter().all(|l| !l.ends_with('\n')), "{lines:?}");
}
