//! The SOCKS5 listener: one task per connection; each request is matched to
//! a circuit by its isolation key and exit port, and the stream is pumped.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use onionmix_cell::relay::{ResolvedAnswer, TargetHost};
use onionmix_frontend::addr::{self, HostKind};
use onionmix_frontend::socks::{
    self, SocksCmd, SocksHandshake, SocksRequest, end_reason_to_reply, reply_code,
};

use super::circmgr::{CircMgr, IsolationKey};
use super::control::hub::ControlHub;
use super::control::streams::Tracked;
use super::stream::StreamError;
use crate::reactor::{StreamEvent, StreamRequest};

/// Time a SOCKS client has to finish its request.
pub const SOCKS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Circuits a CONNECT is tried on before giving up (tor's
/// MAX_RESOLVE_FAILURES).
pub const MAX_STREAM_ATTEMPTS: usize = 3;
/// Exit-policy refusals a stream may meet besides those attempts (each
/// refusing exit is avoided afterwards; tor retries them until its
/// stream timeout, which still bounds these here).
pub const MAX_POLICY_REFUSALS: usize = 8;

/// END reasons after which tor tries the stream on another circuit.
pub fn retriable_end(reason: u8) -> bool {
    use onionmix_cell::relay::end_reason as r;
    matches!(
        reason,
        r::MISC
            | r::TIMEOUT
            | r::NOROUTE
            | r::RESOLVEFAILED
            | r::EXITPOLICY
            | r::RESOURCELIMIT
            | r::HIBERNATING
            | r::DESTROY
    )
}

/// How long one attempt at a stream waits for CONNECTED (or RESOLVED)
/// before it is tried on another circuit: tor's `compute_retry_timeout`,
/// 10 s for the first two attempts and 15 s after. The stream as a whole
/// still gives up after the configured stream timeout.
pub fn attempt_timeout(attempt: usize) -> Duration {
    if attempt < 2 {
        Duration::from_secs(10)
    } else {
        Duration::from_secs(15)
    }
}

/// Idle time after which a stream with no traffic either way is closed.
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

/// Shared state the SOCKS server needs.
#[derive(Clone)]
pub struct SocksContext {
    /// Circuit manager.
    pub circmgr: CircMgr,
    /// The directory (exits' IPv6 policies for BEGIN's flags); `None`:
    /// no IPv6 for exit streams.
    pub dir: Option<Arc<super::dir::DirMgr>>,
    /// Stream timeout.
    pub stream_timeout: Duration,
    /// Resolves when the client has bootstrapped (a first circuit).
    pub ready: tokio::sync::watch::Receiver<bool>,
    /// Resolves when the client has enough directory information to build
    /// circuits (tor's 75%, `enough_dirinfo`). `.onion` CONNECTs start
    /// then, as in tor: they build their own circuits and need no exit
    /// circuit. `None`: wait for `ready`.
    pub dir_ready: Option<tokio::sync::watch::Receiver<bool>>,
    /// Send tor's extended SOCKS5 errors (0xF0-0xF7, prop 304) where they
    /// apply, as tor's `SocksPort ... ExtendedErrors` does.
    pub extended_errors: bool,
    /// Refuse internal destinations, and exits' internal answers
    /// ([`super::config::ClientConfig::rejects_internal_addresses`]).
    pub reject_internal: bool,
    /// What the control and metrics ports see.
    pub hub: Arc<ControlHub>,
    /// Send application data before CONNECTED to exits that take it
    /// (prop 181).
    pub optimistic_data: bool,
    /// Reply success to CONNECT at once (prop 309's `OptimisticData`
    /// SocksPort flag); a stream that then fails is hung up on.
    pub optimistic_reply: bool,
    /// The onion-service client for `.onion` CONNECTs (without one they
    /// are refused locally).
    pub hs: Option<super::hs::HsClient>,
}

/// The SOCKS listener, which the control port can move (SETCONF SocksPort).
pub struct SocksListener {
    ctx: SocksContext,
    max_conns: usize,
    allow_public: bool,
    cur: std::sync::Mutex<Option<(SocketAddr, tokio::task::AbortHandle)>>,
}

impl std::fmt::Debug for SocksListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SocksListener")
            .field("addr", &self.addr())
            .finish()
    }
}

impl SocksListener {
    /// Serve `listener`.
    pub fn start(
        listener: TcpListener,
        ctx: SocksContext,
        max_conns: usize,
        allow_public: bool,
    ) -> Arc<Self> {
        let addr = listener.local_addr().ok();
        let task = tokio::spawn(serve(listener, ctx.clone(), max_conns));
        Arc::new(SocksListener {
            ctx,
            max_conns,
            allow_public,
            cur: std::sync::Mutex::new(addr.map(|a| (a, task.abort_handle()))),
        })
    }

    /// A listener that listens nowhere yet (tor's `SocksPort 0`); the
    /// control port may [`rebind`](Self::rebind) it.
    pub fn closed(ctx: SocksContext, max_conns: usize, allow_public: bool) -> Arc<Self> {
        Arc::new(SocksListener {
            ctx,
            max_conns,
            allow_public,
            cur: std::sync::Mutex::new(None),
        })
    }

    /// Where SOCKS listens now (None: closed).
    pub fn addr(&self) -> Option<SocketAddr> {
        self.cur
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|(a, _)| *a)
    }

    /// Listen on `addr` instead (None: stop listening). Connections already
    /// accepted carry on.
    pub fn rebind(&self, addr: Option<SocketAddr>) -> Result<(), String> {
        let new = match addr {
            Some(a) => {
                if !a.ip().is_loopback() && !self.allow_public {
                    return Err(format!(
                        "{a} is not a loopback address (allow_public_socks is off)"
                    ));
                }
                let std = std::net::TcpListener::bind(a)
                    .map_err(|e| format!("cannot listen on {a}: {e}"))?;
                std.set_nonblocking(true).map_err(|e| e.to_string())?;
                let l = TcpListener::from_std(std).map_err(|e| e.to_string())?;
                let bound = l.local_addr().map_err(|e| e.to_string())?;
                let task = tokio::spawn(serve(l, self.ctx.clone(), self.max_conns));
                Some((bound, task.abort_handle()))
            }
            None => None,
        };
        let old = std::mem::replace(
            &mut *self.cur.lock().unwrap_or_else(|e| e.into_inner()),
            new,
        );
        if let Some((_, h)) = old {
            h.abort();
        }
        Ok(())
    }
}

/// Accept SOCKS connections forever.
pub async fn serve(listener: TcpListener, ctx: SocksContext, max_conns: usize) {
    let limit = Arc::new(Semaphore::new(max_conns));
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!("SOCKS accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let _ = sock.set_nodelay(true);
        let Ok(permit) = limit.clone().try_acquire_owned() else {
            warn!("SOCKS connection limit ({max_conns}) reached; refusing a connection");
            drop(sock);
            continue;
        };
        let ctx = ctx.clone();
        tokio::spawn(async move {
            if let Err(e) = handle(sock, peer, ctx).await {
                debug!("SOCKS connection closed: {e}");
            }
            drop(permit);
        });
    }
}

/// Read the SOCKS request. Also returns the bytes the client pipelined
/// after it (an optimistic client sends its first data without waiting
/// for our reply).
async fn read_request(sock: &mut TcpStream) -> Result<(SocksRequest, Vec<u8>), String> {
    let mut hs = SocksHandshake::new();
    let mut buf = Vec::with_capacity(socks::MAX_MSG);
    let mut tmp = [0u8; 512];
    loop {
        let n = sock.read(&mut tmp).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("client closed during SOCKS handshake".into());
        }
        buf.extend_from_slice(&tmp[..n]);
        match hs.handle(&buf) {
            Ok(step) => {
                buf.drain(..step.consumed);
                if !step.reply.is_empty() {
                    sock.write_all(&step.reply)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                if let Some(req) = step.request {
                    return Ok((req, buf));
                }
                // What is left is an incomplete message.
                if buf.len() > socks::MAX_MSG {
                    return Err("SOCKS handshake too long".into());
                }
            }
            Err(e) => {
                if let Some(reply) = hs.error_reply(&e) {
                    let _ = sock.write_all(&reply).await;
                }
                return Err(format!("bad SOCKS request: {e}"));
            }
        }
    }
}

async fn handle(mut sock: TcpStream, peer: SocketAddr, ctx: SocksContext) -> Result<(), String> {
    let (req, early) = tokio::time::timeout(SOCKS_HANDSHAKE_TIMEOUT, read_request(&mut sock))
        .await
        .map_err(|_| "SOCKS handshake timed out".to_string())??;
    // Names that must never leave this process are answered here, before
    // anything else (not even bootstrap) is waited for; a valid `.onion`
    // CONNECT goes to the onion-service client, never to an exit.
    let mut onion = false;
    if let TargetHost::Hostname(name) = &req.host {
        let kind = addr::classify(name);
        onion = matches!(kind, HostKind::Onion { .. })
            && req.cmd == SocksCmd::Connect
            && ctx.hs.is_some();
        if kind.is_local_only() && !onion {
            let code = local_only_reply(&kind, req.cmd, ctx.extended_errors);
            let _ = sock.write_all(&req.reply(code, None)).await;
            return Err(refusal_reason(&kind).into());
        }
    }
    if ctx.reject_internal && req.cmd != SocksCmd::UdpAssociate && is_internal_target(&req.host) {
        // tor: "Rejecting SOCKS request for anonymous connection to
        // private address" (END_STREAM_REASON_PRIVATE_ADDR).
        let _ = sock
            .write_all(&req.reply(reply_code::GENERAL_FAILURE, None))
            .await;
        return Err("refused an internal destination".into());
    }
    let epoch = ctx.hub.epoch.load(Ordering::Relaxed);
    if req.cmd == SocksCmd::UdpAssociate {
        // Each destination is tracked as its own stream.
        let key = isolation_key(&req, peer, epoch);
        return super::udp::associate(sock, peer, ctx, key, req).await;
    }
    // A new stream wakes a dormant client (as tor's SOCKS port does).
    ctx.circmgr.set_dormant(false);
    let tr = Tracked::new(&ctx.hub, &req, peer, epoch);
    let ready = match (&ctx.dir_ready, onion) {
        (Some(d), true) => d.clone(),
        _ => ctx.ready.clone(),
    };
    if !wait_ready(&ctx, ready, &mut sock, &req).await {
        tr.failed(onionmix_cell::relay::end_reason::TIMEOUT, false);
        return Err("not bootstrapped yet".into());
    }
    let key = isolation_key(&req, peer, epoch);
    if let (true, Some(hs)) = (onion, &ctx.hs) {
        return super::hs::socks::connect(sock, hs, key, req, &early, ctx.extended_errors, tr)
            .await;
    }
    match req.cmd {
        SocksCmd::Connect => super::connect::connect(sock, ctx, key, req, early, tr).await,
        SocksCmd::Resolve | SocksCmd::ResolvePtr => resolve(sock, ctx, key, req, tr).await,
        SocksCmd::UdpAssociate => Err("UDP ASSOCIATE handled above".into()),
    }
}

/// The circuits a request's streams may share: tor's default SocksPort
/// isolation, by SOCKS credentials (IsolateSOCKSAuth) and by the
/// application's address (IsolateClientAddr), within one NEWNYM epoch.
fn isolation_key(req: &SocksRequest, peer: SocketAddr, epoch: u64) -> IsolationKey {
    IsolationKey {
        socks_auth: req.auth.clone(),
        client_addr: Some(peer.ip()),
        nym_epoch: epoch,
    }
}

/// Whether a destination is internal (a private, loopback or link-local
/// address, or a name tor takes for this machine): with
/// `reject_internal`, such requests never leave the client. RESOLVE_PTR
/// of one is refused as well, as by tor.
pub fn is_internal_target(host: &TargetHost) -> bool {
    match host {
        TargetHost::Ip(ip) => onionmix_proto::netaddr::is_internal(*ip),
        TargetHost::Hostname(h) => onionmix_proto::netaddr::is_local_hostname(h),
    }
}

/// An exit's answers without the internal addresses (tor's
/// `ClientDNSRejectInternalAddresses`): a hostile exit cannot point a
/// name at the user's own network.
pub fn drop_internal_answers(answers: Vec<ResolvedAnswer>) -> Vec<ResolvedAnswer> {
    answers
        .into_iter()
        .filter(|a| !matches!(a, ResolvedAnswer::Ip(ip, _) if onionmix_proto::netaddr::is_internal(*ip)))
        .collect()
}

/// Wait (at most the stream timeout) until `ready`; on a timeout the
/// application gets "general failure" and this returns false.
pub(super) async fn wait_ready(
    ctx: &SocksContext,
    mut ready: tokio::sync::watch::Receiver<bool>,
    sock: &mut TcpStream,
    req: &SocksRequest,
) -> bool {
    if *ready.borrow() {
        return true;
    }
    let ok = matches!(
        tokio::time::timeout(ctx.stream_timeout, ready.wait_for(|r| *r)).await,
        Ok(Ok(_))
    );
    if !ok {
        let _ = sock
            .write_all(&req.reply(reply_code::GENERAL_FAILURE, None))
            .await;
    }
    ok
}

/// The SOCKS5 reply for a name that must not leave the client, as stock tor
/// 0.4.9 answers it: CONNECT to a `.exit` or malformed `.onion` name gets
/// "general failure" (0xF6, bad onion address, with extended errors);
/// RESOLVE of either gets "host unreachable", as does RESOLVE of a
/// well-formed `.onion` (a CONNECT to one goes to the onion-service client).
pub fn local_only_reply(kind: &HostKind, cmd: SocksCmd, extended_errors: bool) -> u8 {
    match (kind, cmd) {
        (_, SocksCmd::Resolve | SocksCmd::ResolvePtr) => reply_code::HOST_UNREACHABLE,
        (HostKind::BadOnion(_), _) if extended_errors => reply_code::ONION_BAD_ADDRESS,
        (HostKind::Onion { .. }, _) => reply_code::HOST_UNREACHABLE,
        _ => reply_code::GENERAL_FAILURE,
    }
}

fn refusal_reason(kind: &HostKind) -> &'static str {
    match kind {
        HostKind::Exit => "refused a .exit name (the .exit notation is disabled)",
        HostKind::BadOnion(_) => "refused an invalid .onion name",
        HostKind::Onion { .. } => "refused a .onion name (RESOLVE, or no onion-service client)",
        HostKind::Public => "refused",
    }
}

/// The circuit for a stream: the controller's choice when it attaches
/// streams, otherwise the circuit manager's.
pub(super) async fn circuit_for(
    ctx: &SocksContext,
    tr: &mut Tracked,
    key: &IsolationKey,
    port: Option<u16>,
) -> Result<Arc<super::circuit::Circuit>, String> {
    if tr.controller_attaches() {
        return tr
            .wait_attach()
            .await
            .ok_or_else(|| "the controller did not attach the stream".to_string());
    }
    ctx.circmgr
        .get_exit_circuit(key, port)
        .await
        .map_err(|e| e.to_string())
}

async fn resolve(
    mut sock: TcpStream,
    ctx: SocksContext,
    key: IsolationKey,
    req: SocksRequest,
    mut tr: Tracked,
) -> Result<(), String> {
    let name = match (&req.cmd, &req.host) {
        (SocksCmd::ResolvePtr, TargetHost::Ip(ip)) => socks::ptr_name(*ip),
        (_, TargetHost::Hostname(h)) => h.clone(),
        (_, TargetHost::Ip(ip)) => {
            // Resolving a literal address: answer locally like tor does.
            let _ = sock
                .write_all(&req.reply(reply_code::SUCCEEDED, Some((*ip, 0))))
                .await;
            tr.succeeded();
            tr.closed();
            return Ok(());
        }
    };
    let circ = match circuit_for(&ctx, &mut tr, &key, None).await {
        Ok(c) => c,
        Err(e) => {
            let _ = sock
                .write_all(&req.reply(reply_code::GENERAL_FAILURE, None))
                .await;
            tr.failed(onionmix_cell::relay::end_reason::MISC, false);
            return Err(format!("no circuit: {e}"));
        }
    };
    tr.sent(&circ);
    let answers = match circ
        .open_stream(StreamRequest::Resolve(name), ctx.stream_timeout)
        .await
    {
        Ok((_, StreamEvent::Resolved(a))) => a,
        Ok(_) => Vec::new(),
        Err(e) => {
            let code = end_reason_to_reply(e.end_reason());
            let _ = sock.write_all(&req.reply(code, None)).await;
            tr.failed(e.end_reason(), matches!(e, StreamError::End(_)));
            return Err(format!("resolve failed: {e}"));
        }
    };
    let answers = if ctx.reject_internal {
        drop_internal_answers(answers)
    } else {
        answers
    };
    tr.succeeded();
    tr.closed();
    let reply = if req.cmd == SocksCmd::ResolvePtr {
        // SOCKS4 cannot carry a name back.
        answers.iter().find_map(|a| match a {
            ResolvedAnswer::Hostname(h, _) if req.version == socks::SocksVersion::V5 => {
                Some(socks::reply_hostname(h))
            }
            _ => None,
        })
    } else {
        let ips: Vec<IpAddr> = answers
            .iter()
            .filter_map(|a| match a {
                ResolvedAnswer::Ip(ip, _) => Some(*ip),
                _ => None,
            })
            .collect();
        let ip = match req.version {
            socks::SocksVersion::V5 => ips.iter().find(|ip| ip.is_ipv4()).or(ips.first()),
            socks::SocksVersion::V4 => ips.iter().find(|ip| ip.is_ipv4()),
        };
        ip.map(|ip| req.reply(reply_code::SUCCEEDED, Some((*ip, 0))))
    };
    let reply = reply.unwrap_or_else(|| req.reply(reply_code::HOST_UNREACHABLE, None));
    sock.write_all(&reply).await.map_err(|e| e.to_string())?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionmix_frontend::socks::SocksVersion;

    #[test]
    fn attempts_wait_as_tor_and_fit_the_stream_timeout() {
        let waits: Vec<u64> = (0..MAX_STREAM_ATTEMPTS)
            .map(|a| attempt_timeout(a).as_secs())
            .collect();
        assert_eq!(waits, vec![10, 10, 15]);
        // Every attempt gets its turn within the default stream timeout.
        let total: u64 = waits.iter().sum();
        assert!(total <= 60, "{total} s");
    }

    #[test]
    fn internal_targets_and_answers() {
        use onionmix_cell::relay::ResolvedAnswer as A;
        let ip = |s: &str| TargetHost::Ip(s.parse().unwrap_or_else(|_| panic!("{s}")));
        assert!(is_internal_target(&ip("10.0.0.1")));
        assert!(is_internal_target(&TargetHost::Hostname(
            "localhost".into()
        )));
        assert!(!is_internal_target(&ip("192.0.2.1")));
        assert!(!is_internal_target(&TargetHost::Hostname(
            "example.com".into()
        )));
        let kept = drop_internal_answers(vec![
            A::Ip("127.0.0.1".parse().unwrap_or_else(|_| panic!()), 60),
            A::Ip("192.0.2.7".parse().unwrap_or_else(|_| panic!()), 60),
            A::Hostname("x.example".into(), 60),
        ]);
        assert_eq!(kept.len(), 2);
        assert!(
            !kept
                .iter()
                .any(|a| matches!(a, A::Ip(i, _) if i.is_loopback()))
        );
    }

    /// As tor's default SocksPort flags: streams of different SOCKS
    /// credentials, or from different application addresses, never share
    /// a circuit; the same credentials from the same address do.
    #[test]
    fn isolation_by_credentials_and_client_address() {
        let req = |auth: Option<(&[u8], &[u8])>| SocksRequest {
            cmd: SocksCmd::Connect,
            host: TargetHost::Hostname("example.com".into()),
            port: 443,
            auth: auth.map(|(u, p)| (u.to_vec(), p.to_vec())),
            version: SocksVersion::V5,
        };
        let a: SocketAddr = "127.0.0.1:40000".parse().unwrap();
        let a2: SocketAddr = "127.0.0.1:40001".parse().unwrap();
        let b: SocketAddr = "192.168.1.20:40000".parse().unwrap();
        let k = |r: &SocksRequest, p| isolation_key(r, p, 3);
        assert_eq!(
            k(&req(None), a),
            k(&req(None), a2),
            "another port, same application host"
        );
        assert_ne!(k(&req(None), a), k(&req(None), b), "IsolateClientAddr");
        let alice = req(Some((b"alice", b"x")));
        assert_ne!(
            k(&alice, a),
            k(&req(Some((b"bob", b"x"))), a),
            "IsolateSOCKSAuth"
        );
        assert_eq!(k(&alice, a), k(&alice, a2));
        assert_ne!(
            isolation_key(&alice, a, 3),
            isolation_key(&alice, a, 4),
            "NEWNYM"
        );
    }
}
