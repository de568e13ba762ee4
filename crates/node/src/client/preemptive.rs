//! Pre-built circuits (path-spec §2.1.1): a task that keeps clean exit
//! circuits ready for the ports the client used recently, builds learning
//! circuits for the build timeout, closes clean circuits left unused past
//! their idle timeout and drops dirty ones past `max_dirtiness` from the
//! pools. The decisions are `onionmix_proto::preempt`'s; this is the
//! driver.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use tracing::debug;

use onionmix_proto::preempt::{self, Plan, PoolView};

use super::circmgr::{CircMgr, CleanCirc, Pending, Purpose, Shared};

/// Pre-built circuits being built at once, at most.
pub const MAX_PREEMPTIVE_PENDING: usize = 4;
/// How often the task looks even when nothing woke it.
pub const TICK: Duration = Duration::from_secs(1);

impl CircMgr {
    /// Start keeping pre-built circuits (once bootstrapped). Does nothing
    /// when `preemptive` is off. The task ends when the manager is gone.
    pub fn start_preemptive(&self) {
        if !self.inner.cfg.preemptive {
            return;
        }
        let weak = Arc::downgrade(&self.inner);
        tokio::spawn(maintain(weak));
    }

    /// One round: expire, then launch what the planner asks for.
    pub(super) fn preemptive_tick(&self) {
        let now = Instant::now();
        self.expire(now);
        if self.is_dormant() {
            return;
        }
        self.conflux_tick(now);
        for _ in 0..MAX_PREEMPTIVE_PENDING {
            let Some(purpose) = self.next_plan(now) else {
                return;
            };
            if !self.launch(purpose) {
                return;
            }
        }
    }

    fn expire(&self, now: Instant) {
        let max_dirtiness = self.inner.cfg.max_dirtiness;
        let mut st = self.lock_state();
        let before = st.clean.len();
        st.clean
            .retain(|c| !c.circ.is_closed() && now < c.idle_deadline);
        st.conflux_clean
            .retain(|c| !c.circ.is_closed() && now < c.idle_deadline);
        let expired = before - st.clean.len();
        if expired > 0 {
            debug!("closed {expired} clean circuit(s) left unused");
            self.inner
                .counters
                .clean_expired
                .fetch_add(expired as u64, Ordering::Relaxed);
        }
        // Dirty circuits past max_dirtiness take no new streams; dropping
        // them here closes them once their last stream is done.
        st.pools.retain(|_, p| {
            p.circs.retain(|c| c.is_usable(max_dirtiness));
            !p.circs.is_empty() || Arc::strong_count(&p.build_lock) > 1
        });
    }

    fn next_plan(&self, now: Instant) -> Option<Purpose> {
        let cbt = &self.inner.cbt;
        let learning_now = cbt.needs_circuits_now(now);
        let (max_open_learning, _) = cbt.learning_limits();
        let mut st = self.lock_state();
        if st.pending.len() >= MAX_PREEMPTIVE_PENDING {
            return None;
        }
        let predicted = st.predictor.predicted_ports(now);
        let view = PoolView {
            clean_open: st.clean.len(),
            learning_now,
            max_open_for_learning: max_open_learning,
        };
        let exit_ok = &self.inner.exit_ok;
        let handling = |port: u16| {
            st.clean
                .iter()
                .filter_map(|c| c.circ.path().last().map(|h| h.rsa_id))
                .filter(|id| exit_ok(id, port))
                .count()
                + st.pending.iter().filter(|p| exit_ok(&p.exit, port)).count()
        };
        match preempt::plan(&view, &predicted, handling) {
            Plan::Nothing => None,
            Plan::ExitFor(p) => Some(Purpose::Exit(Some(p))),
            Plan::Learning => Some(Purpose::Exit(None)),
        }
    }

    /// Launch one pre-built circuit; false if no path could be chosen.
    fn launch(&self, purpose: Purpose) -> bool {
        let path = match (self.inner.picker)(purpose, &self.avoid_set()) {
            Ok(p) => p,
            Err(e) => {
                debug!("no path for a pre-built circuit: {e}");
                return false;
            }
        };
        let Some(exit) = path.last().map(|h| h.rsa_id) else {
            return false;
        };
        let id = self.inner.next_id.fetch_add(1, Ordering::Relaxed);
        self.lock_state().pending.push(Pending { id, exit });
        // Now, not when the task first runs: the next plan must see it.
        self.inner.cbt.launched(Instant::now());
        let me = self.clone();
        tokio::spawn(async move {
            let res = me.build_path(path.clone()).await;
            let now = Instant::now();
            {
                let learning = me.inner.cbt.needs_circuits();
                let (_, learn_timeout) = me.inner.cbt.learning_limits();
                let mut st = me.lock_state();
                st.pending.retain(|p| p.id != id);
                match res {
                    Ok(c) => {
                        let idle = st.predictor.idle_timeout(
                            now,
                            learning,
                            learn_timeout,
                            &mut rand::thread_rng(),
                        );
                        st.clean.push(CleanCirc {
                            circ: c.into_shared(),
                            idle_deadline: now + idle,
                        });
                        me.inner.counters.preemptive.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        drop(st);
                        debug!("pre-built circuit failed: {e}");
                        me.note_failure(&path, &e);
                    }
                }
            }
            me.inner.clean_done.notify_waiters();
            me.inner.wake.notify_one();
        });
        true
    }
}

async fn maintain(weak: Weak<Shared>) {
    let Some(wake) = weak.upgrade().map(|i| i.wake.clone()) else {
        return;
    };
    loop {
        let woken = wake.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        {
            // Only a weak reference is held between rounds.
            let Some(inner) = weak.upgrade() else { return };
            CircMgr { inner }.preemptive_tick();
        }
        tokio::select! {
            _ = &mut woken => {}
            _ = tokio::time::sleep(TICK) => {}
        }
    }
}
