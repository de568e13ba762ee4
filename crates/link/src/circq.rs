//! How many cells one circuit has waiting on a channel's outbound queue.
//!
//! A relay forwards cells into other channels' writers without waiting
//! for them to drain (one full channel must not hold up the circuits of
//! the channel the cells came from). What bounds the queues instead is,
//! as in tor, a limit per circuit (`circ_max_cell_queue_size`): a circuit
//! with more cells queued than that is closed. On a TLS link all circuits
//! share one byte queue, so [`CircQueue`] remembers where each of its
//! circuit's cells ends in that queue and counts those not yet written.
//! On a QUIC link each circuit has its own stream queue, which is
//! counted directly.

use std::collections::VecDeque;

use crate::io::ChannelWriter;

/// Bytes a cell takes on a link (link protocol 4 and later).
const CELL_LEN: usize = 514;
/// A queue that emptied keeps at most this many slots allocated.
const KEEP_SLOTS: usize = 64;

/// The cells of one circuit queued on one channel writer.
#[derive(Debug, Default)]
pub struct CircQueue {
    /// Where each queued cell ends, in the writer's
    /// [`ChannelWriter::enqueued_total`] coordinates.
    ends: VecDeque<u64>,
}

impl CircQueue {
    /// A cell of circuit `circ_id` was just framed for `w`, into a
    /// pending buffer (flushed to `w` later) that now holds `pending`
    /// bytes, this cell's included. Returns how many of the circuit's
    /// cells are queued on `w`, this one included.
    ///
    /// Other producers may queue on `w` before the pending buffer is
    /// flushed, so the recorded end can only be early: the count errs
    /// low by at most what they queue meanwhile, never high.
    pub fn push(&mut self, w: &ChannelWriter, circ_id: u32, pending: usize) -> usize {
        if w.per_circuit_queues() {
            return w.circuit_queued_bytes(circ_id) / CELL_LEN + 1;
        }
        self.push_at(
            w.enqueued_total().saturating_add(pending as u64),
            w.dequeued_total(),
        )
    }

    /// [`Self::push`] with the writer's counters given: the cell ends at
    /// `end`, and everything up to `written` has left.
    pub fn push_at(&mut self, end: u64, written: u64) -> usize {
        while self.ends.front().is_some_and(|&e| e <= written) {
            self.ends.pop_front();
        }
        if self.ends.is_empty() && self.ends.capacity() > KEEP_SLOTS {
            self.ends = VecDeque::new();
        }
        self.ends.push_back(end);
        self.ends.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_only_cells_not_yet_written() {
        let mut q = CircQueue::default();
        // Three cells queued behind 1000 bytes of other circuits'.
        assert_eq!(q.push_at(1514, 0), 1);
        assert_eq!(q.push_at(2028, 0), 2);
        assert_eq!(q.push_at(2542, 1000), 3);
        // The first cell has left; the second is half written.
        assert_eq!(q.push_at(3056, 1800), 3);
        // Everything written: only the new cell counts.
        assert_eq!(q.push_at(10_000, 9_000), 1);
    }

    #[test]
    fn a_stuck_queue_grows_and_an_emptied_one_frees_its_slots() {
        let mut q = CircQueue::default();
        for i in 1..=5000u64 {
            assert_eq!(q.push_at(i * 514, 0), i as usize);
        }
        assert!(q.ends.capacity() >= 5000);
        assert_eq!(q.push_at(5001 * 514, 5000 * 514), 1);
        assert!(q.ends.capacity() <= KEEP_SLOTS);
    }

    #[tokio::test]
    async fn follows_a_writer_as_it_drains() {
        let (a, b) = tokio::io::duplex(1 << 20);
        let io =
            crate::io::spawn_channel_io(a, onionmix_cell::CellCodec::new(), Default::default());
        let w = io.tx.clone();
        let mut q = CircQueue::default();
        let mut buf = bytes::BytesMut::new();
        buf.resize(CELL_LEN, 0);
        assert_eq!(q.push(&w, 5, buf.len()), 1);
        w.send_now(buf.split());
        // The duplex has room: the cell leaves, and the next one is alone.
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        while w.dequeued_total() < CELL_LEN as u64 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the writer never wrote"
            );
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        assert_eq!(w.enqueued_total(), CELL_LEN as u64);
        assert_eq!(q.push(&w, 5, CELL_LEN), 1);
        drop(b);
    }
}
