//! The tunnel's packet loop: TUN -> `onionmix_tunnel::Tunnel` -> (drop,
//! answer, smoltcp, or a UDP stream) and smoltcp -> TUN. Each TCP flow is
//! carried over one stream, each fallback DNS query by one resolve, each
//! UDP flow by one UDP stream, all opened by an [`Upstream`] (a client's
//! SOCKS port in `onionmix tunnel`: CONNECT, RESOLVE, UDP ASSOCIATE).
//!
//! smoltcp runs on in-memory queues ([`stack`]): packets the core passes
//! go in, what smoltcp writes goes to the TUN. A flow's SYN is held by the
//! core until the upstream reports success; then a listening socket for
//! exactly that destination is created and the SYN is injected, so the
//! application sees SYN/ACK only once the exit connected. A failed connect
//! becomes the core's refusal (RST or ICMP unreachable). IPv4 and IPv6 are
//! handled alike (smoltcp accepts any destination routed to the resolver's
//! own addresses).
//!
//! Bounds: smoltcp's per-socket buffers ([`SOCKET_BUFFER`]) are the TCP
//! windows; each direction between a socket and its stream is a bounded
//! channel of [`CHUNK`]-byte chunks ([`CHANNEL_CHUNKS`]); the queues into and
//! out of smoltcp are bounded ([`MAX_QUEUED_PACKETS`]); fallback resolves in
//! flight are bounded ([`MAX_RESOLVES`]); the core's tables bound flows.

mod app;
mod stack;

pub use app::AppLookup;

use super::dev::{MAX_PACKET, TunDevice};
use bytes::Bytes;
use onionmix_cell::relay::end_reason;
use onionmix_tunnel::dns::wire::Query;
use onionmix_tunnel::flows::{FlowEvent, Isolation, IsolationKey, Step, Target};
use onionmix_tunnel::{Counters, DropReason, Output, Status, Tunnel, TunnelConfig};
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::socket::tcp;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr};
use stack::{FlowIo, Queues, ms};
use std::collections::HashMap;
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio::sync::{Notify, mpsc, watch};

/// Each smoltcp socket's receive and send buffer (the TCP windows).
pub const SOCKET_BUFFER: usize = 256 * 1024;
/// Largest chunk moved between a socket and its stream at once.
pub const CHUNK: usize = 16 * 1024;
/// Chunks in flight per direction per flow.
pub const CHANNEL_CHUNKS: usize = 8;
/// Packets queued into or out of smoltcp.
pub const MAX_QUEUED_PACKETS: usize = 1024;
/// Longest a write to the stream may block.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(120);
/// smoltcp's per-socket timeout (no ACK from the application for this
/// long aborts the socket).
pub const SOCKET_TIMEOUT_SECS: u64 = 300;
/// Longest the stream may be silent before the flow is dropped.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(600);
/// Fallback DNS resolves in flight at once; more get SERVFAIL.
pub const MAX_RESOLVES: usize = 64;
/// Datagrams queued per direction per UDP flow (UDP: more are dropped).
pub const UDP_QUEUE: usize = 32;

/// Why an upstream request failed.
#[derive(Debug)]
pub enum ConnectError {
    /// The proxy answered with this SOCKS5 reply code.
    Reply(u8),
    /// No answer in time.
    Timeout,
    /// Anything else (proxy unreachable, protocol error).
    Other(String),
}

/// A boxed future, as [`Upstream`]'s methods return.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// A UDP stream's datagrams: `to_exit` to send (dropping it closes the
/// stream), `from_exit` what comes back (closed when the stream ends).
#[derive(Debug)]
pub struct UdpChannel {
    /// Datagrams towards the destination.
    pub to_exit: mpsc::Sender<Bytes>,
    /// Datagrams from the destination.
    pub from_exit: mpsc::Receiver<Bytes>,
}

/// What carries the tunnel's traffic: each request names its isolation
/// key as a string (the SOCKS5 password, `onionmix_tunnel::socks`).
pub trait Upstream: Send + Sync + 'static {
    /// Open a stream to `target` (a TCP flow).
    fn connect(
        &self,
        target: Target,
        isolation: String,
    ) -> BoxFuture<Result<TcpStream, ConnectError>>;
    /// Resolve `name` through the network (fallback DNS).
    fn resolve(
        &self,
        name: String,
        isolation: String,
    ) -> BoxFuture<Result<Vec<IpAddr>, ConnectError>>;
    /// Open a UDP stream to `target`. An upstream without UDP fails
    /// (the flow then gets the packet policy's fallback).
    fn udp(&self, target: Target, isolation: String)
    -> BoxFuture<Result<UdpChannel, ConnectError>>;
}

/// What the driver does besides carrying packets.
#[derive(Default)]
pub struct Options {
    /// Where a status snapshot goes about once a second (and at the end).
    pub status: Option<watch::Sender<Status>>,
    /// Who sent a packet, for per-app isolation (the uid owning the
    /// socket in the namespace); without it every flow's app is unknown.
    pub apps: Option<AppLookup>,
}

enum Ev {
    Connected(u64, TcpStream),
    Failed(u64, u8),
    Resolved {
        query: Query,
        app: SocketAddr,
        resolver: SocketAddr,
        result: Result<Vec<IpAddr>, ConnectError>,
    },
    UdpOpened(u64, UdpChannel),
    UdpFailed(u64),
    /// A datagram from the exit; `None`: the stream ended.
    UdpIn(u64, Option<Bytes>),
}

struct UdpIo {
    to_exit: Option<mpsc::Sender<Bytes>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl UdpIo {
    fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.to_exit = None;
    }
}

struct Driver<'a> {
    tun: &'a TunDevice,
    core: Tunnel,
    isolation: Isolation,
    start: Instant,
    dev: Queues,
    iface: Interface,
    sockets: SocketSet<'static>,
    flows: HashMap<u64, FlowIo>,
    zombies: Vec<SocketHandle>,
    udp: HashMap<u64, UdpIo>,
    ev_tx: mpsc::Sender<Ev>,
    notify: Arc<Notify>,
    upstream: Arc<dyn Upstream>,
    resolves: Arc<std::sync::atomic::AtomicUsize>,
    opts: Options,
}

/// The packet loop; returns the core's counters when `shutdown` fires or
/// the TUN fails.
pub async fn run(
    tun: TunDevice,
    cfg: TunnelConfig,
    upstream: Arc<dyn Upstream>,
    opts: Options,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<Counters> {
    let resolver_v4 = cfg.policy.resolver_v4;
    let resolver_v6 = cfg.policy.resolver_v6;
    let isolation = cfg.flows.isolation;
    let start = Instant::now();
    let mut dev = Queues::new();
    let mut iface = Interface::new(Config::new(HardwareAddress::Ip), &mut dev, ms(start, start));
    // Accept every destination: the synthetic addresses (and, in
    // compatibility mode or fallback DNS, any address) are ours to
    // terminate. smoltcp takes a packet for an address not its own when a
    // route for it leads to one of its own addresses.
    iface.set_any_ip(true);
    iface.update_ip_addrs(|a| {
        let _ = a.push(IpCidr::new(IpAddress::Ipv4(resolver_v4), 32));
        if let Some(v6) = resolver_v6 {
            let _ = a.push(IpCidr::new(IpAddress::Ipv6(v6), 128));
        }
    });
    let _ = iface.routes_mut().add_default_ipv4_route(resolver_v4);
    if let Some(v6) = resolver_v6 {
        let _ = iface.routes_mut().add_default_ipv6_route(v6);
    }
    let (ev_tx, mut ev_rx) = mpsc::channel::<Ev>(256);
    let mut d = Driver {
        tun: &tun,
        core: Tunnel::new(cfg),
        isolation,
        start,
        dev,
        iface,
        sockets: SocketSet::new(Vec::new()),
        flows: HashMap::new(),
        zombies: Vec::new(),
        udp: HashMap::new(),
        ev_tx,
        notify: Arc::new(Notify::new()),
        upstream,
        resolves: Arc::new(std::sync::atomic::AtomicUsize::new(0)),
        opts,
    };
    let mut buf = vec![0u8; MAX_PACKET];
    let mut last_tick = Instant::now();
    tokio::pin!(shutdown);
    let result = loop {
        let now = Instant::now();
        if let Err(e) = d.poll_stack(now).await {
            break Err(e);
        }
        if now.duration_since(last_tick) >= Duration::from_secs(1) {
            last_tick = now;
            if let Err(e) = d.tick(now).await {
                break Err(e);
            }
        }
        let delay = d
            .iface
            .poll_delay(ms(d.start, Instant::now()), &d.sockets)
            .map_or(Duration::from_millis(50), |x| {
                Duration::from_micros(x.total_micros())
            })
            .min(Duration::from_millis(50));
        let notify = d.notify.clone();
        let step = tokio::select! {
            r = tun.recv(&mut buf) => match r {
                Ok(n) => match buf.get_mut(..n) {
                    Some(p) => d.on_packet(p).await,
                    None => Ok(()),
                },
                Err(e) => Err(e),
            },
            Some(ev) = ev_rx.recv() => d.on_event(ev).await,
            _ = notify.notified() => Ok(()),
            _ = tokio::time::sleep(delay) => Ok(()),
            _ = &mut shutdown => break Ok(()),
        };
        if let Err(e) = step {
            break Err(e);
        }
    };
    for (_, mut f) in d.flows.drain() {
        f.stop();
    }
    for (_, mut u) in d.udp.drain() {
        u.stop();
    }
    let status = d.core.status(Instant::now());
    if let Some(tx) = &d.opts.status {
        let _ = tx.send(status.clone());
    }
    result.map(|()| status.counters)
}

impl Driver<'_> {
    async fn write(&self, p: &[u8]) -> std::io::Result<()> {
        self.tun.send(p).await.map(|_| ())
    }

    /// Let smoltcp and the flows' channels move, and write what smoltcp
    /// sent.
    async fn poll_stack(&mut self, now: Instant) -> std::io::Result<()> {
        let t = ms(self.start, now);
        self.iface.poll(t, &mut self.dev, &mut self.sockets);
        stack::service(
            &mut self.core,
            &mut self.flows,
            &mut self.sockets,
            &mut self.zombies,
            now,
        );
        self.iface.poll(t, &mut self.dev, &mut self.sockets);
        while let Some(p) = self.dev.tx.pop_front() {
            self.write(&p).await?;
        }
        let sockets = &mut self.sockets;
        self.zombies.retain(|h| {
            let s = sockets.get::<tcp::Socket>(*h);
            if matches!(s.state(), tcp::State::Closed | tcp::State::TimeWait) {
                sockets.remove(*h);
                false
            } else {
                true
            }
        });
        Ok(())
    }

    /// Once a second: time-outs, idle UDP flows, the status snapshot.
    async fn tick(&mut self, now: Instant) -> std::io::Result<()> {
        for (id, step) in self.core.expire(now) {
            self.apply(id, step).await?;
        }
        for id in self.core.expire_udp(now) {
            if let Some(mut u) = self.udp.remove(&id) {
                u.stop();
            }
        }
        if let Some(tx) = &self.opts.status {
            let _ = tx.send(self.core.status(now));
        }
        Ok(())
    }

    async fn apply(&mut self, id: u64, step: Step) -> std::io::Result<()> {
        let out = stack::apply(
            id,
            step,
            &mut self.flows,
            &mut self.sockets,
            &mut self.zombies,
            &mut self.dev,
        );
        match out {
            Some(p) => self.write(&p).await,
            None => Ok(()),
        }
    }

    /// The application that sent `p`, when per-app isolation needs it.
    async fn app_of(&self, p: &[u8]) -> Option<u64> {
        let lookup = self.opts.apps.as_ref()?;
        let (proto, src) = self.core.wants_app(p)?;
        lookup.uid(proto, src).await.map(u64::from)
    }

    async fn on_packet(&mut self, p: &mut [u8]) -> std::io::Result<()> {
        let app = self.app_of(p).await;
        let now = Instant::now();
        match self.core.on_packet(now, app, p) {
            Output::ToStack => self.dev.push_rx(p.to_vec()),
            Output::Reply(r) => self.write(&r).await?,
            Output::OpenStream {
                id,
                target,
                isolation,
            } => self.open_stream(now, id, target, &isolation).await?,
            Output::Flow { id, step } => self.apply(id, step).await?,
            Output::Resolve {
                query,
                name,
                app: from,
                resolver,
            } => self.resolve(query, name, app, from, resolver).await?,
            Output::UdpOpen {
                id,
                target,
                isolation,
            } => self.open_udp(now, id, target, &isolation).await?,
            Output::UdpSend { id, payload } => {
                let sent = self
                    .udp
                    .get(&id)
                    .and_then(|u| u.to_exit.as_ref())
                    .is_some_and(|tx| tx.try_send(Bytes::from(payload)).is_ok());
                if !sent {
                    self.core.count_drop(DropReason::UdpQueue);
                }
            }
            Output::None => {}
        }
        Ok(())
    }

    async fn open_stream(
        &mut self,
        now: Instant,
        id: u64,
        target: Target,
        isolation: &IsolationKey,
    ) -> std::io::Result<()> {
        let _ = self.core.on_flow(now, id, FlowEvent::BeginSent);
        let Some(pw) = onionmix_tunnel::socks::socks_password(isolation) else {
            // A key that does not fit the proxy's password field: refuse
            // rather than share a circuit.
            if let Ok(step) = self.core.on_flow(now, id, FlowEvent::End(end_reason::MISC)) {
                self.apply(id, step).await?;
            }
            return Ok(());
        };
        let fut = self.upstream.connect(target, pw);
        let tx = self.ev_tx.clone();
        let task = tokio::spawn(async move {
            let ev = match fut.await {
                Ok(s) => Ev::Connected(id, s),
                Err(e) => Ev::Failed(id, end_reason_of(&e)),
            };
            let _ = tx.send(ev).await;
        });
        self.flows.insert(id, FlowIo::connecting(task));
        Ok(())
    }

    async fn resolve(
        &mut self,
        query: Query,
        name: String,
        app: Option<u64>,
        from: SocketAddr,
        resolver: SocketAddr,
    ) -> std::io::Result<()> {
        use std::sync::atomic::Ordering;
        // A lookup is no flow: it goes on its name's circuit, or its
        // application's with per-app isolation.
        let key = match (self.isolation, app) {
            (Isolation::PerApp, Some(a)) => IsolationKey::App(a),
            _ => IsolationKey::Destination(name.clone()),
        };
        let pw = onionmix_tunnel::socks::socks_password(&key);
        let in_flight = self.resolves.load(Ordering::Relaxed);
        let Some(pw) = pw.filter(|_| in_flight < MAX_RESOLVES) else {
            if let Some(r) = self.core.dns_failed(&query, from, resolver) {
                self.write(&r).await?;
            }
            return Ok(());
        };
        self.resolves.fetch_add(1, Ordering::Relaxed);
        let fut = self.upstream.resolve(name, pw);
        let tx = self.ev_tx.clone();
        let count = self.resolves.clone();
        tokio::spawn(async move {
            let result = fut.await;
            count.fetch_sub(1, Ordering::Relaxed);
            let _ = tx
                .send(Ev::Resolved {
                    query,
                    app: from,
                    resolver,
                    result,
                })
                .await;
        });
        Ok(())
    }

    async fn open_udp(
        &mut self,
        now: Instant,
        id: u64,
        target: Target,
        isolation: &IsolationKey,
    ) -> std::io::Result<()> {
        let Some(pw) = onionmix_tunnel::socks::socks_password(isolation) else {
            if let Some(r) = self.core.udp_failed(now, id) {
                self.write(&r).await?;
            }
            return Ok(());
        };
        let fut = self.upstream.udp(target, pw);
        let tx = self.ev_tx.clone();
        let task = tokio::spawn(async move {
            let ev = match fut.await {
                Ok(ch) => Ev::UdpOpened(id, ch),
                Err(e) => {
                    tracing::debug!(error = ?e, "tunnel: UDP stream not opened");
                    Ev::UdpFailed(id)
                }
            };
            let _ = tx.send(ev).await;
        });
        self.udp.insert(
            id,
            UdpIo {
                to_exit: None,
                task: Some(task),
            },
        );
        Ok(())
    }

    async fn on_event(&mut self, ev: Ev) -> std::io::Result<()> {
        let now = Instant::now();
        match ev {
            Ev::Connected(id, stream) => {
                let Ok(step) = self.core.on_flow(now, id, FlowEvent::Connected) else {
                    return Ok(());
                };
                if let Some(f) = self.flows.get_mut(&id) {
                    f.connected(stream, self.notify.clone());
                }
                self.apply(id, step).await?;
            }
            Ev::Failed(id, reason) => {
                if let Ok(step) = self.core.on_flow(now, id, FlowEvent::End(reason)) {
                    self.apply(id, step).await?;
                }
                if let Some(mut f) = self.flows.remove(&id) {
                    f.stop();
                }
            }
            Ev::Resolved {
                query,
                app,
                resolver,
                result,
            } => {
                let r = match result {
                    Ok(addrs) => self.core.dns_resolved(&query, Some(&addrs), app, resolver),
                    // The exit could not resolve it: NXDOMAIN.
                    Err(ConnectError::Reply(c))
                        if c == onionmix_frontend::socks::reply_code::HOST_UNREACHABLE =>
                    {
                        self.core.dns_resolved(&query, None, app, resolver)
                    }
                    Err(_) => self.core.dns_failed(&query, app, resolver),
                };
                if let Some(r) = r {
                    self.write(&r).await?;
                }
            }
            Ev::UdpOpened(id, ch) => {
                let Some(u) = self.udp.get_mut(&id) else {
                    return Ok(());
                };
                let UdpChannel {
                    to_exit,
                    mut from_exit,
                } = ch;
                for payload in self.core.udp_opened(now, id) {
                    if to_exit.try_send(Bytes::from(payload)).is_err() {
                        self.core.count_drop(DropReason::UdpQueue);
                    }
                }
                u.to_exit = Some(to_exit);
                let tx = self.ev_tx.clone();
                u.task = Some(tokio::spawn(async move {
                    while let Some(d) = from_exit.recv().await {
                        if tx.send(Ev::UdpIn(id, Some(d))).await.is_err() {
                            return;
                        }
                    }
                    let _ = tx.send(Ev::UdpIn(id, None)).await;
                }));
            }
            Ev::UdpFailed(id) => {
                if let Some(mut u) = self.udp.remove(&id) {
                    u.stop();
                }
                if let Some(r) = self.core.udp_failed(now, id) {
                    self.write(&r).await?;
                }
            }
            Ev::UdpIn(id, Some(d)) => {
                if let Some(p) = self.core.udp_from_exit(now, id, &d) {
                    self.write(&p).await?;
                }
            }
            Ev::UdpIn(id, None) => {
                if let Some(mut u) = self.udp.remove(&id) {
                    u.stop();
                }
                if let Some(r) = self.core.udp_closed(now, id) {
                    self.write(&r).await?;
                }
            }
        }
        Ok(())
    }
}

fn end_reason_of(e: &ConnectError) -> u8 {
    match e {
        ConnectError::Reply(c) => {
            onionmix_tunnel::socks::end_reason_for_reply(*c).unwrap_or(end_reason::MISC)
        }
        ConnectError::Timeout => end_reason::TIMEOUT,
        ConnectError::Other(e) => {
            tracing::debug!(error = %e, "tunnel flow connect failed");
            end_reason::MISC
        }
    }
}
