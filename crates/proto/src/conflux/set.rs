//! One conflux set: legs and sequence numbers, the reorder queue, the
//! choice of sending leg with its SWITCH, and leg removal.

use std::collections::BTreeMap;
use std::time::Instant;

use onionmix_cell::relay::ConfluxLink;

use super::{Alg, ConfluxError, LegId, alg_for_ux};

/// One leg as the set sees it.
#[derive(Debug, Clone)]
struct Leg {
    id: LegId,
    /// Absolute sequence number of the last multiplexed message received
    /// on this leg.
    last_seq_recv: u64,
    /// ... and sent on it.
    last_seq_sent: u64,
    /// RTT measured by the link handshake (µs; 0: not measured).
    link_rtt_usec: u64,
    /// When we sent CONFLUX_LINKED on it (exit side), to time the
    /// LINKED_ACK.
    linked_sent: Option<Instant>,
    /// The LINKED_ACK arrived.
    acked: bool,
}

/// What the sender knows about a leg when choosing where to send: taken
/// from the leg's congestion control and channel.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LegView {
    /// The leg.
    pub id: LegId,
    /// Room in its congestion window (`inflight < cwnd`) and its channel
    /// not blocked (tor's `circuit_ready_to_send`).
    pub ready: bool,
    /// Its congestion control's smoothed RTT (µs; 0 before the first
    /// SENDME). Once measured, it replaces the link handshake's RTT, as
    /// tor's `conflux_update_rtt` does.
    pub cc_rtt_usec: u64,
}

/// Where the next multiplexed message goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendPlan {
    /// The leg to send it on.
    pub leg: LegId,
    /// A SWITCH with this relative sequence number must go on that leg
    /// first.
    pub switch: Option<u32>,
}

/// A conflux set at either end. `T` is what the reorder queue holds (the
/// driver's copy of a multiplexed message).
#[derive(Debug)]
pub struct ConfluxSet<T> {
    legs: Vec<Leg>,
    last_seq_delivered: u64,
    ooo: BTreeMap<u64, (T, usize)>,
    ooo_bytes: usize,
    max_ooo_bytes: usize,
    curr: Option<LegId>,
    prev: Option<LegId>,
    alg: Alg,
    max_legs: usize,
}

impl<T> ConfluxSet<T> {
    /// Bytes the reorder queue may hold.
    pub fn max_ooo_bytes(&self) -> usize {
        self.max_ooo_bytes
    }

    /// An empty set accepting at most `max_legs` legs and `max_ooo_bytes`
    /// queued out of order.
    pub fn new(max_legs: usize, max_ooo_bytes: usize) -> Self {
        ConfluxSet {
            legs: Vec::new(),
            last_seq_delivered: 0,
            ooo: BTreeMap::new(),
            ooo_bytes: 0,
            max_ooo_bytes,
            curr: None,
            prev: None,
            alg: Alg::LowRtt,
            max_legs,
        }
    }

    /// Number of legs.
    pub fn n_legs(&self) -> usize {
        self.legs.len()
    }
    /// Whether the set has no leg left.
    pub fn is_empty(&self) -> bool {
        self.legs.is_empty()
    }
    /// The legs, in the order they linked.
    pub fn leg_ids(&self) -> impl Iterator<Item = LegId> + '_ {
        self.legs.iter().map(|l| l.id)
    }
    /// Whether `id` is a leg.
    pub fn has_leg(&self, id: LegId) -> bool {
        self.legs.iter().any(|l| l.id == id)
    }
    /// Our sending algorithm (chosen from the peer's DESIRED_UX).
    pub fn alg(&self) -> Alg {
        self.alg
    }
    /// The leg the last multiplexed message went on.
    pub fn current_leg(&self) -> Option<LegId> {
        self.curr
    }
    /// Sequence number of the last message delivered in order.
    pub fn last_seq_delivered(&self) -> u64 {
        self.last_seq_delivered
    }
    /// Bytes waiting in the reorder queue (with per-message overhead).
    pub fn ooo_bytes(&self) -> usize {
        self.ooo_bytes
    }
    /// Messages waiting in the reorder queue.
    pub fn ooo_len(&self) -> usize {
        self.ooo.len()
    }
    /// The link handshake's RTT of a leg (µs; 0 if not measured).
    pub fn link_rtt(&self, id: LegId) -> Option<u64> {
        self.leg(id).map(|l| l.link_rtt_usec)
    }

    fn leg(&self, id: LegId) -> Option<&Leg> {
        self.legs.iter().find(|l| l.id == id)
    }
    fn leg_mut(&mut self, id: LegId) -> Result<&mut Leg, ConfluxError> {
        self.legs
            .iter_mut()
            .find(|l| l.id == id)
            .ok_or(ConfluxError::UnknownLeg)
    }

    /// The highest sequence number sent on any leg.
    pub fn max_seq_sent(&self) -> u64 {
        self.legs.iter().map(|l| l.last_seq_sent).max().unwrap_or(0)
    }
    /// The highest sequence number received on any leg.
    pub fn max_seq_recv(&self) -> u64 {
        self.legs.iter().map(|l| l.last_seq_recv).max().unwrap_or(0)
    }

    /// Add a leg whose peer sent `link` (a LINK at the exit, a LINKED at
    /// the client). The peer's sequence numbers seed the leg's (tor's
    /// `cfx_add_leg`); its DESIRED_UX sets our sending algorithm.
    /// `linked_sent` is when the exit answered LINKED (its RTT is taken
    /// at the LINKED_ACK); `link_rtt_usec` is the client's measurement of
    /// LINK to LINKED.
    pub fn add_leg(
        &mut self,
        id: LegId,
        link: &ConfluxLink,
        linked_sent: Option<Instant>,
        link_rtt_usec: u64,
    ) -> Result<(), ConfluxError> {
        if self.has_leg(id) {
            return Err(ConfluxError::DuplicateLeg);
        }
        if self.legs.len() >= self.max_legs {
            return Err(ConfluxError::TooManyLegs);
        }
        // The peer sent more than we delivered: that data went down with
        // a closed leg and cannot be recovered.
        if link.last_seqno_sent > self.last_seq_delivered {
            return Err(ConfluxError::DataLoss);
        }
        self.alg = alg_for_ux(link.desired_ux);
        self.legs.push(Leg {
            id,
            last_seq_recv: link.last_seqno_sent,
            last_seq_sent: link.last_seqno_recv,
            link_rtt_usec,
            linked_sent,
            acked: false,
        });
        Ok(())
    }

    /// A LINKED_ACK on leg `id` at `now` (exit side): its RTT is the time
    /// since our LINKED. Returns it in µs (0 if the clock did not move:
    /// the leg stays unmeasured, as tor treats a stalled clock).
    pub fn on_linked_ack(&mut self, id: LegId, now: Instant) -> Result<u64, ConfluxError> {
        let leg = self.leg_mut(id)?;
        if leg.acked {
            return Err(ConfluxError::DuplicateLinkedAck);
        }
        leg.acked = true;
        let rtt = leg
            .linked_sent
            .map(|t| now.saturating_duration_since(t).as_micros())
            .map(|us| u64::try_from(us).unwrap_or(u64::MAX))
            .unwrap_or(0);
        leg.link_rtt_usec = rtt;
        Ok(rtt)
    }

    /// A SWITCH on leg `id`: the messages that follow on it are numbered
    /// from `relative_seq` past its last one (the SWITCH itself has no
    /// number).
    pub fn on_switch(&mut self, id: LegId, relative_seq: u32) -> Result<(), ConfluxError> {
        let leg = self.leg_mut(id)?;
        leg.last_seq_recv = leg
            .last_seq_recv
            .checked_add(u64::from(relative_seq))
            .ok_or(ConfluxError::SeqOverflow)?;
        Ok(())
    }

    /// A multiplexed message arrived on leg `id`. `Some(item)`: it is the
    /// next in order, deliver it now (then call [`Self::pop_ready`] until
    /// it returns `None`). `None`: it waits in the reorder queue, charged
    /// `cost` bytes.
    pub fn on_msg(&mut self, id: LegId, item: T, cost: usize) -> Result<Option<T>, ConfluxError> {
        let delivered = self.last_seq_delivered;
        let leg = self.leg_mut(id)?;
        let seq = leg
            .last_seq_recv
            .checked_add(1)
            .ok_or(ConfluxError::SeqOverflow)?;
        leg.last_seq_recv = seq;
        if delivered.checked_add(1) == Some(seq) {
            self.last_seq_delivered = seq;
            return Ok(Some(item));
        }
        if seq <= delivered {
            return Err(ConfluxError::SeqBehind);
        }
        if self.ooo.contains_key(&seq) {
            return Err(ConfluxError::DuplicateSeq);
        }
        let bytes = self.ooo_bytes.saturating_add(cost);
        if bytes > self.max_ooo_bytes {
            return Err(ConfluxError::ReorderQueueFull {
                bytes: self.ooo_bytes,
                max: self.max_ooo_bytes,
            });
        }
        self.ooo_bytes = bytes;
        self.ooo.insert(seq, (item, cost));
        Ok(None)
    }

    /// Whether the next multiplexed message on leg `id` would be
    /// delivered at once (not queued).
    pub fn would_deliver(&self, id: LegId) -> bool {
        self.leg(id).is_some_and(|l| {
            l.last_seq_recv.checked_add(1) == self.last_seq_delivered.checked_add(1)
        })
    }

    /// The next queued message if it is the next in order.
    pub fn pop_ready(&mut self) -> Option<T> {
        let next = self.last_seq_delivered.checked_add(1)?;
        let (&seq, _) = self.ooo.first_key_value()?;
        if seq != next {
            return None;
        }
        let (item, cost) = self.ooo.remove(&seq)?;
        self.ooo_bytes = self.ooo_bytes.saturating_sub(cost);
        self.last_seq_delivered = seq;
        Some(item)
    }

    /// Empty the reorder queue (the set is closing), returning what it
    /// held in bytes.
    pub fn clear_queue(&mut self) -> usize {
        self.ooo.clear();
        std::mem::take(&mut self.ooo_bytes)
    }

    /// The RTT the scheduler uses for a leg: congestion control's once it
    /// measured one, else the link handshake's.
    fn rtt(&self, leg: &Leg, views: &[LegView]) -> u64 {
        match views.iter().find(|v| v.id == leg.id) {
            Some(v) if v.cc_rtt_usec > 0 => v.cc_rtt_usec,
            _ => leg.link_rtt_usec,
        }
    }
    fn ready(id: LegId, views: &[LegView]) -> bool {
        views.iter().any(|v| v.id == id && v.ready)
    }

    /// tor's `conflux_pick_first_leg`: the lowest measured RTT, else the
    /// first leg.
    fn pick_first_leg(&self, views: &[LegView]) -> Option<LegId> {
        self.legs
            .iter()
            .filter_map(|l| Some((self.rtt(l, views), l.id)).filter(|(r, _)| *r > 0))
            .min()
            .map(|(_, id)| id)
            .or_else(|| self.legs.first().map(|l| l.id))
    }

    /// The leg the algorithm wants next, if it can send.
    fn decide(&self, views: &[LegView]) -> Option<LegId> {
        // Legs without an RTT are skipped: at the exit a BEGIN may beat
        // the slower leg's LINKED_ACK.
        let measured = self
            .legs
            .iter()
            .map(|l| (self.rtt(l, views), l.id))
            .filter(|(r, _)| *r > 0);
        match self.alg {
            Alg::MinRtt => measured
                .min()
                .map(|(_, id)| id)
                .filter(|id| Self::ready(*id, views)),
            Alg::LowRtt => measured
                .filter(|(_, id)| Self::ready(*id, views))
                .min()
                .map(|(_, id)| id),
        }
    }

    /// Choose the leg for the next multiplexed message (`is_data`: a DATA
    /// cell, which needs room in the leg's window; other commands go on
    /// the current leg when no leg has room, as tor does, since nothing
    /// limits them). Switching legs is committed here: the plan's SWITCH
    /// must be sent on the new leg before the message. `Ok(None)`: no leg
    /// can take DATA now; wait for a SENDME.
    pub fn choose_send(
        &mut self,
        is_data: bool,
        views: &[LegView],
    ) -> Result<Option<SendPlan>, ConfluxError> {
        if self.curr.is_none() {
            self.curr = self.pick_first_leg(views);
        }
        let curr = self.curr.ok_or(ConfluxError::NoLeg)?;
        let next = match self.decide(views) {
            Some(n) => n,
            None if is_data => return Ok(None),
            None => curr,
        };
        if next == curr {
            return Ok(Some(SendPlan {
                leg: curr,
                switch: None,
            }));
        }
        let prev_sent = self.leg(curr).ok_or(ConfluxError::NoLeg)?.last_seq_sent;
        let leg = self.leg_mut(next)?;
        if leg.last_seq_sent > prev_sent {
            return Err(ConfluxError::Incoherent);
        }
        let relative = u32::try_from(prev_sent - leg.last_seq_sent)
            .ok()
            .filter(|r| *r < u32::MAX)
            .ok_or(ConfluxError::SwitchTooLarge)?;
        leg.last_seq_sent = prev_sent;
        self.prev = Some(curr);
        self.curr = Some(next);
        Ok(Some(SendPlan {
            leg: next,
            switch: Some(relative),
        }))
    }

    /// A multiplexed message went out on leg `id`.
    pub fn note_sent(&mut self, id: LegId) -> Result<(), ConfluxError> {
        let leg = self.leg_mut(id)?;
        leg.last_seq_sent = leg
            .last_seq_sent
            .checked_add(1)
            .ok_or(ConfluxError::SeqOverflow)?;
        Ok(())
    }

    /// Leg `id` closed; `inflight` cells of it were unacknowledged, its
    /// SENDME increment was `sendme_inc`. Returns whether the whole set
    /// must close (tor's `cfx_del_leg`, since nothing is retransmitted):
    /// data was in flight on it, it carried the highest sequence number
    /// either way, or it was the leg we were sending on.
    pub fn remove_leg(&mut self, id: LegId, inflight: u64, sendme_inc: u64) -> bool {
        let Some(idx) = self.legs.iter().position(|l| l.id == id) else {
            return false;
        };
        let leg = self.legs.remove(idx);
        let mut teardown = inflight >= sendme_inc;
        if !self.legs.is_empty()
            && (self.max_seq_sent() < leg.last_seq_sent || self.max_seq_recv() < leg.last_seq_recv)
        {
            teardown = true;
        }
        if self.curr == Some(id) {
            self.curr = None;
            teardown = true;
        }
        if self.prev == Some(id) {
            self.prev = None;
        }
        teardown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionmix_cell::relay::Nonce;

    #[test]
    fn sequence_numbers_never_wrap() {
        let link = ConfluxLink {
            nonce: Nonce([0; 32]),
            last_seqno_sent: 0,
            last_seqno_recv: 0,
            desired_ux: 0,
        };
        let mut s: ConfluxSet<()> = ConfluxSet::new(2, 10);
        s.add_leg(1, &link, None, 0).unwrap();
        s.legs[0].last_seq_recv = u64::MAX - 5;
        assert_eq!(s.on_switch(1, 10), Err(ConfluxError::SeqOverflow));
        s.legs[0].last_seq_recv = u64::MAX;
        assert_eq!(s.on_msg(1, (), 1), Err(ConfluxError::SeqOverflow));
        s.legs[0].last_seq_sent = u64::MAX;
        assert_eq!(s.note_sent(1), Err(ConfluxError::SeqOverflow));
        // A switch whose gap does not fit 32 bits (tor refuses to send
        // one of 2^32 - 1 or more).
        s.add_leg(2, &link, None, 5).unwrap();
        s.curr = Some(1);
        s.legs[0].link_rtt_usec = 10;
        s.legs[0].last_seq_sent = u64::from(u32::MAX);
        let v = [
            LegView {
                id: 1,
                ready: false,
                cc_rtt_usec: 0,
            },
            LegView {
                id: 2,
                ready: true,
                cc_rtt_usec: 0,
            },
        ];
        assert_eq!(s.choose_send(true, &v), Err(ConfluxError::SwitchTooLarge));
        s.legs[0].last_seq_sent = u64::from(u32::MAX) - 1;
        assert_eq!(
            s.choose_send(true, &v),
            Ok(Some(SendPlan {
                leg: 2,
                switch: Some(u32::MAX - 1)
            }))
        );
    }
}
