//! Flow-control relay messages: SENDME (v0 and authenticated v1), and
//! XON/XOFF for streams on congestion-controlled circuits (proposal 324).

use crate::{CellError, Reader};

/// A SENDME message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sendme {
    /// Version 0 (or an empty stream-level SENDME).
    Unauthenticated,
    /// Version 1 with the 20-byte digest tag.
    Authenticated([u8; 20]),
}

impl Sendme {
    /// Encode the body.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Sendme::Unauthenticated => Vec::new(),
            Sendme::Authenticated(tag) => {
                let mut v = vec![1, 0, 20];
                v.extend_from_slice(tag);
                v
            }
        }
    }
    /// Parse a SENDME body.
    pub fn parse(d: &[u8]) -> Result<Self, CellError> {
        if d.is_empty() {
            return Ok(Sendme::Unauthenticated);
        }
        let mut r = Reader::new(d);
        match r.u8("sendme version")? {
            0 => Ok(Sendme::Unauthenticated),
            1 => {
                let len = r.u16("sendme data len")? as usize;
                if len < 20 {
                    return Err(CellError::invalid("SENDME", "v1 digest shorter than 20"));
                }
                let tag = r.array::<20>("sendme digest")?;
                Ok(Sendme::Authenticated(tag))
            }
            v => Err(CellError::invalid("SENDME", format!("unknown version {v}"))),
        }
    }
}

/// XON (proposal 324 §4.1): the receiver's buffer for a stream drained;
/// the sender may resume, at most at the advised rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Xon {
    /// Advised drain rate in units of 1000 bytes/s; 0 means unlimited.
    pub kbps_ewma: u32,
}

impl Xon {
    /// Encode the body (version 0).
    pub fn encode(&self) -> Vec<u8> {
        let mut v = vec![0];
        v.extend_from_slice(&self.kbps_ewma.to_be_bytes());
        v
    }
    /// Parse a body: version 0 only (other versions are a protocol
    /// violation, proposal 324 §4.1).
    pub fn parse(d: &[u8]) -> Result<Self, CellError> {
        let mut r = Reader::new(d);
        match r.u8("xon version")? {
            0 => Ok(Xon {
                kbps_ewma: r.u32("xon kbps_ewma")?,
            }),
            v => Err(CellError::invalid("XON", format!("unknown version {v}"))),
        }
    }
}

/// Encode an XOFF body (version 0).
pub fn encode_xoff() -> Vec<u8> {
    vec![0]
}

/// Parse an XOFF body: version 0 only.
pub fn parse_xoff(d: &[u8]) -> Result<(), CellError> {
    match Reader::new(d).u8("xoff version")? {
        0 => Ok(()),
        v => Err(CellError::invalid("XOFF", format!("unknown version {v}"))),
    }
}
