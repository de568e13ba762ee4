//! The onion-routing client: directory bootstrap, guards, circuits, and a
//! SOCKS5 front end.

pub mod buildtimes;
pub mod chanmgr;
pub mod circmgr;
pub mod circuit;
pub mod config;
pub mod conflux;
pub mod connect;
pub mod control;
pub mod dir;
pub mod dormancy;
pub mod hs;
pub mod preemptive;
pub mod socks;
pub mod stream;
pub mod udp;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::{Notify, watch};
use tracing::{info, warn};

use onionmix_link::TlsTransport;

use chanmgr::ChanMgr;
use circmgr::{CircMgr, CircMgrConfig, IsolationKey};
use config::ClientConfig;
use control::hub::ControlHub;
use dir::DirMgr;

/// Paths drawn after NEWNYM looking for an exit the old circuits did not
/// use, before settling for one that did (only one exit can serve).
const NEWNYM_EXIT_TRIES: usize = 32;

/// A running client.
#[derive(Clone)]
pub struct Client {
    /// Directory manager.
    pub dir: Arc<DirMgr>,
    /// Circuit manager.
    pub circmgr: CircMgr,
    /// Where SOCKS listened at start (`SETCONF SocksPort` may move it;
    /// `GETINFO net/listeners/socks` tells where it is now).
    pub socks_addr: SocketAddr,
    /// Where the control port listens (TCP), if configured.
    pub control_addr: Option<SocketAddr>,
    /// Where the metrics port listens, if configured.
    pub metrics_addr: Option<SocketAddr>,
    /// What the control and metrics ports see.
    pub hub: Arc<ControlHub>,
    shutdown: Arc<Notify>,
    /// Congestion- and flow-control counters of all circuits.
    pub flow: Arc<ChanMgr>,
    /// The onion-service client.
    pub hs: hs::HsClient,
    /// The onion services this process hosts (from the config).
    pub services: Vec<crate::service::ServiceHandle>,
    /// Ephemeral onion services added on the control port.
    pub onions: Arc<control::onions::Onions>,
    ready: watch::Receiver<bool>,
    testing: bool,
    reject_internal: bool,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("socks_addr", &self.socks_addr)
            .finish()
    }
}

fn flow_json(f: &crate::reactor::ClientFlowStats) -> serde_json::Value {
    use std::sync::atomic::Ordering::Relaxed;
    serde_json::json!({
        "cc_circuits": f.cc_circuits.load(Relaxed),
        "xoff_sent": f.xoff_sent.load(Relaxed),
        "xon_sent": f.xon_sent.load(Relaxed),
        "xoff_received": f.xoff_received.load(Relaxed),
        "xon_received": f.xon_received.load(Relaxed),
        "half_closed_cells": f.half_closed_cells.load(Relaxed),
        "invalid_cells": f.invalid_cells.load(Relaxed),
        "early_xon_xoff": f.early_xon_xoff.load(Relaxed),
    })
}

/// Client start-up failures.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Bad configuration or data directory.
    #[error("{0}")]
    Setup(String),
}

impl Client {
    /// Whether internal destinations are refused (see
    /// [`ClientConfig::rejects_internal_addresses`]).
    pub fn rejects_internal_addresses(&self) -> bool {
        self.reject_internal
    }

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
        let hub = Arc::new(ControlHub::new());
        hub.leave_unattached.store(
            cfg.leave_streams_unattached,
            std::sync::atomic::Ordering::Relaxed,
        );
        let mut chanmgr = ChanMgr::new(transport).with_hub(hub.clone());
        if cfg.quic {
            // Outgoing only: any local port, IPv4 (the directory's QUIC
            // addresses are the relays' IPv4 ones).
            let q = onionmix_link::QuicTransport::client(
                SocketAddr::from(([0, 0, 0, 0], 0)),
                cfg.quic_limits()
                    .map_err(|e| ClientError::Setup(e.to_string()))?,
            )
            .map_err(|e| ClientError::Setup(format!("QUIC: {e}")))?;
            chanmgr = chanmgr.with_quic(q, Duration::from_secs(cfg.quic_fallback_secs));
        }
        let flow = Arc::new(chanmgr.clone());
        let (d1, d2, d3) = (dir.clone(), dir.clone(), dir.clone());
        let hp = hub.clone();
        let circmgr = CircMgr::new(
            CircMgrConfig {
                learn_build_timeout: cfg.learn_circuit_build_timeout,
                build_timeout: cfg.circuit_build_timeout(),
                max_dirtiness: cfg.max_dirtiness(),
                preemptive: cfg.preemptive_circuits,
                prediction_base: Duration::from_secs(cfg.circuits_available_timeout_secs),
                state_path: Some(cfg.data_dir.join("state")),
            },
            chanmgr.clone(),
            Arc::new(move |p, avoid| {
                if hp
                    .disable_network
                    .load(std::sync::atomic::Ordering::Relaxed)
                {
                    return Err("DisableNetwork is set".into());
                }
                // After NEWNYM, prefer exits the old circuits did not use.
                let extra = hp
                    .newnym_avoid
                    .lock()
                    .map(|g| g.clone())
                    .unwrap_or_default();
                let first = d1.pick_path(p, avoid)?;
                let old_exit = |path: &[circuit::HopTarget]| {
                    path.len() > 1 && path.last().is_some_and(|h| extra.contains(&h.rsa_id))
                };
                if !old_exit(&first) {
                    return Ok(first);
                }
                for _ in 0..NEWNYM_EXIT_TRIES {
                    if let Ok(path) = d1.pick_path(p, avoid)
                        && !old_exit(&path)
                    {
                        return Ok(path);
                    }
                }
                Ok(first)
            }),
            Arc::new(move |id, port| d2.exit_allows(id, port)),
            Arc::new(move |id, ok| d3.report_guard(id, ok)),
        );
        if cfg.conflux {
            circmgr.enable_conflux(dir.clone());
        }
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
        hs.set_control_hub(hub.clone());
        let (ready_tx, ready_rx) = watch::channel(false);
        let (dir_ready_tx, dir_ready_rx) = watch::channel(false);
        let ctx = socks::SocksContext {
            circmgr: circmgr.clone(),
            dir: Some(dir.clone()),
            stream_timeout: cfg.stream_timeout(),
            ready: ready_rx.clone(),
            dir_ready: Some(dir_ready_rx),
            extended_errors: cfg.socks_extended_errors,
            reject_internal: cfg.rejects_internal_addresses(),
            hub: hub.clone(),
            optimistic_data: cfg.optimistic_data,
            optimistic_reply: cfg.socks_optimistic_reply,
            hs: Some(hs.clone()),
        };
        // An onion-service process has no SOCKS port (tor's `SocksPort
        // 0`); the control port can still open one (SETCONF SocksPort).
        let (socks_listener, socks_addr) = if socks {
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
            let l = socks::SocksListener::start(
                listener,
                ctx,
                cfg.max_socks_connections,
                cfg.allow_public_socks,
            );
            (l, socks_addr)
        } else {
            let l = socks::SocksListener::closed(
                ctx,
                cfg.max_socks_connections,
                cfg.allow_public_socks,
            );
            (l, SocketAddr::from(([0, 0, 0, 0], 0)))
        };
        let mut services = Vec::new();
        for svc in &cfg.onion_services {
            let ctx = crate::service::ServiceCtx {
                dir: dir.clone(),
                circmgr: circmgr.clone(),
                ready: ready_rx.clone(),
                hub: Some(hub.clone()),
                rend_query: None,
            };
            services.push(crate::service::start(ctx, svc.clone()).map_err(ClientError::Setup)?);
        }
        let onions = Arc::new(control::onions::Onions::new(
            Some(crate::service::ServiceCtx {
                dir: dir.clone(),
                circmgr: circmgr.clone(),
                ready: ready_rx.clone(),
                hub: Some(hub.clone()),
                rend_query: None,
            }),
            &services
                .iter()
                .map(|s| s.address.clone())
                .collect::<Vec<_>>(),
        ));
        let shutdown = Arc::new(Notify::new());
        let control_addr = control::start(control::ControlParts {
            hub: hub.clone(),
            dir: dir.clone(),
            circmgr: circmgr.clone(),
            chanmgr: chanmgr.clone(),
            cfg: cfg.clone(),
            socks: socks_listener,
            shutdown: shutdown.clone(),
            onions: onions.clone(),
            hs: Some(hs.clone()),
        })
        .await
        .map_err(ClientError::Setup)?;
        let metrics_addr = match cfg.metrics_port {
            Some(a) => Some(
                crate::metrics::serve(
                    a,
                    crate::metrics::Source::Client(hub.clone(), Box::new(chanmgr.clone())),
                )
                .await
                .map_err(ClientError::Setup)?,
            ),
            None => None,
        };
        let client = Client {
            dir,
            circmgr,
            socks_addr,
            control_addr,
            metrics_addr,
            hub,
            shutdown,
            flow,
            hs,
            services,
            onions,
            ready: ready_rx,
            testing: cfg.testing_network,
            reject_internal: cfg.rejects_internal_addresses(),
        };
        let c = client.clone();
        tokio::spawn(async move { c.bootstrap_and_maintain(ready_tx, dir_ready_tx).await });
        let c = client.clone();
        let dormancy = cfg.dormancy();
        tokio::spawn(async move { c.watch_dormancy(dormancy).await });
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
            "circuits_built": self.circmgr.counters().built.load(std::sync::atomic::Ordering::Relaxed),
            "circuits_open": self.circmgr.open_circuits(),
            "open_circuit_paths": self.circmgr.open_circuit_paths(),
            "clean_circuit_paths": self.circmgr.clean_circuit_paths(),
            "recent_build_times_ms": recent,
            "circuits": self.circmgr.status(),
            "flow_control": flow_json(self.flow.flow_stats()),
            "onion_client": self.hs.stats().to_json(),
            "onion_services": self.services.iter().map(|s| s.status()).collect::<Vec<_>>(),
            "ephemeral_onion_services": self.onions.handles().iter().map(|s| s.status()).collect::<Vec<_>>(),
        })
    }

    /// Go dormant after the configured idle time (`dormancy`).
    async fn watch_dormancy(self, cfg: dormancy::DormancyConfig) {
        loop {
            tokio::time::sleep(dormancy::interval(&cfg)).await;
            let verdict = dormancy::check(
                &cfg,
                self.circmgr.is_dormant(),
                self.circmgr.idle_for(),
                self.hub.open_streams(),
                self.services.len() + self.onions.len(),
            );
            match verdict {
                dormancy::Verdict::Active => self.circmgr.note_activity(),
                dormancy::Verdict::Idle => {}
                dormancy::Verdict::FallAsleep => {
                    // Tor's notice, word for word.
                    info!("No user activity in a long time: becoming dormant.");
                    self.circmgr.set_dormant(true);
                }
            }
        }
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

    /// Whether the client has bootstrapped (directory and a first circuit).
    pub fn is_bootstrapped(&self) -> bool {
        *self.ready.borrow()
    }

    /// What `SIGNAL NEWNYM` does, for embedding applications: a new nym
    /// epoch (new streams never share circuits with older ones), the exits
    /// in use avoided where possible, and the clean circuits dropped; with
    /// tor's rate limit (at most one per 10 s: a request inside the
    /// interval waits for its end). Returns once applied; `false` when
    /// another deferred request already covers this one.
    pub async fn new_identity(&self) -> bool {
        match self.hub.newnym_due() {
            Some(d) => {
                if !d.is_zero() {
                    info!("Rate limiting NEWNYM request: delaying by {d:?}");
                    tokio::time::sleep(d).await;
                }
                self.hub.newnym_apply();
                self.circmgr.clear();
                true
            }
            None => false,
        }
    }

    /// Wait until something (SIGNAL SHUTDOWN/HALT, the owning controller
    /// going away) asks the client to exit.
    pub async fn shutdown_requested(&self) {
        self.shutdown.notified().await;
    }

    async fn wait_network_enabled(&self) {
        while self
            .hub
            .disable_network
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Until the network is enabled and the client is not dormant (tor
    /// fetches no directory information while dormant).
    async fn wait_active(&self) {
        loop {
            self.wait_network_enabled().await;
            if !self.circmgr.is_dormant() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    async fn bootstrap_and_maintain(
        self,
        ready: watch::Sender<bool>,
        dir_ready: watch::Sender<bool>,
    ) {
        self.wait_network_enabled().await;
        info!("Bootstrapped 5% (conn): Connecting to a directory authority");
        self.hub.bootstrap(5, "conn", "Connecting to a relay");
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
                Ok(nd) => {
                    self.circmgr.set_consensus_params(nd.params());
                    break;
                }
                Err(e) => {
                    warn!("directory bootstrap: {e}; retrying in {delay:?}");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(max_delay);
                }
            }
        }
        info!("Bootstrapped 75% (enough_dirinfo): Loaded enough directory info to build circuits");
        self.hub.bootstrap(
            75,
            "enough_dirinfo",
            "Loaded enough directory info to build circuits",
        );
        let _ = dir_ready.send(true);
        self.hub
            .bootstrap(95, "circuit_create", "Establishing a Tor circuit");
        let mut delay = Duration::from_secs(1);
        loop {
            self.wait_network_enabled().await;
            match self
                .circmgr
                .get_exit_circuit(&IsolationKey::default(), None)
                .await
            {
                Ok(c) => {
                    self.hub.circ_handle(&c, false);
                    break;
                }
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
        self.hub.bootstrap(100, "done", "Done");
        self.hub.log("NOTICE", "Bootstrapped 100% (done): Done");
        let _ = ready.send(true);
        self.circmgr.start_preemptive();
        loop {
            // Sleep towards the refresh time in slices, so a wall clock
            // that jumps forward (past the consensus's lifetime) is noticed.
            let at = self.dir.next_refresh_at();
            while crate::clock::now() < at {
                tokio::time::sleep(crate::clock::sleep_towards(at)).await;
            }
            self.wait_active().await;
            // Once circuits exist, fetch over BEGIN_DIR; fall back to DirPort.
            match self.dir.refresh(Some(&self.circmgr)).await {
                Ok(nd) => self.circmgr.set_consensus_params(nd.params()),
                Err(e) => {
                    warn!("directory refresh failed: {e}");
                    tokio::time::sleep(Duration::from_secs(10)).await;
                }
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
    let client = Client::start(cfg).await?;
    tokio::select! {
        _ = wait_for_shutdown() => {}
        _ = client.shutdown_requested() => {}
    }
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
