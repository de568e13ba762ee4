//! Exit streams: BEGIN (connect with exit policy and timeouts), RESOLVE,
//! BEGIN_DIR, and the data pump between a TCP connection and the circuit.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, mpsc};
use tracing::debug;

use onionmix_cell::RELAY_DATA_LEN;
use onionmix_cell::relay::{
    Begin, Connected, End, RelayCmd, ResolvedAnswer, TargetHost, begin_flags, encode_resolved,
    end_reason,
};
use onionmix_proto::flow::STREAM_WINDOW_START;
use onionmix_proto::xonxoff::STREAM_BUFFER_EXTRA_CELLS;

use super::RelayCtx;
use super::conflux::ExitSet;
use super::reactor::{
    DataSend, RCmd, RelayChanHandle, SharedCirc, originate_backward, try_originate_counted,
    try_originate_data,
};
use crate::gate::StreamGate;

/// Queue depth for client->target data: the stream window of 500, or the
/// XOFF threshold plus what a client in slow start may have in flight
/// when our XOFF reaches it; a client that sends more loses the stream.
pub const STREAM_QUEUE: usize = STREAM_WINDOW_START as usize + STREAM_BUFFER_EXTRA_CELLS + 20;
/// Time allowed for DNS resolution at the exit.
pub const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Time allowed for the TCP connect at the exit.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// TTL we report for addresses.
pub const ANSWER_TTL: u32 = 300;
/// Largest directory request accepted over BEGIN_DIR.
pub const MAX_DIR_REQUEST: usize = 128 * 1024;
/// Idle time after which an exit stream is closed.
pub const STREAM_IDLE: Duration = Duration::from_secs(3600);

/// What the client asked for.
#[derive(Debug)]
pub enum Request {
    /// BEGIN.
    Connect(Begin),
    /// BEGIN_DIR.
    Dir,
    /// RESOLVE.
    Resolve(String),
    /// CONNECT_UDP (see `exit_udp`).
    ConnectUdp(onionmix_cell::relay::ConnectUdp),
}

/// Where an exit stream's cells go: the circuit it was opened on, or the
/// conflux set that circuit is a leg of (any leg, as the set's scheduler
/// decides).
#[derive(Clone)]
pub enum StreamPath {
    /// One circuit.
    Circ {
        /// Circuit crypto and sending state.
        shared: SharedCirc,
        /// The client-side channel (boxed: the set variant is one pointer).
        origin: Box<RelayChanHandle>,
        /// Circuit ID on it.
        circ_id: u32,
        /// Woken when the circuit's window opens or the circuit closes.
        window_open: Arc<Notify>,
    },
    /// A conflux set.
    Set(Arc<ExitSet>),
}

impl StreamPath {
    /// Send a stream message other than DATA.
    fn send(&self, ctx: &RelayCtx, cmd: RelayCmd, sid: u16, data: &[u8]) -> bool {
        match self {
            StreamPath::Circ {
                shared,
                origin,
                circ_id,
                ..
            } => originate_backward(shared, origin, *circ_id, cmd, sid, data),
            StreamPath::Set(set) => set.lock().send_msg(&ctx.stats, cmd, sid, data),
        }
    }
    /// Send one DATAGRAM if the circuit's window allows (UDP streams live
    /// on one circuit: CONNECT_UDP is not multiplexed over conflux sets).
    pub(super) fn try_send_datagram(&self, sid: u16, data: &[u8]) -> DataSend {
        match self {
            StreamPath::Circ {
                shared,
                origin,
                circ_id,
                ..
            } => try_originate_counted(shared, origin, *circ_id, RelayCmd::DATAGRAM, sid, data),
            StreamPath::Set(_) => DataSend::Closed,
        }
    }
    /// Send one DATA cell if a window allows.
    fn try_send_data(&self, ctx: &RelayCtx, sid: u16, data: &[u8]) -> DataSend {
        match self {
            StreamPath::Circ {
                shared,
                origin,
                circ_id,
                ..
            } => try_originate_data(shared, origin, *circ_id, sid, data),
            StreamPath::Set(set) => set.lock().try_send_data(&ctx.stats, sid, data),
        }
    }
    /// Woken when a window opens.
    fn window_open(&self) -> &Notify {
        match self {
            StreamPath::Circ { window_open, .. } => window_open,
            StreamPath::Set(set) => &set.window_open,
        }
    }
    /// The stream wrote `cells` cells (`bytes` bytes) to its target; on
    /// one circuit they are summed in `tally` and the origin reactor told
    /// unless it already was.
    fn drained(&self, ctx: &RelayCtx, sid: u16, tally: &DrainTally, cells: u32, bytes: usize) {
        match self {
            StreamPath::Circ {
                origin, circ_id, ..
            } => {
                if tally.add(cells, bytes) {
                    origin.send(RCmd::StreamDrained {
                        circ_id: *circ_id,
                        stream: sid,
                    });
                }
            }
            StreamPath::Set(set) => {
                super::reactor::conflux::set_stream_drained(ctx, set, sid, cells, bytes);
            }
        }
    }
    /// The stream ended (its END, if any, was sent).
    fn closed(&self, ctx: &RelayCtx, sid: u16) {
        match self {
            StreamPath::Circ {
                origin, circ_id, ..
            } => origin.send(RCmd::StreamClosed {
                circ_id: *circ_id,
                stream: sid,
            }),
            StreamPath::Set(set) => super::reactor::conflux::set_stream_closed(ctx, set, sid),
        }
    }
    /// The channel a single circuit sends on, and the circuit's ID on it
    /// (a set picks per cell).
    fn writer(&self) -> Option<(&onionmix_link::ChannelWriter, u32)> {
        match self {
            StreamPath::Circ {
                origin, circ_id, ..
            } => Some((&origin.writer, *circ_id)),
            StreamPath::Set(_) => None,
        }
    }
}

/// What an exit stream wrote to its target and its origin reactor has not
/// accounted yet (stream SENDMEs, XON are due on it). Summed here rather
/// than carried in each message, so that at most one
/// [`RCmd::StreamDrained`] per stream is ever queued: the reactor's
/// command queue is then bounded by its streams and never drops one,
/// which would leave the client's stream window closed for good.
#[derive(Debug, Default)]
pub struct DrainTally {
    cells: AtomicU32,
    bytes: AtomicUsize,
    told: AtomicBool,
}

impl DrainTally {
    /// Add a write; true when the reactor must be told (no
    /// `StreamDrained` for this stream is pending).
    pub fn add(&self, cells: u32, bytes: usize) -> bool {
        self.cells.fetch_add(cells, Ordering::SeqCst);
        self.bytes.fetch_add(bytes, Ordering::SeqCst);
        !self.told.swap(true, Ordering::SeqCst)
    }
    /// Everything added since the last call (the reactor, on
    /// `StreamDrained`); later adds tell it again.
    pub fn take(&self) -> (u32, usize) {
        self.told.store(false, Ordering::SeqCst);
        (
            self.cells.swap(0, Ordering::SeqCst),
            self.bytes.swap(0, Ordering::SeqCst),
        )
    }
}

/// One exit stream task's state.
pub struct ExitStream {
    /// Relay context.
    pub ctx: Arc<RelayCtx>,
    /// Where its cells go.
    pub path: StreamPath,
    /// Stream ID.
    pub stream: u16,
    /// The stream's send gate (window or XON/XOFF).
    pub gate: Arc<StreamGate>,
    /// What it wrote to its target and the origin reactor has not yet
    /// accounted.
    pub tally: Arc<DrainTally>,
    /// Data from the client.
    pub data: mpsc::Receiver<Bytes>,
    /// The circuit's previous hop is a relay (or single-hop exits are
    /// allowed): HSDir requests are served.
    pub anonymous: bool,
}

impl ExitStream {
    pub(super) fn send(&self, cmd: RelayCmd, data: &[u8]) -> bool {
        self.path.send(&self.ctx, cmd, self.stream, data)
    }
    pub(super) fn end(&self, reason: u8) {
        self.send(RelayCmd::END, &End::new(reason).encode());
        self.closed();
    }
    pub(super) fn closed(&self) {
        self.path.closed(&self.ctx, self.stream);
    }
    fn drained(&self, cells: u32, bytes: usize) {
        self.path
            .drained(&self.ctx, self.stream, &self.tally, cells, bytes);
    }
    /// Send one DATA cell once a window allows.
    async fn send_cell(&self, chunk: &[u8]) -> bool {
        loop {
            let opened = self.path.window_open().notified();
            tokio::pin!(opened);
            opened.as_mut().enable();
            match self.path.try_send_data(&self.ctx, self.stream, chunk) {
                DataSend::Sent => return true,
                DataSend::Closed => return false,
                DataSend::WindowClosed => opened.await,
                DataSend::ChanFull(w) => {
                    let hw = onionmix_link::io::DEFAULT_HIGH_WATER;
                    tokio::select! {
                        () = w.wait_below(hw) => {}
                        () = opened => {}
                    }
                }
            }
        }
    }

    async fn send_data(&self, mut data: &[u8]) -> bool {
        while !data.is_empty() {
            let n = data.len().min(RELAY_DATA_LEN);
            if self.gate.acquire(n).await.is_err() {
                return false;
            }
            if !self.send_cell(&data[..n]).await {
                return false;
            }
            // Backpressure on the client link (on QUIC: on this circuit's
            // stream of it).
            let hw = onionmix_link::io::DEFAULT_HIGH_WATER;
            if let Some((w, circ_id)) = self.path.writer()
                && w.circuit_queued_bytes(circ_id) >= hw
            {
                w.wait_circuit_below(circ_id, hw).await;
            }
            data = &data[n..];
        }
        true
    }
}

/// Run one exit stream to completion.
pub async fn run(s: ExitStream, req: Request) {
    s.ctx.stats.streams.fetch_add(1, Ordering::Relaxed);
    match req {
        Request::Connect(b) => connect(s, b).await,
        Request::Resolve(name) => resolve(s, name).await,
        Request::Dir => dir(s).await,
        Request::ConnectUdp(c) => super::exit_udp::connect_udp(s, c).await,
    }
}

/// Name lookups in flight at once in this process, at most: each holds a
/// blocking-pool thread (the system resolver) or a UDP socket (the
/// configured nameserver) for up to [`RESOLVE_TIMEOUT`]. Past it a lookup
/// fails at once with RESOURCELIMIT, so a flood of RESOLVE or BEGIN cells
/// with names cannot exhaust threads or descriptors.
pub const MAX_LOOKUPS: usize = 256;
static LOOKUPS: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(MAX_LOOKUPS);

/// A name no resolver may be asked for: `.onion` (RFC 7686; a client
/// that sends one to an exit leaks which service it wanted, and a
/// resolver that passes it on leaks it further). Case and a final dot do
/// not matter.
pub fn is_onion_name(host: &str) -> bool {
    let h = host.strip_suffix('.').unwrap_or(host);
    let b = h.as_bytes();
    b.len() >= 6 && b[b.len() - 6..].eq_ignore_ascii_case(b".onion")
}

async fn lookup(ctx: &RelayCtx, host: &str, port: u16) -> Result<Vec<IpAddr>, u8> {
    if is_onion_name(host) {
        ctx.stats
            .onion_names_refused
            .fetch_add(1, Ordering::Relaxed);
        return Err(end_reason::RESOLVEFAILED);
    }
    let Ok(_permit) = LOOKUPS.try_acquire() else {
        return Err(end_reason::RESOURCELIMIT);
    };
    if let Some(ns) = ctx.cfg.nameserver {
        return match tokio::time::timeout(RESOLVE_TIMEOUT, super::dns::resolve(ns, host)).await {
            Ok(Ok(v)) if !v.is_empty() => Ok(v),
            Ok(_) => Err(end_reason::RESOLVEFAILED),
            Err(_) => Err(end_reason::TIMEOUT),
        };
    }
    match tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((host, port))).await {
        Ok(Ok(addrs)) => {
            let v: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
            if v.is_empty() {
                Err(end_reason::RESOLVEFAILED)
            } else {
                Ok(v)
            }
        }
        Ok(Err(_)) => Err(end_reason::RESOLVEFAILED),
        Err(_) => Err(end_reason::TIMEOUT),
    }
}

/// The address to connect a stream to `host:port` (`flags` as in
/// BEGIN): resolved here, of an allowed family, passing the exit policy.
/// `None` once the stream was ended (with the reason and, for a policy
/// refusal, the address refused).
pub(super) async fn pick_target(
    s: &ExitStream,
    host: &TargetHost,
    port: u16,
    flags: u32,
) -> Option<IpAddr> {
    let candidates = match host {
        TargetHost::Ip(ip) => vec![*ip],
        TargetHost::Hostname(h) => match lookup(&s.ctx, h, port).await {
            Ok(v) => v,
            Err(r) => {
                s.end(r);
                return None;
            }
        },
    };
    let v4_ok = flags & begin_flags::IPV4_NOT_OK == 0;
    let v6_ok = flags & begin_flags::IPV6_OK != 0 || matches!(host, TargetHost::Ip(IpAddr::V6(_)));
    let mut usable: Vec<IpAddr> = candidates
        .iter()
        .copied()
        .filter(|a| (a.is_ipv4() && v4_ok) || (a.is_ipv6() && v6_ok))
        .collect();
    if flags & begin_flags::IPV6_PREFERRED != 0 {
        usable.sort_by_key(|a| a.is_ipv4());
    }
    if let Some(&addr) = usable.iter().find(|a| s.ctx.exit_policy.allows(a, port)) {
        return Some(addr);
    }
    let refused = usable.first().or(candidates.first()).copied();
    let end = End {
        reason: if refused.is_some() {
            end_reason::EXITPOLICY
        } else {
            end_reason::RESOLVEFAILED
        },
        addr: refused.map(|a| (a, ANSWER_TTL)),
    };
    s.send(RelayCmd::END, &end.encode());
    s.closed();
    None
}

async fn connect(mut s: ExitStream, b: Begin) {
    if !s.ctx.cfg.exit {
        s.end(end_reason::EXITPOLICY);
        return;
    }
    let Some(addr) = pick_target(&s, &b.host, b.port, b.flags).await else {
        return;
    };
    let sock = match tokio::time::timeout(
        CONNECT_TIMEOUT,
        TcpStream::connect(SocketAddr::new(addr, b.port)),
    )
    .await
    {
        Ok(Ok(sock)) => sock,
        Ok(Err(e)) => {
            let reason = match e.kind() {
                std::io::ErrorKind::ConnectionRefused => end_reason::CONNECTREFUSED,
                std::io::ErrorKind::TimedOut => end_reason::TIMEOUT,
                std::io::ErrorKind::HostUnreachable | std::io::ErrorKind::NetworkUnreachable => {
                    end_reason::NOROUTE
                }
                std::io::ErrorKind::ConnectionReset => end_reason::CONNRESET,
                _ => end_reason::MISC,
            };
            debug!("exit connect failed: {e}");
            s.end(reason);
            return;
        }
        Err(_) => {
            s.end(end_reason::TIMEOUT);
            return;
        }
    };
    let _ = sock.set_nodelay(true);
    // Optimistic data (prop 174): DATA cells that came while we resolved
    // and connected waited in the stream's queue (bounded, and never more
    // than one stream window: no stream SENDME goes out before they are
    // written). They were all sent before CONNECTED, which goes out now.
    let mut early = Vec::new();
    let mut early_cells = 0u16;
    while let Ok(d) = s.data.try_recv() {
        early.extend_from_slice(&d);
        early_cells = early_cells.saturating_add(1);
    }
    let connected = Connected {
        addr: Some((addr, ANSWER_TTL)),
    };
    if !s.send(RelayCmd::CONNECTED, &connected.encode()) {
        return;
    }
    let (rd, mut wr) = sock.into_split();
    if !early.is_empty() {
        let n = early.len() as u64;
        s.ctx.stats.optimistic_bytes.fetch_add(n, Ordering::Relaxed);
        s.ctx
            .stats
            .optimistic_streams
            .fetch_add(1, Ordering::Relaxed);
        s.ctx.stats.exit_bytes_up.fetch_add(n, Ordering::Relaxed);
        if wr.write_all(&early).await.is_err() {
            s.end(end_reason::CONNRESET);
            return;
        }
        // Written: they count towards the stream's SENDMEs and drain rate
        // as any other DATA.
        s.drained(u32::from(early_cells), early.len());
    }
    pump(&mut s, rd, wr).await;
}

/// Move data both ways between the target and the circuit until either
/// side ends. The directions run concurrently: waiting for the circuit's
/// window towards the client never stops writing the client's data to
/// the target (which would make our buffer look undrained, send XOFF and
/// advertise a wrong drain rate with congestion control).
async fn pump(
    s: &mut ExitStream,
    mut rd: tokio::net::tcp::OwnedReadHalf,
    mut wr: tokio::net::tcp::OwnedWriteHalf,
) {
    let mut data = std::mem::replace(&mut s.data, mpsc::channel(1).1);
    let t0 = tokio::time::Instant::now();
    let ms = move || u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
    let last_down = AtomicU64::new(0);
    let s: &ExitStream = s;
    // Target -> client.
    let downward = async {
        let mut buf = vec![0u8; RELAY_DATA_LEN * 32];
        loop {
            match rd.read(&mut buf).await {
                Ok(0) => {
                    // Target closed: tell the client (tor sends END DONE).
                    s.end(end_reason::DONE);
                    return;
                }
                Ok(n) => {
                    last_down.store(ms(), Ordering::Relaxed);
                    s.ctx
                        .stats
                        .exit_bytes_down
                        .fetch_add(n as u64, Ordering::Relaxed);
                    if !s.send_data(&buf[..n]).await {
                        return;
                    }
                    last_down.store(ms(), Ordering::Relaxed);
                }
                Err(_) => {
                    s.end(end_reason::CONNRESET);
                    return;
                }
            }
        }
    };
    // Client -> target.
    let upward = async {
        loop {
            let d = match tokio::time::timeout(STREAM_IDLE, data.recv()).await {
                Ok(Some(d)) => d,
                // The client ended the stream or the circuit died.
                Ok(None) => {
                    let _ = wr.shutdown().await;
                    return;
                }
                Err(_) => {
                    let quiet = ms().saturating_sub(last_down.load(Ordering::Relaxed));
                    if u128::from(quiet) < STREAM_IDLE.as_millis() {
                        continue;
                    }
                    s.end(end_reason::TIMEOUT);
                    return;
                }
            };
            // Coalesce queued cells into one write.
            let mut out = d.to_vec();
            let mut n_cells = 1u32;
            while out.len() < 64 * 1024 {
                match data.try_recv() {
                    Ok(more) => {
                        out.extend_from_slice(&more);
                        n_cells += 1;
                    }
                    Err(_) => break,
                }
            }
            s.ctx
                .stats
                .exit_bytes_up
                .fetch_add(out.len() as u64, Ordering::Relaxed);
            if wr.write_all(&out).await.is_err() {
                s.end(end_reason::CONNRESET);
                return;
            }
            s.drained(n_cells, out.len());
        }
    };
    tokio::select! {
        () = downward => {}
        () = upward => {}
    }
}

async fn resolve(s: ExitStream, name: String) {
    if !s.ctx.cfg.exit {
        s.send(
            RelayCmd::RESOLVED,
            &encode_resolved(&[ResolvedAnswer::NontransientError]),
        );
        s.closed();
        return;
    }
    let answers = if name.ends_with(".in-addr.arpa") || name.ends_with(".ip6.arpa") {
        // Reverse lookups: only the loopback name is known without a
        // resolver library; everything else is an error answer.
        if name == "1.0.0.127.in-addr.arpa" {
            vec![ResolvedAnswer::Hostname("localhost".into(), ANSWER_TTL)]
        } else {
            vec![ResolvedAnswer::NontransientError]
        }
    } else {
        match lookup(&s.ctx, &name, 0).await {
            Ok(addrs) => {
                let mut v: Vec<ResolvedAnswer> = addrs
                    .into_iter()
                    .map(|a| ResolvedAnswer::Ip(a, ANSWER_TTL))
                    .collect();
                // IPv4 answers first (tor-spec §6.4).
                v.sort_by_key(|a| !matches!(a, ResolvedAnswer::Ip(IpAddr::V4(_), _)));
                v.dedup();
                v
            }
            Err(r) if r == end_reason::TIMEOUT || r == end_reason::RESOURCELIMIT => {
                vec![ResolvedAnswer::TransientError]
            }
            Err(_) => vec![ResolvedAnswer::NontransientError],
        }
    };
    s.send(RelayCmd::RESOLVED, &encode_resolved(&answers));
    s.closed();
}

async fn dir(mut s: ExitStream) {
    let Some(server) = s.ctx.dir.clone() else {
        s.end(end_reason::NOTDIRECTORY);
        return;
    };
    if !s.send(RelayCmd::CONNECTED, &[]) {
        return;
    }
    let mut req = Vec::new();
    loop {
        match tokio::time::timeout(Duration::from_secs(30), s.data.recv()).await {
            Ok(Some(d)) => {
                req.extend_from_slice(&d);
                if req.len() > MAX_DIR_REQUEST {
                    s.end(end_reason::TORPROTOCOL);
                    return;
                }
                match dir_request_complete(&req) {
                    Ok(true) => break,
                    Ok(false) => {}
                    Err(e) => {
                        // The server answers it with a 400 and the reason.
                        tracing::debug!("BEGIN_DIR: bad request: {e}");
                        break;
                    }
                }
            }
            Ok(None) => return,
            Err(_) => {
                tracing::debug!(
                    "BEGIN_DIR: no complete request after 30 s ({} bytes: {:?})",
                    req.len(),
                    String::from_utf8_lossy(&req[..req.len().min(80)])
                );
                s.end(end_reason::TIMEOUT);
                return;
            }
        }
    }
    // Onion-service descriptors (HSDir role) are ours to answer; anything
    // else goes to the directory cache. tor refuses HSDir requests whose
    // previous hop is a client (not anonymous).
    let anonymous = s.anonymous;
    let now = crate::clock::now_unix();
    let resp = match super::hs::dir::answer(&s.ctx.hs, &req, anonymous, now) {
        Some(r) => r,
        None => server.handle_request(&req).await,
    };
    tracing::debug!(
        "BEGIN_DIR: {} byte request, {} byte answer ({})",
        req.len(),
        resp.len(),
        String::from_utf8_lossy(&resp[..resp.len().min(15)])
    );
    if s.send_data(&resp).await {
        s.end(end_reason::DONE);
    }
}

/// Whether `req` holds a whole HTTP request: the head and, for a POST
/// (descriptor uploads to authorities), `Content-Length` body bytes.
/// `Err`: the bytes can never become an acceptable request (malformed
/// head, bad or oversized `Content-Length`); the directory server answers
/// such a request with a 400.
pub fn dir_request_complete(req: &[u8]) -> Result<bool, onionmix_http::HttpError> {
    onionmix_http::parse_request(req, &onionmix_http::Limits::DEFAULT, MAX_DIR_REQUEST)
        .map(|r| r.is_some())
}

/// Something that answers directory HTTP requests (authorities).
pub trait DirServer: Send + Sync {
    /// Answer one raw HTTP request with a raw HTTP response.
    fn handle_request<'a>(
        &'a self,
        req: &'a [u8],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<u8>> + Send + 'a>>;
    /// Our own current descriptor, for `GET /tor/server/authority`
    /// (directory caches; an authority answers from its own state).
    fn set_own_descriptor(&self, _descriptor: &str) {}
}

#[cfg(test)]
mod tests;
