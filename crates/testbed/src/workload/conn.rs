//! Streams to the sink (SOCKS or direct, plain or TLS) and the timed HTTP exchange on them.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use onionmix_measure::record::Record;

use super::{Endpoint, ms};
use crate::socks::{self, Target};

/// A byte stream to the sink: TCP through SOCKS (or direct), maybe TLS.
pub(super) trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}
pub(super) type Conn = Box<dyn Io>;

/// Open a stream to `target` through the client's SOCKS port, either
/// waiting for the SOCKS reply (as most applications do) or, with
/// `optimistic`, returning as soon as the request is written.
async fn connect_opt(
    ep: &Endpoint,
    target: SocketAddr,
    user: Option<&str>,
    optimistic: bool,
    timeout: Duration,
) -> Result<Conn, String> {
    if optimistic && !ep.direct && ep.tunnel.is_none() {
        let auth = user.map(|u| (u, "x"));
        let s = socks::connect_pipelined(ep.socks, &socks_target(ep, target), auth, timeout)
            .await
            .map_err(|e| format!("socks: {e}"))?;
        return Ok(Box::new(s));
    }
    Ok(Box::new(connect(ep, target, user, timeout).await?))
}

pub(super) async fn connect(
    ep: &Endpoint,
    target: SocketAddr,
    user: Option<&str>,
    timeout: Duration,
) -> Result<TcpStream, String> {
    if let Some(t) = &ep.tunnel {
        // Inside the tunnel's namespace, by name: the tunnel's resolver
        // answers (a synthetic address whose name the exit resolves).
        let ip = resolve_in(t, timeout).await?;
        let s = connect_from(&t.netns, SocketAddr::new(ip, target.port()), timeout).await?;
        let _ = s.set_nodelay(true);
        return Ok(s);
    }
    if ep.direct {
        let s = match &ep.netns {
            None => tokio::time::timeout(timeout, TcpStream::connect(target))
                .await
                .map_err(|_| "connect: timeout".to_string())?
                .map_err(|e| format!("connect: {e}"))?,
            Some(ns) => connect_from(ns, target, timeout).await?,
        };
        let _ = s.set_nodelay(true);
        return Ok(s);
    }
    let auth = user.map(|u| (u, "x"));
    socks::connect(ep.socks, &socks_target(ep, target), auth, timeout)
        .await
        .map_err(|e| format!("socks: {e}"))
}

/// What to ask the SOCKS port for to reach the sink's `target`: through
/// the endpoint's onion service, when it has one, that service's virtual
/// port for the sink's server; else the address itself.
pub(super) fn socks_target(ep: &Endpoint, target: SocketAddr) -> Target {
    match &ep.onion {
        Some(o) if target == ep.http => Target::Host(o.address.clone(), o.http_port),
        Some(o) if target == ep.echo => Target::Host(o.address.clone(), o.echo_port),
        _ => Target::Addr(target),
    }
}

/// A direct TCP connection made inside namespace `ns` (the measured
/// client's), handed to tokio.
async fn connect_from(
    ns: &str,
    target: SocketAddr,
    timeout: Duration,
) -> Result<TcpStream, String> {
    let (tx, rx) = tokio::sync::oneshot::channel();
    onionmix_emu::netns::connect_from(ns, target, timeout, move |r| {
        let _ = tx.send(r);
    })
    .map_err(|e| format!("connect from namespace {ns}: {e}"))?;
    let s = tokio::time::timeout(timeout + Duration::from_secs(1), rx)
        .await
        .map_err(|_| "connect: timeout".to_string())?
        .map_err(|_| "connect: the connecting thread ended".to_string())?
        .map_err(|e| format!("connect: {e}"))?;
    s.set_nonblocking(true)
        .map_err(|e| format!("connect: {e}"))?;
    TcpStream::from_std(s).map_err(|e| format!("connect: {e}"))
}

/// The address the tunnel's resolver gives `t.host` (A), asked from
/// inside the tunnel's namespace.
async fn resolve_in(t: &super::TunnelVia, timeout: Duration) -> Result<std::net::IpAddr, String> {
    use onionmix_tunnel::dns::wire;
    let id = rand::random::<u16>();
    let q = wire::build_query(id, &t.host, wire::TYPE_A)
        .ok_or_else(|| format!("cannot ask for {:?}", t.host))?;
    let resolver = t.resolver;
    let ask = move || -> Result<Vec<u8>, String> {
        let any: SocketAddr = if resolver.is_ipv4() {
            ([0, 0, 0, 0], 0).into()
        } else {
            (std::net::Ipv6Addr::UNSPECIFIED, 0).into()
        };
        let s = std::net::UdpSocket::bind(any).map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(timeout))
            .map_err(|e| e.to_string())?;
        s.connect(resolver).map_err(|e| e.to_string())?;
        s.send(&q).map_err(|e| e.to_string())?;
        let mut buf = vec![0u8; 512];
        let n = s
            .recv(&mut buf)
            .map_err(|e| format!("no DNS answer: {e}"))?;
        buf.truncate(n);
        Ok(buf)
    };
    let h = onionmix_emu::netns::run_in(&t.netns, ask)
        .map_err(|e| format!("namespace {}: {e}", t.netns))?;
    let answer = tokio::task::spawn_blocking(move || h.join())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|_| "the resolving thread panicked".to_string())?
        .map_err(|e| format!("namespace {}: {e}", t.netns))??;
    wire::parse_answer(&answer, id)
        .and_then(|a| a.into_iter().next())
        .ok_or_else(|| format!("{}: no address from the tunnel's resolver", t.host))
}

/// Timings of opening a connection to the sink's web server.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Opened {
    /// SOCKS (or TCP) connect, i.e. until the stream through the network
    /// is open (None with optimistic SOCKS: it opens under the first
    /// exchange).
    pub(super) connect: Option<Duration>,
    /// TLS handshake on top, when HTTPS.
    pub(super) tls: Option<Duration>,
}

/// Open a connection to the sink's web server: plain HTTP, or HTTPS with
/// the sink's certificate verified against its CA.
pub(super) async fn open(
    ep: &Endpoint,
    user: Option<&str>,
    https: bool,
    optimistic: bool,
    timeout: Duration,
) -> Result<(Conn, Opened), String> {
    let opened = |t: Duration| (!optimistic || ep.direct).then_some(t);
    if !https {
        let t0 = Instant::now();
        let s = connect_opt(ep, ep.http, user, optimistic, timeout).await?;
        return Ok((
            s,
            Opened {
                connect: opened(t0.elapsed()),
                tls: None,
            },
        ));
    }
    let (Some(addr), Some(ca)) = (ep.https, ep.tls_ca.as_ref()) else {
        return Err("the sink serves no HTTPS (network started by an older onionmix?)".into());
    };
    // TLS set-up before the clock starts: only the network is timed.
    let pem = std::fs::read(ca).map_err(|e| format!("sink CA {}: {e}", ca.display()))?;
    let cfg = crate::sink::client_tls(&pem)?;
    let name = rustls::pki_types::ServerName::try_from(crate::sink::SINK_HOSTNAME)
        .map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    let s = connect_opt(ep, addr, user, optimistic, timeout).await?;
    let connected = t0.elapsed();
    let tls = tokio::time::timeout(
        timeout,
        tokio_rustls::TlsConnector::from(std::sync::Arc::new(cfg)).connect(name, s),
    )
    .await
    .map_err(|_| "TLS handshake: timeout".to_string())?
    .map_err(|e| format!("TLS handshake: {e}"))?;
    Ok((
        Box::new(tls),
        Opened {
            connect: opened(connected),
            tls: Some(t0.elapsed() - connected),
        },
    ))
}

/// What one HTTP exchange measured, from `t0`.
pub(super) struct Exchange {
    first_byte: Duration,
    last_byte: Duration,
    at_half_mib: Option<Duration>,
    at_one_mib: Option<Duration>,
    /// Longest time without a received byte, from `t0` (so the wait for
    /// the first byte counts) to the last byte: seed 004's stall is one
    /// of 2 s or more.
    max_gap: Duration,
}

/// One `GET /bytes/<n>` on `s` (the request padded to about `pad` bytes);
/// reads exactly the n-byte body, so the connection can carry another
/// request unless `close`.
pub(super) async fn exchange(
    s: &mut Conn,
    n: u64,
    pad: usize,
    close: bool,
    t0: Instant,
) -> Result<Exchange, String> {
    let mut req = format!(
        "GET /bytes/{n} HTTP/1.1\r\nHost: sink\r\nUser-Agent: onionmix-measure\r\n{}",
        if close { "Connection: close\r\n" } else { "" }
    );
    if pad > req.len() + 16 {
        req.push_str(&format!("X-Pad: {}\r\n", "p".repeat(pad - req.len() - 12)));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())
        .await
        .map_err(|e| e.to_string())?;
    s.flush().await.map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; 64 * 1024];
    // The first read times the first byte; the parser takes it from there.
    let k = s.read(&mut buf).await.map_err(|e| e.to_string())?;
    if k == 0 {
        return Err("closed before the response".into());
    }
    let first = t0.elapsed();
    let mut max_gap = first;
    let mut last = first;
    let mut pending = buf[..k].to_vec();
    let head = onionmix_http::io::read_response_head(
        s,
        &mut pending,
        &onionmix_http::Limits::DEFAULT,
        crate::http::HEAD_TIMEOUT,
    )
    .await
    .map_err(|e| format!("response head: {e}"))?;
    if head.status != 200 {
        return Err(format!("HTTP {} {}", head.status, head.reason));
    }
    // Read exactly this response's body so a kept-alive connection stays
    // in step.
    let max = usize::try_from(crate::sink::MAX_BYTES).unwrap_or(usize::MAX);
    match head.body_framing(max, false) {
        Ok(onionmix_http::BodyFraming::Length(len)) if u64::try_from(len) == Ok(n) => {}
        Ok(f) => {
            return Err(format!(
                "response framing {f:?} where {n} bytes were asked for"
            ));
        }
        Err(e) => return Err(format!("response head: {e}")),
    }
    let mut got = pending.len() as u64;
    if got > n {
        return Err(format!("{got} body bytes where {n} were asked for"));
    }
    let (mut at_half, mut at_one) = (None, None);
    let mark = |got: u64, h: &mut Option<Duration>, o: &mut Option<Duration>| {
        if got >= 512 * 1024 && h.is_none() {
            *h = Some(t0.elapsed());
        }
        if got >= 1024 * 1024 && o.is_none() {
            *o = Some(t0.elapsed());
        }
    };
    mark(got, &mut at_half, &mut at_one);
    while got < n {
        let want = (n - got).min(buf.len() as u64) as usize;
        let k = s.read(&mut buf[..want]).await.map_err(|e| e.to_string())?;
        if k == 0 {
            return Err(format!("truncated at {got} of {n} bytes"));
        }
        got += k as u64;
        let now = t0.elapsed();
        max_gap = max_gap.max(now.saturating_sub(last));
        last = now;
        mark(got, &mut at_half, &mut at_one);
    }
    Ok(Exchange {
        first_byte: first,
        last_byte: t0.elapsed(),
        at_half_mib: at_half,
        at_one_mib: at_one,
        max_gap,
    })
}

/// Fill `r` from a finished exchange: ttfb/ttlb, the longest gap without
/// progress (and the 0.5-1 MiB throughput when the body is that large).
pub(super) fn fill(r: &mut Record, x: &Exchange) {
    r.metrics.insert("ttfb_ms".into(), ms(x.first_byte));
    r.metrics.insert("ttlb_ms".into(), ms(x.last_byte));
    r.metrics.insert("max_gap_ms".into(), ms(x.max_gap));
    if let (Some(h), Some(o)) = (x.at_half_mib, x.at_one_mib)
        && o > h
    {
        let mbps = (512.0 * 1024.0 * 8.0) / (o - h).as_secs_f64() / 1e6;
        r.metrics.insert("mbps_05_1".into(), mbps);
    }
}

/// One HTTP fetch on a new connection; fills `r` with ttfb/ttlb (from
/// before the connect) and the 0.5-1 MiB throughput.
pub(super) async fn fetch(
    ep: &Endpoint,
    user: Option<&str>,
    n: u64,
    pad: usize,
    optimistic: bool,
    timeout: Duration,
    r: &mut Record,
) {
    let t0 = Instant::now();
    let work = async {
        let (mut s, _) = open(ep, user, false, optimistic, timeout).await?;
        exchange(&mut s, n, pad, true, t0).await
    };
    match tokio::time::timeout(timeout, work).await {
        Err(_) => r.error = Some("timeout".into()),
        Ok(Err(e)) => r.error = Some(e),
        Ok(Ok(x)) => fill(r, &x),
    }
}
