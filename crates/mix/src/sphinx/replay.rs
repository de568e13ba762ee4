//! Bounded replay cache, one per key period.
//!
//! Tags are kept in two generations: when the current generation reaches
//! its capacity it becomes the previous one and a fresh one starts, so memory
//! stays below `2 * capacity` tags while the most recent `capacity` tags are
//! always remembered. A key rotation clears the cache (tags of old keys can
//! no longer be produced).

use std::collections::HashSet;

#[derive(Clone, Debug)]
pub struct ReplayCache {
    current: HashSet<[u8; 16]>,
    previous: HashSet<[u8; 16]>,
    capacity: usize,
    key_period: u64,
}

impl ReplayCache {
    pub fn new(capacity: usize) -> ReplayCache {
        let capacity = capacity.max(1);
        ReplayCache {
            current: HashSet::with_capacity(capacity.min(1 << 16)),
            previous: HashSet::new(),
            capacity,
            key_period: 0,
        }
    }

    /// Records `tag`; returns `false` when it was already seen (a replay).
    pub fn check_and_insert(&mut self, tag: [u8; 16]) -> bool {
        if self.current.contains(&tag) || self.previous.contains(&tag) {
            return false;
        }
        if self.current.len() >= self.capacity {
            self.previous = std::mem::take(&mut self.current);
        }
        self.current.insert(tag);
        true
    }

    /// Starts a new key period (forgets every tag).
    pub fn rotate(&mut self, key_period: u64) {
        if key_period != self.key_period {
            self.key_period = key_period;
            self.current.clear();
            self.previous.clear();
        }
    }

    pub fn len(&self) -> usize {
        self.current.len() + self.previous.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detects_replays_and_stays_bounded() {
        let mut c = ReplayCache::new(100);
        for i in 0..1000u32 {
            let mut t = [0u8; 16];
            t[..4].copy_from_slice(&i.to_be_bytes());
            assert!(c.check_and_insert(t));
            assert!(!c.check_and_insert(t), "immediate replay");
            assert!(c.len() <= 200);
        }
        let mut recent = [0u8; 16];
        recent[..4].copy_from_slice(&999u32.to_be_bytes());
        assert!(!c.check_and_insert(recent));
        c.rotate(1);
        assert!(c.is_empty());
    }
}
