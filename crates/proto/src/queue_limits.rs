//! How many cells a relay lets one circuit queue on a channel before it
//! closes the circuit (tor's `circ_max_cell_queue_size` consensus
//! parameters, param-spec). Well-behaved senders stay far below: a
//! circuit's window, or congestion control, bounds what it has in flight.

use std::collections::BTreeMap;

use crate::cc::params::get_u32;

/// tor's default when the consensus says nothing.
pub const DEFAULT_MAX_CELLS: u32 = 50_000;
/// The smallest value a consensus may set.
pub const MIN_MAX_CELLS: u32 = 1000;

/// Per-circuit queue limits, in cells, for each direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueueLimits {
    /// Cells queued towards the client (`circ_max_cell_queue_size`).
    pub toward_client: u32,
    /// Cells queued away from the client, towards the next hop
    /// (`circ_max_cell_queue_size_out`, else the first).
    pub away_from_client: u32,
}

impl Default for QueueLimits {
    fn default() -> Self {
        QueueLimits {
            toward_client: DEFAULT_MAX_CELLS,
            away_from_client: DEFAULT_MAX_CELLS,
        }
    }
}

impl QueueLimits {
    /// The limits a consensus's `params` line sets.
    pub fn from_consensus(p: &BTreeMap<String, i32>) -> Self {
        let max = i32::MAX as u32;
        let toward_client = get_u32(
            p,
            "circ_max_cell_queue_size",
            DEFAULT_MAX_CELLS,
            MIN_MAX_CELLS,
            max,
        );
        let away_from_client = get_u32(
            p,
            "circ_max_cell_queue_size_out",
            toward_client,
            MIN_MAX_CELLS,
            max,
        );
        QueueLimits {
            toward_client,
            away_from_client,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_network_values_defaults_and_clamping() {
        let mut p = BTreeMap::new();
        assert_eq!(QueueLimits::from_consensus(&p), QueueLimits::default());
        // The values of the live consensus (2025-2026).
        p.insert("circ_max_cell_queue_size".into(), 1250);
        p.insert("circ_max_cell_queue_size_out".into(), 1000);
        let l = QueueLimits::from_consensus(&p);
        assert_eq!((l.toward_client, l.away_from_client), (1250, 1000));
        // Without the _out one, both directions take the first.
        p.remove("circ_max_cell_queue_size_out");
        assert_eq!(QueueLimits::from_consensus(&p).away_from_client, 1250);
        // Out of range is clamped to the spec's range.
        p.insert("circ_max_cell_queue_size".into(), 5);
        p.insert("circ_max_cell_queue_size_out".into(), -1);
        let l = QueueLimits::from_consensus(&p);
        assert_eq!((l.toward_client, l.away_from_client), (1000, 1000));
    }
}
