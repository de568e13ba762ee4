//! Optimistic data on the client side (proposal 181), sans-IO: the
//! application's bytes read while a stream waits for CONNECTED.
//!
//! With an exit that supports it, they are sent in DATA cells right after
//! BEGIN; either way a copy is kept until CONNECTED, so that when the exit
//! refuses the stream and it is retried on another circuit, the same
//! bytes are sent again there (tor's `pending_optimistic_data`). The
//! buffer is bounded: past [`MAX_OPTIMISTIC_DATA`] the driver stops
//! reading from the application until the stream is connected.

/// Most bytes held (and sent) before CONNECTED: well inside one stream
/// package window (500 cells of 498 bytes), plenty for a request head or
/// a TLS ClientHello.
pub const MAX_OPTIMISTIC_DATA: usize = 64 * 1024;

/// Where a stream's early bytes stand.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OptimisticData {
    /// Every byte read so far (sent or not).
    buf: Vec<u8>,
    /// How many of them went out on the current attempt.
    sent: usize,
    cap: usize,
    connected: bool,
}

impl Default for OptimisticData {
    fn default() -> Self {
        Self::new(MAX_OPTIMISTIC_DATA)
    }
}

impl OptimisticData {
    /// An empty buffer holding at most `cap` bytes.
    pub fn new(cap: usize) -> Self {
        OptimisticData {
            buf: Vec::new(),
            sent: 0,
            cap,
            connected: false,
        }
    }

    /// Room left before the application must wait for CONNECTED.
    pub fn room(&self) -> usize {
        if self.connected {
            0
        } else {
            self.cap.saturating_sub(self.buf.len())
        }
    }

    /// Take bytes the application sent. Returns how many were taken (at
    /// most [`Self::room`]); the rest must wait.
    pub fn push(&mut self, data: &[u8]) -> usize {
        let n = data.len().min(self.room());
        self.buf.extend_from_slice(&data[..n]);
        n
    }

    /// The bytes not yet sent on this attempt, now marked as sent. Call it
    /// right after BEGIN when the exit takes optimistic data, and after
    /// each [`Self::push`] while still waiting.
    pub fn take_unsent(&mut self) -> &[u8] {
        let from = self.sent.min(self.buf.len());
        self.sent = self.buf.len();
        &self.buf[from..]
    }

    /// Bytes sent on the current attempt before CONNECTED (the optimistic
    /// ones).
    pub fn sent_early(&self) -> usize {
        self.sent
    }

    /// Whether anything is held.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The stream failed before CONNECTED and is retried on another
    /// circuit: everything must be sent again there.
    pub fn retry(&mut self) {
        self.sent = 0;
    }

    /// CONNECTED arrived: returns the bytes that still have to be sent
    /// (all of them when nothing went out early) and forgets the copy.
    pub fn connected(&mut self) -> Vec<u8> {
        self.connected = true;
        let mut rest = std::mem::take(&mut self.buf);
        let sent = std::mem::take(&mut self.sent).min(rest.len());
        rest.drain(..sent);
        rest
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn early_bytes_are_sent_once_and_kept_for_retries() {
        let mut o = OptimisticData::new(10);
        assert_eq!(o.push(b"GET /"), 5);
        assert_eq!(o.take_unsent(), b"GET /");
        assert_eq!(o.take_unsent(), b"");
        assert_eq!(o.push(b" HTTP"), 5);
        assert_eq!(o.room(), 0);
        assert_eq!(o.push(b"/1.1"), 0);
        assert_eq!(o.take_unsent(), b" HTTP");
        assert_eq!(o.sent_early(), 10);
        // END on this circuit: the next attempt resends everything.
        o.retry();
        assert_eq!(o.sent_early(), 0);
        assert_eq!(o.take_unsent(), b"GET / HTTP");
        // Connected: nothing left to send, the copy is dropped.
        assert_eq!(o.connected(), Vec::<u8>::new());
        assert!(o.is_empty());
        assert_eq!(o.room(), 0);
    }

    #[test]
    fn without_optimistic_data_everything_goes_after_connected() {
        let mut o = OptimisticData::default();
        o.push(b"hello");
        o.push(b" world");
        assert_eq!(o.connected(), b"hello world".to_vec());
        // Once connected the buffer takes nothing: bytes go straight out.
        assert_eq!(o.push(b"x"), 0);
    }

    #[test]
    fn partly_sent_then_connected() {
        let mut o = OptimisticData::new(100);
        o.push(b"abc");
        let _ = o.take_unsent();
        o.push(b"def");
        assert_eq!(o.connected(), b"def".to_vec());
    }
}
