//! CUBIC that takes one flow's share per active circuit
//! (`quic_congestion = "cubic-per-circuit"`, `docs/quic-links.md` §8).
//!
//! quinn's controllers are per connection, so every circuit on a QUIC link
//! shares one congestion window, as the circuits of a TLS link share one
//! TCP connection's. This controller stands for `n` CUBIC flows, where `n`
//! is the number of circuits that sent on the link lately (the link's
//! channel sets it, at most [`MAX_WEIGHT`]): the window is the sum of `n`
//! virtual CUBIC flows (RFC 9438), acks are shared among them evenly, each
//! lost packet is charged to the next flow in turn, and each flow backs
//! off at most once per round trip. A lone random loss then takes
//! `(1 - beta)/n` of the window, as it would hit one of `n` connections;
//! a queue overflow that drops a packet of every flow takes `1 - beta`,
//! as `n` connections would each back off. So `n` circuits get what `n`
//! separate connections would get, with one connection on the wire (no
//! extra flows for an observer to tell circuits apart by), and at a
//! shared bottleneck the link takes `n` flows' shares, no more.
//!
//! (The first version scaled one window's parameters instead, MulTCP's
//! way: `beta_n` = 1 - 0.3/n with `alpha` and `C` raised to match. That
//! gives `n` times the throughput under random loss, but at a drop-tail
//! bottleneck, where every flow sees the overflow, it cut by 0.3/n where
//! `n` flows would cut by 0.3 and took about `n^2` flows' shares:
//! `onionmix emulator fairness` measured 0.91 and 0.96 of a link shared
//! with one TCP flow for `n` = 2 and 4.)
//!
//! Each flow is CUBIC: `beta` 0.7, `C` 0.4, the Reno-friendly estimate
//! with `alpha` = 3(1 - beta)/(1 + beta), slow start to `ssthresh`, one
//! reduction per round trip (packets sent before the reduction do not
//! cause another), fast convergence, and the minimum window after
//! persistent congestion. Two of RFC 9438's SHOULDs are not followed, as
//! in the controller this one was first compared with (quinn's): `alpha`
//! stays as above once the estimate passes `W_max` (the RFC raises it to
//! 1), and the estimate is compared with the cubic target one round trip
//! ahead rather than with `W_cubic(t)`. With `n` = 1 the controller is
//! one such flow. `n` is read when a congestion event finds no flow in
//! recovery; the window is then split evenly among the new number of
//! flows. A new weight therefore acts from the next such event on.

use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use quinn::congestion::{Controller, ControllerFactory};
use quinn_proto::RttEstimator;

/// The most flows one link's controller stands for.
pub const MAX_WEIGHT: u32 = 4;

const BETA: f64 = 0.7;
const C: f64 = 0.4;
/// The Reno-friendly increase, packets per window acked.
const ALPHA: f64 = 3.0 * (1.0 - BETA) / (1.0 + BETA);
/// Initial window, in packets (RFC 9002 §7.2: 10, at most 14720 bytes).
const INITIAL_PACKETS: u64 = 10;
const MIN_PACKETS: u64 = 2;

/// Builds [`CubicPerCircuit`] controllers.
#[derive(Debug, Default, Clone, Copy)]
pub struct CubicPerCircuitConfig;

impl ControllerFactory for CubicPerCircuitConfig {
    fn build(self: Arc<Self>, now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        Box::new(CubicPerCircuit::new(now, u64::from(current_mtu)))
    }
}

/// One virtual CUBIC flow; sizes in bytes.
#[derive(Debug, Clone)]
struct Flow {
    window: f64,
    ssthresh: f64,
    /// When this flow last backed off; losses of packets sent before it
    /// belong to the same congestion event.
    recovery_start: Option<Instant>,
    /// Window before the last reduction (0: none yet).
    w_max: f64,
    /// Start of the current congestion-avoidance epoch.
    epoch_start: Option<Instant>,
    /// Seconds from the epoch start until the curve is back at `w_max`.
    k: f64,
    /// The Reno-friendly estimate.
    w_est: f64,
}

impl Flow {
    fn new(window: f64) -> Flow {
        Flow {
            window,
            ssthresh: f64::INFINITY,
            recovery_start: None,
            w_max: 0.0,
            epoch_start: None,
            k: 0.0,
            w_est: 0.0,
        }
    }

    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|r| sent <= r)
    }

    /// `bytes` of this flow's share of an ack of packets sent at `sent`.
    fn ack(&mut self, now: Instant, sent: Instant, bytes: f64, mss: f64, rtt: Duration) {
        if self.in_recovery(sent) {
            return;
        }
        if self.window < self.ssthresh {
            self.window += bytes;
            return;
        }
        // Positive: at least the flow's share of the minimum window.
        let cwnd = self.window.max(1.0);
        let start = *self.epoch_start.get_or_insert_with(|| {
            // The first ack of an epoch: begin the curve here. Without an
            // earlier reduction the curve starts at the current window.
            if self.w_max < cwnd {
                self.w_max = cwnd;
                self.k = 0.0;
            } else {
                self.k = ((self.w_max - cwnd) / mss / C).cbrt();
            }
            self.w_est = cwnd;
            now
        });
        let t = (now.saturating_duration_since(start) + rtt).as_secs_f64() - self.k;
        let target = (C * t * t * t * mss + self.w_max).clamp(cwnd, 1.5 * cwnd);
        self.w_est += ALPHA * mss * bytes / cwnd;
        let grown = if self.w_est > target {
            self.w_est
        } else {
            // Towards the cubic target: (target - cwnd)/cwnd per byte acked.
            cwnd + (target - cwnd) * bytes / cwnd
        };
        if grown.is_finite() && grown > self.window {
            self.window = grown;
        }
    }

    /// A lost packet sent at `sent` charged to this flow.
    fn lose(&mut self, now: Instant, sent: Instant, min: f64) {
        if self.in_recovery(sent) {
            return;
        }
        self.recovery_start = Some(now);
        let cwnd = self.window;
        // Fast convergence: a window that peaked below the last one
        // releases some of its share.
        self.w_max = if cwnd < self.w_max {
            cwnd * (1.0 + BETA) / 2.0
        } else {
            cwnd
        };
        self.window = (cwnd * BETA).max(min);
        self.ssthresh = self.window;
        self.epoch_start = None;
    }

    fn scale(&mut self, f: f64) {
        self.window *= f;
        self.ssthresh *= f;
        self.w_max *= f;
        self.w_est *= f;
    }
}

/// CUBIC standing for `weight` flows (see the module docs). Clones share
/// the weight, so the channel can reach it through quinn's
/// `Connection::congestion_state`.
#[derive(Debug, Clone)]
pub struct CubicPerCircuit {
    weight: Arc<AtomicU32>,
    mss: u64,
    /// At least one; as many as the weight was at the last congestion
    /// event that found none in recovery.
    flows: Vec<Flow>,
    /// The flow the next lost packet is charged to.
    next_loss: usize,
}

impl CubicPerCircuit {
    fn new(_now: Instant, mtu: u64) -> Self {
        let mss = mtu.max(1200);
        CubicPerCircuit {
            weight: Arc::new(AtomicU32::new(1)),
            mss,
            flows: vec![Flow::new(initial_window(mss) as f64)],
            next_loss: 0,
        }
    }

    /// The shared weight: how many flows this controller stands for (set
    /// by the link's channel; values outside 1..=[`MAX_WEIGHT`] are
    /// clamped).
    pub fn weight(&self) -> Arc<AtomicU32> {
        self.weight.clone()
    }

    fn min_window(&self) -> u64 {
        MIN_PACKETS * self.mss
    }

    /// Each flow's minimum: together, the connection's.
    fn min_flow(&self) -> f64 {
        self.min_window() as f64 / self.flows.len() as f64
    }

    /// Split the window evenly among the weight's number of flows, if
    /// that changed. Each new flow starts an epoch at its share, having
    /// left slow start if any old flow had.
    fn resize(&mut self) {
        let n = self.weight.load(Ordering::Relaxed).clamp(1, MAX_WEIGHT) as usize;
        if n == self.flows.len() {
            return;
        }
        let total: f64 = self.flows.iter().map(|f| f.window).sum();
        let w_max: f64 = self.flows.iter().map(|f| f.w_max).sum();
        let slow_start = self.flows.iter().all(|f| f.ssthresh.is_infinite());
        let mut f = Flow::new(total / n as f64);
        if !slow_start {
            f.ssthresh = f.window;
            f.w_max = w_max / n as f64;
        }
        self.flows = vec![f; n];
        self.next_loss = 0;
    }
}

fn initial_window(mss: u64) -> u64 {
    (INITIAL_PACKETS * mss).min(14720.max(2 * mss))
}

impl CubicPerCircuit {
    /// Bytes of packets sent at `sent` were acked at `now`; `rtt`: the
    /// smoothed round-trip time.
    fn ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool, rtt: Duration) {
        if app_limited {
            return;
        }
        let share = bytes as f64 / self.flows.len() as f64;
        let mss = self.mss as f64;
        for f in &mut self.flows {
            f.ack(now, sent, share, mss, rtt);
        }
    }
}

impl Controller for CubicPerCircuit {
    fn on_ack(
        &mut self,
        now: Instant,
        sent: Instant,
        bytes: u64,
        app_limited: bool,
        rtt: &RttEstimator,
    ) {
        self.ack(now, sent, bytes, app_limited, rtt.get());
    }

    fn on_congestion_event(
        &mut self,
        now: Instant,
        sent: Instant,
        is_persistent_congestion: bool,
        lost_bytes: u64,
    ) {
        if self.flows.iter().all(|f| !f.in_recovery(sent)) {
            self.resize();
        }
        let n = self.flows.len();
        // Packets lost (ECN marks count as one); more than one per flow
        // cannot back a flow off twice.
        let lost = lost_bytes.div_ceil(self.mss).clamp(1, n as u64) as usize;
        let min = self.min_flow();
        for _ in 0..lost {
            let i = self.next_loss % n;
            self.next_loss = (i + 1) % n;
            self.flows[i].lose(now, sent, min);
        }
        if is_persistent_congestion {
            for f in &mut self.flows {
                f.recovery_start = Some(now);
                f.window = min;
                f.w_max = 0.0;
                f.epoch_start = None;
            }
        }
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        let mss = u64::from(new_mtu).max(1200);
        // Keep the window in packets.
        let f = mss as f64 / self.mss.max(1) as f64;
        self.mss = mss;
        for flow in &mut self.flows {
            flow.scale(f);
        }
    }

    fn window(&self) -> u64 {
        let w: f64 = self.flows.iter().map(|f| f.window).sum();
        (w.round() as u64).max(self.min_window())
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        initial_window(self.mss)
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// The weight handle of a connection's controller, if it is a
/// [`CubicPerCircuit`].
pub(crate) fn weight_of(conn: &quinn::Connection) -> Option<Arc<AtomicU32>> {
    conn.congestion_state()
        .into_any()
        .downcast::<CubicPerCircuit>()
        .ok()
        .map(|c| c.weight())
}

/// How often the channel recounts its active circuits.
pub(crate) const WEIGHT_INTERVAL: Duration = Duration::from_millis(250);

#[cfg(test)]
mod tests {
    use super::*;

    const MTU: u16 = 1200;
    const P: u64 = 1200;

    fn rtt() -> Duration {
        Duration::from_millis(40)
    }

    /// A controller with `weight` out of slow start at 100 packets (one
    /// earlier congestion event, long ago).
    fn at_100_packets(t0: Instant, weight: u32) -> CubicPerCircuit {
        let mut c = CubicPerCircuit::new(t0, u64::from(MTU));
        c.weight().store(weight, Ordering::Relaxed);
        c.flows[0].window = 100.0 * P as f64;
        c.flows[0].ssthresh = 100.0 * P as f64;
        c.resize();
        c
    }

    /// Drive one controller with `weight` through a loss of `lost`
    /// packets, then count how many bytes of acks it takes to grow back
    /// to the window it had.
    fn reduction_and_regrowth(weight: u32, lost: u64) -> (f64, u64) {
        let t0 = Instant::now();
        let mut c = at_100_packets(t0, weight);
        let t1 = t0 + Duration::from_millis(100);
        c.on_congestion_event(t1, t1, false, lost * P);
        let kept = c.window() as f64 / (100 * P) as f64;
        // Ack one window per 40 ms round trip until back at 100 packets.
        let mut now = t1;
        let mut acked = 0u64;
        while c.window() < 100 * P && acked < 100_000_000 {
            now += rtt();
            for _ in 0..c.window() / P {
                c.ack(now, now, P, false, rtt());
                acked += P;
            }
        }
        (kept, acked)
    }

    #[test]
    fn one_loss_backs_off_one_flow_and_a_burst_all_of_them() {
        // One flow: CUBIC, whatever the loss.
        let (kept1, acked1) = reduction_and_regrowth(1, 1);
        assert!((kept1 - BETA).abs() < 0.01, "{kept1}");
        assert!((reduction_and_regrowth(1, 5).0 - BETA).abs() < 0.01);
        // One lost packet backs off one of n flows.
        let (kept2, acked2) = reduction_and_regrowth(2, 1);
        assert!((kept2 - 0.85).abs() < 0.01, "{kept2}");
        let (kept4, acked4) = reduction_and_regrowth(4, 1);
        assert!((kept4 - 0.925).abs() < 0.01, "{kept4}");
        assert!(
            acked2 < acked1 && acked4 < acked2,
            "{acked1} {acked2} {acked4}"
        );
        // Two lost packets back off two of four; n or more, all n.
        assert!((reduction_and_regrowth(4, 2).0 - 0.85).abs() < 0.01);
        assert!((reduction_and_regrowth(4, 4).0 - BETA).abs() < 0.01);
        assert!((reduction_and_regrowth(4, 9).0 - BETA).abs() < 0.01);
        // Out-of-range weights are clamped.
        assert!((reduction_and_regrowth(0, 1).0 - BETA).abs() < 0.01);
        assert!((reduction_and_regrowth(9, 1).0 - 0.925).abs() < 0.01);
    }

    #[test]
    fn each_flow_backs_off_once_per_round_trip() {
        let t0 = Instant::now();
        let mut c = at_100_packets(t0, 4);
        let t1 = t0 + Duration::from_millis(100);
        let sent = t1 - Duration::from_millis(30);
        // Four single losses of packets sent before any reduction, in
        // four batches: each backs off another flow.
        for i in 0..4u32 {
            c.on_congestion_event(t1 + Duration::from_millis(u64::from(i)), sent, false, P);
        }
        assert!((c.window() as f64 / (100 * P) as f64 - BETA).abs() < 0.01);
        // A fifth in the same round trip finds every flow in recovery.
        let w = c.window();
        c.on_congestion_event(t1 + Duration::from_millis(5), sent, false, P);
        assert_eq!(c.window(), w);
        // The weight is read when no flow is in recovery.
        c.weight().store(1, Ordering::Relaxed);
        c.on_congestion_event(t1 + Duration::from_millis(6), sent, false, P);
        assert_eq!(c.flows.len(), 4);
        let t2 = t1 + Duration::from_millis(60);
        c.on_congestion_event(t2, t2, false, P);
        assert_eq!(c.flows.len(), 1);
        assert!((c.window() as f64 - w as f64 * BETA).abs() < 2.0);
    }

    #[test]
    fn one_reduction_per_round_trip_and_persistent_congestion() {
        let t0 = Instant::now();
        let mut c = CubicPerCircuit::new(t0, u64::from(MTU));
        assert_eq!(c.window(), 12_000);
        assert_eq!(c.initial_window(), 12_000);
        let r = rtt();
        // Slow start doubles per window acked (a weight set meanwhile acts
        // from the next congestion event on).
        c.weight().store(3, Ordering::Relaxed);
        for _ in 0..10 {
            c.ack(t0, t0, P, false, r);
        }
        assert_eq!(c.window(), 24_000);
        c.weight().store(1, Ordering::Relaxed);
        // App-limited acks do not grow it.
        c.ack(t0, t0, P, true, r);
        assert_eq!(c.window(), 24_000);
        let t1 = t0 + Duration::from_millis(50);
        c.on_congestion_event(t1, t0, false, P);
        assert_eq!(c.window(), 16_800);
        // A second loss of a packet sent before the reduction: same event.
        c.on_congestion_event(t1 + Duration::from_millis(5), t0, false, P);
        assert_eq!(c.window(), 16_800);
        // Acks of packets sent before it do not grow the window either.
        c.ack(t1, t0, P, false, r);
        assert_eq!(c.window(), 16_800);
        // A loss of a later packet is a new event.
        let t2 = t1 + Duration::from_millis(60);
        c.on_congestion_event(t2, t1 + Duration::from_millis(10), false, P);
        assert_eq!(c.window(), 11_760);
        // Persistent congestion: the minimum window.
        let t3 = t2 + Duration::from_secs(1);
        c.on_congestion_event(t3, t2 + Duration::from_millis(1), true, P);
        assert_eq!(c.window(), 2400);
        // MTU growth keeps the window in packets.
        c.on_mtu_update(1452);
        assert_eq!(c.window(), 2 * 1452);
    }

    /// A deterministic generator for the simulations (xorshift64*).
    struct Rng(u64);
    impl Rng {
        fn unit(&mut self) -> f64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// Senders with fixed round trips (40 ms) through one drop-tail
    /// bottleneck of `capacity` packets per round trip plus a queue of
    /// `capacity`, and random loss `p` per packet. Each round trip every
    /// sender sends its window; the excess over capacity plus queue is
    /// dropped in proportion to the windows. Returns each sender's mean
    /// window (packets) over the last two thirds.
    fn simulate(weights: &[u32], capacity: f64, p: f64, rounds: u32) -> Vec<f64> {
        let t0 = Instant::now();
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut cs: Vec<CubicPerCircuit> = weights
            .iter()
            .map(|w| {
                let c = CubicPerCircuit::new(t0, u64::from(MTU));
                c.weight().store(*w, Ordering::Relaxed);
                c
            })
            .collect();
        let mut sums = vec![0.0; cs.len()];
        for round in 0..rounds {
            // Acks and losses arrive just before the next round is sent,
            // so a reduction (at `now`) precedes the next round's packets.
            let sent = t0 + rtt() * round;
            let now = sent + rtt() - Duration::from_micros(1);
            let wins: Vec<f64> = cs.iter().map(|c| (c.window() / P) as f64).collect();
            let total: f64 = wins.iter().sum();
            let excess = (total - 2.0 * capacity).max(0.0);
            for (i, c) in cs.iter_mut().enumerate() {
                let w = wins[i];
                let mut lost = (excess * w / total.max(1.0)).round() as u64;
                for _ in 0..w as u64 {
                    if rng.unit() < p {
                        lost += 1;
                    }
                }
                let lost = lost.min(w as u64);
                for _ in 0..(w as u64 - lost) {
                    c.ack(now, sent, P, false, rtt());
                }
                if lost > 0 {
                    c.on_congestion_event(now, sent, false, lost * P);
                }
                if round >= rounds / 3 {
                    sums[i] += w;
                }
            }
        }
        sums.iter()
            .map(|s| s / f64::from(rounds - rounds / 3))
            .collect()
    }

    #[test]
    fn n_flows_get_n_shares_under_random_loss() {
        // Loss, not capacity, limits each sender: n flows' window is about
        // n times one flow's.
        for n in [2u32, 4] {
            let w = simulate(&[1, n], 1e9, 2e-4, 6000);
            let ratio = w[1] / w[0];
            eprintln!("random loss, weight {n}: {ratio:.2} times one flow's window ({w:.0?})");
            assert!(
                ratio > 0.75 * f64::from(n) && ratio < 1.33 * f64::from(n),
                "weight {n}: {ratio:.2} ({w:?})"
            );
        }
    }

    #[test]
    fn n_flows_get_n_shares_at_a_drop_tail_bottleneck() {
        // Against one CUBIC flow at a full queue, weight n takes about
        // n/(n+1), not n^2/(n^2+1).
        for (n, lo, hi) in [(1u32, 0.4, 0.6), (2, 0.55, 0.75), (4, 0.7, 0.88)] {
            let w = simulate(&[1, n], 200.0, 0.0, 4000);
            let share = w[1] / (w[0] + w[1]);
            eprintln!("drop-tail, weight {n}: share {share:.2} ({w:.0?})");
            assert!(share > lo && share < hi, "weight {n}: share {share:.2}");
        }
    }

    #[test]
    fn clones_share_the_weight() {
        let c = CubicPerCircuit::new(Instant::now(), 1200);
        let boxed: Box<dyn Controller> = c.clone_box();
        let back = boxed
            .into_any()
            .downcast::<CubicPerCircuit>()
            .expect("type");
        back.weight().store(3, Ordering::Relaxed);
        assert_eq!(c.weight().load(Ordering::Relaxed), 3);
    }
}
