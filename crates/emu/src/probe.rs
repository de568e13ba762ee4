//! Small measurement programs run inside node namespaces by the tests and
//! the benchmark (through hidden `onionmix emulator probe ...` commands):
//! TCP echo server + RTT client, UDP numbered-packet source + loss-counting
//! sink, TCP bulk source + goodput sink. Each is bounded in time, prints one
//! `READY` line when listening (servers) and one JSON result line at the end.
//! Plus [`ChildGuard`], which kills exactly the child it holds on drop.

use crate::sys;
use serde::{Deserialize, Serialize};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::process::{Child, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Hard cap on how long any probe runs.
pub const MAX_PROBE_SECS: u64 = 600;
const MAX_CONNS: usize = 64;
const MAX_UDP_COUNT: u32 = 10_000_000;

fn ready_line(addr: SocketAddr) {
    println!("READY {addr}");
    let _ = io::stdout().flush();
}

/// TCP echo server: echoes every byte on up to 64 concurrent connections.
/// Exits after `duration` (at most [`MAX_PROBE_SECS`]).
pub fn echo_server(listen: SocketAddr, duration: Duration) -> io::Result<()> {
    echo_server_on(TcpListener::bind(listen)?, duration)
}

/// [`echo_server`] on a listener the caller bound (so it accepts from the
/// moment the caller returns from `bind`, with no start-up race).
pub fn echo_server_on(l: TcpListener, duration: Duration) -> io::Result<()> {
    l.set_nonblocking(true)?;
    ready_line(l.local_addr()?);
    let end = Instant::now() + duration.min(Duration::from_secs(MAX_PROBE_SECS));
    let active = Arc::new(AtomicUsize::new(0));
    while Instant::now() < end {
        match l.accept() {
            Ok((s, _)) => {
                if active.load(Ordering::SeqCst) >= MAX_CONNS {
                    continue;
                }
                active.fetch_add(1, Ordering::SeqCst);
                let a = active.clone();
                let left = end.saturating_duration_since(Instant::now());
                std::thread::spawn(move || {
                    let _ = echo_conn(s, left);
                    a.fetch_sub(1, Ordering::SeqCst);
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn echo_conn(mut s: TcpStream, left: Duration) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(left.max(Duration::from_millis(1))))?;
    s.set_write_timeout(Some(Duration::from_secs(30)))?;
    let mut buf = [0u8; 16 * 1024];
    loop {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        s.write_all(&buf[..n])?;
    }
}

/// Result of [`rtt_client`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RttResult {
    /// TCP connect time (one RTT plus processing).
    pub connect_us: u64,
    /// Request/response round trips on the established connection.
    pub samples_us: Vec<u64>,
}

impl RttResult {
    pub fn median_us(&self) -> f64 {
        median(&self.samples_us)
    }

    /// The `q`-quantile (0..=1) of the samples by nearest rank; 0 if none.
    /// Tests bound percentiles, not maxima: one sample delayed by the
    /// scheduler on a busy machine says nothing about the emulator.
    pub fn percentile_us(&self, q: f64) -> u64 {
        let mut s = self.samples_us.clone();
        s.sort_unstable();
        let rank = (q.clamp(0.0, 1.0) * s.len() as f64).ceil() as usize;
        s.get(rank.saturating_sub(1)).copied().unwrap_or(0)
    }
}

pub fn median(v: &[u64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_unstable();
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2] as f64
    } else {
        (s[n / 2 - 1] + s[n / 2]) as f64 / 2.0
    }
}

/// Measure `count` request/response round trips of `size` bytes on one TCP
/// connection (Nagle off), `interval` apart.
pub fn rtt_client(
    connect: SocketAddr,
    count: u32,
    interval: Duration,
    size: usize,
    timeout: Duration,
) -> io::Result<RttResult> {
    let size = size.clamp(1, 64 * 1024);
    let t0 = Instant::now();
    let mut s = TcpStream::connect_timeout(&connect, timeout)?;
    let connect_us = t0.elapsed().as_micros() as u64;
    s.set_nodelay(true)?;
    s.set_read_timeout(Some(timeout))?;
    s.set_write_timeout(Some(timeout))?;
    let msg = vec![0x5au8; size];
    let mut back = vec![0u8; size];
    let mut samples = Vec::with_capacity(count as usize);
    for _ in 0..count.min(100_000) {
        let t = Instant::now();
        s.write_all(&msg)?;
        s.read_exact(&mut back)?;
        samples.push(t.elapsed().as_micros() as u64);
        if !interval.is_zero() {
            std::thread::sleep(interval);
        }
    }
    Ok(RttResult {
        connect_us,
        samples_us: samples,
    })
}

/// Result of [`udp_sink`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpSinkResult {
    pub expected: u32,
    pub received: u32,
    pub duplicates: u32,
    /// Packets that arrived with a lower sequence number than one before.
    pub out_of_order: u32,
    /// Sequence numbers never received (in order).
    pub missing: Vec<u32>,
    /// Time from first to last packet.
    pub span_us: u64,
}

/// Receive numbered datagrams (4-byte big-endian sequence number first)
/// until `expected` have arrived, nothing came for `idle`, or `max` passed.
pub fn udp_sink(
    listen: SocketAddr,
    expected: u32,
    idle: Duration,
    max: Duration,
) -> io::Result<UdpSinkResult> {
    udp_sink_on(UdpSocket::bind(listen)?, expected, idle, max)
}

/// [`udp_sink`] on a socket the caller bound.
pub fn udp_sink_on(
    sock: UdpSocket,
    expected: u32,
    idle: Duration,
    max: Duration,
) -> io::Result<UdpSinkResult> {
    let expected = expected.min(MAX_UDP_COUNT);
    // Room for every packet of a long run even if this process is starved
    // of CPU for seconds (a receiver's overflow is not a link's loss).
    sys::force_socket_buffers(sock.as_raw_fd(), 64 << 20);
    ready_line(sock.local_addr()?);
    let mut seen = vec![false; expected as usize];
    let mut received = 0u32;
    let mut duplicates = 0u32;
    let mut out_of_order = 0u32;
    let mut highest: Option<u32> = None;
    let start = Instant::now();
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut buf = [0u8; 65_536];
    let max = max.min(Duration::from_secs(MAX_PROBE_SECS));
    sock.set_read_timeout(Some(Duration::from_millis(50)))?;
    while received < expected && start.elapsed() < max {
        if let Some(f) = first
            && f.elapsed() > Duration::ZERO
            && last.elapsed() > idle
        {
            break;
        }
        match sock.recv(&mut buf) {
            Ok(n) if n >= 4 => {
                let seq = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
                let now = Instant::now();
                first.get_or_insert(now);
                last = now;
                if seq >= expected {
                    continue;
                }
                if seen[seq as usize] {
                    duplicates += 1;
                    continue;
                }
                seen[seq as usize] = true;
                received += 1;
                if let Some(h) = highest
                    && seq < h
                {
                    out_of_order += 1;
                }
                highest = Some(highest.map_or(seq, |h| h.max(seq)));
            }
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e),
        }
    }
    let missing = seen
        .iter()
        .enumerate()
        .filter(|(_, s)| !**s)
        .map(|(i, _)| i as u32)
        .collect();
    Ok(UdpSinkResult {
        expected,
        received,
        duplicates,
        out_of_order,
        missing,
        span_us: first.map_or(0, |f| last.duration_since(f).as_micros() as u64),
    })
}

/// Result of [`udp_source`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UdpSourceResult {
    pub sent: u32,
    pub send_errors: u32,
    pub seconds: f64,
}

/// Send numbered datagrams of `size` bytes: `count` of them, or for
/// `duration` if count is 0; paced at `pps` packets/s (0: as fast as
/// possible).
pub fn udp_source(
    connect: SocketAddr,
    count: u32,
    duration: Duration,
    pps: u32,
    size: usize,
) -> io::Result<UdpSourceResult> {
    let size = size.clamp(4, 65_000);
    let bind: SocketAddr = if connect.is_ipv4() {
        "0.0.0.0:0".parse().map_err(io::Error::other)?
    } else {
        "[::]:0".parse().map_err(io::Error::other)?
    };
    let sock = UdpSocket::bind(bind)?;
    sys::force_socket_buffers(sock.as_raw_fd(), 4 << 20);
    sock.connect(connect)?;
    let mut pkt = vec![0u8; size];
    let start = Instant::now();
    let duration = duration.min(Duration::from_secs(MAX_PROBE_SECS));
    let limit = if count == 0 {
        MAX_UDP_COUNT
    } else {
        count.min(MAX_UDP_COUNT)
    };
    let mut sent = 0u32;
    let mut errors = 0u32;
    let gap = if pps == 0 { 0.0 } else { 1.0 / f64::from(pps) };
    // At most this many packets are sent back to back to catch up.
    const MAX_CATCH_UP: u32 = 64;
    let mut paced_from = 0u32;
    let mut pace_shift = Duration::ZERO;
    while sent < limit {
        if count == 0 && start.elapsed() >= duration {
            break;
        }
        if start.elapsed() >= Duration::from_secs(MAX_PROBE_SECS) {
            break;
        }
        if pps > 0 {
            let due = Duration::from_secs_f64(f64::from(sent - paced_from) * gap) + pace_shift;
            let el = start.elapsed();
            if due > el + Duration::from_micros(200) {
                std::thread::sleep(due - el);
            } else if el > due + Duration::from_secs_f64(MAX_CATCH_UP as f64 * gap) {
                // Far behind (this process was descheduled): go on at the
                // configured rate from now instead of bursting to catch up,
                // which would overflow queues that are not under test.
                paced_from = sent;
                pace_shift = el;
            }
        }
        pkt[..4].copy_from_slice(&sent.to_be_bytes());
        match sock.send(&pkt) {
            Ok(_) => sent += 1,
            Err(e)
                if e.raw_os_error() == Some(libc::ENOBUFS)
                    || e.kind() == io::ErrorKind::WouldBlock =>
            {
                errors += 1;
                std::thread::sleep(Duration::from_micros(50));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(UdpSourceResult {
        sent,
        send_errors: errors,
        seconds: start.elapsed().as_secs_f64(),
    })
}

/// Result of [`bulk_sink`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BulkResult {
    /// Payload bytes received inside the measurement window.
    pub bytes: u64,
    pub window_ms: u64,
    pub goodput_bps: f64,
    pub total_bytes: u64,
}

/// Accept one TCP connection, skip `warmup` after its first byte, then count
/// payload bytes for `measure`. With `drain`, keep reading (uncounted)
/// after the window until the sender closes or `timeout`, so that closing
/// does not end the sender's flow while another flow is still measured.
pub fn bulk_sink(
    listen: SocketAddr,
    warmup: Duration,
    measure: Duration,
    timeout: Duration,
    drain: bool,
) -> io::Result<BulkResult> {
    let l = TcpListener::bind(listen)?;
    ready_line(l.local_addr()?);
    l.set_nonblocking(true)?;
    let t_accept = Instant::now();
    let mut s = loop {
        match l.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if t_accept.elapsed() > timeout {
                    return Err(io::Error::new(io::ErrorKind::TimedOut, "no connection"));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e),
        }
    };
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_millis(100)))?;
    let mut buf = vec![0u8; 256 * 1024];
    let mut first: Option<Instant> = None;
    let mut total = 0u64;
    let mut window_bytes = 0u64;
    let measure = measure.min(Duration::from_secs(MAX_PROBE_SECS));
    let hard_end = Instant::now() + timeout.min(Duration::from_secs(MAX_PROBE_SECS));
    let mut window_start: Option<Instant> = None;
    loop {
        if Instant::now() > hard_end {
            break;
        }
        if let Some(ws) = window_start
            && ws.elapsed() >= measure
        {
            break;
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let now = Instant::now();
                let f = *first.get_or_insert(now);
                total += n as u64;
                if window_start.is_none() && now.duration_since(f) >= warmup {
                    window_start = Some(now);
                    continue;
                }
                if window_start.is_some() {
                    window_bytes += n as u64;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    let window = window_start.map_or(Duration::ZERO, |w| w.elapsed().min(measure));
    if drain {
        while Instant::now() < hard_end {
            match s.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => total += n as u64,
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock
                            | io::ErrorKind::TimedOut
                            | io::ErrorKind::Interrupted
                    ) => {}
                Err(_) => break,
            }
        }
    }
    let secs = window.as_secs_f64();
    Ok(BulkResult {
        bytes: window_bytes,
        window_ms: window.as_millis() as u64,
        goodput_bps: if secs > 0.0 {
            window_bytes as f64 * 8.0 / secs
        } else {
            0.0
        },
        total_bytes: total,
    })
}

/// Connect and write as fast as TCP allows for `duration`.
pub fn bulk_source(connect: SocketAddr, duration: Duration) -> io::Result<u64> {
    let mut s = TcpStream::connect_timeout(&connect, Duration::from_secs(10))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    let chunk = vec![0xa5u8; 64 * 1024];
    let start = Instant::now();
    let duration = duration.min(Duration::from_secs(MAX_PROBE_SECS));
    let mut sent = 0u64;
    while start.elapsed() < duration {
        match s.write(&chunk) {
            Ok(n) => sent += n as u64,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset
                ) =>
            {
                break;
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(sent)
}

/// Byte `i` of the deterministic body served by [`http_sink`].
pub fn body_byte(i: u64) -> u8 {
    (i.wrapping_mul(31).wrapping_add(7) % 251) as u8
}

/// Request head limits of [`http_sink`] (8 KiB, 64 headers).
const HEAD_LIMITS: onionmix_http::Limits = onionmix_http::Limits::new(8192, 64);

/// Largest body [`http_sink`] serves.
pub const MAX_HTTP_BODY: u64 = 256 << 20;

/// Minimal HTTP/1.0 server: `GET /bytes/<n>` answers `n` bytes of the
/// [`body_byte`] pattern, then closes. Up to 64 concurrent connections;
/// exits after `duration`.
pub fn http_sink(listen: SocketAddr, duration: Duration) -> io::Result<()> {
    let l = TcpListener::bind(listen)?;
    l.set_nonblocking(true)?;
    ready_line(l.local_addr()?);
    let end = Instant::now() + duration.min(Duration::from_secs(MAX_PROBE_SECS));
    let active = Arc::new(AtomicUsize::new(0));
    while Instant::now() < end {
        match l.accept() {
            Ok((s, _)) => {
                if active.load(Ordering::SeqCst) >= MAX_CONNS {
                    continue;
                }
                active.fetch_add(1, Ordering::SeqCst);
                let a = active.clone();
                std::thread::spawn(move || {
                    let _ = http_conn(s);
                    a.fetch_sub(1, Ordering::SeqCst);
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

fn http_conn(mut s: TcpStream) -> io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    s.set_write_timeout(Some(Duration::from_secs(60)))?;
    let mut buf = Vec::new();
    let head = match onionmix_http::blocking::read_request_head(&mut s, &mut buf, &HEAD_LIMITS) {
        Ok(h) => h,
        // Closed or timed out before a whole head: nothing to answer.
        Err(onionmix_http::ReadError::Closed(_) | onionmix_http::ReadError::Io(_)) => {
            return Ok(());
        }
        Err(_) => {
            s.write_all(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")?;
            return Ok(());
        }
    };
    let n = head
        .path
        .strip_prefix("/bytes/")
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|n| *n <= MAX_HTTP_BODY);
    let Some(n) = n else {
        s.write_all(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n")?;
        return Ok(());
    };
    s.write_all(format!("HTTP/1.0 200 OK\r\nContent-Length: {n}\r\n\r\n").as_bytes())?;
    let mut off = 0u64;
    let mut chunk = vec![0u8; 64 * 1024];
    while off < n {
        let k = (n - off).min(chunk.len() as u64) as usize;
        for (j, b) in chunk[..k].iter_mut().enumerate() {
            *b = body_byte(off + j as u64);
        }
        s.write_all(&chunk[..k])?;
        off += k as u64;
    }
    Ok(())
}

/// A child process killed (SIGKILL, by its own pid) and reaped on drop.
pub struct ChildGuard {
    child: Option<Child>,
    stdout: Option<BufReader<ChildStdout>>,
    pub what: String,
}

impl ChildGuard {
    /// Spawn with stdout piped (stderr inherited).
    pub fn spawn(mut cmd: Command, what: impl Into<String>) -> io::Result<Self> {
        cmd.stdout(Stdio::piped()).stdin(Stdio::null());
        let mut child = cmd.spawn()?;
        let stdout = child.stdout.take().map(BufReader::new);
        Ok(ChildGuard {
            child: Some(child),
            stdout,
            what: what.into(),
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Read stdout lines until one starts with `READY`; error on EOF or
    /// timeout (the reader thread is bounded by the child's lifetime).
    pub fn wait_ready(&mut self, timeout: Duration) -> io::Result<String> {
        let Some(mut r) = self.stdout.take() else {
            return Err(io::Error::other("stdout already taken"));
        };
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            loop {
                line.clear();
                match r.read_line(&mut line) {
                    Ok(0) | Err(_) => {
                        let _ = tx.send(Err(()));
                        return;
                    }
                    Ok(_) if line.starts_with("READY") => {
                        let _ = tx.send(Ok((line.trim().to_string(), r)));
                        return;
                    }
                    Ok(_) => {}
                }
            }
        });
        match rx.recv_timeout(timeout) {
            Ok(Ok((line, r))) => {
                self.stdout = Some(r);
                Ok(line)
            }
            Ok(Err(())) => Err(io::Error::other(format!(
                "{} exited before READY",
                self.what
            ))),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("{} not ready in {timeout:?}", self.what),
            )),
        }
    }

    /// Wait for exit (killing it after `timeout`) and return the rest of
    /// its stdout.
    pub fn finish(mut self, timeout: Duration) -> io::Result<String> {
        let mut child = self
            .child
            .take()
            .ok_or_else(|| io::Error::other("already finished"))?;
        let stdout = self.stdout.take();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = stdout {
                let _ = r.read_to_string(&mut s);
            }
            let _ = tx.send(());
            s
        });
        let deadline = Instant::now() + timeout;
        loop {
            if child.try_wait()?.is_some() {
                break;
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("{} did not finish in {timeout:?}", self.what),
                ));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = rx.recv_timeout(Duration::from_secs(5));
        reader
            .join()
            .map_err(|_| io::Error::other("stdout reader panicked"))
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Parse the last JSON line of a probe's output.
pub fn last_json<T: for<'de> Deserialize<'de>>(out: &str) -> io::Result<T> {
    let line = out
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| io::Error::other(format!("no JSON result in output: {out:?}")))?;
    serde_json::from_str(line).map_err(io::Error::other)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probes_work_on_loopback() {
        // Echo server + RTT client in threads over 127.0.0.1.
        // Sockets are bound here and handed to the servers: no start race.
        let l = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = l.local_addr().expect("addr");
        let srv = std::thread::spawn(move || echo_server_on(l, Duration::from_secs(10)));
        let r = rtt_client(addr, 5, Duration::ZERO, 32, Duration::from_secs(10)).expect("rtt");
        assert_eq!(r.samples_us.len(), 5);
        assert!(r.median_us() < 50_000.0);
        let _ = srv.join();

        let u = UdpSocket::bind("127.0.0.1:0").expect("bind");
        let uaddr = u.local_addr().expect("addr");
        let sink = std::thread::spawn(move || {
            udp_sink_on(u, 1000, Duration::from_secs(3), Duration::from_secs(30))
        });
        // 2,000 packets/s: a stalled receiver's default socket buffer
        // (without root) holds far more than a scheduling hiccup's worth.
        let s = udp_source(uaddr, 1000, Duration::ZERO, 2_000, 64).expect("send");
        assert_eq!(s.sent, 1000);
        let r = sink.join().expect("join").expect("sink");
        assert_eq!(r.received, 1000, "{r:?}");
        assert!(r.missing.is_empty());

        assert_eq!(median(&[3, 1, 2]), 2.0);
        assert_eq!(median(&[4, 1, 2, 3]), 2.5);
        let j: RttResult =
            last_json("READY x\n{\"connect_us\":1,\"samples_us\":[2]}\n").expect("json");
        assert_eq!(j.samples_us, vec![2]);
    }
}
