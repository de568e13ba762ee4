//! Stream send gates: where a stream's data source (a client's SOCKS
//! reader, an exit's target reader) waits before handing a cell to its
//! circuit. On circuits without congestion control the gate is the
//! stream's 500-cell package window (SENDMEs reopen it; one that would
//! raise it past 500 is refused). With congestion control it is XON/XOFF:
//! closed after XOFF, open after XON, paced to the XON's advised rate.
//! The state machines are `onionmix-proto`'s; this adds the waiting.

use std::sync::Mutex;
use std::time::Instant;

use tokio::sync::Notify;

use onionmix_proto::flow::{FlowError, PackageWindow};
use onionmix_proto::xonxoff::TokenBucket;

/// The gate was closed (the stream or circuit ended).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("stream closed")]
pub struct GateClosed;

#[derive(Debug)]
enum Mode {
    Window(PackageWindow),
    Flow { xoff: bool, bucket: TokenBucket },
}

#[derive(Debug)]
struct State {
    mode: Mode,
    closed: bool,
}

/// One stream's send gate.
#[derive(Debug)]
pub struct StreamGate {
    state: Mutex<State>,
    notify: Notify,
}

impl StreamGate {
    /// A gate for a stream on a circuit without congestion control.
    pub fn window() -> Self {
        Self::with(Mode::Window(PackageWindow::stream()))
    }
    /// A gate for a stream on a congestion-controlled circuit.
    pub fn flow() -> Self {
        Self::with(Mode::Flow {
            xoff: false,
            bucket: TokenBucket::default(),
        })
    }
    /// `flow()` if `cc`, else `window()`.
    pub fn for_circuit(cc: bool) -> Self {
        if cc { Self::flow() } else { Self::window() }
    }
    fn with(mode: Mode) -> Self {
        StreamGate {
            state: Mutex::new(State {
                mode,
                closed: false,
            }),
            notify: Notify::new(),
        }
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wait until one cell of `len` bytes may be sent, and account for it.
    pub async fn acquire(&self, len: usize) -> Result<(), GateClosed> {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let wait = {
                let mut g = self.lock();
                if g.closed {
                    return Err(GateClosed);
                }
                match &mut g.mode {
                    Mode::Window(w) => {
                        if w.on_sent() {
                            return Ok(());
                        }
                        None
                    }
                    Mode::Flow { xoff: true, .. } => None,
                    Mode::Flow { bucket, .. } => match bucket.take(len as u64, Instant::now()) {
                        None => return Ok(()),
                        Some(d) => Some(d),
                    },
                }
            };
            match wait {
                None => notified.await,
                Some(d) => {
                    tokio::select! {
                        _ = tokio::time::sleep(d) => {}
                        _ = notified => {}
                    }
                }
            }
        }
    }

    /// A stream-level SENDME: reopen the window by 50 cells. Refused if it
    /// would pass the window's maximum, or on a congestion-controlled
    /// stream (the caller closes the circuit).
    pub fn on_sendme(&self) -> Result<(), FlowError> {
        let r = match &mut self.lock().mode {
            Mode::Window(w) => w.on_sendme(),
            Mode::Flow { .. } => Err(FlowError::StreamSendmeWithCc),
        };
        self.notify.notify_waiters();
        r
    }

    /// XOFF: stop until XON.
    pub fn on_xoff(&self) {
        if let Mode::Flow { xoff, .. } = &mut self.lock().mode {
            *xoff = true;
        }
    }

    /// XON: resume, at most at `kbps` (1000 bytes/s; 0: unlimited).
    pub fn on_xon(&self, kbps: u32) {
        if let Mode::Flow { xoff, bucket } = &mut self.lock().mode {
            *xoff = false;
            bucket.set_rate_kbps(kbps, Instant::now());
        }
        self.notify.notify_waiters();
    }

    /// Close: every waiter (now and later) gets [`GateClosed`].
    pub fn close(&self) {
        self.lock().closed = true;
        self.notify.notify_waiters();
    }

    /// Whether the gate was closed.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Whether an XOFF is outstanding.
    pub fn is_xoff(&self) -> bool {
        matches!(self.lock().mode, Mode::Flow { xoff: true, .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn window_gate_waits_for_sendme() {
        let fresh = StreamGate::window();
        assert_eq!(
            fresh.on_sendme(),
            Err(FlowError::UnexpectedSendme),
            "a SENDME past the 500-cell maximum"
        );
        let g = Arc::new(StreamGate::window());
        for _ in 0..500 {
            g.acquire(498).await.unwrap();
        }
        assert_eq!(g.on_sendme(), Ok(()));
        let g2 = g.clone();
        let t = tokio::spawn(async move {
            for _ in 0..51 {
                g2.acquire(498).await?;
            }
            Ok::<_, GateClosed>(())
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!t.is_finished());
        g.close();
        assert_eq!(t.await.unwrap(), Err(GateClosed));
    }

    #[tokio::test]
    async fn flow_gate_follows_xoff_and_xon() {
        let g = Arc::new(StreamGate::flow());
        g.acquire(498).await.unwrap();
        g.on_xoff();
        assert!(g.is_xoff());
        let g2 = g.clone();
        let t = tokio::spawn(async move { g2.acquire(498).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!t.is_finished());
        g.on_xon(0);
        assert_eq!(t.await.unwrap(), Ok(()));
        assert_eq!(g.on_sendme(), Err(FlowError::StreamSendmeWithCc));
    }
}
