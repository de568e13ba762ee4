//! Congestion control (proposal 324) and the circuit-level send side of
//! flow control: which cells may be sent, which SENDMEs are valid.
//!
//! [`CircSender`] is one circuit's (or, at a client, one hop's) sending
//! state: either tor's fixed window (1000 cells, a SENDME every 100) or
//! [`vegas::Vegas`] with the SENDME increment the two ends negotiated. Both
//! keep the digests of the cells that trigger SENDMEs and check
//! authenticated SENDMEs against them in constant time. Reusable by any
//! circuit end: clients sending uploads, exits sending downloads, and
//! onion-service circuits later (with [`CcPath::Onion`]).

pub mod negotiate;
pub mod params;
pub mod rtt;
pub mod vegas;

use std::collections::VecDeque;
use std::time::Instant;

use subtle::ConstantTimeEq;

use onionmix_cell::relay::Sendme;

pub use params::{CcParams, CcPath};
pub use vegas::{CcSnapshot, ChanSignal, MAX_PENDING_SENDMES, Vegas};

use crate::flow::{CIRC_WINDOW_INC, CIRC_WINDOW_START, FlowError};

/// Digests of the cells that will trigger SENDMEs, oldest first.
#[derive(Debug, Clone, Default)]
pub struct SendmeTags {
    tags: VecDeque<[u8; 20]>,
}

impl SendmeTags {
    /// Remember the digest of a SENDME-triggering cell.
    pub fn record(&mut self, tag: [u8; 20]) {
        self.tags.push_back(tag);
    }
    /// How many are waiting.
    pub fn len(&self) -> usize {
        self.tags.len()
    }
    /// Whether none are waiting.
    pub fn is_empty(&self) -> bool {
        self.tags.is_empty()
    }
    /// Take the oldest digest and check a SENDME against it (tor's
    /// `sendme_is_valid`): a version below `min_version` is refused; every
    /// SENDME, of any version, consumes one digest, and one with none
    /// waiting is refused; a v1 tag must equal it (constant-time compare).
    pub fn check(&mut self, msg: &Sendme, min_version: u8) -> Result<(), FlowError> {
        let version = match msg {
            Sendme::Unauthenticated => 0,
            Sendme::Authenticated(_) => 1,
        };
        if version < min_version {
            return Err(FlowError::SendmeVersion(version));
        }
        let want = self.tags.pop_front().ok_or(FlowError::UnexpectedSendme)?;
        if let Sendme::Authenticated(got) = msg
            && !bool::from(got.ct_eq(&want))
        {
            return Err(FlowError::BadSendmeDigest);
        }
        Ok(())
    }
}

#[derive(Debug, Clone)]
enum Window {
    /// tor's fixed circuit package window.
    Fixed(u16),
    /// Congestion control.
    Vegas(Box<Vegas>),
}

/// The sending side of one circuit (or one hop of a client's circuit).
#[derive(Debug, Clone)]
pub struct CircSender {
    win: Window,
    tags: SendmeTags,
    accept_min_version: u8,
    seen_v1: bool,
}

impl CircSender {
    /// Fixed windows; SENDMEs older than `accept_min_version`
    /// (`sendme_accept_min_version`) are refused.
    pub fn fixed(accept_min_version: u8) -> Self {
        CircSender {
            win: Window::Fixed(CIRC_WINDOW_START),
            tags: SendmeTags::default(),
            accept_min_version,
            seen_v1: false,
        }
    }

    /// Congestion control with the negotiated `sendme_inc`.
    pub fn vegas(p: &CcParams, path: CcPath, sendme_inc: u8) -> Self {
        CircSender {
            win: Window::Vegas(Box::new(Vegas::new(p, path, sendme_inc))),
            tags: SendmeTags::default(),
            accept_min_version: p.sendme_accept_min_version,
            seen_v1: false,
        }
    }

    /// Whether congestion control runs on this circuit.
    pub fn is_cc(&self) -> bool {
        matches!(self.win, Window::Vegas(_))
    }

    /// DATA cells acknowledged by each SENDME.
    pub fn sendme_inc(&self) -> u16 {
        match &self.win {
            Window::Fixed(_) => CIRC_WINDOW_INC,
            Window::Vegas(v) => u16::try_from(v.sendme_inc()).unwrap_or(u16::MAX),
        }
    }

    /// Whether a DATA cell may be sent now.
    pub fn can_send(&self) -> bool {
        match &self.win {
            Window::Fixed(w) => *w > 0,
            Window::Vegas(v) => v.can_send(),
        }
    }

    /// DATA cells that may be sent now.
    pub fn window(&self) -> u64 {
        match &self.win {
            Window::Fixed(w) => u64::from(*w),
            Window::Vegas(v) => v.window(),
        }
    }

    /// Whether the next DATA cell will make the other end send a SENDME.
    pub fn next_triggers_sendme(&self) -> bool {
        match &self.win {
            Window::Fixed(w) => *w > 0 && (w - 1).is_multiple_of(CIRC_WINDOW_INC),
            Window::Vegas(v) => v.next_triggers_sendme(),
        }
    }

    /// Account for one DATA cell sent at `now` whose running digest is
    /// `tag` (kept if it triggers a SENDME). Returns false (and counts
    /// nothing) if the window was closed.
    pub fn on_sent(&mut self, tag: [u8; 20], now: Instant) -> bool {
        if !self.can_send() {
            return false;
        }
        if self.next_triggers_sendme() {
            self.tags.record(tag);
        }
        match &mut self.win {
            Window::Fixed(w) => *w -= 1,
            Window::Vegas(v) => {
                v.on_sent(now);
            }
        }
        true
    }

    /// Handle a circuit-level SENDME received at `now`; `chan` says
    /// whether our channel is blocked (a congestion signal). Any error
    /// means: close the circuit.
    pub fn on_sendme(
        &mut self,
        msg: &Sendme,
        now: Instant,
        chan: ChanSignal,
    ) -> Result<(), FlowError> {
        // Once the peer has authenticated its SENDMEs, it may not go back.
        let min = if self.seen_v1 {
            self.accept_min_version.max(1)
        } else {
            self.accept_min_version
        };
        self.tags.check(msg, min)?;
        if matches!(msg, Sendme::Authenticated(_)) {
            self.seen_v1 = true;
        }
        match &mut self.win {
            Window::Fixed(w) => {
                if *w + CIRC_WINDOW_INC > CIRC_WINDOW_START {
                    return Err(FlowError::UnexpectedSendme);
                }
                *w += CIRC_WINDOW_INC;
                Ok(())
            }
            Window::Vegas(v) => v.on_sendme(now, chan),
        }
    }

    /// The congestion-control state, if it runs.
    pub fn snapshot(&self) -> Option<CcSnapshot> {
        match &self.win {
            Window::Fixed(_) => None,
            Window::Vegas(v) => Some(v.snapshot()),
        }
    }

    /// The largest RTT seen (µs; 0 without congestion control).
    pub fn max_rtt_usec(&self) -> u64 {
        match &self.win {
            Window::Fixed(_) => 0,
            Window::Vegas(v) => v.rtt().max_usec,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tag(i: u32) -> [u8; 20] {
        let mut t = [0u8; 20];
        t[..4].copy_from_slice(&i.to_be_bytes());
        t
    }

    #[test]
    fn fixed_window_records_every_hundredth_digest() {
        let now = Instant::now();
        let mut s = CircSender::fixed(0);
        for i in 0..1000u32 {
            assert!(s.on_sent(tag(i), now));
        }
        assert!(!s.can_send());
        assert!(!s.on_sent(tag(9999), now));
        let c = ChanSignal::default();
        // The 100th cell (index 99) is the first trigger.
        assert_eq!(
            s.on_sendme(&Sendme::Authenticated(tag(98)), now, c),
            Err(FlowError::BadSendmeDigest)
        );
        // That SENDME consumed the digest: the next one checks index 199.
        s.on_sendme(&Sendme::Authenticated(tag(199)), now, c)
            .unwrap();
        assert_eq!(s.window(), 100);
    }

    #[test]
    fn sendme_without_digest_or_over_the_window_is_refused() {
        let now = Instant::now();
        let c = ChanSignal::default();
        let mut s = CircSender::fixed(0);
        assert_eq!(
            s.on_sendme(&Sendme::Unauthenticated, now, c),
            Err(FlowError::UnexpectedSendme)
        );
        let mut s = CircSender::vegas(&CcParams::default(), CcPath::Exit, 31);
        assert_eq!(
            s.on_sendme(&Sendme::Authenticated([0; 20]), now, c),
            Err(FlowError::UnexpectedSendme)
        );
    }

    #[test]
    fn v0_refused_by_consensus_or_after_a_v1() {
        let now = Instant::now();
        let c = ChanSignal::default();
        // sendme_accept_min_version=1 refuses v0 outright.
        let mut s = CircSender::fixed(1);
        for i in 0..200 {
            s.on_sent(tag(i), now);
        }
        assert_eq!(
            s.on_sendme(&Sendme::Unauthenticated, now, c),
            Err(FlowError::SendmeVersion(0))
        );
        // With 0, v0 is fine until the peer has sent a v1.
        let mut s = CircSender::fixed(0);
        for i in 0..300 {
            s.on_sent(tag(i), now);
        }
        s.on_sendme(&Sendme::Unauthenticated, now, c).unwrap();
        s.on_sendme(&Sendme::Authenticated(tag(199)), now, c)
            .unwrap();
        assert_eq!(
            s.on_sendme(&Sendme::Unauthenticated, now, c),
            Err(FlowError::SendmeVersion(0))
        );
    }

    #[test]
    fn vegas_sender_tags_every_sendme_inc_cells() {
        let t0 = Instant::now();
        let mut s = CircSender::vegas(&CcParams::default(), CcPath::Exit, 31);
        assert!(s.is_cc());
        assert_eq!(s.sendme_inc(), 31);
        for i in 1..=124u32 {
            assert!(s.on_sent(tag(i), t0));
        }
        assert!(!s.can_send());
        let t1 = t0 + std::time::Duration::from_millis(40);
        let c = ChanSignal::default();
        s.on_sendme(&Sendme::Authenticated(tag(31)), t1, c).unwrap();
        // Slow start: +31, and 31 cells acknowledged.
        let snap = s.snapshot().unwrap();
        assert_eq!((snap.cwnd, snap.inflight), (155, 93));
        assert_eq!(snap.ewma_rtt_usec, 40_000);
        assert_eq!(
            s.on_sendme(&Sendme::Authenticated(tag(61)), t1, c),
            Err(FlowError::BadSendmeDigest)
        );
    }
}
