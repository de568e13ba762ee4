//! SOCKS CONNECT: open a BEGIN stream, with optimistic data.
//!
//! The application's first bytes (those it pipelined after its SOCKS
//! request, and whatever it sends while the exit connects) go out in DATA
//! cells right after BEGIN when the exit supports optimistic data
//! (proposals 181 and 174); a copy is kept until CONNECTED so a retry on
//! another circuit sends them again. With `socks_optimistic_reply`
//! (proposal 309's `OptimisticData` SocksPort flag) the SOCKS success reply
//! is sent at once, so applications that wait for it send their data
//! early too; a stream that then fails is hung up on.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::debug;

use onionmix_cell::relay::{Begin, begin_flags};
use onionmix_frontend::socks::{SocksRequest, end_reason_to_reply, reply_code};
use onionmix_proto::optimistic::OptimisticData;

use super::circmgr::IsolationKey;
use super::circuit::Circuit;
use super::control::streams::Tracked;
use super::dir::DirMgr;
use super::socks::{
    MAX_POLICY_REFUSALS, MAX_STREAM_ATTEMPTS, STREAM_IDLE_TIMEOUT, SocksContext, attempt_timeout,
    circuit_for, retriable_end,
};
use super::stream::{Stream, StreamError};
use crate::reactor::{StreamEvent, StreamRequest};

/// Largest read from the application while waiting for CONNECTED.
const READ_CHUNK: usize = 16 * 1024;

/// How waiting for CONNECTED ended.
enum Waited {
    /// The exit answered (CONNECTED, or an error).
    Answer(Result<StreamEvent, StreamError>),
    /// The application side failed.
    AppGone(String),
}

/// Carry a SOCKS CONNECT; `early` holds bytes the client sent after its
/// request, before any reply; `tr` reports the stream to the control port.
pub async fn connect(
    mut sock: TcpStream,
    ctx: SocksContext,
    key: IsolationKey,
    req: SocksRequest,
    early: Vec<u8>,
    mut tr: Tracked,
) -> Result<(), String> {
    // The flags depend on each attempt's exit.
    let mut begin = Begin {
        host: req.host.clone(),
        port: req.port,
        flags: 0,
    };
    let mut opt = OptimisticData::default();
    let taken = opt.push(&early);
    debug_assert_eq!(taken, early.len());
    let mut replied = false;
    if ctx.optimistic_reply {
        sock.write_all(&req.reply(reply_code::SUCCEEDED, None))
            .await
            .map_err(|e| e.to_string())?;
        replied = true;
    }
    let mut app_eof = false;
    // Like tor (connection_ap_process_end_not_open): a circuit-level failure
    // or an END that blames the exit (MISC, TIMEOUT, NOROUTE, RESOLVEFAILED,
    // EXITPOLICY, RESOURCELIMIT, HIBERNATING) retries on another circuit, up
    // to MAX_STREAM_ATTEMPTS; the circuit takes no new streams afterwards.
    let mut last_err = StreamError::Timeout;
    // An exit that does not answer costs one attempt's time (tor's 10 s,
    // then 15 s), not the whole stream timeout; the stream gives up at
    // that timeout whatever the attempts. A stream a controller attaches
    // waits for it the whole time.
    let give_up = tokio::time::Instant::now() + ctx.stream_timeout;
    // Attempts an exit refused by its policy do not count towards
    // MAX_STREAM_ATTEMPTS (tor retries them until the stream timeout):
    // that exit is avoided afterwards, so they end with the exits.
    let mut refused = 0usize;
    let mut attempt = 0usize;
    while attempt < MAX_STREAM_ATTEMPTS && refused < MAX_POLICY_REFUSALS {
        let left = give_up.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            break;
        }
        let wait = if tr.controller_attaches() {
            left
        } else {
            attempt_timeout(attempt).min(left)
        };
        let circ = match circuit_for(&ctx, &mut tr, &key, Some(req.port)).await {
            Ok(c) => c,
            Err(e) => {
                if !replied {
                    let _ = sock
                        .write_all(&req.reply(reply_code::GENERAL_FAILURE, None))
                        .await;
                }
                tr.failed(onionmix_cell::relay::end_reason::MISC, false);
                return Err(format!("no circuit: {e}"));
            }
        };
        tr.sent(&circ);
        let optimistic = ctx.optimistic_data && circ.exit_supports_optimistic_data();
        opt.retry();
        begin.flags = begin_flags_for(ctx.dir.as_deref(), &circ, req.port);
        let res: Result<(), StreamError> =
            match circ.begin_stream(StreamRequest::Begin(begin.clone())).await {
                Ok(mut stream) => {
                    match wait_connected(
                        &mut sock,
                        &mut stream,
                        &mut opt,
                        optimistic,
                        &mut app_eof,
                        wait,
                    )
                    .await
                    {
                        Waited::AppGone(e) => {
                            tr.failed(onionmix_cell::relay::end_reason::DONE, false);
                            return Err(e);
                        }
                        Waited::Answer(Ok(StreamEvent::Connected(addr)))
                            if ctx.reject_internal
                                && addr.is_some_and(onionmix_proto::netaddr::is_internal) =>
                        {
                            // tor (ClientDNSRejectInternalAddresses): an
                            // exit that says it reached an internal address
                            // is not believed; the stream is closed.
                            debug!("an exit reported an internal address; closing the stream");
                            drop(stream);
                            Err(StreamError::End(
                                onionmix_cell::relay::end_reason::TORPROTOCOL,
                            ))
                        }
                        Waited::Answer(Ok(StreamEvent::Connected(_))) => {
                            if !replied {
                                // As tor: no bound address in the reply.
                                sock.write_all(&req.reply(reply_code::SUCCEEDED, None))
                                    .await
                                    .map_err(|e| e.to_string())?;
                            }
                            if optimistic && opt.sent_early() > 0 {
                                debug!("{} bytes of optimistic data", opt.sent_early());
                            }
                            tr.succeeded();
                            let rest = opt.connected();
                            if !rest.is_empty() && stream.write_all(&rest).await.is_err() {
                                tr.closed();
                                return Err("stream closed at once".into());
                            }
                            carry(stream, sock, &mut tr, "stream").await;
                            return Ok(());
                        }
                        Waited::Answer(Ok(_)) => Err(StreamError::Unexpected),
                        Waited::Answer(Err(e)) => Err(e),
                    }
                }
                Err(e) => Err(e),
            };
        let Err(e) = res else { break };
        let retry = match &e {
            StreamError::End(r) => retriable_end(*r),
            StreamError::LocalOnly(_) | StreamError::Unexpected => false,
            _ => true,
        };
        debug!("stream attempt {} failed: {e}", attempt + refused + 1);
        let policy = matches!(
            e,
            StreamError::End(onionmix_cell::relay::end_reason::EXITPOLICY)
        );
        last_err = e;
        if !retry || tr.controller_attaches() {
            break;
        }
        tr.detached(last_err.end_reason());
        ctx.circmgr.retire(&circ);
        if policy {
            // As tor (connection_ap_process_end_not_open): an exit that
            // refuses by policy is not picked again for a while. Its
            // summary may not say (testing networks vote every relay an
            // Exit; summaries cannot express "127.0.0.0/8 only").
            if let Some(exit) = circ.path().last() {
                ctx.circmgr.note_relay_failed(exit.rsa_id);
            }
            refused += 1;
        } else {
            attempt += 1;
        }
    }
    if !replied {
        let code = end_reason_to_reply(last_err.end_reason());
        let _ = sock.write_all(&req.reply(code, None)).await;
    }
    tr.failed(
        last_err.end_reason(),
        matches!(last_err, StreamError::End(_)),
    );
    Err(format!("connect failed: {last_err}"))
}

/// BEGIN flags as tor's client sets them with its default SocksPort
/// (IPv4Traffic and IPv6Traffic on, PreferIPv6 off:
/// `connection_ap_get_begincell_flags`): IPV6_OK when the exit's IPv6
/// exit policy (its microdescriptor's `p6`) accepts `port`, otherwise
/// none, whatever the target (an exit connects to an address literal of
/// either family anyway). Other flags would set the client apart from tor
/// clients at every exit.
pub fn begin_flags_for(dir: Option<&DirMgr>, circ: &Circuit, port: u16) -> u32 {
    let path = circ.path();
    let accepts = path.last().is_some_and(|exit| {
        dir.and_then(|d| d.netdir()).is_some_and(|nd| {
            nd.relay_by_rsa_id(&exit.rsa_id)
                .is_some_and(|r| r.ipv6_policy.allows_port(port))
        })
    });
    flags_for_exit(accepts)
}

/// [`begin_flags_for`] once the exit's IPv6 policy is known.
pub fn flags_for_exit(ipv6_policy_accepts_port: bool) -> u32 {
    if ipv6_policy_accepts_port {
        begin_flags::IPV6_OK
    } else {
        0
    }
}

/// Carry an open stream for the application until either side ends it,
/// it idles out, or a controller's CLOSESTREAM names it; then report it
/// CLOSED. `what` names it in the debug log.
pub(super) async fn carry(stream: Stream, sock: TcpStream, tr: &mut Tracked, what: &str) {
    let close = tr.close_requested();
    let counted = tr.count(sock);
    tokio::select! {
        (up, down) = stream.pump(counted, STREAM_IDLE_TIMEOUT) => {
            debug!("{what} closed: {up} bytes up, {down} bytes down");
        }
        _ = close => debug!("{what} closed by the controller"),
    }
    tr.closed();
}

/// Wait for the exit's answer to BEGIN, meanwhile reading what the
/// application sends (into `opt`, up to its bound) and, when `optimistic`,
/// sending it on at once.
async fn wait_connected(
    sock: &mut TcpStream,
    stream: &mut Stream,
    opt: &mut OptimisticData,
    optimistic: bool,
    app_eof: &mut bool,
    timeout: Duration,
) -> Waited {
    if optimistic {
        let d = opt.take_unsent().to_vec();
        // A write fails only when the stream already ended; its END is
        // read below.
        if !d.is_empty() {
            let _ = stream.write_all(&d).await;
        }
    }
    let deadline = tokio::time::Instant::now() + timeout;
    let mut buf = vec![0u8; READ_CHUNK];
    loop {
        let room = opt.room().min(buf.len());
        tokio::select! {
            ev = stream.next_event() => return Waited::Answer(stream.settle_first(ev)),
            r = sock.read(&mut buf[..room]), if !*app_eof && room > 0 => match r {
                Ok(0) => *app_eof = true,
                Ok(n) => {
                    opt.push(&buf[..n]);
                    if optimistic {
                        let d = opt.take_unsent().to_vec();
                        let _ = stream.write_all(&d).await;
                    }
                }
                Err(e) => return Waited::AppGone(format!("SOCKS client: {e}")),
            },
            _ = tokio::time::sleep_until(deadline) => {
                return Waited::Answer(Err(StreamError::Timeout));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn begin_flags_as_tor_clients_send_them() {
        // IPv6 only where the exit's p6 takes the port; never IPV4_NOT_OK
        // or IPV6_PREFERRED (tor's SocksPort defaults), whatever the target.
        assert_eq!(flags_for_exit(true), begin_flags::IPV6_OK);
        assert_eq!(flags_for_exit(false), 0);
    }
}
