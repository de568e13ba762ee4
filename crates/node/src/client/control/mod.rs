//! The client's control port (tor's ControlPort: control-spec.txt) over TCP
//! and a unix socket. The protocol is `onionmix_frontend::control`; this
//! module owns the sockets, the cookie file, the per-connection tasks and
//! the client's side of the commands (`backend`). What the client reports
//! is gathered in `hub` without slowing its data path.

pub mod backend;
mod client_auth;
pub mod hub;
pub mod onions;
pub mod streams;

#[cfg(test)]
mod hub_tests;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};

use onionmix_frontend::control::AuthConfig;

use super::chanmgr::ChanMgr;
use super::circmgr::CircMgr;
use super::config::ClientConfig;
use super::dir::DirMgr;
use crate::control::Ownership;
use crate::control::bus::EventBus;
use crate::control::server::{self, ControlNode, ControlSettings};
use hub::ControlHub;

/// What every control connection shares.
pub struct ControlContext {
    /// Observable state and events.
    pub hub: Arc<ControlHub>,
    /// Directory.
    pub dir: Arc<DirMgr>,
    /// Circuits.
    pub circmgr: CircMgr,
    /// Channels (for controller-built circuits).
    pub chanmgr: ChanMgr,
    /// Configuration as loaded.
    pub cfg: Arc<ClientConfig>,
    /// The SOCKS listener.
    pub socks: Arc<super::socks::SocksListener>,
    /// Authentication secrets.
    pub auth: AuthConfig,
    /// Per-attempt circuit build timeout.
    pub build_timeout: Duration,
    /// Ephemeral onion services (ADD_ONION).
    pub onions: Arc<onions::Onions>,
    /// The onion-service client (ONION_CLIENT_AUTH_*, HSFETCH).
    pub hs: Option<super::hs::HsClient>,
    /// HSDir requests HSFETCH / HSPOST may have in flight.
    pub hs_requests: Arc<Semaphore>,
    /// HSFETCH requests in flight, per service.
    pub hs_pending: Arc<backend::hsdesc::PendingFetches>,
    /// The owning controller.
    pub owner: Ownership,
    listeners: Mutex<Vec<String>>,
}

impl std::fmt::Debug for ControlContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlContext").finish()
    }
}

impl ControlContext {
    /// The bound control listeners (`net/listeners/control`).
    pub fn listeners(&self) -> Vec<String> {
        self.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl ControlNode for ControlContext {
    type Conn = backend::ClientBackend;
    fn bus(&self) -> &EventBus {
        &self.hub.bus
    }
    fn auth(&self) -> &AuthConfig {
        &self.auth
    }
    fn open(self: &Arc<Self>, sub_id: u64) -> backend::ClientBackend {
        backend::ClientBackend {
            ctx: self.clone(),
            sub_id,
            owning: Arc::new(AtomicBool::new(false)),
        }
    }
    fn closed(&self, conn: backend::ClientBackend, sub_id: u64) {
        // Its ephemeral onion services (not the detached ones) go with it.
        self.onions.connection_closed(sub_id);
        if conn.owning.load(Ordering::Relaxed) {
            self.owner.owner_connection_closed();
        }
    }
}

/// The control-port settings of a client config.
pub fn settings(cfg: &ClientConfig) -> ControlSettings {
    ControlSettings {
        port: cfg.control_port,
        socket: cfg.control_socket.clone(),
        cookie_authentication: cfg.cookie_authentication,
        cookie_auth_file: cfg.cookie_auth_file.clone(),
        hashed_control_password: cfg.hashed_control_password.clone(),
        max_connections: cfg.max_control_connections,
        data_dir: cfg.data_dir.clone(),
    }
}

/// Everything `start` needs.
pub struct ControlParts {
    /// Hub.
    pub hub: Arc<ControlHub>,
    /// Directory.
    pub dir: Arc<DirMgr>,
    /// Circuits.
    pub circmgr: CircMgr,
    /// Channels.
    pub chanmgr: ChanMgr,
    /// Config.
    pub cfg: Arc<ClientConfig>,
    /// The SOCKS listener.
    pub socks: Arc<super::socks::SocksListener>,
    /// Set when something asks the client to exit.
    pub shutdown: Arc<Notify>,
    /// The ephemeral onion services ADD_ONION starts.
    pub onions: Arc<onions::Onions>,
    /// The onion-service client (ONION_CLIENT_AUTH_*).
    pub hs: Option<super::hs::HsClient>,
}

/// Bind the control listeners the config asks for and start serving; also
/// the once-a-second bandwidth/cleanup ticker and the owner watch. Returns
/// the TCP address bound, if any.
pub async fn start(p: ControlParts) -> Result<Option<SocketAddr>, String> {
    let cfg = p.cfg.clone();
    let s = settings(&cfg);
    let auth = server::auth_config(&s)?;
    let bound = server::bind(&s).await?;
    let addr = bound.addr;
    let ctx = Arc::new(ControlContext {
        hub: p.hub.clone(),
        dir: p.dir,
        circmgr: p.circmgr,
        chanmgr: p.chanmgr,
        build_timeout: cfg.circuit_build_timeout(),
        cfg: cfg.clone(),
        socks: p.socks,
        auth,
        onions: p.onions,
        hs: p.hs,
        hs_requests: Arc::new(Semaphore::new(backend::hsdesc::MAX_CONTROL_HS_REQUESTS)),
        hs_pending: Arc::default(),
        owner: Ownership::new(cfg.owning_controller_process, p.shutdown),
        listeners: Mutex::new(bound.names.clone()),
    });
    server::serve(bound, ctx.clone());
    tokio::spawn(tick(ctx));
    Ok(addr)
}

/// Once a second: BW/CIRC_BW events, circuits and channels that died,
/// and the owning process.
async fn tick(ctx: Arc<ControlContext>) {
    let mut iv = tokio::time::interval(Duration::from_secs(1));
    loop {
        iv.tick().await;
        ctx.hub.tick_bandwidth();
        ctx.hub.sweep_circuits();
        let live = ctx.chanmgr.live_peers();
        for id in ctx.hub.orconn_status().1 {
            if !live.contains(&id) {
                ctx.hub.orconn(id, "", "CLOSED", Some("DONE"));
            }
        }
        ctx.owner.check_owner();
    }
}
