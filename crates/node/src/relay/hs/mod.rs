//! Onion-service roles of a relay (rend-spec-v3): HSDir (descriptor
//! store, [`dir`]), introduction point ([`intro`], with proposal 305's
//! INTRODUCE2 limits in [`dos`]) and rendezvous point ([`rend`]). The
//! tables here are shared by every channel's reactor; the per-circuit
//! side (which role a circuit has, splicing joined rendezvous circuits)
//! is `reactor::hs`. The cryptography and codecs are `onionmix_hs` and
//! `onionmix_cell::hs`.

pub mod dir;
pub mod dos;
pub mod intro;
pub mod rend;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use onionmix_hs::desc::cache::{HsDirCache, StoreError};

use super::RelayCtx;
use super::reactor::{HsCmd, PrevLink, RCmd};
use dos::IntroDosDefaults;
use intro::IntroTable;
use rend::RendTable;

/// How often expired descriptors and rendezvous cookies are swept (expiry
/// is also checked on every store and fetch).
pub const MAINTENANCE_INTERVAL: Duration = Duration::from_secs(30);

/// Limits of the onion-service tables.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HsLimits {
    /// Most introduction circuits (distinct auth keys).
    pub max_intro_circuits: usize,
    /// Most rendezvous cookies waiting.
    pub max_rend_cookies: usize,
    /// Seconds a rendezvous cookie waits for the service.
    pub rend_cookie_lifetime: u64,
    /// Most descriptors held as HSDir.
    pub hsdir_max_descriptors: usize,
    /// Most descriptor bytes held as HSDir.
    pub hsdir_max_bytes: usize,
    /// INTRODUCE2 limits for circuits without a DoS extension.
    pub intro_dos: IntroDosDefaults,
}

impl Default for HsLimits {
    fn default() -> Self {
        Self {
            max_intro_circuits: 16_384,
            max_rend_cookies: 16_384,
            rend_cookie_lifetime: 600,
            hsdir_max_descriptors: 32_768,
            hsdir_max_bytes: 128 << 20,
            intro_dos: IntroDosDefaults::default(),
        }
    }
}

macro_rules! counters {
    ($(#[$m:meta])* pub struct $name:ident { $($(#[$fm:meta])* $f:ident,)* }) => {
        $(#[$m])*
        #[derive(Debug, Default)]
        pub struct $name {
            $($(#[$fm])* pub $f: AtomicU64,)*
        }
        impl $name {
            /// Every counter by name.
            pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
                vec![$((stringify!($f), self.$f.load(Ordering::Relaxed)),)*]
            }
        }
    };
}

counters! {
    /// Onion-service counters (exported in the relay's `stats.json`).
    pub struct HsStats {
        /// Descriptors accepted (`POST /tor/hs/3/publish` answered 200).
        hsdir_stored,
        /// Uploads refused (400), for any reason below or a bad path/body.
        hsdir_rejected,
        /// ... because they did not verify or parse.
        hsdir_invalid,
        /// ... because they were over 50 000 bytes.
        hsdir_too_large,
        /// ... because we hold an equal or higher revision counter.
        hsdir_not_newer,
        /// Fetches answered 200.
        hsdir_fetch_served,
        /// Fetches answered 404.
        hsdir_fetch_not_found,
        /// Uploads and fetches refused on one-hop circuits (503).
        hsdir_single_hop_refused,
        /// Descriptors dropped at expiry.
        hsdir_expired,
        /// ESTABLISH_INTRO accepted (INTRO_ESTABLISHED sent).
        intro_established,
        /// ... that took an auth key over from an older circuit.
        intro_replaced,
        /// ... whose DoS extension (proposal 305) set the circuit's limits.
        intro_dos_from_extension,
        /// ESTABLISH_INTRO refused: bad handshake MAC.
        intro_bad_mac,
        /// ESTABLISH_INTRO refused: bad signature.
        intro_bad_signature,
        /// ESTABLISH_INTRO refused: malformed.
        intro_malformed,
        /// ESTABLISH_INTRO refused: circuit already has a role or continues.
        intro_unsuitable,
        /// ESTABLISH_INTRO refused: table full.
        intro_table_full,
        /// INTRODUCE1 relayed as INTRODUCE2 (ACK success).
        introduce1_relayed,
        /// INTRODUCE1 for an auth key we serve no circuit for (NACK).
        introduce1_unknown_service,
        /// INTRODUCE1 refused by the service circuit's DoS bucket (NACK).
        introduce1_rate_limited,
        /// INTRODUCE1 malformed (NACK bad format).
        introduce1_malformed,
        /// INTRODUCE1 on an unsuitable circuit (closed: intro or
        /// rendezvous circuit, second INTRODUCE1, one-hop client, ...).
        introduce1_unsuitable,
        /// INTRODUCE2 could not be queued to the service (NACK).
        introduce2_failed,
        /// ESTABLISH_RENDEZVOUS accepted.
        rend_established,
        /// ESTABLISH_RENDEZVOUS refused: malformed, duplicate cookie,
        /// unsuitable circuit.
        rend_refused,
        /// ESTABLISH_RENDEZVOUS refused: table full.
        rend_table_full,
        /// Waiting rendezvous circuits closed when their cookie expired.
        rend_expired,
        /// RENDEZVOUS1 joined two circuits (RENDEZVOUS2 sent).
        rend_joined,
        /// RENDEZVOUS1 with no waiting cookie (circuit closed).
        rend1_unknown_cookie,
        /// RENDEZVOUS1 refused: malformed or unsuitable circuit.
        rend1_refused,
        /// Cells carried across joined rendezvous circuits.
        rend_cells_spliced,
        /// Onion-service cells meant for clients or services, dropped.
        hs_cells_ignored,
    }
}

/// A circuit waiting at the rendezvous point, as the table holds it.
#[derive(Clone)]
pub struct RendWaiter {
    /// The client's circuit.
    pub link: PrevLink,
    /// Where the service's circuit is put when RENDEZVOUS1 arrives.
    pub slot: Arc<Mutex<JoinSlot>>,
}

/// The state of a waiting rendezvous circuit, shared between the reactor
/// of its channel and whichever reactor receives the RENDEZVOUS1.
pub enum JoinSlot {
    /// No RENDEZVOUS1 yet.
    Waiting,
    /// Joined with this circuit (the service's), under this join token.
    Joined(Box<PrevLink>, u64),
    /// The waiting circuit closed.
    Closed,
}

/// Lock a slot (a poisoned slot still holds a consistent enum).
pub fn lock_slot(s: &Mutex<JoinSlot>) -> MutexGuard<'_, JoinSlot> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

/// The relay's onion-service state.
pub struct HsRelay {
    /// Counters.
    pub stats: HsStats,
    /// Limits.
    pub limits: HsLimits,
    intro: Mutex<IntroTable<PrevLink>>,
    rend: Mutex<RendTable<RendWaiter>>,
    hsdir: Mutex<HsDirCache>,
    next_token: AtomicU64,
    epoch: Instant,
}

impl std::fmt::Debug for HsRelay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HsRelay")
            .field("limits", &self.limits)
            .finish()
    }
}

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl HsRelay {
    /// Empty tables with these limits.
    pub fn new(limits: HsLimits) -> Self {
        Self {
            stats: HsStats::default(),
            intro: Mutex::new(IntroTable::new(limits.max_intro_circuits)),
            rend: Mutex::new(RendTable::new(
                limits.max_rend_cookies,
                limits.rend_cookie_lifetime,
            )),
            hsdir: Mutex::new(HsDirCache::new(
                limits.hsdir_max_descriptors,
                limits.hsdir_max_bytes,
            )),
            limits,
            next_token: AtomicU64::new(1),
            epoch: Instant::now(),
        }
    }

    /// A fresh registration token.
    pub fn token(&self) -> u64 {
        self.next_token.fetch_add(1, Ordering::Relaxed)
    }

    /// Monotonic seconds (for DoS buckets and cookie expiry).
    pub fn mono_secs(&self) -> u64 {
        self.epoch.elapsed().as_secs()
    }

    /// The introduction table.
    pub fn intro(&self) -> MutexGuard<'_, IntroTable<PrevLink>> {
        guard(&self.intro)
    }

    /// The rendezvous table.
    pub fn rend(&self) -> MutexGuard<'_, RendTable<RendWaiter>> {
        guard(&self.rend)
    }

    /// Store an uploaded descriptor (Unix time `now`).
    pub fn hsdir_store(&self, text: &str, now: u64) -> Result<(), StoreError> {
        let mut c = guard(&self.hsdir);
        self.expire_descriptors(&mut c, now);
        c.store(text, now).map(|_| ())
    }

    fn expire_descriptors(&self, c: &mut HsDirCache, now: u64) {
        let before = c.len();
        c.expire(now);
        let gone = before.saturating_sub(c.len());
        self.stats
            .hsdir_expired
            .fetch_add(gone as u64, Ordering::Relaxed);
    }

    /// The descriptor stored for `blinded`, if any and unexpired.
    pub fn hsdir_get(&self, blinded: &[u8; 32], now: u64) -> Option<String> {
        guard(&self.hsdir).get(blinded, now).map(str::to_string)
    }

    /// (descriptors, bytes) held as HSDir.
    pub fn hsdir_usage(&self) -> (usize, usize) {
        let c = guard(&self.hsdir);
        (c.len(), c.bytes())
    }

    /// Sweep expired descriptors (Unix time `now`) and rendezvous
    /// cookies; waiting circuits whose cookie expired are closed.
    pub fn maintain(&self, now_unix: u64) {
        self.expire_descriptors(&mut guard(&self.hsdir), now_unix);
        let expired = self.rend().expire(self.mono_secs());
        self.close_expired(expired);
    }

    /// Ask the reactors of expired waiting circuits to close them.
    pub fn close_expired(&self, expired: Vec<rend::Waiting<RendWaiter>>) {
        for w in expired {
            self.stats.rend_expired.fetch_add(1, Ordering::Relaxed);
            w.link.link.chan.send(RCmd::Hs(HsCmd::RendExpired {
                circ_id: w.link.link.circ_id,
                token: w.token,
            }));
        }
    }

    /// Counters and table sizes as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let mut m = serde_json::Map::new();
        for (k, v) in self.stats.snapshot() {
            m.insert(k.to_string(), v.into());
        }
        let (n, bytes) = self.hsdir_usage();
        m.insert("hsdir_descriptors".into(), n.into());
        m.insert("hsdir_bytes".into(), bytes.into());
        m.insert("intro_circuits".into(), self.intro().len().into());
        m.insert("rend_waiting".into(), self.rend().len().into());
        serde_json::Value::Object(m)
    }
}

/// Sweep expired state every [`MAINTENANCE_INTERVAL`].
pub async fn maintenance_loop(ctx: Arc<RelayCtx>) {
    loop {
        tokio::time::sleep(MAINTENANCE_INTERVAL).await;
        ctx.hs.maintain(crate::clock::now_unix());
    }
}
