//! The HSDir's descriptor store and the directory paths of onion-service
//! descriptors (rend-spec-v3 §2.2.6 `[FETCHUPLOAD]`).
//!
//! Services upload with `POST /tor/hs/3/publish`; clients fetch with
//! `GET /tor/hs/3/<z>`, `z` being the blinded key in base64 (tor writes it
//! without padding and accepts both). [`HsDirCache`] keeps at most one
//! descriptor per blinded key, replaces it only with a higher revision
//! counter, forgets it after its lifetime, and is bounded in entries and
//! bytes: over a bound, the entries stored longest ago go first (as tor's
//! cache under memory pressure), so descriptors that claim a long
//! lifetime cannot push out the ones services keep re-uploading.

use std::collections::HashMap;

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};

use super::hsdir::{OuterDescriptor, parse_outer};
use super::{DescError, MAX_DESC_LEN};

/// The upload path.
pub const PUBLISH_PATH: &str = "/tor/hs/3/publish";
/// Prefix of fetch paths.
pub const FETCH_PREFIX: &str = "/tor/hs/3/";

/// The fetch path for a blinded key.
pub fn fetch_path(blinded: &[u8; 32]) -> String {
    format!("{FETCH_PREFIX}{}", STANDARD_NO_PAD.encode(blinded))
}

/// The blinded key named by a fetch path (`None` if it is not one).
pub fn parse_fetch_path(path: &str) -> Option<[u8; 32]> {
    let z = path.strip_prefix(FETCH_PREFIX)?;
    let raw = if z.ends_with('=') {
        STANDARD.decode(z).ok()?
    } else {
        STANDARD_NO_PAD.decode(z).ok()?
    };
    raw.try_into().ok()
}

/// Why an upload was not stored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The descriptor is invalid.
    #[error(transparent)]
    Invalid(#[from] DescError),
    /// We hold a descriptor with an equal or higher revision counter.
    #[error("revision counter {got} is not above the stored {have}")]
    NotNewer {
        /// Stored counter.
        have: u64,
        /// Uploaded counter.
        got: u64,
    },
}

struct Entry {
    text: String,
    revision: u64,
    expires: u64,
    /// Order of storing (older first out).
    stored: u64,
}

/// An HSDir's store of v3 descriptors.
pub struct HsDirCache {
    entries: HashMap<[u8; 32], Entry>,
    bytes: usize,
    max_entries: usize,
    max_bytes: usize,
    next_stored: u64,
}

impl std::fmt::Debug for HsDirCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "HsDirCache {{ entries: {}, bytes: {} }}",
            self.entries.len(),
            self.bytes
        )
    }
}

impl HsDirCache {
    /// A store of at most `max_entries` descriptors and `max_bytes` bytes
    /// (at least one descriptor's worth, [`MAX_DESC_LEN`]).
    pub fn new(max_entries: usize, max_bytes: usize) -> Self {
        Self {
            entries: HashMap::new(),
            bytes: 0,
            max_entries: max_entries.max(1),
            max_bytes: max_bytes.max(MAX_DESC_LEN),
            next_stored: 0,
        }
    }

    /// Number of stored descriptors.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if nothing is stored.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes of descriptor text held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Verify and store an uploaded descriptor received at `now`.
    pub fn store(&mut self, text: &str, now: u64) -> Result<OuterDescriptor, StoreError> {
        let outer = parse_outer(text, now)?;
        self.expire(now);
        if let Some(e) = self.entries.get(&outer.blinded_key)
            && e.revision >= outer.revision
        {
            return Err(StoreError::NotNewer {
                have: e.revision,
                got: outer.revision,
            });
        }
        if let Some(old) = self.entries.remove(&outer.blinded_key) {
            self.bytes = self.bytes.saturating_sub(old.text.len());
        }
        let expires = outer.expires_at(now);
        while !self.entries.is_empty()
            && (self.entries.len() >= self.max_entries
                || self.bytes.saturating_add(text.len()) > self.max_bytes)
        {
            self.evict_oldest();
        }
        self.bytes = self.bytes.saturating_add(text.len());
        let stored = self.next_stored;
        self.next_stored = self.next_stored.wrapping_add(1);
        self.entries.insert(
            outer.blinded_key,
            Entry {
                text: text.to_string(),
                revision: outer.revision,
                expires,
                stored,
            },
        );
        Ok(outer)
    }

    /// The descriptor for `blinded`, if held and not expired at `now`.
    pub fn get(&self, blinded: &[u8; 32], now: u64) -> Option<&str> {
        self.entries
            .get(blinded)
            .filter(|e| e.expires > now)
            .map(|e| e.text.as_str())
    }

    /// Drop everything expired at `now`.
    pub fn expire(&mut self, now: u64) {
        let mut freed = 0usize;
        self.entries.retain(|_, e| {
            let keep = e.expires > now;
            if !keep {
                freed = freed.saturating_add(e.text.len());
            }
            keep
        });
        self.bytes = self.bytes.saturating_sub(freed);
    }

    fn evict_oldest(&mut self) {
        let victim = self
            .entries
            .iter()
            .min_by_key(|(_, e)| e.stored)
            .map(|(k, _)| *k);
        if let Some(k) = victim
            && let Some(e) = self.entries.remove(&k)
        {
            self.bytes = self.bytes.saturating_sub(e.text.len());
        }
    }
}
