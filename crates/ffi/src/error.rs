//! Error codes and the thread-local last error message.

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::ptr;

use onionmix_embed::EmbedError;

/// What a call returned. The values are stable: new codes may be added,
/// existing ones never change. `ONIONMIX_ERROR_OK` is 0, every error is
/// negative, so functions returning a count (`onionmix_stream_read`) use
/// the same codes for their failures.
#[repr(i32)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnionmixError {
    /// Success.
    Ok = 0,
    /// A pointer argument was NULL.
    NullArgument = -1,
    /// A string argument is not valid UTF-8.
    InvalidUtf8 = -2,
    /// An argument is out of range (a buffer length over `PTRDIFF_MAX`).
    InvalidArgument = -3,
    /// The configuration file could not be read or is not a valid
    /// client configuration.
    Config = -4,
    /// The client could not start (its state directory is unusable, a
    /// port it should listen on is taken, ...).
    Setup = -5,
    /// The client did not bootstrap within the time given.
    BootstrapTimeout = -6,
    /// The target is not something a stream can be opened to (empty or
    /// malformed host, port 0).
    BadTarget = -7,
    /// The host is a `.onion` name that is not a valid v3 address.
    BadOnion = -8,
    /// The host is a `.exit` name (refused, as stock tor refuses it).
    ExitNotation = -9,
    /// No circuit could be built for the stream.
    NoCircuit = -10,
    /// The exit or the onion service refused the stream (an END cell; the
    /// message names the reason).
    StreamRefused = -11,
    /// The operation did not finish within its timeout.
    Timeout = -12,
    /// The circuit or its channel failed under the stream.
    Circuit = -13,
    /// The onion service could not be reached (descriptor, introduction,
    /// rendezvous).
    OnionService = -14,
    /// The client has been shut down.
    Shutdown = -15,
    /// Reading from or writing to a stream failed.
    Io = -16,
    /// The stream has ended: the far side or the client closed it (a
    /// write after that fails with this code; reads return 0).
    Closed = -17,
    /// A call made from inside a Rust async runtime's thread (blocking
    /// calls are not allowed there).
    InsideRuntime = -18,
    /// A bug in the library (a caught panic), or its helper runtime could
    /// not start. The message says which.
    Internal = -99,
}

impl OnionmixError {
    /// The code's name as the header spells it, NUL-terminated.
    fn c_name(self) -> &'static str {
        match self {
            OnionmixError::Ok => "ONIONMIX_ERROR_OK\0",
            OnionmixError::NullArgument => "ONIONMIX_ERROR_NULL_ARGUMENT\0",
            OnionmixError::InvalidUtf8 => "ONIONMIX_ERROR_INVALID_UTF8\0",
            OnionmixError::InvalidArgument => "ONIONMIX_ERROR_INVALID_ARGUMENT\0",
            OnionmixError::Config => "ONIONMIX_ERROR_CONFIG\0",
            OnionmixError::Setup => "ONIONMIX_ERROR_SETUP\0",
            OnionmixError::BootstrapTimeout => "ONIONMIX_ERROR_BOOTSTRAP_TIMEOUT\0",
            OnionmixError::BadTarget => "ONIONMIX_ERROR_BAD_TARGET\0",
            OnionmixError::BadOnion => "ONIONMIX_ERROR_BAD_ONION\0",
            OnionmixError::ExitNotation => "ONIONMIX_ERROR_EXIT_NOTATION\0",
            OnionmixError::NoCircuit => "ONIONMIX_ERROR_NO_CIRCUIT\0",
            OnionmixError::StreamRefused => "ONIONMIX_ERROR_STREAM_REFUSED\0",
            OnionmixError::Timeout => "ONIONMIX_ERROR_TIMEOUT\0",
            OnionmixError::Circuit => "ONIONMIX_ERROR_CIRCUIT\0",
            OnionmixError::OnionService => "ONIONMIX_ERROR_ONION_SERVICE\0",
            OnionmixError::Shutdown => "ONIONMIX_ERROR_SHUTDOWN\0",
            OnionmixError::Io => "ONIONMIX_ERROR_IO\0",
            OnionmixError::Closed => "ONIONMIX_ERROR_CLOSED\0",
            OnionmixError::InsideRuntime => "ONIONMIX_ERROR_INSIDE_RUNTIME\0",
            OnionmixError::Internal => "ONIONMIX_ERROR_INTERNAL\0",
        }
    }
}

/// Every code, for the name table and the tests.
const ALL_CODES: [OnionmixError; 20] = [
    OnionmixError::Ok,
    OnionmixError::NullArgument,
    OnionmixError::InvalidUtf8,
    OnionmixError::InvalidArgument,
    OnionmixError::Config,
    OnionmixError::Setup,
    OnionmixError::BootstrapTimeout,
    OnionmixError::BadTarget,
    OnionmixError::BadOnion,
    OnionmixError::ExitNotation,
    OnionmixError::NoCircuit,
    OnionmixError::StreamRefused,
    OnionmixError::Timeout,
    OnionmixError::Circuit,
    OnionmixError::OnionService,
    OnionmixError::Shutdown,
    OnionmixError::Io,
    OnionmixError::Closed,
    OnionmixError::InsideRuntime,
    OnionmixError::Internal,
];

/// A failed call: its code and the message left for
/// [`onionmix_last_error_message`].
#[derive(Debug)]
pub(crate) struct Failure {
    pub code: OnionmixError,
    pub message: String,
}

impl Failure {
    pub(crate) fn new(code: OnionmixError, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
        }
    }
}

impl From<EmbedError> for Failure {
    fn from(e: EmbedError) -> Self {
        let code = match &e {
            EmbedError::Setup(_) => OnionmixError::Setup,
            EmbedError::BootstrapTimeout(_) => OnionmixError::BootstrapTimeout,
            EmbedError::BadTarget(_) => OnionmixError::BadTarget,
            EmbedError::BadOnion(_) => OnionmixError::BadOnion,
            EmbedError::ExitNotation => OnionmixError::ExitNotation,
            EmbedError::NoCircuit(_) => OnionmixError::NoCircuit,
            EmbedError::StreamEnded { .. } => OnionmixError::StreamRefused,
            EmbedError::Timeout => OnionmixError::Timeout,
            EmbedError::Circuit(_) => OnionmixError::Circuit,
            EmbedError::OnionService(_) => OnionmixError::OnionService,
            EmbedError::Shutdown => OnionmixError::Shutdown,
        };
        Failure::new(code, e.to_string())
    }
}

thread_local! {
    /// The message of the last failed call on this thread.
    static LAST_ERROR: RefCell<Option<CString>> = const { RefCell::new(None) };
}

/// Forget this thread's last error (each entry point starts with it).
pub(crate) fn clear_last_error() {
    let _ = LAST_ERROR.try_with(|l| l.borrow_mut().take());
}

/// Record `f` as this thread's last error and return its code.
pub(crate) fn set_last_error(f: &Failure) -> OnionmixError {
    // Interior NUL bytes cannot be in a C string: drop them.
    let text: Vec<u8> = f.message.bytes().filter(|b| *b != 0).collect();
    let c = CString::new(text).ok();
    let _ = LAST_ERROR.try_with(|l| *l.borrow_mut() = c);
    f.code
}

/// A message saying why the last failed `onionmix_*` call on this thread
/// failed, or NULL when the last call succeeded (every call clears it
/// first).
///
/// The string belongs to the library and stays valid until the next
/// `onionmix_*` call on this thread: copy it to keep it. Never free it.
#[unsafe(no_mangle)]
pub extern "C" fn onionmix_last_error_message() -> *const c_char {
    // No guard: `try_with` cannot panic (it reports a destroyed
    // thread-local instead), and the cell is never borrowed mutably while
    // this runs (nothing else runs on this thread meanwhile).
    LAST_ERROR
        .try_with(|l| l.borrow().as_ref().map_or(ptr::null(), |c| c.as_ptr()))
        .unwrap_or(ptr::null())
}

/// The name of an error code ("ONIONMIX_ERROR_TIMEOUT"), or
/// "ONIONMIX_ERROR_UNKNOWN" for a value that is not a code.
///
/// The string is static: never free it.
#[unsafe(no_mangle)]
pub extern "C" fn onionmix_error_name(code: i32) -> *const c_char {
    // No guard: a search in a constant table cannot panic.
    ALL_CODES
        .iter()
        .find(|e| **e as i32 == code)
        .map_or("ONIONMIX_ERROR_UNKNOWN\0", |e| e.c_name())
        .as_ptr()
        .cast()
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    fn name(code: i32) -> String {
        // SAFETY: onionmix_error_name returns a static NUL-terminated string.
        unsafe { CStr::from_ptr(onionmix_error_name(code)) }
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn codes_are_distinct_and_named() {
        let mut seen = std::collections::HashSet::new();
        for e in ALL_CODES {
            assert!(seen.insert(e as i32), "{e:?} reuses a value");
            assert!(e == OnionmixError::Ok || (e as i32) < 0, "{e:?}");
            let n = name(e as i32);
            assert!(n.starts_with("ONIONMIX_ERROR_"), "{n}");
            assert!(!e.c_name()[..e.c_name().len() - 1].contains('\0'));
        }
        assert_eq!(name(-12), "ONIONMIX_ERROR_TIMEOUT");
        assert_eq!(name(12345), "ONIONMIX_ERROR_UNKNOWN");
    }

    #[test]
    fn last_error_is_per_call_and_nul_free() {
        clear_last_error();
        assert!(onionmix_last_error_message().is_null());
        let code = set_last_error(&Failure::new(OnionmixError::Io, "a\0b"));
        assert_eq!(code, OnionmixError::Io);
        let p = onionmix_last_error_message();
        assert!(!p.is_null());
        // SAFETY: p is this thread's last error, valid until the next call.
        assert_eq!(unsafe { CStr::from_ptr(p) }.to_str().ok(), Some("ab"));
        // Another thread has its own.
        std::thread::spawn(|| assert!(onionmix_last_error_message().is_null()))
            .join()
            .ok();
        clear_last_error();
        assert!(onionmix_last_error_message().is_null());
    }

    #[test]
    fn embed_errors_keep_their_kind() {
        let f = Failure::from(EmbedError::Timeout);
        assert_eq!(f.code, OnionmixError::Timeout);
        let f = Failure::from(EmbedError::StreamEnded {
            reason: 3,
            name: "CONNECTREFUSED",
        });
        assert_eq!(f.code, OnionmixError::StreamRefused);
        assert!(f.message.contains("CONNECTREFUSED"), "{}", f.message);
    }
}
