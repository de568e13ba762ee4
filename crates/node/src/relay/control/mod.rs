//! The relay's (and authority's) control port: the same port as the
//! client's (`crate::control::server`), with what a relay can answer
//! (`backend`): its identity, listeners, descriptor and reachability
//! status, traffic on its links, the consensus it fetched; ORCONN and BW
//! events, STATUS_SERVER for descriptor uploads, its own notices; SIGNAL
//! RELOAD / SHUTDOWN (stop accepting, exit after `shutdown_wait_secs`, as
//! tor's ShutdownWaitLength) / HALT / DUMP / HEARTBEAT. A relay originates
//! no circuits, so it sends no CIRC or STREAM events (tor's relays report
//! only their own circuits there too).

mod backend;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::sync::Notify;
use tracing::info;

use onionmix_frontend::control::AuthConfig;
use onionmix_frontend::control::events::bootstrap_text;
use onionmix_frontend::control::reply;
use onionmix_netdoc::NetDir;

use super::RelayCtx;
use crate::control::bus::EventBus;
use crate::control::counted::Traffic;
use crate::control::server::{self, ControlNode};
use crate::control::{OrConns, Ownership};

pub use backend::RelayBackend;

/// What the relay tells its control port, kept whether or not one is
/// configured (the counters cost one atomic add per read or write).
#[derive(Debug)]
pub struct RelayControl {
    /// Event fan-out.
    pub bus: EventBus,
    /// Bytes read and written on the relay's links (after TLS).
    pub traffic: Arc<Traffic>,
    /// Channels to relays.
    pub orconns: OrConns,
    netdir: RwLock<Option<Arc<NetDir>>>,
    /// At least one authority accepted our descriptor.
    pub descriptor_accepted: AtomicBool,
    /// SIGNAL SHUTDOWN: no new ORPort connections, exiting soon.
    pub closing: AtomicBool,
    /// Notified to stop the relay.
    pub shutdown: Arc<Notify>,
    bw_last: Mutex<(u64, u64)>,
}

impl Default for RelayControl {
    fn default() -> Self {
        RelayControl {
            bus: EventBus::default(),
            traffic: Arc::default(),
            orconns: OrConns::default(),
            netdir: RwLock::new(None),
            descriptor_accepted: AtomicBool::new(false),
            closing: AtomicBool::new(false),
            shutdown: Arc::new(Notify::new()),
            bw_last: Mutex::new((0, 0)),
        }
    }
}

impl RelayControl {
    /// The last consensus fetched (microdesc flavour, verified).
    pub fn netdir(&self) -> Option<Arc<NetDir>> {
        self.netdir
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// A new consensus; the first one completes the relay's bootstrap.
    pub fn set_netdir(&self, nd: NetDir) {
        let first = self
            .netdir
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .replace(Arc::new(nd))
            .is_none();
        if first {
            self.bus.emit("STATUS_CLIENT", || {
                reply::event(&format!("STATUS_CLIENT {}", bootstrap_phase(true)))
            });
            self.bus.log("NOTICE", "Bootstrapped 100% (done): Done");
        }
    }

    fn nickname(&self, id: &[u8; 20]) -> String {
        self.netdir()
            .and_then(|nd| nd.listed_by_rsa_id(id).map(|r| r.nickname.clone()))
            .unwrap_or_default()
    }

    /// ORCONN for the channel to relay `id`.
    pub fn orconn(&self, id: [u8; 20], status: &'static str, reason: Option<&str>) {
        let nick = self.nickname(&id);
        self.orconns.event(&self.bus, id, &nick, status, reason);
    }

    /// An authority accepted our descriptor (tor's STATUS_SERVER
    /// ACCEPTED_SERVER_DESCRIPTOR, then GOOD_SERVER_DESCRIPTOR the first
    /// time).
    pub fn descriptor_accepted_by(&self, dir_addr: SocketAddr) {
        self.bus.emit("STATUS_SERVER", || {
            reply::event(&format!(
                "STATUS_SERVER NOTICE ACCEPTED_SERVER_DESCRIPTOR DIRAUTH={dir_addr}"
            ))
        });
        if !self.descriptor_accepted.swap(true, Ordering::Relaxed) {
            self.bus.emit("STATUS_SERVER", || {
                reply::event("STATUS_SERVER NOTICE GOOD_SERVER_DESCRIPTOR")
            });
        }
    }

    /// BW for the last second.
    fn tick_bandwidth(&self) {
        let (r, w) = (
            self.traffic.read.load(Ordering::Relaxed),
            self.traffic.written.load(Ordering::Relaxed),
        );
        let (dr, dw) = {
            let mut last = self.bw_last.lock().unwrap_or_else(|e| e.into_inner());
            let d = (r.saturating_sub(last.0), w.saturating_sub(last.1));
            *last = (r, w);
            d
        };
        self.bus
            .emit("BW", || reply::event(&format!("BW {dr} {dw}")));
    }
}

/// `status/bootstrap-phase`: a relay is bootstrapped once it has a
/// consensus (it builds no circuits of its own).
pub fn bootstrap_phase(done: bool) -> String {
    if done {
        bootstrap_text(100, "done", "Done")
    } else {
        bootstrap_text(0, "starting", "Starting")
    }
}

/// A relay's control port: shared by its connections.
pub struct RelayControlNode {
    /// The relay.
    pub ctx: Arc<RelayCtx>,
    auth: AuthConfig,
    /// The owning controller.
    pub owner: Ownership,
    listeners: Vec<String>,
}

impl ControlNode for RelayControlNode {
    type Conn = RelayBackend;
    fn bus(&self) -> &EventBus {
        &self.ctx.control.bus
    }
    fn auth(&self) -> &AuthConfig {
        &self.auth
    }
    fn open(self: &Arc<Self>, sub_id: u64) -> RelayBackend {
        RelayBackend::new(self.clone(), sub_id)
    }
    fn closed(&self, conn: RelayBackend, _sub_id: u64) {
        if conn.is_owner() {
            self.owner.owner_connection_closed();
        }
    }
}

impl RelayControlNode {
    /// SIGNAL SHUTDOWN: stop accepting ORPort connections and exit after
    /// the wait (at once without one, or at a second SHUTDOWN), as tor's
    /// relays do.
    fn begin_shutdown(&self) {
        let wait = self.ctx.cfg.shutdown_wait_secs;
        if wait == 0 || self.ctx.control.closing.swap(true, Ordering::Relaxed) {
            info!("Interrupt: exiting cleanly.");
            self.owner.request_shutdown();
            return;
        }
        let msg = format!(
            "Interrupt: we have stopped accepting new connections, and will shut down in {wait} seconds. Interrupt again to exit now."
        );
        self.ctx.control.bus.log("NOTICE", &msg);
        self.owner.request_shutdown_in(Duration::from_secs(wait));
    }
}

/// Bind the relay's control port (if configured) and serve it; also the
/// once-a-second BW events and owner watch. Returns the TCP address.
pub async fn start(ctx: Arc<RelayCtx>) -> Result<Option<SocketAddr>, String> {
    let s = ctx.cfg.control_settings();
    if !s.enabled() {
        return Ok(None);
    }
    let auth = server::auth_config(&s)?;
    let bound = server::bind(&s).await?;
    let addr = bound.addr;
    let node = Arc::new(RelayControlNode {
        owner: Ownership::new(
            ctx.cfg.owning_controller_process,
            ctx.control.shutdown.clone(),
        ),
        listeners: bound.names.clone(),
        auth,
        ctx,
    });
    server::serve(bound, node.clone());
    tokio::spawn(async move {
        let mut iv = tokio::time::interval(Duration::from_secs(1));
        loop {
            iv.tick().await;
            node.ctx.control.tick_bandwidth();
            node.owner.check_owner();
        }
    });
    Ok(addr)
}

/// Wait for SIGINT/SIGTERM or a controller's SHUTDOWN / HALT /
/// ownership end.
pub async fn wait_for_shutdown(ctx: &RelayCtx) {
    tokio::select! {
        _ = crate::client::wait_for_shutdown() => {}
        _ = ctx.control.shutdown.notified() => {
            info!("stopping at the controller's request");
        }
    }
}
