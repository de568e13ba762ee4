//! Embed the onionmix client in a Rust application.
//!
//! [`OnionmixClient`] runs the same client as `onionmix client`
//! (directory bootstrap, guards, circuits, onion-service client) inside the
//! application's process, with no SOCKS port (and a control port only when
//! the configuration asks for one). Streams are opened with
//! [`OnionmixClient::connect`] and are tokio [`AsyncRead`] +
//! [`AsyncWrite`] values ([`DataStream`]).
//!
//! The client runs on a tokio runtime of its own, owned by the
//! [`OnionmixClient`]: the application may call it from any tokio runtime,
//! and [`OnionmixClient::shutdown`] stops every task the client started
//! (directory refresh, pre-built circuits, `status.json` writes, open
//! streams) before it returns.
//!
//! ```no_run
//! # async fn demo() -> Result<(), onionmix_embed::EmbedError> {
//! use std::time::Duration;
//! use onionmix_embed::{ClientConfig, IsolationToken, OnionmixClient};
//! use tokio::io::{AsyncReadExt, AsyncWriteExt};
//!
//! let cfg = ClientConfig::load(std::path::Path::new("client.toml"))
//!     .map_err(|e| onionmix_embed::EmbedError::Setup(e.to_string()))?;
//! let client = OnionmixClient::bootstrapped(cfg, Duration::from_secs(120)).await?;
//! let mut s = client.connect("example.com", 80).await?;
//! s.write_all(b"GET / HTTP/1.0\r\nHost: example.com\r\n\r\n").await.ok();
//! let mut page = Vec::new();
//! s.read_to_end(&mut page).await.ok();
//! // A stream that must not share a circuit with the first:
//! let other = client.connect_with("example.com", 80, &IsolationToken::new()).await?;
//! drop(other);
//! client.new_identity().await;
//! client.shutdown().await;
//! # Ok(()) }
//! ```
//!
//! [`AsyncRead`]: tokio::io::AsyncRead
//! [`AsyncWrite`]: tokio::io::AsyncWrite

mod connect;
mod error;
mod stream;
mod target;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::runtime::Runtime;
use tokio::sync::watch;
use tracing::info;

use onionmix_node::client::Client;

pub use error::EmbedError;
pub use onionmix_node::client::config::ClientConfig;
pub use onionmix_node::client::control::hub::BootstrapPhase as BootstrapStatus;
/// A `tracing` layer that sends the log (`info` and above) to the control
/// port's controllers as NOTICE/WARN/ERR events; add it to the
/// application's subscriber when the client has a control port.
pub use onionmix_node::control::logs::layer as control_log_layer;
pub use stream::{CircuitInfo, DataStream};
pub use target::Target;

/// Worker threads of the client's own runtime.
const CLIENT_THREADS: usize = 2;
/// How long [`OnionmixClient::shutdown`] waits for the client's tasks to
/// stop (they are cancelled at their next await; only blocking file
/// writes can take time).
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
/// Bytes buffered each way between a [`DataStream`] and its circuit
/// stream.
pub const STREAM_BUFFER: usize = 64 * 1024;

/// Which streams may share a circuit: streams opened with different
/// tokens never do (like tor's `IsolateSOCKSAuth` with distinct SOCKS
/// credentials). Tokens are cheap; clone one to let streams share.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IsolationToken(u64);

/// The process-wide source of fresh token values (0 is the shared,
/// unisolated token).
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

impl IsolationToken {
    /// A token no other stream has yet.
    pub fn new() -> Self {
        IsolationToken(NEXT_TOKEN.fetch_add(1, Ordering::Relaxed))
    }

    /// The token [`OnionmixClient::connect`] uses: streams opened with it
    /// may share circuits with each other (and with pre-built circuits).
    pub fn no_isolation() -> Self {
        IsolationToken(0)
    }
}

impl Default for IsolationToken {
    /// A fresh token (as [`IsolationToken::new`]).
    fn default() -> Self {
        Self::new()
    }
}

/// An onion-routing client running inside this process.
///
/// Not `Clone`: share it behind an `Arc`. Dropping it without
/// [`shutdown`](Self::shutdown) stops its runtime in the background.
pub struct OnionmixClient {
    rt: Option<Runtime>,
    handle: tokio::runtime::Handle,
    client: Client,
    stream_timeout: Duration,
}

impl std::fmt::Debug for OnionmixClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnionmixClient")
            .field("bootstrap", &self.bootstrap_status())
            .finish()
    }
}

impl OnionmixClient {
    /// Start the client with `cfg` (its `data_dir` is the state
    /// directory: guards, cached directory, build-time history). Returns
    /// at once; bootstrap continues in the background (see
    /// [`bootstrap_events`](Self::bootstrap_events)). No SOCKS port is
    /// opened; a control or metrics port only if `cfg` configures one.
    pub async fn launch(cfg: ClientConfig) -> Result<Self, EmbedError> {
        Self::start(cfg, false).await
    }

    /// [`launch`](Self::launch), and also open the configuration's SOCKS
    /// port (`socks_listen`; port 0 takes any free port, see
    /// [`socks_addr`](Self::socks_addr)), for applications that hand a
    /// SOCKS proxy to other code (as tor's `SocksPort` does).
    pub async fn launch_with_socks(cfg: ClientConfig) -> Result<Self, EmbedError> {
        Self::start(cfg, true).await
    }

    /// The address the SOCKS port listens on, if the client opened one
    /// ([`launch_with_socks`](Self::launch_with_socks)).
    pub fn socks_addr(&self) -> Option<std::net::SocketAddr> {
        let a = self.client.socks_addr;
        (a.port() != 0).then_some(a)
    }

    async fn start(cfg: ClientConfig, socks: bool) -> Result<Self, EmbedError> {
        let stream_timeout = cfg.stream_timeout();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(CLIENT_THREADS)
            .thread_name("onionmix-client")
            .enable_all()
            .build()
            .map_err(|e| EmbedError::Setup(format!("cannot start a runtime: {e}")))?;
        let handle = rt.handle().clone();
        let started = handle
            .spawn(async move { Client::start_with(cfg, socks).await })
            .await;
        let client = match started {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                rt.shutdown_background();
                return Err(EmbedError::Setup(e.to_string()));
            }
            Err(e) => {
                rt.shutdown_background();
                return Err(EmbedError::Setup(format!("client start-up failed: {e}")));
            }
        };
        info!("embedded onionmix client started");
        Ok(OnionmixClient {
            rt: Some(rt),
            handle,
            client,
            stream_timeout,
        })
    }

    /// [`launch`](Self::launch), then wait up to `timeout` for the
    /// bootstrap to finish (directory and a first circuit). On timeout the
    /// client is shut down and [`EmbedError::BootstrapTimeout`] returned.
    pub async fn bootstrapped(cfg: ClientConfig, timeout: Duration) -> Result<Self, EmbedError> {
        let c = Self::launch(cfg).await?;
        match c.wait_bootstrapped(timeout).await {
            Ok(()) => Ok(c),
            Err(e) => {
                c.shutdown().await;
                Err(e)
            }
        }
    }

    /// Wait up to `timeout` for the bootstrap to finish.
    pub async fn wait_bootstrapped(&self, timeout: Duration) -> Result<(), EmbedError> {
        let c = self.client.clone();
        let ok = self
            .run(async move { c.wait_bootstrapped(timeout).await })
            .await?;
        if ok {
            Ok(())
        } else {
            Err(EmbedError::BootstrapTimeout(timeout))
        }
    }

    /// The bootstrap phase now (percent and summary, as tor reports it:
    /// 5 connecting, 75 enough directory info, 95 building a first
    /// circuit, 100 done).
    pub fn bootstrap_status(&self) -> BootstrapStatus {
        *self.client.hub.bootstrap_events().borrow()
    }

    /// Whether the bootstrap has finished.
    pub fn is_bootstrapped(&self) -> bool {
        self.client.is_bootstrapped()
    }

    /// Follow the bootstrap phases: the receiver holds the current phase
    /// and is notified at every change.
    pub fn bootstrap_events(&self) -> watch::Receiver<BootstrapStatus> {
        self.client.hub.bootstrap_events()
    }

    /// Open a stream to `host:port` through the network, sharing circuits
    /// with other streams opened without a token. Hostnames are resolved
    /// by the exit (never in this process); a `.onion` name is reached
    /// through the onion-service client. Waits for the bootstrap (up to
    /// the configured stream timeout) and for the exit's answer.
    pub async fn connect(&self, host: &str, port: u16) -> Result<DataStream, EmbedError> {
        self.connect_with(host, port, &IsolationToken::no_isolation())
            .await
    }

    /// [`connect`](Self::connect), isolated by `token`: streams with
    /// different tokens never share a circuit.
    pub async fn connect_with(
        &self,
        host: &str,
        port: u16,
        token: &IsolationToken,
    ) -> Result<DataStream, EmbedError> {
        let target = Target::parse(host, port)?;
        let ctx = connect::Ctx {
            client: self.client.clone(),
            stream_timeout: self.stream_timeout,
            handle: self.handle.clone(),
        };
        let token = token.0;
        self.run(async move { connect::connect(ctx, target, token).await })
            .await?
    }

    /// A new identity, as `SIGNAL NEWNYM`: streams opened afterwards never
    /// share a circuit with earlier ones, and their circuits avoid the
    /// exits in use when other exits can serve. Rate-limited like tor
    /// (once per 10 s): a request inside the interval waits for its end.
    pub async fn new_identity(&self) {
        let c = self.client.clone();
        let _ = self.run(async move { c.new_identity().await }).await;
    }

    /// The client's state as JSON (what `<data_dir>/status.json` holds:
    /// circuits, build times, onion-client counters).
    pub fn status(&self) -> serde_json::Value {
        self.client.status()
    }

    /// Stop the client: every task it runs (directory refresh, circuit
    /// building, `status.json` writes, open streams, which end) is
    /// cancelled, and this returns once they are gone (or after a grace
    /// period of 10 s for blocking file writes).
    pub async fn shutdown(mut self) {
        if let Some(rt) = self.rt.take() {
            // A runtime cannot be stopped from async code: a plain thread
            // waits for it (so this works from any executor). Should no
            // thread start, it is stopped without waiting.
            let (give, take) = std::sync::mpsc::channel::<Runtime>();
            let (done, stopped) = tokio::sync::oneshot::channel();
            let spawned = std::thread::Builder::new()
                .name("onionmix-client-stop".into())
                .spawn(move || {
                    if let Ok(rt) = take.recv() {
                        rt.shutdown_timeout(SHUTDOWN_GRACE);
                        let _ = done.send(());
                    }
                });
            let waited = match spawned {
                Ok(_) => match give.send(rt) {
                    Ok(()) => stopped.await.is_ok(),
                    Err(std::sync::mpsc::SendError(rt)) => {
                        rt.shutdown_background();
                        false
                    }
                },
                Err(_) => {
                    rt.shutdown_background();
                    false
                }
            };
            if !waited {
                tracing::warn!("embedded client: stopped without waiting for its tasks");
            }
        }
        info!("embedded onionmix client stopped");
    }

    /// Run `fut` on the client's runtime (so everything it spawns lives
    /// there and stops with [`shutdown`](Self::shutdown)).
    async fn run<F>(&self, fut: F) -> Result<F::Output, EmbedError>
    where
        F: std::future::Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle
            .spawn(fut)
            .await
            .map_err(|_| EmbedError::Shutdown)
    }
}

impl Drop for OnionmixClient {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_distinct_and_clones_equal() {
        let a = IsolationToken::new();
        let b = IsolationToken::new();
        assert_ne!(a, b);
        assert_eq!(a.clone(), a);
        assert_ne!(a, IsolationToken::no_isolation());
        assert_eq!(
            IsolationToken::no_isolation(),
            IsolationToken::no_isolation()
        );
    }

    /// A configuration whose one authority listens nowhere.
    #[allow(clippy::unwrap_used)]
    fn unreachable_cfg(data_dir: &std::path::Path) -> ClientConfig {
        let text = format!(
            "data_dir = {:?}\ntesting_network = true\n[[authority]]\nnickname = \"a\"\n\
             v3ident = \"{}\"\nfingerprint = \"{}\"\ndir_addr = \"127.0.0.1:1\"\n\
             or_addr = \"127.0.0.1:2\"\n",
            data_dir,
            "AB".repeat(20),
            "CD".repeat(20)
        );
        ClientConfig::parse(&text).unwrap()
    }

    #[allow(clippy::unwrap_used)]
    #[tokio::test]
    async fn launch_with_a_bad_state_dir_is_an_error() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("not-a-dir");
        std::fs::write(&file, b"x").unwrap();
        let e = OnionmixClient::launch(unreachable_cfg(&file.join("state")))
            .await
            .unwrap_err();
        assert!(matches!(e, EmbedError::Setup(_)), "{e}");
    }

    #[allow(clippy::unwrap_used)]
    #[tokio::test]
    async fn bootstrap_timeout_then_clean_stop_without_a_network() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = unreachable_cfg(&tmp.path().join("state"));
        let e = OnionmixClient::bootstrapped(cfg.clone(), Duration::from_millis(300))
            .await
            .unwrap_err();
        assert!(matches!(e, EmbedError::BootstrapTimeout(_)), "{e}");
        let c = OnionmixClient::launch(cfg.clone()).await.unwrap();
        assert!(c.socks_addr().is_none());
        assert!(!c.is_bootstrapped());
        assert!(c.bootstrap_status().progress < 100);
        assert!(matches!(
            c.connect("example.com", 0).await,
            Err(EmbedError::BadTarget(_))
        ));
        let t0 = std::time::Instant::now();
        c.shutdown().await;
        assert!(
            t0.elapsed() < SHUTDOWN_GRACE,
            "shutdown waited out its grace"
        );
    }

    #[allow(clippy::unwrap_used)]
    #[tokio::test]
    async fn socks_port_on_request() {
        let tmp = tempfile::tempdir().unwrap();
        let mut cfg = unreachable_cfg(&tmp.path().join("state"));
        cfg.socks_listen = "127.0.0.1:0".parse().unwrap();
        let c = OnionmixClient::launch_with_socks(cfg).await.unwrap();
        let addr = c.socks_addr().expect("a SOCKS port");
        assert!(addr.ip().is_loopback() && addr.port() != 0, "{addr}");
        tokio::net::TcpStream::connect(addr).await.unwrap();
        c.shutdown().await;
    }

    #[allow(clippy::unwrap_used)]
    #[test]
    fn usable_from_a_current_thread_runtime_and_dropped_inside_it() {
        let tmp = tempfile::tempdir().unwrap();
        let cfg = unreachable_cfg(&tmp.path().join("state"));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let c = OnionmixClient::launch(cfg).await.unwrap();
            let _ = c.bootstrap_events();
            drop(c);
        });
    }
}
