//! Predicting which circuits a client will need, so they are built before
//! the request arrives (path-spec §2.1.1 "Clients build circuits
//! preemptively", tor's `predict_ports.c` and
//! `circuit_predict_and_launch_new`), sans-IO.
//!
//! Ports the client connected to in the last 30-60 minutes (randomised
//! when the first prediction is made; port 80 from start-up) are
//! "predicted"; the planner asks for an exit circuit whenever a predicted
//! port has fewer than two clean (never used) circuits, open or being
//! built, whose exit allows it, and for learning circuits while the build
//! timeout estimator wants data; never more than 14 clean circuits.

use std::time::{Duration, Instant};

use rand::Rng;

/// Most clean circuits kept open (tor's `MAX_UNUSED_OPEN_CIRCUITS`).
pub const MAX_UNUSED_OPEN_CIRCUITS: usize = 14;
/// Clean circuits wanted for each predicted port
/// (`MIN_CIRCUITS_HANDLING_STREAM`).
pub const MIN_CIRCUITS_HANDLING_STREAM: usize = 2;
/// Most ports remembered (the oldest prediction is dropped beyond this).
pub const MAX_PREDICTED_PORTS: usize = 64;
/// Base of the prediction lifetime (tor's `nf_conntimeout_clients`,
/// 30 min); the lifetime is drawn from [base, 2 x base).
pub const DEFAULT_PREDICTION_BASE: Duration = Duration::from_secs(30 * 60);
/// The port predicted at start-up.
pub const STARTUP_PORT: u16 = 80;

#[derive(Debug, Clone, Copy)]
struct Predicted {
    port: u16,
    last_used: Instant,
}

/// The ports a client is expected to use again.
#[derive(Debug, Clone)]
pub struct PortPredictor {
    ports: Vec<Predicted>,
    base: Duration,
    prediction_timeout: Duration,
    last_add: Instant,
}

impl PortPredictor {
    /// A predictor whose predictions last [base, 2 x base), with port 80
    /// predicted as of `now`.
    pub fn new<R: Rng + ?Sized>(now: Instant, base: Duration, rng: &mut R) -> Self {
        let mut p = PortPredictor {
            ports: Vec::new(),
            base,
            prediction_timeout: base,
            last_add: now,
        };
        p.note_used_port(now, STARTUP_PORT, rng);
        p
    }

    fn draw_timeout<R: Rng + ?Sized>(&mut self, rng: &mut R) {
        let base_ms = u64::try_from(self.base.as_millis()).unwrap_or(u64::MAX);
        let extra = if base_ms == 0 {
            0
        } else {
            rng.gen_range(0..base_ms)
        };
        self.prediction_timeout = Duration::from_millis(base_ms.saturating_add(extra));
    }

    /// A stream to `port` was requested at `now`.
    pub fn note_used_port<R: Rng + ?Sized>(&mut self, now: Instant, port: u16, rng: &mut R) {
        if port == 0 {
            return;
        }
        if let Some(p) = self.ports.iter_mut().find(|p| p.port == port) {
            p.last_used = now;
            self.last_add = now;
            return;
        }
        // A new prediction after a quiet spell draws a new lifetime.
        if self.predicted_ports(now).is_empty() {
            self.draw_timeout(rng);
        }
        self.last_add = now;
        if self.ports.len() >= MAX_PREDICTED_PORTS
            && let Some(oldest) = self
                .ports
                .iter()
                .enumerate()
                .min_by_key(|(_, p)| p.last_used)
                .map(|(i, _)| i)
        {
            self.ports.swap_remove(oldest);
        }
        self.ports.push(Predicted {
            port,
            last_used: now,
        });
    }

    /// The ports still predicted at `now` (expired ones are forgotten).
    pub fn predicted_ports(&mut self, now: Instant) -> Vec<u16> {
        let timeout = self.prediction_timeout;
        self.ports
            .retain(|p| now.saturating_duration_since(p.last_used) <= timeout);
        self.ports.iter().map(|p| p.port).collect()
    }

    /// How much longer predictive building goes on without new use.
    pub fn time_remaining(&self, now: Instant) -> Duration {
        self.prediction_timeout
            .saturating_sub(now.saturating_duration_since(self.last_add))
    }

    /// How long a clean circuit launched now may stay unused: while the
    /// build timeout is being learned, `learn_timeout`; otherwise the
    /// remaining prediction time plus up to 5% more (so circuits do not
    /// all close at once), or `learn_timeout` when nothing is predicted.
    pub fn idle_timeout<R: Rng + ?Sized>(
        &self,
        now: Instant,
        learning: bool,
        learn_timeout: Duration,
        rng: &mut R,
    ) -> Duration {
        if learning {
            return learn_timeout;
        }
        let left = self.time_remaining(now).as_secs();
        if left == 0 {
            return learn_timeout;
        }
        Duration::from_secs(left + 1 + rng.gen_range(0..=left / 20))
    }
}

/// What the planner wants built next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// Enough circuits.
    Nothing,
    /// An exit circuit whose exit allows this predicted port.
    ExitFor(u16),
    /// A circuit to learn the build timeout from (any exit).
    Learning,
}

/// What the planner needs to know about the client's circuits.
#[derive(Debug, Clone, Copy)]
pub struct PoolView {
    /// Clean open circuits (built, never given to a stream).
    pub clean_open: usize,
    /// Whether the build-time estimator wants a learning circuit now.
    pub learning_now: bool,
    /// `cbtmaxopencircs`: clean circuits allowed while learning.
    pub max_open_for_learning: usize,
}

/// Decide the next preemptive circuit: for the first predicted port with
/// fewer than [`MIN_CIRCUITS_HANDLING_STREAM`] clean circuits (open or
/// being built) that can carry it (`handling(port)` counts them), an
/// exit circuit; else a learning circuit if the estimator wants one; never
/// beyond [`MAX_UNUSED_OPEN_CIRCUITS`] clean open circuits.
pub fn plan(view: &PoolView, predicted: &[u16], handling: impl Fn(u16) -> usize) -> Plan {
    if view.clean_open >= MAX_UNUSED_OPEN_CIRCUITS {
        return Plan::Nothing;
    }
    if let Some(&port) = predicted
        .iter()
        .find(|&&p| handling(p) < MIN_CIRCUITS_HANDLING_STREAM)
    {
        return Plan::ExitFor(port);
    }
    if view.learning_now && view.clean_open < view.max_open_for_learning {
        return Plan::Learning;
    }
    Plan::Nothing
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn rng() -> rand::rngs::StdRng {
        rand::rngs::StdRng::seed_from_u64(3)
    }

    #[test]
    fn port_80_is_predicted_from_start() {
        let t0 = Instant::now();
        let mut p = PortPredictor::new(t0, DEFAULT_PREDICTION_BASE, &mut rng());
        assert_eq!(p.predicted_ports(t0), vec![80]);
        let left = p.time_remaining(t0);
        assert!(left >= Duration::from_secs(1800) && left < Duration::from_secs(3600));
    }

    #[test]
    fn predictions_expire_and_are_renewed_by_use() {
        let t0 = Instant::now();
        let base = Duration::from_secs(100);
        let mut r = rng();
        let mut p = PortPredictor::new(t0, base, &mut r);
        p.note_used_port(t0 + Duration::from_secs(50), 443, &mut r);
        // Lifetimes are below 200 s: both gone 200 s after their last use.
        let at = t0 + Duration::from_secs(251);
        assert_eq!(p.predicted_ports(at), Vec::<u16>::new());
        let mut p = PortPredictor::new(t0, base, &mut r);
        p.note_used_port(t0 + Duration::from_secs(150), 443, &mut r);
        assert_eq!(p.predicted_ports(t0 + Duration::from_secs(201)), vec![443]);
        assert!(p.time_remaining(t0 + Duration::from_secs(151)) > Duration::ZERO);
        // Port 0 is never predicted.
        p.note_used_port(t0, 0, &mut r);
        assert!(
            !p.predicted_ports(t0 + Duration::from_secs(160))
                .contains(&0)
        );
    }

    #[test]
    fn predicted_ports_are_bounded() {
        let t0 = Instant::now();
        let mut r = rng();
        let mut p = PortPredictor::new(t0, DEFAULT_PREDICTION_BASE, &mut r);
        for port in 1000..2000u16 {
            p.note_used_port(t0 + Duration::from_millis(u64::from(port)), port, &mut r);
        }
        let now = t0 + Duration::from_secs(2);
        let ports = p.predicted_ports(now);
        assert_eq!(ports.len(), MAX_PREDICTED_PORTS);
        assert!(ports.contains(&1999) && !ports.contains(&80));
    }

    #[test]
    fn idle_timeouts() {
        let t0 = Instant::now();
        let mut r = rng();
        let p = PortPredictor::new(t0, Duration::from_secs(1000), &mut r);
        let learn = Duration::from_secs(180);
        assert_eq!(p.idle_timeout(t0, true, learn, &mut r), learn);
        let left = p.time_remaining(t0).as_secs();
        let t = p.idle_timeout(t0, false, learn, &mut r).as_secs();
        assert!(t > left && t <= left + 1 + left / 20, "{t} vs {left}");
        let late = t0 + Duration::from_secs(10_000);
        assert_eq!(p.idle_timeout(late, false, learn, &mut r), learn);
    }

    fn view(clean_open: usize, learning_now: bool) -> PoolView {
        PoolView {
            clean_open,
            learning_now,
            max_open_for_learning: 10,
        }
    }

    #[test]
    fn two_circuits_per_predicted_port() {
        let ports = [80, 9000];
        // Nothing open: build for the first port.
        assert_eq!(plan(&view(0, false), &ports, |_| 0), Plan::ExitFor(80));
        // Two handle port 80 (one may still be building), none 9000.
        let h = |p: u16| if p == 80 { 2 } else { 1 };
        assert_eq!(plan(&view(1, false), &ports, h), Plan::ExitFor(9000));
        assert_eq!(plan(&view(2, false), &ports, |_| 2), Plan::Nothing);
        // No predictions (idle for an hour): nothing is built.
        assert_eq!(plan(&view(0, false), &[], |_| 0), Plan::Nothing);
    }

    #[test]
    fn learning_circuits_up_to_the_cap() {
        assert_eq!(plan(&view(3, true), &[80], |_| 2), Plan::Learning);
        assert_eq!(plan(&view(10, true), &[80], |_| 2), Plan::Nothing);
        // Never more than 14 clean circuits, whatever is predicted.
        assert_eq!(plan(&view(14, true), &[80], |_| 0), Plan::Nothing);
    }
}
