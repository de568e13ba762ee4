//! The SOCKS5 listener: one task per connection; each request is matched to
//! a circuit by its isolation key and exit port, and the stream is pumped.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use onionmix_cell::relay::{Begin, ResolvedAnswer, TargetHost, begin_flags};
use onionmix_frontend::addr::{self, HostKind};
use onionmix_frontend::socks::{
    self, SocksCmd, SocksHandshake, SocksRequest, end_reason_to_reply, reply_code,
};

use super::circmgr::{CircMgr, IsolationKey};
use super::stream::StreamError;
use crate::reactor::{StreamEvent, StreamRequest};

/// Time a SOCKS client has to finish its request.
pub const SOCKS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Circuits a CONNECT is tried on before giving up (tor's
/// MAX_RESOLVE_FAILURES).
pub const MAX_STREAM_ATTEMPTS: usize = 3;

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

/// Idle time after which a stream with no traffic either way is closed.
pub const STREAM_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

/// Shared state the SOCKS server needs.
#[derive(Clone)]
pub struct SocksContext {
    /// Circuit manager.
    pub circmgr: CircMgr,
    /// Stream timeout.
    pub stream_timeout: Duration,
    /// Resolves when the client has bootstrapped.
    pub ready: tokio::sync::watch::Receiver<bool>,
    /// Send tor's extended SOCKS5 errors (0xF0-0xF7, prop 304) where they
    /// apply, as tor's `SocksPort ... ExtendedErrors` does.
    pub extended_errors: bool,
    /// The onion-service client for `.onion` CONNECTs (without one they
    /// are refused locally).
    pub hs: Option<super::hs::HsClient>,
}

/// Accept SOCKS connections forever.
pub async fn serve(listener: TcpListener, ctx: SocksContext, max_conns: usize) {
    let limit = Arc::new(Semaphore::new(max_conns));
    loop {
        let (sock, _peer) = match listener.accept().await {
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
            if let Err(e) = handle(sock, ctx).await {
                debug!("SOCKS connection closed: {e}");
            }
            drop(permit);
        });
    }
}

async fn read_request(sock: &mut TcpStream) -> Result<SocksRequest, String> {
    let mut hs = SocksHandshake::new();
    let mut buf = Vec::with_capacity(socks::MAX_MSG);
    let mut tmp = [0u8; 512];
    loop {
        let n = sock.read(&mut tmp).await.map_err(|e| e.to_string())?;
        if n == 0 {
            return Err("client closed during SOCKS handshake".into());
        }
        buf.extend_from_slice(&tmp[..n]);
        if buf.len() > 2 * socks::MAX_MSG {
            return Err("SOCKS handshake too long".into());
        }
        match hs.handle(&buf) {
            Ok(step) => {
                buf.drain(..step.consumed);
                if !step.reply.is_empty() {
                    sock.write_all(&step.reply)
                        .await
                        .map_err(|e| e.to_string())?;
                }
                if let Some(req) = step.request {
                    if !buf.is_empty() {
                        // Optimistic data before our reply: not supported.
                        return Err("data sent before SOCKS reply".into());
                    }
                    return Ok(req);
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

async fn handle(mut sock: TcpStream, ctx: SocksContext) -> Result<(), String> {
    let req = tokio::time::timeout(SOCKS_HANDSHAKE_TIMEOUT, read_request(&mut sock))
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
    let mut ready = ctx.ready.clone();
    if !*ready.borrow() {
        let ok = matches!(
            tokio::time::timeout(ctx.stream_timeout, ready.wait_for(|r| *r)).await,
            Ok(Ok(_))
        );
        if !ok {
            let _ = sock
                .write_all(&req.reply(reply_code::GENERAL_FAILURE, None))
                .await;
            return Err("not bootstrapped yet".into());
        }
    }
    let key = IsolationKey {
        socks_auth: req.auth.clone(),
    };
    if let (true, Some(hs)) = (onion, &ctx.hs) {
        return super::hs::socks::connect(sock, hs, key, req, ctx.extended_errors).await;
    }
    match req.cmd {
        SocksCmd::Connect => connect(sock, ctx, key, req).await,
        SocksCmd::Resolve | SocksCmd::ResolvePtr => resolve(sock, ctx, key, req).await,
    }
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

async fn connect(
    mut sock: TcpStream,
    ctx: SocksContext,
    key: IsolationKey,
    req: SocksRequest,
) -> Result<(), String> {
    let flags = match req.host {
        TargetHost::Ip(IpAddr::V6(_)) => begin_flags::IPV6_OK | begin_flags::IPV6_PREFERRED,
        _ => begin_flags::IPV6_OK,
    };
    let begin = Begin {
        host: req.host.clone(),
        port: req.port,
        flags,
    };
    // Like tor (connection_ap_process_end_not_open): a circuit-level failure
    // or an END that blames the exit (MISC, TIMEOUT, NOROUTE, RESOLVEFAILED,
    // EXITPOLICY, RESOURCELIMIT, HIBERNATING) retries on another circuit, up
    // to MAX_STREAM_ATTEMPTS; the circuit takes no new streams afterwards.
    let mut last_err = StreamError::Timeout;
    for attempt in 0..MAX_STREAM_ATTEMPTS {
        let circ = match ctx.circmgr.get_exit_circuit(&key, Some(req.port)).await {
            Ok(c) => c,
            Err(e) => {
                let _ = sock
                    .write_all(&req.reply(reply_code::GENERAL_FAILURE, None))
                    .await;
                return Err(format!("no circuit: {e}"));
            }
        };
        match circ
            .open_stream(StreamRequest::Begin(begin.clone()), ctx.stream_timeout)
            .await
        {
            Ok((stream, StreamEvent::Connected(addr))) => {
                let bound = addr.map(|a| (a, 0));
                sock.write_all(&req.reply(reply_code::SUCCEEDED, bound))
                    .await
                    .map_err(|e| e.to_string())?;
                let (up, down) = stream.pump(sock, STREAM_IDLE_TIMEOUT).await;
                debug!("stream closed: {up} bytes up, {down} bytes down");
                return Ok(());
            }
            Ok(_) => {
                last_err = StreamError::Unexpected;
                break;
            }
            Err(e) => {
                let retry = match &e {
                    StreamError::End(r) => retriable_end(*r),
                    StreamError::LocalOnly(_) => false,
                    _ => true,
                };
                debug!("stream attempt {} failed: {e}", attempt + 1);
                last_err = e;
                if !retry {
                    break;
                }
                ctx.circmgr.retire(&circ);
            }
        }
    }
    let code = end_reason_to_reply(last_err.end_reason());
    let _ = sock.write_all(&req.reply(code, None)).await;
    Err(format!("connect failed: {last_err}"))
}

async fn resolve(
    mut sock: TcpStream,
    ctx: SocksContext,
    key: IsolationKey,
    req: SocksRequest,
) -> Result<(), String> {
    let name = match (&req.cmd, &req.host) {
        (SocksCmd::ResolvePtr, TargetHost::Ip(ip)) => socks::ptr_name(*ip),
        (_, TargetHost::Hostname(h)) => h.clone(),
        (_, TargetHost::Ip(ip)) => {
            // Resolving a literal address: answer locally like tor does.
            let _ = sock
                .write_all(&req.reply(reply_code::SUCCEEDED, Some((*ip, 0))))
                .await;
            return Ok(());
        }
    };
    let circ = match ctx.circmgr.get_exit_circuit(&key, None).await {
        Ok(c) => c,
        Err(e) => {
            let _ = sock
                .write_all(&req.reply(reply_code::GENERAL_FAILURE, None))
                .await;
            return Err(format!("no circuit: {e}"));
        }
    };
    let answers = match circ
        .open_stream(StreamRequest::Resolve(name), ctx.stream_timeout)
        .await
    {
        Ok((_, StreamEvent::Resolved(a))) => a,
        Ok(_) => Vec::new(),
        Err(e) => {
            let code = end_reason_to_reply(e.end_reason());
            let _ = sock.write_all(&req.reply(code, None)).await;
            return Err(format!("resolve failed: {e}"));
        }
    };
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
