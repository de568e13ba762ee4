//! One introduction answered: a circuit to the client's rendezvous point
//! (three hops of ours, then the point), RENDEZVOUS1 with hs-ntor's reply,
//! the virtual hop (service side, keys swapped), then the streams the
//! client opens: each BEGIN's virtual port is looked up in the port map
//! and connected to its local target; unknown ports get END(DONE) and, as
//! in tor, the circuit is closed unless `allow_unknown_ports`.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::OsRng;
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tracing::debug;

use onionmix_cell::relay::{RelayCmd, end_reason};
use onionmix_crypto::relay_crypto_hs::HsRelayLayer;
use onionmix_hs::intro::{OpenedIntroduce, rendezvous1_padded};
use onionmix_hs::ntor::HsNtorService;
use onionmix_hs::service::PortMap;
use onionmix_proto::client_circ::MAX_STREAMS_PER_CIRCUIT;

use super::{IntroKeys, ServiceCtx, ServiceStats};
use crate::client::hs::net::{HsCirc, build_circuit, hop_from_link_specs};
use crate::client::socks::STREAM_IDLE_TIMEOUT;
use crate::client::stream::Stream;
use crate::glue::HsHop;
use crate::reactor::hs::{HsCommand, HsEvent, VirtualHop};
use crate::reactor::{ChanCommand, ChannelHandle};

/// Time to connect to a local target.
pub const TARGET_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// A rendezvous circuit with no stream for this long is closed (its slot
/// among [`super::MAX_RENDEZVOUS`] freed); clients make a new one.
pub const REND_IDLE_TIMEOUT: Duration = Duration::from_secs(30 * 60);

/// Per-service settings for rendezvous circuits.
pub(super) struct Settings {
    pub ports: Arc<PortMap>,
    pub max_streams: usize,
    pub allow_unknown_ports: bool,
    /// Close the circuit when a BEGIN exceeds `max_streams` (tor's
    /// `HiddenServiceMaxStreamsCloseCircuit`).
    pub max_streams_close_circuit: bool,
}

pub(super) async fn serve(
    ctx: ServiceCtx,
    keys: Arc<IntroKeys>,
    opened: OpenedIntroduce,
    subcred: [u8; 32],
    settings: Settings,
    stats: Arc<ServiceStats>,
    _permit: OwnedSemaphorePermit,
) {
    let nd = ctx.dir.netdir();
    let Some(rp) = hop_from_link_specs(
        &opened.plaintext.link_specifiers,
        &opened.plaintext.onion_key,
        nd.as_deref(),
    ) else {
        debug!("INTRODUCE2 names a rendezvous point we cannot reach");
        ServiceStats::bump(&stats.rendezvous_failed);
        return;
    };
    let joined: Result<HsCirc, String> = async {
        let circ = build_circuit(&ctx.dir, &ctx.circmgr, Some(&rp), None, &|_| true)
            .await
            .map_err(|e| e.to_string())?;
        let query = ctx.rend_query.as_deref();
        circ.set_control_purpose("HS_SERVICE_REND", Some("HSSR_CONNECTING"), query);
        let hs = HsCirc::attach(circ).await.map_err(|e| e.to_string())?;
        let ntor = HsNtorService::new(&keys.enc, &keys.auth.public(), &subcred);
        let (y, auth, hkeys) = ntor
            .rendezvous(&mut OsRng, &opened.client_pk)
            .map_err(|e| e.to_string())?;
        let msg = rendezvous1_padded(&opened.plaintext.rend_cookie, &y, &auth, &mut OsRng)
            .map_err(|e| e.to_string())?;
        let layer = Box::new(HsHop(HsRelayLayer::service(&hkeys)));
        let cc_sendme_inc = nd.as_deref().and_then(|nd| {
            onionmix_proto::cc::CcParams::from_consensus(nd.params())
                .onion_service_sendme_inc(opened.cc_requested)
        });
        let hop = VirtualHop {
            layer,
            accept_incoming: true,
            cc_sendme_inc,
        };
        hs.send(RelayCmd::RENDEZVOUS1, msg, Some(hop))
            .await
            .map_err(|e| e.to_string())?;
        if cc_sendme_inc.is_some() {
            ServiceStats::bump(&stats.rendezvous_cc);
        }
        hs.circ
            .set_control_purpose("HS_SERVICE_REND", Some("HSSR_JOINED"), None);
        Ok(hs)
    }
    .await;
    let mut hs = match joined {
        Ok(hs) => hs,
        Err(e) => {
            debug!("rendezvous with {} failed: {e}", rp.nickname);
            ServiceStats::bump(&stats.rendezvous_failed);
            return;
        }
    };
    ServiceStats::bump(&stats.rendezvous_ok);
    let max = match settings.max_streams {
        0 => MAX_STREAMS_PER_CIRCUIT,
        n => n.min(MAX_STREAMS_PER_CIRCUIT),
    };
    let streams = Arc::new(Semaphore::new(max));
    let chan = hs.circ.chan.clone();
    let circ_id = hs.circ.circ_id;
    let circ_credits = hs.circ.credits.clone();
    loop {
        let ev = match tokio::time::timeout(REND_IDLE_TIMEOUT, hs.next_event()).await {
            Ok(ev) => ev,
            // No new stream for a while: close the circuit if none is open.
            Err(_) if streams.available_permits() == max => {
                debug!("closing an idle rendezvous circuit");
                break;
            }
            Err(_) => continue,
        };
        let Some(ev) = ev else {
            break;
        };
        let HsEvent::IncomingStream {
            stream,
            port,
            events,
            gate,
        } = ev
        else {
            continue;
        };
        let end = |reason| ChanCommand::EndStream {
            circ_id,
            stream,
            reason,
        };
        let Some(target) = settings.ports.target(port) else {
            debug!("BEGIN to virtual port {port}, which is not served");
            let _ = chan.send(end(end_reason::DONE)).await;
            if settings.allow_unknown_ports {
                continue;
            }
            break;
        };
        let Ok(permit) = streams.clone().try_acquire_owned() else {
            let _ = chan.send(end(end_reason::RESOURCELIMIT)).await;
            if settings.max_streams_close_circuit {
                debug!("too many streams on a rendezvous circuit: closing it");
                break;
            }
            continue;
        };
        let incoming = Stream::incoming(
            chan.clone(),
            circ_id,
            stream,
            events,
            gate,
            circ_credits.clone(),
        );
        tokio::spawn(forward(
            chan.clone(),
            circ_id,
            incoming,
            target,
            stats.clone(),
            permit,
        ));
    }
    // Dropping `hs` destroys the circuit if the far end has not.
}

/// Connect a stream to its local target and move bytes both ways; END
/// with the reason tor would give when the target cannot be reached.
async fn forward(
    chan: ChannelHandle,
    circ_id: u32,
    stream: Stream,
    target: std::net::SocketAddr,
    stats: Arc<ServiceStats>,
    _permit: OwnedSemaphorePermit,
) {
    let id = stream.id();
    let conn = tokio::time::timeout(TARGET_CONNECT_TIMEOUT, TcpStream::connect(target)).await;
    let sock = match conn {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => {
            let reason = match e.kind() {
                std::io::ErrorKind::ConnectionRefused => end_reason::CONNECTREFUSED,
                _ => end_reason::NOROUTE,
            };
            debug!("local target {target} failed: {e}");
            let _ = chan
                .send(ChanCommand::EndStream {
                    circ_id,
                    stream: id,
                    reason,
                })
                .await;
            drop(stream);
            return;
        }
        Err(_) => {
            let _ = chan
                .send(ChanCommand::EndStream {
                    circ_id,
                    stream: id,
                    reason: end_reason::TIMEOUT,
                })
                .await;
            drop(stream);
            return;
        }
    };
    let _ = sock.set_nodelay(true);
    if chan
        .send(ChanCommand::Hs(HsCommand::AcceptStream {
            circ_id,
            stream: id,
        }))
        .await
        .is_err()
    {
        return;
    }
    ServiceStats::bump(&stats.streams);
    let (up, down) = stream.pump(sock, STREAM_IDLE_TIMEOUT).await;
    debug!("onion service stream closed: {up} bytes from the target, {down} to it");
}
