//! Flow-control windows (tor-spec §7.3, §7.4) with authenticated SENDME
//! (version 1) digest bookkeeping.

use std::collections::VecDeque;

/// Initial circuit window (the `circwindow` consensus default).
pub const CIRC_WINDOW_START: u16 = 1000;
/// Circuit SENDME increment.
pub const CIRC_WINDOW_INC: u16 = 100;
/// Initial stream window.
pub const STREAM_WINDOW_START: u16 = 500;
/// Stream SENDME increment.
pub const STREAM_WINDOW_INC: u16 = 50;

/// Errors in flow control (all mean: tear the circuit down).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// The peer sent more DATA than the window allowed.
    #[error("deliver window exhausted: peer ignored flow control")]
    DeliverOverflow,
    /// A SENDME would push the package window past its maximum.
    #[error("unexpected SENDME")]
    UnexpectedSendme,
    /// A SENDME v1 digest did not match the one we recorded.
    #[error("authenticated SENDME digest mismatch")]
    BadSendmeDigest,
}

/// The window for cells we send (circuit level), with the digests of the
/// cells that will trigger SENDMEs.
#[derive(Debug, Clone)]
pub struct PackageWindow {
    window: u16,
    max: u16,
    inc: u16,
    expected_tags: VecDeque<[u8; 20]>,
}

impl PackageWindow {
    /// Circuit-level window.
    pub fn circuit() -> Self {
        Self::new(CIRC_WINDOW_START, CIRC_WINDOW_INC)
    }
    /// Stream-level window.
    pub fn stream() -> Self {
        Self::new(STREAM_WINDOW_START, STREAM_WINDOW_INC)
    }
    fn new(start: u16, inc: u16) -> Self {
        PackageWindow {
            window: start,
            max: start,
            inc,
            expected_tags: VecDeque::new(),
        }
    }
    /// Cells we may still send.
    pub fn available(&self) -> u16 {
        self.window
    }
    /// Whether the next DATA cell will trigger a SENDME (so its digest must
    /// be recorded).
    pub fn next_triggers_sendme(&self) -> bool {
        self.window > 0 && (self.window - 1).is_multiple_of(self.inc)
    }
    /// Account for one DATA cell sent; `tag` is its running digest, recorded
    /// when this cell triggers a SENDME. Returns false if the window was 0.
    pub fn on_sent(&mut self, tag: Option<[u8; 20]>) -> bool {
        if self.window == 0 {
            return false;
        }
        if (self.window - 1).is_multiple_of(self.inc)
            && let Some(t) = tag
        {
            self.expected_tags.push_back(t);
        }
        self.window -= 1;
        true
    }
    /// Handle a SENDME; `tag` is the v1 digest if authenticated.
    pub fn on_sendme(&mut self, tag: Option<&[u8; 20]>) -> Result<(), FlowError> {
        if self.window + self.inc > self.max {
            return Err(FlowError::UnexpectedSendme);
        }
        let expected = self.expected_tags.pop_front();
        if let (Some(got), Some(want)) = (tag, expected.as_ref())
            && got != want
        {
            return Err(FlowError::BadSendmeDigest);
        }
        self.window += self.inc;
        Ok(())
    }
}

/// The window for cells we receive.
#[derive(Debug, Clone)]
pub struct DeliverWindow {
    window: u16,
    max: u16,
    inc: u16,
}

impl DeliverWindow {
    /// Circuit-level window.
    pub fn circuit() -> Self {
        DeliverWindow {
            window: CIRC_WINDOW_START,
            max: CIRC_WINDOW_START,
            inc: CIRC_WINDOW_INC,
        }
    }
    /// Stream-level window.
    pub fn stream() -> Self {
        DeliverWindow {
            window: STREAM_WINDOW_START,
            max: STREAM_WINDOW_START,
            inc: STREAM_WINDOW_INC,
        }
    }
    /// Account for one DATA cell received.
    pub fn on_received(&mut self) -> Result<(), FlowError> {
        if self.window == 0 {
            return Err(FlowError::DeliverOverflow);
        }
        self.window -= 1;
        Ok(())
    }
    /// Whether a SENDME is due now (window at or below max - inc).
    pub fn sendme_due(&self) -> bool {
        self.window <= self.max - self.inc
    }
    /// Record that we sent a SENDME.
    pub fn on_sendme_sent(&mut self) {
        self.window = self.window.saturating_add(self.inc).min(self.max);
    }
    /// Current window.
    pub fn window(&self) -> u16 {
        self.window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_window_records_every_hundredth_digest() {
        let mut w = PackageWindow::circuit();
        let mut recorded = 0;
        for i in 0..1000u32 {
            let trig = (w.available() - 1).is_multiple_of(CIRC_WINDOW_INC);
            let mut tag = [0u8; 20];
            tag[..4].copy_from_slice(&i.to_be_bytes());
            assert!(w.on_sent(Some(tag)));
            if trig {
                recorded += 1;
                // The 100th, 200th, ... cells (index 99, 199, ...).
                assert_eq!((i + 1) % 100, 0);
            }
        }
        assert_eq!(recorded, 10);
        assert!(!w.on_sent(None));
        let mut t = [0u8; 20];
        t[..4].copy_from_slice(&99u32.to_be_bytes());
        w.on_sendme(Some(&t)).unwrap();
        assert_eq!(w.available(), 100);
        let bad = [9u8; 20];
        assert_eq!(w.on_sendme(Some(&bad)), Err(FlowError::BadSendmeDigest));
    }

    #[test]
    fn sendme_beyond_max_rejected() {
        let mut w = PackageWindow::stream();
        assert_eq!(w.on_sendme(None), Err(FlowError::UnexpectedSendme));
    }

    #[test]
    fn deliver_window() {
        let mut d = DeliverWindow::stream();
        for _ in 0..49 {
            d.on_received().unwrap();
        }
        assert!(!d.sendme_due());
        d.on_received().unwrap();
        assert!(d.sendme_due());
        d.on_sendme_sent();
        assert_eq!(d.window(), 500);
        for _ in 0..500 {
            d.on_received().unwrap();
        }
        assert_eq!(d.on_received(), Err(FlowError::DeliverOverflow));
    }
}
