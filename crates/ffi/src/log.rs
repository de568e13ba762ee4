//! `onionmix_log_init`: the library's log lines to stderr or to a C
//! callback.

use std::ffi::{CString, c_char, c_void};
use std::io::Write;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::prelude::*;

use crate::error::{Failure, OnionmixError};
use crate::guard::{guard_code, utf8_arg};

/// A C log callback: one formatted line (no trailing newline) and the
/// caller's context pointer.
pub type LogCallback = Option<unsafe extern "C" fn(line: *const c_char, ctx: *mut c_void)>;

/// Longest log line passed on (longer ones are cut).
const MAX_LINE: usize = 16 * 1024;

/// Where lines go.
#[derive(Clone, Copy)]
enum Sink {
    Stderr,
    /// The callback and its context (an address: the caller promised it
    /// may be used from any thread).
    Callback(unsafe extern "C" fn(*const c_char, *mut c_void), usize),
}

/// Makes one [`LineWriter`] per event.
#[derive(Clone, Copy)]
struct Lines(Sink);

impl<'a> MakeWriter<'a> for Lines {
    type Writer = LineWriter;
    fn make_writer(&'a self) -> LineWriter {
        LineWriter {
            buf: Vec::new(),
            sink: self.0,
        }
    }
}

/// Collects one event's text and hands it over when dropped.
struct LineWriter {
    buf: Vec<u8>,
    sink: Sink,
}

impl Write for LineWriter {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let room = MAX_LINE.saturating_sub(self.buf.len());
        self.buf.extend_from_slice(b.get(..room).unwrap_or(b));
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        while self.buf.last() == Some(&b'\n') {
            self.buf.pop();
        }
        match self.sink {
            Sink::Stderr => {
                self.buf.push(b'\n');
                let _ = std::io::stderr().write_all(&self.buf);
            }
            Sink::Callback(cb, ctx) => {
                self.buf.retain(|b| *b != 0);
                if let Ok(line) = CString::new(std::mem::take(&mut self.buf)) {
                    // SAFETY: the caller of onionmix_log_init promised a
                    // callback that may be called from any thread with a
                    // NUL-terminated line valid for the call, and the
                    // context it gave.
                    unsafe { cb(line.as_ptr(), ctx as *mut c_void) };
                }
            }
        }
    }
}

/// Send the library's log lines to `callback` (or to stderr when it is
/// NULL), filtered by `filter`: a level ("info", "debug") or per-module
/// directives as in `RUST_LOG` ("warn,onionmix_node=info"); NULL means
/// "info". At the default levels no keys, secrets or target addresses are
/// logged. Once per process: a second call returns `ONIONMIX_ERROR_SETUP`
/// (as does one in a program that installed its own Rust logger).
///
/// The callback is called from the library's threads, possibly several at
/// once, with one line (no trailing newline) valid only during the call,
/// and `ctx`. It must be thread-safe, must return quickly and must not call
/// onionmix functions. It stays installed for the life of the process.
///
/// # Safety
///
/// `filter` is NULL or NUL-terminated; `callback`, when not NULL, may be
/// called as described from any thread for the life of the process, with
/// `ctx`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onionmix_log_init(
    filter: *const c_char,
    callback: LogCallback,
    ctx: *mut c_void,
) -> OnionmixError {
    guard_code(|| {
        let filter = if filter.is_null() {
            "info"
        } else {
            // SAFETY: the caller promises a NUL-terminated string.
            unsafe { utf8_arg(filter, "filter") }?
        };
        let filter = EnvFilter::try_new(filter).map_err(|e| {
            Failure::new(
                OnionmixError::InvalidArgument,
                format!("bad log filter: {e}"),
            )
        })?;
        let sink = match callback {
            Some(cb) => Sink::Callback(cb, ctx as usize),
            None => Sink::Stderr,
        };
        let log = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(Lines(sink))
            .with_filter(filter);
        tracing_subscriber::registry()
            .with(log)
            .with(onionmix_embed::control_log_layer())
            .try_init()
            .map_err(|e| {
                Failure::new(
                    OnionmixError::Setup,
                    format!("a logger is already installed: {e}"),
                )
            })
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_cut_and_trimmed() {
        let mut w = LineWriter {
            buf: Vec::new(),
            sink: Sink::Stderr,
        };
        w.write_all(&vec![b'x'; MAX_LINE + 100]).unwrap();
        assert_eq!(w.buf.len(), MAX_LINE);
        w.buf.clear();
        w.write_all(b"hello\n\n").unwrap();
        drop(w);
    }
}
