//! Channel manager: at most one channel per relay identity, opened on
//! demand (TLS, or QUIC to relays that advertise it when the client uses
//! QUIC, then the in-protocol handshake), reused while it lives.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{debug, info};

use onionmix_link::{LinkConn, QuicTransport, TlsTransport};
use onionmix_proto::channel::{ExpectedPeer, InitiatorHandshake};

use super::circuit::HopTarget;
use super::control::hub::ControlHub;
use crate::glue;
use crate::linkchoice::{self, QuicPeers, Via};
use crate::reactor::{ChannelHandle, ClientFlowStats, spawn_client_reactor};

/// Most channels a client keeps open at once.
pub const MAX_CHANNELS: usize = 256;
/// Time allowed for the in-protocol handshake after TLS.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(20);

/// Why a channel could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum ChanError {
    /// TLS or TCP failed.
    #[error("{0}")]
    Link(#[from] onionmix_link::LinkError),
    /// The Tor handshake failed.
    #[error("handshake: {0}")]
    Handshake(String),
    /// Limit reached.
    #[error("too many open channels")]
    TooMany,
}

type Slot = Arc<tokio::sync::Mutex<Option<ChannelHandle>>>;

/// Opens and shares channels.
#[derive(Clone)]
pub struct ChanMgr {
    transport: TlsTransport,
    /// QUIC to relays that advertise it, and how long to wait for it.
    quic: Option<(QuicTransport, Duration)>,
    quic_peers: Arc<QuicPeers>,
    slots: Arc<Mutex<HashMap<[u8; 20], Slot>>>,
    hub: Option<Arc<ControlHub>>,
    stats: Arc<ClientFlowStats>,
}

impl std::fmt::Debug for ChanMgr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChanMgr").finish()
    }
}

impl ChanMgr {
    /// A manager using `transport`.
    pub fn new(transport: TlsTransport) -> Self {
        ChanMgr {
            transport,
            quic: None,
            quic_peers: Arc::new(QuicPeers::new(MAX_CHANNELS)),
            slots: Arc::new(Mutex::new(HashMap::new())),
            hub: None,
            stats: Arc::default(),
        }
    }

    /// Reach relays that advertise QUIC (a [`HopTarget::quic_port`]) over
    /// `quic`, falling back to TLS after `fallback`.
    pub fn with_quic(mut self, quic: QuicTransport, fallback: Duration) -> Self {
        self.quic = Some((quic, fallback));
        self
    }

    /// Report channels (ORCONN) and the circuits built on them to `hub`.
    pub fn with_hub(mut self, hub: Arc<ControlHub>) -> Self {
        self.hub = Some(hub);
        self
    }

    /// Peers with a live channel.
    pub fn live_peers(&self) -> Vec<[u8; 20]> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .iter()
            .filter(|(_, s)| match s.try_lock() {
                Ok(g) => g.as_ref().is_some_and(|h| !h.is_closed()),
                Err(_) => true,
            })
            .map(|(id, _)| *id)
            .collect()
    }

    /// Open channels and the bytes queued on them towards relays, not
    /// yet written (a channel busy being opened or used right now is
    /// skipped).
    pub fn queued(&self) -> (usize, usize) {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots
            .values()
            .filter_map(|s| s.try_lock().ok())
            .filter_map(|g| {
                g.as_ref()
                    .filter(|h| !h.is_closed())
                    .map(|h| h.queued_bytes())
            })
            .fold((0, 0), |(n, b), q| (n + 1, b.saturating_add(q)))
    }

    /// Congestion- and flow-control counters of every channel's circuits.
    pub fn flow_stats(&self) -> &ClientFlowStats {
        &self.stats
    }

    /// A channel to `target`, opening one if needed.
    pub async fn get(&self, target: &HopTarget) -> Result<ChannelHandle, ChanError> {
        let slot = {
            let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
            if !slots.contains_key(&target.rsa_id) && slots.len() >= MAX_CHANNELS {
                // Drop entries whose channels have died before refusing.
                slots.retain(|_, s| match s.try_lock() {
                    Ok(g) => g.as_ref().is_some_and(|h| !h.is_closed()),
                    Err(_) => true,
                });
                if slots.len() >= MAX_CHANNELS {
                    return Err(ChanError::TooMany);
                }
            }
            slots.entry(target.rsa_id).or_default().clone()
        };
        let mut g = slot.lock().await;
        if let Some(h) = g.as_ref()
            && !h.is_closed()
        {
            return Ok(h.clone());
        }
        let h = self.connect(target).await?;
        *g = Some(h.clone());
        Ok(h)
    }

    /// Open a fresh channel (TLS + handshake) and start its reactor.
    pub async fn connect(&self, target: &HopTarget) -> Result<ChannelHandle, ChanError> {
        let Some(hub) = &self.hub else {
            return self.connect_inner(target).await;
        };
        hub.orconn(target.rsa_id, &target.nickname, "LAUNCHED", None);
        match self.connect_inner(target).await {
            Ok(mut h) => {
                hub.orconn(target.rsa_id, &target.nickname, "CONNECTED", None);
                h.hub = Some(hub.clone());
                Ok(h)
            }
            Err(e) => {
                let reason = match &e {
                    ChanError::Handshake(_) => "IDENTITY",
                    ChanError::TooMany => "RESOURCELIMIT",
                    ChanError::Link(_) => "CONNECTREFUSED",
                };
                hub.orconn(target.rsa_id, &target.nickname, "FAILED", Some(reason));
                Err(e)
            }
        }
    }

    async fn connect_inner(&self, target: &HopTarget) -> Result<ChannelHandle, ChanError> {
        let Some((_, fallback)) = &self.quic else {
            return self.connect_via(target, Via::Tls(target.or_addr)).await;
        };
        let quic = self.quic_peers.target(
            target.rsa_id,
            target.quic_addr(),
            None,
            std::time::Instant::now(),
        );
        // Only a hint from the directory counts: a client learns nothing
        // from links of its own.
        let quic = quic.filter(|_| target.quic_port.is_some());
        linkchoice::connect(
            &self.quic_peers,
            target.rsa_id,
            quic,
            target.or_addr,
            *fallback,
            |via| self.connect_via(target, via),
        )
        .await
    }

    async fn connect_via(&self, target: &HopTarget, via: Via) -> Result<ChannelHandle, ChanError> {
        let (mut conn, info) =
            match via {
                Via::Tls(addr) => {
                    let (tls, info) = self.transport.connect(addr).await?;
                    (LinkConn::Tls(Box::new(tls)), info)
                }
                Via::Quic(addr) => {
                    let (t, _) = self.quic.as_ref().ok_or(ChanError::Link(
                        onionmix_link::LinkError::Config("QUIC is off"),
                    ))?;
                    let (link, control, info) = t.connect(addr).await?;
                    (LinkConn::Quic(link, control), info)
                }
            };
        let digest = info
            .responder_cert_digest()
            .ok_or_else(|| ChanError::Handshake("peer sent no TLS certificate".into()))?;
        let now = crate::clock::now_unix();
        let verifier = glue::responder_verifier();
        let expected = ExpectedPeer {
            rsa_id: target.rsa_id,
            ed_id: target.ed_id,
        };
        let hs = InitiatorHandshake::new(Some(expected), verifier.as_ref(), digest, now)
            .with_peer_addr(target.or_addr.ip());
        let (est, leftover) =
            match glue::drive_initiator_handshake(&mut conn, hs, HANDSHAKE_TIMEOUT).await {
                Ok(x) => x,
                Err(e) => {
                    conn.fail(e.quic_close_code());
                    return Err(match e {
                        glue::DriveError::Io(e) => ChanError::Link(onionmix_link::LinkError::Io(e)),
                        e => ChanError::Handshake(e.to_string()),
                    });
                }
            };
        debug!(
            "channel to {} open (link v{}, {})",
            target.nickname,
            est.link_version,
            via.name()
        );
        info!(target: "onionmix::chan", "connected to relay {}", target.nickname);
        // A relay never creates circuits towards a client.
        let io = conn.into_channel_io(est.codec.clone(), leftover, false)?;
        Ok(spawn_client_reactor(
            io,
            est.codec,
            est.peer.rsa_id,
            Some(est.peer.ed_id),
            self.stats.clone(),
        ))
    }
}
