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
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand_core::{OsRng, RngCore};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore};
use tracing::{debug, info, warn};

use onionmix_frontend::control::auth::{COOKIE_LEN, HashedPassword};
use onionmix_frontend::control::{AuthConfig, Framer, Session, frame_error_reply};

use super::chanmgr::ChanMgr;
use super::circmgr::CircMgr;
use super::config::ClientConfig;
use super::dir::DirMgr;
use hub::ControlHub;

/// Time an unauthenticated connection has to authenticate.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(60);
/// Time a reply or event may take to be written.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);

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
    listeners: Mutex<Vec<String>>,
    owning_pid: Mutex<Option<u32>>,
    shutdown: Arc<Notify>,
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
    /// `__OwningControllerProcess`.
    pub fn owning_pid(&self) -> Option<u32> {
        *self.owning_pid.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Set `__OwningControllerProcess`.
    pub fn set_owning_pid(&self, pid: Option<u32>) {
        *self.owning_pid.lock().unwrap_or_else(|e| e.into_inner()) = pid;
    }
    /// Ask the client to exit (after the reply in flight is written).
    pub fn request_shutdown(&self) {
        let s = self.shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            s.notify_one();
        });
    }
}

/// Write a fresh 32-byte cookie, readable by this user only.
fn write_cookie(path: &Path) -> Result<[u8; COOKIE_LEN], String> {
    let mut cookie = [0u8; COOKIE_LEN];
    OsRng.fill_bytes(&mut cookie);
    let _ = std::fs::remove_file(path);
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    let mut f = opts
        .open(path)
        .map_err(|e| format!("cannot write the control cookie {}: {e}", path.display()))?;
    std::io::Write::write_all(&mut f, &cookie)
        .map_err(|e| format!("cannot write the control cookie {}: {e}", path.display()))?;
    Ok(cookie)
}

/// The authentication settings a config asks for (writes the cookie).
pub fn auth_config(cfg: &ClientConfig) -> Result<AuthConfig, String> {
    let mut passwords = Vec::new();
    for p in &cfg.hashed_control_password {
        passwords
            .push(HashedPassword::parse(p).map_err(|e| format!("hashed_control_password: {e}"))?);
    }
    let cookie_on = cfg.cookie_authentication.unwrap_or(passwords.is_empty());
    let mut a = AuthConfig {
        cookie: None,
        cookie_path: None,
        passwords,
    };
    if cookie_on {
        let path = cfg
            .cookie_auth_file
            .clone()
            .unwrap_or_else(|| cfg.data_dir.join("control_auth_cookie"));
        a.cookie = Some(write_cookie(&path)?);
        let abs = std::fs::canonicalize(&path).unwrap_or(path);
        a.cookie_path = Some(abs.display().to_string());
    }
    Ok(a)
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
    let auth = if cfg.control_port.is_some() || cfg.control_socket.is_some() {
        auth_config(&cfg)?
    } else {
        AuthConfig::default()
    };
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
        listeners: Mutex::new(Vec::new()),
        owning_pid: Mutex::new(cfg.owning_controller_process),
        shutdown: p.shutdown,
    });
    let limit = Arc::new(Semaphore::new(cfg.max_control_connections));
    let mut bound = None;
    if let Some(addr) = cfg.control_port {
        let l = TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen for control connections on {addr}: {e}"))?;
        let a = l.local_addr().map_err(|e| e.to_string())?;
        info!("control port listening on {a}");
        ctx.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(a.to_string());
        bound = Some(a);
        let (ctx, limit) = (ctx.clone(), limit.clone());
        tokio::spawn(async move {
            loop {
                let (sock, _) = match l.accept().await {
                    Ok(x) => x,
                    Err(e) => {
                        warn!("control accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    ctx.hub
                        .counters
                        .control_refused
                        .fetch_add(1, Ordering::Relaxed);
                    debug!("control connection limit reached; refusing one");
                    continue;
                };
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    serve_conn(sock, ctx).await;
                    drop(permit);
                });
            }
        });
    }
    #[cfg(unix)]
    if let Some(path) = &cfg.control_socket {
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::remove_file(path);
        let l = tokio::net::UnixListener::bind(path).map_err(|e| {
            format!(
                "cannot listen for control connections on {}: {e}",
                path.display()
            )
        })?;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| format!("{}: {e}", path.display()))?;
        ctx.listeners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(format!("unix:{}", path.display()));
        let (ctx, limit) = (ctx.clone(), limit.clone());
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = l.accept().await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    ctx.hub
                        .counters
                        .control_refused
                        .fetch_add(1, Ordering::Relaxed);
                    continue;
                };
                let ctx = ctx.clone();
                tokio::spawn(async move {
                    serve_conn(sock, ctx).await;
                    drop(permit);
                });
            }
        });
    }
    tokio::spawn(tick(ctx));
    Ok(bound)
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
        if let Some(pid) = ctx.owning_pid()
            && !Path::new(&format!("/proc/{pid}")).exists()
        {
            info!("owning controller process {pid} is gone; shutting down");
            ctx.set_owning_pid(None);
            ctx.request_shutdown();
        }
    }
}

async fn serve_conn<S: AsyncRead + AsyncWrite + Unpin + Send>(sock: S, ctx: Arc<ControlContext>) {
    let Some((sub_id, mut events)) = ctx.hub.subscribe() else {
        return;
    };
    let owning = Arc::new(AtomicBool::new(false));
    let mut backend = backend::ClientBackend {
        ctx: ctx.clone(),
        sub_id,
        owning: owning.clone(),
    };
    let why = run_conn(sock, &ctx, &mut backend, &mut events).await;
    debug!("control connection closed: {why}");
    ctx.hub.unsubscribe(sub_id);
    // Its ephemeral onion services (not the detached ones) go with it.
    ctx.onions.connection_closed(sub_id);
    if owning.load(Ordering::Relaxed) {
        info!("the owning controller's connection closed; shutting down");
        ctx.request_shutdown();
    }
}

async fn write<W: AsyncWrite + Unpin>(w: &mut W, b: &[u8]) -> Result<(), String> {
    tokio::time::timeout(WRITE_TIMEOUT, w.write_all(b))
        .await
        .map_err(|_| "write timed out".to_string())?
        .map_err(|e| e.to_string())
}

async fn run_conn<S: AsyncRead + AsyncWrite + Unpin>(
    sock: S,
    ctx: &ControlContext,
    backend: &mut backend::ClientBackend,
    events: &mut tokio::sync::mpsc::Receiver<Vec<u8>>,
) -> String {
    let (mut rd, mut wr) = tokio::io::split(sock);
    let mut session = Session::new();
    let mut framer = Framer::default();
    let mut buf = vec![0u8; 8192];
    let auth_deadline = tokio::time::Instant::now() + AUTH_TIMEOUT;
    loop {
        let authed = session.is_authenticated();
        tokio::select! {
            r = async {
                if authed {
                    Ok(rd.read(&mut buf).await)
                } else {
                    tokio::time::timeout_at(auth_deadline, rd.read(&mut buf)).await.map_err(|_| ())
                }
            } => {
                let n = match r {
                    Err(()) => return "not authenticated in time".into(),
                    Ok(Err(e)) => return e.to_string(),
                    Ok(Ok(0)) => return "closed by the controller".into(),
                    Ok(Ok(n)) => n,
                };
                let data = buf.get(..n).unwrap_or_default().to_vec();
                if let Err(e) = handle_bytes(&data, &mut framer, &mut session, ctx, backend, &mut wr).await {
                    return e;
                }
            }
            ev = events.recv() => match ev {
                Some(b) => {
                    if let Err(e) = write(&mut wr, &b).await {
                        return e;
                    }
                }
                None => {
                    warn!("a controller did not read its events; closing its connection");
                    return "event queue full".into();
                }
            }
        }
    }
}

async fn handle_bytes<W: AsyncWrite + Unpin>(
    bytes: &[u8],
    framer: &mut Framer,
    session: &mut Session,
    ctx: &ControlContext,
    backend: &mut backend::ClientBackend,
    wr: &mut W,
) -> Result<(), String> {
    if let Err(e) = framer.push(bytes) {
        let _ = write(wr, &frame_error_reply(e)).await;
        return Err(e.to_string());
    }
    loop {
        let cmd = match framer.next_command() {
            Ok(Some(c)) => c,
            Ok(None) => return Ok(()),
            Err(e) => {
                let _ = write(wr, &frame_error_reply(e)).await;
                return Err(e.to_string());
            }
        };
        let o = session.handle(&cmd, &ctx.auth, backend, &mut OsRng);
        write(wr, &o.reply).await?;
        if o.close {
            let _ = wr.flush().await;
            return Err("closed after the reply".into());
        }
    }
}
