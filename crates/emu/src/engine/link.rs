//! One emulated link: its parameters, loss (Bernoulli or Gilbert-Elliott), jitter, token-bucket rate and queue.

use super::{LinkCounters, LinkInfo, Nanos};
use crate::profile::{JitterDist, LinkProfile};
use crate::rng::{Rng, derive_seed};
use std::collections::VecDeque;

#[derive(Debug, Clone)]
struct Params {
    delay: Nanos,
    jitter: Nanos,
    dist: JitterDist,
    loss: f64,
    ge: Option<crate::profile::GilbertElliott>,
    /// Bytes per nanosecond.
    rate: Option<f64>,
    burst: f64,
    queue_limit: u64,
    reorder: Option<(f64, Nanos)>,
    drop_udp: bool,
}

fn ms_to_ns(ms: f64) -> Nanos {
    (ms * 1e6).round().max(0.0) as Nanos
}

impl Params {
    fn from_profile(p: &LinkProfile) -> Self {
        Params {
            delay: ms_to_ns(p.delay_ms),
            jitter: ms_to_ns(p.jitter_ms),
            dist: p.jitter_dist,
            loss: p.loss,
            ge: p.gilbert_elliott,
            rate: p.rate_mbit.map(|r| r * 1e6 / 8.0 / 1e9),
            burst: f64::from(p.effective_burst_bytes()),
            queue_limit: p.effective_queue_bytes(),
            reorder: p
                .reorder
                .map(|r| (r.probability, ms_to_ns(r.extra_delay_ms))),
            drop_udp: p.drop_udp,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Drop {
    Loss,
    Burst,
    Queue,
    /// A UDP datagram on a link that blocks UDP.
    Udp,
}

pub(super) struct Link {
    pub(super) info: LinkInfo,
    p: Params,
    loss_rng: Rng,
    jitter_rng: Rng,
    reorder_rng: Rng,
    ge_bad: bool,
    /// Jitter process: (time of knot a, value a, value b at a + tau).
    knots: Option<(Nanos, f64, f64)>,
    tokens: f64,
    tokens_at: Nanos,
    last_depart: Nanos,
    queue: VecDeque<(Nanos, u32)>,
    pub(super) queue_bytes: u64,
    last_out: Nanos,
    pub(super) c: LinkCounters,
}

impl Link {
    pub(super) fn new(info: LinkInfo, profile: &LinkProfile, seed: u64) -> Self {
        let label = info.label();
        let p = Params::from_profile(profile);
        Link {
            loss_rng: Rng::new(derive_seed(seed, &format!("{label}/loss"))),
            jitter_rng: Rng::new(derive_seed(seed, &format!("{label}/jitter"))),
            reorder_rng: Rng::new(derive_seed(seed, &format!("{label}/reorder"))),
            info,
            tokens: p.burst,
            p,
            ge_bad: false,
            knots: None,
            tokens_at: 0,
            last_depart: 0,
            queue: VecDeque::new(),
            queue_bytes: 0,
            last_out: 0,
            c: LinkCounters::default(),
        }
    }

    fn lose(&mut self) -> Option<Drop> {
        if let Some(ge) = &self.p.ge {
            if self.ge_bad {
                if self.loss_rng.chance(ge.r) {
                    self.ge_bad = false;
                }
            } else if self.loss_rng.chance(ge.p) {
                self.ge_bad = true;
            }
            let pl = if self.ge_bad {
                ge.loss_bad
            } else {
                ge.loss_good
            };
            if self.loss_rng.chance(pl) {
                return Some(Drop::Burst);
            }
            None
        } else if self.p.loss > 0.0 && self.loss_rng.chance(self.p.loss) {
            Some(Drop::Loss)
        } else {
            None
        }
    }

    /// Token bucket with a drop-tail byte queue in front. Returns the time
    /// the packet leaves the bucket.
    fn shape(&mut self, t: Nanos, len: u32) -> Result<Nanos, Drop> {
        let Some(rate) = self.p.rate else {
            return Ok(t);
        };
        while let Some(&(d, l)) = self.queue.front() {
            if d > t {
                break;
            }
            self.queue.pop_front();
            self.queue_bytes -= u64::from(l);
        }
        if self.queue_bytes + u64::from(len) > self.p.queue_limit && !self.queue.is_empty() {
            return Err(Drop::Queue);
        }
        let burst = self.p.burst.max(f64::from(len));
        let t0 = t.max(self.last_depart);
        let avail = (self.tokens + (t0 - self.tokens_at) as f64 * rate).min(burst);
        let need = f64::from(len);
        let depart = if avail >= need {
            t0
        } else {
            t0 + ((need - avail) / rate).ceil() as Nanos
        };
        let at_depart = (avail + (depart - t0) as f64 * rate).min(burst);
        self.tokens = (at_depart - need).max(0.0);
        self.tokens_at = depart;
        self.last_depart = depart;
        if depart > t {
            self.queue.push_back((depart, len));
            self.queue_bytes += u64::from(len);
            self.c.queue_hwm_bytes = self.c.queue_hwm_bytes.max(self.queue_bytes);
        }
        Ok(depart)
    }

    fn sample_jitter(&mut self) -> f64 {
        let j = self.p.jitter as f64;
        match self.p.dist {
            JitterDist::Uniform => (2.0 * self.jitter_rng.next_f64() - 1.0) * j,
            JitterDist::Normal => {
                let mut v = 0.0;
                for _ in 0..32 {
                    v = self.jitter_rng.normal() * j / 2.0;
                    if v.abs() <= j {
                        break;
                    }
                }
                v.clamp(-j, j)
            }
        }
    }

    /// Jitter at time `t`: a random process, linear between independent
    /// samples ("knots") taken every `4 * jitter`. Its slope is at most 1/2,
    /// so delay never falls faster than time advances: packets are never
    /// reordered, and the distribution does not depend on the packet rate
    /// (clamping independent per-packet samples to FIFO order would push
    /// every packet of a fast flow to the top of the range).
    fn jitter(&mut self, t: Nanos) -> i64 {
        if self.p.jitter == 0 {
            return 0;
        }
        let tau = self.p.jitter.saturating_mul(4).max(1);
        match self.knots {
            None => {
                let a = self.sample_jitter();
                let b = self.sample_jitter();
                self.knots = Some((t, a, b));
            }
            Some((t0, _, b)) if t >= t0 + tau => {
                let steps = (t - t0) / tau;
                let base = t0 + steps * tau;
                let (na, nb) = if steps == 1 {
                    (b, self.sample_jitter())
                } else {
                    (self.sample_jitter(), self.sample_jitter())
                };
                self.knots = Some((base, na, nb));
            }
            Some(_) => {}
        }
        let (t0, a, b) = self.knots.unwrap_or((t, 0.0, 0.0));
        let frac = (t.saturating_sub(t0)) as f64 / tau as f64;
        (a + (b - a) * frac.min(1.0)).round() as i64
    }

    /// Run one packet through the link at time `t`: Ok(time it leaves).
    /// `udp`: whether it carries UDP.
    pub(super) fn process(&mut self, t: Nanos, len: u32, udp: bool) -> Result<Nanos, Drop> {
        self.c.rx_packets += 1;
        self.c.rx_bytes += u64::from(len);
        let res = if udp && self.p.drop_udp {
            Err(Drop::Udp)
        } else {
            self.process_inner(t, len)
        };
        match res {
            Ok(_) => {
                self.c.tx_packets += 1;
                self.c.tx_bytes += u64::from(len);
            }
            Err(Drop::Loss) => self.c.drop_loss += 1,
            Err(Drop::Burst) => self.c.drop_burst += 1,
            Err(Drop::Queue) => self.c.drop_queue += 1,
            Err(Drop::Udp) => self.c.drop_udp += 1,
        }
        res
    }

    fn process_inner(&mut self, t: Nanos, len: u32) -> Result<Nanos, Drop> {
        if let Some(d) = self.lose() {
            return Err(d);
        }
        let depart = self.shape(t, len)?;
        self.c.queue_delay_max_us = self
            .c
            .queue_delay_max_us
            .max(depart.saturating_sub(t) / 1000);
        let base = depart + self.p.delay;
        let j = self.jitter(depart);
        let mut out = if j >= 0 {
            base + j as u64
        } else {
            base.saturating_sub(j.unsigned_abs()).max(depart)
        };
        if let Some((prob, extra)) = self.p.reorder
            && self.reorder_rng.chance(prob)
        {
            self.c.reordered += 1;
            self.note_delay(out - depart);
            return Ok(out + extra);
        }
        out = out.max(self.last_out);
        self.last_out = out;
        self.note_delay(out - depart);
        Ok(out)
    }

    fn note_delay(&mut self, ns: Nanos) {
        let us = ns / 1000;
        self.c.delay_min_us = Some(self.c.delay_min_us.map_or(us, |m| m.min(us)));
        self.c.delay_max_us = Some(self.c.delay_max_us.map_or(us, |m| m.max(us)));
    }
}
