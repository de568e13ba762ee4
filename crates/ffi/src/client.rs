//! `onionmix_client_*`: start, bootstrap, connect, new identity, stop.

use std::collections::{HashMap, VecDeque};
use std::ffi::c_char;
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError};

use onionmix_embed::{ClientConfig, IsolationToken, OnionmixClient};

use crate::error::{Failure, OnionmixError};
use crate::guard::{block_on, guard, guard_code, millis, null_arg, utf8_arg};
use crate::stream::Stream;

/// Distinct isolation tokens a client remembers. Past this the oldest is
/// forgotten: a stream that names it again gets a fresh token, so it is
/// isolated from the earlier streams (never joined with another token's).
const MAX_TOKENS: usize = 1024;

/// A running client. Opaque to C: made by `onionmix_client_start`, freed
/// by `onionmix_client_stop`.
pub struct Client {
    inner: OnionmixClient,
    tokens: Mutex<TokenTable>,
}

// C may use one client from several threads at once.
const _: () = {
    const fn shared<T: Send + Sync>() {}
    shared::<Client>();
};

/// The caller's isolation tokens (any nonzero 64-bit value) mapped to the
/// embedding API's, oldest first for eviction.
#[derive(Default)]
struct TokenTable {
    map: HashMap<u64, IsolationToken>,
    order: VecDeque<u64>,
}

impl TokenTable {
    /// The API token for the caller's `id` (0: no isolation).
    fn get(&mut self, id: u64) -> IsolationToken {
        if id == 0 {
            return IsolationToken::no_isolation();
        }
        if let Some(t) = self.map.get(&id) {
            return t.clone();
        }
        if self.map.len() >= MAX_TOKENS
            && let Some(old) = self.order.pop_front()
        {
            self.map.remove(&old);
        }
        let t = IsolationToken::new();
        self.map.insert(id, t.clone());
        self.order.push_back(id);
        t
    }
}

/// The client behind a pointer argument.
///
/// # Safety
///
/// `p`, when not NULL, came from `onionmix_client_start` and has not been
/// stopped.
unsafe fn client_ref<'a>(p: *const Client) -> Result<&'a Client, Failure> {
    // SAFETY: the caller promises a live client or NULL; `as_ref` maps
    // NULL to None.
    unsafe { p.as_ref() }.ok_or_else(|| null_arg("client"))
}

/// Start a client from a configuration file (the `onionmix client` TOML).
/// Returns at once: the bootstrap goes on in the background (see
/// `onionmix_client_wait_bootstrapped`). No SOCKS port is opened (see
/// `onionmix_client_start_with_socks`); a control or metrics port only if
/// the configuration names one.
///
/// `config_path`: the configuration file (UTF-8). `data_dir`: the state
/// directory (guards, cached directory), replacing the configuration's
/// `data_dir`; NULL keeps the configuration's. One running client per
/// state directory.
///
/// On success `*out` holds the new client: free it with
/// `onionmix_client_stop`. On failure `*out` is set to NULL.
///
/// # Safety
///
/// The strings are NUL-terminated (or `data_dir` NULL); `out` points to
/// writable storage for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onionmix_client_start(
    config_path: *const c_char,
    data_dir: *const c_char,
    out: *mut *mut Client,
) -> OnionmixError {
    // SAFETY: the caller's promises, passed on.
    guard_code(|| unsafe { start(config_path, data_dir, out, false) })
}

/// `onionmix_client_start`, and also open the configuration's SOCKS port
/// (`socks_listen`, by default 127.0.0.1:9050; port 0 takes any free
/// port), as tor's `SocksPort` does, for code that wants a SOCKS5 proxy.
/// `onionmix_client_socks_port` tells the port it got.
///
/// # Safety
///
/// As `onionmix_client_start`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onionmix_client_start_with_socks(
    config_path: *const c_char,
    data_dir: *const c_char,
    out: *mut *mut Client,
) -> OnionmixError {
    // SAFETY: the caller's promises, passed on.
    guard_code(|| unsafe { start(config_path, data_dir, out, true) })
}

/// Both start functions.
///
/// # Safety
///
/// As `onionmix_client_start`.
unsafe fn start(
    config_path: *const c_char,
    data_dir: *const c_char,
    out: *mut *mut Client,
    socks: bool,
) -> Result<(), Failure> {
    if out.is_null() {
        return Err(null_arg("out"));
    }
    // SAFETY: `out` is not NULL and points to writable storage.
    unsafe { out.write(std::ptr::null_mut()) };
    // SAFETY: the caller promises NUL-terminated strings.
    let path = unsafe { utf8_arg(config_path, "config_path") }?;
    let dir = if data_dir.is_null() {
        None
    } else {
        // SAFETY: as above.
        Some(unsafe { utf8_arg(data_dir, "data_dir") }?)
    };
    let mut cfg = ClientConfig::load(&PathBuf::from(path))
        .map_err(|e| Failure::new(OnionmixError::Config, e.to_string()))?;
    if let Some(d) = dir {
        cfg.data_dir = PathBuf::from(d);
    }
    let launch = async move {
        if socks {
            OnionmixClient::launch_with_socks(cfg).await
        } else {
            OnionmixClient::launch(cfg).await
        }
    };
    let inner = block_on(launch, None, "start")??;
    let client = Box::new(Client {
        inner,
        tokens: Mutex::new(TokenTable::default()),
    });
    // SAFETY: checked above; the caller now owns the box.
    unsafe { out.write(Box::into_raw(client)) };
    Ok(())
}

/// The port the client's SOCKS5 proxy listens on (on the address of the
/// configuration's `socks_listen`), 0 when it has none (started with
/// `onionmix_client_start`), or a negative error code.
///
/// # Safety
///
/// As `onionmix_client_wait_bootstrapped`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onionmix_client_socks_port(client: *const Client) -> i32 {
    let r = guard(|| {
        // SAFETY: the caller's promise, above.
        let c = unsafe { client_ref(client) }?;
        Ok(c.inner.socks_addr().map_or(0, |a| i32::from(a.port())))
    });
    r.unwrap_or_else(|code| code as i32)
}

/// Wait up to `timeout_ms` milliseconds (0: no limit) for the bootstrap
/// to finish (directory and a first circuit). Returns
/// `ONIONMIX_ERROR_OK`, or `ONIONMIX_ERROR_BOOTSTRAP_TIMEOUT` (the client
/// keeps trying; wait again or stop it).
///
/// # Safety
///
/// `client` is NULL or a client from `onionmix_client_start` that has not
/// been stopped.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onionmix_client_wait_bootstrapped(
    client: *const Client,
    timeout_ms: u32,
) -> OnionmixError {
    guard_code(|| {
        // SAFETY: the caller's promise, above.
        let c = unsafe { client_ref(client) }?;
        let mut events = c.inner.bootstrap_events();
        let done = async move {
            // The watch holds the current phase; `changed` fails only when
            // the client is gone.
            loop {
                if events.borrow_and_update().progress >= 100 {
                    return true;
                }
                if events.changed().await.is_err() {
                    return false;
                }
            }
        };
        let finished = block_on(done, millis(timeout_ms), "bootstrap").map_err(|f| {
            if f.code == OnionmixError::Timeout {
                Failure::new(
                    OnionmixError::BootstrapTimeout,
                    format!("not bootstrapped after {timeout_ms} ms"),
                )
            } else {
                f
            }
        })?;
        if finished {
            Ok(())
        } else {
            Err(Failure::new(
                OnionmixError::Shutdown,
                "the client stopped before it bootstrapped",
            ))
        }
    })
}

/// The bootstrap progress in percent (0 to 100, as tor reports it: 5
/// connecting, 75 enough directory information, 95 building a first
/// circuit, 100 done), or a negative error code.
///
/// # Safety
///
/// As `onionmix_client_wait_bootstrapped`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onionmix_client_bootstrap_percent(client: *const Client) -> i32 {
    let r = guard(|| {
        // SAFETY: the caller's promise, above.
        let c = unsafe { client_ref(client) }?;
        Ok(i32::from(c.inner.bootstrap_status().progress))
    });
    r.unwrap_or_else(|code| code as i32)
}

/// Open a stream to `host:port` through the network and wait for the
/// exit's (or onion service's) answer. `host` is a hostname (resolved by
/// the exit, never in this process), an IPv4 address, a bracketed IPv6
/// address or a v3 `.onion` name.
///
/// `isolation_token`: streams with different tokens never share a
/// circuit; 0 means no isolation (share with every other token-0 stream).
/// Any other value is the caller's choice (a per-account or per-tab
/// number, say).
///
/// `timeout_ms`: the longest the call waits (0: only the client's own
/// limits, which include waiting for the bootstrap). Before the bootstrap
/// has finished the call waits for it within that time.
///
/// On success `*out` holds the stream: free it with
/// `onionmix_stream_close`. On failure `*out` is set to NULL.
///
/// # Safety
///
/// `client` as in `onionmix_client_wait_bootstrapped`; `host` is
/// NUL-terminated; `out` points to writable storage for one pointer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onionmix_client_connect(
    client: *const Client,
    host: *const c_char,
    port: u16,
    isolation_token: u64,
    timeout_ms: u32,
    out: *mut *mut Stream,
) -> OnionmixError {
    guard_code(|| {
        if out.is_null() {
            return Err(null_arg("out"));
        }
        // SAFETY: `out` is not NULL and points to writable storage.
        unsafe { out.write(std::ptr::null_mut()) };
        // SAFETY: the caller's promises, above.
        let c = unsafe { client_ref(client) }?;
        // SAFETY: as above.
        let host = unsafe { utf8_arg(host, "host") }?;
        let token = c
            .tokens
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(isolation_token);
        let s = block_on(
            c.inner.connect_with(host, port, &token),
            millis(timeout_ms),
            "connect",
        )??;
        let stream = Box::new(Stream::new(s));
        // SAFETY: checked above; the caller now owns the box.
        unsafe { out.write(Box::into_raw(stream)) };
        Ok(())
    })
}

/// A new identity, as tor's `SIGNAL NEWNYM`: streams opened afterwards
/// never share a circuit with earlier ones. Rate-limited like tor (once
/// per 10 s): a request inside the interval blocks until its end. Open
/// streams are not affected.
///
/// # Safety
///
/// As `onionmix_client_wait_bootstrapped`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onionmix_client_new_identity(client: *const Client) -> OnionmixError {
    guard_code(|| {
        // SAFETY: the caller's promise, above.
        let c = unsafe { client_ref(client) }?;
        block_on(c.inner.new_identity(), None, "new identity")
    })
}

/// Stop the client and free it: every task it runs stops (open streams
/// end: their reads return 0 or an error) and the call returns once they
/// are gone (at most about 10 s). Streams still open stay valid objects
/// and must still be closed with `onionmix_stream_close`.
///
/// `client` is the address of the caller's pointer, which is set to NULL:
/// stopping again (with the NULL pointer) returns `ONIONMIX_ERROR_OK` and
/// does nothing.
///
/// # Safety
///
/// `client` is NULL or points to a pointer that is NULL or a client from
/// `onionmix_client_start`; no other call on that client may be running
/// or start.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn onionmix_client_stop(client: *mut *mut Client) -> OnionmixError {
    guard_code(|| {
        if client.is_null() {
            return Err(null_arg("client"));
        }
        // SAFETY: not NULL; the caller promises it points to a pointer.
        let p = unsafe { client.replace(std::ptr::null_mut()) };
        if p.is_null() {
            return Ok(());
        }
        // SAFETY: `p` came from Box::into_raw in onionmix_client_start and
        // the caller's pointer to it is now NULL, so it is freed once.
        let c = unsafe { Box::from_raw(p) };
        let Client { inner, tokens } = *c;
        drop(tokens);
        // Should waiting be refused (a call from inside a runtime), the
        // client still stops, in the background, when `inner` is dropped.
        block_on(inner.shutdown(), None, "stop")
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn token_table_is_bounded_and_keeps_isolation() {
        let mut t = TokenTable::default();
        assert_eq!(t.get(0), IsolationToken::no_isolation());
        let a = t.get(1);
        assert_eq!(t.get(1), a);
        assert_ne!(t.get(2), a);
        for i in 3..(MAX_TOKENS as u64 + 10) {
            let _ = t.get(i);
        }
        assert!(t.map.len() <= MAX_TOKENS);
        assert_eq!(t.map.len(), t.order.len());
        // Token 1 was forgotten: naming it again isolates from before.
        assert_ne!(t.get(1), a);
    }
}
