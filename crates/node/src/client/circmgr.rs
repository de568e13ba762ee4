//! Circuit manager: hands out circuits by isolation key and exit port.
//!
//! A request first reuses a circuit its isolation key already owns (until
//! it is `max_dirtiness` old), then takes a clean pre-built circuit
//! (`preemptive`; a clean circuit has never carried a stream, so giving it
//! to a key keeps the isolation rules: once given it is that key's
//! alone), then waits for a pre-built one that is nearly ready, and only
//! then builds one on the request's path. Every build is timed against
//! the learned circuit build timeout (`buildtimes`): one that passes it is
//! given up on (the caller tries another path at once) and keeps building
//! as a measurement circuit until the close timeout.

use std::collections::{HashMap, HashSet, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, oneshot};
use tracing::{debug, warn};

use onionmix_proto::cbt::RECORDED_HOPS;
use onionmix_proto::preempt::PortPredictor;

use super::buildtimes::BuildTimes;
use super::chanmgr::ChanMgr;
use super::circuit::{self, BuildError, Circuit, HopTarget};

mod state;

/// Streams with different isolation keys never share a circuit: tor's
/// default SocksPort isolation (IsolateSOCKSAuth, IsolateClientAddr).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct IsolationKey {
    /// SOCKS username and password, if any.
    pub socks_auth: Option<(Vec<u8>, Vec<u8>)>,
    /// The SOCKS client's address (None: not from a SOCKS port).
    pub client_addr: Option<std::net::IpAddr>,
    /// NEWNYM epoch: streams from before and after a NEWNYM never share.
    pub nym_epoch: u64,
}

/// What a circuit is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// Exit traffic to this port (None: any port, e.g. preemptive).
    Exit(Option<u16>),
    /// UDP streams to this port: an exit that advertises `Datagram=1`.
    Udp(u16),
}

/// Chooses paths: (purpose, relays to avoid) -> hops.
pub type PathPicker =
    Arc<dyn Fn(Purpose, &HashSet<[u8; 20]>) -> Result<Vec<HopTarget>, String> + Send + Sync>;
/// Tells whether an exit (by RSA id) accepts a port.
pub type ExitPolicyCheck = Arc<dyn Fn(&[u8; 20], u16) -> bool + Send + Sync>;
/// Reports a guard's success or failure.
pub type GuardReport = Arc<dyn Fn(&[u8; 20], bool) + Send + Sync>;

/// Most circuits kept in the pool per isolation key.
pub const MAX_CIRCUITS_PER_KEY: usize = 8;
/// Most isolation keys tracked.
pub const MAX_KEYS: usize = 1024;
/// How many paths to try before giving up on a request.
pub const BUILD_ATTEMPTS: usize = 4;
/// How long a relay that failed a build is avoided.
pub const FAILED_RELAY_PENALTY: Duration = Duration::from_secs(60);
/// Build times kept for `status.json`.
pub const MAX_RECENT_BUILD_TIMES: usize = 1000;

/// Settings.
#[derive(Debug, Clone)]
pub struct CircMgrConfig {
    /// Learn the build timeout (tor's `LearnCircuitBuildTimeout`).
    pub learn_build_timeout: bool,
    /// The build timeout when not learning (`CircuitBuildTimeout`).
    pub build_timeout: Duration,
    /// Stop attaching streams this long after first use.
    pub max_dirtiness: Duration,
    /// Keep clean circuits built ahead of need.
    pub preemptive: bool,
    /// Base of the port-prediction lifetime (tor's
    /// `CircuitsAvailableTimeout`; 30 min gives 30-60 min).
    pub prediction_base: Duration,
    /// Where the build-time histogram is kept (None: not persisted).
    pub state_path: Option<PathBuf>,
}

impl Default for CircMgrConfig {
    fn default() -> Self {
        CircMgrConfig {
            learn_build_timeout: true,
            build_timeout: Duration::from_secs(60),
            max_dirtiness: Duration::from_secs(600),
            preemptive: true,
            prediction_base: onionmix_proto::preempt::DEFAULT_PREDICTION_BASE,
            state_path: None,
        }
    }
}

pub(super) struct Pool {
    pub(super) circs: Vec<Arc<Circuit>>,
    pub(super) build_lock: Arc<tokio::sync::Mutex<()>>,
}

/// A clean pre-built circuit.
pub(super) struct CleanCirc {
    pub(super) circ: Arc<Circuit>,
    /// Closed if still unused then.
    pub(super) idle_deadline: Instant,
}

/// A pre-built circuit on its way.
pub(super) struct Pending {
    pub(super) id: u64,
    pub(super) exit: [u8; 20],
}

pub(super) struct State {
    pub(super) pools: HashMap<IsolationKey, Pool>,
    pub(super) clean: Vec<CleanCirc>,
    pub(super) pending: Vec<Pending>,
    pub(super) predictor: PortPredictor,
    /// Clean pre-built conflux sets (their home legs).
    pub(super) conflux_clean: Vec<CleanCirc>,
    /// Conflux sets being built.
    pub(super) conflux_pending: usize,
    /// Set builds that failed in a row, and when to try again.
    pub(super) conflux_backoff: (u32, Option<Instant>),
}

/// Counters (in `status.json`).
#[derive(Debug, Default)]
pub struct CircCounters {
    /// Circuits built, every kind.
    pub built: AtomicU64,
    /// Built because a request found nothing to use.
    pub on_demand: AtomicU64,
    /// Built ahead of need.
    pub preemptive: AtomicU64,
    /// Requests served by a clean pre-built circuit.
    pub clean_taken: AtomicU64,
    /// Requests that waited for a pre-built circuit still building.
    pub waited_for_pending: AtomicU64,
    /// Clean circuits closed unused.
    pub clean_expired: AtomicU64,
}

pub(super) struct Shared {
    pub(super) cfg: CircMgrConfig,
    chanmgr: ChanMgr,
    pub(super) picker: PathPicker,
    pub(super) exit_ok: ExitPolicyCheck,
    pub(super) guard_report: GuardReport,
    pub(super) state: Mutex<State>,
    failed: Mutex<HashMap<[u8; 20], Instant>>,
    recent_times: Mutex<VecDeque<Duration>>,
    pub(super) cbt: BuildTimes,
    pub(super) counters: CircCounters,
    /// Wakes the pre-building task (a clean circuit was taken, a port
    /// was used).
    pub(super) wake: Arc<Notify>,
    /// A pre-built circuit finished (or failed).
    pub(super) clean_done: Notify,
    pub(super) next_id: AtomicU64,
    /// Internal circuits built ahead of need for onion services.
    pub(super) hs_pool: super::hs::pool::Pool<Circuit>,
    /// Conflux: where its paths come from (None: off).
    pub(super) conflux: Mutex<Option<super::conflux::ConfluxHook>>,
    /// Dormant (tor's `SIGNAL DORMANT`): nothing is built ahead of need
    /// and the directory is not refreshed until a stream or `ACTIVE`
    /// wakes the client.
    dormant: std::sync::atomic::AtomicBool,
    /// The last user activity (a new stream, `SIGNAL ACTIVE`, an open
    /// stream seen by the dormancy check): what `DormantClientTimeout`
    /// counts from.
    last_activity: Mutex<Instant>,
}

/// The circuit manager.
#[derive(Clone)]
pub struct CircMgr {
    pub(super) inner: Arc<Shared>,
}

impl std::fmt::Debug for CircMgr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircMgr").finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Waiting,
    TimedOut,
    Done,
}

impl CircMgr {
    /// A manager. Pre-building starts with [`Self::start_preemptive`].
    pub fn new(
        cfg: CircMgrConfig,
        chanmgr: ChanMgr,
        picker: PathPicker,
        exit_ok: ExitPolicyCheck,
        guard_report: GuardReport,
    ) -> Self {
        let cbt = BuildTimes::new(
            cfg.learn_build_timeout,
            cfg.build_timeout,
            cfg.state_path.clone(),
        );
        let predictor =
            PortPredictor::new(Instant::now(), cfg.prediction_base, &mut rand::thread_rng());
        CircMgr {
            inner: Arc::new(Shared {
                cfg,
                chanmgr,
                picker,
                exit_ok,
                guard_report,
                state: Mutex::new(State {
                    pools: HashMap::new(),
                    clean: Vec::new(),
                    pending: Vec::new(),
                    predictor,
                    conflux_clean: Vec::new(),
                    conflux_pending: 0,
                    conflux_backoff: (0, None),
                }),
                failed: Mutex::new(HashMap::new()),
                recent_times: Mutex::new(VecDeque::new()),
                cbt,
                counters: CircCounters::default(),
                wake: Arc::new(Notify::new()),
                clean_done: Notify::new(),
                next_id: AtomicU64::new(1),
                hs_pool: Default::default(),
                conflux: Mutex::new(None),
                dormant: std::sync::atomic::AtomicBool::new(false),
                last_activity: Mutex::new(Instant::now()),
            }),
        }
    }

    pub(super) fn lock_state(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The learned build timeout.
    pub fn build_times_estimator(&self) -> &BuildTimes {
        &self.inner.cbt
    }

    /// Counters.
    pub fn counters(&self) -> &CircCounters {
        &self.inner.counters
    }

    /// Take the consensus parameters (`cbt*`).
    pub fn set_consensus_params(&self, params: &std::collections::BTreeMap<String, i32>) {
        self.inner
            .cbt
            .set_params(onionmix_proto::cbt::CbtParams::from_consensus(|k| {
                params.get(k).copied()
            }));
    }

    pub(super) fn exit_allows(&self, c: &Circuit, purpose: Purpose) -> bool {
        match (purpose, c.path().last()) {
            (Purpose::Exit(Some(p)), Some(exit)) => (self.inner.exit_ok)(&exit.rsa_id, p),
            (Purpose::Exit(None), _) => true,
            (Purpose::Udp(p), Some(exit)) => exit.datagram && (self.inner.exit_ok)(&exit.rsa_id, p),
            _ => false,
        }
    }

    fn find(&self, key: &IsolationKey, purpose: Purpose) -> Option<Arc<Circuit>> {
        let max_dirtiness = self.inner.cfg.max_dirtiness;
        let mut st = self.lock_state();
        let pool = st.pools.get_mut(key)?;
        pool.circs.retain(|c| !c.is_closed());
        pool.circs
            .iter()
            .filter(|c| c.is_usable(max_dirtiness))
            .find(|c| self.exit_allows(c, purpose))
            .cloned()
    }

    /// Give a clean pre-built circuit that can serve `purpose` to `key`.
    fn take_clean(&self, key: &IsolationKey, purpose: Purpose) -> Option<Arc<Circuit>> {
        let mut st = self.lock_state();
        st.clean.retain(|c| !c.circ.is_closed());
        let i = st
            .clean
            .iter()
            .position(|c| !c.circ.is_extending() && self.exit_allows(&c.circ, purpose))?;
        let c = st.clean.swap_remove(i).circ;
        self.give(&mut st, key, c)
    }

    /// Hand a clean circuit (or conflux set) to `key`'s pool; its
    /// replacement gets built.
    pub(super) fn give(
        &self,
        st: &mut std::sync::MutexGuard<'_, State>,
        key: &IsolationKey,
        c: Arc<Circuit>,
    ) -> Option<Arc<Circuit>> {
        if let Some(pool) = st.pools.get_mut(key) {
            pool.circs.retain(|c| !c.is_closed());
            if pool.circs.len() >= MAX_CIRCUITS_PER_KEY {
                pool.circs.remove(0);
            }
            pool.circs.push(c.clone());
        }
        self.inner
            .counters
            .clean_taken
            .fetch_add(1, Ordering::Relaxed);
        // Build its replacement.
        self.inner.wake.notify_one();
        Some(c)
    }

    /// Whether a pre-built circuit that could serve `purpose` is building
    /// (pre-built circuits are for TCP ports: UDP does not wait for them).
    fn pending_could_serve(&self, purpose: Purpose) -> bool {
        let st = self.lock_state();
        st.pending.iter().any(|p| match purpose {
            Purpose::Exit(Some(port)) => (self.inner.exit_ok)(&p.exit, port),
            Purpose::Exit(None) => true,
            Purpose::Udp(_) => false,
        })
    }

    fn note_port(&self, port: Option<u16>) {
        if let Some(p) = port {
            let now = Instant::now();
            self.lock_state()
                .predictor
                .note_used_port(now, p, &mut rand::thread_rng());
            self.inner.wake.notify_one();
        }
    }

    /// A circuit for `key` whose exit accepts `port`: one the key already
    /// uses, a clean pre-built one, or one built now.
    pub async fn get_exit_circuit(
        &self,
        key: &IsolationKey,
        port: Option<u16>,
    ) -> Result<Arc<Circuit>, BuildError> {
        self.note_port(port);
        self.get_circuit(key, Purpose::Exit(port)).await
    }

    /// A circuit for `key` whose exit carries UDP to `port` (advertises
    /// `Datagram=1` and its policy accepts the port).
    pub async fn get_udp_circuit(
        &self,
        key: &IsolationKey,
        port: u16,
    ) -> Result<Arc<Circuit>, BuildError> {
        self.get_circuit(key, Purpose::Udp(port)).await
    }

    async fn get_circuit(
        &self,
        key: &IsolationKey,
        purpose: Purpose,
    ) -> Result<Arc<Circuit>, BuildError> {
        if let Some(c) = self.find(key, purpose) {
            return Ok(c);
        }
        let lock = {
            let mut st = self.lock_state();
            if !st.pools.contains_key(key) && st.pools.len() >= MAX_KEYS {
                st.pools.retain(|_, p| {
                    p.circs.retain(|c| !c.is_closed());
                    !p.circs.is_empty()
                });
            }
            if !st.pools.contains_key(key) && st.pools.len() >= MAX_KEYS {
                return Err(BuildError::Hop {
                    hop: 0,
                    relay: "-".into(),
                    err: format!("more than {MAX_KEYS} isolation keys in use"),
                });
            }
            st.pools
                .entry(key.clone())
                .or_insert_with(|| Pool {
                    circs: Vec::new(),
                    build_lock: Arc::new(tokio::sync::Mutex::new(())),
                })
                .build_lock
                .clone()
        };
        let _g = lock.lock().await;
        if let Some(c) = self.find(key, purpose) {
            return Ok(c);
        }
        // A pre-built conflux set first, as tor prefers them (TCP streams
        // only).
        if let Purpose::Exit(port) = purpose
            && let Some(c) = self.take_conflux(key, port)
        {
            return Ok(c);
        }
        if let Some(c) = self.wait_for_clean(key, purpose).await {
            return Ok(c);
        }
        let c = self.build_with_retries(purpose).await?.into_shared();
        self.inner
            .counters
            .on_demand
            .fetch_add(1, Ordering::Relaxed);
        let mut st = self.lock_state();
        if let Some(pool) = st.pools.get_mut(key) {
            pool.circs.retain(|c| !c.is_closed());
            if pool.circs.len() >= MAX_CIRCUITS_PER_KEY {
                pool.circs.remove(0);
            }
            pool.circs.push(c.clone());
        }
        Ok(c)
    }

    /// A clean circuit now, or after waiting (at most one build timeout)
    /// for a pre-built one still on its way, as tor attaches a stream to
    /// a pending circuit that can carry it.
    async fn wait_for_clean(&self, key: &IsolationKey, purpose: Purpose) -> Option<Arc<Circuit>> {
        let deadline = tokio::time::Instant::now() + self.inner.cbt.timeouts(RECORDED_HOPS).0;
        let mut waited = false;
        loop {
            let notified = self.inner.clean_done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(c) = self.take_clean(key, purpose) {
                if waited {
                    self.inner
                        .counters
                        .waited_for_pending
                        .fetch_add(1, Ordering::Relaxed);
                }
                return Some(c);
            }
            if !self.pending_could_serve(purpose) {
                return None;
            }
            waited = true;
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                return None;
            }
        }
    }

    /// Build a fresh circuit for `purpose`, not pooled, trying up to
    /// [`BUILD_ATTEMPTS`] paths.
    pub async fn build_with_retries(&self, purpose: Purpose) -> Result<Circuit, BuildError> {
        let mut last = None;
        for attempt in 0..BUILD_ATTEMPTS {
            let avoid = self.avoid_set();
            let path = match (self.inner.picker)(purpose, &avoid) {
                Ok(p) => p,
                Err(e) => {
                    last = Some(BuildError::Hop {
                        hop: 0,
                        relay: "-".into(),
                        err: format!("no path: {e}"),
                    });
                    break;
                }
            };
            match self.build_path(path.clone()).await {
                Ok(c) => return Ok(c),
                Err(e) => {
                    debug!("circuit build attempt {} failed: {e}", attempt + 1);
                    self.note_failure(&path, &e);
                    last = Some(e);
                }
            }
        }
        let e = last.unwrap_or(BuildError::EmptyPath);
        warn!("could not build a circuit: {e}");
        Err(e)
    }

    /// Build along an explicit path, waiting at most the learned timeout
    /// for it. A 3-hop build that passes the timeout keeps going in the
    /// background as a measurement circuit (its time is recorded, then it
    /// is closed) and the caller gets [`BuildError::Slow`] at once.
    pub async fn build_path(&self, path: Vec<HopTarget>) -> Result<Circuit, BuildError> {
        self.build_path_as(path, false).await
    }

    /// [`Self::build_path`] for an internal circuit (onion services: its
    /// last hop is no exit), announced with tor's IS_INTERNAL and
    /// NEED_UPTIME build flags.
    pub async fn build_internal_path(&self, path: Vec<HopTarget>) -> Result<Circuit, BuildError> {
        self.build_path_as(path, true).await
    }

    async fn build_path_as(
        &self,
        path: Vec<HopTarget>,
        internal: bool,
    ) -> Result<Circuit, BuildError> {
        let hops = path.len();
        let counted = hops >= RECORDED_HOPS;
        let (timeout, close) = self.inner.cbt.timeouts(hops);
        let limit = if counted { close } else { timeout };
        let started = Instant::now();
        self.inner.cbt.launched(started);
        let progress = Arc::new(AtomicUsize::new(0));
        let outcome = Arc::new(Mutex::new(Outcome::Waiting));
        let (tx, mut rx) = oneshot::channel();
        let me = self.clone();
        let (p2, o2) = (progress.clone(), outcome.clone());
        let guard = path.first().map(|g| g.rsa_id);
        tokio::spawn(async move {
            let res = me.build_now(path, limit, &p2, internal).await;
            let timed_out = {
                let mut o = o2.lock().unwrap_or_else(|e| e.into_inner());
                if *o == Outcome::Waiting {
                    *o = Outcome::Done;
                }
                *o == Outcome::TimedOut
            };
            match &res {
                Ok(c) => {
                    // The timeout counts from launch (channel set-up
                    // included, as tor's); `build_time`, reported in
                    // status.json, from the first CREATE2.
                    me.inner.cbt.completed(hops, started.elapsed(), timed_out);
                    me.record_built(hops, c.build_time);
                    if let (true, Some(g)) = (counted, guard) {
                        (me.inner.guard_report)(&g, true);
                    }
                }
                Err(BuildError::Timeout(_)) if timed_out => me.inner.cbt.abandoned(started),
                Err(_) => {}
            }
            if timed_out {
                // A measurement circuit: done, closed (dropped) here.
                debug!(
                    "measurement circuit finished after its timeout: {:?}",
                    res.as_ref().map(|c| c.build_time)
                );
            } else {
                let _ = tx.send(res);
            }
        });
        match tokio::time::timeout(timeout, &mut rx).await {
            Ok(Ok(res)) => res,
            Ok(Err(_)) => Err(BuildError::Timeout(limit)),
            Err(_) => {
                let done = {
                    let mut o = outcome.lock().unwrap_or_else(|e| e.into_inner());
                    if *o == Outcome::Waiting {
                        *o = Outcome::TimedOut;
                        false
                    } else {
                        true
                    }
                };
                if done {
                    return rx.await.unwrap_or(Err(BuildError::Timeout(limit)));
                }
                let hop = progress.load(Ordering::Relaxed);
                if counted {
                    self.inner.cbt.timed_out(hop >= 1);
                }
                debug!("circuit build passed its {timeout:?} timeout at hop {hop}");
                Err(BuildError::Slow { hop, timeout })
            }
        }
    }

    /// Connect to the first hop and build, within `limit`.
    async fn build_now(
        &self,
        path: Vec<HopTarget>,
        limit: Duration,
        progress: &AtomicUsize,
        internal: bool,
    ) -> Result<Circuit, BuildError> {
        let first = path.first().ok_or(BuildError::EmptyPath)?.clone();
        let cbt = &self.inner.cbt;
        let fut = async {
            let chan = self
                .inner
                .chanmgr
                .get(&first)
                .await
                .map_err(|e| BuildError::Channel {
                    relay: first.nickname.clone(),
                    err: e.to_string(),
                })?;
            let id = chan
                .hub
                .as_ref()
                .map(|h| h.circ_launched_as(&path, false, internal));
            circuit::build_launched_with_progress(
                chan,
                path,
                limit,
                id.unwrap_or(0),
                Instant::now(),
                |n| {
                    progress.store(n, Ordering::Relaxed);
                    cbt.hop_done(Instant::now());
                },
            )
            .await
        };
        tokio::time::timeout(limit, fut)
            .await
            .map_err(|_| BuildError::Timeout(limit))?
    }

    fn record_built(&self, hops: usize, t: Duration) {
        self.inner.counters.built.fetch_add(1, Ordering::Relaxed);
        if hops < RECORDED_HOPS {
            return;
        }
        let mut r = self
            .inner
            .recent_times
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if r.len() >= MAX_RECENT_BUILD_TIMES {
            r.pop_front();
        }
        r.push_back(t);
    }

    pub(super) fn note_failure(&self, path: &[HopTarget], e: &BuildError) {
        let culprit = match e {
            BuildError::Channel { .. } => path.first(),
            BuildError::Hop { hop, .. } => path.get(*hop),
            // The hop being extended to when the timeout passed.
            BuildError::Slow { hop, .. } => path.get(*hop).or(path.last()),
            // A timeout cannot be pinned on a hop; blame the last one.
            BuildError::Timeout(_) => path.last(),
            BuildError::EmptyPath => None,
        };
        if let Some(r) = culprit {
            if matches!(e, BuildError::Channel { .. }) {
                (self.inner.guard_report)(&r.rsa_id, false);
            }
            self.inner
                .failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(r.rsa_id, Instant::now());
        }
    }

    pub(super) fn avoid_set(&self) -> HashSet<[u8; 20]> {
        let mut f = self.inner.failed.lock().unwrap_or_else(|e| e.into_inner());
        f.retain(|_, t| t.elapsed() < FAILED_RELAY_PENALTY);
        f.keys().copied().collect()
    }
}
