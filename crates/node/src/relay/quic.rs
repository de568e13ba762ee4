//! The relay's QUIC links (`docs/quic-links.md`): a UDP listener next to
//! the ORPort (same port number unless `quic_listen` says otherwise) with
//! the ORPort's admission limits, the responder side of the link
//! handshake over the control stream, and what the relay knows of other
//! relays' QUIC links. Outgoing links choose their transport in
//! [`super::ChannelRegistry::get_or_connect`].

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tracing::{debug, info};

use onionmix_link::quic::{QuicIncoming, codes};
use onionmix_link::tls::AUTH3_EXPORTER_LABEL;
use onionmix_link::{LinkConn, QuicStream, QuicTransport};
use onionmix_proto::channel::ResponderHandshake;

use super::{LINK_HANDSHAKE_TIMEOUT, MAX_KNOWN_ADDRS, RelayCtx, rotate, start_accepted};
use crate::admission::Permit;
use crate::clock::now_unix;
use crate::linkchoice::QuicPeers;

/// The relay's QUIC state.
#[derive(Debug)]
pub struct RelayQuic {
    endpoint: OnceLock<QuicTransport>,
    /// Learned QUIC addresses and recent QUIC failures, by identity.
    pub peers: QuicPeers,
    /// How long a QUIC attempt may take before TLS is tried.
    pub fallback: Duration,
}

impl RelayQuic {
    pub(super) fn new(fallback: Duration) -> Self {
        RelayQuic {
            endpoint: OnceLock::new(),
            peers: QuicPeers::new(MAX_KNOWN_ADDRS),
            fallback,
        }
    }

    /// The endpoint, once QUIC runs.
    pub fn endpoint(&self) -> Option<&QuicTransport> {
        self.endpoint.get()
    }

    /// The UDP port we take QUIC links on (what the descriptor says).
    pub fn port(&self) -> Option<u16> {
        self.endpoint()
            .and_then(|t| t.local_addr().ok())
            .map(|a| a.port())
    }
}

/// Bind the QUIC endpoint on `bind`, serving the relay's current TLS
/// certificate, and accept links on it. Returns the bound address.
pub(super) fn start(ctx: &Arc<RelayCtx>, bind: SocketAddr) -> Result<SocketAddr, String> {
    // No rotation between reading the certificate and installing the
    // endpoint's identity for it.
    let _g = ctx.rotation.lock().unwrap_or_else(|e| e.into_inner());
    let mut set = ctx.link();
    let t = QuicTransport::server(
        bind,
        set.cert.cert_der.clone(),
        set.cert.key_pkcs8_der.to_vec(),
        ctx.cfg.quic_limits(),
    )
    .map_err(|e| format!("cannot start QUIC on {bind}: {e}"))?;
    let local = t.local_addr().map_err(|e| format!("QUIC endpoint: {e}"))?;
    set.quic = t.identity();
    ctx.endpoint_set(t.clone())?;
    ctx.install_link(set);
    info!("QUIC links on udp/{local}");
    tokio::spawn(serve(ctx.clone(), t));
    Ok(local)
}

impl RelayCtx {
    fn endpoint_set(&self, t: QuicTransport) -> Result<(), String> {
        self.quic
            .endpoint
            .set(t)
            .map_err(|_| "QUIC already started".to_string())
    }
}

/// Accept QUIC links until the endpoint closes. Every attempt that
/// reaches us comes from a validated address (the transport sends Retry
/// first) and passes the ORPort's admission limits, shared with TLS.
async fn serve(ctx: Arc<RelayCtx>, t: QuicTransport) {
    while let Some(inc) = t.accept().await {
        let peer = inc.remote_address();
        let known = ctx.known.contains(peer.ip());
        match ctx
            .admission
            .admit(peer.ip(), known, std::time::Instant::now())
        {
            Ok(permit) => {
                tokio::spawn(accept_one(ctx.clone(), inc, peer, permit));
            }
            Err(why) => {
                // The address is not logged (it may be a client's).
                debug!("refused a QUIC link: {why}");
                inc.refuse();
            }
        }
    }
}

/// One inbound QUIC link: QUIC handshake (serving the certificate the
/// CERTS cell covers), responder link handshake on the control stream,
/// reactor.
async fn accept_one(ctx: Arc<RelayCtx>, inc: QuicIncoming, peer: SocketAddr, permit: Permit) {
    rotate::ensure_link_fresh(&ctx);
    let links = ctx.link();
    let Some(identity) = links.quic.clone() else {
        inc.refuse();
        return;
    };
    let my_addrs = vec![ctx.cfg.advertised_ip()];
    let fut = async {
        let (link, mut control, _info) = inc
            .handshake_with(&identity)
            .await
            .map_err(|e| format!("QUIC accept failed: {e}"))?;
        let hs = ResponderHandshake::new(links.id.as_ref(), now_unix(), my_addrs, Some(peer.ip()));
        let l = link.clone();
        let exporter = move |_: &QuicStream, c: &[u8; 32]| l.export(AUTH3_EXPORTER_LABEL, c).ok();
        match crate::glue::drive_responder_handshake(
            &mut control,
            hs,
            exporter,
            LINK_HANDSHAKE_TIMEOUT,
        )
        .await
        {
            Ok((acc, leftover)) => Ok((acc, leftover, LinkConn::Quic(link, control))),
            Err(e) => {
                link.close(codes::AUTH_FAILED);
                Err(e.to_string())
            }
        }
    };
    match tokio::time::timeout(LINK_HANDSHAKE_TIMEOUT, fut).await {
        Ok(Ok((acc, leftover, conn))) => start_accepted(&ctx, acc, leftover, conn, peer, permit),
        Ok(Err(e)) => debug!("inbound QUIC link failed: {e}"),
        Err(_) => debug!("inbound QUIC link handshake timed out"),
    }
}
