//! Introduction and rendezvous (rend-spec-v3 §3.2-§3.3, client side):
//! the rendezvous point made ready (ahead of need while the descriptor is
//! fetched), INTRODUCE1 through an introduction point (with PoW when the
//! descriptor asks), RENDEZVOUS2 and the end-to-end layer added.

use std::sync::Arc;

use rand::rngs::OsRng;
use tracing::{debug, info};

use onionmix_cell::hs::HsMsg;
use onionmix_cell::relay::RelayCmd;
use onionmix_crypto::relay_crypto_hs::HsRelayLayer;
use onionmix_hs::OnionAddress;
use onionmix_hs::client::IntroOutcome;
use onionmix_hs::client::cache::CachedDesc;
use onionmix_hs::desc::IntroPointInfo;
use onionmix_hs::error::RendFailure;
use onionmix_hs::intro::{Introduce1Input, build_introduce1, rendezvous2_handshake};
use onionmix_hs::ntor::HsNtorClient;

use super::net::{self, HsCirc, HsCircError, HsNet, build_circuit, hop_from_link_specs};
use super::{HsClient, HsStats, INTRO_ACK_TIMEOUT, REND_ESTABLISHED_TIMEOUT, RENDEZVOUS2_TIMEOUT};
use crate::client::circuit::{Circuit, HopTarget};
use crate::glue::HsHop;

/// The rendezvous circuit of one connection attempt: ready (kept across
/// introduction attempts), or being made ready while the descriptor is
/// fetched.
#[derive(Default)]
pub(super) struct RendSlot {
    pub(super) ready: Option<ReadyRend>,
    pub(super) early: Option<EarlyRend>,
}

/// A rendezvous circuit being made ready ahead of need; aborted (the
/// circuit closed) if dropped unused.
pub(super) struct EarlyRend(pub(super) tokio::task::JoinHandle<Result<ReadyRend, HsCircError>>);

impl EarlyRend {
    /// The ready circuit, if it became ready and is still open.
    async fn finish(mut self) -> Option<ReadyRend> {
        match (&mut self.0).await {
            Ok(Ok(r)) if !r.hs.circ.is_closed() => Some(r),
            _ => None,
        }
    }
}

impl Drop for EarlyRend {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// A rendezvous circuit whose point answered RENDEZVOUS_ESTABLISHED.
pub(super) struct ReadyRend {
    hs: HsCirc,
    cookie: [u8; 20],
    point: HopTarget,
}

/// What one introduction is to: the service, its descriptor and one of
/// its introduction points.
pub(super) struct IntroTarget<'a> {
    pub addr: &'a OnionAddress,
    pub desc: &'a CachedDesc,
    pub ip: &'a IntroPointInfo,
}

impl HsClient {
    /// A rendezvous circuit with its point ready. `intro`: the
    /// introduction point the circuit taken alongside goes to; a pooled
    /// circuit that could reach it is left for that one when another fits.
    /// `label`: the service's address without `.onion`, the circuit's
    /// REND_QUERY on the control port from the start (as tor's, launched
    /// for one service).
    pub(super) async fn establish_rend(
        &self,
        intro: Option<&HopTarget>,
        label: &str,
    ) -> Result<ReadyRend, HsCircError> {
        let circ = build_circuit(
            &self.inner.dir,
            &self.inner.circmgr,
            None,
            intro,
            &net::is_rend_point,
        )
        .await
        .map_err(|e| {
            debug!("rendezvous circuit: {e}");
            HsCircError::Closed
        })?;
        let point = circ.path().last().cloned().ok_or(HsCircError::Closed)?;
        circ.set_control_purpose("HS_CLIENT_REND", Some("HSCR_CONNECTING"), Some(label));
        let mut hs = HsCirc::attach(circ).await?;
        let cookie: [u8; 20] = rand::random();
        hs.send(RelayCmd::ESTABLISH_RENDEZVOUS, cookie.to_vec(), None)
            .await?;
        hs.expect(RelayCmd::RENDEZVOUS_ESTABLISHED, REND_ESTABLISHED_TIMEOUT)
            .await?;
        hs.circ
            .set_control_purpose("HS_CLIENT_REND", Some("HSCR_ESTABLISHED_IDLE"), None);
        Ok(ReadyRend { hs, cookie, point })
    }

    /// One introduction through `target.ip`; on success the joined
    /// circuit.
    pub(super) async fn introduce(
        &self,
        net: &HsNet,
        target: IntroTarget<'_>,
        effort: u32,
        subcred: &[u8; 32],
        rend_slot: &mut RendSlot,
    ) -> Result<Arc<Circuit>, IntroOutcome> {
        let IntroTarget { addr, desc, ip } = target;
        let label = addr.label();
        let ip_hop = hop_from_link_specs(&ip.link_specifiers, &ip.onion_key, Some(&net.nd))
            .ok_or(IntroOutcome::Unreachable)?;
        let reuse = rend_slot.ready.take().filter(|r| !r.hs.circ.is_closed());
        let early = rend_slot.early.take();
        let rend_fut = async {
            if let Some(r) = reuse {
                return Ok(r);
            }
            if let Some(e) = early
                && let Some(r) = e.finish().await
            {
                return Ok(r);
            }
            self.establish_rend(Some(&ip_hop), &label).await
        };
        let intro_fut = async {
            let c = build_circuit(
                &self.inner.dir,
                &self.inner.circmgr,
                Some(&ip_hop),
                None,
                &|_| true,
            )
            .await
            .map_err(|e| {
                debug!("introduction circuit: {e}");
                HsCircError::Closed
            })?;
            c.set_control_purpose("HS_CLIENT_INTRO", Some("HSCI_CONNECTING"), Some(&label));
            HsCirc::attach(c).await
        };
        let pow_fut = solve_pow(desc, effort);
        let rend_fut = async {
            let r = rend_fut.await;
            debug!("rendezvous point ready: {}", r.is_ok());
            r
        };
        let intro_fut = async {
            let r = intro_fut.await;
            debug!("introduction circuit ready: {}", r.is_ok());
            r
        };
        let (rend, intro, pow) = tokio::join!(rend_fut, intro_fut, pow_fut);
        if pow.is_some() {
            HsStats::bump(&self.inner.stats.pow_solved);
        }
        let mut rend = rend.map_err(|_| IntroOutcome::Rend(RendFailure::CircuitClosed))?;
        let mut intro = match intro {
            Ok(i) => i,
            Err(_) => {
                rend_slot.ready = Some(rend);
                return Err(IntroOutcome::Unreachable);
            }
        };
        let ntor = HsNtorClient::new(&mut OsRng, &ip.enc_key, &ip.auth_key, subcred);
        let specs = rend.point.link_specs();
        let cc_sendme_inc = net
            .cc
            .onion_client_sendme_inc(desc.content.flow_control_sendme_inc);
        let input = Introduce1Input {
            auth_key: ip.auth_key,
            rend_cookie: rend.cookie,
            rend_onion_key: rend.point.ntor_key,
            rend_link_specifiers: &specs,
            pow,
            cc_request: cc_sendme_inc.is_some(),
        };
        let Ok(msg) = build_introduce1(&ntor, &input) else {
            rend_slot.ready = Some(rend);
            return Err(IntroOutcome::Nack(
                onionmix_cell::hs::intro_status::BAD_FORMAT,
            ));
        };
        if intro.send(RelayCmd::INTRODUCE1, msg, None).await.is_err() {
            rend_slot.ready = Some(rend);
            return Err(IntroOutcome::Unreachable);
        }
        intro
            .circ
            .set_control_purpose("HS_CLIENT_INTRO", Some("HSCI_INTRO_SENT"), None);
        let ack = intro
            .expect(RelayCmd::INTRODUCE_ACK, INTRO_ACK_TIMEOUT)
            .await;
        drop(intro);
        let status = match ack {
            Ok(d) => match HsMsg::parse(RelayCmd::INTRODUCE_ACK, &d) {
                Ok(Some(HsMsg::IntroduceAck(s, _))) => s,
                _ => onionmix_cell::hs::intro_status::BAD_FORMAT,
            },
            Err(HsCircError::Timeout) => {
                rend_slot.ready = Some(rend);
                return Err(IntroOutcome::AckTimeout);
            }
            Err(_) => {
                rend_slot.ready = Some(rend);
                return Err(IntroOutcome::Unreachable);
            }
        };
        debug!("INTRODUCE_ACK: status {status}");
        if status != onionmix_cell::hs::intro_status::SUCCESS {
            rend_slot.ready = Some(rend);
            return Err(IntroOutcome::Nack(status));
        }
        rend.hs.circ.set_control_purpose(
            "HS_CLIENT_REND",
            Some("HSCR_ESTABLISHED_WAITING"),
            Some(&label),
        );
        let info = match rend
            .hs
            .expect(RelayCmd::RENDEZVOUS2, RENDEZVOUS2_TIMEOUT)
            .await
        {
            Ok(info) => info,
            Err(HsCircError::Timeout) => return Err(IntroOutcome::RendTimeout),
            Err(_) => return Err(IntroOutcome::Rend(RendFailure::CircuitClosed)),
        };
        let keys = rendezvous2_handshake(&info)
            .map_err(|e| e.to_string())
            .and_then(|(y, auth)| ntor.finish(&y, &auth).map_err(|e| e.to_string()))
            .map_err(|e| {
                debug!("RENDEZVOUS2 ({} bytes): {e}", info.len());
                IntroOutcome::Rend(RendFailure::BadHandshake)
            })?;
        let layer = HsHop(HsRelayLayer::client(&keys));
        rend.hs
            .add_hop(Box::new(layer), cc_sendme_inc)
            .await
            .map_err(|_| IntroOutcome::Rend(RendFailure::CircuitClosed))?;
        rend.hs
            .circ
            .set_control_purpose("HS_CLIENT_REND", Some("HSCR_JOINED"), None);
        HsStats::bump(&self.inner.stats.rend_joined);
        if cc_sendme_inc.is_some() {
            HsStats::bump(&self.inner.stats.rend_cc);
        }
        info!(target: "onionmix::hs", "rendezvous circuit to an onion service joined");
        Ok(rend.hs.circ.clone())
    }
}

/// Solve the descriptor's PoW puzzle at `effort` off the async runtime
/// (`None` for effort 0, no `pow-params`, or a failed solver).
pub(super) async fn solve_pow(
    desc: &CachedDesc,
    effort: u32,
) -> Option<onionmix_cell::hs::PowSolution> {
    #[cfg(feature = "pow")]
    {
        let p = desc.content.pow_v1?;
        if effort == 0 {
            return None;
        }
        let blinded = desc.blinded;
        let t0 = std::time::Instant::now();
        let sol = tokio::task::spawn_blocking(move || {
            onionmix_hs::pow::solve(&blinded, &p.seed, effort, &mut OsRng)
        })
        .await
        .ok()?
        .ok();
        debug!("PoW effort {effort} solved in {:?}", t0.elapsed());
        sol
    }
    #[cfg(not(feature = "pow"))]
    {
        let _ = (desc, effort);
        None
    }
}
