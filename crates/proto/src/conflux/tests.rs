use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use onionmix_cell::relay::conflux::ux;
use onionmix_cell::relay::{ConfluxLink, Nonce, RelayCmd};
use proptest::prelude::*;

use super::*;

fn link(sent: u64, recv: u64, desired_ux: u8) -> ConfluxLink {
    ConfluxLink {
        nonce: Nonce([9; 32]),
        last_seqno_sent: sent,
        last_seqno_recv: recv,
        desired_ux,
    }
}

fn set(max_legs: usize, max_ooo: usize) -> ConfluxSet<u32> {
    ConfluxSet::new(max_legs, max_ooo)
}

fn view(id: LegId, ready: bool, rtt: u64) -> LegView {
    LegView {
        id,
        ready,
        cc_rtt_usec: rtt,
    }
}

#[test]
fn algorithm_follows_the_peers_desired_ux_as_tor() {
    assert_eq!(alg_for_ux(ux::NO_OPINION), Alg::LowRtt);
    assert_eq!(alg_for_ux(ux::HIGH_THROUGHPUT), Alg::LowRtt);
    assert_eq!(alg_for_ux(ux::MIN_LATENCY), Alg::MinRtt);
    assert_eq!(alg_for_ux(ux::LOW_MEM_LATENCY), Alg::MinRtt);
    assert_eq!(alg_for_ux(ux::LOW_MEM_THROUGHPUT), Alg::MinRtt);
    assert_eq!(EXIT_UX, ux::MIN_LATENCY);
}

#[test]
fn multiplexed_commands_are_the_stream_ones() {
    for c in [1u8, 2, 3, 4, 11, 12, 43, 44] {
        assert!(should_multiplex(RelayCmd(c)), "{c}");
    }
    // SENDME, EXTEND2, BEGIN_DIR, DROP, the conflux commands themselves,
    // onion-service commands: circuit-specific.
    for c in [5u8, 6, 8, 10, 13, 14, 15, 19, 20, 21, 22, 32, 34, 40] {
        assert!(!should_multiplex(RelayCmd(c)), "{c}");
    }
}

#[test]
fn params_defaults_and_bounds_are_tors() {
    let p = ConfluxParams::default();
    assert!(p.enabled);
    assert_eq!(
        (p.num_legs_set, p.max_legs_set, p.max_prebuilt_set),
        (2, 8, 3)
    );
    assert_eq!((p.max_linked_set, p.max_unlinked_leg_retry), (10, 3));
    assert_eq!(p.low_exit_threshold, 6000);
    assert_eq!(p.max_oooq_bytes, i32::MAX as u32);
    assert_eq!(p.max_leg_launches(), 5);
    let mut m = BTreeMap::new();
    m.insert("cfx_enabled".to_string(), 0);
    m.insert("cfx_max_legs_set".to_string(), 1); // below the minimum of 3
    m.insert("cfx_num_legs_set".to_string(), 300);
    m.insert("cfx_max_oooq_bytes".to_string(), -5);
    let p = ConfluxParams::from_consensus(&m);
    assert!(!p.enabled);
    assert_eq!(
        (p.max_legs_set, p.num_legs_set, p.max_oooq_bytes),
        (3, 255, 0)
    );
    // Pre-built sets by the share of exits that support conflux.
    let d = ConfluxParams::default();
    assert_eq!(d.max_prebuilt(0), 0);
    assert_eq!(d.max_prebuilt(5999), 1);
    assert_eq!(d.max_prebuilt(6000), 3);
}

#[test]
fn linking_seeds_sequence_numbers_and_enforces_limits() {
    let mut s = set(2, 1 << 20);
    s.add_leg(1, &link(0, 0, ux::HIGH_THROUGHPUT), None, 0)
        .unwrap();
    assert_eq!(s.alg(), Alg::LowRtt);
    assert_eq!(
        s.add_leg(1, &link(0, 0, 0), None, 0),
        Err(ConfluxError::DuplicateLeg)
    );
    // The peer claims it sent more than we delivered: data loss, and
    // that closes the whole set.
    let e = s.add_leg(2, &link(5, 0, 0), None, 0).unwrap_err();
    assert_eq!(e, ConfluxError::DataLoss);
    assert!(e.closes_set());
    s.add_leg(2, &link(0, 0, ux::MIN_LATENCY), None, 0).unwrap();
    assert_eq!(s.alg(), Alg::MinRtt);
    assert_eq!(
        s.add_leg(3, &link(0, 0, 0), None, 0),
        Err(ConfluxError::TooManyLegs)
    );
    assert_eq!(s.n_legs(), 2);
    // A leg added later starts where the peer says it is.
    let mut s = set(8, 1 << 20);
    s.add_leg(1, &link(0, 0, 0), None, 0).unwrap();
    assert_eq!(s.on_msg(1, 10, 1).unwrap(), Some(10));
    s.add_leg(2, &link(1, 7, 0), None, 0).unwrap();
    assert_eq!(s.on_msg(2, 11, 1).unwrap(), Some(11));
    assert_eq!(s.last_seq_delivered(), 2);
}

#[test]
fn linked_ack_measures_the_exit_rtt_once() {
    let t0 = Instant::now();
    let mut s = set(8, 1 << 20);
    s.add_leg(7, &link(0, 0, 0), Some(t0), 0).unwrap();
    let rtt = s.on_linked_ack(7, t0 + Duration::from_millis(30)).unwrap();
    assert_eq!(rtt, 30_000);
    assert_eq!(s.link_rtt(7), Some(30_000));
    assert_eq!(
        s.on_linked_ack(7, t0 + Duration::from_millis(40)),
        Err(ConfluxError::DuplicateLinkedAck)
    );
    assert_eq!(s.on_linked_ack(8, t0), Err(ConfluxError::UnknownLeg));
    assert_eq!(s.on_switch(8, 1), Err(ConfluxError::UnknownLeg));
    assert_eq!(s.on_msg(8, 0, 1), Err(ConfluxError::UnknownLeg));
}

/// Proposal 329 §2.6's example from the receiver's side: 10 cells on
/// leg A, then SWITCH(10) and cells on leg B, which arrive first.
#[test]
fn reorder_queue_delivers_in_order_across_a_switch() {
    let mut s = set(8, 1 << 20);
    s.add_leg(1, &link(0, 0, 0), None, 0).unwrap();
    s.add_leg(2, &link(0, 0, 0), None, 0).unwrap();
    s.on_switch(2, 10).unwrap();
    for i in 11..=15u32 {
        assert_eq!(s.on_msg(2, i, 100).unwrap(), None);
    }
    assert_eq!((s.ooo_len(), s.ooo_bytes()), (5, 500));
    assert_eq!(s.pop_ready(), None);
    let mut got = Vec::new();
    for i in 1..=10u32 {
        if let Some(x) = s.on_msg(1, i, 100).unwrap() {
            got.push(x);
        }
        while let Some(x) = s.pop_ready() {
            got.push(x);
        }
    }
    assert_eq!(got, (1..=15).collect::<Vec<_>>());
    assert_eq!((s.ooo_len(), s.ooo_bytes()), (0, 0));
    assert_eq!(s.last_seq_delivered(), 15);
}

#[test]
fn hostile_sequence_numbers_are_refused() {
    let mut s = set(8, 1 << 20);
    s.add_leg(1, &link(0, 0, 0), None, 0).unwrap();
    s.add_leg(2, &link(0, 0, 0), None, 0).unwrap();
    // Both legs claim seq 3: the second copy is refused.
    s.on_switch(1, 2).unwrap();
    s.on_switch(2, 2).unwrap();
    assert_eq!(s.on_msg(1, 0, 1).unwrap(), None);
    assert_eq!(s.on_msg(2, 0, 1), Err(ConfluxError::DuplicateSeq));
    // A leg that falls behind what was delivered.
    let mut s = set(8, 1 << 20);
    s.add_leg(1, &link(0, 0, 0), None, 0).unwrap();
    s.add_leg(2, &link(0, 0, 0), None, 0).unwrap();
    s.on_msg(1, 0, 1).unwrap();
    s.on_msg(1, 0, 1).unwrap();
    assert_eq!(s.on_msg(2, 0, 1), Err(ConfluxError::SeqBehind));
}

#[test]
fn reorder_queue_is_bounded() {
    let mut s = set(8, 1000);
    s.add_leg(1, &link(0, 0, 0), None, 0).unwrap();
    s.add_leg(2, &link(0, 0, 0), None, 0).unwrap();
    s.on_switch(2, 1).unwrap();
    for _ in 0..10 {
        assert_eq!(s.on_msg(2, 0, 100).unwrap(), None);
    }
    let e = s.on_msg(2, 0, 100).unwrap_err();
    assert!(matches!(
        e,
        ConfluxError::ReorderQueueFull {
            bytes: 1000,
            max: 1000
        }
    ));
    assert_eq!(
        e.destroy_reason(),
        onionmix_cell::chan::destroy_reason::RESOURCELIMIT
    );
    assert_eq!(s.clear_queue(), 1000);
    assert_eq!(s.ooo_len(), 0);
}

/// Proposal 329 §2.6's example from the sender's side, with LowRtt: the
/// fast leg until its window is full, then the other, then back.
#[test]
fn low_rtt_switches_when_the_window_fills_with_the_right_relative_numbers() {
    let mut s = set(8, 1 << 20);
    s.add_leg(1, &link(0, 0, ux::HIGH_THROUGHPUT), None, 10_000)
        .unwrap();
    s.add_leg(2, &link(0, 0, ux::HIGH_THROUGHPUT), None, 20_000)
        .unwrap();
    let both = [view(1, true, 0), view(2, true, 0)];
    for _ in 0..10 {
        let p = s.choose_send(true, &both).unwrap().unwrap();
        assert_eq!(
            p,
            SendPlan {
                leg: 1,
                switch: None
            }
        );
        s.note_sent(1).unwrap();
    }
    // Leg 1's window is full: switch to leg 2 with relative number 10.
    let only2 = [view(1, false, 0), view(2, true, 0)];
    let p = s.choose_send(true, &only2).unwrap().unwrap();
    assert_eq!(
        p,
        SendPlan {
            leg: 2,
            switch: Some(10)
        }
    );
    for _ in 0..21 {
        s.note_sent(2).unwrap();
        assert_eq!(
            s.choose_send(true, &only2).unwrap(),
            Some(SendPlan {
                leg: 2,
                switch: None
            })
        );
    }
    s.note_sent(2).unwrap();
    // Back to leg 1 (lower RTT, room again): 32 - 10 = 22.
    let p = s.choose_send(true, &both).unwrap().unwrap();
    assert_eq!(
        p,
        SendPlan {
            leg: 1,
            switch: Some(22)
        }
    );
    // Nothing has room: DATA waits; other commands use the current leg.
    let none = [view(1, false, 0), view(2, false, 0)];
    assert_eq!(s.choose_send(true, &none).unwrap(), None);
    assert_eq!(
        s.choose_send(false, &none).unwrap(),
        Some(SendPlan {
            leg: 1,
            switch: None
        })
    );
    // Congestion control's RTT replaces the handshake's: leg 2 is now
    // faster.
    let p = s
        .choose_send(true, &[view(1, true, 50_000), view(2, true, 5_000)])
        .unwrap()
        .unwrap();
    assert_eq!(p.leg, 2);
}

#[test]
fn min_rtt_waits_for_the_fastest_leg() {
    let mut s = set(8, 1 << 20);
    s.add_leg(1, &link(0, 0, ux::MIN_LATENCY), None, 30_000)
        .unwrap();
    s.add_leg(2, &link(0, 0, ux::MIN_LATENCY), None, 10_000)
        .unwrap();
    let p = s
        .choose_send(true, &[view(1, true, 0), view(2, true, 0)])
        .unwrap();
    assert_eq!(
        p,
        Some(SendPlan {
            leg: 2,
            switch: None
        })
    );
    s.note_sent(2).unwrap();
    // Its window is full: MinRtt does not move to the slower leg.
    assert_eq!(
        s.choose_send(true, &[view(1, true, 0), view(2, false, 0)])
            .unwrap(),
        None
    );
}

#[test]
fn unmeasured_legs_are_skipped_and_the_first_leg_is_the_fallback() {
    // At the exit a BEGIN can beat the slower leg's LINKED_ACK.
    let t0 = Instant::now();
    let mut s = set(8, 1 << 20);
    s.add_leg(1, &link(0, 0, ux::HIGH_THROUGHPUT), Some(t0), 0)
        .unwrap();
    s.add_leg(2, &link(0, 0, ux::HIGH_THROUGHPUT), Some(t0), 0)
        .unwrap();
    s.on_linked_ack(2, t0 + Duration::from_millis(5)).unwrap();
    let v = [view(1, true, 0), view(2, true, 0)];
    assert_eq!(s.choose_send(true, &v).unwrap().unwrap().leg, 2);
    // Nothing measured at all: the first leg, for non-DATA.
    let mut s = set(8, 1 << 20);
    s.add_leg(1, &link(0, 0, 0), None, 0).unwrap();
    assert_eq!(
        s.choose_send(false, &[view(1, true, 0)]).unwrap(),
        Some(SendPlan {
            leg: 1,
            switch: None
        })
    );
    assert_eq!(s.choose_send(true, &[view(1, true, 0)]).unwrap(), None);
    let mut empty: ConfluxSet<u32> = set(8, 1);
    assert_eq!(empty.choose_send(false, &[]), Err(ConfluxError::NoLeg));
}

#[test]
fn closing_a_leg_tears_the_set_down_as_tor_does() {
    let build = || {
        let mut s = set(8, 1 << 20);
        s.add_leg(1, &link(0, 0, 0), None, 10).unwrap();
        s.add_leg(2, &link(0, 0, 0), None, 20).unwrap();
        s
    };
    // An idle leg that is not the current one: the set lives on.
    let mut s = build();
    assert!(!s.remove_leg(2, 0, 31));
    assert_eq!(s.n_legs(), 1);
    // Data in flight on it.
    let mut s = build();
    assert!(s.remove_leg(2, 31, 31));
    // It was the leg we send on.
    let mut s = build();
    s.choose_send(false, &[view(1, true, 0), view(2, true, 0)])
        .unwrap();
    s.note_sent(1).unwrap();
    assert!(s.remove_leg(1, 0, 31));
    // It received the highest sequence number.
    let mut s = build();
    s.on_msg(2, 0, 1).unwrap();
    assert!(s.remove_leg(2, 0, 31));
    // The last leg: nothing left to tear down, the caller drops the set.
    let mut s = build();
    assert!(!s.remove_leg(2, 0, 31));
    assert!(!s.remove_leg(1, 0, 31));
    assert!(s.is_empty());
    assert!(!s.remove_leg(1, 0, 31));
}

#[test]
fn incoherent_or_oversized_switches_close_the_set() {
    let mut s = set(8, 1 << 20);
    // The peer's LINK says it received 5 on leg 2: our next SWITCH to it
    // would go backwards.
    s.add_leg(1, &link(0, 0, ux::HIGH_THROUGHPUT), None, 10)
        .unwrap();
    s.add_leg(2, &link(0, 5, ux::HIGH_THROUGHPUT), None, 20)
        .unwrap();
    s.choose_send(true, &[view(1, true, 0), view(2, true, 0)])
        .unwrap();
    s.note_sent(1).unwrap();
    let e = s
        .choose_send(true, &[view(1, false, 0), view(2, true, 0)])
        .unwrap_err();
    assert_eq!(e, ConfluxError::Incoherent);
    assert!(e.closes_set());
}

/// Send `n` messages over two legs as the sender's scheduler decides
/// with random readiness and RTTs, deliver each leg's cells in order but
/// interleave the legs at random, and check the receiver hands out
/// exactly what was sent, in order, with the queue never above its bound.
fn run_pair(
    alg_ux: u8,
    steps: &[(bool, bool, u16, u16, bool)],
    max_ooo: usize,
) -> Result<(), TestCaseError> {
    #[derive(Debug)]
    enum Wire {
        Switch(u32),
        Msg(u32),
    }
    let mut tx: ConfluxSet<u32> = ConfluxSet::new(8, 0);
    let mut rx: ConfluxSet<u32> = ConfluxSet::new(8, max_ooo);
    for id in [1, 2] {
        tx.add_leg(id, &link(0, 0, alg_ux), None, 1000 * id)
            .unwrap();
        rx.add_leg(id, &link(0, 0, ux::MIN_LATENCY), None, 0)
            .unwrap();
    }
    let mut wires: [VecDeque<Wire>; 2] = [VecDeque::new(), VecDeque::new()];
    let mut next = 0u32;
    let mut got = Vec::new();
    let deliver = |rx: &mut ConfluxSet<u32>,
                   leg: LegId,
                   w: Wire,
                   got: &mut Vec<u32>|
     -> Result<(), ConfluxError> {
        match w {
            Wire::Switch(r) => rx.on_switch(leg, r),
            Wire::Msg(m) => {
                if let Some(x) = rx.on_msg(leg, m, 10)? {
                    got.push(x);
                }
                while let Some(x) = rx.pop_ready() {
                    got.push(x);
                }
                Ok(())
            }
        }
    };
    for &(r1, r2, rtt1, rtt2, from_first) in steps {
        let views = [
            view(1, r1, u64::from(rtt1) + 1),
            view(2, r2, u64::from(rtt2) + 1),
        ];
        let is_data = !next.is_multiple_of(5);
        if let Some(plan) = tx.choose_send(is_data, &views).unwrap() {
            let w = &mut wires[(plan.leg - 1) as usize];
            if let Some(r) = plan.switch {
                w.push_back(Wire::Switch(r));
            }
            w.push_back(Wire::Msg(next));
            tx.note_sent(plan.leg).unwrap();
            next += 1;
        }
        // The network moves one cell of one leg.
        let pick = if from_first { 0 } else { 1 };
        let pick = if wires[pick].is_empty() {
            1 - pick
        } else {
            pick
        };
        if let Some(w) = wires[pick].pop_front() {
            match deliver(&mut rx, pick as LegId + 1, w, &mut got) {
                Ok(()) => {}
                Err(ConfluxError::ReorderQueueFull { .. }) => return Ok(()),
                Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
            }
        }
        prop_assert!(rx.ooo_bytes() <= max_ooo);
    }
    for (pick, wire) in wires.iter_mut().enumerate() {
        while let Some(w) = wire.pop_front() {
            match deliver(&mut rx, pick as LegId + 1, w, &mut got) {
                Ok(()) => {}
                Err(ConfluxError::ReorderQueueFull { .. }) => return Ok(()),
                Err(e) => return Err(TestCaseError::fail(format!("{e}"))),
            }
        }
    }
    prop_assert_eq!(got, (0..next).collect::<Vec<_>>());
    prop_assert_eq!(rx.ooo_len(), 0);
    prop_assert_eq!(rx.last_seq_delivered(), u64::from(next));
    Ok(())
}

proptest! {
    #[test]
    fn sequence_numbers_restore_the_order_whatever_the_interleaving(
        steps in proptest::collection::vec(
            (any::<bool>(), any::<bool>(), 0u16..100, 0u16..100, any::<bool>()),
            0..400,
        ),
        throughput in any::<bool>(),
    ) {
        let u = if throughput { ux::HIGH_THROUGHPUT } else { ux::MIN_LATENCY };
        run_pair(u, &steps, usize::MAX)?;
    }

    #[test]
    fn a_bounded_queue_never_exceeds_its_bound(
        steps in proptest::collection::vec(
            (any::<bool>(), any::<bool>(), 0u16..100, 0u16..100, any::<bool>()),
            0..400,
        ),
        max in 0usize..200,
    ) {
        run_pair(ux::HIGH_THROUGHPUT, &steps, max)?;
    }

    #[test]
    fn hostile_input_never_panics(
        ops in proptest::collection::vec((0u8..4, 0u64..4, any::<u32>()), 0..200),
    ) {
        let mut s: ConfluxSet<u32> = ConfluxSet::new(3, 500);
        let t0 = Instant::now();
        for (op, leg, x) in ops {
            match op {
                0 => { let _ = s.add_leg(leg, &link(u64::from(x % 3), u64::from(x % 5), (x % 5) as u8), Some(t0), 0); }
                1 => { let _ = s.on_switch(leg, x); }
                2 => { let _ = s.on_msg(leg, x, (x % 300) as usize); while s.pop_ready().is_some() {} }
                _ => { let _ = s.on_linked_ack(leg, t0); let _ = s.remove_leg(leg, u64::from(x % 40), 31); }
            }
            prop_assert!(s.ooo_bytes() <= 500);
        }
    }
}
