//! Link profiles (what one directed link does to packets) and the topology
//! (which nodes exist, their addresses, and which profile applies where).
//!
//! Everything here is plain data with serde (TOML) and validation; nothing
//! touches the system.

mod named;
#[cfg(test)]
mod tests;
mod topology;

use serde::{Deserialize, Serialize};

/// Largest number of nodes a topology may have (namespaces are not free, and
/// the per-pair link table grows with the square of this).
pub const MAX_NODES: usize = 1000;
/// Largest node name (it becomes part of a namespace name).
pub const MAX_NODE_NAME: usize = 32;
/// Largest configurable one-way delay, jitter or reorder extra delay.
pub const MAX_DELAY_MS: f64 = 10_000.0;
/// Largest configurable queue (bytes).
pub const MAX_QUEUE_BYTES: u64 = 1 << 30;
/// Largest configurable rate (Mbit/s).
pub const MAX_RATE_MBIT: f64 = 100_000.0;

/// Distribution of the jitter added to the one-way delay. Both are bounded:
/// a sample never exceeds `jitter_ms` in either direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum JitterDist {
    /// Uniform in [-jitter, +jitter].
    #[default]
    Uniform,
    /// Normal with sigma = jitter/2, truncated (resampled) to [-jitter, +jitter].
    Normal,
}

/// Gilbert-Elliott two-state burst loss model. The state changes before each
/// packet (Good->Bad with probability `p`, Bad->Good with `r`), then the
/// packet is lost with the loss probability of the state it is in.
/// Mean loss = (r*loss_good + p*loss_bad)/(p+r); mean burst length in the bad
/// state = 1/r packets.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GilbertElliott {
    /// P(Good -> Bad) per packet.
    pub p: f64,
    /// P(Bad -> Good) per packet.
    pub r: f64,
    /// Loss probability in the Good state (1-k in the literature). Default 0.
    #[serde(default)]
    pub loss_good: f64,
    /// Loss probability in the Bad state (1-h in the literature). Default 1.
    #[serde(default = "one")]
    pub loss_bad: f64,
}

fn one() -> f64 {
    1.0
}

impl GilbertElliott {
    /// Long-run mean loss rate of the model.
    pub fn mean_loss(&self) -> f64 {
        if self.p + self.r <= 0.0 {
            return self.loss_good;
        }
        (self.r * self.loss_good + self.p * self.loss_bad) / (self.p + self.r)
    }
}

/// Optional reordering: with `probability`, a packet is held back an extra
/// `extra_delay_ms`, and packets behind it may overtake it. Without this
/// section a link never reorders.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reorder {
    pub probability: f64,
    pub extra_delay_ms: f64,
}

/// What one directed link does to the packets that cross it.
///
/// Order of operations for each packet: UDP blocked (`drop_udp`) -> loss
/// (random or Gilbert-Elliott) ->
/// token bucket with a drop-tail queue limited in bytes -> one-way delay plus
/// bounded jitter (never reordering) -> optional reordering.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
pub struct LinkProfile {
    /// One-way propagation delay in milliseconds.
    pub delay_ms: f64,
    /// Jitter bound in milliseconds (<= delay_ms).
    pub jitter_ms: f64,
    /// Shape of the jitter distribution.
    pub jitter_dist: JitterDist,
    /// Independent random loss probability per packet, in [0, 1).
    pub loss: f64,
    /// Burst loss model (exclusive with `loss`).
    pub gilbert_elliott: Option<GilbertElliott>,
    /// Bandwidth in Mbit/s (10^6 bit/s of IP packet bytes); None = unlimited.
    pub rate_mbit: Option<f64>,
    /// Token bucket depth in bytes (default: 3000, two full-size packets).
    pub burst_bytes: Option<u32>,
    /// Drop-tail queue limit in bytes in front of the token bucket (default:
    /// 100 ms worth of `rate_mbit`, at least 32 KiB).
    pub queue_bytes: Option<u64>,
    /// Optional reordering.
    pub reorder: Option<Reorder>,
    /// Drop every UDP datagram (a middlebox that blocks UDP, so QUIC fails
    /// while TCP passes). IPv4 protocol 17, or IPv6 next header 17 directly
    /// after the fixed header.
    pub drop_udp: bool,
}

/// Default token bucket depth.
pub const DEFAULT_BURST_BYTES: u32 = 3000;

/// A validation error in a profile or topology, with the place it occurred.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("{place}: {field} must be {expected}, got {got}")]
    OutOfRange {
        place: String,
        field: &'static str,
        expected: &'static str,
        got: String,
    },
    #[error("{place}: {msg}")]
    Invalid { place: String, msg: String },
    #[error("unknown profile name `{name}` (known: {known})")]
    UnknownProfile { name: String, known: String },
    #[error("unknown node `{0}` in a pair override")]
    UnknownNode(String),
    #[error("bad subnet `{0}`: expected a.b.c.d/len with len in 8..=30")]
    BadSubnet(String),
    #[error("TOML: {0}")]
    Toml(String),
}

impl ConfigError {
    fn invalid(place: &str, msg: impl Into<String>) -> Self {
        ConfigError::Invalid {
            place: place.to_string(),
            msg: msg.into(),
        }
    }
}

fn check_range(
    place: &str,
    field: &'static str,
    v: f64,
    lo: f64,
    hi: f64,
    hi_inclusive: bool,
    expected: &'static str,
) -> Result<(), ConfigError> {
    let ok = v.is_finite() && v >= lo && if hi_inclusive { v <= hi } else { v < hi };
    if ok {
        Ok(())
    } else {
        Err(ConfigError::OutOfRange {
            place: place.to_string(),
            field,
            expected,
            got: v.to_string(),
        })
    }
}

impl LinkProfile {
    /// A profile that only delays.
    pub fn delay(ms: f64) -> Self {
        LinkProfile {
            delay_ms: ms,
            ..Default::default()
        }
    }

    /// True if the profile changes nothing.
    pub fn is_transparent(&self) -> bool {
        self.delay_ms == 0.0
            && self.jitter_ms == 0.0
            && self.loss == 0.0
            && self.gilbert_elliott.is_none()
            && self.rate_mbit.is_none()
            && self.reorder.is_none()
            && !self.drop_udp
    }

    /// Effective queue limit in bytes (only meaningful with a rate).
    pub fn effective_queue_bytes(&self) -> u64 {
        match (self.queue_bytes, self.rate_mbit) {
            (Some(q), _) => q,
            (None, Some(r)) => ((r * 1e6 / 8.0 * 0.100) as u64).max(32 * 1024),
            (None, None) => 0,
        }
    }

    /// Effective token bucket depth in bytes.
    pub fn effective_burst_bytes(&self) -> u32 {
        self.burst_bytes.unwrap_or(DEFAULT_BURST_BYTES)
    }

    /// Check every field; `place` names the profile in the error.
    pub fn validate(&self, place: &str) -> Result<(), ConfigError> {
        check_range(
            place,
            "delay_ms",
            self.delay_ms,
            0.0,
            MAX_DELAY_MS,
            true,
            "in [0, 10000]",
        )?;
        check_range(
            place,
            "jitter_ms",
            self.jitter_ms,
            0.0,
            MAX_DELAY_MS,
            true,
            "in [0, 10000]",
        )?;
        if self.jitter_ms > self.delay_ms {
            return Err(ConfigError::invalid(
                place,
                format!(
                    "jitter_ms ({}) must not exceed delay_ms ({}): the delay would go negative",
                    self.jitter_ms, self.delay_ms
                ),
            ));
        }
        check_range(
            place,
            "loss",
            self.loss,
            0.0,
            1.0,
            false,
            "a probability in [0, 1)",
        )?;
        if let Some(ge) = &self.gilbert_elliott {
            if self.loss != 0.0 {
                return Err(ConfigError::invalid(
                    place,
                    "set either `loss` or `gilbert_elliott`, not both",
                ));
            }
            for (field, value) in [
                ("gilbert_elliott.p", ge.p),
                ("gilbert_elliott.r", ge.r),
                ("gilbert_elliott.loss_good", ge.loss_good),
                ("gilbert_elliott.loss_bad", ge.loss_bad),
            ] {
                check_range(
                    place,
                    field,
                    value,
                    0.0,
                    1.0,
                    true,
                    "a probability in [0, 1]",
                )?;
            }
            if ge.p + ge.r <= 0.0 {
                return Err(ConfigError::invalid(
                    place,
                    "gilbert_elliott: p + r must be > 0 (otherwise the chain never moves)",
                ));
            }
            if ge.mean_loss() >= 1.0 {
                return Err(ConfigError::invalid(
                    place,
                    "gilbert_elliott: mean loss must be < 1",
                ));
            }
        }
        if let Some(r) = self.rate_mbit {
            check_range(
                place,
                "rate_mbit",
                r,
                0.001,
                MAX_RATE_MBIT,
                true,
                "in [0.001, 100000]",
            )?;
        }
        if let Some(b) = self.burst_bytes
            && !(1600..=(64 << 20)).contains(&b)
        {
            return Err(ConfigError::OutOfRange {
                place: place.to_string(),
                field: "burst_bytes",
                expected: "in [1600, 64 MiB] (at least one full-size packet)",
                got: b.to_string(),
            });
        }
        if let Some(q) = self.queue_bytes
            && !(1600..=MAX_QUEUE_BYTES).contains(&q)
        {
            return Err(ConfigError::OutOfRange {
                place: place.to_string(),
                field: "queue_bytes",
                expected: "in [1600, 1 GiB] (at least one full-size packet)",
                got: q.to_string(),
            });
        }
        if (self.burst_bytes.is_some() || self.queue_bytes.is_some()) && self.rate_mbit.is_none() {
            return Err(ConfigError::invalid(
                place,
                "burst_bytes/queue_bytes need rate_mbit (a queue without a rate never fills)",
            ));
        }
        if let Some(ro) = &self.reorder {
            check_range(
                place,
                "reorder.probability",
                ro.probability,
                0.0,
                1.0,
                true,
                "a probability in [0, 1]",
            )?;
            check_range(
                place,
                "reorder.extra_delay_ms",
                ro.extra_delay_ms,
                0.0,
                MAX_DELAY_MS,
                true,
                "in [0, 10000]",
            )?;
        }
        Ok(())
    }
}

pub use named::{NAMED_PROFILES, named_profile};
pub use topology::{
    NodeSpec, PairOverride, ProfileRef, Resolved, ResolvedNode, Subnet, Topology,
    validate_node_name,
};
