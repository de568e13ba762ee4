//! A C ABI over the embeddable onionmix client ([`onionmix_embed`]).
//!
//! Built as `libonionmix.a` and `libonionmix.so` (crate name `onionmix`);
//! the header is `include/onionmix.h`, generated from this crate by
//! cbindgen (`tests/header.rs` fails when the committed header is stale).
//! Every function is blocking: C, Swift and JNI callers call them from
//! their own threads, never from inside a Rust async runtime.
//!
//! Rules every entry point keeps:
//!
//! - no panic crosses the boundary: each body runs under
//!   [`std::panic::catch_unwind`] and a panic becomes
//!   `ONIONMIX_ERROR_INTERNAL` (the three that do not, `onionmix_version`,
//!   `onionmix_error_name` and `onionmix_last_error_message`, only read
//!   constants or a thread-local and cannot panic);
//! - every pointer argument is checked for NULL
//!   (`ONIONMIX_ERROR_NULL_ARGUMENT`), every string argument is checked
//!   to be UTF-8 (`ONIONMIX_ERROR_INVALID_UTF8`);
//! - a failed call leaves a message for
//!   [`onionmix_last_error_message`] on the calling thread.
//!
//! Ownership: a client comes from [`onionmix_client_start`] and is freed
//! by [`onionmix_client_stop`]; a stream comes from
//! [`onionmix_client_connect`] and is freed by [`onionmix_stream_close`]
//! (also after its client has stopped). Both free functions take the
//! address of the caller's pointer and set it to NULL, so a second call
//! does nothing. Strings returned by the library are static or owned by
//! it; the caller never frees them.

// A C ABI dereferences raw pointers the caller hands over, which needs
// `unsafe`; the workspace denies it everywhere else. Each unsafe block
// here is a few lines with a `// SAFETY:` comment.
#![allow(unsafe_code)]

mod client;
mod error;
mod guard;
mod log;
mod stream;

pub use client::{
    Client, onionmix_client_bootstrap_percent, onionmix_client_connect,
    onionmix_client_new_identity, onionmix_client_socks_port, onionmix_client_start,
    onionmix_client_start_with_socks, onionmix_client_stop, onionmix_client_wait_bootstrapped,
};
pub use error::{OnionmixError, onionmix_error_name, onionmix_last_error_message};
pub use log::{LogCallback, onionmix_log_init};
pub use stream::{
    Stream, onionmix_stream_close, onionmix_stream_read, onionmix_stream_set_timeout,
    onionmix_stream_write,
};

use std::ffi::c_char;

/// The library version (the workspace version), NUL-terminated.
const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), "\0");

/// The library's version, e.g. "0.1.0".
///
/// The string is static: never free it.
#[unsafe(no_mangle)]
pub extern "C" fn onionmix_version() -> *const c_char {
    // No guard: a pointer to a constant cannot panic.
    VERSION.as_ptr().cast()
}
