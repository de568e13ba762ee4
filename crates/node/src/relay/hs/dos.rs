//! INTRODUCE2 rate limiting at an introduction point (proposal 305, tor's
//! `hs_dos.c`): a token bucket per introduction circuit, counted in whole
//! seconds like tor's `token_bucket_ctr`.

use onionmix_hs::intro::{DOS_PARAM_MAX, DosDecision};

/// tor's `HiddenServiceEnableIntroDoSRatePerSec` default.
pub const DEFAULT_RATE_PER_SEC: u32 = 25;
/// tor's `HiddenServiceEnableIntroDoSBurstPerSec` default.
pub const DEFAULT_BURST_PER_SEC: u32 = 200;

/// The consensus parameters an introduction point applies to circuits
/// whose ESTABLISH_INTRO carried no DoS extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IntroDosDefaults {
    /// `HiddenServiceEnableIntroDoSDefense` (tor's default: 0, off).
    pub enabled: bool,
    /// `HiddenServiceEnableIntroDoSRatePerSec` (default 25).
    pub rate_per_sec: u32,
    /// `HiddenServiceEnableIntroDoSBurstPerSec` (default 200).
    pub burst_per_sec: u32,
}

impl Default for IntroDosDefaults {
    fn default() -> Self {
        Self {
            enabled: false,
            rate_per_sec: DEFAULT_RATE_PER_SEC,
            burst_per_sec: DEFAULT_BURST_PER_SEC,
        }
    }
}

impl IntroDosDefaults {
    /// The bucket for a new introduction circuit, given what its
    /// ESTABLISH_INTRO asked for; `None`: no limit.
    pub fn bucket_for(&self, decision: DosDecision, now_sec: u64) -> Option<Introduce2Bucket> {
        match decision {
            DosDecision::ConsensusDefaults if self.enabled => Some(Introduce2Bucket::new(
                self.rate_per_sec,
                self.burst_per_sec,
                now_sec,
            )),
            DosDecision::ConsensusDefaults | DosDecision::Disabled => None,
            DosDecision::Enabled { rate, burst } => {
                // check_establish_intro bounds both by INT32_MAX.
                let clamp = |v: u64| u32::try_from(v.min(DOS_PARAM_MAX)).unwrap_or(u32::MAX);
                Some(Introduce2Bucket::new(clamp(rate), clamp(burst), now_sec))
            }
        }
    }
}

/// A token bucket refilled `rate` tokens per whole second up to `burst`,
/// starting full.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Introduce2Bucket {
    rate: u32,
    burst: u32,
    tokens: u32,
    last_refill: u64,
}

impl Introduce2Bucket {
    /// A full bucket at `now_sec`.
    pub fn new(rate: u32, burst: u32, now_sec: u64) -> Self {
        Self {
            rate,
            burst,
            tokens: burst,
            last_refill: now_sec,
        }
    }

    /// Tokens left.
    pub fn tokens(&self) -> u32 {
        self.tokens
    }

    /// tor's `hs_dos_can_send_intro2`: refill, take one token if any,
    /// and allow the cell only if a token is still left afterwards (so a
    /// burst of `b` lets `b - 1` cells through at once, as in tor).
    pub fn allow(&mut self, now_sec: u64) -> bool {
        let elapsed = now_sec.saturating_sub(self.last_refill);
        if elapsed > 0 {
            let add = elapsed.saturating_mul(u64::from(self.rate));
            let total = u64::from(self.tokens).saturating_add(add);
            self.tokens = u32::try_from(total.min(u64::from(self.burst))).unwrap_or(self.burst);
            self.last_refill = now_sec;
        }
        self.tokens = self.tokens.saturating_sub(1);
        self.tokens > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bucket_behaves_like_tors_counter() {
        let mut b = Introduce2Bucket::new(2, 5, 100);
        // Burst 5: four cells pass at once, the fifth empties the bucket.
        let passed = (0..10).filter(|_| b.allow(100)).count();
        assert_eq!(passed, 4);
        assert_eq!(b.tokens(), 0);
        // One second later: two tokens, one cell passes (the second
        // empties it again).
        assert!(b.allow(101));
        assert!(!b.allow(101));
        // A long pause refills to the burst, never beyond.
        assert!(b.allow(10_000));
        assert_eq!(b.tokens(), 4);
        // A clock that goes backwards refills nothing and does not panic.
        assert!(b.allow(5));
        assert_eq!(b.tokens(), 3);
    }

    #[test]
    fn decisions_map_to_buckets() {
        let off = IntroDosDefaults::default();
        assert_eq!(off.bucket_for(DosDecision::ConsensusDefaults, 0), None);
        assert_eq!(off.bucket_for(DosDecision::Disabled, 0), None);
        let b = off
            .bucket_for(DosDecision::Enabled { rate: 3, burst: 9 }, 7)
            .expect("explicit parameters apply even with the default off");
        assert_eq!(b, Introduce2Bucket::new(3, 9, 7));
        let on = IntroDosDefaults {
            enabled: true,
            ..off
        };
        assert_eq!(
            on.bucket_for(DosDecision::ConsensusDefaults, 1),
            Some(Introduce2Bucket::new(25, 200, 1))
        );
        // The extension overrides the consensus in both directions.
        assert_eq!(on.bucket_for(DosDecision::Disabled, 1), None);
        // Huge values (already refused by the parser) saturate, not wrap.
        let big = on
            .bucket_for(
                DosDecision::Enabled {
                    rate: u64::MAX,
                    burst: u64::MAX,
                },
                0,
            )
            .expect("bucket");
        assert_eq!(big.tokens(), i32::MAX as u32);
    }
}
