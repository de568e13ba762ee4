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
    /// `git describe --always --dirty` of the source tree the binary was
    /// built from (`unknown` outside a git checkout).
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
    /// Per network spec: UDP datagrams the kernel dropped at a full
    /// socket buffer in the network's namespaces while the workload ran.
    /// Losses the emulated links did not make; QUIC takes them for
    /// congestion. Absent in runs recorded before it was counted.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub socket_drops: BTreeMap<String, SocketDrops>,
}

/// Datagrams dropped at full UDP socket buffers (the kernel's
/// `RcvbufErrors` and `SndbufErrors`, IPv4 and IPv6).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SocketDrops {
    /// Arrived, found the receiving socket's buffer full.
    pub udp_receive: u64,
    /// Found the sending socket's buffer full.
    pub udp_send: u64,
}

impl SocketDrops {
    /// What `self` counted beyond `earlier` (counters that went backwards,
    /// a namespace that went away, count as zero).
    pub fn since(self, earlier: SocketDrops) -> SocketDrops {
        SocketDrops {
            udp_receive: self.udp_receive.saturating_sub(earlier.udp_receive),
            udp_send: self.udp_send.saturating_sub(earlier.udp_send),
        }
    }
}
