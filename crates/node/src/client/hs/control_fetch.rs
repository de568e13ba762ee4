//! Descriptor fetches a controller asks for with HSFETCH (control-spec
//! §3.26), as stock tor 0.4.9 makes them (`hs_client_launch_v3_desc_fetch`):
//! without `SERVER=`, one request to a responsible HSDir picked at random
//! among those not asked recently; with `SERVER=`, one request to each
//! given relay. The client's cache is ignored when asking and filled with
//! what arrives. Each request is reported as tor reports it: `HS_DESC
//! REQUESTED`, then `RECEIVED` and `HS_DESC_CONTENT` with the descriptor,
//! or `FAILED` and an empty `HS_DESC_CONTENT`.

use rand::rngs::OsRng;
use tracing::debug;

use onionmix_hs::OnionAddress;
use onionmix_hs::client::FetchRound;
use onionmix_hs::client::cache::CachedDesc;
use onionmix_hs::desc::DescError;
use onionmix_hs::ring::RingKind;

use super::net::HsNet;
use super::{HsClient, decode, events, lock};
use crate::client::circuit::HopTarget;

impl HsClient {
    /// The HSDir an HSFETCH without `SERVER=` asks, and the next one
    /// after a request that brought no usable descriptor (tor's
    /// `hs_client_refetch_hsdesc`): a responsible one not asked for this
    /// descriptor recently (the request is noted). None when there is
    /// none: tor then forgets the recent requests and reports nothing;
    /// with `report_none` (the HSFETCH itself) we report `HS_DESC FAILED
    /// ... UNKNOWN ... REASON=QUERY_NO_HSDIR` so a controller is not left
    /// waiting.
    pub fn control_fetch_pick(&self, addr: &OnionAddress, report_none: bool) -> Option<HopTarget> {
        let net = HsNet::current(&self.inner.dir).ok()?;
        let period = net.plan.fetch.period;
        let (blinded, _) = onionmix_hs::keys::blinded_public(addr, &net.schedule, period).ok()?;
        let hsdirs = net.responsible(RingKind::Fetch, &blinded, period);
        let now = crate::clock::now_unix();
        let picked = {
            let reqs = lock(&self.inner.hsdir_reqs);
            let mut round = FetchRound::new(
                hsdirs.len(),
                |i| {
                    hsdirs
                        .get(i)
                        .is_some_and(|h| reqs.may_query(&blinded, &h.rsa_id, now))
                },
                &mut OsRng,
            );
            round.next_hsdir().and_then(|i| hsdirs.get(i).cloned())
        };
        match &picked {
            Some(h) => lock(&self.inner.hsdir_reqs).note(&blinded, &h.rsa_id, now),
            None => {
                lock(&self.inner.hsdir_reqs).purge(&blinded);
                if report_none {
                    let hub = self.inner.hub.get().map(|h| &**h);
                    events::FetchEvents::new(hub, addr, &blinded, &net)
                        .failed(None, "QUERY_NO_HSDIR");
                }
            }
        }
        picked
    }

    /// Whether the cache holds a descriptor of `addr` with introduction
    /// points (tor stops asking HSDirs then).
    pub fn control_has_desc(&self, addr: &OnionAddress) -> bool {
        let Ok(net) = HsNet::current(&self.inner.dir) else {
            return false;
        };
        let now = crate::clock::now_unix();
        lock(&self.inner.descs)
            .get(addr.key(), net.plan.fetch.period, now)
            .is_some_and(|d| !d.content.intro_points.is_empty())
    }

    /// One HSFETCH request to `hsdir`, reported with `HS_DESC` /
    /// `HS_DESC_CONTENT` events; a usable descriptor is cached. Bounded
    /// by the HSDir request timeout.
    pub async fn control_fetch_from(&self, addr: &OnionAddress, hsdir: &HopTarget) {
        let Ok(net) = HsNet::current(&self.inner.dir) else {
            return;
        };
        let period = net.plan.fetch.period;
        let Ok((blinded, subcred)) = onionmix_hs::keys::blinded_public(addr, &net.schedule, period)
        else {
            return;
        };
        let hub = self.inner.hub.get().map(|h| &**h);
        let ev = events::FetchEvents::new(hub, addr, &blinded, &net);
        let path = onionmix_hs::desc::cache::fetch_path(&blinded);
        let request = format!("GET {path} HTTP/1.0\r\n\r\n").into_bytes();
        let Ok(body) = self.ask_hsdir(hsdir, &request, &ev).await else {
            return;
        };
        let auth = lock(&self.inner.auth)
            .get(addr.key())
            .map(|k| zeroize::Zeroizing::new(*k.secret));
        let now = crate::clock::now_unix();
        match decode(&body, &blinded, &subcred, auth.as_deref(), now) {
            Ok((content, lifetime_s)) => {
                ev.received(hsdir, &body);
                let desc = CachedDesc {
                    content,
                    period,
                    blinded,
                    expires: now.saturating_add(lifetime_s),
                    stored: now,
                };
                lock(&self.inner.descs).insert(*addr.key(), desc, now);
            }
            // tor stores these and reports RECEIVED.
            Err(DescError::MissingClientAuth | DescError::WrongClientAuth) => {
                ev.received(hsdir, &body);
            }
            Err(e) => {
                debug!("HSFETCH: descriptor from {} unusable: {e}", hsdir.nickname);
                ev.failed(Some(hsdir), "BAD_DESC");
            }
        }
    }
}
