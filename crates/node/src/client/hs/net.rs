//! What onion-service clients and services share: the hash-ring view of
//! the current consensus, circuits that end at a chosen relay (HSDir,
//! introduction point, rendezvous point), directory requests to HSDirs
//! over `BEGIN_DIR`, and a handle for a circuit's onion-service messages.
//!
//! Circuit lengths are stock tor's (`route_len_for_purpose`): a circuit
//! to a relay someone else chose, or that must not learn who we are (an
//! HSDir, an introduction point, the client's rendezvous point for a
//! service), is three hops of ours and then that relay; the client's own
//! rendezvous point is the last of three.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tracing::debug;

use onionmix_cell::relay::{LinkSpec, RelayCmd};
use onionmix_hs::ring::{HashRing, RingKind, RingParams, RingPlan, SharedRandom};
use onionmix_hs::time::HsSchedule;
use onionmix_netdoc::{NetDir, Relay, RelayFlags};
use onionmix_proto::cc::CcParams;
use onionmix_proto::layer::ClientLayer;

use crate::client::circmgr::CircMgr;
use crate::client::circuit::{BuildError, Circuit, HopTarget, extend_circuit};
use crate::client::dir::DirMgr;
use crate::reactor::hs::{HS_EVENT_QUEUE, HsCommand, HsEvent, VirtualHop};
use crate::reactor::{ChanCommand, ReactorError, StreamRequest};

/// Paths tried for one onion-service circuit.
pub const BUILD_ATTEMPTS: usize = 3;
/// Time allowed for one HSDir request (circuit, stream, answer).
pub const HSDIR_REQUEST_TIMEOUT: Duration = Duration::from_secs(45);

/// The onion-service view of one consensus: time periods, the three hash
/// rings' inputs, and the relays on the ring.
#[derive(Debug, Clone)]
pub struct HsNet {
    /// The consensus and microdescriptors.
    pub nd: Arc<NetDir>,
    /// Its time-period schedule.
    pub schedule: HsSchedule,
    /// The rings it implies.
    pub plan: RingPlan,
    /// `hsdir_n_replicas`, `hsdir_spread_*`.
    pub params: RingParams,
    /// Its valid-after (seconds since the epoch).
    pub valid_after: u64,
    /// Its congestion-control parameters (`cc_alg`, `cc_sendme_inc`, ...).
    pub cc: Arc<CcParams>,
    hsdir_ids: Vec<[u8; 32]>,
    hsdir_hops: Vec<HopTarget>,
}

/// Whether `r` can be on the HSDir ring (tor: the HSDir flag, `HSDir=2`,
/// a known Ed25519 identity).
pub fn is_hsdir(r: &Relay) -> bool {
    r.ed_id.is_some() && r.flags.contains(RelayFlags::HSDIR) && r.protocols.supports("HSDir", 2)
}

/// Whether `r` can be a v3 introduction point (`HSIntro=4`).
pub fn is_intro_point(r: &Relay) -> bool {
    r.ed_id.is_some()
        && r.protocols.supports("HSIntro", 4)
        && r.flags
            .contains(RelayFlags::RUNNING.with(RelayFlags::VALID))
}

/// Whether `r` can be a v3 rendezvous point (`HSRend=2`).
pub fn is_rend_point(r: &Relay) -> bool {
    r.protocols.supports("HSRend", 2)
        && r.flags
            .contains(RelayFlags::RUNNING.with(RelayFlags::VALID))
}

impl HsNet {
    /// The view of the client's current directory.
    pub fn current(dir: &DirMgr) -> Result<Self, String> {
        let nd = dir.netdir().ok_or("no directory yet")?;
        Self::new(nd, dir.testing_network())
    }

    /// The view of `nd`.
    pub fn new(nd: Arc<NetDir>, testing: bool) -> Result<Self, String> {
        let lt = nd.lifetime();
        let valid_after = crate::clock::to_unix(lt.valid_after);
        let fresh_until = crate::clock::to_unix(lt.fresh_until);
        let params = nd.params();
        let schedule = HsSchedule::new(
            valid_after,
            fresh_until,
            params.get("hsdir_interval").copied(),
            testing,
        )
        .map_err(|e| format!("time periods: {e}"))?;
        // No value listed: the hash ring uses the disaster SRV.
        let previous = nd.shared_rand_previous().map(|s| s.value);
        let current = nd.shared_rand_current().map(|s| s.value);
        let plan = RingPlan::new(&schedule, valid_after, &SharedRandom { current, previous })
            .map_err(|e| format!("hash ring: {e}"))?;
        let ring_params = RingParams::from_params(|k| params.get(k).copied());
        let (hsdir_ids, hsdir_hops) = nd
            .relays()
            .filter(|r| is_hsdir(r))
            .filter_map(|r| Some((r.ed_id?, DirMgr::hs_hop(r))))
            .unzip();
        let cc = Arc::new(CcParams::from_consensus(params));
        Ok(Self {
            nd,
            schedule,
            plan,
            params: ring_params,
            valid_after,
            cc,
            hsdir_ids,
            hsdir_hops,
        })
    }

    /// Relays on the ring.
    pub fn n_hsdirs(&self) -> usize {
        self.hsdir_ids.len()
    }

    /// The HSDirs responsible for `blinded` in `period` on ring `kind`
    /// (in ring order; empty if there are no HSDirs).
    pub fn responsible(&self, kind: RingKind, blinded: &[u8; 32], period: u64) -> Vec<HopTarget> {
        let Ok(ring) = HashRing::build(
            &self.hsdir_ids,
            self.plan.spec(kind),
            self.schedule.period_length_minutes(),
        ) else {
            return Vec::new();
        };
        let spread = match kind {
            RingKind::Fetch => self.params.spread_fetch,
            RingKind::StoreFirst | RingKind::StoreSecond => self.params.spread_store,
        };
        ring.responsible(blinded, period, self.params.n_replicas, spread)
            .into_iter()
            .filter_map(|i| self.hsdir_hops.get(i).cloned())
            .collect()
    }

    /// A relay of the consensus by RSA identity.
    pub fn relay(&self, rsa_id: &[u8; 20]) -> Option<&Relay> {
        self.nd.relay_by_rsa_id(rsa_id)
    }
}

/// How to reach a relay named by link specifiers and an ntor key (an
/// introduction point in a descriptor, a rendezvous point in INTRODUCE2).
/// Needs an IPv4 address and the RSA identity; uses ntor-v3 if the
/// consensus says the relay speaks it.
pub fn hop_from_link_specs(
    specs: &[LinkSpec],
    ntor_key: &[u8; 32],
    nd: Option<&NetDir>,
) -> Option<HopTarget> {
    let mut addr = None;
    let mut rsa = None;
    let mut ed = None;
    for s in specs {
        match s {
            LinkSpec::Ipv4(a) => addr = addr.or(Some(SocketAddr::V4(*a))),
            LinkSpec::LegacyId(id) => rsa = rsa.or(Some(*id)),
            LinkSpec::Ed25519Id(id) => ed = ed.or(Some(*id)),
            LinkSpec::Ipv6(_) | LinkSpec::Unknown(..) => {}
        }
    }
    let (or_addr, rsa_id) = (addr?, rsa?);
    let known = nd.and_then(|nd| nd.relay_by_rsa_id(&rsa_id));
    Some(HopTarget {
        nickname: known
            .map(|r| r.nickname.clone())
            .unwrap_or_else(|| format!("${}", hex::encode_upper(rsa_id))),
        rsa_id,
        ed_id: ed,
        or_addr,
        ntor_key: *ntor_key,
        ntor_v3: ed.is_some() && known.is_some_and(|r| r.protocols.supports("Relay", 4)),
        // Onion-service circuits carry no exit streams and negotiate no
        // congestion control with their last relay.
        optimistic_data: false,
        flowctrl_cc: false,
        quic_port: None,
        datagram: false,
        params: None,
    })
}

/// A circuit for onion-service use: three hops of ours then `target`, or
/// (no target) three hops whose last satisfies `last_ok`. A pre-built
/// internal circuit is used when one fits ([`super::pool`]: extended by
/// one hop to `target`, or taken as it is); otherwise one is built,
/// trying [`BUILD_ATTEMPTS`] paths. A failure at the target itself ends
/// the attempts at once. Never pooled for reuse: the circuit serves this
/// one purpose. Each call keeps the pool filled. `spare` (with no target):
/// a pooled circuit that can be extended to that hop is taken only when
/// no other fits, because the caller extends one to it next (a client's
/// rendezvous circuit and its introduction circuit are taken together).
pub async fn build_circuit(
    dir: &Arc<DirMgr>,
    circmgr: &CircMgr,
    target: Option<&HopTarget>,
    spare: Option<&HopTarget>,
    last_ok: &(dyn Fn(&Relay) -> bool + Sync),
) -> Result<Circuit, BuildError> {
    let pool = circmgr.hs_pool();
    pool.note_use(Instant::now());
    // A pool short of its target (a client's first onion use) starts
    // filling now, not after this build: the circuits that come next
    // (introduction, rendezvous) then find pre-built ones.
    refill_pool(dir, circmgr);
    let res = from_pool(dir, circmgr, target, spare, last_ok).await;
    let res = match res {
        Some(r) => r,
        None => build_fresh(dir, circmgr, target, last_ok).await,
    };
    refill_pool(dir, circmgr);
    res
}

/// A pooled circuit that fits, extended to `target` if there is one;
/// `None` when none fits or the extension failed before the target.
async fn from_pool(
    dir: &Arc<DirMgr>,
    circmgr: &CircMgr,
    target: Option<&HopTarget>,
    spare: Option<&HopTarget>,
    last_ok: &(dyn Fn(&Relay) -> bool + Sync),
) -> Option<Result<Circuit, BuildError>> {
    let nd = dir.netdir()?;
    let pool = circmgr.hs_pool();
    let dead = |c: &Circuit| c.is_closed();
    match target {
        None => {
            let fits = |c: &Circuit| {
                c.path().last().is_some_and(|h| {
                    nd.relay_by_rsa_id(&h.rsa_id)
                        .is_some_and(|r| is_rend_point(r) && last_ok(r))
                })
            };
            let spared = |c: &Circuit| spare.is_some_and(|t| extendable_to(&nd, t)(c));
            let c = pool.take_sparing(Instant::now(), dead, fits, spared)?;
            pool.counters.taken.fetch_add(1, Ordering::Relaxed);
            Some(Ok(c))
        }
        Some(t) => {
            let Some(c) = pool.take(Instant::now(), dead, extendable_to(&nd, t)) else {
                debug!(
                    "no pre-built circuit can be extended to {} ({} ready)",
                    t.nickname,
                    pool.ready()
                );
                return None;
            };
            let n = c.path().len();
            let limit = circmgr.build_times_estimator().timeouts(n + 1).0;
            match extend_circuit(c, t.clone(), limit).await {
                Ok(c) => {
                    pool.counters.extended.fetch_add(1, Ordering::Relaxed);
                    Some(Ok(c))
                }
                Err(e) => {
                    pool.counters.extend_failed.fetch_add(1, Ordering::Relaxed);
                    debug!("extending a pre-built circuit to {}: {e}", t.nickname);
                    // The target refused: as for a fresh build, give up;
                    // anything else (timeout, a pooled hop failed): build.
                    matches!(&e, BuildError::Hop { hop, .. } if *hop == n).then_some(Err(e))
                }
            }
        }
    }
}

/// Whether a pooled circuit can be extended to `t`: none of its hops is
/// `t` or in its family (as for a fresh path).
fn extendable_to<'a>(nd: &'a NetDir, t: &'a HopTarget) -> impl Fn(&Circuit) -> bool + 'a {
    let t_relay = nd.relay_by_rsa_id(&t.rsa_id);
    move |c: &Circuit| {
        c.path().iter().all(|h| {
            h.rsa_id != t.rsa_id
                && match (t_relay, nd.relay_by_rsa_id(&h.rsa_id)) {
                    (Some(tr), Some(hr)) => !tr.in_same_family(hr),
                    (None, _) => true,
                    (Some(_), None) => false,
                }
        })
    }
}

/// Whether a pre-built circuit is ready that can be extended to `t` (an
/// introduction point reached that way costs one extension instead of a
/// four-hop build).
pub fn pool_reaches(circmgr: &CircMgr, nd: &NetDir, t: &HopTarget) -> bool {
    circmgr.hs_pool().any(
        Instant::now(),
        |c: &Circuit| c.is_closed(),
        extendable_to(nd, t),
    )
}

/// Start the builds that keep the pool at its target (while onion
/// services are in use).
fn refill_pool(dir: &Arc<DirMgr>, circmgr: &CircMgr) {
    let n = circmgr.hs_pool().builds_wanted(Instant::now());
    for _ in 0..n {
        let (dir, circmgr) = (dir.clone(), circmgr.clone());
        tokio::spawn(async move {
            let pool = circmgr.hs_pool();
            match build_fresh(&dir, &circmgr, None, &is_rend_point).await {
                Ok(c) => pool.built(Instant::now(), c),
                Err(e) => {
                    debug!("pre-building an onion-service circuit: {e}");
                    pool.build_failed();
                }
            }
        });
    }
}

async fn build_fresh(
    dir: &DirMgr,
    circmgr: &CircMgr,
    target: Option<&HopTarget>,
    last_ok: &(dyn Fn(&Relay) -> bool + Sync),
) -> Result<Circuit, BuildError> {
    let mut last = BuildError::EmptyPath;
    for _ in 0..BUILD_ATTEMPTS {
        let mut avoid = HashSet::new();
        let path = match target {
            Some(t) => {
                avoid.insert(t.rsa_id);
                let nd = dir.netdir();
                let t_relay = nd.as_ref().and_then(|nd| nd.relay_by_rsa_id(&t.rsa_id));
                let ok = |r: &Relay| {
                    r.rsa_id != t.rsa_id && t_relay.is_none_or(|tr| !tr.in_same_family(r))
                };
                dir.internal_path(&avoid, &ok).map(|mut p| {
                    p.push(t.clone());
                    p
                })
            }
            None => dir.internal_path(&avoid, last_ok),
        };
        let path = path.map_err(|e| BuildError::Hop {
            hop: 0,
            relay: "-".into(),
            err: format!("no path: {e}"),
        })?;
        let n = path.len();
        match circmgr.build_internal_path(path).await {
            Ok(c) => return Ok(c),
            Err(e) => {
                let at_target =
                    target.is_some() && matches!(&e, BuildError::Hop { hop, .. } if hop + 1 == n);
                last = e;
                if at_target {
                    break;
                }
            }
        }
    }
    Err(last)
}

/// A directory request to an HSDir over `BEGIN_DIR` on a circuit of its
/// own; returns the HTTP status and body (at most `max_body` bytes).
/// `purpose` is what the control port shows for the circuit
/// (HS_CLIENT_HSDIR or HS_SERVICE_HSDIR, with the service's address
/// without `.onion` as REND_QUERY when known).
pub async fn hsdir_request(
    dir: &Arc<DirMgr>,
    circmgr: &CircMgr,
    hsdir: &HopTarget,
    request: &[u8],
    max_body: usize,
    purpose: (&'static str, Option<&str>),
) -> Result<(u16, Vec<u8>), String> {
    let fut = async {
        // A fetch may use a pre-built circuit; uploads (large, not
        // waited for, one per responsible HSDir at once) build their own
        // so they do not drain the circuits a rendezvous needs.
        let small = request.len() <= OPTIMISTIC_DIR_REQUEST_MAX;
        let circ = if small {
            build_circuit(dir, circmgr, Some(hsdir), None, &|_| true).await
        } else {
            build_fresh(dir, circmgr, Some(hsdir), &|_| true).await
        }
        .map_err(|e| e.to_string())?;
        circ.set_control_purpose(purpose.0, None, purpose.1);
        // A small request (a descriptor fetch) travels right behind
        // BEGIN_DIR instead of a round trip later: a relay opens a
        // directory stream as soon as BEGIN_DIR arrives (tor answers
        // CONNECTED at once and reads what follows), so the data finds it
        // open. Uploads (up to 50 KB) wait for CONNECTED.
        let mut s = circ
            .begin_stream(StreamRequest::BeginDir)
            .await
            .map_err(|e| e.to_string())?;
        let optimistic = small;
        if optimistic {
            s.write_all(request).await.map_err(|e| e.to_string())?;
        }
        s.first_event(HSDIR_REQUEST_TIMEOUT)
            .await
            .map_err(|e| e.to_string())?;
        if !optimistic {
            s.write_all(request).await.map_err(|e| e.to_string())?;
        }
        let raw = s
            .read_to_end(
                max_body + onionmix_http::MAX_HEAD_LEN,
                HSDIR_REQUEST_TIMEOUT,
            )
            .await
            .map_err(|e| e.to_string())?;
        let resp =
            onionmix_http::parse_response(&raw, &onionmix_http::Limits::DEFAULT, max_body, false)
                .map_err(|e| e.to_string())?;
        Ok::<_, String>((resp.head.status, resp.body))
    };
    tokio::time::timeout(HSDIR_REQUEST_TIMEOUT, fut)
        .await
        .map_err(|_| "HSDir request timed out".to_string())?
}

/// Largest HSDir request sent before CONNECTED (four cells).
const OPTIMISTIC_DIR_REQUEST_MAX: usize = 4 * onionmix_cell::RELAY_DATA_LEN;

/// Why waiting on an onion-service circuit ended.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HsCircError {
    /// The circuit closed.
    #[error("circuit closed")]
    Closed,
    /// Nothing came in time.
    #[error("timed out")]
    Timeout,
    /// The reactor refused a command.
    #[error("{0}")]
    Reactor(#[from] ReactorError),
}

/// A circuit used for onion-service messages.
#[derive(Debug)]
pub struct HsCirc {
    /// The circuit (destroyed when the last reference goes).
    pub circ: Arc<Circuit>,
    events: mpsc::Receiver<HsEvent>,
}

impl HsCirc {
    /// Start receiving `circ`'s onion-service messages.
    pub async fn attach(circ: Circuit) -> Result<Self, HsCircError> {
        let (tx, rx) = mpsc::channel(HS_EVENT_QUEUE);
        circ.chan
            .send(ChanCommand::Hs(HsCommand::Listen {
                circ_id: circ.circ_id,
                events: tx,
            }))
            .await?;
        Ok(Self {
            circ: Arc::new(circ),
            events: rx,
        })
    }

    /// Send an onion-service message to the last hop; with `then_add_hop`,
    /// add the virtual hop right after (and accept streams from it if the
    /// flag is set).
    pub async fn send(
        &self,
        cmd: RelayCmd,
        data: Vec<u8>,
        then_add_hop: Option<VirtualHop>,
    ) -> Result<(), HsCircError> {
        let circ_id = self.circ.circ_id;
        self.circ
            .chan
            .request(|reply| {
                ChanCommand::Hs(HsCommand::Send {
                    circ_id,
                    cmd,
                    data,
                    then_add_hop,
                    reply,
                })
            })
            .await?;
        Ok(())
    }

    /// Add the virtual hop (the client, after RENDEZVOUS2), with
    /// congestion control when it was requested in INTRODUCE1.
    pub async fn add_hop(
        &self,
        layer: Box<dyn ClientLayer>,
        cc_sendme_inc: Option<u8>,
    ) -> Result<(), HsCircError> {
        self.circ
            .chan
            .send(ChanCommand::Hs(HsCommand::AddVirtualHop {
                circ_id: self.circ.circ_id,
                hop: VirtualHop {
                    layer,
                    accept_incoming: false,
                    cc_sendme_inc,
                },
            }))
            .await?;
        Ok(())
    }

    /// The next event (None: the circuit closed).
    pub async fn next_event(&mut self) -> Option<HsEvent> {
        self.events.recv().await
    }

    /// Wait up to `limit` for a message with command `want` from the last
    /// hop (other messages are ignored, as tor ignores unexpected ones).
    pub async fn expect(
        &mut self,
        want: RelayCmd,
        limit: Duration,
    ) -> Result<Vec<u8>, HsCircError> {
        let fut = async {
            loop {
                match self.events.recv().await {
                    Some(HsEvent::Msg { cmd, data, .. }) if cmd == want => return Ok(data),
                    Some(_) => continue,
                    None => return Err(HsCircError::Closed),
                }
            }
        };
        tokio::time::timeout(limit, fut)
            .await
            .map_err(|_| HsCircError::Timeout)?
    }
}
