//! Conflux (proposal 329): the LINK/LINKED and SWITCH bodies, and a
//! conflux set (crates/proto `ConfluxSet`) driven by a hostile peer and a
//! hostile scheduler view: links, LINKED_ACKs, SWITCHes, multiplexed
//! messages on any leg, sends and leg closes in any order.

use std::time::{Duration, Instant};

use onionmix_cell::relay::ConfluxLink;
use onionmix_cell::relay::conflux::{encode_switch, parse_switch};
use onionmix_proto::conflux::{ConfluxSet, LegView};

use crate::input::Input;

/// First a body for the parsers (a u16-length chunk: what parses must
/// re-encode to its prefix and parse back the same), then a set whose
/// limits come from the input, fed one operation per input byte. Asserted:
/// every message handed out is the next in order (the delivered sequence
/// number grows by exactly one each time), the reorder queue and the legs
/// stay within their limits, and every send plan names a leg of the set.
pub fn conflux(data: &[u8]) {
    let mut inp = Input::new(data);
    let body = inp.chunk();
    if let Ok(l) = ConfluxLink::parse(body) {
        let enc = l.encode();
        assert!(
            body.starts_with(&enc),
            "LINK does not re-encode to its prefix"
        );
        assert_eq!(ConfluxLink::parse(&enc), Ok(l));
    }
    if let Ok(s) = parse_switch(body) {
        assert!(body.starts_with(&encode_switch(s)), "SWITCH round trip");
    }
    let max_legs = usize::from(inp.u8() % 10);
    let max_ooo = usize::from(inp.u16());
    let mut set: ConfluxSet<u64> = ConfluxSet::new(max_legs, max_ooo);
    let mut now = Instant::now();
    let mut tag = 0u64;
    let deliver = |set: &mut ConfluxSet<u64>, before: u64, first: Option<u64>| {
        let mut expect = before;
        if first.is_some() {
            expect += 1;
            assert_eq!(set.last_seq_delivered(), expect, "delivered out of order");
        }
        while set.pop_ready().is_some() {
            expect += 1;
            assert_eq!(set.last_seq_delivered(), expect, "delivered out of order");
        }
    };
    while !inp.is_empty() {
        let leg = u64::from(inp.u8() % 8);
        match inp.u8() % 8 {
            0 => {
                let b = inp.bytes(50);
                let link = ConfluxLink::parse(b).unwrap_or_else(|_| ConfluxLink {
                    nonce: onionmix_cell::relay::Nonce([0; 32]),
                    last_seqno_sent: u64::from(inp.u8()),
                    last_seqno_recv: u64::from(inp.u8()),
                    desired_ux: inp.u8() % 5,
                });
                let _ = set.add_leg(leg, &link, Some(now), u64::from(inp.u8()));
            }
            1 => {
                let _ = set.on_linked_ack(leg, now);
            }
            2 => {
                let _ = set.on_switch(leg, inp.u32());
            }
            3 | 4 => {
                let before = set.last_seq_delivered();
                tag += 1;
                let cost = usize::from(inp.u16() % 600);
                if let Ok(first) = set.on_msg(leg, tag, cost) {
                    deliver(&mut set, before, first);
                }
            }
            5 => {
                let views: Vec<LegView> = set
                    .leg_ids()
                    .collect::<Vec<_>>()
                    .into_iter()
                    .map(|id| LegView {
                        id,
                        ready: inp.u8() & 1 == 1,
                        cc_rtt_usec: u64::from(inp.u16()),
                    })
                    .collect();
                let is_data = inp.u8() & 1 == 1;
                if let Ok(Some(plan)) = set.choose_send(is_data, &views) {
                    assert!(set.has_leg(plan.leg), "send plan names no leg");
                    let _ = set.note_sent(plan.leg);
                }
            }
            6 => {
                let _ = set.remove_leg(leg, u64::from(inp.u8()), u64::from(inp.u8() % 100 + 1));
            }
            _ => now += Duration::from_millis(u64::from(inp.u8())),
        }
        assert!(set.ooo_bytes() <= max_ooo, "reorder queue over its bound");
        assert!(set.n_legs() <= max_legs, "more legs than allowed");
    }
    set.clear_queue();
    assert_eq!((set.ooo_len(), set.ooo_bytes()), (0, 0));
}
