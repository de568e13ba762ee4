//! Memory-pressure handler (tor's `MaxMemInQueues`): every channel's
//! outbound queue is registered here; when all of them together hold more
//! than the configured cap, the channels with the largest queues are
//! aborted first (their queued cells freed at once, their circuits torn
//! down) until the total is back under 90% of the cap.
//!
//! Each queue is already bounded: exit streams and originated cells wait
//! at the high-water mark, and cells forwarded from other channels by
//! each circuit's queue limit (`circ_max_cell_queue_size`). This matters
//! when very many channels are full at once: peers that stop reading
//! while their circuits pull data.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use onionmix_link::io::ChannelWriter;
use tracing::warn;

use super::RelayCtx;

/// How often the total is checked.
pub const CHECK_EVERY: Duration = Duration::from_millis(250);

/// Registered channel queues, with what `status` shows of each link.
#[derive(Default)]
pub struct QueueRegistry {
    next: AtomicU64,
    writers: Mutex<HashMap<u64, ChannelWriter>>,
    links: Mutex<HashMap<u64, LinkMeta>>,
}

/// Who a channel is with, for `status` (no addresses: a client's would be
/// one).
#[derive(Debug, Clone)]
pub struct LinkMeta {
    /// The peer's RSA identity when it authenticated as a relay; None for
    /// a client.
    pub peer: Option<[u8; 20]>,
    /// Whether we opened it.
    pub initiated: bool,
    /// Its circuits (both roles).
    pub circuits: Arc<std::sync::atomic::AtomicUsize>,
}

/// Removes its queue from the registry when dropped (the channel ended).
pub struct QueueGuard {
    id: u64,
    reg: Weak<QueueRegistry>,
}

impl Drop for QueueGuard {
    fn drop(&mut self) {
        if let Some(r) = self.reg.upgrade() {
            r.writers
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&self.id);
            r.links
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&self.id);
        }
    }
}

/// What one enforcement pass did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Enforced {
    /// Bytes queued before.
    pub total: usize,
    /// Channels aborted.
    pub channels: usize,
    /// Bytes their queues held.
    pub bytes: usize,
}

impl QueueRegistry {
    /// Register a channel's writer.
    pub fn register(self: &Arc<Self>, w: ChannelWriter, meta: LinkMeta) -> QueueGuard {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        self.writers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, w);
        self.links
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id, meta);
        QueueGuard {
            id,
            reg: Arc::downgrade(self),
        }
    }

    /// Every open channel as `status` shows it: peer fingerprint (null for
    /// a client), transport, who opened it, circuits, memory held; relay
    /// links first, by fingerprint.
    pub fn links_json(&self) -> Vec<serde_json::Value> {
        let writers = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        let links = self.links.lock().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<(Option<[u8; 20]>, serde_json::Value)> = links
            .iter()
            .filter_map(|(id, m)| {
                let w = writers.get(id)?;
                Some((
                    m.peer,
                    serde_json::json!({
                        "peer": m.peer.map(hex::encode_upper),
                        "transport": w.transport(),
                        "initiated": m.initiated,
                        "circuits": m.circuits.load(Ordering::Relaxed),
                        "queued_bytes": w.memory_bytes(),
                        "quic": w.quic_stats().map(quic_json),
                    }),
                ))
            })
            .collect();
        v.sort_by_key(|a| (a.0.is_none(), a.0));
        v.into_iter().map(|(_, j)| j).collect()
    }

    /// Bytes queued on all registered channels (their memory: on QUIC
    /// links every circuit stream's whole queue).
    pub fn total(&self) -> usize {
        let w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        w.values().map(|w| w.memory_bytes()).sum()
    }

    /// One pass: if more than `cap` bytes are queued, abort the largest
    /// queues until at most 90% of `cap` remain.
    pub fn enforce(&self, cap: usize) -> Enforced {
        let sizes: Vec<(u64, usize)> = {
            let w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
            w.iter().map(|(id, w)| (*id, w.memory_bytes())).collect()
        };
        let total = sizes.iter().map(|(_, n)| n).sum();
        let victims = pick_victims(sizes, cap);
        let mut out = Enforced {
            total,
            ..Enforced::default()
        };
        let w = self.writers.lock().unwrap_or_else(|e| e.into_inner());
        for (id, n) in victims {
            if let Some(writer) = w.get(&id) {
                writer.abort();
                out.channels += 1;
                out.bytes += n;
            }
        }
        out
    }
}

/// The queues to drop, largest first, so that what remains is at most 90%
/// of `cap`; nothing if the total is within `cap`.
pub fn pick_victims(mut sizes: Vec<(u64, usize)>, cap: usize) -> Vec<(u64, usize)> {
    let mut total: usize = sizes.iter().map(|(_, n)| *n).sum();
    if total <= cap {
        return Vec::new();
    }
    let target = cap / 10 * 9;
    sizes.sort_by_key(|&(id, n)| (std::cmp::Reverse(n), id));
    let mut out = Vec::new();
    for (id, n) in sizes {
        if total <= target || n == 0 {
            break;
        }
        total -= n;
        out.push((id, n));
    }
    out
}

/// The configured memory cap (`max_mem_in_queues`), or [`default_cap`].
pub fn cap(cfg: &super::config::RelayConfig) -> usize {
    cfg.max_mem_in_queues
        .map_or_else(default_cap, |c| usize::try_from(c).unwrap_or(usize::MAX))
}

/// The cap when none is configured: 40% of physical memory, at most 8 GiB
/// (tor's `MaxMemInQueues` default is of this order), at least 256 MiB.
pub fn default_cap() -> usize {
    let total_kib = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))?
                .split_whitespace()
                .nth(1)?
                .parse::<u64>()
                .ok()
        })
        .unwrap_or(4 << 20);
    let bytes = total_kib.saturating_mul(1024) / 10 * 4;
    usize::try_from(bytes.clamp(256 << 20, 8 << 30)).unwrap_or(usize::MAX)
}

/// Check the total every [`CHECK_EVERY`] for the relay's lifetime.
pub async fn oom_loop(ctx: Arc<RelayCtx>) {
    let cap = cap(&ctx.cfg);
    let mut tick = tokio::time::interval(CHECK_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let e = ctx.queues.enforce(cap);
        if e.channels > 0 {
            ctx.stats
                .oom_channels_closed
                .fetch_add(e.channels as u64, Ordering::Relaxed);
            ctx.stats
                .oom_bytes_freed
                .fetch_add(e.bytes as u64, Ordering::Relaxed);
            warn!(
                "memory in queues {} MiB over the cap of {} MiB: closed {} channels holding {} MiB",
                e.total >> 20,
                cap >> 20,
                e.channels,
                e.bytes >> 20
            );
        }
    }
}

/// A QUIC link's path counters as `status` shows them.
fn quic_json(q: onionmix_link::QuicPathStats) -> serde_json::Value {
    serde_json::json!({
        "rtt_us": q.rtt_us,
        "min_rtt_us": q.min_rtt_us,
        "cwnd": q.cwnd,
        "congestion_events": q.congestion_events,
        "sent_packets": q.sent_packets,
        "lost_packets": q.lost_packets,
        "mtu": q.mtu,
        "udp_datagrams_sent": q.udp_datagrams_sent,
        "udp_datagrams_received": q.udp_datagrams_received,
        "congestion_weight": q.congestion_weight,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use onionmix_cell::CellCodec;

    #[test]
    fn victims_are_the_largest_until_under_ninety_percent() {
        let sizes = vec![(1, 100), (2, 500), (3, 300), (4, 50), (5, 300)];
        assert!(pick_victims(sizes.clone(), 1250).is_empty());
        assert_eq!(pick_victims(sizes.clone(), 1000), vec![(2, 500)]);
        // Equal sizes: the lower id (the older channel) first.
        assert_eq!(pick_victims(sizes.clone(), 600), vec![(2, 500), (3, 300)]);
        assert_eq!(
            pick_victims(sizes, 100),
            vec![(2, 500), (3, 300), (5, 300), (1, 100)]
        );
        assert!(pick_victims(vec![(1, 0), (2, 0)], 0).is_empty());
    }

    #[test]
    fn default_cap_is_sane() {
        let c = default_cap();
        assert!((256 << 20..=8 << 30).contains(&c), "{c}");
    }

    /// Channels whose peers stopped reading: over the cap, the largest
    /// queues are aborted and freed, the small ones untouched; channels
    /// that end leave the registry.
    #[tokio::test]
    async fn over_the_cap_the_largest_queues_are_freed() {
        let reg = Arc::new(QueueRegistry::default());
        let mut ends = Vec::new();
        let mut chans = Vec::new();
        for kib in [512usize, 64, 1024, 64] {
            let (ours, theirs) = tokio::io::duplex(4096);
            ends.push(theirs);
            let io = onionmix_link::io::spawn_channel_io(ours, CellCodec::new(), BytesMut::new());
            for _ in 0..kib / 16 {
                assert!(io.tx.send_now(BytesMut::from(&[7u8; 16 * 1024][..])));
            }
            let g = reg.register(
                io.tx.clone(),
                LinkMeta {
                    peer: None,
                    initiated: false,
                    circuits: Arc::default(),
                },
            );
            chans.push((io, g));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let before = reg.total();
        assert!(before > 1600 * 1024, "{before}");
        assert_eq!(reg.enforce(4 << 20).channels, 0, "under the cap");
        // Cap 600 KiB (down to 540): the 1 MiB and 512 KiB queues go.
        let e = reg.enforce(600 << 10);
        assert_eq!(e.channels, 2);
        assert!(chans[2].0.tx.is_aborted() && chans[0].0.tx.is_aborted());
        assert!(!chans[1].0.tx.is_aborted() && !chans[3].0.tx.is_aborted());
        tokio::time::timeout(Duration::from_secs(5), async {
            while reg.total() > 200 * 1024 {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("aborted queues freed");
        drop(chans);
        assert_eq!(reg.writers.lock().unwrap().len(), 0);
    }
}
