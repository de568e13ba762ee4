//! Tor-Vegas (proposal 324 §3.3) as tor 0.4.9 runs it: RFC 3742 limited
//! slow start, then once per `CWND_UPDATE_RATE` SENDMEs the queue estimate
//! `cwnd - BDP` (with the congestion-window BDP estimator, `cwnd *
//! min_rtt / ewma_rtt`) is compared with alpha, beta and delta. A blocked
//! channel is an immediate congestion signal. Sans-IO: the caller passes
//! the time of every send and SENDME.

use std::collections::VecDeque;
use std::time::Instant;

use super::params::{CcParams, CcPath, VegasQueue};
use super::rtt::{RttContext, RttEstimator};
use crate::flow::FlowError;

/// Most SENDME-triggering cells in flight whose send times are kept (a
/// window of 2 million cells at the default increment; beyond it nothing
/// more is sent until SENDMEs arrive).
pub const MAX_PENDING_SENDMES: usize = 1 << 16;

/// The state of the channel a circuit sends on, at SENDME time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ChanSignal {
    /// The channel is blocked (its queue is above the high-water mark): a
    /// congestion signal.
    pub blocked: bool,
    /// Cells queued towards the channel (for the stalled-clock estimate).
    pub queued_cells: u64,
}

/// A read-only view of a Vegas instance (status, control-port style).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CcSnapshot {
    /// Congestion window (cells).
    pub cwnd: u64,
    /// Cells sent and not yet acknowledged.
    pub inflight: u64,
    /// In slow start.
    pub in_slow_start: bool,
    /// Smoothed RTT (µs).
    pub ewma_rtt_usec: u64,
    /// Minimum RTT (µs).
    pub min_rtt_usec: u64,
    /// Maximum RTT (µs).
    pub max_rtt_usec: u64,
    /// Current BDP estimate (cells).
    pub bdp: u64,
    /// The negotiated SENDME increment.
    pub sendme_inc: u64,
}

/// Tor-Vegas for one direction of one circuit.
#[derive(Debug, Clone)]
pub struct Vegas {
    q: VegasQueue,
    sendme_inc: u64,
    cwnd_inc_pct_ss: u64,
    cwnd_inc: u64,
    cwnd_inc_rate: u64,
    cwnd_min: u64,
    cwnd_max: u64,
    ss_max: u64,
    full_gap: u64,
    full_minpct: u64,
    full_per_cwnd: bool,
    ewma_cwnd_pct: u64,
    ewma_max: u64,
    ewma_ss: u64,
    rtt_reset_pct: u64,

    cwnd: u64,
    inflight: u64,
    in_slow_start: bool,
    next_cc_event: u64,
    next_cwnd_event: u64,
    cwnd_full: bool,
    blocked_chan: bool,
    bdp: u64,
    rtt: RttEstimator,
    /// Send times of the cells that will trigger SENDMEs, oldest first.
    pending: VecDeque<Instant>,
}

impl Vegas {
    /// A new instance in slow start with the consensus parameters, the
    /// thresholds of `path`, and the negotiated SENDME increment.
    pub fn new(p: &CcParams, path: CcPath, sendme_inc: u8) -> Self {
        let inc = u64::from(sendme_inc.max(1));
        let mut v = Vegas {
            q: p.vegas_queue(path),
            sendme_inc: inc,
            cwnd_inc_pct_ss: p.cwnd_inc_pct_ss.into(),
            cwnd_inc: p.cwnd_inc.into(),
            cwnd_inc_rate: p.cwnd_inc_rate.max(1).into(),
            cwnd_min: p.cwnd_min.into(),
            cwnd_max: p.cwnd_max.into(),
            ss_max: p.ss_max.into(),
            full_gap: p.cwnd_full_gap.into(),
            full_minpct: p.cwnd_full_minpct.into(),
            full_per_cwnd: p.cwnd_full_per_cwnd,
            ewma_cwnd_pct: p.ewma_cwnd_pct.into(),
            ewma_max: p.ewma_max.into(),
            ewma_ss: p.ewma_ss.into(),
            rtt_reset_pct: p.rtt_reset_pct.into(),
            cwnd: p.cwnd_init.into(),
            inflight: 0,
            in_slow_start: true,
            next_cc_event: 0,
            next_cwnd_event: 0,
            cwnd_full: false,
            blocked_chan: false,
            bdp: 0,
            rtt: RttEstimator::default(),
            pending: VecDeque::new(),
        };
        v.next_cc_event = v.cwnd_update_rate();
        v
    }

    /// Congestion window.
    pub fn cwnd(&self) -> u64 {
        self.cwnd
    }
    /// Cells in flight.
    pub fn inflight(&self) -> u64 {
        self.inflight
    }
    /// In slow start.
    pub fn in_slow_start(&self) -> bool {
        self.in_slow_start
    }
    /// The negotiated SENDME increment.
    pub fn sendme_inc(&self) -> u64 {
        self.sendme_inc
    }
    /// The RTT estimator.
    pub fn rtt(&self) -> &RttEstimator {
        &self.rtt
    }
    /// Cells that may be sent now (`cwnd - inflight`, 0 if negative).
    pub fn window(&self) -> u64 {
        self.cwnd.saturating_sub(self.inflight)
    }
    /// Whether one more DATA cell may be sent.
    pub fn can_send(&self) -> bool {
        self.inflight < self.cwnd && self.pending.len() < MAX_PENDING_SENDMES
    }
    /// A snapshot for status output.
    pub fn snapshot(&self) -> CcSnapshot {
        CcSnapshot {
            cwnd: self.cwnd,
            inflight: self.inflight,
            in_slow_start: self.in_slow_start,
            ewma_rtt_usec: self.rtt.ewma_usec,
            min_rtt_usec: self.rtt.min_usec,
            max_rtt_usec: self.rtt.max_usec,
            bdp: self.bdp,
            sendme_inc: self.sendme_inc,
        }
    }

    /// SENDMEs per window, rounded (tor's `SENDME_PER_CWND`).
    fn sendme_per_cwnd(&self) -> u64 {
        (self.cwnd + self.sendme_inc / 2) / self.sendme_inc
    }

    /// SENDMEs between window updates (tor's `CWND_UPDATE_RATE`): every
    /// SENDME in slow start; after it, about `cwnd / (cwnd_inc_rate *
    /// sendme_inc)` (0 means every SENDME too).
    fn cwnd_update_rate(&self) -> u64 {
        if self.in_slow_start {
            1
        } else {
            let d = self.cwnd_inc_rate.saturating_mul(self.sendme_inc).max(1);
            self.cwnd.saturating_add(d / 2) / d
        }
    }

    /// N of the RTT EWMA (tor's `n_ewma_count`).
    fn n_ewma_count(&self) -> u64 {
        let n = if self.in_slow_start {
            self.ewma_ss
        } else {
            (self.cwnd_update_rate().saturating_mul(self.ewma_cwnd_pct) / 100).min(self.ewma_max)
        };
        n.max(2)
    }

    /// RFC 3742 limited slow-start increment (tor's `rfc3742_ss_inc`).
    fn ss_inc(&self) -> u64 {
        let cap = u64::from(self.q.ss_cwnd_cap);
        if self.cwnd <= cap {
            (self.cwnd_inc_pct_ss.saturating_mul(self.sendme_inc) + 50) / 100
        } else {
            ((self.sendme_inc.saturating_mul(cap) + self.cwnd) / (2 * self.cwnd).max(1)).max(1)
        }
    }

    /// Whether the next DATA cell sent will make the other end send a
    /// SENDME (every `sendme_inc`-th cell), so its digest and send time
    /// must be kept.
    pub fn next_triggers_sendme(&self) -> bool {
        (self.inflight + 1).is_multiple_of(self.sendme_inc)
    }

    /// Account for one DATA cell sent at `now`. Returns whether it is a
    /// SENDME-triggering cell.
    pub fn on_sent(&mut self, now: Instant) -> bool {
        let trig = self.next_triggers_sendme();
        self.inflight = self.inflight.saturating_add(1);
        if trig {
            self.pending.push_back(now);
        }
        trig
    }

    /// Update RTT and BDP (tor's `congestion_control_update_circuit_
    /// estimates`). Returns whether the algorithm should run this time.
    fn update_estimates(&mut self, now: Instant, chan: ChanSignal) -> bool {
        let sent = self.pending.pop_front().unwrap_or(now);
        let rtt =
            u64::try_from(now.saturating_duration_since(sent).as_micros()).unwrap_or(u64::MAX);
        let ctx = RttContext {
            in_slow_start: self.in_slow_start,
            ewma_n: self.n_ewma_count(),
            at_cwnd_min: self.cwnd == self.cwnd_min,
            rtt_reset_pct: self.rtt_reset_pct,
        };
        let curr = self.rtt.update(rtt, ctx);
        if self.rtt.ewma_usec == 0 {
            // The clock stalled for the whole life of the circuit: take the
            // window (less what sits in the channel queue if it is blocked)
            // as the BDP.
            let mut cwnd = self.cwnd;
            if chan.blocked {
                cwnd = if chan.queued_cells >= cwnd {
                    self.cwnd_min
                } else {
                    (cwnd - chan.queued_cells).max(self.cwnd_min)
                };
                self.blocked_chan = true;
            } else {
                self.blocked_chan = false;
            }
            self.bdp = cwnd;
            return chan.blocked;
        }
        self.bdp = self.cwnd.saturating_mul(self.rtt.min_usec) / self.rtt.ewma_usec.max(1);
        if chan.blocked {
            // A newly blocked channel is an immediate congestion event.
            if !self.blocked_chan {
                self.next_cc_event = 0;
                self.blocked_chan = true;
            }
        } else if self.blocked_chan {
            // Unblocked: re-evaluate now.
            self.blocked_chan = false;
            self.next_cc_event = 0;
        }
        chan.blocked || curr != 0
    }

    /// Handle a circuit-level SENDME (already authenticated by the caller)
    /// arriving at `now` (tor's `congestion_control_vegas_process_sendme`).
    pub fn on_sendme(&mut self, now: Instant, chan: ChanSignal) -> Result<(), FlowError> {
        if self.inflight < self.sendme_inc || self.pending.is_empty() {
            return Err(FlowError::UnexpectedSendme);
        }
        self.next_cc_event = self.next_cc_event.saturating_sub(1);
        self.next_cwnd_event = self.next_cwnd_event.saturating_sub(1);
        if !self.update_estimates(now, chan) {
            self.inflight -= self.sendme_inc;
            return Ok(());
        }
        let queue_use = self.cwnd.saturating_sub(self.bdp);
        if self.inflight + self.full_gap.saturating_mul(self.sendme_inc) >= self.cwnd {
            self.cwnd_full = true;
        } else if 100 * self.inflight < self.full_minpct.saturating_mul(self.cwnd) {
            self.cwnd_full = false;
        }
        let (alpha, beta, gamma, delta) = (
            u64::from(self.q.alpha),
            u64::from(self.q.beta),
            u64::from(self.q.gamma),
            u64::from(self.q.delta),
        );
        if self.in_slow_start {
            if queue_use < gamma && !self.blocked_chan {
                // Grow only while the window is in use.
                if self.cwnd_full {
                    let inc = self.ss_inc();
                    self.cwnd = self.cwnd.saturating_add(inc);
                    // Slower than steady state would be: leave slow start.
                    if inc.saturating_mul(self.sendme_per_cwnd())
                        <= self.cwnd_inc.saturating_mul(self.cwnd_inc_rate)
                    {
                        self.in_slow_start = false;
                    }
                }
            } else {
                // Congestion signal: down to the gamma threshold.
                self.cwnd = self.bdp.saturating_add(gamma);
                self.in_slow_start = false;
            }
            if self.cwnd >= self.ss_max {
                self.cwnd = self.ss_max;
                self.in_slow_start = false;
            }
        } else if self.next_cc_event == 0 {
            if queue_use > delta {
                self.cwnd = self.bdp.saturating_add(delta).saturating_sub(self.cwnd_inc);
            } else if queue_use > beta || self.blocked_chan {
                self.cwnd = self.cwnd.saturating_sub(self.cwnd_inc);
            } else if self.cwnd_full && queue_use < alpha {
                self.cwnd = self.cwnd.saturating_add(self.cwnd_inc);
            }
            self.cwnd = self.cwnd.max(self.cwnd_min);
        }
        if self.next_cwnd_event == 0 {
            self.next_cwnd_event = self.sendme_per_cwnd();
        }
        if self.next_cc_event == 0 {
            self.next_cc_event = self.cwnd_update_rate();
        }
        let reset_full = if self.full_per_cwnd {
            self.next_cwnd_event == self.sendme_per_cwnd()
        } else {
            self.next_cc_event == self.cwnd_update_rate()
        };
        if reset_full {
            self.cwnd_full = false;
        }
        self.inflight -= self.sendme_inc;
        self.cwnd = self.cwnd.min(self.cwnd_max);
        Ok(())
    }
}

#[cfg(test)]
mod tests;
