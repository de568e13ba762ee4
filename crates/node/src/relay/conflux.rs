//! Conflux sets at this relay as an exit (proposal 329; `docs/relay.md`).
//!
//! The legs of a set are circuits that usually arrive on different
//! channels, so they belong to different reactor tasks. What the legs
//! share lives here behind one mutex per set: the sans-IO
//! [`ConfluxSet`] (sequence numbers, reorder queue, the sending leg), each
//! leg's send handle and the set's exit streams. Every multiplexed
//! message is sequenced, delivered and acted on under that mutex, so two
//! reactors never hand a stream its messages out of order.
//!
//! Lock order: the pool, then a set, then a leg's circuit lock. Nothing
//! that holds a circuit lock takes a set lock.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::sync::Notify;
use tracing::debug;

use onionmix_cell::relay::conflux::encode_switch;
use onionmix_cell::relay::{Nonce, RelayCmd};
use onionmix_link::ChannelWriter;
use onionmix_proto::cc::CcParams;
use onionmix_proto::conflux::{ConfluxError, ConfluxSet, LegId, LegView, SendPlan};
use onionmix_proto::relay_circ::ExitStreams;

use super::RelayStats;
use super::reactor::{
    DataSend, RCmd, RelayChanHandle, SharedCirc, StreamTx, lock, originate_backward,
    try_originate_data,
};

/// A multiplexed message waiting in a set's reorder queue (or being
/// delivered).
#[derive(Debug)]
pub struct Queued {
    /// Relay command.
    pub cmd: RelayCmd,
    /// Stream.
    pub stream: u16,
    /// Message data.
    pub data: Bytes,
    /// The circuit it came on has a client as previous hop.
    pub from_client: bool,
}

/// How a set reaches one of its legs.
#[derive(Clone)]
pub struct LegLink {
    /// The leg.
    pub id: LegId,
    /// Its circuit state (crypto, congestion control).
    pub shared: SharedCirc,
    /// The channel towards the client, and its reactor.
    pub chan: RelayChanHandle,
    /// Circuit ID on that channel.
    pub circ_id: u32,
}

/// All conflux sets whose legs end here, by nonce.
pub struct ConfluxPool {
    sets: Mutex<HashMap<Nonce, Arc<ExitSet>>>,
    next_leg: AtomicU64,
    /// Bytes in every set's reorder queue.
    ooo_total: Arc<AtomicUsize>,
    /// Most bytes all reorder queues may hold together.
    ooo_budget: usize,
}

impl ConfluxPool {
    /// An empty pool whose reorder queues may hold `ooo_budget` bytes in
    /// all.
    pub fn new(ooo_budget: usize) -> Self {
        ConfluxPool {
            sets: Mutex::new(HashMap::new()),
            next_leg: AtomicU64::new(1),
            ooo_total: Arc::new(AtomicUsize::new(0)),
            ooo_budget,
        }
    }

    /// A fresh leg identifier.
    pub fn next_leg_id(&self) -> LegId {
        self.next_leg.fetch_add(1, Ordering::Relaxed)
    }

    /// Sets open.
    pub fn len(&self) -> usize {
        self.map().len()
    }
    /// Whether no set is open.
    pub fn is_empty(&self) -> bool {
        self.map().is_empty()
    }
    /// Bytes in all reorder queues.
    pub fn ooo_bytes(&self) -> usize {
        self.ooo_total.load(Ordering::Relaxed)
    }

    fn map(&self) -> MutexGuard<'_, HashMap<Nonce, Arc<ExitSet>>> {
        self.sets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open set for `nonce`, or a new one accepting `max_legs` legs
    /// and `max_ooo` bytes out of order, whose streams use `params`. The
    /// boolean says whether it is new.
    pub fn get_or_create(
        &self,
        nonce: Nonce,
        max_legs: usize,
        max_ooo: usize,
        params: Arc<CcParams>,
    ) -> (Arc<ExitSet>, bool) {
        let mut m = self.map();
        if let Some(s) = m.get(&nonce)
            && !s.lock().closed
        {
            return (s.clone(), false);
        }
        let s = Arc::new(ExitSet {
            nonce,
            inner: Mutex::new(SetInner {
                cfx: ConfluxSet::new(max_legs, max_ooo),
                legs: Vec::new(),
                streams: HashMap::new(),
                flow: ExitStreams::new(Some(params)),
                closed: false,
                ooo_total: self.ooo_total.clone(),
                ooo_budget: self.ooo_budget,
            }),
            window_open: Arc::new(Notify::new()),
        });
        m.insert(nonce, s.clone());
        (s, true)
    }

    /// Forget `set` if it is still the one registered for its nonce.
    pub fn remove(&self, set: &Arc<ExitSet>) {
        let mut m = self.map();
        if m.get(&set.nonce).is_some_and(|s| Arc::ptr_eq(s, set)) {
            m.remove(&set.nonce);
        }
    }
}

/// One set at this exit.
pub struct ExitSet {
    nonce: Nonce,
    inner: Mutex<SetInner>,
    /// Woken when a leg's window opens, a leg comes or goes, or the set
    /// closes (exit streams wait on it for room to send).
    pub window_open: Arc<Notify>,
}

impl ExitSet {
    /// Lock the set (poisoning cannot leave it half-updated: every
    /// critical section is a complete step).
    pub fn lock(&self) -> MutexGuard<'_, SetInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A set's shared state.
pub struct SetInner {
    /// Sequence numbers, reorder queue, sending leg.
    pub cfx: ConfluxSet<Queued>,
    legs: Vec<LegLink>,
    /// The set's exit streams (their queues towards targets and gates).
    pub streams: HashMap<u16, StreamTx>,
    /// Their flow-control state.
    pub flow: ExitStreams,
    /// The set was torn down.
    pub closed: bool,
    ooo_total: Arc<AtomicUsize>,
    ooo_budget: usize,
}

impl SetInner {
    /// Add the circuit `leg` (whose LINK was accepted by `cfx`).
    pub fn push_leg(&mut self, leg: LegLink) {
        self.legs.push(leg);
    }

    /// Number of legs.
    pub fn n_legs(&self) -> usize {
        self.legs.len()
    }

    /// Queue-or-deliver a multiplexed message from leg `id`; the messages
    /// now deliverable in order are appended to `out`.
    pub fn on_msg(
        &mut self,
        id: LegId,
        q: Queued,
        out: &mut Vec<Queued>,
    ) -> Result<(), ConfluxError> {
        let cost = q.data.len() + onionmix_proto::conflux::QUEUED_MSG_OVERHEAD;
        let before = self.cfx.ooo_bytes();
        // Past the relay-wide budget, count this queue as full.
        if self.ooo_total.load(Ordering::Relaxed).saturating_add(cost) > self.ooo_budget
            && !self.cfx.would_deliver(id)
        {
            return Err(ConfluxError::ReorderQueueFull {
                bytes: before,
                max: before,
            });
        }
        let res = self.cfx.on_msg(id, q, cost);
        let res = res.map(|now| {
            if let Some(q) = now {
                out.push(q);
                while let Some(q) = self.cfx.pop_ready() {
                    out.push(q);
                }
            }
        });
        self.account_queue(before);
        res
    }

    fn account_queue(&self, before: usize) {
        let after = self.cfx.ooo_bytes();
        if after > before {
            self.ooo_total.fetch_add(after - before, Ordering::Relaxed);
        } else {
            self.ooo_total.fetch_sub(before - after, Ordering::Relaxed);
        }
    }

    /// What the scheduler needs of each leg, and a writer of a leg that
    /// had room in its window but whose channel was full.
    fn views(&self) -> (Vec<LegView>, Option<ChannelWriter>) {
        let hw = onionmix_link::io::DEFAULT_HIGH_WATER;
        let mut full = None;
        let views = self
            .legs
            .iter()
            .map(|l| {
                let (open, rtt) = {
                    let g = lock(&l.shared);
                    let rtt = g.sender.snapshot().map_or(0, |s| s.ewma_rtt_usec);
                    (!g.closed && g.sender.can_send(), rtt)
                };
                let blocked = l.chan.writer.queued_bytes() >= hw;
                if open && blocked && full.is_none() {
                    full = Some(l.chan.writer.clone());
                }
                LegView {
                    id: l.id,
                    ready: open && !blocked,
                    cc_rtt_usec: rtt,
                }
            })
            .collect();
        (views, full)
    }

    fn leg(&self, id: LegId) -> Option<&LegLink> {
        self.legs.iter().find(|l| l.id == id)
    }

    /// Send the SWITCH a plan calls for.
    fn switch(&self, plan: SendPlan, stats: &RelayStats) -> bool {
        let Some(rel) = plan.switch else {
            return true;
        };
        let Some(l) = self.leg(plan.leg) else {
            return false;
        };
        stats.conflux_switches_sent.fetch_add(1, Ordering::Relaxed);
        originate_backward(
            &l.shared,
            &l.chan,
            l.circ_id,
            RelayCmd::CONFLUX_SWITCH,
            0,
            &encode_switch(rel),
        )
    }

    /// Send a multiplexed message other than DATA (CONNECTED, END,
    /// RESOLVED, XON, XOFF) on the leg the scheduler picks (the current
    /// one when no leg has room, as tor does). False: the set is closed
    /// or the leg went away.
    pub fn send_msg(&mut self, stats: &RelayStats, cmd: RelayCmd, sid: u16, data: &[u8]) -> bool {
        if self.closed {
            return false;
        }
        let (views, _) = self.views();
        let plan = match self.cfx.choose_send(false, &views) {
            Ok(Some(p)) => p,
            Ok(None) => return false,
            Err(e) => {
                self.fail(&e);
                return false;
            }
        };
        if !self.switch(plan, stats) {
            return false;
        }
        let Some(l) = self.leg(plan.leg) else {
            return false;
        };
        let ok = originate_backward(&l.shared, &l.chan, l.circ_id, cmd, sid, data);
        if ok {
            let _ = self.cfx.note_sent(plan.leg);
        }
        ok
    }

    /// Send one DATA cell on the leg the scheduler picks, if one has room.
    pub fn try_send_data(&mut self, stats: &RelayStats, sid: u16, data: &[u8]) -> DataSend {
        if self.closed {
            return DataSend::Closed;
        }
        let (views, full) = self.views();
        let plan = match self.cfx.choose_send(true, &views) {
            Ok(Some(p)) => p,
            Ok(None) => {
                return match full {
                    Some(w) => DataSend::ChanFull(w),
                    None => DataSend::WindowClosed,
                };
            }
            Err(e) => {
                self.fail(&e);
                return DataSend::Closed;
            }
        };
        if !self.switch(plan, stats) {
            return DataSend::Closed;
        }
        let Some(l) = self.leg(plan.leg) else {
            return DataSend::Closed;
        };
        let r = try_originate_data(&l.shared, &l.chan, l.circ_id, sid, data);
        if matches!(r, DataSend::Sent) {
            let _ = self.cfx.note_sent(plan.leg);
        }
        r
    }

    /// A protocol failure of our own sequence numbers: tear down.
    fn fail(&mut self, e: &ConfluxError) {
        debug!("conflux set failed: {e}");
        self.teardown(e.destroy_reason());
    }

    /// Close the set: every leg's circuit (their reactors send DESTROY
    /// with `reason`), every stream, the reorder queue.
    pub fn teardown(&mut self, reason: u8) {
        if self.closed {
            return;
        }
        self.closed = true;
        for l in self.legs.drain(..) {
            lock(&l.shared).closed = true;
            l.chan.send(RCmd::ConfluxTeardown {
                circ_id: l.circ_id,
                reason,
            });
        }
        for (_, s) in self.streams.drain() {
            s.gate.close();
        }
        let before = self.cfx.ooo_bytes();
        self.cfx.clear_queue();
        self.account_queue(before);
    }

    /// Leg `id` closed with `inflight` cells unacknowledged (SENDME
    /// increment `sendme_inc`): remove it and, by tor's rules, tear the
    /// set down. Returns whether the set is now empty or closed (the pool
    /// should forget it).
    pub fn leg_gone(&mut self, id: LegId, inflight: u64, sendme_inc: u64, reason: u8) -> bool {
        self.legs.retain(|l| l.id != id);
        let teardown = self.cfx.remove_leg(id, inflight, sendme_inc);
        if teardown || self.legs.is_empty() {
            self.teardown(reason);
        }
        self.closed
    }
}
