//! Tor cells: channel-level framing and typed messages, and relay-cell
//! messages, as tor-spec.txt §3, §4, §5, §6 define them.
//!
//! This crate is sans-IO and allocation-conscious: a decoded cell is a
//! [`bytes::BytesMut`] slice of the connection's read buffer, so a relay
//! can decrypt it in place and hand the same buffer to the next channel.
//!
//! Why not Arti's `tor-cell`: its decoders produce owned message structs
//! (a boxed 509-byte body per relay cell); the relay forwarding path here
//! must crypt cells in place inside pooled buffers and never allocate per
//! cell. The framing and the dozen message bodies we need are small, so we
//! keep them here with property tests over every parser.

pub mod chan;
pub mod hs;
pub mod relay;

pub use chan::{CellCodec, ChanCmd, RawCell};
pub use relay::{RelayCmd, RelayMsg};

/// Payload length of a fixed-size cell.
pub const PAYLOAD_LEN: usize = 509;
/// Wire length of a fixed-size cell with a 4-byte circuit ID (link v4+).
pub const CELL_LEN: usize = 4 + 1 + PAYLOAD_LEN;
/// Maximum data bytes in one relay cell (tor1 format).
pub const RELAY_DATA_LEN: usize = PAYLOAD_LEN - 11;

/// A fixed-size cell payload.
pub type CellBody = [u8; PAYLOAD_LEN];

/// Errors from decoding cells and messages.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum CellError {
    /// The input ended before the structure was complete.
    #[error("truncated {0}")]
    Truncated(&'static str),
    /// A field has a value the protocol does not allow.
    #[error("invalid {what}: {why}")]
    Invalid {
        /// Which field or structure.
        what: &'static str,
        /// Why it is invalid.
        why: String,
    },
    /// A message does not fit into a cell.
    #[error("{0} does not fit in a cell")]
    DoesNotFit(&'static str),
}

impl CellError {
    pub(crate) fn invalid(what: &'static str, why: impl Into<String>) -> Self {
        CellError::Invalid {
            what,
            why: why.into(),
        }
    }
}

/// A small big-endian reader over a byte slice, with checked lengths.
#[derive(Debug, Clone)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// Start reading `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf, pos: 0 }
    }
    /// Bytes not yet consumed.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// Take `n` bytes.
    pub fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], CellError> {
        if self.remaining() < n {
            return Err(CellError::Truncated(what));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }
    /// Take a fixed-size array.
    pub fn array<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], CellError> {
        let s = self.take(N, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(s);
        Ok(out)
    }
    /// Read one byte.
    pub fn u8(&mut self, what: &'static str) -> Result<u8, CellError> {
        Ok(self.take(1, what)?[0])
    }
    /// Read a big-endian u16.
    pub fn u16(&mut self, what: &'static str) -> Result<u16, CellError> {
        Ok(u16::from_be_bytes(self.array(what)?))
    }
    /// Read a big-endian u32.
    pub fn u32(&mut self, what: &'static str) -> Result<u32, CellError> {
        Ok(u32::from_be_bytes(self.array(what)?))
    }
    /// The rest of the input.
    pub fn rest(&mut self) -> &'a [u8] {
        let s = &self.buf[self.pos..];
        self.pos = self.buf.len();
        s
    }
}
