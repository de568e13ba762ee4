//! The client connect machine: fetch, introduce, retry and give up as tor
//! does, with the SOCKS errors of proposal 304.

use super::*;
use crate::desc::{IntroPointInfo, PowParamsV1};
use rand::SeedableRng;
use rand::rngs::StdRng;

const SVC: [u8; 32] = [9; 32];

fn ip(n: u8) -> IntroPointInfo {
    IntroPointInfo {
        link_specifiers: Vec::new(),
        onion_key: [n; 32],
        auth_key: [n; 32],
        enc_key: [n; 32],
    }
}

fn desc(revision: u64, ips: &[u8]) -> DescriptorContent {
    DescriptorContent {
        revision,
        intro_points: ips.iter().map(|n| ip(*n)).collect(),
        single_onion_service: false,
        intro_auth_required: false,
        pow_v1: None,
        flow_control_sendme_inc: None,
    }
}

fn rng() -> StdRng {
    StdRng::seed_from_u64(7)
}

#[test]
fn no_descriptor_fetches_then_introduces() {
    let mut p = ConnectPlan::new(SVC);
    let st = IntroStateCache::new();
    let mut r = rng();
    assert_eq!(p.next(None, &st, 0, &mut r), Step::Fetch);
    p.fetch_done(Ok(()));
    let d = desc(1, &[1]);
    assert_eq!(
        p.next(Some(&d), &st, 0, &mut r),
        Step::Introduce {
            index: 0,
            effort: 0
        }
    );
    assert_eq!(p.fetches(), 1);
}

#[test]
fn fetch_errors_end_the_attempt_with_their_code() {
    for (e, code) in [
        (HsClientError::DescriptorNotFound, 0xF0),
        (HsClientError::MissingClientAuth, 0xF4),
        (HsClientError::WrongClientAuth, 0xF5),
    ] {
        let mut p = ConnectPlan::new(SVC);
        let st = IntroStateCache::new();
        assert_eq!(p.next(None, &st, 0, &mut rng()), Step::Fetch);
        p.fetch_done(Err(e.clone()));
        match p.next(None, &st, 0, &mut rng()) {
            Step::Fail(got) => {
                assert_eq!(got, e);
                assert_eq!(got.socks5_reply(), code);
            }
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn each_point_once_then_refetch_then_fail() {
    let mut p = ConnectPlan::new(SVC);
    let mut st = IntroStateCache::new();
    let mut r = rng();
    let d = desc(1, &[1, 2, 3]);
    let mut seen = Vec::new();
    for _ in 0..3 {
        match p.next(Some(&d), &st, 10, &mut r) {
            Step::Introduce { index, .. } => {
                seen.push(index);
                let key = d.intro_points[index].auth_key;
                p.intro_failed(&key, IntroOutcome::Nack(1), &mut st, 10);
            }
            other => panic!("{other:?}"),
        }
    }
    seen.sort_unstable();
    assert_eq!(seen, vec![0, 1, 2], "every point once, none twice");
    // Every point failed: fetch a fresh descriptor.
    assert_eq!(p.next(Some(&d), &st, 10, &mut r), Step::Fetch);
    p.fetch_done(Ok(()));
    // The same descriptor again: its points are still marked failed.
    assert_eq!(p.next(Some(&d), &st, 10, &mut r), Step::Fetch);
    p.fetch_done(Ok(()));
    assert_eq!(p.next(Some(&d), &st, 10, &mut r), Step::Fetch);
    p.fetch_done(Ok(()));
    match p.next(Some(&d), &st, 10, &mut r) {
        Step::Fail(e) => {
            assert_eq!(e, HsClientError::IntroFailed(IntroFailure::Nack(1)));
            assert_eq!(e.socks5_reply(), 0xF2);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_new_descriptor_with_new_points_succeeds_after_nacks() {
    // A stock service rotated its introduction points: the cached
    // descriptor's points NACK, the refetched one has fresh points.
    let mut p = ConnectPlan::new(SVC);
    let mut st = IntroStateCache::new();
    let mut r = rng();
    let old = desc(1, &[1]);
    let Step::Introduce { index, .. } = p.next(Some(&old), &st, 0, &mut r) else {
        panic!()
    };
    p.intro_failed(
        &old.intro_points[index].auth_key,
        IntroOutcome::Nack(1),
        &mut st,
        0,
    );
    assert_eq!(p.next(Some(&old), &st, 0, &mut r), Step::Fetch);
    p.fetch_done(Ok(()));
    let new = desc(2, &[4, 5]);
    assert!(matches!(
        p.next(Some(&new), &st, 0, &mut r),
        Step::Introduce { .. }
    ));
}

#[test]
fn rendezvous_failures_do_not_blame_the_point_but_are_reported() {
    let mut p = ConnectPlan::new(SVC);
    let mut st = IntroStateCache::new();
    let mut r = rng();
    let d = desc(1, &[1]);
    let Step::Introduce { index, .. } = p.next(Some(&d), &st, 0, &mut r) else {
        panic!()
    };
    let key = d.intro_points[index].auth_key;
    p.intro_failed(
        &key,
        IntroOutcome::Rend(RendFailure::BadHandshake),
        &mut st,
        0,
    );
    assert!(st.is_usable(&SVC, &key, 0));
    // Tried in this attempt already: refetch, then give up with 0xF3.
    for _ in 0..MAX_FETCHES {
        assert_eq!(p.next(Some(&d), &st, 0, &mut r), Step::Fetch);
        p.fetch_done(Ok(()));
    }
    match p.next(Some(&d), &st, 0, &mut r) {
        Step::Fail(e) => assert_eq!(e.socks5_reply(), 0xF3),
        other => panic!("{other:?}"),
    }
}

#[test]
fn timeouts_and_unreachable_map_to_their_codes() {
    assert_eq!(IntroOutcome::AckTimeout.error().socks5_reply(), 0xF7);
    assert_eq!(IntroOutcome::RendTimeout.error().socks5_reply(), 0xF3);
    assert_eq!(IntroOutcome::Unreachable.error().socks5_reply(), 0xF2);
    let p = ConnectPlan::new(SVC);
    assert_eq!(p.timed_out(true).socks5_reply(), 0xF0);
    assert_eq!(p.timed_out(false).socks5_reply(), 0xF7);
    assert_eq!(
        IntroOutcome::Unreachable.intro_failure(),
        Some(IntroFailureKind::Unreachable)
    );
    assert_eq!(
        IntroOutcome::Rend(RendFailure::CircuitClosed).intro_failure(),
        None
    );
}

#[cfg(feature = "pow")]
#[test]
fn pow_effort_starts_at_the_suggestion_and_grows_with_unreachability() {
    let mut d = desc(1, &[1]);
    assert_eq!(effort(&d, 3), 0, "no pow-params, no puzzle");
    d.pow_v1 = Some(PowParamsV1 {
        seed: [0; 32],
        suggested_effort: 50,
        expires: u64::MAX,
    });
    assert_eq!(effort(&d, 0), 50);
    assert_eq!(effort(&d, 2), 200);
    if let Some(p) = d.pow_v1.as_mut() {
        p.suggested_effort = 0;
    }
    assert_eq!(effort(&d, 0), 0, "suggested 0 and no failures: no puzzle");
    assert_eq!(effort(&d, 1), 8, "a retry raises 0 to the minimum");
    if let Some(p) = d.pow_v1.as_mut() {
        p.suggested_effort = 1_000_000;
    }
    assert_eq!(effort(&d, 0), 10_000, "capped");
    // The plan passes the point's unreachable count in.
    let mut st = IntroStateCache::new();
    st.note(&SVC, &[1; 32], IntroFailureKind::Unreachable, 0);
    if let Some(p) = d.pow_v1.as_mut() {
        p.suggested_effort = 10;
    }
    let mut p = ConnectPlan::new(SVC);
    assert_eq!(
        p.next(Some(&d), &st, 1, &mut rng()),
        Step::Introduce {
            index: 0,
            effort: 20
        }
    );
}

#[test]
fn fetch_round_order_skips_and_errors() {
    let mut r = rng();
    let mut round = FetchRound::new(6, |i| i != 2, &mut r);
    let mut seen = Vec::new();
    while let Some(i) = round.next_hsdir() {
        seen.push(i);
        round.failed(FetchFailure::NotFound);
    }
    seen.sort_unstable();
    assert_eq!(seen, vec![0, 1, 3, 4, 5]);
    assert_eq!(round.error(), HsClientError::DescriptorNotFound);
    let mut round = FetchRound::new(2, |_| true, &mut r);
    round.next_hsdir();
    round.failed(FetchFailure::Invalid(DescError::DecryptFailed));
    round.next_hsdir();
    round.failed(FetchFailure::Unreachable);
    assert_eq!(round.error().socks5_reply(), 0xF1);
    assert!(round.next_hsdir().is_none());
    // Different seeds give different orders (random, not fixed).
    let orders: std::collections::HashSet<Vec<usize>> = (0..20)
        .map(|s| {
            let mut round = FetchRound::new(6, |_| true, &mut StdRng::seed_from_u64(s));
            std::iter::from_fn(|| round.next_hsdir()).collect()
        })
        .collect();
    assert!(orders.len() > 1);
}

#[test]
fn preferred_points_first_then_the_rest() {
    // Whatever the draw, the preferred point (auth key 2) comes first;
    // then the others, each once; then a fetch.
    for seed in 0..20 {
        let mut p = ConnectPlan::new(SVC);
        let st = IntroStateCache::new();
        let mut r = StdRng::seed_from_u64(seed);
        let d = desc(1, &[1, 2, 3]);
        let prefer = |ip: &IntroPointInfo| ip.auth_key == [2; 32];
        let mut order = Vec::new();
        for _ in 0..3 {
            let Step::Introduce { index, .. } =
                p.next_preferring(Some(&d), &st, 0, &mut r, &prefer)
            else {
                panic!("expected an introduction");
            };
            order.push(index);
        }
        assert_eq!(order[0], 1, "seed {seed}: {order:?}");
        order.sort_unstable();
        assert_eq!(order, vec![0, 1, 2]);
        assert_eq!(
            p.next_preferring(Some(&d), &st, 0, &mut r, &prefer),
            Step::Fetch
        );
    }
    // Nothing preferred: every point is still tried.
    let mut p = ConnectPlan::new(SVC);
    let st = IntroStateCache::new();
    let mut r = rng();
    let d = desc(1, &[1, 2]);
    let mut order = Vec::new();
    for _ in 0..2 {
        let Step::Introduce { index, .. } = p.next_preferring(Some(&d), &st, 0, &mut r, &|_| false)
        else {
            panic!("expected an introduction");
        };
        order.push(index);
    }
    order.sort_unstable();
    assert_eq!(order, vec![0, 1]);
}
