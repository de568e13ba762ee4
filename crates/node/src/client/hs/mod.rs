//! The onion-service client (rend-spec-v3 §2-§4): `.onion` CONNECTs from
//! the SOCKS port end here, never at an exit or a resolver.
//!
//! [`HsClient::connect`] reuses a joined rendezvous circuit to the service
//! (per SOCKS isolation key, until it is too dirty, as tor does) or makes
//! one: the sans-IO [`ConnectPlan`] says whether to fetch the descriptor
//! from the responsible HSDirs (`BEGIN_DIR` on circuits of their own, both
//! layers decrypted, with this service's client-authorization key if the
//! `client_onion_auth_dir` has one) or to introduce through one of its
//! introduction points: a rendezvous circuit with ESTABLISH_RENDEZVOUS
//! and an introduction circuit are built side by side, INTRODUCE1 (with a
//! PoW solution when the descriptor asks) goes out once the rendezvous
//! point is ready, INTRODUCE_ACK and RENDEZVOUS2 are awaited with time
//! limits, and hs-ntor's keys become the virtual hop. Streams are then
//! BEGINs with an empty address to the virtual port.
//!
//! Circuits built here are never pooled with the exit circuits and never
//! carry anything else.

mod control_fetch;
mod events;
pub mod net;
pub mod pool;
mod rend;
pub mod socks;

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::OsRng;
use tracing::{debug, warn};

use onionmix_cell::relay::{Begin, TargetHost};
use onionmix_hs::client::cache::{
    CachedDesc, DescCache, HSDIR_REQUERY_PERIOD, HSDIR_REQUERY_PERIOD_TESTING, HsDirRequests,
    IntroStateCache,
};
use onionmix_hs::client::{ConnectPlan, FetchFailure, FetchRound, Step};
use onionmix_hs::desc::{DescError, IntroPointInfo};
use onionmix_hs::ring::RingKind;
use onionmix_hs::{HsClientError, OnionAddress};

use super::circmgr::{CircMgr, IsolationKey};
use super::circuit::{Circuit, HopTarget};
use super::dir::DirMgr;
use super::stream::{Stream, StreamError};
use crate::reactor::{StreamEvent, StreamRequest};
use net::{HsNet, hsdir_request};
use rend::{EarlyRend, RendSlot};

/// Wait for RENDEZVOUS_ESTABLISHED.
pub const REND_ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(30);
/// Wait for INTRODUCE_ACK.
pub const INTRO_ACK_TIMEOUT: Duration = Duration::from_secs(30);
/// Wait for RENDEZVOUS2 after the introduction was acknowledged (tor's
/// `MAX_REND_TIMEOUT`).
pub const RENDEZVOUS2_TIMEOUT: Duration = Duration::from_secs(30);
/// Most joined rendezvous circuits (and connect locks) kept.
pub const MAX_REND_CIRCUITS: usize = 1024;
/// The most PoW effort the client spends (tor's `CLIENT_MAX_POW_EFFORT`).
pub const MAX_POW_EFFORT: u32 = 10_000;
/// Most client-authorization keys loaded.
pub const MAX_AUTH_KEYS: usize = 4096;

/// Why a `.onion` CONNECT failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum OnionConnectError {
    /// Reaching the service failed (its prop 304 code says how).
    #[error("{0}")]
    Hs(#[from] HsClientError),
    /// The service refused or failed the stream.
    #[error("{0}")]
    Stream(#[from] StreamError),
}

/// Counters (in `status.json`, for the access workload and tests).
#[derive(Debug, Default)]
pub struct HsStats {
    /// Descriptor fetches started (one per [`Step::Fetch`]).
    pub desc_fetches: AtomicU64,
    /// Connections that found the descriptor cached.
    pub desc_cache_hits: AtomicU64,
    /// Introductions attempted.
    pub intro_attempts: AtomicU64,
    /// PoW puzzles solved for INTRODUCE1.
    pub pow_solved: AtomicU64,
    /// Rendezvous circuits joined.
    pub rend_joined: AtomicU64,
    /// Of those, circuits running congestion control with the service.
    pub rend_cc: AtomicU64,
    /// Streams opened on an existing rendezvous circuit.
    pub rend_reused: AtomicU64,
    /// Successful connections.
    pub connects_ok: AtomicU64,
    /// Failed connections.
    pub connects_failed: AtomicU64,
}

impl HsStats {
    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// As JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "desc_fetches": g(&self.desc_fetches),
            "desc_cache_hits": g(&self.desc_cache_hits),
            "intro_attempts": g(&self.intro_attempts),
            "pow_solved": g(&self.pow_solved),
            "rend_joined": g(&self.rend_joined),
            "rend_cc": g(&self.rend_cc),
            "rend_reused": g(&self.rend_reused),
            "connects_ok": g(&self.connects_ok),
            "connects_failed": g(&self.connects_failed),
        })
    }
}

/// Settings of the onion-service client.
#[derive(Debug, Clone)]
pub struct HsClientConfig {
    /// Time for the whole connection (descriptor, introduction,
    /// rendezvous, stream).
    pub connect_timeout: Duration,
    /// Time for CONNECTED after BEGIN.
    pub stream_timeout: Duration,
    /// Stop opening streams on a rendezvous circuit this long after its
    /// first use.
    pub max_dirtiness: Duration,
    /// Lowest PoW effort when a descriptor offers PoW (0: its suggestion).
    pub pow_min_effort: u32,
}

type RendKey = ([u8; 32], IsolationKey);

struct Inner {
    dir: Arc<DirMgr>,
    circmgr: CircMgr,
    cfg: HsClientConfig,
    /// Client-authorization keys by service identity key (from
    /// `client_onion_auth_dir`, and ONION_CLIENT_AUTH_ADD).
    auth: Mutex<HashMap<[u8; 32], ClientAuthKey>>,
    descs: Mutex<DescCache>,
    intro_state: Mutex<IntroStateCache>,
    hsdir_reqs: Mutex<HsDirRequests>,
    joined: Mutex<HashMap<RendKey, Arc<Circuit>>>,
    locks: Mutex<HashMap<RendKey, Arc<tokio::sync::Mutex<()>>>>,
    stats: HsStats,
    /// Where HS_DESC events of descriptor fetches go.
    hub: std::sync::OnceLock<Arc<crate::client::control::hub::ControlHub>>,
}

/// A client-authorization key the client holds for one service.
#[derive(Clone)]
pub struct ClientAuthKey {
    /// The x25519 secret.
    pub secret: zeroize::Zeroizing<[u8; 32]>,
    /// From the auth directory or stored there (`Flags=Permanent`).
    pub permanent: bool,
    /// ONION_CLIENT_AUTH_ADD's `ClientName`.
    pub name: Option<String>,
}

/// The onion-service client.
#[derive(Clone)]
pub struct HsClient {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for HsClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HsClient").finish()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Read the client-authorization keys (`<dir>/*.auth_private`, tor's
/// `ClientOnionAuthDir` format). Unreadable files are skipped with a
/// warning naming the file, never the key.
pub fn load_auth_dir(dir: &Path) -> HashMap<[u8; 32], [u8; 32]> {
    let mut out = HashMap::new();
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) => {
            warn!("cannot read client_onion_auth_dir {}: {e}", dir.display());
            return out;
        }
    };
    for ent in entries.flatten() {
        let path = ent.path();
        if path.extension().and_then(|e| e.to_str()) != Some("auth_private") {
            continue;
        }
        let text = match std::fs::read_to_string(&path) {
            Ok(t) if t.len() <= 4096 => t,
            _ => {
                warn!("skipping unreadable client auth file {}", path.display());
                continue;
            }
        };
        match onionmix_hs::auth::parse_client_auth(text.trim()) {
            Ok((addr, key)) if out.len() < MAX_AUTH_KEYS => {
                out.insert(*addr.key(), key);
            }
            Ok(_) => warn!("too many client auth files; ignoring {}", path.display()),
            Err(e) => warn!("skipping client auth file {}: {e}", path.display()),
        }
    }
    out
}

impl HsClient {
    /// A client over `dir` and `circmgr` with client-authorization keys
    /// `auth` (service identity key -> x25519 secret).
    pub fn new(
        dir: Arc<DirMgr>,
        circmgr: CircMgr,
        cfg: HsClientConfig,
        auth: HashMap<[u8; 32], [u8; 32]>,
    ) -> Self {
        let requery = if dir.testing_network() {
            HSDIR_REQUERY_PERIOD_TESTING
        } else {
            HSDIR_REQUERY_PERIOD
        };
        HsClient {
            inner: Arc::new(Inner {
                dir,
                circmgr,
                cfg,
                auth: Mutex::new(
                    auth.into_iter()
                        .map(|(k, secret)| {
                            (
                                k,
                                ClientAuthKey {
                                    secret: zeroize::Zeroizing::new(secret),
                                    permanent: true,
                                    name: None,
                                },
                            )
                        })
                        .collect(),
                ),
                descs: Mutex::new(DescCache::new()),
                intro_state: Mutex::new(IntroStateCache::new()),
                hsdir_reqs: Mutex::new(HsDirRequests::new(requery)),
                joined: Mutex::new(HashMap::new()),
                locks: Mutex::new(HashMap::new()),
                stats: HsStats::default(),
                hub: std::sync::OnceLock::new(),
            }),
        }
    }

    /// One descriptor request to `hsdir`, reported as tor does
    /// (REQUESTED, then FAILED when it gives nothing): the body of a 200
    /// answer, or why there is none.
    async fn ask_hsdir(
        &self,
        hsdir: &HopTarget,
        request: &[u8],
        ev: &events::FetchEvents<'_>,
    ) -> Result<Vec<u8>, FetchFailure> {
        ev.requested(hsdir);
        let resp = hsdir_request(
            &self.inner.dir,
            &self.inner.circmgr,
            hsdir,
            request,
            onionmix_hs::desc::MAX_DESC_LEN,
            ("HS_CLIENT_HSDIR", Some(ev.address())),
        )
        .await;
        match resp {
            Ok((200, body)) => Ok(body),
            Ok((status, _)) => {
                debug!("HSDir {} answered {status}", hsdir.nickname);
                ev.failed(Some(hsdir), events::status_reason(status));
                Err(FetchFailure::NotFound)
            }
            Err(e) => {
                debug!("HSDir {} unreachable: {e}", hsdir.nickname);
                // tor reports nothing here; UNEXPECTED tells a controller
                // the request ended.
                ev.failed(Some(hsdir), "UNEXPECTED");
                Err(FetchFailure::Unreachable)
            }
        }
    }

    /// Forget what this client learned about services (NEWNYM, as tor's
    /// `hs_client_purge_state`): cached descriptors, introduction-point
    /// failures, which HSDirs were asked, and joined rendezvous circuits.
    /// Client-authorization keys stay.
    pub fn purge_state(&self) {
        let requery = if self.inner.dir.testing_network() {
            HSDIR_REQUERY_PERIOD_TESTING
        } else {
            HSDIR_REQUERY_PERIOD
        };
        *lock(&self.inner.descs) = DescCache::new();
        *lock(&self.inner.intro_state) = IntroStateCache::new();
        *lock(&self.inner.hsdir_reqs) = HsDirRequests::new(requery);
        lock(&self.inner.joined).clear();
    }

    /// Report descriptor fetches to the control port (`HS_DESC`); the
    /// first hub set stays.
    pub fn set_control_hub(&self, hub: Arc<crate::client::control::hub::ControlHub>) {
        let _ = self.inner.hub.set(hub);
    }

    /// Use `key` for the service with identity key `service` from now on
    /// (ONION_CLIENT_AUTH_ADD); whether it replaced a key, or None when the
    /// table is full.
    pub fn add_client_auth(&self, service: [u8; 32], key: ClientAuthKey) -> Option<bool> {
        let mut m = lock(&self.inner.auth);
        if !m.contains_key(&service) && m.len() >= MAX_AUTH_KEYS {
            return None;
        }
        Some(m.insert(service, key).is_some())
    }

    /// Forget the key of `service`; the key it had.
    pub fn remove_client_auth(&self, service: &[u8; 32]) -> Option<ClientAuthKey> {
        lock(&self.inner.auth).remove(service)
    }

    /// Every client-authorization key held, by service identity key.
    pub fn client_auth_keys(&self) -> Vec<([u8; 32], ClientAuthKey)> {
        lock(&self.inner.auth)
            .iter()
            .map(|(k, v)| (*k, v.clone()))
            .collect()
    }

    /// Counters.
    pub fn stats(&self) -> &HsStats {
        &self.inner.stats
    }

    /// Open a stream to `port` of the service at `addr` (isolated by
    /// `key`), within the connect timeout. `early` holds bytes the
    /// application sent before the stream opened (a pipelined SOCKS
    /// request): they go right behind BEGIN, before CONNECTED (a service
    /// takes DATA while it connects to its target; tor's exit and
    /// service code both do), and again on a retried BEGIN.
    pub async fn connect(
        &self,
        addr: &OnionAddress,
        port: u16,
        key: &IsolationKey,
        early: &[u8],
    ) -> Result<Stream, OnionConnectError> {
        self.connect_reporting(addr, port, key, early, &mut |_, _| {})
            .await
    }

    /// [`Self::connect`], calling `on_begin` with the rendezvous circuit
    /// each time a BEGIN is sent on one (the control port's SENTCONNECT),
    /// and with the end reason of the attempt before when this BEGIN is a
    /// retry on a new circuit (the control port's DETACHED).
    pub async fn connect_reporting(
        &self,
        addr: &OnionAddress,
        port: u16,
        key: &IsolationKey,
        early: &[u8],
        on_begin: &mut (dyn FnMut(&Arc<Circuit>, Option<u8>) + Send),
    ) -> Result<Stream, OnionConnectError> {
        let res = self.connect_inner(addr, port, key, early, on_begin).await;
        let st = &self.inner.stats;
        HsStats::bump(if res.is_ok() {
            &st.connects_ok
        } else {
            &st.connects_failed
        });
        res
    }

    async fn connect_inner(
        &self,
        addr: &OnionAddress,
        port: u16,
        key: &IsolationKey,
        early: &[u8],
        on_begin: &mut (dyn FnMut(&Arc<Circuit>, Option<u8>) + Send),
    ) -> Result<Stream, OnionConnectError> {
        let rk: RendKey = (*addr.key(), key.clone());
        let gate = {
            let mut locks = lock(&self.inner.locks);
            if !locks.contains_key(&rk) && locks.len() >= MAX_REND_CIRCUITS {
                locks.retain(|_, l| Arc::strong_count(l) > 1);
            }
            locks.entry(rk.clone()).or_default().clone()
        };
        let deadline = tokio::time::Instant::now() + self.inner.cfg.connect_timeout;
        let _g = tokio::time::timeout_at(deadline, gate.lock())
            .await
            .map_err(|_| HsClientError::IntroTimedOut)?;
        // A joined circuit to this service for this isolation key?
        let existing = lock(&self.inner.joined).get(&rk).cloned();
        let mut retry_after = None;
        if let Some(c) = existing {
            if c.is_usable(self.inner.cfg.max_dirtiness) {
                on_begin(&c, None);
                match self.begin(&c, port, early).await {
                    Ok(s) => {
                        HsStats::bump(&self.inner.stats.rend_reused);
                        return Ok(s);
                    }
                    // The service answered: its answer stands.
                    Err(e @ StreamError::End(_)) => return Err(e.into()),
                    Err(e) => {
                        debug!("rendezvous circuit failed a stream ({e}); making a new one");
                        retry_after = Some(e.end_reason());
                    }
                }
            }
            lock(&self.inner.joined).remove(&rk);
        }
        let circ = match tokio::time::timeout_at(deadline, self.rendezvous(addr)).await {
            Ok(r) => r?,
            Err(_) => return Err(HsClientError::IntroTimedOut.into()),
        };
        {
            let mut j = lock(&self.inner.joined);
            if j.len() >= MAX_REND_CIRCUITS {
                j.retain(|_, c| !c.is_closed());
            }
            if j.len() < MAX_REND_CIRCUITS {
                j.insert(rk, circ.clone());
            }
        }
        on_begin(&circ, retry_after);
        Ok(self.begin(&circ, port, early).await?)
    }

    async fn begin(&self, circ: &Circuit, port: u16, early: &[u8]) -> Result<Stream, StreamError> {
        // rend-spec-v3 §4.3 / tor: the address is empty; the port is the
        // virtual port.
        let begin = Begin {
            host: TargetHost::Hostname(String::new()),
            port,
            flags: 0,
        };
        let mut s = circ.begin_stream(StreamRequest::Begin(begin)).await?;
        if !early.is_empty() {
            // Fails only when the stream already ended: its END is read
            // next.
            let _ = s.write_all(early).await;
        }
        match s.first_event(self.inner.cfg.stream_timeout).await? {
            StreamEvent::Connected(_) => Ok(s),
            _ => Err(StreamError::Unexpected),
        }
    }

    /// Make a joined rendezvous circuit to `addr`.
    async fn rendezvous(&self, addr: &OnionAddress) -> Result<Arc<Circuit>, HsClientError> {
        let svc = *addr.key();
        let mut plan = ConnectPlan::new(svc);
        let mut rend = RendSlot::default();
        let mut first = true;
        loop {
            let net = HsNet::current(&self.inner.dir).map_err(|e| {
                debug!("onion service: {e}");
                HsClientError::DescriptorNotFound
            })?;
            let period = net.plan.fetch.period;
            let (blinded, subcred) = onionmix_hs::keys::blinded_public(addr, &net.schedule, period)
                .map_err(|e| {
                    debug!("blinding: {e}");
                    HsClientError::DescriptorNotFound
                })?;
            let now = crate::clock::now_unix();
            let cached = lock(&self.inner.descs).get(&svc, period, now).cloned();
            if first && cached.is_some() {
                HsStats::bump(&self.inner.stats.desc_cache_hits);
            }
            first = false;
            // Among usable introduction points, those a pre-built circuit
            // can be extended to come first (on a small network every
            // pre-built circuit may pass through a point or its family).
            let reachable = |ip: &IntroPointInfo| {
                net::hop_from_link_specs(&ip.link_specifiers, &ip.onion_key, Some(&net.nd))
                    .is_some_and(|hop| net::pool_reaches(&self.inner.circmgr, &net.nd, &hop))
            };
            let step = {
                let st = lock(&self.inner.intro_state);
                plan.next_preferring(
                    cached.as_ref().map(|d| &d.content),
                    &st,
                    now,
                    &mut OsRng,
                    &reachable,
                )
            };
            match step {
                Step::Fetch => {
                    // The rendezvous circuit does not depend on the
                    // descriptor: while one is fetched, the rendezvous
                    // point is made ready alongside.
                    if rend.ready.is_none() && rend.early.is_none() {
                        let me = self.clone();
                        let label = addr.label();
                        rend.early = Some(EarlyRend(tokio::spawn(async move {
                            me.establish_rend(None, &label).await
                        })));
                    }
                    HsStats::bump(&self.inner.stats.desc_fetches);
                    lock(&self.inner.descs).remove(&svc);
                    let r = self.fetch(addr, &net, &blinded, &subcred, period).await;
                    plan.fetch_done(r);
                }
                Step::Introduce { index, effort } => {
                    let Some(desc) = cached else {
                        continue;
                    };
                    let Some(ip) = desc.content.intro_points.get(index).cloned() else {
                        continue;
                    };
                    HsStats::bump(&self.inner.stats.intro_attempts);
                    let effort = if desc.content.pow_v1.is_some() {
                        effort.max(self.inner.cfg.pow_min_effort.min(MAX_POW_EFFORT))
                    } else {
                        0
                    };
                    match self
                        .introduce(
                            &net,
                            rend::IntroTarget {
                                addr,
                                desc: &desc,
                                ip: &ip,
                            },
                            effort,
                            &subcred,
                            &mut rend,
                        )
                        .await
                    {
                        Ok(c) => return Ok(c),
                        Err(outcome) => {
                            debug!("introduction failed: {outcome:?}");
                            let mut st = lock(&self.inner.intro_state);
                            plan.intro_failed(
                                &ip.auth_key,
                                outcome,
                                &mut st,
                                crate::clock::now_unix(),
                            );
                        }
                    }
                }
                Step::Fail(e) => return Err(e),
            }
        }
    }

    /// Fetch and decode the descriptor; on success it is in the cache.
    async fn fetch(
        &self,
        addr: &OnionAddress,
        net: &HsNet,
        blinded: &[u8; 32],
        subcred: &[u8; 32],
        period: u64,
    ) -> Result<(), HsClientError> {
        let hsdirs = net.responsible(RingKind::Fetch, blinded, period);
        let ev = events::FetchEvents::new(self.inner.hub.get().map(|h| &**h), addr, blinded, net);
        if hsdirs.is_empty() {
            ev.failed(None, "QUERY_NO_HSDIR");
            return Err(HsClientError::DescriptorNotFound);
        }
        let mut round = self.fetch_round(&hsdirs, blinded).await;
        let path = onionmix_hs::desc::cache::fetch_path(blinded);
        let request = format!("GET {path} HTTP/1.0\r\n\r\n").into_bytes();
        let auth = lock(&self.inner.auth)
            .get(addr.key())
            .map(|k| zeroize::Zeroizing::new(*k.secret));
        let auth = auth.as_deref();
        while let Some(i) = round.next_hsdir() {
            let Some(hsdir) = hsdirs.get(i) else {
                continue;
            };
            lock(&self.inner.hsdir_reqs).note(blinded, &hsdir.rsa_id, crate::clock::now_unix());
            let body = match self.ask_hsdir(hsdir, &request, &ev).await {
                Ok(body) => body,
                Err(failure) => {
                    round.failed(failure);
                    continue;
                }
            };
            let now = crate::clock::now_unix();
            match decode(&body, blinded, subcred, auth, now) {
                Ok((content, lifetime_s)) => {
                    debug!("descriptor fetched from HSDir {}", hsdir.nickname);
                    ev.received(hsdir, &body);
                    let desc = CachedDesc {
                        content,
                        period,
                        blinded: *blinded,
                        expires: now.saturating_add(lifetime_s),
                        stored: now,
                    };
                    lock(&self.inner.descs).insert(*addr.key(), desc, now);
                    return Ok(());
                }
                Err(e @ (DescError::MissingClientAuth | DescError::WrongClientAuth)) => {
                    // tor stores such a descriptor and reports RECEIVED.
                    ev.received(hsdir, &body);
                    lock(&self.inner.hsdir_reqs).purge(blinded);
                    return Err(e.into());
                }
                Err(e) => {
                    debug!("descriptor from HSDir {} unusable: {e}", hsdir.nickname);
                    ev.failed(Some(hsdir), "BAD_DESC");
                    round.failed(FetchFailure::Invalid(e));
                }
            }
        }
        // Nothing usable anywhere: later attempts may ask the same HSDirs.
        lock(&self.inner.hsdir_reqs).purge(blinded);
        Err(round.error())
    }

    /// The HSDirs that may be asked now; on a testing network, if every one
    /// was asked within the (5 s) requery period, wait it out once.
    async fn fetch_round(&self, hsdirs: &[HopTarget], blinded: &[u8; 32]) -> FetchRound {
        for attempt in 0..2 {
            let now = crate::clock::now_unix();
            let round = {
                let reqs = lock(&self.inner.hsdir_reqs);
                FetchRound::new(
                    hsdirs.len(),
                    |i| {
                        hsdirs
                            .get(i)
                            .is_some_and(|h| reqs.may_query(blinded, &h.rsa_id, now))
                    },
                    &mut OsRng,
                )
            };
            let mut probe = round.clone();
            if probe.next_hsdir().is_some() || attempt == 1 || !self.inner.dir.testing_network() {
                return round;
            }
            tokio::time::sleep(Duration::from_secs(HSDIR_REQUERY_PERIOD_TESTING)).await;
        }
        FetchRound::new(0, |_| false, &mut OsRng)
    }
}

/// Decode a fetched descriptor: the content and its lifetime in seconds.
fn decode(
    body: &[u8],
    blinded: &[u8; 32],
    subcred: &[u8; 32],
    auth: Option<&[u8; 32]>,
    now: u64,
) -> Result<(onionmix_hs::desc::DescriptorContent, u64), DescError> {
    let text = std::str::from_utf8(body).map_err(|_| DescError::Malformed("not UTF-8".into()))?;
    let outer = onionmix_hs::desc::hsdir::parse_outer(text, now)?;
    let content = onionmix_hs::desc::client::decode_descriptor(text, blinded, subcred, auth, now)?;
    Ok((content, u64::from(outer.lifetime_min) * 60))
}
