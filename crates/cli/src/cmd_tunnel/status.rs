//! The tunnel's status file (JSON, rewritten about once a second and at
//! the end) and the view `onionmix tunnel status FILE` prints: flows open,
//! bytes, DNS mappings, UDP, drops by reason.

use onionmix_tunnel::Status;
use serde_json::{Value, json};
use std::path::Path;

/// What the file says besides the core's snapshot.
pub struct Meta<'a> {
    /// The namespace's name.
    pub namespace: &'a str,
    /// The upstream SOCKS port.
    pub upstream: String,
    /// Options, for the record.
    pub config: Value,
    /// Unix time the tunnel started.
    pub started_unix: u64,
    /// Whether it still runs.
    pub running: bool,
}

fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The status as JSON.
pub fn to_json(s: &Status, m: &Meta<'_>) -> Value {
    let c = &s.counters;
    let drops: serde_json::Map<String, Value> = c
        .drops_by_reason()
        .map(|(r, n)| (r.name().to_string(), json!(n)))
        .collect();
    let flows: Vec<Value> = s
        .flows
        .iter()
        .map(|f| {
            json!({
                "id": f.id,
                "target": f.target,
                "state": format!("{:?}", f.state),
                "bytes_to_exit": f.bytes_to_exit,
                "bytes_to_app": f.bytes_to_app,
            })
        })
        .collect();
    json!({
        "namespace": m.namespace,
        "pid": std::process::id(),
        "upstream": m.upstream,
        "config": m.config,
        "started_unix": m.started_unix,
        "updated_unix": now_unix(),
        "running": m.running,
        "flows_open": s.flows_open,
        "udp_flows": s.udp_flows,
        "udp_flows_open": s.udp_flows_open,
        "dns_mappings": s.dns_mappings,
        "counters": {
            "flows_opened": c.flows_opened,
            "flows_connected": c.flows_connected,
            "flows_refused": c.flows_refused,
            "bytes_to_exit": c.bytes_to_exit,
            "bytes_to_app": c.bytes_to_app,
            "dns_answered": c.dns_answered,
            "dns_mappings_made": c.dns_mappings,
            "dns_refused": c.dns_refused,
            "icmp_unreachable": c.icmp_unreachable,
            "udp_flows_opened": c.udp_flows_opened,
            "udp_flows_refused": c.udp_flows_refused,
            "udp_datagrams_to_exit": c.udp_datagrams_to_exit,
            "udp_datagrams_to_app": c.udp_datagrams_to_app,
            "udp_bytes_to_exit": c.udp_bytes_to_exit,
            "udp_bytes_to_app": c.udp_bytes_to_app,
        },
        "drops": drops,
        "drops_total": c.drops_total(),
        "flows": flows,
    })
}

/// Write the status file (atomically: a reader never sees half of it).
pub fn write(path: &Path, s: &Status, m: &Meta<'_>) -> std::io::Result<()> {
    let text = serde_json::to_string_pretty(&to_json(s, m)).unwrap_or_default();
    onionmix_fsutil::write_atomic(path, text)
}

fn n(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

/// The human view of a status file's JSON.
pub fn render(v: &Value) -> String {
    let c = v.get("counters").cloned().unwrap_or_default();
    let mut out = String::new();
    let age = now_unix().saturating_sub(n(v, "updated_unix"));
    out.push_str(&format!(
        "tunnel {} (pid {}), upstream {}, {} (updated {age} s ago)\n",
        v["namespace"].as_str().unwrap_or("?"),
        n(v, "pid"),
        v["upstream"].as_str().unwrap_or("?"),
        if v["running"].as_bool().unwrap_or(false) {
            "running"
        } else {
            "stopped"
        },
    ));
    if let Some(cfg) = v.get("config").and_then(Value::as_object) {
        let parts: Vec<String> = cfg
            .iter()
            .map(|(k, x)| format!("{k}={}", x.as_str().map_or(x.to_string(), str::to_string)))
            .collect();
        out.push_str(&format!("config: {}\n", parts.join(" ")));
    }
    out.push_str(&format!(
        "TCP flows: {} open, {} opened, {} connected, {} refused\n",
        n(v, "flows_open"),
        n(&c, "flows_opened"),
        n(&c, "flows_connected"),
        n(&c, "flows_refused"),
    ));
    out.push_str(&format!(
        "bytes: {} to exits, {} to applications\n",
        n(&c, "bytes_to_exit"),
        n(&c, "bytes_to_app"),
    ));
    out.push_str(&format!(
        "DNS: {} mappings held, {} made, {} answers, {} refused\n",
        n(v, "dns_mappings"),
        n(&c, "dns_mappings_made"),
        n(&c, "dns_answered"),
        n(&c, "dns_refused"),
    ));
    out.push_str(&format!(
        "UDP: {} flows ({} open), {} opened, {} refused; datagrams {} out, {} in; {} ICMP unreachable\n",
        n(v, "udp_flows"),
        n(v, "udp_flows_open"),
        n(&c, "udp_flows_opened"),
        n(&c, "udp_flows_refused"),
        n(&c, "udp_datagrams_to_exit"),
        n(&c, "udp_datagrams_to_app"),
        n(&c, "icmp_unreachable"),
    ));
    let drops: Vec<String> = v
        .get("drops")
        .and_then(Value::as_object)
        .map(|o| {
            o.iter()
                .filter(|(_, x)| x.as_u64().unwrap_or(0) > 0)
                .map(|(k, x)| format!("{k} {}", x.as_u64().unwrap_or(0)))
                .collect()
        })
        .unwrap_or_default();
    out.push_str(&format!(
        "drops: {} ({})\n",
        n(v, "drops_total"),
        if drops.is_empty() {
            "none".to_string()
        } else {
            drops.join(", ")
        }
    ));
    if let Some(fl) = v.get("flows").and_then(Value::as_array)
        && !fl.is_empty()
    {
        out.push_str("  id  state         to exit      to app  target\n");
        for f in fl {
            out.push_str(&format!(
                "{:>4}  {:<12} {:>8} {:>11}  {}\n",
                n(f, "id"),
                f["state"].as_str().unwrap_or("?"),
                n(f, "bytes_to_exit"),
                n(f, "bytes_to_app"),
                f["target"].as_str().unwrap_or("?"),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionmix_tunnel::{DropReason, Tunnel, TunnelConfig};

    #[test]
    fn json_and_view() {
        let mut t = Tunnel::new(TunnelConfig::default());
        t.count_drop(DropReason::UdpQueue);
        let s = t.status(std::time::Instant::now());
        let m = Meta {
            namespace: "omx1-0",
            upstream: "127.0.0.1:9050".into(),
            config: json!({"dns": "optimistic"}),
            started_unix: 1,
            running: true,
        };
        let v = to_json(&s, &m);
        assert_eq!(v["drops"]["udp_queue"], 1);
        assert_eq!(v["drops_total"], 1);
        let text = render(&v);
        assert!(text.contains("omx1-0"), "{text}");
        assert!(text.contains("udp_queue 1"), "{text}");
        assert!(text.contains("dns=optimistic"), "{text}");
        // Garbage renders, never panics.
        let _ = render(&json!({"counters": 3, "flows": [1]}));
    }
}
