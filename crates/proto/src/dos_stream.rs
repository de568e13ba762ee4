//! Stream-creation DoS defence at exits (tor 0.4.8's `DoSStreamCreation*`
//! consensus parameters): each circuit (each conflux set: its streams are
//! shared) has a bucket of new streams and DNS requests,
//! `DoSStreamCreationRate` per second with a burst of
//! `DoSStreamCreationBurst`. When it is empty, defence type 2 refuses the
//! stream or resolve (END RESOURCELIMIT), type 3 closes the circuit, type
//! 1 only counts. Off unless the consensus sets `DoSStreamCreationEnabled`.
//! BEGIN_DIR streams (served by the relay itself) are not counted.
//!
//! Sans-IO: the caller passes the time.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::cc::params::get_u32;

/// What is done to a circuit over its rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamDefense {
    /// 1: nothing (counted only).
    None,
    /// 2: refuse the stream or the resolve.
    RefuseStream,
    /// 3: close the circuit.
    CloseCircuit,
}

/// The defence's consensus parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DosStreamParams {
    /// `DoSStreamCreationEnabled` (default off).
    pub enabled: bool,
    /// `DoSStreamCreationRate`, per circuit per second (default 100).
    pub rate: u32,
    /// `DoSStreamCreationBurst` (default 300).
    pub burst: u32,
    /// `DoSStreamCreationDefenseType` (default 2).
    pub defense: StreamDefense,
}

impl Default for DosStreamParams {
    fn default() -> Self {
        DosStreamParams {
            enabled: false,
            rate: 100,
            burst: 300,
            defense: StreamDefense::RefuseStream,
        }
    }
}

const I32_MAX: u32 = i32::MAX as u32;

impl DosStreamParams {
    /// The parameters a consensus's `params` line sets.
    pub fn from_consensus(p: &BTreeMap<String, i32>) -> Self {
        let d = DosStreamParams::default();
        DosStreamParams {
            enabled: get_u32(p, "DoSStreamCreationEnabled", 0, 0, 1) == 1,
            rate: get_u32(p, "DoSStreamCreationRate", d.rate, 1, I32_MAX),
            burst: get_u32(p, "DoSStreamCreationBurst", d.burst, 1, I32_MAX),
            defense: match get_u32(p, "DoSStreamCreationDefenseType", 2, 1, 3) {
                1 => StreamDefense::None,
                3 => StreamDefense::CloseCircuit,
                _ => StreamDefense::RefuseStream,
            },
        }
    }
}

/// What to do with a new stream or resolve.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamVerdict {
    /// Open it.
    Allow,
    /// Answer END RESOURCELIMIT.
    Refuse,
    /// Close the circuit (DESTROY RESOURCELIMIT).
    CloseCircuit,
}

/// One circuit's bucket.
#[derive(Debug, Clone, Copy, Default)]
pub struct StreamBucket {
    /// Tokens, and when they were last refilled (None: never used, full).
    state: Option<(u32, Instant)>,
}

impl StreamBucket {
    /// A new stream or resolve on the circuit at `now`.
    pub fn on_new_stream(&mut self, p: &DosStreamParams, now: Instant) -> StreamVerdict {
        if !p.enabled {
            return StreamVerdict::Allow;
        }
        let (mut tokens, mut at) = self.state.unwrap_or((p.burst, now));
        if let Some(elapsed) = now.checked_duration_since(at) {
            let secs = elapsed.as_secs();
            if secs > 0 {
                let add = secs.saturating_mul(u64::from(p.rate));
                let t = u64::from(tokens)
                    .saturating_add(add)
                    .min(u64::from(p.burst));
                tokens = u32::try_from(t).unwrap_or(p.burst);
                at += Duration::from_secs(secs);
            }
        }
        // A smaller burst from a new consensus applies at once.
        tokens = tokens.min(p.burst);
        let verdict = if tokens == 0 {
            match p.defense {
                StreamDefense::None => StreamVerdict::Allow,
                StreamDefense::RefuseStream => StreamVerdict::Refuse,
                StreamDefense::CloseCircuit => StreamVerdict::CloseCircuit,
            }
        } else {
            tokens -= 1;
            StreamVerdict::Allow
        };
        self.state = Some((tokens, at));
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(defense: StreamDefense) -> DosStreamParams {
        DosStreamParams {
            enabled: true,
            rate: 2,
            burst: 5,
            defense,
        }
    }

    #[test]
    fn consensus_values_and_defaults() {
        let mut p = BTreeMap::new();
        assert_eq!(
            DosStreamParams::from_consensus(&p),
            DosStreamParams::default()
        );
        p.insert("DoSStreamCreationEnabled".into(), 1);
        p.insert("DoSStreamCreationRate".into(), 50);
        p.insert("DoSStreamCreationBurst".into(), 150);
        p.insert("DoSStreamCreationDefenseType".into(), 3);
        let d = DosStreamParams::from_consensus(&p);
        assert!(d.enabled);
        assert_eq!(
            (d.rate, d.burst, d.defense),
            (50, 150, StreamDefense::CloseCircuit)
        );
        p.insert("DoSStreamCreationDefenseType".into(), 9);
        assert_eq!(
            DosStreamParams::from_consensus(&p).defense,
            StreamDefense::CloseCircuit,
            "clamped to the largest type"
        );
    }

    #[test]
    fn burst_then_rate_then_the_defence() {
        let now = Instant::now();
        let mut b = StreamBucket::default();
        let p = on(StreamDefense::RefuseStream);
        for _ in 0..5 {
            assert_eq!(b.on_new_stream(&p, now), StreamVerdict::Allow);
        }
        assert_eq!(b.on_new_stream(&p, now), StreamVerdict::Refuse);
        // Half a second adds nothing; a second adds the rate.
        let t = now + Duration::from_millis(500);
        assert_eq!(b.on_new_stream(&p, t), StreamVerdict::Refuse);
        let t = now + Duration::from_secs(1);
        assert_eq!(b.on_new_stream(&p, t), StreamVerdict::Allow);
        assert_eq!(b.on_new_stream(&p, t), StreamVerdict::Allow);
        assert_eq!(b.on_new_stream(&p, t), StreamVerdict::Refuse);
        // Refilled to the burst at most.
        let t = now + Duration::from_secs(100);
        for _ in 0..5 {
            assert_eq!(b.on_new_stream(&p, t), StreamVerdict::Allow);
        }
        assert_eq!(b.on_new_stream(&p, t), StreamVerdict::Refuse);
    }

    #[test]
    fn defence_types_and_off() {
        let now = Instant::now();
        for (d, want) in [
            (StreamDefense::None, StreamVerdict::Allow),
            (StreamDefense::CloseCircuit, StreamVerdict::CloseCircuit),
        ] {
            let mut b = StreamBucket::default();
            for _ in 0..5 {
                b.on_new_stream(&on(d), now);
            }
            assert_eq!(b.on_new_stream(&on(d), now), want);
        }
        let mut b = StreamBucket::default();
        let off = DosStreamParams::default();
        for _ in 0..10_000 {
            assert_eq!(b.on_new_stream(&off, now), StreamVerdict::Allow);
        }
    }
}
