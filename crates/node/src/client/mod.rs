//! The onion-routing client: directory bootstrap, guards, circuits, and a
//! SOCKS5 front end.

pub mod chanmgr;
pub mod circmgr;
pub mod circuit;
pub mod config;
pub mod dir;
pub mod hs;
pub mod socks;
pub mod stream;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use onionmix_link::TlsTransport;

use chanmgr::ChanMgr;
use circmgr::{CircMgr, CircMgrConfig, IsolationKey};
use config::ClientConfig;
use dir::DirMgr;

/// A running client.
#[derive(Clone)]
pub struct Client {
    /// Directory manager.
    pub dir: Arc<DirMgr>,
    /// Circuit manager.
    pub circmgr: CircMgr,
    /// Where SOCKS listens.
    pub socks_addr: SocketAddr,
    /// The onion-service client.
    pub hs: hs::HsClient,
    /// The onion services this process hosts.
    pub services: Vec<crate::service::ServiceHandle>,
    ready: watch::Receiver<bool>,
    testing: bool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("socks_addr", &self.socks_addr)
            .finish()
    }
}

/// Client start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Bad configuration or data directory.
    #[error("{0}")]
    Setup(String),
}

impl Client {
    /// Start a client: bind SOCKS, then bootstrap in the background; host
    /// the configured onion services.
    pub async fn start(cfg: ClientConfig) -> Result<Client, ClientError> {
        Self::start_with(cfg, true).await
    }

    /// [`Client::start`], with or without the SOCKS port (an onion
    /// service process needs none).
    pub async fn start_with(cfg: ClientConfig, socks: bool) -> Result<Client, ClientError> {
        create_private_dir(&cfg.data_dir).map_err(ClientError::Setup)?;
        let cfg = Arc::new(cfg);
        let dir = Arc::new(DirMgr::new(cfg.clone()).map_err(ClientError::Setup)?);
        let transport = TlsTransport::client().map_err(|e| ClientError::Setup(e.to_string()))?;
        let chanmgr = ChanMgr::new(transport);
        let (d1, d2, d3) = (dir.clone(), dir.clone(), dir.clone());
        let circmgr = CircMgr::new(
            CircMgrConfig {
                build_timeout: cfg.circuit_build_timeout(),
                max_dirtiness: cfg.max_dirtiness(),
            },
            chanmgr,
            Arc::new(move |p, avoid| d1.pick_path(p, avoid)),
            Arc::new(move |id, port| d2.exit_allows(id, port)),
            Arc::new(move |id, ok| d3.report_guard(id, ok)),
        );
        let auth = cfg
            .client_onion_auth_dir
            .as_deref()
            .map(hs::load_auth_dir)
            .unwrap_or_default();
        let hs = hs::HsClient::new(
            dir.clone(),
            circmgr.clone(),
            hs::HsClientConfig {
                connect_timeout: cfg.onion_connect_timeout(),
                stream_timeout: cfg.stream_timeout(),
                max_dirtiness: cfg.max_dirtiness(),
                pow_min_effort: cfg.onion_pow_min_effort,
            },
            auth,
        );
        let (ready_tx, ready_rx) = watch::channel(false);
        let socks_addr = if socks {
            let listener = TcpListener::bind(cfg.socks_listen).await.map_err(|e| {
                ClientError::Setup(format!(
                    "cannot listen for SOCKS on {}: {e}",
                    cfg.socks_listen
                ))
            })?;
            let socks_addr = listener
                .local_addr()
                .map_err(|e| ClientError::Setup(e.to_string()))?;
            info!("SOCKS listening on {socks_addr}");
            let ctx = socks::SocksContext {
                circmgr: circmgr.clone(),
                stream_timeout: cfg.stream_timeout(),
                ready: ready_rx.clone(),
                extended_errors: cfg.socks_extended_errors,
                hs: Some(hs.clone()),
            };
            tokio::spawn(socks::serve(listener, ctx, cfg.max_socks_connections));
            socks_addr
        } else {
            SocketAddr::from(([0, 0, 0, 0], 0))
        };
        let mut services = Vec::new();
        for svc in &cfg.onion_services {
            let ctx = crate::service::ServiceCtx {
                dir: dir.clone(),
                circmgr: circmgr.clone(),
                ready: ready_rx.clone(),
            };
            services.push(crate::service::start(ctx, svc.clone()).map_err(ClientError::Setup)?);
        }
        let client = Client {
            dir,
            circmgr,
            socks_addr,
            hs,
            services,
            ready: ready_rx,
            testing: cfg.testing_network,
        };
        let c = client.clone();
        tokio::spawn(async move { c.bootstrap_and_maintain(ready_tx).await });
        let c = client.clone();
        let status_path = cfg.data_dir.join("status.json");
        tokio::spawn(async move { c.write_status_forever(status_path).await });
        Ok(client)
    }

    /// Wait until bootstrapped (directory + a first circuit).
    pub async fn wait_bootstrapped(&self, timeout: Duration) -> bool {
        let mut r = self.ready.clone();
        matches!(
            tokio::time::timeout(timeout, r.wait_for(|v| *v)).await,
            Ok(Ok(_))
        )
    }

    /// A snapshot of the client's state (also written to
    /// `<data_dir>/status.json` every second).
    pub fn status(&self) -> serde_json::Value {
        let times = self.circmgr.build_times();
        let recent: Vec<f64> = times
            .iter()
            .rev()
            .take(100)
            .map(|d| d.as_secs_f64() * 1e3)
            .collect();
        serde_json::json!({
            "bootstrapped": *self.ready.borrow(),
            "socks": self.socks_addr.to_string(),
            "circuits_built": times.len(),
            "circuits_open": self.circmgr.open_circuits(),
            "open_circuit_paths": self.circmgr.open_circuit_paths(),
            "recent_build_times_ms": recent,
            "onion_client": self.hs.stats().to_json(),
            "onion_services": self.services.iter().map(|s| s.status()).collect::<Vec<_>>(),
        })
    }

    async fn write_status_forever(self, path: std::path::PathBuf) {
        let mut last = String::new();
        loop {
            let text = self.status().to_string();
            if text != last {
                if onionmix_fsutil::write_atomic(&path, &text).is_err() {
                    warn!("cannot write {}", path.display());
                }
                last = text;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn bootstrap_and_maintain(self, ready: watch::Sender<bool>) {
        info!("Bootstrapped 5% (conn): Connecting to a directory authority");
        // Testing networks publish their first consensus within seconds:
        // retry often there; back off to 30 s on the real network.
        let max_delay = if self.testing {
            Duration::from_secs(2)
        } else {
            Duration::from_secs(30)
        };
        let mut delay = Duration::from_secs(1);
        loop {
            match self.dir.refresh(None).await {
                Ok(_) => break,
                Err(e) => {
                    warn!("directory bootstrap: {e}; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(max_delay);
                }
            }
        }
        info!("Bootstrapped 75% (enough_dirinfo): Loaded enough directory info to build circuits");
        let mut delay = Duration::from_secs(1);
        loop {
            match self
                .circmgr
                .get_exit_circuit(&IsolationKey::default(), None)
                .await
            {
                Ok(_) => break,
                Err(e) => {
                    warn!("could not build a first circuit: {e}; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(max_delay);
                    if let Err(e) = self.dir.refresh(None).await {
                        warn!("directory refresh: {e}");
                    }
                }
            }
        }
        info!("Bootstrapped 100% (done): Done");
        let _ = ready.send(true);
        loop {
            // Sleep towards the refresh time in slices, so a wall clock
            // that jumps forward (past the consensus's lifetime) is noticed.
            let at = self.dir.next_refresh_at();
            while crate::clock::now() < at {
                tokio::time::sleep(crate::clock::sleep_towards(at)).await;
            }
            // Once circuits exist, fetch over BEGIN_DIR; fall back to DirPort.
            if let Err(e) = self.dir.refresh(Some(&self.circmgr)).await {
                warn!("directory refresh failed: {e}");
                tokio::time::sleep(Duration::from_secs(10)).await;
            }
        }
    }
}

fn create_private_dir(p: &std::path::Path) -> Result<(), String> {
    std::fs::create_dir_all(p).map_err(|e| format!("cannot create {}: {e}", p.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o700));
    }
    Ok(())
}

/// Run a client until SIGINT/SIGTERM.
pub async fn run(cfg: ClientConfig) -> Result<(), ClientError> {
    let _client = Client::start(cfg).await?;
    wait_for_shutdown().await;
    info!("shutting down");
    Ok(())
}

/// Host the configured onion services (no SOCKS port) until SIGINT/SIGTERM.
pub async fn run_services(cfg: ClientConfig) -> Result<(), ClientError> {
    if cfg.onion_services.is_empty() {
        return Err(ClientError::Setup(
            "no [[onion_service]] configured".to_string(),
        ));
    }
    let _client = Client::start_with(cfg, false).await?;
    wait_for_shutdown().await;
    info!("shutting down");
    Ok(())
}

/// Wait for SIGINT or SIGTERM.
pub async fn wait_for_shutdown() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}
