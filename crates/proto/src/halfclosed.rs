//! Half-closed streams at a circuit's origin (tor's `half_edge_t`): after
//! we send END, cells the other end sent before it saw our END may still
//! arrive. They are valid up to what that stream could still carry: one
//! CONNECTED if we closed before it came, the rest of its deliver window
//! of DATA and its unanswered SENDMEs (stream windows), or anything until
//! a deadline (congestion control, where stream windows do not exist:
//! proposal 324 §4.1.4). The other end's END (or RESOLVED) ends it. Its
//! stream ID is not reused meanwhile. Cells beyond that are invalid: the
//! caller counts them (as tor's accounting of dropped cells does).

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// Most half-closed streams remembered per circuit; the oldest is
/// forgotten beyond this.
pub const MAX_HALF_CLOSED: usize = 512;

/// What a stream could still receive when we closed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HalfInit {
    /// We closed it before its CONNECTED arrived.
    pub connected_pending: bool,
    /// DATA cells it may still get (its deliver window); 0 for a RESOLVE.
    pub data_pending: u16,
    /// Stream SENDMEs it may still get.
    pub sendmes_pending: u16,
    /// With congestion control: anything is valid until then.
    pub cc_deadline: Option<Instant>,
}

/// The half-closed streams of one circuit.
#[derive(Debug, Clone, Default)]
pub struct HalfClosed {
    streams: HashMap<u16, HalfInit>,
    order: VecDeque<u16>,
}

impl HalfClosed {
    /// Remember a stream we just closed.
    pub fn add(&mut self, sid: u16, init: HalfInit) {
        if self.streams.insert(sid, init).is_none() {
            self.order.push_back(sid);
        }
        while self.streams.len() > MAX_HALF_CLOSED {
            match self.order.pop_front() {
                Some(old) => {
                    self.streams.remove(&old);
                }
                None => break,
            }
        }
        if self.order.len() > 2 * MAX_HALF_CLOSED {
            let live = &self.streams;
            self.order.retain(|s| live.contains_key(s));
        }
    }

    /// Whether `sid` is half-closed (its ID may not be reused).
    pub fn contains(&self, sid: u16) -> bool {
        self.streams.contains_key(&sid)
    }

    /// Number of half-closed streams.
    pub fn len(&self) -> usize {
        self.streams.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// DATA for `sid` at `now`: `None` if not half-closed, else whether
    /// it was valid (and it is counted against the window).
    pub fn on_data(&mut self, sid: u16, now: Instant) -> Option<bool> {
        let h = self.streams.get_mut(&sid)?;
        if let Some(d) = h.cc_deadline {
            return Some(now <= d);
        }
        if h.data_pending > 0 {
            h.data_pending -= 1;
            return Some(true);
        }
        Some(false)
    }

    /// CONNECTED for `sid`.
    pub fn on_connected(&mut self, sid: u16) -> Option<bool> {
        let h = self.streams.get_mut(&sid)?;
        Some(std::mem::replace(&mut h.connected_pending, false))
    }

    /// A stream-level SENDME for `sid` (never valid with congestion
    /// control).
    pub fn on_sendme(&mut self, sid: u16) -> Option<bool> {
        let h = self.streams.get_mut(&sid)?;
        if h.cc_deadline.is_some() {
            return Some(false);
        }
        if h.sendmes_pending > 0 {
            h.sendmes_pending -= 1;
            return Some(true);
        }
        Some(false)
    }

    /// XON or XOFF for `sid`: valid until the deadline (congestion control
    /// only).
    pub fn on_xon_xoff(&mut self, sid: u16, now: Instant) -> Option<bool> {
        let h = self.streams.get(&sid)?;
        Some(h.cc_deadline.is_some_and(|d| now <= d))
    }

    /// END (or RESOLVED) for `sid`: always valid, and the stream is
    /// forgotten.
    pub fn on_end(&mut self, sid: u16) -> Option<bool> {
        self.streams.remove(&sid).map(|_| true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn window_streams_get_their_remaining_window() {
        let t = Instant::now();
        let mut h = HalfClosed::default();
        h.add(
            7,
            HalfInit {
                connected_pending: true,
                data_pending: 2,
                sendmes_pending: 1,
                cc_deadline: None,
            },
        );
        assert!(h.contains(7));
        assert_eq!(h.on_data(8, t), None);
        assert_eq!(h.on_connected(7), Some(true));
        assert_eq!(h.on_connected(7), Some(false));
        assert_eq!(h.on_data(7, t), Some(true));
        assert_eq!(h.on_data(7, t), Some(true));
        assert_eq!(h.on_data(7, t), Some(false));
        assert_eq!(h.on_sendme(7), Some(true));
        assert_eq!(h.on_sendme(7), Some(false));
        assert_eq!(h.on_xon_xoff(7, t), Some(false));
        assert_eq!(h.on_end(7), Some(true));
        assert!(!h.contains(7));
        assert_eq!(h.on_end(7), None);
    }

    #[test]
    fn cc_streams_are_time_limited() {
        let t = Instant::now();
        let mut h = HalfClosed::default();
        h.add(
            3,
            HalfInit {
                connected_pending: false,
                data_pending: 0,
                sendmes_pending: 0,
                cc_deadline: Some(t + Duration::from_secs(2)),
            },
        );
        for _ in 0..1000 {
            assert_eq!(h.on_data(3, t + Duration::from_secs(1)), Some(true));
        }
        assert_eq!(h.on_xon_xoff(3, t), Some(true));
        assert_eq!(h.on_sendme(3), Some(false));
        assert_eq!(h.on_data(3, t + Duration::from_secs(3)), Some(false));
    }

    #[test]
    fn bounded() {
        let mut h = HalfClosed::default();
        let init = HalfInit {
            connected_pending: false,
            data_pending: 1,
            sendmes_pending: 0,
            cc_deadline: None,
        };
        for sid in 1..=(MAX_HALF_CLOSED as u16 + 10) {
            h.add(sid, init);
        }
        assert_eq!(h.len(), MAX_HALF_CLOSED);
        assert!(!h.contains(1));
        assert!(h.contains(MAX_HALF_CLOSED as u16 + 10));
    }
}
