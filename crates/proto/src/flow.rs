//! Flow-control windows (tor-spec §7.3, §7.4). The circuit-level send side
//! (fixed window or congestion control, with the authenticated-SENDME
//! digests) is [`crate::cc::CircSender`]; here are the stream package
//! windows and the deliver windows that decide when to send SENDMEs.

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
    /// A SENDME would push a package window past its maximum, or arrived
    /// with no SENDME-triggering cell outstanding.
    #[error("unexpected SENDME")]
    UnexpectedSendme,
    /// A SENDME v1 digest did not match the one we recorded.
    #[error("authenticated SENDME digest mismatch")]
    BadSendmeDigest,
    /// A SENDME older than the minimum accepted version (consensus
    /// `sendme_accept_min_version`, or v0 after the peer sent a v1).
    #[error("SENDME version {0} refused")]
    SendmeVersion(u8),
    /// A stream-level SENDME on a congestion-controlled circuit (those use
    /// XON/XOFF).
    #[error("stream SENDME on a congestion-controlled circuit")]
    StreamSendmeWithCc,
    /// XON or XOFF on a circuit without congestion control, or from the
    /// wrong hop.
    #[error("XON/XOFF where flow control does not use them")]
    UnexpectedXonXoff,
    /// More data buffered for a stream than flow control can explain.
    #[error("stream buffer over its hard limit")]
    StreamBufferOverflow,
}

/// A stream's window for cells we send.
#[derive(Debug, Clone)]
pub struct PackageWindow {
    window: u16,
    max: u16,
    inc: u16,
}

impl PackageWindow {
    /// Stream-level window (500, SENDMEs add 50).
    pub fn stream() -> Self {
        PackageWindow {
            window: STREAM_WINDOW_START,
            max: STREAM_WINDOW_START,
            inc: STREAM_WINDOW_INC,
        }
    }
    /// Cells we may still send.
    pub fn available(&self) -> u16 {
        self.window
    }
    /// Account for one DATA cell sent. Returns false if the window was 0.
    pub fn on_sent(&mut self) -> bool {
        if self.window == 0 {
            return false;
        }
        self.window -= 1;
        true
    }
    /// Handle a SENDME: one that would raise the window above its maximum
    /// is refused (the caller closes the circuit).
    pub fn on_sendme(&mut self) -> Result<(), FlowError> {
        if self.window + self.inc > self.max {
            return Err(FlowError::UnexpectedSendme);
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
    /// Circuit-level window with fixed SENDMEs (every 100 cells).
    pub fn circuit() -> Self {
        Self::circuit_with_inc(CIRC_WINDOW_INC)
    }
    /// Circuit-level window with a negotiated SENDME increment (congestion
    /// control): a SENDME every `inc` DATA cells, as tor does (its deliver
    /// window starts at 1000 and never falls below `1000 - inc`).
    pub fn circuit_with_inc(inc: u16) -> Self {
        DeliverWindow {
            window: CIRC_WINDOW_START,
            max: CIRC_WINDOW_START,
            inc: inc.clamp(1, CIRC_WINDOW_START),
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
    fn stream_sendme_beyond_max_rejected() {
        let mut w = PackageWindow::stream();
        assert_eq!(w.on_sendme(), Err(FlowError::UnexpectedSendme));
        for _ in 0..49 {
            assert!(w.on_sent());
        }
        // 451 + 50 > 500.
        assert_eq!(w.on_sendme(), Err(FlowError::UnexpectedSendme));
        assert!(w.on_sent());
        w.on_sendme().unwrap();
        assert_eq!(w.available(), 500);
        for _ in 0..500 {
            assert!(w.on_sent());
        }
        assert!(!w.on_sent());
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

    #[test]
    fn cc_deliver_window_sends_a_sendme_every_increment() {
        let mut d = DeliverWindow::circuit_with_inc(31);
        let mut sendmes = 0;
        for i in 1..=3100u32 {
            d.on_received().unwrap();
            if d.sendme_due() {
                assert_eq!(i % 31, 0);
                d.on_sendme_sent();
                sendmes += 1;
            }
        }
        assert_eq!(sendmes, 100);
        assert_eq!(d.window(), 1000);
    }
}
