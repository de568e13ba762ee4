//! The client's circuit build timeout: the sans-IO estimator of
//! `onionmix_proto::cbt` behind a lock, persisted in `<data_dir>/state`
//! (tor's `CircuitBuildTimeBin` lines), plus counters for `status.json`.

use std::path::PathBuf;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tracing::{debug, info, warn};

use onionmix_proto::cbt::{BuildTimeEstimator, CbtParams, CbtState};

/// The state is written after this many new build times (tor's
/// `CBT_SAVE_STATE_EVERY`).
pub const SAVE_STATE_EVERY: u64 = 10;
/// Largest state file read.
pub const MAX_STATE_FILE: u64 = 1 << 20;

/// Counters of build outcomes.
#[derive(Debug, Default)]
pub struct CbtCounters {
    /// Circuits that passed the learned timeout (kept building to measure).
    pub timeouts: AtomicU64,
    /// Measurement circuits abandoned at the close timeout.
    pub abandoned: AtomicU64,
    /// Measurement circuits that completed after their timeout.
    pub measured_late: AtomicU64,
}

/// The build timeout shared by every build of a client.
#[derive(Debug)]
pub struct BuildTimes {
    est: Mutex<BuildTimeEstimator>,
    /// Learning on (`learn_circuit_build_timeout`); off: `fixed` always.
    learn: bool,
    fixed: Duration,
    state_path: Option<PathBuf>,
    since_save: AtomicU64,
    /// Outcome counters.
    pub counters: CbtCounters,
}

impl BuildTimes {
    /// Load the histogram from `state_path` if there is one (an unreadable
    /// or corrupt file is reported and ignored, as tor does).
    pub fn new(learn: bool, fixed: Duration, state_path: Option<PathBuf>) -> Self {
        let mut est = BuildTimeEstimator::new(CbtParams::default());
        if learn && let Some(p) = &state_path {
            match read_state(p) {
                Ok(Some(st)) => {
                    est.load_state(&st, &mut rand::thread_rng());
                    info!(
                        "loaded {} circuit build times from {}; timeout {:?}",
                        est.total_build_times(),
                        p.display(),
                        est.timeout()
                    );
                }
                Ok(None) => {}
                Err(e) => warn!("ignoring circuit build times in {}: {e}", p.display()),
            }
        }
        BuildTimes {
            est: Mutex::new(est),
            learn,
            fixed,
            state_path,
            since_save: AtomicU64::new(0),
            counters: CbtCounters::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BuildTimeEstimator> {
        self.est.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take the consensus parameters (`cbt*`).
    pub fn set_params(&self, p: CbtParams) {
        if self.learn {
            self.lock().set_params(p);
        }
    }

    /// Whether build times are being learned.
    pub fn learning_enabled(&self) -> bool {
        self.learn && !self.lock().params().disabled
    }

    /// (timeout, close timeout) for a circuit of `hops` hops. Without
    /// learning, both are the configured fixed timeout.
    pub fn timeouts(&self, hops: usize) -> (Duration, Duration) {
        if !self.learn {
            return (self.fixed, self.fixed);
        }
        self.lock().timeouts_for_hops(hops)
    }

    /// Whether the estimator still wants learning circuits now.
    pub fn needs_circuits_now(&self, now: Instant) -> bool {
        self.learn && self.lock().needs_circuits_now(now)
    }

    /// Whether fewer than `cbtmincircs` build times are known.
    pub fn needs_circuits(&self) -> bool {
        self.learn && self.lock().needs_circuits()
    }

    /// `cbtmaxopencircs` and `cbtlearntimeout`.
    pub fn learning_limits(&self) -> (usize, Duration) {
        let e = self.lock();
        let p = e.params();
        (
            p.max_open_circs as usize,
            Duration::from_secs(u64::from(p.learn_timeout_secs)),
        )
    }

    /// A build was launched at `now`.
    pub fn launched(&self, now: Instant) {
        if self.learn {
            self.lock().note_circuit_launched(now);
        }
    }

    /// A hop completed: the network is alive.
    pub fn hop_done(&self, now: Instant) {
        if self.learn {
            self.lock().network_is_live(now);
        }
    }

    /// A circuit of `hops` hops completed after `elapsed`; `timed_out`: its
    /// requester had given up on it.
    pub fn completed(&self, hops: usize, elapsed: Duration, timed_out: bool) {
        if timed_out {
            self.counters.measured_late.fetch_add(1, Ordering::Relaxed);
        }
        if !self.learn || hops < onionmix_proto::cbt::RECORDED_HOPS {
            return;
        }
        let recorded = {
            let mut e = self.lock();
            let before = e.timeout();
            let r = e.record_build(elapsed, timed_out);
            if r && e.timeout() != before {
                debug!(
                    "circuit build timeout now {:?} ({} build times)",
                    e.timeout(),
                    e.total_build_times()
                );
            }
            r
        };
        if recorded && self.since_save.fetch_add(1, Ordering::Relaxed) + 1 >= SAVE_STATE_EVERY {
            self.save();
        }
    }

    /// A build passed its timeout; `did_onehop`: its first hop was done.
    pub fn timed_out(&self, did_onehop: bool) {
        self.counters.timeouts.fetch_add(1, Ordering::Relaxed);
        if !self.learn {
            return;
        }
        let reset = self.lock().count_timeout(did_onehop);
        if reset {
            info!(
                "most recent circuits timed out: the network seems to have changed; \
                 relearning the circuit build timeout"
            );
            self.save();
        }
    }

    /// A measurement circuit launched at `started` was abandoned at the
    /// close timeout.
    pub fn abandoned(&self, started: Instant) {
        self.counters.abandoned.fetch_add(1, Ordering::Relaxed);
        if self.learn {
            self.lock().count_close(started);
        }
    }

    /// Write the histogram to the state file now.
    pub fn save(&self) {
        self.since_save.store(0, Ordering::Relaxed);
        let Some(p) = &self.state_path else { return };
        if !self.learn {
            return;
        }
        let text = self.lock().to_state().encode();
        if let Err(e) = onionmix_fsutil::write_atomic(p, text) {
            warn!("cannot write {}: {e}", p.display());
        }
    }

    /// A snapshot for `status.json`.
    pub fn status(&self) -> serde_json::Value {
        let e = self.lock();
        let (xm, alpha) = e.pareto().unwrap_or((0, 0.0));
        serde_json::json!({
            "learning": self.learn && !e.params().disabled,
            "timeout_ms": if self.learn { e.timeout().as_secs_f64() * 1e3 } else { self.fixed.as_secs_f64() * 1e3 },
            "close_ms": if self.learn { e.close_timeout().as_secs_f64() * 1e3 } else { self.fixed.as_secs_f64() * 1e3 },
            "computed": e.has_computed_timeout(),
            "build_times": e.total_build_times(),
            "xm_ms": xm,
            "alpha": if alpha.is_finite() { alpha } else { -1.0 },
            "timeouts": self.counters.timeouts.load(Ordering::Relaxed),
            "measured_late": self.counters.measured_late.load(Ordering::Relaxed),
            "abandoned": self.counters.abandoned.load(Ordering::Relaxed),
            "resets": e.resets(),
        })
    }
}

fn read_state(p: &std::path::Path) -> Result<Option<CbtState>, String> {
    let meta = match std::fs::metadata(p) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if meta.len() > MAX_STATE_FILE {
        return Err(format!("larger than {MAX_STATE_FILE} bytes"));
    }
    let text = std::fs::read_to_string(p).map_err(|e| e.to_string())?;
    CbtState::parse(&text).map(Some).map_err(|e| e.to_string())
}
