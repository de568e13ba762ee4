//! The persisted build-time histogram (tor's state-file lines).

use std::collections::BTreeMap;

use super::{BUILD_TIME_MAX_MS, MAX_STATE_TIMES};

/// The persisted build-time histogram, in tor's state-file lines:
///
/// ```text
/// TotalBuildTimes 120
/// CircuitBuildAbandonedCount 2
/// CircuitBuildTimeBin 255 40
/// CircuitBuildTimeBin 265 78
/// ```
///
/// (bins are 10 ms wide and named by their midpoint).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CbtState {
    /// Outcomes recorded, abandoned ones included.
    pub total_build_times: u32,
    /// Circuits abandoned at the close timeout.
    pub abandoned: u32,
    /// (bin midpoint in ms, count), ascending.
    pub bins: Vec<(u32, u32)>,
}

/// Why a state file's histogram was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CbtStateError {
    /// A line could not be parsed.
    #[error("line {line}: {why}")]
    Malformed {
        /// 1-based line number.
        line: usize,
        /// What was wrong.
        why: &'static str,
    },
    /// The counts do not add up to `TotalBuildTimes`.
    #[error("{loaded} build times read where TotalBuildTimes says {total}")]
    CountMismatch {
        /// Times read.
        loaded: u64,
        /// Times claimed.
        total: u32,
    },
}

impl CbtState {
    /// The state-file lines.
    pub fn encode(&self) -> String {
        let mut s = format!(
            "TotalBuildTimes {}\nCircuitBuildAbandonedCount {}\n",
            self.total_build_times, self.abandoned
        );
        for (ms, n) in &self.bins {
            s.push_str(&format!("CircuitBuildTimeBin {ms} {n}\n"));
        }
        s
    }

    /// Parse state-file lines (other keywords are ignored, as in tor's
    /// state file). Bins beyond `TotalBuildTimes` are dropped, as tor
    /// does; a total that the bins and abandoned count do not reach is an
    /// error.
    pub fn parse(text: &str) -> Result<CbtState, CbtStateError> {
        let mut total: Option<u32> = None;
        let mut abandoned: u32 = 0;
        let mut raw_bins: Vec<(usize, u32, u32)> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let lineno = i + 1;
            let bad = |why| CbtStateError::Malformed { line: lineno, why };
            let mut it = line.split_ascii_whitespace();
            let Some(key) = it.next() else { continue };
            let num = |s: Option<&str>, max: u32, why| -> Result<u32, CbtStateError> {
                s.and_then(|v| v.parse::<u32>().ok())
                    .filter(|v| *v <= max)
                    .ok_or(bad(why))
            };
            match key {
                "TotalBuildTimes" => {
                    total = Some(num(it.next(), MAX_STATE_TIMES, "bad TotalBuildTimes")?)
                }
                "CircuitBuildAbandonedCount" => {
                    abandoned = num(it.next(), MAX_STATE_TIMES, "bad CircuitBuildAbandonedCount")?
                }
                "CircuitBuildTimeBin" => {
                    let ms = num(it.next(), BUILD_TIME_MAX_MS, "unparsable bin")?;
                    let n = num(it.next(), u32::MAX, "unparsable bin count")?;
                    raw_bins.push((lineno, ms, n));
                }
                _ => {}
            }
        }
        let total = total.unwrap_or(0);
        if total == 0 && abandoned > 0 {
            return Err(CbtStateError::CountMismatch {
                loaded: u64::from(abandoned),
                total,
            });
        }
        let mut loaded: u64 = 0;
        let mut bins: BTreeMap<u32, u32> = BTreeMap::new();
        for (_, ms, n) in raw_bins {
            if loaded + u64::from(n) + u64::from(abandoned) > u64::from(total) {
                break;
            }
            loaded += u64::from(n);
            let e = bins.entry(ms).or_insert(0);
            *e = e.saturating_add(n);
        }
        loaded += u64::from(abandoned);
        if loaded != u64::from(total) {
            return Err(CbtStateError::CountMismatch { loaded, total });
        }
        Ok(CbtState {
            total_build_times: total,
            abandoned,
            bins: bins.into_iter().filter(|(_, n)| *n > 0).collect(),
        })
    }
}
