//! Just enough of Tor's control protocol (control-spec) to time a stock
//! tor client's circuits: cookie authentication, `SETEVENTS CIRC`, and
//! the time from each circuit's `LAUNCHED` event to its `BUILT` event;
//! and to see its congestion control: `CIRC_BW` events carry `SS`,
//! `CWND`, `RTT` and `MIN_RTT` for circuits that negotiated it with their
//! exit (control-spec §4.1.25).
//!
//! Stock tor keeps per-circuit build times to itself (its state file
//! holds only a histogram); the events are the one outside view of them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use time::PrimitiveDateTime;
use time::format_description::BorrowedFormatItem;
use time::macros::format_description;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

mod pin;
pub use pin::{PIN_BUILD_ATTEMPTS, Pinned, pin_streams};

/// Longest control-port line accepted.
const MAX_LINE: usize = 16 * 1024;
/// Circuits waiting for `BUILT` at once; older ones are forgotten.
const MAX_PENDING: usize = 4096;
/// Build times kept.
const MAX_TIMES: usize = 100_000;

/// One `650 CIRC` event: circuit id, status, purpose.
#[derive(Debug, Clone, PartialEq)]
pub struct CircEvent {
    /// Circuit id (tor's, per control connection).
    pub id: String,
    /// `LAUNCHED`, `BUILT`, `EXTENDED`, `FAILED`, `CLOSED`, ...
    pub status: String,
    /// `PURPOSE=` value when present.
    pub purpose: Option<String>,
    /// `TIME_CREATED=` (UTC, microseconds) as Unix seconds, when present.
    pub created_unix: Option<f64>,
    /// `BUILD_FLAGS=` has `ONEHOP_TUNNEL` (a directory circuit).
    pub one_hop: bool,
}

/// `2026-11-23T10:00:00.123456` (UTC, years 1970-9999; a fraction of 1 to
/// 9 digits or none) as Unix seconds. Impossible dates and times
/// (2026-02-31, hour 24) are refused.
pub fn parse_iso_usec(t: &str) -> Option<f64> {
    const ISO: &[BorrowedFormatItem<'static>] = format_description!(
        "[year]-[month]-[day]T[hour]:[minute]:[second][optional [.[subsecond]]]"
    );
    // Exactly four year digits (no sign, no expanded years) and at most
    // nanoseconds.
    let year_ok = t
        .get(..5)
        .is_some_and(|y| y.as_bytes()[..4].iter().all(u8::is_ascii_digit) && y.ends_with('-'));
    if !year_ok || t.split_once('.').is_some_and(|(_, f)| f.len() > 9) {
        return None;
    }
    let dt = PrimitiveDateTime::parse(t, ISO).ok()?.assume_utc();
    if dt.year() < 1970 {
        return None;
    }
    Some(dt.unix_timestamp() as f64 + f64::from(dt.nanosecond()) / 1e9)
}

fn now_unix() -> f64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Parse a `650 CIRC <id> <status> [path] [key=value...]` line, or a
/// `650 CIRC_MINOR <id> <event> ...` one (the event, e.g.
/// `PURPOSE_CHANGED`, is then the status).
pub fn parse_circ_event(line: &str) -> Option<CircEvent> {
    let line = line.trim_end();
    let rest = line
        .strip_prefix("650 CIRC ")
        .or_else(|| line.strip_prefix("650 CIRC_MINOR "))?;
    let mut words = rest.split(' ');
    let id = words.next().filter(|w| !w.is_empty())?;
    let status = words.next().filter(|w| !w.is_empty())?;
    let (mut purpose, mut created_unix, mut one_hop) = (None, None, false);
    for w in words {
        if let Some(f) = w.strip_prefix("BUILD_FLAGS=") {
            one_hop = f.split(',').any(|f| f == "ONEHOP_TUNNEL");
        } else if let Some(p) = w.strip_prefix("PURPOSE=") {
            purpose = Some(p.to_string());
        } else if let Some(t) = w.strip_prefix("TIME_CREATED=") {
            created_unix = parse_iso_usec(t);
        }
    }
    Some(CircEvent {
        id: id.to_string(),
        status: status.to_string(),
        purpose,
        created_unix,
        one_hop,
    })
}

/// Whether a circuit of this purpose carries (or could carry) client
/// streams: general and conflux circuits; not testing or timeout-measuring
/// ones.
pub fn counts(purpose: Option<&str>) -> bool {
    !matches!(purpose, Some("TESTING" | "MEASURE_TIMEOUT" | "CONTROLLER"))
}

/// A running watch; [`CircuitWatch::finish`] returns the build times.
pub struct CircuitWatch {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<(Vec<f64>, Option<String>)>,
}

/// What a watch saw.
#[derive(Debug, Clone, Default)]
pub struct Watched {
    /// Build times in ms, in the order circuits finished.
    pub build_ms: Vec<f64>,
    /// Why the watch ended before it was stopped, if it did (the times
    /// then cover only part of the run).
    pub ended_early: Option<String>,
}

impl CircuitWatch {
    /// Stop watching and return what was seen.
    pub async fn finish(mut self) -> Watched {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        match self.task.await {
            Ok((build_ms, ended_early)) => Watched {
                build_ms,
                ended_early,
            },
            Err(e) => Watched {
                build_ms: Vec::new(),
                ended_early: Some(format!("watcher task failed: {e}")),
            },
        }
    }
}

/// The watch's state: circuits launched and build times so far.
struct Timings {
    /// Unix time the watch began.
    since: f64,
    launched: HashMap<String, Instant>,
    times: Vec<f64>,
}

impl Timings {
    fn event(&mut self, line: &str) {
        let Some(ev) = parse_circ_event(line) else {
            return;
        };
        match ev.status.as_str() {
            "LAUNCHED" if counts(ev.purpose.as_deref()) && !ev.one_hop => {
                if self.launched.len() >= MAX_PENDING {
                    self.launched.clear();
                }
                self.launched.insert(ev.id, Instant::now());
            }
            // Only the first BUILT of a circuit seen launched: a circuit
            // extended again later reports BUILT again.
            "BUILT" => {
                let Some(t) = self.launched.remove(&ev.id) else {
                    return;
                };
                let ms = match ev.created_unix {
                    Some(c) if c >= self.since - 1.0 => (now_unix() - c) * 1e3,
                    Some(_) => return,
                    None => t.elapsed().as_secs_f64() * 1e3,
                };
                if ms >= 0.0 && self.times.len() < MAX_TIMES {
                    self.times.push(ms);
                }
            }
            "FAILED" | "CLOSED" => {
                self.launched.remove(&ev.id);
            }
            _ => {}
        }
    }
}

async fn read_line(
    r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    line: &mut String,
) -> Result<(), String> {
    line.clear();
    let mut buf = Vec::new();
    let n = tokio::io::AsyncReadExt::take(&mut *r, MAX_LINE as u64)
        .read_until(b'\n', &mut buf)
        .await
        .map_err(|e| e.to_string())?;
    if n == 0 {
        return Err("control connection closed".into());
    }
    if !buf.ends_with(b"\n") {
        return Err("control line too long".into());
    }
    quickack(r.get_ref().as_ref());
    line.push_str(&String::from_utf8_lossy(&buf));
    Ok(())
}

/// Ask the kernel to acknowledge what arrives at once. Tor writes events
/// with Nagle's algorithm on; with delayed ACKs here an event could wait
/// up to 40 ms behind the previous one, which would inflate build times.
#[allow(unsafe_code)] // setsockopt(2) through libc, as proc.rs does kill(2)
fn quickack(s: &TcpStream) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        let one: libc::c_int = 1;
        // SAFETY: a valid socket fd and a c_int option value of the
        // right size; failure only loses the optimisation.
        unsafe {
            libc::setsockopt(
                s.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_QUICKACK,
                (&one as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = s;
}

/// Reads a reply and returns its last line (`250 OK` etc.).
async fn reply(r: &mut BufReader<tokio::net::tcp::OwnedReadHalf>) -> Result<String, String> {
    let mut line = String::new();
    loop {
        read_line(r, &mut line).await?;
        // "250-..." continues, "250 ..." ends; data replies ("250+") are
        // not used here.
        if line.len() >= 4 && line.as_bytes()[3] == b' ' {
            return Ok(line.trim_end().to_string());
        }
    }
}

/// Authenticate with the cookie in `cookie_file`, send `command` and read
/// its whole reply (its lines, the last one `NNN ...`), all within
/// `timeout`. A refused cookie is an error; the command's own status is
/// the caller's to judge.
async fn command_reply(
    addr: SocketAddr,
    cookie_file: &Path,
    command: &str,
    timeout: Duration,
) -> Result<Vec<String>, String> {
    let cookie = std::fs::read(cookie_file)
        .map_err(|e| format!("control cookie {}: {e}", cookie_file.display()))?;
    let ask = async {
        let s = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("control port {addr}: {e}"))?;
        let (rd, mut wr) = s.into_split();
        let mut rd = BufReader::new(rd);
        wr.write_all(format!("AUTHENTICATE {}\r\n{command}\r\n", hex::encode(&cookie)).as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let r = reply(&mut rd).await?;
        if !r.starts_with("250") {
            return Err(format!("control port refused the cookie: {r}"));
        }
        let mut lines = Vec::new();
        let mut line = String::new();
        // Inside a data block (after `NNN+...`, up to a lone `.`) lines
        // are data, whatever their fourth byte.
        let mut in_data = false;
        loop {
            read_line(&mut rd, &mut line).await?;
            let l = line.trim_end().to_string();
            if in_data {
                in_data = l != ".";
                lines.push(l);
                continue;
            }
            let sep = l.as_bytes().get(3).copied();
            in_data = sep == Some(b'+');
            let last = l.len() >= 4 && sep == Some(b' ');
            lines.push(l);
            if last {
                break;
            }
        }
        let _ = wr.write_all(b"QUIT\r\n").await;
        Ok(lines)
    };
    tokio::time::timeout(timeout, ask)
        .await
        .map_err(|_| format!("control port {addr}: no answer within {timeout:?}"))?
}

/// `GETINFO key` on a tor control port (cookie authentication with
/// `cookie_file`): the single-line value (`250-key=value`), e.g.
/// `sr/current`. A `5xx` answer is an error.
pub async fn getinfo(
    addr: SocketAddr,
    cookie_file: &Path,
    key: &str,
    timeout: Duration,
) -> Result<String, String> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!("bad GETINFO key {key:?}"));
    }
    let lines = command_reply(addr, cookie_file, &format!("GETINFO {key}"), timeout).await?;
    let last = lines.last().map(String::as_str).unwrap_or_default();
    if !last.starts_with("250") {
        return Err(format!("GETINFO {key}: {last}"));
    }
    lines
        .iter()
        .find_map(|l| {
            l.strip_prefix("250-")
                .or_else(|| l.strip_prefix("250 "))
                .and_then(|kv| kv.strip_prefix(key))
                .and_then(|kv| kv.strip_prefix('='))
        })
        .map(str::to_string)
        .ok_or_else(|| format!("GETINFO {key}: no value in the answer"))
}

/// `GETINFO key` whose value may be a data block (`250+key=` ... `.`,
/// e.g. `circuit-status`): its lines, without the block's end (a
/// single-line value gives one line; an empty value none). A `5xx`
/// answer is an error.
pub async fn getinfo_lines(
    addr: SocketAddr,
    cookie_file: &Path,
    key: &str,
    timeout: Duration,
) -> Result<Vec<String>, String> {
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(format!("bad GETINFO key {key:?}"));
    }
    let lines = command_reply(addr, cookie_file, &format!("GETINFO {key}"), timeout).await?;
    getinfo_value_lines(&lines, key)
}

/// The value of `key` in a GETINFO reply's `lines` (see
/// [`getinfo_lines`]).
fn getinfo_value_lines(lines: &[String], key: &str) -> Result<Vec<String>, String> {
    let last = lines.last().map(String::as_str).unwrap_or_default();
    if !last.starts_with("250") {
        return Err(format!("GETINFO {key}: {last}"));
    }
    let mut it = lines.iter();
    while let Some(l) = it.next() {
        if let Some(v) = l
            .strip_prefix("250-")
            .or_else(|| l.strip_prefix("250 "))
            .and_then(|kv| kv.strip_prefix(key))
            .and_then(|kv| kv.strip_prefix('='))
        {
            return Ok(if v.is_empty() {
                vec![]
            } else {
                vec![v.to_string()]
            });
        }
        if l.strip_prefix("250+")
            .and_then(|kv| kv.strip_prefix(key))
            .is_some_and(|kv| kv.starts_with('='))
        {
            return Ok(it
                .by_ref()
                .take_while(|d| d.as_str() != ".")
                .map(|d| {
                    d.strip_prefix('.')
                        .filter(|_| d.starts_with(".."))
                        .unwrap_or(d)
                })
                .map(str::to_string)
                .collect());
        }
    }
    Err(format!("GETINFO {key}: no value in the answer"))
}

/// `SIGNAL <name>` (e.g. `NEWNYM`) on a control port, stock tor's or an
/// onionmix client's (cookie authentication with `cookie_file`), within
/// `timeout`. Both answer `250 OK` at once, also to a NEWNYM they defer
/// (less than 10 s after the previous one).
pub async fn signal(
    addr: SocketAddr,
    cookie_file: &Path,
    name: &str,
    timeout: Duration,
) -> Result<(), String> {
    if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return Err(format!("bad signal name {name:?}"));
    }
    let lines = command_reply(addr, cookie_file, &format!("SIGNAL {name}"), timeout).await?;
    let last = lines.last().map(String::as_str).unwrap_or_default();
    if !last.starts_with("250") {
        return Err(format!("SIGNAL {name}: {last}"));
    }
    Ok(())
}

type ControlConn = (
    BufReader<tokio::net::tcp::OwnedReadHalf>,
    tokio::net::tcp::OwnedWriteHalf,
);

/// Connect to a control port, authenticate with the cookie in
/// `cookie_file` and `SETEVENTS events`, all within `timeout`.
async fn subscribe(
    addr: SocketAddr,
    cookie_file: &Path,
    events: &str,
    timeout: Duration,
) -> Result<ControlConn, String> {
    let cookie = std::fs::read(cookie_file)
        .map_err(|e| format!("control cookie {}: {e}", cookie_file.display()))?;
    if cookie.len() != 32 {
        return Err(format!(
            "control cookie {} has {} bytes, not 32",
            cookie_file.display(),
            cookie.len()
        ));
    }
    let setup = async {
        let s = TcpStream::connect(addr)
            .await
            .map_err(|e| format!("control port {addr}: {e}"))?;
        quickack(&s);
        let (rd, mut wr) = s.into_split();
        let mut rd = BufReader::new(rd);
        wr.write_all(format!("AUTHENTICATE {}\r\n", hex::encode(&cookie)).as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let r = reply(&mut rd).await?;
        if !r.starts_with("250") {
            return Err(format!("control port refused the cookie: {r}"));
        }
        wr.write_all(format!("SETEVENTS {events}\r\n").as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let r = reply(&mut rd).await?;
        if !r.starts_with("250") {
            return Err(format!("SETEVENTS {events}: {r}"));
        }
        Ok::<_, String>((rd, wr))
    };
    tokio::time::timeout(timeout, setup)
        .await
        .map_err(|_| format!("control port {addr}: no answer within {timeout:?}"))?
}

/// One `650 CIRC_BW` event's congestion-control fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CircBw {
    /// Circuit id.
    pub id: String,
    /// `SS=` (in slow start), present only with congestion control.
    pub slow_start: Option<bool>,
    /// `CWND=` in cells.
    pub cwnd: Option<u64>,
    /// `RTT=` in ms.
    pub rtt_ms: Option<u64>,
    /// `MIN_RTT=` in ms.
    pub min_rtt_ms: Option<u64>,
}

/// Parse a `650 CIRC_BW ID=<id> READ=.. WRITTEN=.. [SS=..] [CWND=..]
/// [RTT=..] [MIN_RTT=..]` line.
pub fn parse_circ_bw(line: &str) -> Option<CircBw> {
    let rest = line.trim_end().strip_prefix("650 CIRC_BW ")?;
    let mut ev = CircBw {
        id: String::new(),
        slow_start: None,
        cwnd: None,
        rtt_ms: None,
        min_rtt_ms: None,
    };
    for w in rest.split(' ') {
        let Some((k, v)) = w.split_once('=') else {
            continue;
        };
        match k {
            "ID" => ev.id = v.to_string(),
            "SS" => ev.slow_start = Some(v == "1"),
            "CWND" => ev.cwnd = v.parse().ok(),
            "RTT" => ev.rtt_ms = v.parse().ok(),
            "MIN_RTT" => ev.min_rtt_ms = v.parse().ok(),
            _ => {}
        }
    }
    (!ev.id.is_empty()).then_some(ev)
}

/// A running watch of control-port events, collecting those its filter
/// keeps.
pub struct EventWatch<T> {
    stop: Option<oneshot::Sender<()>>,
    task: JoinHandle<Vec<T>>,
}

/// A running `CIRC_BW` watch.
pub type CircBwWatch = EventWatch<CircBw>;

/// Most events kept by a watch.
const MAX_WATCHED: usize = 100_000;

impl<T> EventWatch<T> {
    /// Stop and return the events kept.
    pub async fn finish(mut self) -> Vec<T> {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        self.task.await.unwrap_or_default()
    }
}

/// Subscribe to `events` and keep what `keep` makes of each line until
/// [`EventWatch::finish`] (and what arrives within 200 ms of it).
async fn watch_with<T: Send + 'static>(
    addr: SocketAddr,
    cookie_file: &Path,
    events: &str,
    timeout: Duration,
    keep: fn(&str) -> Option<T>,
) -> Result<EventWatch<T>, String> {
    let (mut rd, wr) = subscribe(addr, cookie_file, events, timeout).await?;
    let (stop_tx, mut stop_rx) = oneshot::channel();
    let task = tokio::spawn(async move {
        let _keep = wr;
        let mut seen = Vec::new();
        let mut line = String::new();
        let take = |l: &str, seen: &mut Vec<T>| {
            if let Some(ev) = keep(l)
                && seen.len() < MAX_WATCHED
            {
                seen.push(ev);
            }
        };
        loop {
            tokio::select! {
                biased;
                r = read_line(&mut rd, &mut line) => match r {
                    Ok(()) => take(&line, &mut seen),
                    Err(_) => return seen,
                },
                _ = &mut stop_rx => break,
            }
        }
        while let Ok(Ok(())) =
            tokio::time::timeout(Duration::from_millis(200), read_line(&mut rd, &mut line)).await
        {
            take(&line, &mut seen);
        }
        seen
    });
    Ok(EventWatch {
        stop: Some(stop_tx),
        task,
    })
}

/// Connect to a stock tor's control port and collect its `CIRC_BW`
/// events with congestion-control fields until [`EventWatch::finish`].
pub async fn watch_circ_bw(
    addr: SocketAddr,
    cookie_file: &Path,
    timeout: Duration,
) -> Result<CircBwWatch, String> {
    watch_with(addr, cookie_file, "CIRC_BW", timeout, |l| {
        parse_circ_bw(l).filter(|e| e.cwnd.is_some())
    })
    .await
}

/// Connect to a tor control port and collect its `CIRC` and `CIRC_MINOR`
/// events (a conflux leg's `PURPOSE_CHANGED` to `CONFLUX_LINKED` is a
/// `CIRC_MINOR` event) until [`EventWatch::finish`].
pub async fn watch_circ_events(
    addr: SocketAddr,
    cookie_file: &Path,
    timeout: Duration,
) -> Result<EventWatch<CircEvent>, String> {
    watch_with(
        addr,
        cookie_file,
        "CIRC CIRC_MINOR",
        timeout,
        parse_circ_event,
    )
    .await
}

/// Connect to a tor control port, authenticate with the cookie in
/// `cookie_file`, subscribe to CIRC events and time every multi-hop
/// circuit launched from now on until [`CircuitWatch::finish`]: from its
/// `TIME_CREATED` (tor's own clock, microseconds; the same machine's
/// clock as ours) to the arrival of its first `BUILT` event, or from the
/// arrival of `LAUNCHED` when tor gives no creation time. One-hop
/// directory circuits (`BUILD_FLAGS=ONEHOP_TUNNEL`) are left out.
pub async fn watch_circuits(
    addr: SocketAddr,
    cookie_file: &Path,
    timeout: Duration,
) -> Result<CircuitWatch, String> {
    let (mut rd, wr) = subscribe(addr, cookie_file, "CIRC", timeout).await?;
    let (stop_tx, mut stop_rx) = oneshot::channel();
    let since = now_unix();
    let task = tokio::spawn(async move {
        let _keep = wr;
        let mut t = Timings {
            since,
            launched: HashMap::new(),
            times: Vec::new(),
        };
        let mut line = String::new();
        // Read first (biased), so events already here are not dropped
        // for the stop signal.
        let stopped = loop {
            tokio::select! {
                biased;
                r = read_line(&mut rd, &mut line) => match r {
                    Ok(()) => t.event(&line),
                    Err(e) => break Err(e),
                },
                _ = &mut stop_rx => break Ok(()),
            }
        };
        if let Err(e) = stopped {
            return (t.times, Some(e));
        }
        // Stopped: take what is already on its way (up to 200 ms of
        // quiet), so the last BUILT events are not lost.
        while let Ok(Ok(())) =
            tokio::time::timeout(Duration::from_millis(200), read_line(&mut rd, &mut line)).await
        {
            t.event(&line);
        }
        (t.times, None)
    });
    Ok(CircuitWatch {
        stop: Some(stop_tx),
        task,
    })
}

/// Most event lines a [`watch_events`] keeps.
pub const MAX_EVENT_LINES: usize = MAX_WATCHED;

/// Subscribe to `events` (e.g. `STREAM`) on a control port (cookie
/// authentication) and keep every event line (`650 ...`, without the line
/// end), in order, until [`EventWatch::finish`].
pub async fn watch_events(
    addr: SocketAddr,
    cookie_file: &Path,
    events: &str,
    timeout: Duration,
) -> Result<EventWatch<String>, String> {
    if events.is_empty()
        || !events
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b == b' ' || b == b'_')
    {
        return Err(format!("bad event list {events:?}"));
    }
    fn event_line(l: &str) -> Option<String> {
        l.starts_with("650").then(|| l.trim_end().to_string())
    }
    watch_with(addr, cookie_file, events, timeout, event_line).await
}

#[cfg(test)]
mod tests;
