//! The client's bounded onion-service caches, as stock tor keeps them
//! (`hs_cache.c`, `hs_client.c`):
//!
//! * [`DescCache`]: decrypted descriptors by service, valid for the time
//!   period they were fetched in and until their lifetime ends;
//! * [`IntroStateCache`]: what went wrong with which introduction point
//!   (tor's `hs_cache_client_intro_state`: a NACK or an error makes a point
//!   unusable, so does a timeout, or 5 failures to reach it; entries are
//!   forgotten after 2 minutes);
//! * [`HsDirRequests`]: when each HSDir was last asked for a blinded key
//!   (tor's `REND_HID_SERV_DIR_REQUERY_PERIOD`: 15 minutes, 5 seconds on
//!   testing networks), so a failed fetch is not repeated against the same
//!   directories at once.
//!
//! Every table has a fixed maximum; the oldest entries go first.

use std::collections::HashMap;

use crate::desc::DescriptorContent;

/// Most services with a cached descriptor.
pub const MAX_CACHED_DESCRIPTORS: usize = 1024;
/// Most introduction points with a failure record.
pub const MAX_INTRO_STATES: usize = 4096;
/// How long an introduction-point failure is remembered (tor's
/// `HS_CACHE_CLIENT_INTRO_STATE_MAX_AGE`).
pub const INTRO_STATE_MAX_AGE: u64 = 120;
/// Failures to reach an introduction point after which it is unusable
/// (tor's `MAX_INTRO_POINT_REACHABILITY_FAILURES`).
pub const MAX_INTRO_UNREACHABLE: u32 = 5;
/// Most (blinded key, HSDir) request records.
pub const MAX_HSDIR_REQUESTS: usize = 8192;
/// tor's `REND_HID_SERV_DIR_REQUERY_PERIOD` (seconds).
pub const HSDIR_REQUERY_PERIOD: u64 = 15 * 60;
/// The same on a testing network (`REND_HID_SERV_DIR_REQUERY_PERIOD_TESTING`).
pub const HSDIR_REQUERY_PERIOD_TESTING: u64 = 5;

/// A descriptor the client decoded.
#[derive(Debug, Clone)]
pub struct CachedDesc {
    /// The decrypted content.
    pub content: DescriptorContent,
    /// The time period it was fetched for (its blinded key's).
    pub period: u64,
    /// The blinded key of that period.
    pub blinded: [u8; 32],
    /// When it stops being usable (seconds since the epoch).
    pub expires: u64,
    /// When it was stored.
    pub stored: u64,
}

/// Decrypted descriptors by service identity key.
#[derive(Debug, Default)]
pub struct DescCache {
    map: HashMap<[u8; 32], CachedDesc>,
}

impl DescCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    /// The descriptor of `service` if it is for time period `period` and
    /// not expired at `now`.
    pub fn get(&self, service: &[u8; 32], period: u64, now: u64) -> Option<&CachedDesc> {
        self.map
            .get(service)
            .filter(|d| d.period == period && now < d.expires)
    }

    /// Store (replacing what was there). When full, expired entries and
    /// then the oldest are dropped.
    pub fn insert(&mut self, service: [u8; 32], desc: CachedDesc, now: u64) {
        if !self.map.contains_key(&service) && self.map.len() >= MAX_CACHED_DESCRIPTORS {
            self.map.retain(|_, d| now < d.expires);
            if self.map.len() >= MAX_CACHED_DESCRIPTORS
                && let Some(oldest) = self
                    .map
                    .iter()
                    .min_by_key(|(_, d)| d.stored)
                    .map(|(k, _)| *k)
            {
                self.map.remove(&oldest);
            }
        }
        self.map.insert(service, desc);
    }

    /// Forget a service's descriptor (before a refetch).
    pub fn remove(&mut self, service: &[u8; 32]) {
        self.map.remove(service);
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// What went wrong with an introduction point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IntroFailureKind {
    /// NACK, or an error on the point's circuit (tor's `GENERIC`).
    Generic,
    /// No answer in time (tor's `TIMEOUT`).
    Timeout,
    /// The circuit to it failed (tor's `UNREACHABLE`; counted).
    Unreachable,
}

/// The failure record of one introduction point.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IntroState {
    /// A generic failure was seen.
    pub error: bool,
    /// It timed out.
    pub timed_out: bool,
    /// How often it could not be reached.
    pub unreachable_count: u32,
    created: u64,
}

/// Introduction-point failures by (service identity, point auth key).
#[derive(Debug, Default)]
pub struct IntroStateCache {
    map: HashMap<([u8; 32], [u8; 32]), IntroState>,
}

impl IntroStateCache {
    /// An empty cache.
    pub fn new() -> Self {
        Self::default()
    }

    fn expire(&mut self, now: u64) {
        self.map
            .retain(|_, s| s.created.saturating_add(INTRO_STATE_MAX_AGE) > now);
    }

    /// Record a failure of the point with `auth_key` of `service` at `now`.
    pub fn note(
        &mut self,
        service: &[u8; 32],
        auth_key: &[u8; 32],
        kind: IntroFailureKind,
        now: u64,
    ) {
        self.expire(now);
        let key = (*service, *auth_key);
        if !self.map.contains_key(&key)
            && self.map.len() >= MAX_INTRO_STATES
            && let Some(oldest) = self
                .map
                .iter()
                .min_by_key(|(_, s)| s.created)
                .map(|(k, _)| *k)
        {
            self.map.remove(&oldest);
        }
        let s = self.map.entry(key).or_insert(IntroState {
            created: now,
            ..IntroState::default()
        });
        match kind {
            IntroFailureKind::Generic => s.error = true,
            IntroFailureKind::Timeout => s.timed_out = true,
            IntroFailureKind::Unreachable => {
                s.unreachable_count = s.unreachable_count.saturating_add(1);
            }
        }
    }

    /// The record of a point, if any (and not expired at `now`).
    pub fn get(&self, service: &[u8; 32], auth_key: &[u8; 32], now: u64) -> Option<IntroState> {
        self.map
            .get(&(*service, *auth_key))
            .filter(|s| s.created.saturating_add(INTRO_STATE_MAX_AGE) > now)
            .copied()
    }

    /// tor's `intro_point_is_usable`.
    pub fn is_usable(&self, service: &[u8; 32], auth_key: &[u8; 32], now: u64) -> bool {
        match self.get(service, auth_key, now) {
            None => true,
            Some(s) => !s.error && !s.timed_out && s.unreachable_count < MAX_INTRO_UNREACHABLE,
        }
    }

    /// Forget every record of `service` (a fresh descriptor arrived).
    pub fn purge_service(&mut self, service: &[u8; 32]) {
        self.map.retain(|(s, _), _| s != service);
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// True if empty.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

/// When each HSDir was last asked for a blinded key.
#[derive(Debug)]
pub struct HsDirRequests {
    map: HashMap<([u8; 32], [u8; 20]), u64>,
    period: u64,
}

impl HsDirRequests {
    /// A table with requery period `period` seconds.
    pub fn new(period: u64) -> Self {
        Self {
            map: HashMap::new(),
            period,
        }
    }

    /// Whether `hsdir` may be asked for `blinded` at `now`.
    pub fn may_query(&self, blinded: &[u8; 32], hsdir: &[u8; 20], now: u64) -> bool {
        self.map
            .get(&(*blinded, *hsdir))
            .is_none_or(|t| t.saturating_add(self.period) <= now)
    }

    /// Record a request.
    pub fn note(&mut self, blinded: &[u8; 32], hsdir: &[u8; 20], now: u64) {
        let period = self.period;
        self.map.retain(|_, t| t.saturating_add(period) > now);
        if self.map.len() >= MAX_HSDIR_REQUESTS
            && let Some(oldest) = self.map.iter().min_by_key(|(_, t)| **t).map(|(k, _)| *k)
        {
            self.map.remove(&oldest);
        }
        self.map.insert((*blinded, *hsdir), now);
    }

    /// Forget the requests for `blinded` (tor purges them when the
    /// descriptor could not be found, so a later attempt may ask again).
    pub fn purge(&mut self, blinded: &[u8; 32]) {
        self.map.retain(|(b, _), _| b != blinded);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn content() -> DescriptorContent {
        DescriptorContent {
            revision: 1,
            intro_points: Vec::new(),
            single_onion_service: false,
            intro_auth_required: false,
            pow_v1: None,
            flow_control_sendme_inc: None,
        }
    }

    #[test]
    fn descriptors_are_per_period_expire_and_are_bounded() {
        let mut c = DescCache::new();
        let d = |period, expires, stored| CachedDesc {
            content: content(),
            period,
            blinded: [0; 32],
            expires,
            stored,
        };
        c.insert([1; 32], d(7, 100, 10), 10);
        assert!(c.get(&[1; 32], 7, 50).is_some());
        assert!(c.get(&[1; 32], 8, 50).is_none(), "another time period");
        assert!(c.get(&[1; 32], 7, 100).is_none(), "expired");
        c.remove(&[1; 32]);
        assert!(c.is_empty());
        for i in 0..(MAX_CACHED_DESCRIPTORS + 5) {
            let mut k = [0u8; 32];
            k[..8].copy_from_slice(&(i as u64).to_be_bytes());
            c.insert(k, d(1, 1_000_000, i as u64), i as u64);
        }
        assert_eq!(c.len(), MAX_CACHED_DESCRIPTORS);
        // The oldest went first.
        assert!(c.get(&[0; 32], 1, 0).is_none());
    }

    #[test]
    fn intro_point_usability_follows_tor() {
        let mut c = IntroStateCache::new();
        let (s, a, b, t) = ([1; 32], [2; 32], [3; 32], [4; 32]);
        assert!(c.is_usable(&s, &a, 0));
        c.note(&s, &a, IntroFailureKind::Generic, 0);
        assert!(!c.is_usable(&s, &a, 1));
        c.note(&s, &t, IntroFailureKind::Timeout, 0);
        assert!(!c.is_usable(&s, &t, 1));
        for i in 0..MAX_INTRO_UNREACHABLE {
            assert!(c.is_usable(&s, &b, 1), "after {i} failures");
            c.note(&s, &b, IntroFailureKind::Unreachable, 1);
        }
        assert!(!c.is_usable(&s, &b, 2));
        assert_eq!(
            c.get(&s, &b, 2).map(|x| x.unreachable_count),
            Some(MAX_INTRO_UNREACHABLE)
        );
        // Forgotten after two minutes.
        assert!(c.is_usable(&s, &a, INTRO_STATE_MAX_AGE));
        c.purge_service(&s);
        assert!(c.is_empty());
        for i in 0..(MAX_INTRO_STATES + 3) {
            let mut k = [0u8; 32];
            k[..8].copy_from_slice(&(i as u64).to_be_bytes());
            c.note(&s, &k, IntroFailureKind::Generic, 10);
        }
        assert_eq!(c.len(), MAX_INTRO_STATES);
    }

    #[test]
    fn hsdir_requery_period() {
        let mut r = HsDirRequests::new(HSDIR_REQUERY_PERIOD_TESTING);
        let (b, d) = ([1; 32], [2; 20]);
        assert!(r.may_query(&b, &d, 100));
        r.note(&b, &d, 100);
        assert!(!r.may_query(&b, &d, 104));
        assert!(r.may_query(&b, &d, 105));
        r.note(&b, &d, 105);
        r.purge(&b);
        assert!(r.may_query(&b, &d, 106));
    }
}
