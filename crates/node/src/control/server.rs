//! The control port's sockets (tor's `ControlPort` on TCP, `ControlSocket`
//! on a unix socket), the cookie file, and one task per connection that
//! feeds the sans-IO [`Session`] and writes its replies and the node's
//! events. Clients, relays and authorities share it; what the commands
//! act on is the node's [`ControlNode`].

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand_core::{OsRng, RngCore};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tracing::{debug, info, warn};

use onionmix_frontend::control::auth::{COOKIE_LEN, HashedPassword};
use onionmix_frontend::control::{AuthConfig, Backend, Framer, Session, frame_error_reply};

use super::bus::EventBus;

/// Time an unauthenticated connection has to authenticate.
pub const AUTH_TIMEOUT: Duration = Duration::from_secs(60);
/// Time a reply or event may take to be written.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Most connections that have not authenticated yet. A new one past it,
/// or one that finds every connection slot taken, closes the oldest
/// unauthenticated connection instead of being refused: idle connections
/// that never authenticate cannot lock controllers out.
pub const MAX_UNAUTHENTICATED: usize = 8;
/// How long a connection waits for the slot an eviction frees.
const EVICTION_WAIT: Duration = Duration::from_secs(2);

/// The unauthenticated connections, oldest first.
#[derive(Default)]
struct PreAuth {
    next: AtomicU64,
    queue: Mutex<VecDeque<(u64, Arc<Notify>)>>,
}

/// A connection's place among the unauthenticated ones; dropping it (the
/// connection authenticated or closed) leaves the queue.
struct Waiting {
    id: u64,
    evict: Arc<Notify>,
    pre: Arc<PreAuth>,
}

impl PreAuth {
    fn lock(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, Arc<Notify>)>> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new unauthenticated connection (closing the oldest past
    /// [`MAX_UNAUTHENTICATED`]).
    fn enter(self: &Arc<Self>, bus: &EventBus) -> Waiting {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let evict = Arc::new(Notify::new());
        let mut q = self.lock();
        if q.len() >= MAX_UNAUTHENTICATED
            && let Some((_, old)) = q.pop_front()
        {
            old.notify_one();
            bus.evicted.fetch_add(1, Ordering::Relaxed);
        }
        q.push_back((id, evict.clone()));
        Waiting {
            id,
            evict,
            pre: self.clone(),
        }
    }

    /// Close the oldest unauthenticated connection; false if there is none.
    fn evict_oldest(&self, bus: &EventBus) -> bool {
        match self.lock().pop_front() {
            Some((_, n)) => {
                n.notify_one();
                bus.evicted.fetch_add(1, Ordering::Relaxed);
                true
            }
            None => false,
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        let id = self.id;
        self.pre.lock().retain(|(i, _)| *i != id);
    }
}

/// A node's control-port settings, from its configuration file.
#[derive(Debug, Clone)]
pub struct ControlSettings {
    /// TCP address (tor's `ControlPort`).
    pub port: Option<SocketAddr>,
    /// Unix socket (tor's `ControlSocket`), mode 0600.
    pub socket: Option<PathBuf>,
    /// Cookie authentication; default: on unless a password is set.
    pub cookie_authentication: Option<bool>,
    /// Where the cookie goes (default `<data_dir>/control_auth_cookie`).
    pub cookie_auth_file: Option<PathBuf>,
    /// Accepted passwords (`16:...`).
    pub hashed_control_password: Vec<String>,
    /// Most simultaneous connections.
    pub max_connections: usize,
    /// The node's data directory.
    pub data_dir: PathBuf,
}

impl ControlSettings {
    /// Whether a control port or socket is asked for.
    pub fn enabled(&self) -> bool {
        self.port.is_some() || self.socket.is_some()
    }

    /// Check what a config file can get wrong: a control port off
    /// loopback without `allow_public` (`allow_public_control`), a
    /// password hash that does not parse, no connections allowed.
    pub fn check(&self, allow_public: bool) -> Result<(), String> {
        if let Some(a) = self.port
            && !a.ip().is_loopback()
            && !allow_public
        {
            return Err(format!(
                "control_port {a} is not a loopback address; set allow_public_control = true if you mean it"
            ));
        }
        for h in &self.hashed_control_password {
            HashedPassword::parse(h).map_err(|e| format!("hashed_control_password: {e}"))?;
        }
        if self.max_connections == 0 {
            return Err("max_control_connections must be positive".into());
        }
        Ok(())
    }
}

/// What a node offers its control connections.
pub trait ControlNode: Send + Sync + 'static {
    /// One connection's view of the node.
    type Conn: Backend + Send + 'static;
    /// Where the node's events go out.
    fn bus(&self) -> &EventBus;
    /// The secrets AUTHENTICATE checks.
    fn auth(&self) -> &AuthConfig;
    /// A new connection, subscribed to events as `sub_id`.
    fn open(self: &Arc<Self>, sub_id: u64) -> Self::Conn;
    /// The connection closed (already unsubscribed).
    fn closed(&self, conn: Self::Conn, sub_id: u64);
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

/// The authentication the settings ask for (writes the cookie file when
/// cookie authentication is on and a control port is configured).
pub fn auth_config(s: &ControlSettings) -> Result<AuthConfig, String> {
    let mut passwords = Vec::new();
    for p in &s.hashed_control_password {
        passwords
            .push(HashedPassword::parse(p).map_err(|e| format!("hashed_control_password: {e}"))?);
    }
    let mut a = AuthConfig {
        cookie: None,
        cookie_path: None,
        passwords,
    };
    if !s.enabled() {
        return Ok(a);
    }
    if s.cookie_authentication.unwrap_or(a.passwords.is_empty()) {
        let path = s
            .cookie_auth_file
            .clone()
            .unwrap_or_else(|| s.data_dir.join("control_auth_cookie"));
        a.cookie = Some(write_cookie(&path)?);
        let abs = std::fs::canonicalize(&path).unwrap_or(path);
        a.cookie_path = Some(abs.display().to_string());
    }
    Ok(a)
}

/// Listeners bound and not yet served.
pub struct Bound {
    tcp: Option<TcpListener>,
    #[cfg(unix)]
    unix: Option<tokio::net::UnixListener>,
    /// The TCP address bound, if any.
    pub addr: Option<SocketAddr>,
    /// Every listener as `GETINFO net/listeners/control` names it.
    pub names: Vec<String>,
    max_connections: usize,
}

/// Bind the listeners the settings ask for.
pub async fn bind(s: &ControlSettings) -> Result<Bound, String> {
    let mut b = Bound {
        tcp: None,
        #[cfg(unix)]
        unix: None,
        addr: None,
        names: Vec::new(),
        max_connections: s.max_connections,
    };
    if let Some(addr) = s.port {
        let l = TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot listen for control connections on {addr}: {e}"))?;
        let a = l.local_addr().map_err(|e| e.to_string())?;
        info!("control port listening on {a}");
        b.names.push(a.to_string());
        b.addr = Some(a);
        b.tcp = Some(l);
    }
    #[cfg(unix)]
    if let Some(path) = &s.socket {
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
        b.names.push(format!("unix:{}", path.display()));
        b.unix = Some(l);
    }
    Ok(b)
}

/// Accept connections on `bound` for `node` until the process ends; more
/// than the limit at once are closed at once.
pub fn serve<N: ControlNode>(bound: Bound, node: Arc<N>) {
    let limit = Arc::new(Semaphore::new(bound.max_connections));
    let pre = Arc::new(PreAuth::default());
    // A slot for a new connection: a free one, or the one an
    // unauthenticated connection gives up; None: refused.
    let admit = {
        let (node, limit, pre) = (node.clone(), limit.clone(), pre.clone());
        move || {
            let (node, limit, pre) = (node.clone(), limit.clone(), pre.clone());
            async move {
                let p = match limit.clone().try_acquire_owned() {
                    Ok(p) => Some(p),
                    Err(_) if pre.evict_oldest(node.bus()) => {
                        tokio::time::timeout(EVICTION_WAIT, limit.acquire_owned())
                            .await
                            .ok()
                            .and_then(|r| r.ok())
                    }
                    Err(_) => None,
                };
                match p {
                    Some(p) => Some((p, pre.enter(node.bus()))),
                    None => {
                        node.bus().refused.fetch_add(1, Ordering::Relaxed);
                        debug!("control connection limit reached; refusing one");
                        None
                    }
                }
            }
        }
    };
    if let Some(l) = bound.tcp {
        let (node, admit) = (node.clone(), admit.clone());
        tokio::spawn(async move {
            loop {
                let sock = match l.accept().await {
                    Ok((s, _)) => s,
                    Err(e) => {
                        warn!("control accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (node, admit) = (node.clone(), admit.clone());
                tokio::spawn(async move {
                    if let Some((permit, waiting)) = admit().await {
                        serve_conn(sock, node, permit, waiting).await;
                    }
                });
            }
        });
    }
    #[cfg(unix)]
    if let Some(l) = bound.unix {
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = l.accept().await else {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                };
                let (node, admit) = (node.clone(), admit.clone());
                tokio::spawn(async move {
                    if let Some((permit, waiting)) = admit().await {
                        serve_conn(sock, node, permit, waiting).await;
                    }
                });
            }
        });
    }
}

async fn serve_conn<S, N>(sock: S, node: Arc<N>, permit: OwnedSemaphorePermit, waiting: Waiting)
where
    S: AsyncRead + AsyncWrite + Unpin + Send,
    N: ControlNode,
{
    let Some((sub_id, mut events)) = node.bus().subscribe() else {
        return;
    };
    let mut conn = node.open(sub_id);
    let why = run_conn(sock, node.auth(), &mut conn, &mut events, waiting).await;
    debug!("control connection closed: {why}");
    node.bus().unsubscribe(sub_id);
    node.closed(conn, sub_id);
    drop(permit);
}

async fn write<W: AsyncWrite + Unpin>(w: &mut W, b: &[u8]) -> Result<(), String> {
    tokio::time::timeout(WRITE_TIMEOUT, w.write_all(b))
        .await
        .map_err(|_| "write timed out".to_string())?
        .map_err(|e| e.to_string())
}

async fn run_conn<S: AsyncRead + AsyncWrite + Unpin>(
    sock: S,
    auth: &AuthConfig,
    backend: &mut (dyn Backend + Send),
    events: &mut tokio::sync::mpsc::Receiver<Vec<u8>>,
    waiting: Waiting,
) -> String {
    let (mut rd, mut wr) = tokio::io::split(sock);
    let mut session = Session::new();
    let mut framer = Framer::default();
    let mut buf = vec![0u8; 8192];
    let auth_deadline = tokio::time::Instant::now() + AUTH_TIMEOUT;
    let mut waiting = Some(waiting);
    loop {
        let authed = session.is_authenticated();
        let evict = waiting.as_ref().map(|w| w.evict.clone());
        tokio::select! {
            () = async {
                match &evict {
                    Some(n) => n.notified().await,
                    None => std::future::pending().await,
                }
            } => return "not authenticated; closed to make room for another controller".into(),
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
                let data = buf.get(..n).unwrap_or_default();
                if let Err(e) = handle_bytes(data, &mut framer, &mut session, auth, backend, &mut wr).await {
                    return e;
                }
                // Out of the queue of those that can be closed as soon as
                // authenticated (an eviction meanwhile is ignored).
                if session.is_authenticated() {
                    waiting = None;
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
    auth: &AuthConfig,
    backend: &mut (dyn Backend + Send),
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
        let o = session.handle(&cmd, auth, backend, &mut OsRng);
        write(wr, &o.reply).await?;
        if o.close {
            let _ = wr.flush().await;
            return Err("closed after the reply".into());
        }
    }
}
