//! Conflux messages (proposal 329): CONFLUX_LINK and CONFLUX_LINKED (the
//! same body), CONFLUX_LINKED_ACK (empty) and CONFLUX_SWITCH.
//!
//! Layouts as tor 0.4.9's trunnel definitions (`conflux.trunnel`):
//! LINK/LINKED are `version(1) = 1`, then `nonce(32) last_seqno_sent(8)
//! last_seqno_recv(8) desired_ux(1)`, big-endian; bytes after that are
//! ignored, as trunnel does. SWITCH is a 4-byte relative sequence number
//! (tor before 0.4.8.17 padded it to the whole cell; later bytes are
//! ignored).

use crate::{CellError, Reader};

/// The only link version (proposal 329 §2.2).
pub const LINK_VERSION: u8 = 1;
/// Bytes of a version-1 LINK/LINKED body.
pub const LINK_LEN: usize = 1 + 32 + 8 + 8 + 1;

/// DESIRED_UX values (proposal 329 §2.2).
pub mod ux {
    /// Let the other side choose.
    pub const NO_OPINION: u8 = 0;
    /// Lowest latency: one leg at a time.
    pub const MIN_LATENCY: u8 = 1;
    /// Low latency with little reordering memory.
    pub const LOW_MEM_LATENCY: u8 = 2;
    /// Highest throughput: every leg's window.
    pub const HIGH_THROUGHPUT: u8 = 3;
    /// Throughput with little reordering memory.
    pub const LOW_MEM_THROUGHPUT: u8 = 4;
}

/// The secret that ties the legs of a set together. It must never be
/// logged (proposal 329 §2.2), so `Debug` prints no bytes, and equality is
/// constant-time.
#[derive(Clone, Copy, Eq)]
pub struct Nonce(pub [u8; 32]);

impl std::hash::Hash for Nonce {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        // Equal nonces have equal bytes, so this agrees with `eq`.
        self.0.hash(state);
    }
}

impl PartialEq for Nonce {
    fn eq(&self, other: &Self) -> bool {
        subtle::ConstantTimeEq::ct_eq(&self.0[..], &other.0[..]).into()
    }
}

impl std::fmt::Debug for Nonce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Nonce(..)")
    }
}

/// A CONFLUX_LINK or CONFLUX_LINKED body (version 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfluxLink {
    /// The set's nonce.
    pub nonce: Nonce,
    /// Highest absolute sequence number the sender sent on the set.
    pub last_seqno_sent: u64,
    /// Highest absolute sequence number the sender delivered.
    pub last_seqno_recv: u64,
    /// What the sender wants from the other side's scheduler (see [`ux`]).
    pub desired_ux: u8,
}

impl ConfluxLink {
    /// Encode the body.
    pub fn encode(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(LINK_LEN);
        v.push(LINK_VERSION);
        v.extend_from_slice(&self.nonce.0);
        v.extend_from_slice(&self.last_seqno_sent.to_be_bytes());
        v.extend_from_slice(&self.last_seqno_recv.to_be_bytes());
        v.push(self.desired_ux);
        v
    }

    /// Parse a body: version 1, the fixed fields, a known DESIRED_UX.
    pub fn parse(d: &[u8]) -> Result<Self, CellError> {
        let mut r = Reader::new(d);
        let version = r.u8("conflux link version")?;
        if version != LINK_VERSION {
            return Err(CellError::invalid(
                "CONFLUX_LINK",
                format!("unsupported version {version}"),
            ));
        }
        let nonce = Nonce(r.array::<32>("conflux nonce")?);
        let last_seqno_sent = u64::from_be_bytes(r.array::<8>("last_seqno_sent")?);
        let last_seqno_recv = u64::from_be_bytes(r.array::<8>("last_seqno_recv")?);
        let desired_ux = r.u8("desired_ux")?;
        if desired_ux > ux::LOW_MEM_THROUGHPUT {
            return Err(CellError::invalid(
                "CONFLUX_LINK",
                format!("unknown desired_ux {desired_ux}"),
            ));
        }
        Ok(ConfluxLink {
            nonce,
            last_seqno_sent,
            last_seqno_recv,
            desired_ux,
        })
    }
}

/// Encode a CONFLUX_SWITCH body.
pub fn encode_switch(seqnum: u32) -> [u8; 4] {
    seqnum.to_be_bytes()
}

/// Parse a CONFLUX_SWITCH body: the relative sequence number.
pub fn parse_switch(d: &[u8]) -> Result<u32, CellError> {
    Reader::new(d).u32("conflux switch seqnum")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_roundtrip_and_layout() {
        let l = ConfluxLink {
            nonce: Nonce([7; 32]),
            last_seqno_sent: 0x0102_0304_0506_0708,
            last_seqno_recv: 9,
            desired_ux: ux::HIGH_THROUGHPUT,
        };
        let b = l.encode();
        assert_eq!(b.len(), LINK_LEN);
        assert_eq!(b[0], 1);
        assert_eq!(&b[33..41], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(b[49], 3);
        assert_eq!(ConfluxLink::parse(&b).unwrap(), l);
        // Trailing bytes are ignored (trunnel).
        let mut longer = b.clone();
        longer.extend_from_slice(&[0xFF; 10]);
        assert_eq!(ConfluxLink::parse(&longer).unwrap(), l);
        // Every truncation fails.
        for cut in 0..b.len() {
            assert!(ConfluxLink::parse(&b[..cut]).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn link_refuses_other_versions_and_unknown_ux() {
        let mut b = ConfluxLink {
            nonce: Nonce([1; 32]),
            last_seqno_sent: 0,
            last_seqno_recv: 0,
            desired_ux: ux::NO_OPINION,
        }
        .encode();
        b[0] = 2;
        assert!(ConfluxLink::parse(&b).is_err());
        b[0] = 1;
        b[49] = 5;
        assert!(ConfluxLink::parse(&b).is_err());
    }

    #[test]
    fn nonce_is_never_printed() {
        let l = ConfluxLink {
            nonce: Nonce([0xAB; 32]),
            last_seqno_sent: 0,
            last_seqno_recv: 0,
            desired_ux: 0,
        };
        let s = format!("{l:?}");
        assert!(
            !s.contains("171") && !s.to_lowercase().contains("ab, "),
            "{s}"
        );
        assert_ne!(Nonce([1; 32]), Nonce([2; 32]));
        assert_eq!(Nonce([1; 32]), Nonce([1; 32]));
    }

    #[test]
    fn switch_body() {
        assert_eq!(parse_switch(&encode_switch(31)).unwrap(), 31);
        // tor before 0.4.8.17 sent the whole zero-padded payload.
        let mut padded = vec![0u8; 498];
        padded[..4].copy_from_slice(&encode_switch(0xDEAD_BEEF));
        assert_eq!(parse_switch(&padded).unwrap(), 0xDEAD_BEEF);
        for cut in 0..4 {
            assert!(parse_switch(&[0u8; 4][..cut]).is_err());
        }
    }
}
