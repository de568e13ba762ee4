//! Relay links: outbound link setup (QUIC or TLS, ORCONN events) and the
//! TLS accept loop with its responder handshake.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use onionmix_link::LinkConn;
use onionmix_proto::channel::{ExpectedPeer, InitiatorHandshake, ResponderHandshake};

use super::reactor::{RelayChanHandle, spawn_relay_reactor};
use super::{LINK_HANDSHAKE_TIMEOUT, RelayCtx, rotate};
use crate::admission::Permit;
use crate::clock::now_unix;
use crate::control::counted::Counted;
use crate::glue::{RelayInitiatorAuth, responder_verifier};

/// Open an authenticated link to another relay, preferring QUIC.
pub(super) async fn connect(
    ctx: &Arc<RelayCtx>,
    id: [u8; 20],
    ed: Option<[u8; 32]>,
    addr: SocketAddr,
    quic: Option<SocketAddr>,
) -> Result<RelayChanHandle, String> {
    ctx.control.orconn(id, "LAUNCHED", None);
    let quic = ctx.quic.target(id, quic).await;
    let r = crate::linkchoice::connect(&ctx.quic.peers, id, quic, addr, ctx.quic.fallback, |via| {
        connect_via(ctx, id, ed, via)
    })
    .await;
    match &r {
        Ok(_) => ctx.control.orconn(id, "CONNECTED", None),
        Err(e) => ctx.control.orconn(id, "FAILED", Some(orconn_reason(e))),
    }
    r
}

/// tor's ORCONN reason for a failed outbound link.
fn orconn_reason(e: &str) -> &'static str {
    let e = e.to_ascii_lowercase();
    if e.contains("refused") {
        "CONNECTREFUSED"
    } else if e.contains("timed out") || e.contains("timeout") {
        "TIMEOUT"
    } else if e.contains("identity") {
        "IDENTITY"
    } else if e.contains("reset") {
        "CONNECTRESET"
    } else {
        "MISC"
    }
}

/// Open an authenticated link to another relay over one transport.
async fn connect_via(
    ctx: &Arc<RelayCtx>,
    id: [u8; 20],
    ed: Option<[u8; 32]>,
    via: crate::linkchoice::Via,
) -> Result<RelayChanHandle, String> {
    use crate::linkchoice::Via;
    rotate::ensure_link_fresh(ctx);
    let links = ctx.link();
    let (mut conn, info, addr) = match via {
        Via::Tls(addr) => {
            let (tls, info) = links.tls.connect(addr).await.map_err(|e| e.to_string())?;
            (LinkConn::Tls(Box::new(tls)), info, addr)
        }
        Via::Quic(addr) => {
            let t = ctx.quic.endpoint().ok_or("QUIC is off")?;
            let (link, control, info) = t.connect(addr).await.map_err(|e| e.to_string())?;
            (LinkConn::Quic(link, control), info, addr)
        }
    };
    let digest = info
        .responder_cert_digest()
        .ok_or("peer sent no TLS certificate")?;
    // TLSSECRETS' exporter context is CID, the SHA-256 of our RSA identity
    // key (current torspec; tor-spec.txt of 2023 said the Ed25519 key).
    let tlssecrets = conn
        .export(onionmix_link::tls::AUTH3_EXPORTER_LABEL, &links.id.cid())
        .map_err(|e| e.to_string())?;
    let auth = RelayInitiatorAuth {
        id: &links.id,
        tlssecrets,
    };
    let verifier = responder_verifier();
    let my_addr = ctx.cfg.advertised_ip();
    let hs = InitiatorHandshake::new(
        Some(ExpectedPeer {
            rsa_id: id,
            ed_id: ed,
        }),
        verifier.as_ref(),
        digest,
        now_unix(),
    )
    .with_auth(&auth, vec![my_addr])
    .with_peer_addr(addr.ip());
    // The link's bytes are counted from the handshake on (`traffic/*`).
    let driven = {
        let mut counted = Counted::new(&mut conn, ctx.control.traffic.clone());
        crate::glue::drive_initiator_handshake(&mut counted, hs, LINK_HANDSHAKE_TIMEOUT).await
    };
    let (est, leftover) = match driven {
        Ok(x) => x,
        Err(e) => {
            conn.fail(e.quic_close_code());
            return Err(e.to_string());
        }
    };
    let io = channel_io(ctx, conn, est.codec.clone(), leftover).map_err(|e| e.to_string())?;
    ctx.known.learn(addr.ip(), std::time::Instant::now());
    Ok(spawn_relay_reactor(
        ctx.clone(),
        io,
        est.codec,
        Some(est.peer),
        true,
        None,
    ))
}

/// Handle one inbound TCP connection: TLS, responder handshake, reactor.
/// `permit` is the connection's admission slot, held for its whole life.
async fn accept_one(ctx: Arc<RelayCtx>, tcp: TcpStream, peer: SocketAddr, permit: Permit) {
    rotate::ensure_link_fresh(&ctx);
    let links = ctx.link();
    let my_addrs = vec![ctx.cfg.advertised_ip()];
    // One deadline for TLS and the link handshake together.
    let fut = async {
        let (mut tls, _info) = links
            .tls
            .accept(tcp)
            .await
            .map_err(|e| format!("TLS accept failed: {e}"))?;
        let hs = ResponderHandshake::new(links.id.as_ref(), now_unix(), my_addrs, Some(peer.ip()));
        // The link's bytes are counted from the handshake on.
        let mut counted = Counted::new(&mut tls, ctx.control.traffic.clone());
        let exporter = |t: &Counted<&mut onionmix_link::tls::TlsStream, _>,
                        ctx_bytes: &[u8; 32]| {
            t.get_ref()
                .export(onionmix_link::tls::AUTH3_EXPORTER_LABEL, ctx_bytes)
                .ok()
        };
        let (acc, input) = crate::glue::drive_responder_handshake(
            &mut counted,
            hs,
            exporter,
            LINK_HANDSHAKE_TIMEOUT,
        )
        .await
        .map_err(|e| e.to_string())?;
        drop(counted);
        Ok::<_, String>((acc, input, LinkConn::Tls(Box::new(tls))))
    };
    match tokio::time::timeout(LINK_HANDSHAKE_TIMEOUT, fut).await {
        Ok(Ok((acc, leftover, conn))) => start_accepted(&ctx, acc, leftover, conn, peer, permit),
        Ok(Err(e)) => debug!("inbound link handshake failed: {e}"),
        Err(_) => debug!("inbound link handshake timed out"),
    }
}

/// A relay channel's I/O tasks (circuits may be created in both
/// directions). A TLS link's bytes are counted for the control port's
/// `traffic/*` and BW events (its handshake was counted by the caller); a
/// QUIC link's are not (apart from an outbound one's link handshake).
fn channel_io(
    ctx: &Arc<RelayCtx>,
    conn: LinkConn,
    codec: onionmix_cell::CellCodec,
    leftover: bytes::BytesMut,
) -> Result<onionmix_link::ChannelIo, onionmix_link::LinkError> {
    match conn {
        LinkConn::Tls(t) => Ok(onionmix_link::spawn_channel_io(
            Counted::new(*t, ctx.control.traffic.clone()),
            codec,
            leftover,
        )),
        quic => quic.into_channel_io(codec, leftover, true),
    }
}

/// Start the reactor of an inbound channel whose link handshake is done.
pub(super) fn start_accepted(
    ctx: &Arc<RelayCtx>,
    acc: onionmix_proto::channel::Accepted,
    leftover: bytes::BytesMut,
    conn: LinkConn,
    peer: SocketAddr,
    permit: Permit,
) {
    let quic = matches!(conn, LinkConn::Quic(..));
    let io = match channel_io(ctx, conn, acc.codec.clone(), leftover) {
        Ok(io) => io,
        Err(e) => {
            debug!("inbound channel: {e}");
            return;
        }
    };
    let peer_id = acc.peer.clone();
    if let Some(p) = &peer_id {
        ctx.known.learn(peer.ip(), std::time::Instant::now());
        if quic {
            // Its endpoint is where it takes QUIC links too.
            ctx.quic.peers.learn(p.rsa_id, peer);
        }
    }
    let h = spawn_relay_reactor(ctx.clone(), io, acc.codec, acc.peer, false, Some(permit));
    if let Some(p) = peer_id {
        // Only channels from relays are reported: a client's connection
        // has no identity, and tor would name it by its address.
        ctx.control.orconn(p.rsa_id, "CONNECTED", None);
        ctx.channels.register(p.rsa_id, h);
    }
}

/// Accept links forever on `listener`.
pub async fn serve(ctx: Arc<RelayCtx>, listener: TcpListener) {
    loop {
        match listener.accept().await {
            Ok((tcp, _)) if ctx.control.closing.load(Ordering::Relaxed) => {
                // SIGNAL SHUTDOWN: no new connections until we exit.
                drop(tcp);
            }
            Ok((tcp, peer)) => {
                match ctx.admit(peer) {
                    Ok(permit) => {
                        tokio::spawn(accept_one(ctx.clone(), tcp, peer, permit));
                    }
                    Err(why) => {
                        // Dropping the socket closes it at once; the
                        // address is not logged (it may be a client's).
                        debug!("refused an ORPort connection: {why}");
                        drop(tcp);
                    }
                }
            }
            Err(e) => {
                warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
