//! A metrics endpoint like tor's MetricsPort: Prometheus text exposition
//! (version 0.0.4) over HTTP, `GET /metrics`, for clients and relays.
//! Requests are read with the project's one HTTP head parser
//! (`onionmix-http`), connections are bounded and time out.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use crate::client::control::hub::{BUILD_BUCKETS_MS, ControlHub};
use crate::relay::RelayCtx;

/// Most metrics connections served at once.
pub const MAX_METRICS_CONNECTIONS: usize = 16;
/// Time a scraper has to send its request.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What the endpoint reports on.
#[derive(Clone)]
pub enum Source {
    /// A client's hub and its channels.
    Client(Arc<ControlHub>, Box<crate::client::chanmgr::ChanMgr>),
    /// A relay.
    Relay(Arc<RelayCtx>),
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Source::Client(..) => "Source::Client",
            Source::Relay(_) => "Source::Relay",
        })
    }
}

fn metric(out: &mut String, name: &str, kind: &str, help: &str, samples: &[(&str, u64)]) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, v) in samples {
        if labels.is_empty() {
            let _ = writeln!(out, "{name} {v}");
        } else {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    }
}

/// The client's metrics in Prometheus text format; `(channels, queued)`:
/// its open channels and the bytes queued on them.
pub fn client_text(h: &ControlHub, (channels, queued): (usize, usize)) -> String {
    let c = &h.counters;
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let mut o = String::new();
    let (built, building) = h.circuit_counts();
    metric(
        &mut o,
        "onionmix_client_circuits",
        "gauge",
        "Circuits by state.",
        &[
            ("state=\"built\"", built as u64),
            ("state=\"building\"", building as u64),
        ],
    );
    metric(
        &mut o,
        "onionmix_client_circuits_total",
        "counter",
        "Circuits launched, built and failed.",
        &[
            ("outcome=\"launched\"", l(&c.circ_launched)),
            ("outcome=\"built\"", l(&c.circ_built)),
            ("outcome=\"failed\"", l(&c.circ_failed)),
        ],
    );
    let _ = writeln!(
        o,
        "# HELP onionmix_client_circuit_build_seconds Circuit build times."
    );
    let _ = writeln!(o, "# TYPE onionmix_client_circuit_build_seconds histogram");
    let mut cum = 0u64;
    for (i, ub) in BUILD_BUCKETS_MS.iter().enumerate() {
        cum += c.build_buckets.get(i).map(l).unwrap_or(0);
        let _ = writeln!(
            o,
            "onionmix_client_circuit_build_seconds_bucket{{le=\"{}\"}} {cum}",
            *ub as f64 / 1000.0
        );
    }
    cum += c
        .build_buckets
        .get(BUILD_BUCKETS_MS.len())
        .map(l)
        .unwrap_or(0);
    let _ = writeln!(
        o,
        "onionmix_client_circuit_build_seconds_bucket{{le=\"+Inf\"}} {cum}"
    );
    let _ = writeln!(
        o,
        "onionmix_client_circuit_build_seconds_sum {}",
        l(&c.build_micros_sum) as f64 / 1e6
    );
    let _ = writeln!(o, "onionmix_client_circuit_build_seconds_count {cum}");
    metric(
        &mut o,
        "onionmix_client_streams",
        "gauge",
        "Streams open or being opened.",
        &[("", h.open_streams() as u64)],
    );
    metric(
        &mut o,
        "onionmix_client_streams_total",
        "counter",
        "Streams requested, connected and failed.",
        &[
            ("outcome=\"requested\"", l(&c.streams_new)),
            ("outcome=\"succeeded\"", l(&c.streams_ok)),
            ("outcome=\"failed\"", l(&c.streams_failed)),
        ],
    );
    metric(
        &mut o,
        "onionmix_client_bytes_total",
        "counter",
        "Application bytes carried by streams.",
        &[
            ("direction=\"read\"", l(&h.read)),
            ("direction=\"written\"", l(&h.written)),
        ],
    );
    metric(
        &mut o,
        "onionmix_client_channels",
        "gauge",
        "Open channels to relays.",
        &[("", channels as u64)],
    );
    metric(
        &mut o,
        "onionmix_client_channel_queued_bytes",
        "gauge",
        "Bytes queued on channels towards relays, not yet written.",
        &[("", queued as u64)],
    );
    metric(
        &mut o,
        "onionmix_client_control_errors_total",
        "counter",
        "Control connections refused at the limit or dropped for a full event queue.",
        &[
            ("reason=\"limit\"", l(&h.bus.refused)),
            ("reason=\"event_queue_full\"", l(h.bus.overflow())),
        ],
    );
    metric(
        &mut o,
        "onionmix_client_bootstrap_percent",
        "gauge",
        "Bootstrap progress.",
        &[("", u64::from(h.bootstrap_progress()))],
    );
    o
}

/// A relay's metrics in Prometheus text format.
pub fn relay_text(r: &RelayCtx) -> String {
    let s = &r.stats;
    let l = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    let mut o = String::new();
    metric(
        &mut o,
        "onionmix_relay_channels",
        "gauge",
        "Open channels.",
        &[("", s.channels.load(Ordering::Relaxed) as u64)],
    );
    metric(
        &mut o,
        "onionmix_relay_circuits",
        "gauge",
        "Open circuits.",
        &[("", s.circuits.load(Ordering::Relaxed) as u64)],
    );
    metric(
        &mut o,
        "onionmix_relay_circuits_total",
        "counter",
        "Circuits created and CREATE2 cells refused.",
        &[
            ("outcome=\"created\"", l(&s.circuits_created)),
            ("outcome=\"refused\"", l(&s.creates_refused)),
        ],
    );
    let (dos, _) = r.dos_cc_stats();
    metric(
        &mut o,
        "onionmix_relay_dos_total",
        "counter",
        "DoS defences: client addresses marked (circuit creation, outbound queues), CREATE cells and exit streams refused.",
        &[
            ("type=\"addrs_marked\"", dos.marked),
            ("type=\"addrs_marked_outq\"", dos.marked_by_outq),
            ("type=\"creates_refused\"", l(&s.creates_refused_dos)),
            ("type=\"streams_refused\"", l(&s.streams_refused_dos)),
        ],
    );
    metric(
        &mut o,
        "onionmix_relay_cells_forwarded_total",
        "counter",
        "Relay cells forwarded.",
        &[("", l(&s.cells_forwarded))],
    );
    metric(
        &mut o,
        "onionmix_relay_exit_streams_total",
        "counter",
        "Exit streams opened.",
        &[("", l(&s.streams))],
    );
    metric(
        &mut o,
        "onionmix_relay_exit_bytes_total",
        "counter",
        "Exit bytes.",
        &[
            ("direction=\"down\"", l(&s.exit_bytes_down)),
            ("direction=\"up\"", l(&s.exit_bytes_up)),
        ],
    );
    metric(
        &mut o,
        "onionmix_relay_queued_bytes",
        "gauge",
        "Bytes in channels' outbound queues.",
        &[("", r.queues.total() as u64)],
    );
    metric(
        &mut o,
        "onionmix_relay_oom_total",
        "counter",
        "Memory-pressure handler: channels closed, bytes freed.",
        &[
            ("what=\"channels\"", l(&s.oom_channels_closed)),
            ("what=\"bytes\"", l(&s.oom_bytes_freed)),
        ],
    );
    metric(
        &mut o,
        "onionmix_relay_circuit_queue_limit_total",
        "counter",
        "Circuits closed for queueing more cells than circ_max_cell_queue_size.",
        &[("", l(&s.queue_limit_kills))],
    );
    metric(
        &mut o,
        "onionmix_relay_refused_single_hop_begins_total",
        "counter",
        "BEGINs refused on a client's first hop.",
        &[("", l(&s.single_hop_begins_refused))],
    );
    metric(
        &mut o,
        "onionmix_relay_exit_onion_names_refused_total",
        "counter",
        "BEGINs and RESOLVEs for .onion names refused without a lookup (RFC 7686).",
        &[("", l(&s.onion_names_refused))],
    );
    o
}

async fn serve_one(mut sock: tokio::net::TcpStream, src: Source) -> Result<(), String> {
    let mut buf = Vec::new();
    let head = onionmix_http::io::read_request_head(
        &mut sock,
        &mut buf,
        &onionmix_http::Limits::default(),
        REQUEST_TIMEOUT,
    )
    .await
    .map_err(|e| e.to_string())?;
    let (status, body) = if head.method != "GET" {
        ("405 Method Not Allowed", "only GET\n".to_string())
    } else if head.path == "/metrics" || head.path == "/" {
        let text = match &src {
            Source::Client(h, chans) => client_text(h, chans.queued()),
            Source::Relay(r) => relay_text(r),
        };
        ("200 OK", text)
    } else {
        ("404 Not Found", "not found\n".to_string())
    };
    let resp = format!(
        "HTTP/1.0 {status}\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tokio::time::timeout(REQUEST_TIMEOUT, sock.write_all(resp.as_bytes()))
        .await
        .map_err(|_| "write timed out".to_string())?
        .map_err(|e| e.to_string())?;
    let _ = sock.shutdown().await;
    Ok(())
}

/// Bind `addr` and serve metrics; the bound address.
pub async fn serve(addr: SocketAddr, src: Source) -> Result<SocketAddr, String> {
    let l = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen for metrics on {addr}: {e}"))?;
    let a = l.local_addr().map_err(|e| e.to_string())?;
    info!("metrics port listening on {a}");
    let limit = Arc::new(Semaphore::new(MAX_METRICS_CONNECTIONS));
    tokio::spawn(async move {
        loop {
            let (sock, _) = match l.accept().await {
                Ok(x) => x,
                Err(e) => {
                    warn!("metrics accept failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let Ok(permit) = limit.clone().try_acquire_owned() else {
                continue;
            };
            let src = src.clone();
            tokio::spawn(async move {
                if let Err(e) = serve_one(sock, src).await {
                    debug!("metrics request: {e}");
                }
                drop(permit);
            });
        }
    });
    Ok(a)
}
