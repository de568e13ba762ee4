//! What a measurement run writes: one [`Record`] per transfer, packet,
//! message, session or probe (`results.jsonl`, one JSON object per line),
//! and one [`RunMeta`] describing the run (`meta.json`), so a run can be
//! repeated and several runs compared.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Series label of measurements made without anonymisation, straight to
/// the sink (`goodput`'s baseline, seed 002's "None" row). Ratio tables
/// leave it out; seed 002's table gives every series as a share of it.
pub const BASELINE_LABEL: &str = "none/direct";

/// One measured event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// Workload name (`bulk`, `voip`, `session`, `goodput`, `reliability`,
    /// `access`).
    pub workload: String,
    /// Which network and client (`<spec>/<client node>`): the series name
    /// in tables and plots.
    pub label: String,
    /// Run number (0-based) within the workload.
    pub run: u32,
    /// `transfer`, `packet`, `message`, `session`, `stream` or `probe`.
    pub kind: String,
    /// Payload size in bytes, when the event has one (tables group by it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// Wall-clock start, milliseconds since the Unix epoch.
    pub start_unix_ms: f64,
    /// Measured values, by metric name (`ttfb_ms`, `ttlb_ms`,
    /// `mbps_05_1`, `rtt_ms`, `circuit_build_ms`, `latency_ms`, `mbps`...).
    #[serde(default)]
    pub metrics: BTreeMap<String, f64>,
    /// `None`: success. `Some("timeout")`: timed out. Anything else: an
    /// error (counted separately from timeouts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

impl Record {
    /// Whether the event succeeded.
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
    /// Whether the event timed out.
    pub fn timed_out(&self) -> bool {
        self.error.as_deref() == Some("timeout")
    }
}

/// How a run was made.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    /// The command line.
    pub command: String,
    /// Machine: CPU model, cores, kernel, the kernel's TCP congestion
    /// controller.
    pub machine: String,
    /// `git describe --always --dirty` of the source tree, if known.
    pub git_commit: String,
    /// onionmix version.
    pub version: String,
    /// Network spec name(s).
    pub specs: Vec<String>,
    /// Link emulation profiles in use (TOML of the spec's `[emulation]`),
    /// empty when none.
    #[serde(default)]
    pub links: String,
    /// Random seed of the workload (and emulator) where one applies.
    pub seed: u64,
    /// Start, Unix seconds.
    pub started_unix: u64,
    /// Workload parameters (name -> value).
    #[serde(default)]
    pub params: BTreeMap<String, String>,
}
