//! Opening a stream: a circuit for the isolation key, BEGIN, CONNECTED,
//! with the SOCKS path's retries on another circuit; `.onion` targets go
//! to the onion-service client. Runs on the client's runtime.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::debug;

use onionmix_cell::relay::{Begin, TargetHost};
use onionmix_node::client::Client;
use onionmix_node::client::circmgr::IsolationKey;
use onionmix_node::client::circuit::Circuit;
use onionmix_node::client::socks::{
    MAX_STREAM_ATTEMPTS, STREAM_IDLE_TIMEOUT, attempt_timeout, retriable_end,
};
use onionmix_node::client::stream::{Stream, StreamError};
use onionmix_node::reactor::{StreamEvent, StreamRequest};

use crate::stream::{CircuitInfo, DataStream};
use crate::{EmbedError, STREAM_BUFFER, Target};

/// The isolation "username" embedded streams carry: tokens are kept apart
/// from SOCKS credentials (a SOCKS username cannot hold a NUL byte in
/// practice, and this process opens no SOCKS port unless a controller asks).
const TOKEN_USER: &[u8] = b"\0onionmix-embed-isolation-token";

/// What a connect needs from the client.
pub(crate) struct Ctx {
    pub client: Client,
    pub stream_timeout: Duration,
    pub handle: tokio::runtime::Handle,
}

/// The circuit-manager key for `token` in the current nym epoch (token
/// 0: no isolation, the key streams without SOCKS credentials use).
fn isolation_key(token: u64, epoch: u64) -> IsolationKey {
    IsolationKey {
        socks_auth: (token != 0).then(|| (TOKEN_USER.to_vec(), token.to_be_bytes().to_vec())),
        client_addr: None,
        nym_epoch: epoch,
    }
}

/// Open a stream to `target` isolated by `token`.
pub(crate) async fn connect(
    ctx: Ctx,
    target: Target,
    token: u64,
) -> Result<DataStream, EmbedError> {
    let c = &ctx.client;
    if !c.is_bootstrapped() && !c.wait_bootstrapped(ctx.stream_timeout).await {
        return Err(EmbedError::BootstrapTimeout(ctx.stream_timeout));
    }
    // A new stream wakes a dormant client, as a SOCKS request does.
    c.circmgr.set_dormant(false);
    let key = isolation_key(token, c.hub.epoch.load(Ordering::Relaxed));
    // An exit stream's task holds its circuit (the last reference going
    // away destroys it, e.g. after the circuit manager let go of it at a
    // new identity); onion-service streams' rendezvous circuits are held
    // by the onion-service client.
    let (stream, circ) = match target {
        Target::Onion { addr, port } => (c.hs.connect(&addr, port, &key, &[]).await?, None),
        Target::Exit { host, .. }
            if c.rejects_internal_addresses()
                && onionmix_node::client::socks::is_internal_target(&host) =>
        {
            return Err(EmbedError::BadTarget(format!(
                "{host} is an internal address (set client_reject_internal_addresses = false to allow it)"
            )));
        }
        Target::Exit { host, port } => {
            let (s, circ) = exit_stream(c, &key, host, port, ctx.stream_timeout).await?;
            (s, Some(circ))
        }
    };
    let info = circ.as_ref().map(CircuitInfo::of);
    let (app, ours) = tokio::io::duplex(STREAM_BUFFER);
    ctx.handle.spawn(async move {
        let (up, down) = stream.pump(ours, STREAM_IDLE_TIMEOUT).await;
        drop(circ);
        debug!("embedded stream closed: {up} bytes up, {down} bytes down");
    });
    Ok(DataStream::new(app, info))
}

/// BEGIN on a circuit for `key`, retried on another circuit after a
/// circuit-level failure or an END that blames the exit (as the SOCKS
/// path does, like tor's `connection_ap_process_end_not_open`).
async fn exit_stream(
    c: &Client,
    key: &IsolationKey,
    host: TargetHost,
    port: u16,
    timeout: Duration,
) -> Result<(Stream, Arc<Circuit>), EmbedError> {
    // The flags depend on each attempt's exit (as tor's).
    let mut begin = Begin {
        host,
        port,
        flags: 0,
    };
    let mut last = StreamError::Timeout;
    // As the SOCKS path: each attempt waits tor's retry timeout, the
    // stream at most `timeout` in all.
    let give_up = tokio::time::Instant::now() + timeout;
    for attempt in 0..MAX_STREAM_ATTEMPTS {
        let left = give_up.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            break;
        }
        let wait = attempt_timeout(attempt).min(left);
        let circ = c
            .circmgr
            .get_exit_circuit(key, Some(port))
            .await
            .map_err(|e| EmbedError::NoCircuit(e.to_string()))?;
        begin.flags = onionmix_node::client::connect::begin_flags_for(Some(&c.dir), &circ, port);
        let e = match circ.begin_stream(StreamRequest::Begin(begin.clone())).await {
            Ok(mut s) => match s.first_event(wait).await {
                // An exit claiming an internal address is not believed
                // (as on the SOCKS path).
                Ok(StreamEvent::Connected(Some(a)))
                    if c.rejects_internal_addresses()
                        && onionmix_proto::netaddr::is_internal(a) =>
                {
                    StreamError::End(onionmix_cell::relay::end_reason::TORPROTOCOL)
                }
                Ok(StreamEvent::Connected(_)) => return Ok((s, circ)),
                Ok(_) => StreamError::Unexpected,
                Err(e) => e,
            },
            Err(e) => e,
        };
        let retry = match &e {
            StreamError::End(r) => retriable_end(*r),
            StreamError::LocalOnly(_) | StreamError::Unexpected => false,
            _ => true,
        };
        debug!("embedded stream attempt {} failed: {e}", attempt + 1);
        last = e;
        if !retry {
            break;
        }
        c.circmgr.retire(&circ);
    }
    Err(last.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_map_to_distinct_keys() {
        assert_eq!(
            isolation_key(0, 3),
            IsolationKey {
                socks_auth: None,
                client_addr: None,
                nym_epoch: 3
            }
        );
        assert_ne!(isolation_key(1, 0), isolation_key(2, 0));
        assert_ne!(isolation_key(1, 0), isolation_key(1, 1));
        assert_eq!(isolation_key(7, 2), isolation_key(7, 2));
        assert_ne!(isolation_key(1, 0), IsolationKey::default());
    }
}
