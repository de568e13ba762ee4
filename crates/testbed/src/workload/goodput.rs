//! The `goodput` workload: continuous downloads on parallel streams after a warm-up, Mbit/s.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use onionmix_measure::record::Record;

use super::conn::connect;
use super::{Endpoint, WorkloadConfig, futures_join_all, isolation, record};

pub(super) async fn goodput(
    cfg: &WorkloadConfig,
    ep: &Endpoint,
    run: u32,
    streams: usize,
    timeout: Duration,
) -> Record {
    let mut r = record(cfg, ep, run, &format!("streams:{streams}"), None);
    let warm = Duration::from_secs_f64(cfg.warmup_secs);
    let span = Duration::from_secs_f64(cfg.duration_secs);
    let user = isolation("goodput");
    let t0 = Instant::now();
    let one = |user: String| async move {
        let req = format!(
            "GET /stream/{} HTTP/1.1\r\nHost: sink\r\nConnection: close\r\n\r\n",
            crate::sink::MAX_BYTES
        );
        let end = warm + span;
        let mut buf = vec![0u8; 64 * 1024];
        let mut counted = 0u64;
        // A fast path (the direct baseline on loopback) can finish a whole
        // 1 GiB response within the window: then the next one is fetched
        // on a new connection. A response that ends short is an error.
        'conn: loop {
            let left = end.saturating_sub(t0.elapsed());
            if left.is_zero() {
                break;
            }
            let mut s = connect(ep, ep.http, Some(&user), timeout.min(left)).await?;
            match tokio::time::timeout(
                end.saturating_sub(t0.elapsed()),
                s.write_all(req.as_bytes()),
            )
            .await
            {
                Err(_) => break,
                Ok(r) => r.map_err(|e| e.to_string())?,
            }
            // The response head (only body bytes count), then body bytes.
            let mut pending = Vec::new();
            let left = end.saturating_sub(t0.elapsed());
            let head = match onionmix_http::io::read_response_head(
                &mut s,
                &mut pending,
                &onionmix_http::Limits::DEFAULT,
                left,
            )
            .await
            {
                Ok(h) => h,
                Err(onionmix_http::ReadError::TimedOut) => break 'conn,
                Err(onionmix_http::ReadError::Closed(_)) => {
                    return Err("stream ended early (after 0 body bytes)".into());
                }
                Err(e) => return Err(format!("response head: {e}")),
            };
            if head.status != 200 {
                return Err("sink refused the stream".into());
            }
            let mut body = pending.len() as u64;
            if t0.elapsed() >= warm {
                counted += body;
            }
            loop {
                let left = end.saturating_sub(t0.elapsed());
                if left.is_zero() {
                    break 'conn;
                }
                let k = match tokio::time::timeout(left, s.read(&mut buf)).await {
                    Err(_) => break 'conn,
                    Ok(Ok(0)) if body == crate::sink::MAX_BYTES => continue 'conn,
                    Ok(Ok(0)) => {
                        return Err(format!("stream ended early (after {body} body bytes)"));
                    }
                    Ok(Ok(k)) => k,
                    Ok(Err(e)) => return Err(e.to_string()),
                };
                body += k as u64;
                if t0.elapsed() >= warm {
                    counted += k as u64;
                }
            }
        }
        if counted == 0 {
            return Err("no bytes within the measured window".into());
        }
        Ok::<u64, String>(counted)
    };
    let futs: Vec<_> = (0..streams).map(|_| one(user.clone())).collect();
    // CPU time of the path's processes over the measured window.
    let cpu_sample = || -> Vec<Option<Duration>> {
        ep.cpu
            .iter()
            .map(|(_, pid)| crate::proc::cpu_time(*pid))
            .collect()
    };
    let cpu = async {
        tokio::time::sleep_until((t0 + warm).into()).await;
        let a = cpu_sample();
        tokio::time::sleep_until((t0 + warm + span).into()).await;
        let b = cpu_sample();
        a.into_iter()
            .zip(b)
            .map(|(a, b)| b.zip(a).map(|(b, a)| b.saturating_sub(a)))
            .collect::<Vec<_>>()
    };
    let (results, cpu) = tokio::join!(futures_join_all(futs), cpu);
    let mut total = 0u64;
    for res in results {
        match res {
            Ok(b) => total += b,
            Err(e) => {
                r.error = Some(e);
                return r;
            }
        }
    }
    r.metrics.insert("bytes".into(), total as f64);
    let mut cpu_total = Duration::ZERO;
    let mut all = !ep.cpu.is_empty();
    for ((name, _), d) in ep.cpu.iter().zip(&cpu) {
        match d {
            Some(d) => {
                r.metrics
                    .insert(format!("cpu_ms_{name}"), d.as_secs_f64() * 1e3);
                cpu_total += *d;
            }
            None => all = false,
        }
    }
    if all && total > 0 {
        let ms = cpu_total.as_secs_f64() * 1e3;
        r.metrics.insert("cpu_ms".into(), ms);
        r.metrics.insert(
            "cpu_ms_per_mib".into(),
            ms / (total as f64 / (1u64 << 20) as f64),
        );
    }
    r.metrics
        .insert("mbps".into(), total as f64 * 8.0 / span.as_secs_f64() / 1e6);
    r
}
