//! Circuit manager: pools built circuits by isolation key, reuses them for
//! new streams until they are too dirty, and builds new ones (with retries
//! over different paths) when none fits.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{debug, warn};

use super::chanmgr::ChanMgr;
use super::circuit::{self, BuildError, Circuit, HopTarget};

/// Streams with different isolation keys never share a circuit
/// (SOCKS username/password, like tor's IsolateSOCKSAuth).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct IsolationKey {
    /// SOCKS username and password, if any.
    pub socks_auth: Option<(Vec<u8>, Vec<u8>)>,
    /// NEWNYM epoch: streams from before and after a NEWNYM never share.
    pub nym_epoch: u64,
}

/// What a circuit is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Purpose {
    /// Exit traffic to this port (None: any port, e.g. preemptive).
    Exit(Option<u16>),
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

/// Settings.
#[derive(Debug, Clone)]
pub struct CircMgrConfig {
    /// Per-attempt build timeout.
    pub build_timeout: Duration,
    /// Stop attaching streams this long after first use.
    pub max_dirtiness: Duration,
}

struct Pool {
    circs: Vec<Arc<Circuit>>,
    build_lock: Arc<tokio::sync::Mutex<()>>,
}

/// The circuit manager.
#[derive(Clone)]
pub struct CircMgr {
    cfg: CircMgrConfig,
    chanmgr: ChanMgr,
    picker: PathPicker,
    exit_ok: ExitPolicyCheck,
    guard_report: GuardReport,
    pools: Arc<Mutex<HashMap<IsolationKey, Pool>>>,
    failed: Arc<Mutex<HashMap<[u8; 20], Instant>>>,
    build_times: Arc<Mutex<Vec<Duration>>>,
}

impl std::fmt::Debug for CircMgr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CircMgr").finish()
    }
}

impl CircMgr {
    /// A manager.
    pub fn new(
        cfg: CircMgrConfig,
        chanmgr: ChanMgr,
        picker: PathPicker,
        exit_ok: ExitPolicyCheck,
        guard_report: GuardReport,
    ) -> Self {
        CircMgr {
            cfg,
            chanmgr,
            picker,
            exit_ok,
            guard_report,
            pools: Arc::new(Mutex::new(HashMap::new())),
            failed: Arc::new(Mutex::new(HashMap::new())),
            build_times: Arc::new(Mutex::new(Vec::new())),
        }
    }

    fn lock_pools(&self) -> std::sync::MutexGuard<'_, HashMap<IsolationKey, Pool>> {
        self.pools.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn find(&self, key: &IsolationKey, port: Option<u16>) -> Option<Arc<Circuit>> {
        let mut pools = self.lock_pools();
        let pool = pools.get_mut(key)?;
        pool.circs.retain(|c| !c.is_closed());
        pool.circs
            .iter()
            .filter(|c| c.is_usable(self.cfg.max_dirtiness))
            .find(|c| match (port, c.path.last()) {
                (Some(p), Some(exit)) => (self.exit_ok)(&exit.rsa_id, p),
                (None, _) => true,
                _ => false,
            })
            .cloned()
    }

    /// A circuit for `key` whose exit accepts `port`, built if necessary.
    pub async fn get_exit_circuit(
        &self,
        key: &IsolationKey,
        port: Option<u16>,
    ) -> Result<Arc<Circuit>, BuildError> {
        if let Some(c) = self.find(key, port) {
            return Ok(c);
        }
        let lock = {
            let mut pools = self.lock_pools();
            if !pools.contains_key(key) && pools.len() >= MAX_KEYS {
                pools.retain(|_, p| {
                    p.circs.retain(|c| !c.is_closed());
                    !p.circs.is_empty()
                });
            }
            pools
                .entry(key.clone())
                .or_insert_with(|| Pool {
                    circs: Vec::new(),
                    build_lock: Arc::new(tokio::sync::Mutex::new(())),
                })
                .build_lock
                .clone()
        };
        let _g = lock.lock().await;
        if let Some(c) = self.find(key, port) {
            return Ok(c);
        }
        let c = Arc::new(self.build_with_retries(Purpose::Exit(port)).await?);
        let mut pools = self.lock_pools();
        if let Some(pool) = pools.get_mut(key) {
            pool.circs.retain(|c| !c.is_closed());
            if pool.circs.len() >= MAX_CIRCUITS_PER_KEY {
                pool.circs.remove(0);
            }
            pool.circs.push(c.clone());
        }
        Ok(c)
    }

    /// Build a fresh circuit for `purpose`, not pooled.
    pub async fn build_with_retries(&self, purpose: Purpose) -> Result<Circuit, BuildError> {
        let mut last = None;
        for attempt in 0..BUILD_ATTEMPTS {
            let avoid = self.avoid_set();
            let path = match (self.picker)(purpose, &avoid) {
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
                Ok(c) => {
                    if let Some(g) = path.first() {
                        (self.guard_report)(&g.rsa_id, true);
                    }
                    return Ok(c);
                }
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

    /// Build along an explicit path.
    pub async fn build_path(&self, path: Vec<HopTarget>) -> Result<Circuit, BuildError> {
        let first = path.first().ok_or(BuildError::EmptyPath)?;
        let chan = tokio::time::timeout(self.cfg.build_timeout, self.chanmgr.get(first))
            .await
            .map_err(|_| BuildError::Timeout(self.cfg.build_timeout))?
            .map_err(|e| BuildError::Channel {
                relay: first.nickname.clone(),
                err: e.to_string(),
            })?;
        let c = circuit::build(chan, path, self.cfg.build_timeout).await?;
        self.build_times
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(c.build_time);
        Ok(c)
    }

    fn note_failure(&self, path: &[HopTarget], e: &BuildError) {
        let culprit = match e {
            BuildError::Channel { .. } => path.first(),
            BuildError::Hop { hop, .. } => path.get(*hop),
            // A timeout cannot be pinned on a hop; blame the last one.
            BuildError::Timeout(_) => path.last(),
            BuildError::EmptyPath => None,
        };
        if let Some(r) = culprit {
            if matches!(e, BuildError::Channel { .. }) {
                (self.guard_report)(&r.rsa_id, false);
            }
            self.failed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(r.rsa_id, Instant::now());
        }
    }

    fn avoid_set(&self) -> HashSet<[u8; 20]> {
        let mut f = self.failed.lock().unwrap_or_else(|e| e.into_inner());
        f.retain(|_, t| t.elapsed() < FAILED_RELAY_PENALTY);
        f.keys().copied().collect()
    }

    /// Forget a circuit (e.g. its stream failed at the circuit level).
    pub fn retire(&self, c: &Arc<Circuit>) {
        let mut pools = self.lock_pools();
        for p in pools.values_mut() {
            p.circs.retain(|x| !Arc::ptr_eq(x, c));
        }
    }

    /// Mark a relay as failing (e.g. its channel died under a stream).
    pub fn note_relay_failed(&self, rsa_id: [u8; 20]) {
        self.failed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(rsa_id, Instant::now());
    }

    /// Build times recorded so far.
    pub fn build_times(&self) -> Vec<Duration> {
        self.build_times
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Circuits currently pooled and open.
    pub fn open_circuits(&self) -> usize {
        let mut pools = self.lock_pools();
        pools
            .values_mut()
            .map(|p| {
                p.circs.retain(|c| !c.is_closed());
                p.circs.len()
            })
            .sum()
    }

    /// The relay nicknames of every pooled open circuit (like tor's
    /// `GETINFO circuit-status`; local state, never logged).
    pub fn open_circuit_paths(&self) -> Vec<Vec<String>> {
        let pools = self.lock_pools();
        pools
            .values()
            .flat_map(|p| p.circs.iter())
            .filter(|c| !c.is_closed())
            .map(|c| c.path.iter().map(|h| h.nickname.clone()).collect())
            .collect()
    }

    /// Drop every pooled circuit (new identity / directory change).
    pub fn clear(&self) {
        self.lock_pools().clear();
    }
}
