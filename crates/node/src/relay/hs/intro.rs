//! The introduction point's table: which circuit serves which
//! introduction-point authentication key (`KP_hs_ipt_sid`), and that
//! circuit's INTRODUCE2 rate limit. Generic over the circuit handle so the
//! rules are tested without sockets.
//!
//! As in tor (`hs_circuitmap_register_intro_circ_v3_relay_side`), a new
//! ESTABLISH_INTRO for a key already registered takes the key over: the
//! old circuit stays open but no longer receives introductions. Each
//! registration carries a token so that the old circuit closing later does
//! not remove the new one's entry.

use std::collections::HashMap;

use super::dos::Introduce2Bucket;

/// Why an INTRODUCE1 cannot be relayed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntroRefusal {
    /// No circuit serves this auth key.
    UnknownService,
    /// The service circuit's INTRODUCE2 bucket is empty.
    RateLimited,
}

/// The table is full and the key is new.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableFull;

struct Entry<L> {
    token: u64,
    link: L,
    bucket: Option<Introduce2Bucket>,
}

/// Introduction circuits by auth key, at most `max` of them.
pub struct IntroTable<L> {
    map: HashMap<[u8; 32], Entry<L>>,
    max: usize,
}

impl<L> std::fmt::Debug for IntroTable<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "IntroTable {{ entries: {} }}", self.map.len())
    }
}

impl<L: Clone> IntroTable<L> {
    /// An empty table of at most `max` (at least 1) entries.
    pub fn new(max: usize) -> Self {
        Self {
            map: HashMap::new(),
            max: max.max(1),
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Make `link` (registration `token`) the circuit for `auth_key`.
    /// Returns the token of the registration it replaced, if any.
    pub fn register(
        &mut self,
        auth_key: [u8; 32],
        token: u64,
        link: L,
        bucket: Option<Introduce2Bucket>,
    ) -> Result<Option<u64>, TableFull> {
        if !self.map.contains_key(&auth_key) && self.map.len() >= self.max {
            return Err(TableFull);
        }
        let old = self.map.insert(
            auth_key,
            Entry {
                token,
                link,
                bucket,
            },
        );
        Ok(old.map(|e| e.token))
    }

    /// Forget `auth_key` if registration `token` still holds it.
    pub fn remove(&mut self, auth_key: &[u8; 32], token: u64) -> bool {
        if self.map.get(auth_key).is_some_and(|e| e.token == token) {
            self.map.remove(auth_key);
            true
        } else {
            false
        }
    }

    /// Where to send the INTRODUCE2 for an INTRODUCE1 naming `auth_key`
    /// at `now_sec` (monotonic seconds); takes a token from the circuit's
    /// bucket, if it has one.
    pub fn route(&mut self, auth_key: &[u8; 32], now_sec: u64) -> Result<L, IntroRefusal> {
        let e = self
            .map
            .get_mut(auth_key)
            .ok_or(IntroRefusal::UnknownService)?;
        if let Some(b) = e.bucket.as_mut()
            && !b.allow(now_sec)
        {
            return Err(IntroRefusal::RateLimited);
        }
        Ok(e.link.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_circuit_per_key_newest_wins() {
        let mut t: IntroTable<&str> = IntroTable::new(2);
        let k = [1u8; 32];
        assert_eq!(t.route(&k, 0), Err(IntroRefusal::UnknownService));
        assert_eq!(t.register(k, 1, "old", None), Ok(None));
        assert_eq!(t.route(&k, 0), Ok("old"));
        // The service re-establishes on a new circuit: it takes over.
        assert_eq!(t.register(k, 2, "new", None), Ok(Some(1)));
        assert_eq!(t.route(&k, 0), Ok("new"));
        // The old circuit closing does not remove the new registration.
        assert!(!t.remove(&k, 1));
        assert_eq!(t.route(&k, 0), Ok("new"));
        assert!(t.remove(&k, 2));
        assert_eq!(t.route(&k, 0), Err(IntroRefusal::UnknownService));
        assert!(t.is_empty());
    }

    #[test]
    fn bounded_and_rate_limited() {
        let mut t: IntroTable<u32> = IntroTable::new(2);
        t.register([1; 32], 1, 1, None).unwrap();
        t.register([2; 32], 2, 2, Some(Introduce2Bucket::new(1, 3, 0)))
            .unwrap();
        assert_eq!(t.register([3; 32], 3, 3, None), Err(TableFull));
        // Replacing an existing key is allowed when full.
        assert_eq!(t.register([1; 32], 4, 4, None), Ok(Some(1)));
        assert_eq!(t.len(), 2);
        // Burst 3: two introductions, then refused until a second passes.
        assert_eq!(t.route(&[2; 32], 0), Ok(2));
        assert_eq!(t.route(&[2; 32], 0), Ok(2));
        assert_eq!(t.route(&[2; 32], 0), Err(IntroRefusal::RateLimited));
        assert_eq!(t.route(&[2; 32], 1), Err(IntroRefusal::RateLimited));
        assert_eq!(t.route(&[2; 32], 3), Ok(2));
        // The unlimited circuit is never refused.
        for _ in 0..1000 {
            assert_eq!(t.route(&[1; 32], 0), Ok(4));
        }
    }
}
