//! Unit tests of the build-time estimator and its state lines.
#![allow(clippy::unwrap_used)]

use super::*;
use rand::SeedableRng;

fn est(min_circs: u32) -> BuildTimeEstimator {
    let mut e = BuildTimeEstimator::new(CbtParams {
        min_circs,
        ..CbtParams::default()
    });
    e.network_is_live(Instant::now());
    e
}

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

#[test]
fn initial_timeout_until_enough_circuits() {
    let mut e = est(100);
    assert_eq!(e.timeout(), Duration::from_secs(60));
    assert_eq!(e.close_timeout(), Duration::from_secs(60));
    for _ in 0..99 {
        assert!(e.record_build(ms(250), false));
    }
    assert!(!e.has_computed_timeout());
    assert!(e.needs_circuits());
    assert_eq!(e.timeout(), Duration::from_secs(60));
    e.record_build(ms(250), false);
    assert!(e.has_computed_timeout());
    assert!(!e.needs_circuits());
}

#[test]
fn hand_computed_pareto_fit() {
    // Bins 10, 20, 40 (midpoints 105, 205, 405 ms) one each:
    // Xm = 715 / 3 = 238 (integer, as tor); alpha = 3 / ln(400/238);
    // timeout = 238 / 0.2^(1/alpha) = 314.45 ms (below the 400 ms
    // maximum); close = 238 / 0.01^(1/alpha) = 528 ms, raised to the
    // 60 s floor.
    let mut e = est(3);
    for t in [100, 200, 400] {
        e.record_build(ms(t), false);
    }
    let (xm, alpha) = e.pareto().unwrap();
    assert_eq!(xm, 238);
    let want_alpha = 3.0 / (400f64 / 238.0).ln();
    assert!((alpha - want_alpha).abs() < 1e-9, "{alpha}");
    let t = e.timeout().as_secs_f64() * 1e3;
    assert!((t - 314.45).abs() < 0.05, "{t}");
    assert_eq!(e.close_timeout(), Duration::from_secs(60));
    // 1-hop circuits get Actions(1)/Actions(3) = 1/6 of it.
    let (t1, c1) = e.timeouts_for_hops(1);
    assert!((t1.as_secs_f64() * 1e3 - 314.45 / 6.0).abs() < 0.05);
    assert_eq!(c1, Duration::from_secs(10));
}

#[test]
fn equal_times_give_the_maximum_observed() {
    // Every sample below Xm (255): alpha is infinite, the quantile is
    // Xm, capped at the largest time observed.
    let mut e = est(100);
    for _ in 0..100 {
        e.record_build(ms(250), false);
    }
    assert_eq!(e.timeout(), ms(250));
}

#[test]
fn floor_at_cbtmintimeout() {
    let mut e = est(5);
    for _ in 0..5 {
        e.record_build(ms(2), false);
    }
    assert_eq!(e.timeout(), ms(10));
}

#[test]
fn fits_a_pareto_sample() {
    // Deterministic quantiles of a Pareto(Xm = 1000 ms, alpha = 3):
    // the 80% point is 1000 / 0.2^(1/3) = 1710 ms.
    let mut e = est(100);
    let n = 1000;
    for i in 0..n {
        let u = (i as f64 + 0.5) / n as f64;
        let x = 1000.0 / (1.0 - u).powf(1.0 / 3.0);
        e.record_build(Duration::from_secs_f64(x / 1e3), false);
    }
    let t = e.timeout().as_secs_f64() * 1e3;
    assert!((1500.0..2000.0).contains(&t), "timeout {t} ms");
    assert!(e.close_timeout() >= Duration::from_secs(60));
}

#[test]
fn keeps_the_last_thousand() {
    let mut e = est(100);
    for _ in 0..1000 {
        e.record_build(ms(5000), false);
    }
    for _ in 0..1000 {
        e.record_build(ms(300), false);
    }
    assert_eq!(e.total_build_times(), 1000);
    assert_eq!(e.timeout(), ms(300));
}

#[test]
fn many_timeouts_reset_the_history() {
    let mut e = est(10);
    for _ in 0..10 {
        e.record_build(ms(300), false);
    }
    assert_eq!(e.timeout(), ms(300));
    // Timeouts before the first hop completed do not count.
    for _ in 0..30 {
        assert!(!e.count_timeout(false));
    }
    for _ in 0..17 {
        assert!(!e.count_timeout(true));
    }
    assert!(e.count_timeout(true));
    assert_eq!(e.resets(), 1);
    assert_eq!(e.total_build_times(), 0);
    assert_eq!(e.timeout(), Duration::from_secs(60));
    // Again, while already at the initial timeout: doubled.
    for _ in 0..18 {
        e.count_timeout(true);
    }
    assert_eq!(e.timeout(), Duration::from_secs(120));
}

#[test]
fn successes_dilute_timeouts() {
    let mut e = est(10);
    for _ in 0..100 {
        e.count_timeout(true);
        e.record_build(ms(300), false);
    }
    assert_eq!(e.resets(), 0);
}

#[test]
fn abandoned_circuits_need_a_live_network() {
    let t0 = Instant::now();
    let mut e = BuildTimeEstimator::new(CbtParams::default());
    // Never live: not recorded, and recording stops.
    assert!(!e.count_close(t0));
    assert!(!e.network_check_live());
    assert!(!e.record_build(ms(300), false));
    e.network_is_live(t0 + ms(10));
    assert!(e.count_close(t0));
    assert!(e.record_build(ms(300), false));
    assert_eq!(e.total_build_times(), 2);
}

#[test]
fn measurement_circuits_are_recorded_but_not_successes() {
    let mut e = est(10);
    for _ in 0..17 {
        e.count_timeout(true);
    }
    e.record_build(ms(900), true);
    // Still 17 of 20 timed out: one more resets.
    assert!(e.count_timeout(true));
}

#[test]
fn clock_jumps_are_not_recorded() {
    let mut e = est(10);
    assert!(!e.record_build(Duration::from_secs(3600), false));
    assert_eq!(e.total_build_times(), 0);
}

#[test]
fn state_round_trip() {
    let mut e = est(20);
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for i in 0..300u64 {
        e.record_build(ms(200 + (i * 37) % 400), false);
    }
    e.network_is_live(Instant::now());
    e.count_close(Instant::now() - ms(1));
    let st = e.to_state();
    assert_eq!(st.total_build_times, 301);
    assert_eq!(st.abandoned, 1);
    let text = st.encode();
    assert!(text.starts_with("TotalBuildTimes 301\nCircuitBuildAbandonedCount 1\n"));
    let parsed = CbtState::parse(&text).unwrap();
    assert_eq!(parsed, st);
    let mut f = BuildTimeEstimator::new(CbtParams {
        min_circs: 20,
        ..CbtParams::default()
    });
    f.load_state(&parsed, &mut rng);
    assert_eq!(f.total_build_times(), 301);
    assert!(f.has_computed_timeout());
    // Loaded times are bin midpoints, so the fit is close, not equal.
    let (a, b) = (e.timeout().as_secs_f64(), f.timeout().as_secs_f64());
    assert!((a - b).abs() < 0.02, "{a} vs {b}");
    assert_eq!(f.to_state(), st);
}

#[test]
fn state_parse_errors() {
    let ok = "TotalBuildTimes 3\nCircuitBuildAbandonedCount 1\nCircuitBuildTimeBin 255 2\n";
    assert_eq!(
        CbtState::parse(ok).unwrap(),
        CbtState {
            total_build_times: 3,
            abandoned: 1,
            bins: vec![(255, 2)]
        }
    );
    // Other state-file keywords are ignored.
    assert!(CbtState::parse(&format!("Guard in=x\n{ok}LastWritten 2026\n")).is_ok());
    for bad in [
        "TotalBuildTimes x\n",
        "TotalBuildTimes 3\nCircuitBuildTimeBin 255\n",
        "TotalBuildTimes 3\nCircuitBuildTimeBin -1 3\n",
        "TotalBuildTimes 3\nCircuitBuildTimeBin 255 3 junk\nCircuitBuildTimeBin 9999999999 1\n",
        "TotalBuildTimes 0\nCircuitBuildAbandonedCount 2\n",
        "TotalBuildTimes 5\nCircuitBuildTimeBin 255 2\n",
        "TotalBuildTimes 4294967295\n",
    ] {
        assert!(CbtState::parse(bad).is_err(), "{bad:?}");
    }
    // Bins past the total are dropped, as tor does.
    let over = "TotalBuildTimes 2\nCircuitBuildTimeBin 255 2\nCircuitBuildTimeBin 305 4\n";
    assert_eq!(CbtState::parse(over).unwrap().bins, vec![(255, 2)]);
    // Huge bin values do not allocate a huge histogram.
    let far = "TotalBuildTimes 2\nCircuitBuildTimeBin 2147483647 1\nCircuitBuildTimeBin 5 1\n";
    let st = CbtState::parse(far).unwrap();
    let mut e = est(2);
    e.load_state(&st, &mut rand::rngs::StdRng::seed_from_u64(1));
    assert!(e.has_computed_timeout());
}

#[test]
fn consensus_params_are_clamped() {
    let p = CbtParams::from_consensus(|k| match k {
        "cbtquantile" => Some(5),
        "cbtclosequantile" => Some(1),
        "cbtmincircs" => Some(0),
        "cbtmaxopencircs" => Some(99),
        "cbtinitialtimeout" => Some(-4),
        "cbtdisabled" => Some(1),
        _ => None,
    });
    assert_eq!(p.quantile, 10);
    assert_eq!(p.close_quantile, 10);
    assert_eq!(p.min_circs, 1);
    assert_eq!(p.max_open_circs, 14);
    assert_eq!(p.initial_timeout_ms, 10);
    assert!(p.disabled);
    assert_eq!(CbtParams::from_consensus(|_| None), CbtParams::default());
}

#[test]
fn disabled_learning_keeps_the_initial_timeout() {
    let mut e = est(3);
    for _ in 0..3 {
        e.record_build(ms(300), false);
    }
    assert!(e.has_computed_timeout());
    e.set_params(CbtParams {
        disabled: true,
        ..CbtParams::default()
    });
    assert_eq!(e.timeout(), Duration::from_secs(60));
    assert!(!e.record_build(ms(300), false));
    assert!(!e.needs_circuits());
}

#[test]
fn learning_circuits_are_paced() {
    let t0 = Instant::now();
    let mut e = est(100);
    assert!(e.needs_circuits_now(t0));
    e.note_circuit_launched(t0);
    assert!(!e.needs_circuits_now(t0 + Duration::from_secs(10)));
    assert!(e.needs_circuits_now(t0 + Duration::from_secs(11)));
}
