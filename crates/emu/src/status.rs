//! The status file the emulator rewrites every second (JSON, atomically
//! replaced) and its rendering as a table for `testnet status`.

use crate::engine::{Engine, GlobalCounters, LinkCounters, LinkInfo};
use crate::netns::{EmuError, io_err};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::path::Path;

/// One link's identity and counters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LinkStatus {
    #[serde(flatten)]
    pub info: LinkInfo,
    #[serde(flatten)]
    pub counters: LinkCounters,
    /// Queue occupancy when the snapshot was taken.
    pub queue_bytes: u64,
}

/// How late packets left compared with their due time (driver precision).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Lateness {
    /// Packets delivered within 10 us, 50 us, 100 us, 250 us, 500 us, 1 ms,
    /// 5 ms of their due time, and later.
    pub buckets_us: [u64; 8],
    pub max_us: u64,
}

/// Upper bounds of [`Lateness::buckets_us`] (the last bucket is open).
pub const LATENESS_BOUNDS_US: [u64; 7] = [10, 50, 100, 250, 500, 1000, 5000];

impl Lateness {
    pub fn record(&mut self, late_ns: u64) {
        let us = late_ns / 1000;
        let i = LATENESS_BOUNDS_US
            .iter()
            .position(|b| us < *b)
            .unwrap_or(LATENESS_BOUNDS_US.len());
        self.buckets_us[i] += 1;
        self.max_us = self.max_us.max(us);
    }
    /// Smallest bound (us) below which at least fraction `q` of packets fell.
    pub fn quantile_bound_us(&self, q: f64) -> Option<u64> {
        let total: u64 = self.buckets_us.iter().sum();
        if total == 0 {
            return None;
        }
        let mut acc = 0;
        for (i, c) in self.buckets_us.iter().enumerate() {
            acc += c;
            if acc as f64 >= q * total as f64 {
                return Some(LATENESS_BOUNDS_US.get(i).copied().unwrap_or(self.max_us));
            }
        }
        Some(self.max_us)
    }
}

/// Everything `testnet status` shows about the emulator.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatusSnapshot {
    pub run_id: String,
    pub pid: u32,
    /// Wall-clock time of the snapshot (ms since the Unix epoch).
    pub unix_time_ms: u64,
    pub uptime_ms: u64,
    /// False in the final snapshot written on exit.
    pub running: bool,
    pub inflight_bytes: u64,
    pub global: GlobalCounters,
    pub lateness: Lateness,
    pub links: Vec<LinkStatus>,
}

impl StatusSnapshot {
    pub fn from_engine(
        engine: &Engine,
        run_id: &str,
        uptime_ms: u64,
        running: bool,
        lateness: Lateness,
    ) -> Self {
        let unix_time_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as u64)
            .unwrap_or(0);
        StatusSnapshot {
            run_id: run_id.to_string(),
            pid: std::process::id(),
            unix_time_ms,
            uptime_ms,
            running,
            inflight_bytes: engine.inflight_bytes(),
            global: engine.global(),
            lateness,
            links: engine
                .links()
                .map(|(info, counters, q)| LinkStatus {
                    info: info.clone(),
                    counters,
                    queue_bytes: q,
                })
                .collect(),
        }
    }

    /// The link `kind/from/to`, e.g. ("core", "a", "b").
    pub fn link(&self, label: &str) -> Option<&LinkStatus> {
        self.links.iter().find(|l| l.info.label() == label)
    }

    /// Write atomically (temp file + rename).
    pub fn write_atomic(&self, path: &Path) -> Result<(), EmuError> {
        let body = serde_json::to_vec_pretty(self)
            .map_err(|e| EmuError::Emulator(format!("encoding status: {e}")))?;
        onionmix_fsutil::write_atomic(path, body)
            .map_err(io_err(format!("writing {}", path.display())))
    }

    pub fn read(path: &Path) -> Result<Self, EmuError> {
        let text =
            std::fs::read_to_string(path).map_err(io_err(format!("reading {}", path.display())))?;
        serde_json::from_str(&text)
            .map_err(|e| EmuError::Emulator(format!("{}: bad status file: {e}", path.display())))
    }

    /// Human-readable table: one line per link with traffic, then totals.
    pub fn render_table(&self, include_idle: bool) -> String {
        let mut s = String::new();
        let g = &self.global;
        let _ = writeln!(
            s,
            "emulator run {} (pid {}, {}, up {:.1} s): {} pkts in, {} delivered, {} host-path; in flight {} B",
            self.run_id,
            self.pid,
            if self.running { "running" } else { "stopped" },
            self.uptime_ms as f64 / 1000.0,
            g.rx_packets,
            g.delivered_packets,
            g.host_packets,
            self.inflight_bytes
        );
        let _ = writeln!(
            s,
            "  dropped before any link: malformed {}, bad source {}, unknown dst {}, overflow {}, link table {}, oversize {}; write errors {}",
            g.drop_malformed,
            g.drop_bad_source,
            g.drop_unknown_dst,
            g.drop_overflow,
            g.drop_link_table,
            g.drop_oversize,
            g.write_errors
        );
        let _ = writeln!(
            s,
            "  timing: p99 lateness < {} us, max {} us",
            self.lateness.quantile_bound_us(0.99).unwrap_or(0),
            self.lateness.max_us
        );
        let _ = writeln!(
            s,
            "  {:<34} {:>10} {:>12} {:>8} {:>8} {:>8} {:>10} {:>8} {:>8}",
            "link", "packets", "bytes", "loss", "burst", "queue", "q-hwm B", "reord", "udp-drop"
        );
        for l in &self.links {
            let c = &l.counters;
            if !include_idle && c.rx_packets == 0 {
                continue;
            }
            let _ = writeln!(
                s,
                "  {:<34} {:>10} {:>12} {:>8} {:>8} {:>8} {:>10} {:>8} {:>8}",
                l.info.label(),
                c.rx_packets,
                c.rx_bytes,
                c.drop_loss,
                c.drop_burst,
                c.drop_queue,
                c.queue_hwm_bytes,
                c.reordered,
                c.drop_udp
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::Limits;
    use crate::profile::{LinkProfile, Topology};

    #[test]
    fn round_trip_and_render() {
        let t = Topology::uniform(&["a", "b"], LinkProfile::delay(1.0), 1);
        let mut e = Engine::new(t.resolve().expect("ok"), true, Limits::default());
        e.create_all_links();
        let mut l = Lateness::default();
        l.record(5_000);
        l.record(70_000);
        let s = StatusSnapshot::from_engine(&e, "abc123", 1500, true, l);
        let dir = tempfile::tempdir().expect("tmp");
        let p = dir.path().join("s.json");
        s.write_atomic(&p).expect("write");
        let r = StatusSnapshot::read(&p).expect("read");
        assert_eq!(r, s);
        assert_eq!(r.links.len(), 2);
        assert!(r.link("core/a/b").is_some());
        let table = r.render_table(true);
        assert!(table.contains("core/a/b"), "{table}");
        assert_eq!(l.quantile_bound_us(0.5), Some(10));
        assert_eq!(l.quantile_bound_us(0.99), Some(100));
    }
}
