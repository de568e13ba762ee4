//! What every entry point shares: the panic guard, argument checks and
//! the helper runtime blocking calls run on.

use std::ffi::{CStr, c_char};
use std::future::Future;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::OnceLock;
use std::time::Duration;

use tokio::runtime::{Handle, Runtime};

use crate::error::{Failure, OnionmixError, clear_last_error, set_last_error};

/// Run an entry point's body: clears the thread's last error, turns a
/// panic into [`OnionmixError::Internal`] (a panic never unwinds into C)
/// and records a failure's message.
pub(crate) fn guard<T>(body: impl FnOnce() -> Result<T, Failure>) -> Result<T, OnionmixError> {
    clear_last_error();
    // AssertUnwindSafe: after a panic the library does not look at the
    // half-updated values again; the call reports INTERNAL and the
    // caller's objects stay as they were before it (or are leaked).
    let outcome = catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(Failure::new(
            OnionmixError::Internal,
            format!("internal error (a bug in onionmix): {what}"),
        ))
    });
    outcome.map_err(|f| set_last_error(&f))
}

/// [`guard`] for functions that return only a code.
pub(crate) fn guard_code(body: impl FnOnce() -> Result<(), Failure>) -> OnionmixError {
    match guard(body) {
        Ok(()) => OnionmixError::Ok,
        Err(code) => code,
    }
}

/// A NUL-terminated UTF-8 argument as a `&str`.
///
/// # Safety
///
/// `p`, when not NULL, points to a NUL-terminated string that stays
/// valid and unchanged for `'a`.
pub(crate) unsafe fn utf8_arg<'a>(p: *const c_char, what: &str) -> Result<&'a str, Failure> {
    if p.is_null() {
        return Err(null_arg(what));
    }
    // SAFETY: not NULL, and the caller promises a NUL-terminated string
    // that lives for 'a.
    let c = unsafe { CStr::from_ptr(p) };
    c.to_str().map_err(|e| {
        Failure::new(
            OnionmixError::InvalidUtf8,
            format!("{what} is not valid UTF-8: {e}"),
        )
    })
}

/// The failure for a NULL `what`.
pub(crate) fn null_arg(what: &str) -> Failure {
    Failure::new(OnionmixError::NullArgument, format!("{what} is NULL"))
}

/// The runtime blocking calls wait on: one worker thread that drives
/// timers for the library's timeouts (the client itself runs on a runtime
/// of its own). Created at first use and kept for the life of the process,
/// so streams and clients never depend on each other's lifetime.
fn helper() -> Result<&'static Handle, Failure> {
    static RT: OnceLock<Result<Runtime, String>> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("onionmix-ffi")
            .enable_all()
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map(Runtime::handle)
    .map_err(|e| {
        Failure::new(
            OnionmixError::Internal,
            format!("cannot start the library's runtime: {e}"),
        )
    })
}

/// Run `fut` to completion on the calling thread (blocking it), within
/// `timeout` when one is given.
pub(crate) fn block_on<F: Future>(
    fut: F,
    timeout: Option<Duration>,
    what: &str,
) -> Result<F::Output, Failure> {
    if Handle::try_current().is_ok() {
        return Err(Failure::new(
            OnionmixError::InsideRuntime,
            format!("{what}: a blocking call made from inside an async runtime's thread"),
        ));
    }
    let h = helper()?;
    match timeout {
        None => Ok(h.block_on(fut)),
        Some(t) => h
            .block_on(async { tokio::time::timeout(t, fut).await })
            .map_err(|_| {
                Failure::new(
                    OnionmixError::Timeout,
                    format!("{what}: timed out after {} ms", t.as_millis()),
                )
            }),
    }
}

/// A C timeout in milliseconds: 0 means none.
pub(crate) fn millis(ms: u32) -> Option<Duration> {
    (ms > 0).then(|| Duration::from_millis(u64::from(ms)))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn panics_become_internal_errors() {
        let r: Result<(), _> = guard(|| panic!("boom"));
        assert_eq!(r, Err(OnionmixError::Internal));
        let p = crate::onionmix_last_error_message();
        assert!(!p.is_null());
        // SAFETY: the thread's last error, valid until the next call.
        let msg = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        assert!(msg.contains("boom"), "{msg}");
        assert_eq!(guard_code(|| Ok(())), OnionmixError::Ok);
        assert!(crate::onionmix_last_error_message().is_null());
    }

    #[test]
    fn strings_are_checked() {
        // SAFETY: NULL is allowed.
        let e = unsafe { utf8_arg(std::ptr::null(), "host") }.unwrap_err();
        assert_eq!(e.code, OnionmixError::NullArgument);
        let bad = b"a\xffb\0";
        // SAFETY: a NUL-terminated byte string that outlives the call.
        let e = unsafe { utf8_arg(bad.as_ptr().cast(), "host") }.unwrap_err();
        assert_eq!(e.code, OnionmixError::InvalidUtf8);
        let good = b"example.com\0";
        // SAFETY: as above.
        let s = unsafe { utf8_arg(good.as_ptr().cast(), "host") };
        assert_eq!(s.ok(), Some("example.com"));
    }

    #[test]
    fn timeouts_and_runtime_misuse() {
        let r = block_on(
            std::future::pending::<()>(),
            Some(Duration::from_millis(20)),
            "x",
        );
        assert_eq!(r.unwrap_err().code, OnionmixError::Timeout);
        assert_eq!(block_on(async { 7 }, None, "x").ok(), Some(7));
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let inside = rt.block_on(async { block_on(async {}, None, "x") });
        assert_eq!(inside.unwrap_err().code, OnionmixError::InsideRuntime);
        assert_eq!(millis(0), None);
        assert_eq!(millis(5), Some(Duration::from_millis(5)));
    }
}
