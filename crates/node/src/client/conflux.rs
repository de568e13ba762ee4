//! Conflux sets on the client (proposal 329; `docs/client.md`): two
//! circuits to one exit through different guards and middles, linked with
//! CONFLUX_LINK, whose streams the exit may send over either leg.
//!
//! The set's streams live on one leg (the "home": the leg with the lower
//! RTT at link time), and everything we send goes on it, so we never
//! send SWITCH: tor's exits ask clients for minimum latency, and staying
//! on the faster leg is what tor's MinRtt does until the RTTs cross. What
//! the exit sends on the other leg is received by that leg's channel
//! reactor, numbered in the shared [`ConfluxSet`] (the reorder queue), and
//! the messages now in order are handed to the home's reactor, which
//! drains them into its streams in that order.

use std::collections::{HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rand::RngCore;
use tracing::debug;

use onionmix_cell::relay::{ConfluxLink, Nonce, RelayCmd};
use onionmix_proto::conflux::{CLIENT_UX, ConfluxError, ConfluxParams, ConfluxSet, LegId};

use onionmix_netdoc::RelayFlags;

use super::circmgr::{CircMgr, IsolationKey, Purpose};
use super::circuit::{Circuit, HopTarget};
use super::dir::DirMgr;
use crate::reactor::{ChanCommand, ChannelHandle};

/// Bytes a client set's reorder queue may hold (a hostile exit could
/// otherwise make us buffer without bound; tor's default is unbounded).
pub const CLIENT_MAX_OOO_BYTES: usize = 32 << 20;
/// Messages in order waiting for the home reactor, at most.
pub const MAX_DELIVERY: usize = 65_536;

/// A message of the set waiting to be handed to the home leg's streams.
#[derive(Debug)]
pub struct Queued {
    /// Relay command.
    pub cmd: RelayCmd,
    /// Stream.
    pub stream: u16,
    /// Message data.
    pub data: Vec<u8>,
}

/// A circuit's place in a set.
#[derive(Clone)]
pub struct ClientLeg {
    /// The set.
    pub set: Arc<ClientSet>,
    /// The leg.
    pub id: LegId,
    /// This leg holds the set's streams.
    pub home: bool,
}

/// Counters of the client's conflux sets (status.json).
#[derive(Debug, Default)]
pub struct ConfluxStats {
    /// Sets linked.
    pub sets_linked: AtomicU64,
    /// Set builds that failed (a leg failed to build or link).
    pub sets_failed: AtomicU64,
    /// Messages that came through a set's reorder queue.
    pub cells_delivered: AtomicU64,
    /// ... of which arrived out of order.
    pub cells_reordered: AtomicU64,
    /// SWITCHes received from exits.
    pub switches_received: AtomicU64,
    /// Sets torn down (a leg closed).
    pub sets_closed: AtomicU64,
}

/// One set as the client sees it.
pub struct ClientSet {
    inner: Mutex<Inner>,
    home_wake: Arc<tokio::sync::Notify>,
    stats: Arc<ConfluxStats>,
}

struct Inner {
    cfx: ConfluxSet<Queued>,
    delivery: VecDeque<Queued>,
    legs: Vec<(ChannelHandle, u32)>,
    closed: bool,
}

impl ClientSet {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A SWITCH on leg `id`.
    pub fn on_switch(&self, id: LegId, seq: u32) -> Result<(), ConfluxError> {
        self.stats.switches_received.fetch_add(1, Ordering::Relaxed);
        self.lock().cfx.on_switch(id, seq)
    }

    /// A multiplexed message on leg `id`: numbered; what is now in order
    /// joins the home's delivery queue.
    pub fn on_msg(&self, id: LegId, q: Queued) -> Result<(), ConfluxError> {
        let mut g = self.lock();
        if g.closed {
            return Ok(());
        }
        let cost = q.data.len() + onionmix_proto::conflux::QUEUED_MSG_OVERHEAD;
        match g.cfx.on_msg(id, q, cost)? {
            Some(q) => {
                g.delivery.push_back(q);
                while let Some(q) = g.cfx.pop_ready() {
                    g.delivery.push_back(q);
                }
            }
            None => {
                self.stats.cells_reordered.fetch_add(1, Ordering::Relaxed);
            }
        }
        if g.delivery.len() > MAX_DELIVERY {
            return Err(ConfluxError::ReorderQueueFull {
                bytes: g.delivery.len(),
                max: MAX_DELIVERY,
            });
        }
        Ok(())
    }

    /// Wake the home reactor to drain the delivery queue.
    pub fn wake_home(&self) {
        self.home_wake.notify_one();
    }

    /// What is in order and not yet handed to the streams (the home
    /// reactor takes it).
    pub fn take_delivery(&self) -> VecDeque<Queued> {
        let q = std::mem::take(&mut self.lock().delivery);
        self.stats
            .cells_delivered
            .fetch_add(q.len() as u64, Ordering::Relaxed);
        q
    }

    /// A leg (circuit `gone` on its channel) closed, or the set failed:
    /// close every other leg. We never resume, and the exit sends on
    /// every leg, so a set without one of its legs cannot go on.
    pub fn teardown(&self, gone: u32) {
        let legs = {
            let mut g = self.lock();
            if g.closed {
                return;
            }
            g.closed = true;
            g.delivery.clear();
            g.cfx.clear_queue();
            std::mem::take(&mut g.legs)
        };
        self.stats.sets_closed.fetch_add(1, Ordering::Relaxed);
        for (chan, circ_id) in legs {
            if circ_id != gone {
                chan.try_send(ChanCommand::Destroy { circ_id });
            }
        }
    }
}

/// Why a set could not be linked.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The legs are not two congestion-controlled circuits to one exit.
    #[error("conflux legs must be two congestion-controlled circuits to one exit")]
    BadLegs,
    /// A leg's LINK was not answered in time or the circuit failed.
    #[error("conflux link failed: {0}")]
    Link(String),
    /// The set refused a leg.
    #[error("conflux: {0}")]
    Set(#[from] ConfluxError),
}

/// Send LINK on `c` and wait for LINKED: the answer and the RTT.
async fn link_leg(
    c: &Circuit,
    link: ConfluxLink,
    timeout: Duration,
) -> Result<(ConfluxLink, u64), LinkError> {
    let t0 = Instant::now();
    let fut = c.chan.request(|reply| ChanCommand::ConfluxLink {
        circ_id: c.circ_id,
        link,
        reply,
    });
    let linked = tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| LinkError::Link("no CONFLUX_LINKED in time".into()))?
        .map_err(|e| LinkError::Link(e.to_string()))?;
    let rtt = u64::try_from(t0.elapsed().as_micros()).unwrap_or(u64::MAX);
    Ok((linked, rtt.max(1)))
}

/// Link two circuits to the same exit (different guards and middles,
/// congestion control negotiated) into a set, waiting at most `timeout`
/// (tor uses the circuit build timeout) for each LINKED. Returns the
/// home leg, which holds the other: dropping it closes both.
pub async fn link(
    a: Circuit,
    b: Circuit,
    params: &ConfluxParams,
    timeout: Duration,
    stats: Arc<ConfluxStats>,
) -> Result<Circuit, LinkError> {
    let same_exit = a.path().last().map(|h| h.rsa_id) == b.path().last().map(|h| h.rsa_id);
    if !same_exit || a.cc_sendme_inc().is_none() || b.cc_sendme_inc().is_none() {
        return Err(LinkError::BadLegs);
    }
    let mut nonce = [0u8; 32];
    rand::rngs::OsRng.fill_bytes(&mut nonce);
    let msg = ConfluxLink {
        nonce: Nonce(nonce),
        last_seqno_sent: 0,
        last_seqno_recv: 0,
        desired_ux: CLIENT_UX,
    };
    let (ra, rb) = tokio::join!(link_leg(&a, msg, timeout), link_leg(&b, msg, timeout));
    let ((la, rtt_a), (lb, rtt_b)) = (ra?, rb?);
    let (home, other, rtt_home, rtt_other, l_home, l_other) = if rtt_a <= rtt_b {
        (a, b, rtt_a, rtt_b, la, lb)
    } else {
        (b, a, rtt_b, rtt_a, lb, la)
    };
    let max_ooo =
        CLIENT_MAX_OOO_BYTES.min(usize::try_from(params.max_oooq_bytes).unwrap_or(usize::MAX));
    let mut cfx = ConfluxSet::new(2, max_ooo);
    cfx.add_leg(0, &l_home, None, rtt_home)?;
    cfx.add_leg(1, &l_other, None, rtt_other)?;
    let set = Arc::new(ClientSet {
        inner: Mutex::new(Inner {
            cfx,
            delivery: VecDeque::new(),
            legs: vec![
                (home.chan.clone(), home.circ_id),
                (other.chan.clone(), other.circ_id),
            ],
            closed: false,
        }),
        home_wake: home.chan.conflux_wake.clone(),
        stats: stats.clone(),
    });
    for (c, id, is_home) in [(&home, 0, true), (&other, 1, false)] {
        c.chan
            .send(ChanCommand::ConfluxAttach {
                circ_id: c.circ_id,
                leg: ClientLeg {
                    set: set.clone(),
                    id,
                    home: is_home,
                },
            })
            .await
            .map_err(|e| LinkError::Link(e.to_string()))?;
    }
    debug!(
        "conflux set linked to {} (RTTs {} and {} us)",
        home.path().last().map_or("?", |h| h.nickname.as_str()),
        rtt_home,
        rtt_other
    );
    stats.sets_linked.fetch_add(1, Ordering::Relaxed);
    home.set_conflux_partner(other);
    Ok(home)
}

/// Where a client finds conflux paths and parameters.
pub trait ConfluxDirectory: Send + Sync {
    /// The consensus's conflux parameters.
    fn conflux_params(&self) -> ConfluxParams;
    /// The share of exits (out of 10000) that support conflux.
    fn conflux_exit_share(&self) -> u32;
    /// Two paths to one conflux-capable exit that accepts `port` (any
    /// port: `None`), with different guards and middles, avoiding
    /// `avoid` where possible.
    fn conflux_paths(
        &self,
        port: Option<u16>,
        avoid: &HashSet<[u8; 20]>,
    ) -> Result<[Vec<HopTarget>; 2], String>;
}

/// What the circuit manager needs to pre-build conflux sets.
pub struct ConfluxHook {
    dir: Arc<dyn ConfluxDirectory>,
    stats: Arc<ConfluxStats>,
}

/// Sets being built at once, at most.
const MAX_PENDING_SETS: usize = 1;
/// After a failed set build, wait this long (doubling per failure in a
/// row, up to [`MAX_RETRY_WAIT`]) before the next.
const RETRY_WAIT: Duration = Duration::from_secs(5);
/// The longest wait between set builds that keep failing.
const MAX_RETRY_WAIT: Duration = Duration::from_secs(300);

impl CircMgr {
    /// Pre-build conflux sets from `dir` from now on; returns their
    /// counters.
    pub fn enable_conflux(&self, dir: Arc<dyn ConfluxDirectory>) -> Arc<ConfluxStats> {
        let stats = Arc::new(ConfluxStats::default());
        *self.hook_slot() = Some(ConfluxHook {
            dir,
            stats: stats.clone(),
        });
        self.inner.wake.notify_one();
        stats
    }

    fn hook_slot(&self) -> MutexGuard<'_, Option<ConfluxHook>> {
        self.inner.conflux.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn hook(&self) -> Option<(Arc<dyn ConfluxDirectory>, Arc<ConfluxStats>)> {
        self.hook_slot()
            .as_ref()
            .map(|h| (h.dir.clone(), h.stats.clone()))
    }

    /// Give a clean conflux set whose exit accepts `port` to `key`.
    pub(super) fn take_conflux(
        &self,
        key: &IsolationKey,
        port: Option<u16>,
    ) -> Option<Arc<Circuit>> {
        let mut st = self.lock_state();
        st.conflux_clean.retain(|c| !c.circ.is_closed());
        let i = st
            .conflux_clean
            .iter()
            .position(|c| self.exit_allows(&c.circ, Purpose::Exit(port)))?;
        let c = st.conflux_clean.swap_remove(i).circ;
        self.give(&mut st, key, c)
    }

    /// Launch a set build when fewer than tor's `cfx_max_prebuilt_set`
    /// (fewer when few exits support conflux) are clean or building.
    pub(super) fn conflux_tick(&self, now: Instant) {
        let Some((dir, stats)) = self.hook() else {
            return;
        };
        let params = dir.conflux_params();
        if !params.enabled {
            return;
        }
        let want = usize::from(params.max_prebuilt(dir.conflux_exit_share()));
        {
            let mut st = self.lock_state();
            st.conflux_clean.retain(|c| !c.circ.is_closed());
            if st.conflux_pending >= MAX_PENDING_SETS
                || st.conflux_clean.len() + st.conflux_pending >= want
                || st.conflux_backoff.1.is_some_and(|t| now < t)
            {
                return;
            }
            st.conflux_pending += 1;
        }
        let me = self.clone();
        tokio::spawn(async move {
            let res = me.build_conflux_set(None).await;
            {
                let learning = me.inner.cbt.needs_circuits();
                let (_, learn_timeout) = me.inner.cbt.learning_limits();
                let mut st = me.lock_state();
                st.conflux_pending = st.conflux_pending.saturating_sub(1);
                match res {
                    Ok(c) => {
                        st.conflux_backoff = (0, None);
                        let idle = st.predictor.idle_timeout(
                            now,
                            learning,
                            learn_timeout,
                            &mut rand::thread_rng(),
                        );
                        st.conflux_clean.push(super::circmgr::CleanCirc {
                            circ: Arc::new(c),
                            idle_deadline: Instant::now() + idle,
                        });
                    }
                    Err(e) => {
                        debug!("conflux set failed: {e}");
                        stats.sets_failed.fetch_add(1, Ordering::Relaxed);
                        let n = st.conflux_backoff.0.saturating_add(1);
                        let wait = RETRY_WAIT
                            .saturating_mul(1 << (n - 1).min(6))
                            .min(MAX_RETRY_WAIT);
                        st.conflux_backoff = (n, Some(Instant::now() + wait));
                    }
                }
            }
            me.inner.clean_done.notify_waiters();
        });
    }

    /// Build two circuits to one conflux-capable exit that accepts `port`
    /// (through different guards and middles) and link them.
    pub async fn build_conflux_set(&self, port: Option<u16>) -> Result<Circuit, LinkError> {
        let (dir, stats) = self
            .hook()
            .ok_or_else(|| LinkError::Link("conflux is off".into()))?;
        let params = dir.conflux_params();
        let [p1, p2] = dir
            .conflux_paths(port, &self.avoid_set())
            .map_err(LinkError::Link)?;
        let (a, b) = tokio::join!(self.build_path(p1.clone()), self.build_path(p2.clone()));
        let built = |r: Result<Circuit, super::circuit::BuildError>, p: &[HopTarget]| {
            r.map_err(|e| {
                self.note_failure(p, &e);
                LinkError::Link(e.to_string())
            })
        };
        let (a, b) = (built(a, &p1)?, built(b, &p2)?);
        let timeout = self.inner.cbt.timeouts(3).0;
        link(a, b, &params, timeout, stats).await
    }

    /// Conflux counters for `status.json`.
    pub(super) fn conflux_status(&self) -> serde_json::Value {
        let Some((dir, s)) = self.hook() else {
            return serde_json::json!({ "enabled": false });
        };
        let clean = {
            let mut st = self.lock_state();
            st.conflux_clean.retain(|c| !c.circ.is_closed());
            st.conflux_clean.len()
        };
        let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
        serde_json::json!({
            "enabled": dir.conflux_params().enabled,
            "exit_share": dir.conflux_exit_share(),
            "sets_clean": clean,
            "sets_linked": n(&s.sets_linked),
            "sets_failed": n(&s.sets_failed),
            "sets_closed": n(&s.sets_closed),
            "cells_delivered": n(&s.cells_delivered),
            "cells_reordered": n(&s.cells_reordered),
            "switches_received": n(&s.switches_received),
        })
    }
}

/// Whether `r` can end a conflux set: `Conflux=1`, congestion control
/// (`FlowCtrl=2`), ntor-v3 (`Relay=4`) with an Ed25519 identity.
fn conflux_exit(r: &onionmix_netdoc::Relay) -> bool {
    r.protocols.supports("Conflux", 1)
        && r.protocols.supports("FlowCtrl", 2)
        && r.protocols.supports("Relay", 4)
        && r.ed_id.is_some()
}

impl ConfluxDirectory for DirMgr {
    fn conflux_params(&self) -> ConfluxParams {
        let mut p = self
            .netdir()
            .map(|nd| ConfluxParams::from_consensus(nd.params()))
            .unwrap_or_default();
        let cc = self
            .netdir()
            .map(|nd| onionmix_proto::cc::CcParams::from_consensus(nd.params()).enabled())
            .unwrap_or(true);
        // Conflux needs congestion control (tor's conflux_is_enabled).
        p.enabled = p.enabled && cc && self.config().conflux;
        p
    }

    fn conflux_exit_share(&self) -> u32 {
        let Some(nd) = self.netdir() else {
            return 0;
        };
        let exits: Vec<_> = nd
            .relays()
            .filter(|r| {
                r.flags.contains(RelayFlags::EXIT) && !r.flags.contains(RelayFlags::BAD_EXIT)
            })
            .collect();
        if exits.is_empty() {
            return 0;
        }
        let with = exits
            .iter()
            .filter(|r| r.protocols.supports("Conflux", 1))
            .count();
        u32::try_from(with * 10_000 / exits.len()).unwrap_or(10_000)
    }

    fn conflux_paths(
        &self,
        port: Option<u16>,
        avoid: &HashSet<[u8; 20]>,
    ) -> Result<[Vec<HopTarget>; 2], String> {
        let nd = self.netdir().ok_or("no directory yet")?;
        let mut last = String::from("no conflux-capable exit");
        for _ in 0..8 {
            let first = self.pick_path(Purpose::Exit(port), avoid)?;
            let [g, m, e] = first.as_slice() else {
                continue;
            };
            if !nd
                .relay(&onionmix_netdoc::RelayId(e.rsa_id))
                .is_some_and(conflux_exit)
            {
                continue;
            }
            // The second leg: the same exit, another guard and middle
            // (tor excludes the other legs' guards and middles).
            let mut avoid2 = avoid.clone();
            avoid2.extend([g.rsa_id, m.rsa_id]);
            let mut only = self.only.clone();
            only.exit = [e.rsa_id].into_iter().collect();
            match self.pick_path_within(Purpose::Exit(port), &avoid2, &only) {
                Ok(second) => return Ok([first, second]),
                Err(err) => last = err,
            }
        }
        Err(last)
    }
}
