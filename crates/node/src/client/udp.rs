//! SOCKS5 UDP ASSOCIATE (RFC 1928 §7) carried over UDP streams
//! (proposal 339 as docs/udp-over-tor.md describes).
//!
//! An association gets a UDP relay socket on the SOCKS listener's address;
//! it takes datagrams only from the application's address (and, once the
//! first came, only from that port; or the port the request named). Each
//! destination (address or hostname, and port) the application sends to
//! becomes one UDP stream (CONNECT_UDP) on a circuit chosen by the
//! association's isolation key whose exit advertises `Datagram=1`; each
//! datagram is one DATAGRAM message. What comes back is sent to the
//! application with the destination as it named it in the header.
//!
//! Bounds: [`MAX_DESTINATIONS`] streams per association, [`DEST_QUEUE`]
//! datagrams waiting per destination while its stream opens (more are
//! dropped), datagrams larger than one relay message are dropped (no
//! fragmentation). The association ends with its TCP connection, when
//! every destination it had failed or ended and none is left (so a
//! one-destination association, the tunnel's, tells its application the
//! destination is gone by closing), or after [`ASSOCIATION_IDLE`] without
//! a datagram.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};
use tokio::sync::mpsc;
use tracing::debug;

use onionmix_cell::relay::{ConnectUdp, TargetHost, begin_flags, end_reason, udp::MAX_DATAGRAM};
use onionmix_frontend::addr;
use onionmix_frontend::socks::{SocksCmd, SocksRequest, reply_code};
use onionmix_frontend::socks_udp;

use super::circmgr::IsolationKey;
use super::control::streams::Tracked;
use super::socks::SocksContext;
use crate::reactor::{StreamEvent, StreamRequest};

/// UDP streams per association.
pub const MAX_DESTINATIONS: usize = 16;
/// Datagrams waiting per destination while its stream opens.
pub const DEST_QUEUE: usize = 16;
/// Datagrams from exits waiting to be sent to the application.
const BACK_QUEUE: usize = 64;
/// Largest datagram read from the application (header included).
const MAX_READ: usize = 64 * 1024;
/// An association with no datagram either way for this long is closed.
pub const ASSOCIATION_IDLE: std::time::Duration = std::time::Duration::from_secs(300);

struct Dest {
    host: TargetHost,
    port: u16,
    tx: Option<mpsc::Sender<Bytes>>,
    task: tokio::task::JoinHandle<()>,
}

enum Back {
    Datagram(usize, Bytes),
    Ended(usize),
}

/// Serve one UDP ASSOCIATE request on `sock` (from `peer`).
pub async fn associate(
    mut sock: TcpStream,
    peer: SocketAddr,
    ctx: SocksContext,
    key: IsolationKey,
    req: SocksRequest,
) -> Result<(), String> {
    if !super::socks::wait_ready(&ctx, ctx.ready.clone(), &mut sock, &req).await {
        return Err("not bootstrapped yet".into());
    }
    let local = sock.local_addr().map_err(|e| e.to_string())?;
    let relay = UdpSocket::bind(SocketAddr::new(local.ip(), 0))
        .await
        .map_err(|e| e.to_string())?;
    let bound = relay.local_addr().map_err(|e| e.to_string())?;
    sock.write_all(&req.reply(reply_code::SUCCEEDED, Some((bound.ip(), bound.port()))))
        .await
        .map_err(|e| e.to_string())?;
    // Where the application sends from: the request's port if it named
    // one, else the first datagram's; always the TCP peer's address.
    let mut app: Option<SocketAddr> = (req.port != 0).then(|| SocketAddr::new(peer.ip(), req.port));
    let (back_tx, mut back_rx) = mpsc::channel::<Back>(BACK_QUEUE);
    let mut dests: Vec<Dest> = Vec::new();
    let mut had_dest = false;
    let mut buf = vec![0u8; MAX_READ];
    let mut ctl = [0u8; 64];
    let outcome = loop {
        tokio::select! {
            r = sock.read(&mut ctl) => match r {
                Ok(0) | Err(_) => break "the application closed the association",
                // Nothing is expected on it; ignored.
                Ok(_) => {}
            },
            r = relay.recv_from(&mut buf) => {
                let Ok((n, src)) = r else { break "relay socket failed" };
                if src.ip() != peer.ip() || app.is_some_and(|a| a != src) {
                    continue;
                }
                app = Some(src);
                let Some(d) = buf.get(..n) else { continue };
                let Ok((host, port, payload)) = socks_udp::parse(d) else {
                    continue;
                };
                if payload.len() > MAX_DATAGRAM || port == 0 {
                    continue;
                }
                if let TargetHost::Hostname(h) = &host
                    && addr::classify(h).is_local_only()
                {
                    // `.onion`/`.exit` names never leave the client.
                    continue;
                }
                let i = match dests.iter().position(|x| x.host == host && x.port == port) {
                    Some(i) => i,
                    None if dests.len() < MAX_DESTINATIONS => {
                        had_dest = true;
                        let (tx, rx) = mpsc::channel(DEST_QUEUE);
                        let i = dests.len();
                        let task = tokio::spawn(destination(
                            ctx.clone(),
                            key.clone(),
                            req.clone(),
                            peer,
                            host.clone(),
                            port,
                            rx,
                            back_tx.clone(),
                            i,
                        ));
                        dests.push(Dest { host, port, tx: Some(tx), task });
                        i
                    }
                    None => continue,
                };
                if let Some(tx) = dests.get(i).and_then(|x| x.tx.as_ref()) {
                    // A full queue (stream still opening): lost, as UDP.
                    let _ = tx.try_send(Bytes::copy_from_slice(payload));
                }
            },
            () = tokio::time::sleep(ASSOCIATION_IDLE) => break "idle",
            Some(b) = back_rx.recv() => match b {
                Back::Datagram(i, data) => {
                    let (Some(d), Some(to)) = (dests.get(i), app) else { continue };
                    if let Some(m) = socks_udp::encode(&d.host, d.port, &data) {
                        let _ = relay.send_to(&m, to).await;
                    }
                }
                Back::Ended(i) => {
                    if let Some(d) = dests.get_mut(i) {
                        d.tx = None;
                    }
                    if had_dest && dests.iter().all(|d| d.tx.is_none()) {
                        break "every destination ended";
                    }
                }
            },
        }
    };
    for d in dests {
        d.task.abort();
    }
    debug!("UDP association closed: {outcome}");
    Ok(())
}

/// One destination's UDP stream: open it, then move datagrams both ways
/// until either side ends.
#[allow(clippy::too_many_arguments)]
async fn destination(
    ctx: SocksContext,
    key: IsolationKey,
    req: SocksRequest,
    peer: SocketAddr,
    host: TargetHost,
    port: u16,
    mut rx: mpsc::Receiver<Bytes>,
    back: mpsc::Sender<Back>,
    idx: usize,
) {
    // The control port sees each destination as a stream.
    let as_req = SocksRequest {
        cmd: SocksCmd::UdpAssociate,
        host: host.clone(),
        port,
        ..req
    };
    let epoch = key.nym_epoch;
    ctx.circmgr.set_dormant(false);
    let mut tr = Tracked::new(&ctx.hub, &as_req, peer, epoch);
    run_destination(&ctx, &key, &mut tr, host, port, &mut rx, &back, idx).await;
    let _ = back.send(Back::Ended(idx)).await;
}

#[allow(clippy::too_many_arguments)]
async fn run_destination(
    ctx: &SocksContext,
    key: &IsolationKey,
    tr: &mut Tracked,
    host: TargetHost,
    port: u16,
    rx: &mut mpsc::Receiver<Bytes>,
    back: &mpsc::Sender<Back>,
    idx: usize,
) {
    let circ = if tr.controller_attaches() {
        tr.wait_attach()
            .await
            .ok_or_else(|| "not attached".to_string())
    } else {
        ctx.circmgr
            .get_udp_circuit(key, port)
            .await
            .map_err(|e| e.to_string())
    };
    let circ: Arc<_> = match circ {
        // A controller may attach the stream anywhere: never to an exit
        // that did not advertise UDP (a stock one never sees CONNECT_UDP).
        Ok(c) if !c.path().last().is_some_and(|h| h.datagram) => {
            debug!("UDP stream attached to a circuit whose exit has no Datagram=1");
            tr.failed(end_reason::EXITPOLICY, false);
            return;
        }
        Ok(c) => c,
        Err(e) => {
            debug!("no circuit for a UDP stream: {e}");
            tr.failed(end_reason::EXITPOLICY, false);
            return;
        }
    };
    tr.sent(&circ);
    let flags = match host {
        TargetHost::Ip(IpAddr::V6(_)) => begin_flags::IPV6_OK | begin_flags::IPV6_PREFERRED,
        _ => begin_flags::IPV6_OK,
    };
    let req = StreamRequest::ConnectUdp(ConnectUdp { flags, host, port });
    let mut stream = match circ.open_stream(req, ctx.stream_timeout).await {
        Ok((s, StreamEvent::Connected(_))) => s,
        Ok(_) => {
            tr.failed(end_reason::MISC, false);
            return;
        }
        Err(e) => {
            debug!("UDP stream refused: {e}");
            tr.failed(
                e.end_reason(),
                matches!(e, super::stream::StreamError::End(_)),
            );
            return;
        }
    };
    tr.succeeded();
    loop {
        tokio::select! {
            d = rx.recv() => {
                let Some(d) = d else { break };
                if stream.send_datagram(d).await.is_err() {
                    break;
                }
            }
            ev = stream.next_event() => match ev {
                Some(StreamEvent::Datagram(d)) => {
                    // The association's queue full: lost, as UDP.
                    let _ = back.try_send(Back::Datagram(idx, d));
                }
                Some(StreamEvent::End(_)) | None => break,
                Some(_) => {}
            },
        }
    }
    tr.closed();
}
