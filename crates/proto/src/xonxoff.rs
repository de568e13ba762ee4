//! Stream flow control (proposal 324 §4, as tor's
//! `congestion_control_flow.c` runs it): on circuits with congestion
//! control there are no stream windows; the receiving end sends XOFF when
//! a stream's buffer towards its application (or target) passes
//! `cc_xoff_*`, and XON with the measured drain rate when it empties or
//! the rate changes. The sending end stops on XOFF, resumes on XON, and
//! paces to the advised rate. Streams on circuits without congestion
//! control keep their 500-cell windows; [`StreamRx`] and [`StreamTx`] hide
//! which of the two a stream uses.

use std::time::{Duration, Instant};

use onionmix_cell::relay::{RelayCmd, Xon, encode_xoff};

use crate::cc::CcParams;
use crate::cc::rtt::n_count_ewma;
use crate::flow::{DeliverWindow, FlowError, PackageWindow, STREAM_WINDOW_INC};

/// A buffer above this many cells' worth of bytes is "not draining":
/// check the drain rate for an advisory XON (tor's
/// `MAX_EXPECTED_CELL_BURST`).
pub const MAX_EXPECTED_CELL_BURST: usize = 32;
/// Circuits whose in-flight cells one stream may receive at once: a
/// conflux set links two legs (`cfx_num_legs_set`, as tor and Arti
/// clients build them), and the sender fills each leg's window.
pub const STREAM_IN_FLIGHT_LEGS: usize = 2;
/// Cells a stream may hold beyond its XOFF threshold before the receiver
/// gives up on it: what a sender in slow start (window up to `cc_ss_max`,
/// 5000 cells, on each leg of a conflux set) may have in flight when the
/// XOFF reaches it. The hard bound on a stream's buffer. (A bound of one
/// leg's window ended fast downloads over conflux sets on loopback: the
/// exit legitimately had more than 5000 cells in flight over two legs.)
pub const STREAM_BUFFER_EXTRA_CELLS: usize = 5000 * STREAM_IN_FLIGHT_LEGS;
/// Counts at which the dropmark counters are halved.
const COUNT_SCALE_AT: u32 = 200;
/// Bytes sent at which the dropmark counters are halved.
const TOTAL_XMIT_SCALE_AT: u64 = 10 << 20;

/// A flow-control message for one stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamFlowMsg {
    /// A stream-level SENDME (windows).
    Sendme,
    /// XOFF.
    Xoff,
    /// XON with the drain rate in 1000 bytes/s (0: unlimited).
    Xon(u32),
}

impl StreamFlowMsg {
    /// The relay command and body to send it as.
    pub fn encode(self) -> (RelayCmd, Vec<u8>) {
        match self {
            StreamFlowMsg::Sendme => (RelayCmd::SENDME, Vec::new()),
            StreamFlowMsg::Xoff => (RelayCmd::XOFF, encode_xoff()),
            StreamFlowMsg::Xon(kbps_ewma) => (RelayCmd::XON, Xon { kbps_ewma }.encode()),
        }
    }
}

/// The receiving side of a congestion-controlled stream: decides XOFF and
/// XON from how much is buffered and how fast it drains.
#[derive(Debug, Clone)]
pub struct FlowRx {
    xoff_limit: usize,
    xon_rate_bytes: u64,
    xon_change_pct: u64,
    xon_ewma_cnt: u64,
    xoff_sent: bool,
    drain_start: Option<Instant>,
    drained_bytes: u64,
    prev_drained_bytes: u64,
    ewma_drain_rate: u32,
    ewma_rate_last_sent: u32,
    /// XOFFs sent.
    pub xoffs_sent: u64,
    /// XONs sent.
    pub xons_sent: u64,
}

impl FlowRx {
    /// For a stream whose buffer drains into a client application
    /// (`client`, `cc_xoff_client`) or an exit's target (`cc_xoff_exit`).
    pub fn new(p: &CcParams, client: bool) -> Self {
        FlowRx {
            xoff_limit: if client {
                p.xoff_client_bytes()
            } else {
                p.xoff_exit_bytes()
            },
            xon_rate_bytes: p.xon_rate_bytes() as u64,
            xon_change_pct: p.xon_change_pct.into(),
            xon_ewma_cnt: p.xon_ewma_cnt.into(),
            xoff_sent: false,
            drain_start: None,
            drained_bytes: 0,
            prev_drained_bytes: 0,
            ewma_drain_rate: 0,
            ewma_rate_last_sent: 0,
            xoffs_sent: 0,
            xons_sent: 0,
        }
    }

    /// Whether an XOFF is outstanding.
    pub fn xoff_sent(&self) -> bool {
        self.xoff_sent
    }
    /// The drain-rate estimate (1000 bytes/s).
    pub fn drain_rate(&self) -> u32 {
        self.ewma_drain_rate
    }

    /// Data was added to the buffer; `buffered` bytes are now waiting
    /// (tor's `flow_control_decide_xoff`).
    pub fn on_buffered(&mut self, buffered: usize, now: Instant) -> Option<StreamFlowMsg> {
        if buffered > self.xoff_limit && !self.xoff_sent {
            self.xoff_sent = true;
            self.xoffs_sent += 1;
            // The rate is wrong if the buffer got this far.
            self.ewma_drain_rate = 0;
            return Some(StreamFlowMsg::Xoff);
        }
        // Writes only happen when the socket unblocks: a buffer this long
        // is not draining, so look at the rate for an advisory XON.
        if buffered > MAX_EXPECTED_CELL_BURST * 498 {
            return self.on_drained(0, buffered, now);
        }
        None
    }

    fn compute_drain_rate(&self, now: Instant) -> u32 {
        let Some(start) = self.drain_start else {
            return 0;
        };
        let delta =
            u64::try_from(now.saturating_duration_since(start).as_micros()).unwrap_or(u64::MAX);
        if delta == 0 {
            return 0;
        }
        let max = u64::from(i32::MAX as u32) / 1000;
        if self.prev_drained_bytes > max || self.prev_drained_bytes / delta > max {
            return i32::MAX as u32;
        }
        // bytes/µs * 1000 = 1000 bytes/s.
        let r = (self.prev_drained_bytes * 1000) / delta;
        u32::try_from(r).unwrap_or(i32::MAX as u32).max(1)
    }

    fn rate_changed(&self) -> bool {
        let last = u64::from(self.ewma_rate_last_sent);
        if last == 0 {
            return false;
        }
        let cur = u64::from(self.ewma_drain_rate);
        cur > (100 + self.xon_change_pct) * last / 100
            || cur < (100 - self.xon_change_pct.min(100)) * last / 100
    }

    fn xon(&mut self) -> StreamFlowMsg {
        self.ewma_rate_last_sent = self.ewma_drain_rate;
        self.xoff_sent = false;
        self.xons_sent += 1;
        StreamFlowMsg::Xon(self.ewma_drain_rate)
    }

    /// `written` bytes left the buffer; `buffered` remain (tor's
    /// `flow_control_decide_xon`).
    pub fn on_drained(
        &mut self,
        written: usize,
        buffered: usize,
        now: Instant,
    ) -> Option<StreamFlowMsg> {
        let written = written as u64;
        if self.drained_bytes >= u64::from(u32::MAX).saturating_sub(written) {
            self.drained_bytes /= 2;
            if let Some(s) = self.drain_start {
                self.drain_start = Some(now - now.saturating_duration_since(s) / 2);
            }
        }
        self.drained_bytes += written;
        // tor starts the drain timer as soon as data waits; we start it at
        // the first write while data waits, so that an application that
        // stopped reading for a while is not measured as draining slowly
        // (that stall would go into the rate an XON advertises, and pace
        // the sender to it long after the application caught up).
        if self.drain_start.is_none() && buffered > 0 && written > 0 {
            self.drain_start = Some(now);
            self.drained_bytes = 0;
        }
        if self.drain_start.is_some() && self.drained_bytes > self.xon_rate_bytes {
            if self.prev_drained_bytes == 0 {
                self.prev_drained_bytes = self.drained_bytes;
            }
            let rate = self.compute_drain_rate(now);
            self.prev_drained_bytes = self.drained_bytes;
            if rate != 0 {
                let e = n_count_ewma(
                    u64::from(rate),
                    u64::from(self.ewma_drain_rate),
                    self.xon_ewma_cnt,
                );
                self.ewma_drain_rate = u32::try_from(e).unwrap_or(u32::MAX);
                self.drained_bytes = 0;
                self.drain_start = None;
            }
        }
        let mut out = None;
        if !self.xoff_sent {
            if self.rate_changed() {
                out = Some(self.xon());
            }
        } else if buffered == 0 {
            out = Some(self.xon());
        }
        if buffered == 0 {
            self.drain_start = None;
            if self.drained_bytes >= self.xon_rate_bytes && self.ewma_rate_last_sent != 0 {
                self.ewma_drain_rate = self.ewma_drain_rate.saturating_mul(2).min(i32::MAX as u32);
                self.prev_drained_bytes = self.drained_bytes;
                self.drained_bytes = 0;
            }
        }
        out
    }
}

/// The sending side of a congestion-controlled stream: XOFF/XON state,
/// the advised rate, and (at clients) the dropmark accounting of §4.1.4.
#[derive(Debug, Clone)]
pub struct FlowTx {
    xoff: bool,
    rate_kbps: u32,
    total_bytes_xmit: u64,
    num_xoff_recv: u32,
    num_xon_recv: u32,
    /// (XOFF limit, XON limit) in bytes when checking.
    limits: Option<(u64, u64)>,
}

impl FlowTx {
    /// A client's (`check`: XON/XOFF earlier than the exit could have sent
    /// them are reported) or an exit's sending side.
    pub fn new(p: &CcParams, check: bool) -> Self {
        let xoff = p.xoff_exit_bytes() as u64;
        let xon = xoff.min(p.xon_rate_bytes() as u64);
        FlowTx {
            xoff: false,
            rate_kbps: 0,
            total_bytes_xmit: 0,
            num_xoff_recv: 0,
            num_xon_recv: 0,
            limits: check.then_some((xoff, xon)),
        }
    }

    /// Whether the peer asked us to stop.
    pub fn xoff(&self) -> bool {
        self.xoff
    }
    /// The advised rate (1000 bytes/s; 0: unlimited).
    pub fn rate_kbps(&self) -> u32 {
        self.rate_kbps
    }

    fn scale(&mut self) {
        self.total_bytes_xmit /= 2;
        self.num_xoff_recv /= 2;
        self.num_xon_recv /= 2;
    }

    /// We packaged `len` bytes of this stream.
    pub fn on_sent(&mut self, len: usize) {
        let len = len as u64;
        if self.total_bytes_xmit >= TOTAL_XMIT_SCALE_AT.saturating_sub(len) {
            self.scale();
        }
        self.total_bytes_xmit += len;
    }

    /// An XOFF arrived. `Ok(false)`: it came earlier (or more often)
    /// than the data we sent could explain, a possible dropmark signal
    /// (§4.1.4); like tor, the caller counts it and carries on (stock tor
    /// 0.4.9 sends XONs no check of this kind would pass).
    pub fn on_xoff(&mut self) -> Result<bool, FlowError> {
        if self.xoff {
            // A second XOFF without an XON between: tor ignores it and
            // counts it as invalid.
            return Ok(self.limits.is_none());
        }
        if self.num_xoff_recv == COUNT_SCALE_AT {
            self.scale();
        }
        self.num_xoff_recv += 1;
        self.xoff = true;
        Ok(match self.limits {
            Some((limit, _)) => self.total_bytes_xmit >= limit * u64::from(self.num_xoff_recv),
            None => true,
        })
    }

    /// An XON with the advised rate arrived; `Ok(false)` as for
    /// [`Self::on_xoff`].
    pub fn on_xon(&mut self, kbps: u32) -> Result<bool, FlowError> {
        if self.num_xon_recv == COUNT_SCALE_AT {
            self.scale();
        }
        self.num_xon_recv += 1;
        self.xoff = false;
        self.rate_kbps = kbps;
        Ok(match self.limits {
            Some((_, limit)) => self.total_bytes_xmit >= limit * u64::from(self.num_xon_recv),
            None => true,
        })
    }
}

/// Receiving side of a stream, either kind.
#[derive(Debug, Clone)]
pub enum StreamRx {
    /// Stream window (circuits without congestion control).
    Window {
        /// The deliver window.
        deliver: DeliverWindow,
        /// Cells delivered to the application since the last SENDME.
        consumed: u32,
    },
    /// XON/XOFF.
    Flow(FlowRx),
}

impl StreamRx {
    /// A window-controlled stream.
    pub fn window() -> Self {
        StreamRx::Window {
            deliver: DeliverWindow::stream(),
            consumed: 0,
        }
    }
    /// A DATA cell arrived for the stream.
    pub fn on_data(&mut self) -> Result<(), FlowError> {
        match self {
            StreamRx::Window { deliver, .. } => deliver.on_received(),
            StreamRx::Flow(_) => Ok(()),
        }
    }
    /// The data is buffered: `buffered` bytes wait for the application.
    pub fn on_buffered(&mut self, buffered: usize, now: Instant) -> Option<StreamFlowMsg> {
        match self {
            StreamRx::Window { .. } => None,
            StreamRx::Flow(f) => f.on_buffered(buffered, now),
        }
    }
    /// The application took `cells` cells (`bytes` bytes); `buffered`
    /// remain. Messages to send are appended to `out`.
    pub fn on_drained(
        &mut self,
        cells: u32,
        bytes: usize,
        buffered: usize,
        now: Instant,
        out: &mut Vec<StreamFlowMsg>,
    ) {
        match self {
            StreamRx::Window { deliver, consumed } => {
                *consumed = consumed.saturating_add(cells);
                let inc = u32::from(STREAM_WINDOW_INC);
                while *consumed >= inc && deliver.sendme_due() {
                    *consumed -= inc;
                    deliver.on_sendme_sent();
                    out.push(StreamFlowMsg::Sendme);
                }
            }
            StreamRx::Flow(f) => out.extend(f.on_drained(bytes, buffered, now)),
        }
    }
    /// Whether the stream uses XON/XOFF.
    pub fn is_flow(&self) -> bool {
        matches!(self, StreamRx::Flow(_))
    }
}

/// Sending side of a stream, either kind.
#[derive(Debug, Clone)]
pub enum StreamTx {
    /// Stream package window.
    Window(PackageWindow),
    /// XON/XOFF.
    Flow(FlowTx),
}

impl StreamTx {
    /// Whether the stream may send a cell now (the window is open, or no
    /// XOFF is outstanding).
    pub fn can_send(&self) -> bool {
        match self {
            StreamTx::Window(w) => w.available() > 0,
            StreamTx::Flow(f) => !f.xoff(),
        }
    }
    /// One cell of `len` bytes was sent.
    pub fn on_sent(&mut self, len: usize) {
        match self {
            StreamTx::Window(w) => {
                w.on_sent();
            }
            StreamTx::Flow(f) => f.on_sent(len),
        }
    }
    /// A stream-level SENDME arrived (refused with XON/XOFF, and above the
    /// window's maximum).
    pub fn on_sendme(&mut self) -> Result<(), FlowError> {
        match self {
            StreamTx::Window(w) => w.on_sendme(),
            StreamTx::Flow(_) => Err(FlowError::StreamSendmeWithCc),
        }
    }
    /// XOFF arrived (`Ok(false)`: earlier than the data sent explains).
    pub fn on_xoff(&mut self) -> Result<bool, FlowError> {
        match self {
            StreamTx::Window(_) => Err(FlowError::UnexpectedXonXoff),
            StreamTx::Flow(f) => f.on_xoff(),
        }
    }
    /// XON arrived (`Ok(false)` as for XOFF).
    pub fn on_xon(&mut self, kbps: u32) -> Result<bool, FlowError> {
        match self {
            StreamTx::Window(_) => Err(FlowError::UnexpectedXonXoff),
            StreamTx::Flow(f) => f.on_xon(kbps),
        }
    }
}

/// A token bucket for pacing a stream to an XON's advised rate (tor
/// adjusts the edge connection's read bucket to rate = burst = the
/// advised bytes per second). Sans-IO: the caller passes the time.
#[derive(Debug, Clone, Default)]
pub struct TokenBucket {
    /// Bytes per second; `None`: unlimited.
    rate: Option<u64>,
    tokens: u64,
    last: Option<Instant>,
}

impl TokenBucket {
    /// Set the rate from an XON (`kbps` in 1000 bytes/s; 0: unlimited).
    pub fn set_rate_kbps(&mut self, kbps: u32, now: Instant) {
        if kbps == 0 {
            self.rate = None;
            return;
        }
        let rate = u64::from(kbps).saturating_mul(1000).min(i32::MAX as u64);
        self.refill(now);
        if self.rate.is_none() {
            // Start full, as a fresh bucket does.
            self.tokens = rate;
        }
        self.rate = Some(rate);
        self.tokens = self.tokens.min(rate);
        self.last = Some(now);
    }

    fn refill(&mut self, now: Instant) {
        if let (Some(rate), Some(last)) = (self.rate, self.last) {
            let dt = now.saturating_duration_since(last);
            let add =
                (dt.as_micros().min(u128::from(u64::MAX)) as u64).saturating_mul(rate) / 1_000_000;
            if add > 0 {
                self.tokens = self.tokens.saturating_add(add).min(rate);
                self.last = Some(now);
            }
        } else {
            self.last = Some(now);
        }
    }

    /// Take `n` bytes at `now`: `None` if allowed (the tokens are spent),
    /// or how long to wait before trying again.
    pub fn take(&mut self, n: u64, now: Instant) -> Option<Duration> {
        let rate = self.rate?;
        self.refill(now);
        // A cell larger than the burst may go once the bucket is full.
        let need = n.min(rate);
        if self.tokens >= need {
            self.tokens -= need;
            return None;
        }
        let missing = need - self.tokens;
        Some(Duration::from_micros(
            missing.saturating_mul(1_000_000) / rate + 1,
        ))
    }
}

#[cfg(test)]
mod tests;
