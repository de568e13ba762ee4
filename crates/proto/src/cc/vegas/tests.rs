//! Vegas driven by synthetic RTTs: slow start, the alpha/beta/gamma/delta
//! rules, window bounds and parameters.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use super::*;

/// A sender that always has data: fills the window at the current time
/// and gets each SENDME back `rtt` after its triggering cell left.
struct Pipe {
    v: Vegas,
    t: Instant,
    sent: VecDeque<Instant>,
}

impl Pipe {
    fn new(p: &CcParams) -> Self {
        Pipe {
            v: Vegas::new(p, CcPath::Exit, p.sendme_inc),
            t: Instant::now(),
            sent: VecDeque::new(),
        }
    }
    fn fill(&mut self) {
        while self.v.can_send() {
            if self.v.on_sent(self.t) {
                self.sent.push_back(self.t);
            }
        }
    }
    /// Acknowledge the oldest trigger with the given RTT (or later, if time
    /// has already moved past that).
    fn ack(&mut self, rtt: Duration, chan: ChanSignal) -> Result<(), FlowError> {
        let s = self.sent.pop_front().expect("a trigger in flight");
        self.t = self.t.max(s + rtt);
        self.v.on_sendme(self.t, chan)
    }
    fn ack_fill(&mut self, rtt_ms: u64) {
        self.ack(Duration::from_millis(rtt_ms), ChanSignal::default())
            .expect("valid sendme");
        self.fill();
    }
}

/// A Vegas out of slow start with a given window, RTT minimum and EWMA,
/// and full (inflight = cwnd).
fn steady(cwnd: u64, min_ms: u64, ewma_ms: u64) -> Pipe {
    let p = CcParams::default();
    let mut pipe = Pipe::new(&p);
    pipe.v.in_slow_start = false;
    pipe.v.cwnd = cwnd;
    pipe.v.rtt.min_usec = min_ms * 1000;
    pipe.v.rtt.ewma_usec = ewma_ms * 1000;
    pipe.v.next_cc_event = 1;
    pipe.fill();
    pipe
}

#[test]
fn sendme_every_inc_cells_and_window_limits_sending() {
    let p = CcParams::default();
    let mut pipe = Pipe::new(&p);
    let mut triggers = Vec::new();
    for i in 1..=124u64 {
        assert!(pipe.v.can_send());
        if pipe.v.on_sent(pipe.t) {
            triggers.push(i);
        }
    }
    assert_eq!(triggers, vec![31, 62, 93, 124]);
    assert!(!pipe.v.can_send(), "initial window is cc_cwnd_init = 124");
    assert_eq!(pipe.v.window(), 0);
    // A SENDME without anything in flight is refused.
    let mut fresh = Pipe::new(&p);
    assert_eq!(
        fresh.v.on_sendme(fresh.t, ChanSignal::default()),
        Err(FlowError::UnexpectedSendme)
    );
}

#[test]
fn slow_start_grows_by_one_increment_per_sendme() {
    let p = CcParams::default();
    let mut pipe = Pipe::new(&p);
    pipe.fill();
    // Constant RTT: BDP = cwnd, no queue: +31 per SENDME (cc_cwnd_inc_pct_ss
    // 100 % of sendme_inc), as a stock tor 0.4.9 client does.
    let mut last = pipe.v.cwnd();
    for _ in 0..8 {
        pipe.ack_fill(50);
        assert!(pipe.v.in_slow_start());
        assert_eq!(pipe.v.cwnd(), last + 31);
        last = pipe.v.cwnd();
    }
    assert_eq!(pipe.v.rtt().min_usec, 50_000);
}

#[test]
fn slow_start_does_not_grow_an_unused_window() {
    let p = CcParams::default();
    let mut pipe = Pipe::new(&p);
    // Only 62 cells sent: inflight + gap*inc = 62 + 31 < 124 (not full).
    for _ in 0..62 {
        if pipe.v.on_sent(pipe.t) {
            pipe.sent.push_back(pipe.t);
        }
    }
    pipe.ack(Duration::from_millis(50), ChanSignal::default())
        .unwrap();
    assert_eq!(pipe.v.cwnd(), 124);
    assert!(pipe.v.in_slow_start());
}

#[test]
fn gamma_ends_slow_start_at_bdp_plus_gamma() {
    let p = CcParams::default();
    let mut pipe = Pipe::new(&p);
    pipe.fill();
    for _ in 0..6 {
        pipe.ack_fill(20);
    }
    assert!(pipe.v.in_slow_start());
    // The RTT jumps: ewma rises, BDP = cwnd*min/ewma falls, queue use
    // passes gamma (186).
    let mut exited = false;
    for _ in 0..20 {
        let cwnd_before = pipe.v.cwnd();
        pipe.ack_fill(200);
        if !pipe.v.in_slow_start() {
            let bdp = pipe.v.snapshot().bdp;
            assert!(cwnd_before - bdp >= 186, "queue use {}", cwnd_before - bdp);
            assert_eq!(pipe.v.cwnd(), bdp + 186);
            exited = true;
            break;
        }
    }
    assert!(exited, "slow start must end when queue use reaches gamma");
}

#[test]
fn rfc3742_slows_growth_above_the_cap_and_ss_max_caps_it() {
    let p = CcParams::default();
    let mut pipe = Pipe::new(&p);
    pipe.fill();
    let mut incs_above_cap = Vec::new();
    for _ in 0..2000 {
        let before = pipe.v.cwnd();
        pipe.ack_fill(40);
        if !pipe.v.in_slow_start() {
            break;
        }
        if before > 500 {
            let inc = pipe.v.cwnd() - before;
            // max(round(sendme_inc * cap / (2 * cwnd)), 1)
            assert_eq!(inc, ((31 * 500 + before) / (2 * before)).max(1));
            incs_above_cap.push(inc);
        }
    }
    assert!(!incs_above_cap.is_empty());
    assert!(incs_above_cap.iter().all(|&i| i < 31));
    // With a constant RTT slow start only ends at the hard maximum... or
    // when the increment falls to the steady-state rate.
    let c = pipe.v.cwnd();
    assert!(c <= 5000, "cwnd {c} above cc_ss_max");
    assert!(!pipe.v.in_slow_start());
}

#[test]
fn ss_max_is_a_hard_cap_in_slow_start() {
    let mut m = std::collections::BTreeMap::new();
    // No RFC 3742 damping and large steps: the cap is what stops growth.
    m.insert("cc_sscap_exit".to_string(), i32::MAX);
    m.insert("cc_cwnd_inc_pct_ss".to_string(), 500);
    m.insert("cc_ss_max".to_string(), 600);
    let p = CcParams::from_consensus(&m);
    let mut pipe = Pipe::new(&p);
    pipe.fill();
    for _ in 0..40 {
        pipe.ack_fill(30);
        assert!(pipe.v.cwnd() <= 600);
        if !pipe.v.in_slow_start() {
            break;
        }
    }
    assert_eq!(pipe.v.cwnd(), 600);
    assert!(!pipe.v.in_slow_start());
}

#[test]
fn alpha_grows_a_full_window_by_cwnd_inc() {
    // min = ewma: BDP = cwnd, queue use 0 < alpha: +cc_cwnd_inc (1).
    let mut pipe = steady(1000, 50, 50);
    pipe.ack_fill(50);
    assert_eq!(pipe.v.cwnd(), 1001);
}

#[test]
fn between_alpha_and_beta_the_window_holds() {
    // queue use = cwnd - cwnd*min/ewma = 1000 - 1000*40/50 = 200:
    // between alpha (124) and beta (248).
    let mut pipe = steady(1000, 40, 50);
    pipe.ack_fill(50);
    assert_eq!(pipe.v.cwnd(), 1000);
}

#[test]
fn beta_shrinks_by_cwnd_inc() {
    // queue use = 1000 - 1000*35/50 = 300 > beta (248), < delta (372).
    let mut pipe = steady(1000, 35, 50);
    pipe.ack_fill(50);
    assert_eq!(pipe.v.cwnd(), 999);
}

#[test]
fn delta_drops_to_bdp_plus_delta() {
    // queue use = 1000 - 1000*20/50 = 600 > delta (372):
    // cwnd = BDP + delta - cwnd_inc = 400 + 372 - 1.
    let mut pipe = steady(1000, 20, 50);
    pipe.ack_fill(50);
    assert_eq!(pipe.v.cwnd(), 400 + 372 - 1);
}

#[test]
fn the_window_never_falls_below_cwnd_min() {
    // BDP tiny: delta rule would go to 2 + 372 - 1; with an ewma 100x the
    // minimum on a small window the floor (124) applies.
    let mut pipe = steady(130, 1, 100);
    pipe.ack_fill(100);
    assert!(pipe.v.cwnd() >= 124);
    let mut pipe = steady(124, 30, 50);
    // queue 124 - 74 = 50: no change; then a blocked channel: -1, floored.
    pipe.ack(
        Duration::from_millis(50),
        ChanSignal {
            blocked: true,
            queued_cells: 0,
        },
    )
    .unwrap();
    assert_eq!(pipe.v.cwnd(), 124);
}

#[test]
fn a_blocked_channel_is_an_immediate_congestion_signal() {
    let mut pipe = steady(1000, 50, 50);
    // Not yet time for an update (next_cc_event large)...
    pipe.v.next_cc_event = 30;
    pipe.ack(
        Duration::from_millis(50),
        ChanSignal {
            blocked: true,
            queued_cells: 10,
        },
    )
    .unwrap();
    // ...but the channel blocking forces one, and it shrinks the window.
    assert_eq!(pipe.v.cwnd(), 999);
    // In slow start a blocked channel ends slow start at BDP + gamma.
    let p = CcParams::default();
    let mut pipe = Pipe::new(&p);
    pipe.fill();
    pipe.ack_fill(50);
    pipe.ack(
        Duration::from_millis(50),
        ChanSignal {
            blocked: true,
            queued_cells: 0,
        },
    )
    .unwrap();
    assert!(!pipe.v.in_slow_start());
    assert_eq!(pipe.v.cwnd(), pipe.v.snapshot().bdp + 186);
}

#[test]
fn steady_state_updates_about_once_per_window() {
    // cwnd 3000: CWND_UPDATE_RATE = (3000 + 961/2) / 961 = 3 SENDMEs.
    let mut pipe = steady(3000, 50, 50);
    pipe.v.next_cc_event = 3;
    let mut cwnds = Vec::new();
    for _ in 0..6 {
        pipe.ack_fill(50);
        cwnds.push(pipe.v.cwnd());
    }
    assert_eq!(cwnds, vec![3000, 3000, 3001, 3001, 3001, 3002]);
}

#[test]
fn cwnd_max_clamps() {
    let mut m = std::collections::BTreeMap::new();
    m.insert("cc_cwnd_max".to_string(), 500);
    let p = CcParams::from_consensus(&m);
    let mut pipe = Pipe::new(&p);
    pipe.fill();
    for _ in 0..100 {
        pipe.ack_fill(30);
        assert!(pipe.v.cwnd() <= 500);
    }
}

#[test]
fn consensus_init_and_increment_are_used() {
    let mut m = std::collections::BTreeMap::new();
    m.insert("cc_cwnd_init".to_string(), 300);
    m.insert("cc_cwnd_inc_pct_ss".to_string(), 50);
    m.insert("cc_sendme_inc".to_string(), 20);
    let p = CcParams::from_consensus(&m);
    let mut pipe = Pipe::new(&p);
    assert_eq!(pipe.v.cwnd(), 300);
    assert_eq!(pipe.v.sendme_inc(), 20);
    pipe.fill();
    pipe.ack_fill(40);
    // round(50 % of 20) = 10.
    assert_eq!(pipe.v.cwnd(), 310);
}

#[test]
fn a_stalled_clock_skips_the_algorithm() {
    let mut pipe = steady(1000, 50, 50);
    let before = pipe.v.cwnd();
    let inflight = pipe.v.inflight();
    // RTT 0: a stall. Nothing but inflight changes.
    let s = pipe.sent.pop_front().unwrap();
    pipe.v.on_sendme(s, ChanSignal::default()).unwrap();
    assert_eq!(pipe.v.cwnd(), before);
    assert_eq!(pipe.v.inflight(), inflight - 31);
    assert!(pipe.v.rtt().clock_broken);
}
