//! Conflux messages on circuits that end here: CONFLUX_LINK (join a set,
//! answer LINKED), LINKED_ACK, SWITCH, and the multiplexed stream
//! messages of a leg, which belong to its set (`relay::conflux`).

use super::streams::{StreamHost, stream_action};
use super::*;
use crate::relay::RelayCtx;
use crate::relay::conflux::{ExitSet, LegLink, Queued, SetInner};
use crate::relay::exit::StreamPath;
use onionmix_cell::relay::{ConfluxLink, RelayMsg};
use onionmix_proto::conflux::{ConfluxError, EXIT_UX, LegId};
use onionmix_proto::relay_circ::ExitStreams;

/// An origin circuit's place in a conflux set.
pub(crate) struct LegRef {
    set: Arc<ExitSet>,
    id: LegId,
}

/// A conflux set's streams, for [`StreamHost`].
pub(crate) struct SetHost<'a> {
    pub(crate) set: &'a Arc<ExitSet>,
    pub(crate) inner: &'a mut SetInner,
    pub(crate) ctx: &'a RelayCtx,
}

impl StreamHost for SetHost<'_> {
    fn txs(&mut self) -> &mut HashMap<u16, StreamTx> {
        &mut self.inner.streams
    }
    fn flow(&mut self) -> &mut ExitStreams {
        &mut self.inner.flow
    }
    fn send(&mut self, cmd: RelayCmd, sid: u16, data: &[u8]) {
        self.inner.send_msg(&self.ctx.stats, cmd, sid, data);
    }
    fn path(&self) -> StreamPath {
        StreamPath::Set(self.set.clone())
    }
    fn is_cc(&self) -> bool {
        // Every leg negotiated congestion control.
        true
    }
    fn reorder_burst(&self) -> usize {
        reorder_burst(self.inner.cfx.max_ooo_bytes())
    }
}

/// DATA messages a reorder queue of `max_ooo_bytes` hands over at once when
/// its gap fills: as many as its byte budget can charge (each message
/// costs its length plus `QUEUED_MSG_OVERHEAD`, and is at least 1 byte).
pub(crate) fn reorder_burst(max_ooo_bytes: usize) -> usize {
    max_ooo_bytes / (1 + onionmix_proto::conflux::QUEUED_MSG_OVERHEAD)
}

impl Reactor {
    /// Close an origin circuit with DESTROY `reason` towards the client.
    pub(super) fn close_origin(&mut self, id: u32, reason: u8) {
        if self.origins.contains_key(&id) {
            self.drop_origin(id, false);
            self.send_destroy(id, reason);
        }
    }

    /// Close circuit `id` after a conflux error in `set` (the whole set
    /// when the error calls for it).
    fn conflux_error(&mut self, id: u32, set: &Arc<ExitSet>, e: &ConfluxError) {
        debug!("conflux: closing a leg: {e}");
        if e.closes_set() {
            set.lock().teardown(e.destroy_reason());
        }
        self.close_origin(id, e.destroy_reason());
    }

    /// CONFLUX_LINK on circuit `id` (the circuit machine checked that it
    /// ends here, runs congestion control, has no streams and saw no LINK
    /// before): join or create the set, answer CONFLUX_LINKED. The leg is
    /// linked as soon as LINKED is sent, as tor's exit does, because the
    /// client's first BEGIN may overtake its LINKED_ACK.
    pub(super) fn conflux_link(&mut self, id: u32, link: ConfluxLink) {
        let ctx = self.ctx.clone();
        let stats = &ctx.stats;
        let cfx = ctx.cfx_params();
        if !self.ctx.cfg.conflux || !cfx.enabled {
            debug!("conflux: CONFLUX_LINK while conflux is off");
            stats.conflux_refused.fetch_add(1, Ordering::Relaxed);
            self.close_origin(id, destroy_reason::PROTOCOL);
            return;
        }
        let Some(o) = self.origins.get(&id) else {
            return;
        };
        let (shared, params) = (o.shared.clone(), o.params.clone());
        let leg_id = ctx.conflux.next_leg_id();
        let max_ooo = ctx
            .cfg
            .conflux_max_ooo_bytes
            .min(usize::try_from(cfx.max_oooq_bytes).unwrap_or(usize::MAX));
        let (set, new) =
            ctx.conflux
                .get_or_create(link.nonce, cfx.max_legs_set.into(), max_ooo, params);
        let mut g = set.lock();
        let (max_sent, delivered) = (g.cfx.max_seq_sent(), g.cfx.last_seq_delivered());
        if let Err(e) = g.cfx.add_leg(leg_id, &link, Some(Instant::now()), 0) {
            stats.conflux_refused.fetch_add(1, Ordering::Relaxed);
            let forget = new || e.closes_set() || g.n_legs() == 0;
            drop(g);
            if forget {
                ctx.conflux.remove(&set);
            }
            self.conflux_error(id, &set, &e);
            return;
        }
        g.push_leg(LegLink {
            id: leg_id,
            shared: shared.clone(),
            chan: self.me.clone(),
            circ_id: id,
        });
        let reply = ConfluxLink {
            nonce: link.nonce,
            last_seqno_sent: max_sent,
            last_seqno_recv: delivered,
            desired_ux: EXIT_UX,
        };
        // LINKED goes out before anything the set may send on this leg:
        // the set's lock is held until it is queued.
        let pending = self.out.split();
        self.me.writer.send_now(pending);
        originate_backward(
            &shared,
            &self.me,
            id,
            RelayCmd::CONFLUX_LINKED,
            0,
            &reply.encode(),
        );
        drop(g);
        stats.conflux_legs_linked.fetch_add(1, Ordering::Relaxed);
        if new {
            stats.conflux_sets.fetch_add(1, Ordering::Relaxed);
        }
        debug!(
            "conflux: linked a leg ({} set)",
            if new { "new" } else { "existing" }
        );
        if let Some(o) = self.origins.get_mut(&id) {
            o.circ.set_conflux_leg();
            o.window_open = set.window_open.clone();
            o.leg = Some(LegRef {
                set: set.clone(),
                id: leg_id,
            });
        }
        set.window_open.notify_waiters();
    }

    fn leg_of(&self, id: u32) -> Option<(Arc<ExitSet>, LegId)> {
        let l = self.origins.get(&id)?.leg.as_ref()?;
        Some((l.set.clone(), l.id))
    }

    /// CONFLUX_LINKED_ACK: the leg's RTT, for the scheduler.
    pub(super) fn conflux_linked_ack(&mut self, id: u32) {
        let Some((set, leg)) = self.leg_of(id) else {
            return;
        };
        let r = set.lock().cfx.on_linked_ack(leg, Instant::now());
        match r {
            Ok(rtt) => {
                trace!("conflux: leg RTT {rtt} us");
                set.window_open.notify_waiters();
            }
            Err(e) => self.conflux_error(id, &set, &e),
        }
    }

    /// CONFLUX_SWITCH: the leg's next messages are numbered from `seq`
    /// past its last one.
    pub(super) fn conflux_switch(&mut self, id: u32, seq: u32) {
        let Some((set, leg)) = self.leg_of(id) else {
            return;
        };
        self.ctx
            .stats
            .conflux_switches_received
            .fetch_add(1, Ordering::Relaxed);
        let r = set.lock().cfx.on_switch(leg, seq);
        if let Err(e) = r {
            self.conflux_error(id, &set, &e);
        }
    }

    /// A stream message on a leg: sequence it (unless it is BEGIN_DIR),
    /// then act on every message now in order, all under the set's lock.
    pub(super) fn conflux_msg(
        &mut self,
        id: u32,
        cmd: RelayCmd,
        stream: u16,
        data: &[u8],
        sequenced: bool,
    ) {
        let Some((set, leg)) = self.leg_of(id) else {
            return;
        };
        let q = Queued {
            cmd,
            stream,
            data: Bytes::copy_from_slice(data),
            from_client: self.me.peer.is_none(),
        };
        let ctx = self.ctx.clone();
        let mut g = set.lock();
        if g.closed {
            return;
        }
        let mut ready = Vec::new();
        if sequenced {
            if let Err(e) = g.on_msg(leg, q, &mut ready) {
                drop(g);
                self.conflux_error(id, &set, &e);
                return;
            }
            if ready.is_empty() {
                ctx.stats
                    .conflux_cells_reordered
                    .fetch_add(1, Ordering::Relaxed);
            }
        } else {
            ready.push(q);
        }
        for q in ready {
            ctx.stats
                .conflux_cells_delivered
                .fetch_add(1, Ordering::Relaxed);
            // It parsed when it arrived.
            let Ok(msg) = RelayMsg::parse(q.cmd, &q.data) else {
                continue;
            };
            let action = match g.flow.handle(q.stream, msg) {
                Ok(a) => a,
                Err(e) => {
                    debug!("conflux: stream protocol error ({e}); closing the set");
                    g.teardown(destroy_reason::PROTOCOL);
                    return;
                }
            };
            let mut host = SetHost {
                set: &set,
                inner: &mut g,
                ctx: &ctx,
            };
            if stream_action(&ctx, &mut host, action, q.from_client) {
                g.teardown(destroy_reason::RESOURCELIMIT);
                return;
            }
            if g.closed {
                return;
            }
        }
    }

    /// A leg's circuit is gone: take it out of its set, which tor's rules
    /// may tear down (the other legs are then closed too).
    pub(super) fn conflux_leg_gone(&mut self, shared: &SharedCirc, leg: LegRef) {
        let (inflight, inc) = lock(shared)
            .sender
            .snapshot()
            .map_or((0, 1), |s| (s.inflight, s.sendme_inc));
        let forget = leg
            .set
            .lock()
            .leg_gone(leg.id, inflight, inc, destroy_reason::FINISHED);
        if forget {
            self.ctx.conflux.remove(&leg.set);
        }
        leg.set.window_open.notify_waiters();
    }
}

/// An exit stream of `set` wrote `cells` cells (`bytes` bytes) to its
/// target.
pub(crate) fn set_stream_drained(
    ctx: &RelayCtx,
    set: &Arc<ExitSet>,
    sid: u16,
    cells: u32,
    bytes: usize,
) {
    let mut g = set.lock();
    let mut host = SetHost {
        set,
        inner: &mut g,
        ctx,
    };
    super::streams::stream_drained(ctx, &mut host, sid, cells, bytes);
}

/// An exit stream of `set` ended from our side.
pub(crate) fn set_stream_closed(ctx: &RelayCtx, set: &Arc<ExitSet>, sid: u16) {
    let mut g = set.lock();
    let mut host = SetHost {
        set,
        inner: &mut g,
        ctx,
    };
    super::streams::stream_closed(&mut host, sid);
}

#[cfg(test)]
mod tests {
    use super::reorder_burst;
    use onionmix_proto::conflux::QUEUED_MSG_OVERHEAD;

    #[test]
    fn a_stream_on_a_set_takes_a_full_reorder_queue_at_once() {
        // However the client sized its DATA cells, everything a full
        // reorder queue releases fits the stream's queue on top of what
        // flow control allows (which is `STREAM_QUEUE` alone).
        let budget = 8 << 20;
        for len in [1usize, 2, 100, 498] {
            let held = budget / (len + QUEUED_MSG_OVERHEAD);
            assert!(held <= reorder_burst(budget), "{len}-byte cells");
        }
        assert_eq!(reorder_burst(0), 0);
    }
}
