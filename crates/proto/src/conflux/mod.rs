//! Conflux (proposal 329): one stream of relay messages split over
//! several circuits ("legs") to the same exit, sans-IO.
//!
//! [`ConfluxSet`] is one set's state at either end: the legs with their
//! absolute sequence numbers, the receive side (a bounded reorder queue
//! delivering multiplexed messages in order, SWITCH handling), the send
//! side (which leg the next message goes on, and the SWITCH that must
//! precede it), the link handshake's bookkeeping and the rules that tear a
//! set down when a leg closes. It follows tor 0.4.9's `conflux.c` and
//! `conflux_pool.c`; where it is stricter (a second LINKED_ACK, a SWITCH
//! that overflows the sequence number, two queued messages with one
//! sequence number), the peer broke the protocol and the circuit closes.
//!
//! [`ConfluxParams`] holds the consensus parameters (`cfx_*`) with tor's
//! defaults. The drivers (relay exits in `onionmix-node`) keep the sets,
//! their circuits and streams.

mod params;
mod set;

#[cfg(test)]
mod tests;

pub use params::ConfluxParams;
pub use set::{ConfluxSet, LegView, SendPlan};

use onionmix_cell::chan::destroy_reason;
use onionmix_cell::relay::RelayCmd;
use onionmix_cell::relay::conflux::ux;

/// A leg's identifier, chosen by the driver (unique within a set).
pub type LegId = u64;

/// What the exit asks the client for in CONFLUX_LINKED: tor exits always
/// ask for minimum latency (`DEFAULT_EXIT_UX`), so clients send on one
/// leg at a time and the exit's reorder queue stays small.
pub const EXIT_UX: u8 = ux::MIN_LATENCY;
/// What tor clients ask for by default (`ConfluxClientUX throughput`).
pub const CLIENT_UX: u8 = ux::HIGH_THROUGHPUT;

/// Queued bytes charged per message in a reorder queue on top of its
/// data (tor charges the message's length plus its bookkeeping).
pub const QUEUED_MSG_OVERHEAD: usize = 64;

/// How the sender of a set picks the leg for the next message (tor's
/// `conflux_alg_t`; tor's third algorithm, CWNDRTT, is never chosen for
/// any DESIRED_UX and is not implemented here).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    /// Always the leg with the lowest RTT; nothing is sent while its
    /// window is full (low latency, almost no reordering).
    MinRtt,
    /// The lowest-RTT leg that has room in its congestion window (every
    /// leg's capacity; more reordering at the receiver).
    LowRtt,
}

/// The algorithm a sender uses for the other side's DESIRED_UX (tor's
/// `conflux_choose_algorithm`).
pub fn alg_for_ux(desired_ux: u8) -> Alg {
    match desired_ux {
        ux::MIN_LATENCY | ux::LOW_MEM_LATENCY | ux::LOW_MEM_THROUGHPUT => Alg::MinRtt,
        // NO_OPINION, HIGH_THROUGHPUT (and anything else, which the
        // parser refuses anyway).
        _ => Alg::LowRtt,
    }
}

/// Whether messages with this command are multiplexed over the set (they
/// carry sequence numbers and go through the reorder queue), rather than
/// belonging to the circuit they travel on (tor's
/// `conflux_should_multiplex`; proposal 329 §2.8).
pub fn should_multiplex(cmd: RelayCmd) -> bool {
    matches!(
        cmd,
        RelayCmd::BEGIN
            | RelayCmd::DATA
            | RelayCmd::END
            | RelayCmd::CONNECTED
            | RelayCmd::RESOLVE
            | RelayCmd::RESOLVED
            | RelayCmd::XOFF
            | RelayCmd::XON
    )
}

/// Protocol violations and limits; each closes a circuit or the set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfluxError {
    /// Linking one more leg would pass `cfx_max_legs_set`.
    #[error("conflux set has too many legs")]
    TooManyLegs,
    /// The new leg's peer sent more than we delivered: data was lost on a
    /// closed leg (tor cannot resume it either).
    #[error("data loss detected while adding a conflux leg")]
    DataLoss,
    /// The leg is already in the set.
    #[error("leg already linked")]
    DuplicateLeg,
    /// No such leg in the set.
    #[error("not a leg of this conflux set")]
    UnknownLeg,
    /// A second LINKED_ACK on one leg.
    #[error("second CONFLUX_LINKED_ACK on a leg")]
    DuplicateLinkedAck,
    /// A sequence number would pass 2^64.
    #[error("conflux sequence number overflow")]
    SeqOverflow,
    /// A message numbered at or below what was already delivered.
    #[error("conflux message with a sequence number already delivered")]
    SeqBehind,
    /// Two queued messages with the same sequence number.
    #[error("two conflux messages with one sequence number")]
    DuplicateSeq,
    /// The reorder queue would pass its limit.
    #[error("conflux reorder queue full ({bytes} of at most {max} bytes)")]
    ReorderQueueFull {
        /// Bytes queued.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// Our sequence numbers became incoherent (the leg we switch to sent
    /// more than the one we leave).
    #[error("conflux send sequence numbers incoherent")]
    Incoherent,
    /// The relative sequence number does not fit a SWITCH (2^32 cells on
    /// one leg, over 2 TB).
    #[error("conflux relative sequence number too large for SWITCH")]
    SwitchTooLarge,
    /// The set has no leg to send on.
    #[error("conflux set has no leg")]
    NoLeg,
}

impl ConfluxError {
    /// Whether the whole set must be closed (else only the circuit the
    /// offending message came on; the leg-removal rules may still end the
    /// set).
    pub fn closes_set(&self) -> bool {
        matches!(
            self,
            ConfluxError::DataLoss | ConfluxError::Incoherent | ConfluxError::SwitchTooLarge
        )
    }

    /// The DESTROY reason for circuits closed because of it.
    pub fn destroy_reason(&self) -> u8 {
        match self {
            ConfluxError::ReorderQueueFull { .. } => destroy_reason::RESOURCELIMIT,
            _ => destroy_reason::PROTOCOL,
        }
    }
}
