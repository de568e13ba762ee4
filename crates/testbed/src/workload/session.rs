//! The `session` workload: a scripted sequence of request/response messages.

use std::time::{Duration, Instant};

use onionmix_measure::record::Record;

use super::conn::{Conn, exchange, fetch, fill, open};
use super::{Endpoint, WorkloadConfig, isolation, ms, record};

/// One scripted session (`session`): per-message records, then the whole
/// session's.
pub(super) async fn session(
    cfg: &WorkloadConfig,
    ep: &Endpoint,
    run: u32,
    timeout: Duration,
    tick: &(dyn Fn() + Sync),
) -> Vec<Record> {
    let user = isolation("session");
    let mut out = Vec::new();
    let mut failed = None;
    let mut before = Vec::new();
    if run > 0 {
        tokio::time::sleep(Duration::from_millis(cfg.pause_ms)).await;
        if cfg.newnym && !ep.direct {
            let t = Instant::now();
            match renew(ep).await {
                Ok(()) => before.push(("newnym_ms", ms(t.elapsed()))),
                Err(e) => failed = Some(format!("newnym: {e}")),
            }
        }
    }
    if cfg.warm_circuit && !ep.direct && failed.is_none() {
        // Untimed for the messages: builds the session's circuit.
        let mut w = record(cfg, ep, run, "warmup", Some(1000));
        fetch(
            ep,
            Some(&user),
            1000,
            0,
            cfg.optimistic_socks,
            timeout,
            &mut w,
        )
        .await;
        match (&w.error, w.metrics.get("ttlb_ms")) {
            (None, Some(t)) => before.push(("warmup_ms", *t)),
            (None, None) => {}
            (Some(e), _) => failed = Some(format!("warm-up fetch: {e}")),
        }
    }
    let mut total = record(cfg, ep, run, "session", None);
    for (k, v) in before {
        total.metrics.insert(k.into(), v);
    }
    let t0 = Instant::now();
    let mut conn: Option<Conn> = None;
    let last = cfg.script.len().saturating_sub(1);
    for (i, m) in cfg.script.iter().enumerate() {
        tokio::time::sleep(Duration::from_millis(m.think_ms)).await;
        let mut r = record(
            cfg,
            ep,
            run,
            &format!("message:{}", m.name),
            Some(m.response_bytes),
        );
        r.metrics
            .insert("request_bytes".into(), m.request_bytes as f64);
        let t = Instant::now();
        if failed.is_none() {
            let work = async {
                let mut opened = None;
                if conn.is_none() || !cfg.keep_alive {
                    let (c, o) =
                        open(ep, Some(&user), cfg.https, cfg.optimistic_socks, timeout).await?;
                    conn = Some(c);
                    opened = Some(o);
                }
                let Some(c) = conn.as_mut() else {
                    return Err("no connection".to_string());
                };
                let close = !cfg.keep_alive || i == last;
                let x = exchange(c, m.response_bytes, m.request_bytes, close, t).await?;
                Ok::<_, String>((x, opened))
            };
            match tokio::time::timeout(timeout, work).await {
                Err(_) => r.error = Some("timeout".into()),
                Ok(Err(e)) => r.error = Some(e),
                Ok(Ok((x, opened))) => {
                    fill(&mut r, &x);
                    r.metrics.insert("latency_ms".into(), ms(t.elapsed()));
                    if let Some(o) = opened {
                        if let Some(c) = o.connect {
                            r.metrics.insert("connect_ms".into(), ms(c));
                        }
                        if let Some(tls) = o.tls {
                            r.metrics.insert("tls_handshake_ms".into(), ms(tls));
                        }
                    }
                }
            }
            if !r.ok() {
                failed = r.error.clone();
                conn = None;
            }
        } else {
            r.error = Some("not sent: an earlier message of the session failed".into());
        }
        out.push(r);
        tick();
    }
    match failed {
        Some(e) => total.error = Some(e),
        None => {
            let think: u64 = cfg.script.iter().map(|m| m.think_ms).sum();
            total
                .metrics
                .insert("latency_ms".into(), ms(t0.elapsed()) - think as f64);
        }
    }
    total
        .metrics
        .insert("https".into(), if cfg.https { 1.0 } else { 0.0 });
    out.push(total);
    out
}

/// `SIGNAL NEWNYM` on the endpoint's control port.
async fn renew(ep: &Endpoint) -> Result<(), String> {
    let Some((addr, cookie)) = &ep.control else {
        return Err("the client has no control port in network.json".into());
    };
    crate::torctl::signal(*addr, cookie, "NEWNYM", Duration::from_secs(10)).await
}
