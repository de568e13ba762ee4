//! CUBIC that takes one flow's share per active circuit
//! (`quic_congestion = "cubic-per-circuit"`, `docs/quic-links.md` §8).
//!
//! quinn's controllers are per connection, so every circuit on a QUIC link
//! shares one congestion window, as the circuits of a TLS link share one
//! TCP connection's. This controller is CUBIC (RFC 9438) scaled to behave
//! like `n` CUBIC flows together, where `n` is the number of circuits
//! that sent on the link lately (the link's channel sets it, at most
//! [`MAX_WEIGHT`]): a loss takes `(1 - beta) / n` of the window instead of
//! `1 - beta`, and the window grows as `n` flows' windows would. On a path
//! where loss, not the link, limits each flow, `n` circuits then get what
//! `n` separate connections would get, with one connection on the wire
//! (no extra flows for an observer to tell circuits apart by). The cost is
//! fairness: against other traffic at a shared bottleneck the link claims
//! up to [`MAX_WEIGHT`] shares.
//!
//! With `n` = 1 it is plain CUBIC: `beta` 0.7, `C` 0.4, the Reno-friendly
//! estimate with `alpha` = 3(1 - beta)/(1 + beta), slow start to
//! `ssthresh`, one reduction per round trip (packets sent before the
//! reduction do not cause another), fast convergence, and the minimum
//! window after persistent congestion.
//!
//! The `n`-flow scaling (MulTCP's idea applied to CUBIC): with
//! `beta_n` = 1 - (1 - beta)/n, the Reno-friendly `alpha_n` =
//! 3 n^2 (1 - beta_n)/(1 + beta_n) gives n times Reno's throughput for a
//! loss rate (AIMD throughput goes as sqrt(alpha (1 + beta)/(2 (1 -
//! beta)))), and `C_n` = C n^3 (3 + beta)/(3 + beta_n) gives n times
//! CUBIC's (its average window goes as (C (3 + beta)/(4 (1 - beta)))^(1/4)).

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

/// The parameters for `n` flows.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Scaled {
    beta: f64,
    alpha: f64,
    c: f64,
}

impl Scaled {
    fn for_flows(n: u32) -> Scaled {
        let n = f64::from(n.clamp(1, MAX_WEIGHT));
        let beta = 1.0 - (1.0 - BETA) / n;
        Scaled {
            beta,
            alpha: 3.0 * n * n * (1.0 - beta) / (1.0 + beta),
            c: C * n * n * n * (3.0 + BETA) / (3.0 + beta),
        }
    }
}

/// CUBIC standing for `weight` flows (see the module docs). Clones share
/// the weight, so the channel can reach it through quinn's
/// `Connection::congestion_state`.
#[derive(Debug, Clone)]
pub struct CubicPerCircuit {
    weight: Arc<AtomicU32>,
    mss: u64,
    /// Congestion window, bytes.
    window: u64,
    ssthresh: u64,
    /// When the last reduction happened; losses of packets sent before it
    /// belong to the same congestion event.
    recovery_start: Option<Instant>,
    /// Window before the last reduction, bytes (0: none yet).
    w_max: f64,
    /// Start of the current congestion-avoidance epoch.
    epoch_start: Option<Instant>,
    /// Seconds from the epoch start until the cubic curve is back at
    /// `w_max`.
    k: f64,
    /// The Reno-friendly estimate, bytes.
    w_est: f64,
    /// The parameters of this epoch (the weight when it began).
    scaled: Scaled,
}

impl CubicPerCircuit {
    fn new(_now: Instant, mtu: u64) -> Self {
        let mss = mtu.max(1200);
        CubicPerCircuit {
            weight: Arc::new(AtomicU32::new(1)),
            mss,
            window: initial_window(mss),
            ssthresh: u64::MAX,
            recovery_start: None,
            w_max: 0.0,
            epoch_start: None,
            k: 0.0,
            w_est: 0.0,
            scaled: Scaled::for_flows(1),
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

    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|r| sent <= r)
    }

    /// The cubic curve at `t` seconds into the epoch, bytes.
    fn w_cubic(&self, t: f64) -> f64 {
        let mss = self.mss as f64;
        let d = t - self.k;
        (self.scaled.c * d * d * d) * mss + self.w_max
    }
}

fn initial_window(mss: u64) -> u64 {
    (INITIAL_PACKETS * mss).min(14720.max(2 * mss))
}

impl CubicPerCircuit {
    /// Bytes of packets sent at `sent` were acked at `now`; `rtt`: the
    /// smoothed round-trip time.
    fn ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool, rtt: Duration) {
        if app_limited || self.in_recovery(sent) {
            return;
        }
        if self.window < self.ssthresh {
            self.window = self.window.saturating_add(bytes);
            return;
        }
        let mss = self.mss as f64;
        let cwnd = self.window as f64;
        let start = *self.epoch_start.get_or_insert_with(|| {
            // The first ack of an epoch: begin the curve here. Without an
            // earlier reduction the curve starts at the current window.
            self.scaled = Scaled::for_flows(self.weight.load(Ordering::Relaxed));
            if self.w_max < cwnd {
                self.w_max = cwnd;
                self.k = 0.0;
            } else {
                self.k = ((self.w_max - cwnd) / mss / self.scaled.c).cbrt();
            }
            self.w_est = cwnd;
            now
        });
        let t = now.saturating_duration_since(start) + rtt;
        let target = self.w_cubic(t.as_secs_f64()).clamp(cwnd, 1.5 * cwnd);
        // Reno-friendly estimate: alpha packets per window acked.
        self.w_est += self.scaled.alpha * mss * (bytes as f64) / cwnd;
        let grown = if self.w_est > target {
            self.w_est
        } else {
            // Towards the cubic target: (target - cwnd)/cwnd per byte acked.
            cwnd + (target - cwnd) * (bytes as f64) / cwnd
        };
        if grown.is_finite() && grown > cwnd {
            self.window = (grown as u64).max(self.window);
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
        _lost_bytes: u64,
    ) {
        if self.in_recovery(sent) {
            return;
        }
        self.recovery_start = Some(now);
        self.scaled = Scaled::for_flows(self.weight.load(Ordering::Relaxed));
        let cwnd = self.window as f64;
        // Fast convergence: a window that peaked below the last one
        // releases some of its share.
        self.w_max = if cwnd < self.w_max {
            cwnd * (1.0 + self.scaled.beta) / 2.0
        } else {
            cwnd
        };
        let reduced = ((cwnd * self.scaled.beta) as u64).max(self.min_window());
        self.ssthresh = reduced;
        self.window = reduced;
        self.epoch_start = None;
        if is_persistent_congestion {
            self.window = self.min_window();
            self.w_max = 0.0;
        }
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        let mss = u64::from(new_mtu).max(1200);
        // Keep the window in packets.
        let packets = self.window / self.mss.max(1);
        self.mss = mss;
        self.window = packets.saturating_mul(mss).max(self.min_window());
    }

    fn window(&self) -> u64 {
        self.window
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

    fn rtt() -> Duration {
        Duration::from_millis(40)
    }

    /// Drive one controller with `weight` through a loss, then count how
    /// many bytes of acks it takes to grow back to the window it had.
    fn reduction_and_regrowth(weight: u32) -> (f64, u64) {
        let t0 = Instant::now();
        let mut c = CubicPerCircuit::new(t0, u64::from(MTU));
        c.weight().store(weight, Ordering::Relaxed);
        let r = rtt();
        // Leave slow start with a loss at 100 packets.
        c.window = 100 * 1200;
        c.ssthresh = 100 * 1200;
        let t1 = t0 + Duration::from_millis(100);
        c.on_congestion_event(t1, t1, false, 1200);
        let before = 100.0 * 1200.0;
        let after = c.window() as f64;
        let kept = after / before;
        // Ack one window per 40 ms round trip until back at 100 packets.
        let mut now = t1;
        let mut acked = 0u64;
        while c.window() < 100 * 1200 && acked < 100_000_000 {
            now += Duration::from_millis(40);
            let w = c.window();
            for _ in 0..w / 1200 {
                c.ack(now, now, 1200, false, r);
                acked += 1200;
            }
        }
        (kept, acked)
    }

    #[test]
    fn one_flow_is_cubic_and_more_flows_back_off_less_and_regrow_faster() {
        let (kept1, acked1) = reduction_and_regrowth(1);
        assert!((kept1 - BETA).abs() < 0.01, "{kept1}");
        let (kept2, acked2) = reduction_and_regrowth(2);
        assert!((kept2 - 0.85).abs() < 0.01, "{kept2}");
        let (kept4, acked4) = reduction_and_regrowth(4);
        assert!((kept4 - 0.925).abs() < 0.01, "{kept4}");
        assert!(
            acked2 < acked1 && acked4 < acked2,
            "{acked1} {acked2} {acked4}"
        );
        // Out-of-range weights are clamped.
        let (kept0, _) = reduction_and_regrowth(0);
        assert!((kept0 - BETA).abs() < 0.01);
        let (kept9, _) = reduction_and_regrowth(9);
        assert!((kept9 - 0.925).abs() < 0.01);
    }

    #[test]
    fn n_flow_parameters_scale_throughput_by_n() {
        // AIMD throughput for a loss rate goes as
        // sqrt(alpha (1 + beta) / (2 (1 - beta))); n flows: n times one.
        let reno = |s: Scaled| (s.alpha * (1.0 + s.beta) / (2.0 * (1.0 - s.beta))).sqrt();
        // CUBIC's average window goes as (C (3 + beta) / (4 (1 - beta)))^(1/4).
        let cubic = |s: Scaled| (s.c * (3.0 + s.beta) / (4.0 * (1.0 - s.beta))).powf(0.25);
        let one = Scaled::for_flows(1);
        assert!((one.alpha - 3.0 * 0.3 / 1.7).abs() < 1e-9);
        assert_eq!((one.beta, one.c), (BETA, C));
        for n in 2..=MAX_WEIGHT {
            let s = Scaled::for_flows(n);
            let n = f64::from(n);
            assert!((reno(s) / reno(one) - n).abs() < 1e-9);
            assert!((cubic(s) / cubic(one) - n).abs() < 1e-9);
        }
    }

    #[test]
    fn one_reduction_per_round_trip_and_persistent_congestion() {
        let t0 = Instant::now();
        let mut c = CubicPerCircuit::new(t0, u64::from(MTU));
        assert_eq!(c.window(), 12_000);
        assert_eq!(c.initial_window(), 12_000);
        let r = rtt();
        // Slow start doubles per window acked.
        for _ in 0..10 {
            c.ack(t0, t0, 1200, false, r);
        }
        assert_eq!(c.window(), 24_000);
        // App-limited acks do not grow it.
        c.ack(t0, t0, 1200, true, r);
        assert_eq!(c.window(), 24_000);
        let t1 = t0 + Duration::from_millis(50);
        c.on_congestion_event(t1, t0, false, 1200);
        assert_eq!(c.window(), 16_800);
        // A second loss of a packet sent before the reduction: same event.
        c.on_congestion_event(t1 + Duration::from_millis(5), t0, false, 1200);
        assert_eq!(c.window(), 16_800);
        // Acks of packets sent before it do not grow the window either.
        c.ack(t1, t0, 1200, false, r);
        assert_eq!(c.window(), 16_800);
        // A loss of a later packet is a new event.
        let t2 = t1 + Duration::from_millis(60);
        c.on_congestion_event(t2, t1 + Duration::from_millis(10), false, 1200);
        assert_eq!(c.window(), 11_760);
        // Persistent congestion: the minimum window.
        let t3 = t2 + Duration::from_secs(1);
        c.on_congestion_event(t3, t2 + Duration::from_millis(1), true, 1200);
        assert_eq!(c.window(), 2400);
        // MTU growth keeps the window in packets.
        c.on_mtu_update(1452);
        assert_eq!(c.window(), 2 * 1452);
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
