//! QUIC bulk probes for the link emulator (`onionmix emulator probe
//! quic-bulk-sink` / `quic-bulk-source`): one onionmix QUIC link (the
//! relays' transport, limits and congestion controllers) carrying bulk
//! data on `streams` circuit streams, measured like the TCP `bulk-sink`
//! (payload bytes in a window that starts `warmup` after the first byte).
//! No Tor link handshake runs: the probes measure transport behaviour
//! only, between two processes of one benchmark.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use onionmix_emu::probe::BulkResult;
use onionmix_link::quic::{MAX_CIRCUIT_WEIGHT, QuicCongestion, QuicLimits, QuicTransport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Longest run either probe accepts.
const MAX_SECS: u64 = 600;
/// Silence that ends a sink's draining.
const DRAIN_QUIET: Duration = Duration::from_secs(1);
/// Most streams a source opens.
pub const MAX_STREAMS: u32 = 16;

#[derive(Default)]
struct Window {
    first: Option<Instant>,
    last: Option<Instant>,
    start: Option<Instant>,
    bytes: u64,
    total: u64,
}

impl Window {
    /// `n` bytes arrived: counted if inside the window that starts
    /// `warmup` after the first byte and lasts `measure`.
    fn add(&mut self, n: u64, warmup: Duration, measure: Duration) {
        let now = Instant::now();
        let first = *self.first.get_or_insert(now);
        self.last = Some(now);
        self.total = self.total.saturating_add(n);
        match self.start {
            Some(s) if now.duration_since(s) < measure => {
                self.bytes = self.bytes.saturating_add(n);
            }
            Some(_) => {}
            None if now.duration_since(first) >= warmup => self.start = Some(now),
            None => {}
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?)
}

/// Accept one QUIC link on `listen` (a throwaway relay-style certificate)
/// and count what arrives on all its circuit streams. With `drain`, after
/// the window it keeps reading until the sender closes the link (or
/// `timeout`), so that it does not end the sender's flow while another
/// flow is measured.
pub fn quic_bulk_sink(
    listen: SocketAddr,
    warmup: Duration,
    measure: Duration,
    timeout: Duration,
    drain: bool,
    udp_buffer: Option<usize>,
) -> anyhow::Result<BulkResult> {
    let mut rng = rand::rngs::OsRng;
    let id = onionmix_crypto::RsaKeypair::generate(&mut rng, 1024)?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let tls = onionmix_crypto::TlsIdentity::generate(&mut rng, &id, now, 86400)?;
    let measure = measure.min(Duration::from_secs(MAX_SECS));
    let timeout = timeout.min(Duration::from_secs(MAX_SECS));
    runtime()?.block_on(async move {
        // One stream may use the whole connection window: the probe
        // measures the controller, not a circuit's flow control.
        let d = QuicLimits::default();
        let limits = QuicLimits {
            stream_receive_window: d.receive_window,
            udp_socket_buffer: udp_buffer.unwrap_or(d.udp_socket_buffer),
            ..d
        };
        let t = QuicTransport::server(
            listen,
            tls.cert_der.clone(),
            tls.key_pkcs8_der.to_vec(),
            limits,
        )?;
        println!("READY {}", t.local_addr()?);
        let hard_end = Instant::now() + timeout;
        let incoming = tokio::time::timeout(timeout, t.accept())
            .await
            .context("no QUIC connection")?
            .context("endpoint closed")?;
        let (link, _control, _) = incoming.handshake().await?;
        let link = Arc::new(link);
        let win = Arc::new(Mutex::new(Window::default()));
        let accept = {
            let (link, win) = (link.clone(), win.clone());
            tokio::spawn(async move {
                while let Ok(Some(mut s)) = link.accept_circuit_stream().await {
                    let win = win.clone();
                    tokio::spawn(async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        while let Ok(n) = s.read(&mut buf).await {
                            if n == 0 {
                                break;
                            }
                            if let Ok(mut w) = win.lock() {
                                w.add(n as u64, warmup, measure);
                            }
                        }
                    });
                }
            })
        };
        loop {
            tokio::time::sleep(Duration::from_millis(20)).await;
            let start = win.lock().ok().and_then(|w| w.start);
            if start.is_some_and(|s| s.elapsed() >= measure) || Instant::now() > hard_end {
                break;
            }
        }
        // Draining ends when the link closes or a second passes without a
        // byte (the sender's CONNECTION_CLOSE may be lost in a full queue).
        while drain && Instant::now() < hard_end && link.close_reason().is_none() {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let last = win.lock().ok().and_then(|w| w.last);
            if last.is_none_or(|l| l.elapsed() >= DRAIN_QUIET) {
                break;
            }
        }
        let w = win.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        let window = w.start.map_or(Duration::ZERO, |s| s.elapsed().min(measure));
        let secs = window.as_secs_f64();
        let r = BulkResult {
            bytes: w.bytes,
            window_ms: window.as_millis() as u64,
            goodput_bps: if secs > 0.0 {
                w.bytes as f64 * 8.0 / secs
            } else {
                0.0
            },
            total_bytes: w.total,
        };
        drop(w);
        accept.abort();
        link.close(0);
        t.close();
        Ok(r)
    })
}

/// Connect one QUIC link to `connect` with controller `cc` (standing for
/// `weight` flows when it is `cubic-per-circuit`) and write as fast as it
/// allows on `streams` circuit streams for `duration`. Returns the bytes
/// written.
pub fn quic_bulk_source(
    connect: SocketAddr,
    duration: Duration,
    cc: QuicCongestion,
    weight: u32,
    streams: u32,
    udp_buffer: Option<usize>,
) -> anyhow::Result<u64> {
    anyhow::ensure!(
        (1..=MAX_STREAMS).contains(&streams),
        "streams must be 1..={MAX_STREAMS}"
    );
    anyhow::ensure!(
        (1..=MAX_CIRCUIT_WEIGHT).contains(&weight),
        "weight must be 1..={MAX_CIRCUIT_WEIGHT}"
    );
    let duration = duration.min(Duration::from_secs(MAX_SECS));
    runtime()?.block_on(async move {
        let d = QuicLimits::default();
        let limits = QuicLimits {
            congestion: cc,
            udp_socket_buffer: udp_buffer.unwrap_or(d.udp_socket_buffer),
            ..d
        };
        let bind = SocketAddr::new(
            match connect {
                SocketAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
                SocketAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
            },
            0,
        );
        let t = QuicTransport::client(bind, limits)?;
        let (link, mut control, _) = t.connect(connect).await?;
        // The responder accepts the control stream once it carries data.
        control.write_all(b"bulk").await?;
        control.flush().await?;
        if cc == QuicCongestion::CubicPerCircuit {
            link.set_congestion_weight(weight);
        }
        let end = Instant::now() + duration;
        let mut tasks = Vec::new();
        for _ in 0..streams {
            let mut s = link.open_circuit_stream().await?;
            tasks.push(tokio::spawn(async move {
                let chunk = vec![0xa5u8; 64 * 1024];
                let mut sent = 0u64;
                while Instant::now() < end {
                    let left = end.saturating_duration_since(Instant::now());
                    match tokio::time::timeout(left, s.write(&chunk)).await {
                        Ok(Ok(n)) => sent = sent.saturating_add(n as u64),
                        Ok(Err(_)) | Err(_) => break,
                    }
                }
                sent
            }));
        }
        let mut sent = 0u64;
        for task in tasks {
            sent = sent.saturating_add(task.await.unwrap_or(0));
        }
        link.close(0);
        t.wait_idle(Duration::from_secs(2)).await;
        Ok(sent)
    })
}
