//! The relay's counters as `<data_dir>/stats.json`, rewritten (atomically)
//! every `stats_interval_secs` when they changed, so tests and operators
//! can read a running relay's numbers (onion-service roles included)
//! without a control port.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tracing::warn;

use super::RelayCtx;

/// File name under the data directory.
pub const STATS_FILE: &str = "stats.json";

/// The counters as JSON: `relay` (channels, circuits, cells, exit bytes,
/// ...) and `hs` (the onion-service roles).
pub fn stats_json(ctx: &RelayCtx) -> serde_json::Value {
    let s = &ctx.stats;
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let (dos, dos_addrs) = ctx.dos_cc_stats();
    serde_json::json!({
        "nickname": ctx.cfg.nickname,
        "fingerprint": hex::encode_upper(ctx.rsa_id),
        "relay": {
            "channels": s.channels.load(Ordering::Relaxed),
            "circuits": s.circuits.load(Ordering::Relaxed),
            "circuits_created": l(&s.circuits_created),
            "creates_refused": l(&s.creates_refused),
            "cells_forwarded": l(&s.cells_forwarded),
            "streams": l(&s.streams),
            "oom_channels_closed": l(&s.oom_channels_closed),
            "oom_bytes_freed": l(&s.oom_bytes_freed),
            "queue_limit_kills": l(&s.queue_limit_kills),
            "single_hop_begins_refused": l(&s.single_hop_begins_refused),
            "onion_names_refused": l(&s.onion_names_refused),
            "exit_bytes_down": l(&s.exit_bytes_down),
            "exit_bytes_up": l(&s.exit_bytes_up),
        },
        "hs": ctx.hs.to_json(),
        "dos": {
            "circuit_creation_enabled": ctx.dos_cc_params().enabled,
            "addrs_tracked": dos_addrs,
            "addrs_marked": dos.marked,
            "addrs_marked_by_outq": dos.marked_by_outq,
            "creates_refused": dos.refused,
            "addrs_untracked": dos.untracked,
            "stream_creation_enabled": ctx.dos_stream_params().enabled,
            "streams_refused": l(&s.streams_refused_dos),
        },
    })
}

/// Write the stats file every `stats_interval_secs` (if not 0).
pub async fn stats_loop(ctx: Arc<RelayCtx>) {
    let secs = ctx.cfg.stats_interval_secs;
    if secs == 0 {
        return;
    }
    let path = ctx.cfg.data_dir.join(STATS_FILE);
    let mut last = String::new();
    loop {
        let text = stats_json(&ctx).to_string();
        if text != last {
            if let Err(e) = onionmix_fsutil::write_atomic(&path, &text) {
                warn!("cannot write {}: {e}", path.display());
            }
            last = text;
        }
        tokio::time::sleep(Duration::from_secs(secs)).await;
    }
}
