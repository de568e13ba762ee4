//! The rendezvous point's table: circuits waiting for the service, by
//! rendezvous cookie (rend-spec-v3 §4; tor's `rendmid.c`). Generic over the
//! waiting circuit's handle so the rules are tested without sockets.
//!
//! One circuit per cookie; a cookie is used once (RENDEZVOUS1 takes it
//! out); cookies expire after a fixed lifetime (tor keeps waiting
//! circuits until the client closes them; a table that only the client
//! empties would grow without bound under abuse), and the table is
//! bounded. Expiry order is insertion order (one lifetime for all), kept
//! in a queue that is compacted when removals leave it mostly stale.

use std::collections::{HashMap, VecDeque};

/// Why ESTABLISH_RENDEZVOUS was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RendRefusal {
    /// Another circuit waits with this cookie.
    DuplicateCookie,
    /// The table is full.
    TableFull,
}

/// A waiting circuit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting<L> {
    /// Registration token (identifies this circuit's registration).
    pub token: u64,
    /// The circuit.
    pub link: L,
    /// When it expires (monotonic seconds).
    pub expires: u64,
}

/// Waiting rendezvous circuits by cookie.
pub struct RendTable<L> {
    map: HashMap<[u8; 20], Waiting<L>>,
    order: VecDeque<([u8; 20], u64)>,
    max: usize,
    lifetime: u64,
}

impl<L> std::fmt::Debug for RendTable<L> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "RendTable {{ entries: {} }}", self.map.len())
    }
}

impl<L> RendTable<L> {
    /// At most `max` (at least 1) cookies, each kept `lifetime` seconds.
    pub fn new(max: usize, lifetime: u64) -> Self {
        Self {
            map: HashMap::new(),
            order: VecDeque::new(),
            max: max.max(1),
            lifetime,
        }
    }

    /// Cookies held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Register `link` under `cookie` at `now`. Expired cookies are dropped
    /// first and returned (their circuits should be closed).
    pub fn register(
        &mut self,
        cookie: [u8; 20],
        token: u64,
        link: L,
        now: u64,
    ) -> (Result<(), RendRefusal>, Vec<Waiting<L>>) {
        let expired = self.expire(now);
        if self.map.contains_key(&cookie) {
            return (Err(RendRefusal::DuplicateCookie), expired);
        }
        if self.map.len() >= self.max {
            return (Err(RendRefusal::TableFull), expired);
        }
        self.map.insert(
            cookie,
            Waiting {
                token,
                link,
                expires: now.saturating_add(self.lifetime),
            },
        );
        self.order.push_back((cookie, token));
        (Ok(()), expired)
    }

    /// RENDEZVOUS1: take the circuit waiting with `cookie`, unless it
    /// expired by `now`.
    pub fn take(&mut self, cookie: &[u8; 20], now: u64) -> Option<Waiting<L>> {
        let w = self.map.remove(cookie)?;
        self.maybe_compact();
        (w.expires > now).then_some(w)
    }

    /// The waiting circuit closed: forget its cookie if `token` still
    /// holds it.
    pub fn remove(&mut self, cookie: &[u8; 20], token: u64) -> bool {
        if self.map.get(cookie).is_some_and(|w| w.token == token) {
            self.map.remove(cookie);
            self.maybe_compact();
            true
        } else {
            false
        }
    }

    /// Drop every cookie expired at `now` and return them.
    pub fn expire(&mut self, now: u64) -> Vec<Waiting<L>> {
        let mut out = Vec::new();
        while let Some(&(cookie, token)) = self.order.front() {
            match self.map.get(&cookie) {
                Some(w) if w.token == token => {
                    if w.expires > now {
                        break;
                    }
                    if let Some(w) = self.map.remove(&cookie) {
                        out.push(w);
                    }
                }
                // Taken or removed earlier: a stale queue entry.
                _ => {}
            }
            self.order.pop_front();
        }
        out
    }

    /// Keep the expiry queue within twice the live entries (plus slack).
    fn maybe_compact(&mut self) {
        if self.order.len() > self.map.len().saturating_mul(2).saturating_add(64) {
            let map = &self.map;
            self.order
                .retain(|(c, t)| map.get(c).is_some_and(|w| w.token == *t));
        }
    }

    #[cfg(test)]
    fn queue_len(&self) -> usize {
        self.order.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_circuit_per_cookie_used_once() {
        let mut t: RendTable<&str> = RendTable::new(10, 60);
        let c = [7u8; 20];
        assert_eq!(t.register(c, 1, "a", 0).0, Ok(()));
        assert_eq!(
            t.register(c, 2, "b", 0).0,
            Err(RendRefusal::DuplicateCookie)
        );
        let w = t.take(&c, 1).expect("waiting");
        assert_eq!((w.token, w.link), (1, "a"));
        // Used: a second RENDEZVOUS1 finds nothing.
        assert!(t.take(&c, 1).is_none());
        // The cookie can be registered again afterwards.
        assert_eq!(t.register(c, 3, "c", 2).0, Ok(()));
        // Only the current registration's token removes it.
        assert!(!t.remove(&c, 1));
        assert!(t.remove(&c, 3));
        assert!(t.is_empty());
    }

    #[test]
    fn cookies_expire_and_are_returned() {
        let mut t: RendTable<u32> = RendTable::new(10, 60);
        t.register([1; 20], 1, 1, 0).0.unwrap();
        t.register([2; 20], 2, 2, 30).0.unwrap();
        // Expired cookies are not joined.
        assert!(t.take(&[1; 20], 60).is_none());
        let gone = t.expire(90);
        assert_eq!(gone.len(), 1);
        assert_eq!(gone[0].link, 2);
        // Registering sweeps expired entries too.
        t.register([3; 20], 3, 3, 100).0.unwrap();
        let (r, gone) = t.register([4; 20], 4, 4, 200);
        assert_eq!(r, Ok(()));
        assert_eq!(gone.iter().map(|w| w.link).collect::<Vec<_>>(), vec![3]);
        assert_eq!(t.len(), 1);
    }

    #[test]
    fn bounded_table_and_queue() {
        let mut t: RendTable<u64> = RendTable::new(3, 1_000);
        for i in 0..3u8 {
            t.register([i; 20], u64::from(i), 0, 0).0.unwrap();
        }
        assert_eq!(t.register([9; 20], 9, 0, 0).0, Err(RendRefusal::TableFull));
        // Many short-lived joins: the queue does not grow with them.
        t.remove(&[0; 20], 0);
        for i in 0..10_000u64 {
            let mut c = [0xaa; 20];
            c[..8].copy_from_slice(&i.to_be_bytes());
            t.register(c, 100 + i, 0, 1).0.unwrap();
            assert!(t.take(&c, 1).is_some());
        }
        assert_eq!(t.len(), 2);
        assert!(t.queue_len() <= 2 * 2 + 64 + 1, "{}", t.queue_len());
    }
}
