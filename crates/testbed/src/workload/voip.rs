//! The `voip` workload: timestamped packets at a fixed rate to the echo port, per-packet RTT.

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use onionmix_measure::record::Record;

use super::conn::connect;
use super::{Endpoint, WorkloadConfig, isolation, record};

pub(super) async fn voip(
    cfg: &WorkloadConfig,
    ep: &Endpoint,
    run: u32,
    timeout: Duration,
) -> Vec<Record> {
    let mut stream = record(cfg, ep, run, "stream", Some(cfg.packet_bytes as u64));
    let mut s = match connect(ep, ep.echo, Some(&isolation("voip")), timeout).await {
        Ok(s) => s,
        Err(e) => {
            stream.error = Some(e);
            return vec![stream];
        }
    };
    let n = (cfg.duration_secs * cfg.packets_per_sec).ceil().max(1.0) as u64;
    let gap = Duration::from_secs_f64(1.0 / cfg.packets_per_sec);
    let (mut rd, mut wr) = s.split();
    let t0 = Instant::now();
    let size = cfg.packet_bytes;
    let sender = async {
        let mut ticker = tokio::time::interval(gap);
        for seq in 0..n {
            ticker.tick().await;
            let mut p = vec![0u8; size];
            p[..8].copy_from_slice(&seq.to_be_bytes());
            p[8..16].copy_from_slice(&(t0.elapsed().as_nanos() as u64).to_be_bytes());
            if wr.write_all(&p).await.is_err() {
                break;
            }
        }
    };
    let receiver = async {
        let mut rtts: Vec<(u64, f64)> = Vec::new();
        let mut p = vec![0u8; size];
        let deadline =
            Duration::from_secs_f64(cfg.duration_secs) + timeout.min(Duration::from_secs(10));
        while (rtts.len() as u64) < n {
            let left = deadline.saturating_sub(t0.elapsed());
            match tokio::time::timeout(left, rd.read_exact(&mut p)).await {
                Ok(Ok(_)) => {
                    let seq = u64::from_be_bytes(p[..8].try_into().unwrap_or_default());
                    let sent = u64::from_be_bytes(p[8..16].try_into().unwrap_or_default());
                    let rtt = t0.elapsed().as_nanos() as f64 / 1e6 - sent as f64 / 1e6;
                    rtts.push((seq, rtt));
                }
                _ => break,
            }
        }
        rtts
    };
    let ((), rtts) = tokio::join!(sender, receiver);
    let mut out = Vec::new();
    for (seq, rtt) in &rtts {
        let mut r = record(cfg, ep, run, "packet", Some(size as u64));
        r.metrics.insert("seq".into(), *seq as f64);
        r.metrics.insert("rtt_ms".into(), *rtt);
        out.push(r);
    }
    let got = rtts.len() as f64;
    let share = |lim: f64| rtts.iter().filter(|(_, r)| *r < lim).count() as f64 / n as f64;
    stream.metrics.insert("packets_sent".into(), n as f64);
    stream.metrics.insert("packets_lost".into(), n as f64 - got);
    stream
        .metrics
        .insert("share_under_150ms".into(), share(150.0));
    stream
        .metrics
        .insert("share_under_300ms".into(), share(300.0));
    if got == 0.0 {
        stream.error = Some("no packet came back".into());
    }
    out.push(stream);
    out
}
