//! `onionmix_stream_*`: blocking reads and writes on a connected stream.

use std::io::ErrorKind;
use std::mem::MaybeUninit;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, PoisonError};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf, ReadHalf, WriteHalf};

use onionmix_embed::DataStream;

use crate::error::{Failure, OnionmixError};
use crate::guard::{block_on, guard, guard_code, millis, null_arg};

/// A connected stream. Opaque to C: made by `onionmix_client_connect`,
/// freed by `onionmix_stream_close`. One thread may read while another
/// writes.
pub struct Stream {
    rd: Mutex<ReadHalf<DataStream>>,
    wr: Mutex<WriteHalf<DataStream>>,
    /// Read and write timeout in milliseconds (0: none).
    timeout_ms: AtomicU32,
}

// One thread may read a stream while another writes it.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Stream>();
};

impl Stream {
    pub(crate) fn new(s: DataStream) -> Self {
        let (rd, wr) = tokio::io::split(s);
        Stream {
            rd: Mutex::new(rd),
            wr: Mutex::new(wr),
            timeout_ms: AtomicU32::new(0),
        }
    }
}

/// The stream behind a pointer argument.
///
/// # Safety
///
/// `p`, when not NULL, came from `onionmix_client_connect` and has not
/// been closed.
unsafe fn stream_ref<'a>(p: *const Stream) -> Result<&'a Stream, Failure> {
    // SAFETY: the caller promises a live stream or NULL.
    unsafe { p.as_ref() }.ok_or_else(|| null_arg("stream"))
}

/// A byte count as the signed return value (lengths are checked to fit
/// before any I/O, so this never saturates in practice).
fn count(n: usize) -> isize {
    isize::try_from(n).unwrap_or(isize::MAX)
}

/// Check a buffer length against what a Rust slice may span.
fn check_len(len: usize) -> Result<(), Failure> {
    if isize::try_from(len).is_err() {
        return Err(Failure::new(
            OnionmixError::InvalidArgument,
            format!("buffer length {len} is over PTRDIFF_MAX"),
        ));
    }
    Ok(())
}

/// An I/O error on a stream as a failure.
fn io_failure(e: std::io::Error, what: &str) -> Failure {
    let code = match e.kind() {
        ErrorKind::BrokenPipe | ErrorKind::ConnectionReset | ErrorKind::NotConnected => {
            OnionmixError::Closed
        }
        _ => OnionmixError::Io,
    };
    Failure::new(code, format!("{what}: {e}"))
}

/// Set the timeout of later reads and writes on `stream`, in milliseconds
/// (0, the default: wait as long as it takes; the stream itself ends after
/// a long idle period or when its client stops).
///
/// # Safety
///
/// `stream` is NULL or a stream from `onionmix_client_connect` that has
/// not been closed.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onionmix_stream_set_timeout(
    stream: *const Stream,
    timeout_ms: u32,
) -> OnionmixError {
    guard_code(|| {
        // SAFETY: the caller's promise, above.
        let s = unsafe { stream_ref(stream) }?;
        s.timeout_ms.store(timeout_ms, Ordering::Relaxed);
        Ok(())
    })
}

/// Read up to `len` bytes into `buf`, blocking until at least one byte is
/// there. Returns the number of bytes read, 0 at end of stream (the far
/// side ended it, or the client stopped), or a negative error code
/// (`ONIONMIX_ERROR_TIMEOUT` after the stream's timeout, with nothing
/// lost: read again). A `len` of 0 returns 0 at once.
///
/// # Safety
///
/// `stream` as in `onionmix_stream_set_timeout`; `buf` points to `len`
/// writable bytes (it may be uninitialised).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onionmix_stream_read(
    stream: *const Stream,
    buf: *mut u8,
    len: usize,
) -> isize {
    let r = guard(|| {
        // SAFETY: the caller's promise, above.
        let s = unsafe { stream_ref(stream) }?;
        if buf.is_null() {
            return Err(null_arg("buf"));
        }
        check_len(len)?;
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: `buf` is not NULL, spans `len` writable bytes (caller's
        // promise) and `len` fits a slice; viewing it as MaybeUninit makes
        // no claim about its contents.
        let dst = unsafe { std::slice::from_raw_parts_mut(buf.cast::<MaybeUninit<u8>>(), len) };
        let mut rd = s.rd.lock().unwrap_or_else(PoisonError::into_inner);
        let timeout = millis(s.timeout_ms.load(Ordering::Relaxed));
        // A fresh ReadBuf at each poll: a read that returns Pending has
        // filled nothing, so the count is that of the ready poll.
        let read = std::future::poll_fn(|cx| {
            let mut rb = ReadBuf::uninit(&mut *dst);
            Pin::new(&mut *rd)
                .poll_read(cx, &mut rb)
                .map_ok(|()| rb.filled().len())
        });
        let n = block_on(read, timeout, "read")?.map_err(|e| io_failure(e, "read"))?;
        Ok(count(n))
    });
    r.unwrap_or_else(|code| code as isize)
}

/// Write all `len` bytes of `buf` to the stream, blocking while its
/// buffer is full. Returns `len`; should the stream's timeout expire
/// part-way, the number of bytes written so far (a short count), or
/// `ONIONMIX_ERROR_TIMEOUT` if none were. Returns `ONIONMIX_ERROR_CLOSED`
/// once the stream has ended.
///
/// There is no half-close: Tor streams end in both directions at once, so
/// keep the stream open until the answer has been read, then close it.
///
/// # Safety
///
/// `stream` as in `onionmix_stream_set_timeout`; `buf` points to `len`
/// readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onionmix_stream_write(
    stream: *const Stream,
    buf: *const u8,
    len: usize,
) -> isize {
    let r = guard(|| {
        // SAFETY: the caller's promise, above.
        let s = unsafe { stream_ref(stream) }?;
        if buf.is_null() {
            return Err(null_arg("buf"));
        }
        check_len(len)?;
        if len == 0 {
            return Ok(0);
        }
        // SAFETY: `buf` is not NULL and spans `len` readable bytes
        // (caller's promise); `len` fits a slice.
        let src = unsafe { std::slice::from_raw_parts(buf, len) };
        let mut wr = s.wr.lock().unwrap_or_else(PoisonError::into_inner);
        let timeout = millis(s.timeout_ms.load(Ordering::Relaxed));
        let mut done = 0usize;
        let written = &mut done;
        let write = async {
            while let Some(rest) = src.get(*written..).filter(|r| !r.is_empty()) {
                let n = std::future::poll_fn(|cx| Pin::new(&mut *wr).poll_write(cx, rest)).await?;
                if n == 0 {
                    return Err(std::io::Error::from(ErrorKind::WriteZero));
                }
                *written = written.saturating_add(n);
            }
            Ok(())
        };
        match block_on(write, timeout, "write") {
            Ok(Ok(())) => Ok(count(done)),
            Ok(Err(e)) => Err(io_failure(e, "write")),
            Err(f) if f.code == OnionmixError::Timeout && done > 0 => Ok(count(done)),
            Err(f) => Err(f),
        }
    });
    r.unwrap_or_else(|code| code as isize)
}

/// Close the stream and free it (the far side sees it end). Blocked
/// reads or writes must have returned first.
///
/// `stream` is the address of the caller's pointer, which is set to NULL:
/// closing again returns `ONIONMIX_ERROR_OK` and does nothing. Streams may
/// be closed before or after their client is stopped.
///
/// # Safety
///
/// `stream` is NULL or points to a pointer that is NULL or a stream from
/// `onionmix_client_connect`; no other call on that stream may be running
/// or start.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onionmix_stream_close(stream: *mut *mut Stream) -> OnionmixError {
    guard_code(|| {
        if stream.is_null() {
            return Err(null_arg("stream"));
        }
        // SAFETY: not NULL; the caller promises it points to a pointer.
        let p = unsafe { stream.replace(std::ptr::null_mut()) };
        if p.is_null() {
            return Ok(());
        }
        // SAFETY: `p` came from Box::into_raw in onionmix_client_connect
        // and the caller's pointer to it is now NULL: freed once.
        let s = unsafe { Box::from_raw(p) };
        // Dropping the pipe's ends tells the stream's task to send END.
        drop(s);
        Ok(())
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn lengths_and_io_errors() {
        assert!(check_len(0).is_ok());
        assert!(check_len(isize::MAX as usize).is_ok());
        assert_eq!(
            check_len(usize::MAX).map_err(|f| f.code).err(),
            Some(OnionmixError::InvalidArgument)
        );
        let f = io_failure(ErrorKind::BrokenPipe.into(), "write");
        assert_eq!(f.code, OnionmixError::Closed);
        let f = io_failure(ErrorKind::Other.into(), "read");
        assert_eq!(f.code, OnionmixError::Io);
        assert_eq!(count(5), 5);
    }
}
