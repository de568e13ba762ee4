//! The tunnel's packet loop: TUN -> `onionmix_tunnel::Tunnel` -> (drop,
//! answer, or smoltcp) and smoltcp -> TUN; each TCP flow is carried over one
//! stream that a [`Connector`] opens (a SOCKS5 CONNECT to a client's
//! SocksPort, in `onionmix tunnel`).
//!
//! smoltcp runs on in-memory queues (`Queues`): packets the core passes go
//! in, what smoltcp writes goes to the TUN. A flow's SYN is held by the core
//! until the connector reports success; then a listening socket for exactly
//! that destination is created and the SYN is injected, so the application
//! sees SYN/ACK only once the exit connected. A failed connect becomes the
//! core's refusal (RST or ICMP unreachable).
//!
//! Bounds: smoltcp's per-socket buffers ([`SOCKET_BUFFER`]) are the TCP
//! windows; each direction between a socket and its stream is a bounded
//! channel of [`CHUNK`]-byte chunks ([`CHANNEL_CHUNKS`]); the queues into and
//! out of smoltcp are bounded ([`MAX_QUEUED_PACKETS`]); the flow table's
//! own limits bound the number of flows.

use super::dev::{MAX_PACKET, MTU, TunDevice};
use bytes::Bytes;
use onionmix_cell::relay::end_reason;
use onionmix_tunnel::flows::{FlowAction, FlowEvent, Step, Target};
use onionmix_tunnel::{Counters, Output, Tunnel, TunnelConfig};
use smoltcp::iface::{Config, Interface, SocketHandle, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;
use smoltcp::wire::{HardwareAddress, IpAddress, IpCidr, IpListenEndpoint};
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, mpsc};

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

/// Why a connect failed.
#[derive(Debug)]
pub enum ConnectError {
    /// The proxy answered with this SOCKS5 reply code.
    Reply(u8),
    /// No answer in time.
    Timeout,
    /// Anything else (proxy unreachable, protocol error).
    Other(String),
}

/// Opens the stream for a flow: the target and the SOCKS5 password that
/// carries its isolation key.
pub type Connector = Arc<
    dyn Fn(Target, String) -> Pin<Box<dyn Future<Output = Result<TcpStream, ConnectError>> + Send>>
        + Send
        + Sync,
>;

struct Queues {
    rx: VecDeque<Vec<u8>>,
    tx: VecDeque<Vec<u8>>,
}

struct Rx(Vec<u8>);
struct Tx<'a>(&'a mut VecDeque<Vec<u8>>);

impl RxToken for Rx {
    fn consume<R, F: FnOnce(&[u8]) -> R>(self, f: F) -> R {
        f(&self.0)
    }
}

impl TxToken for Tx<'_> {
    fn consume<R, F: FnOnce(&mut [u8]) -> R>(self, len: usize, f: F) -> R {
        let mut v = vec![0u8; len];
        let r = f(&mut v);
        self.0.push_back(v);
        r
    }
}

impl Device for Queues {
    type RxToken<'a> = Rx;
    type TxToken<'a> = Tx<'a>;

    fn receive(
        &mut self,
        _t: smoltcp::time::Instant,
    ) -> Option<(Self::RxToken<'_>, Self::TxToken<'_>)> {
        let p = self.rx.pop_front()?;
        Some((Rx(p), Tx(&mut self.tx)))
    }

    fn transmit(&mut self, _t: smoltcp::time::Instant) -> Option<Self::TxToken<'_>> {
        (self.tx.len() < MAX_QUEUED_PACKETS).then_some(Tx(&mut self.tx))
    }

    fn capabilities(&self) -> DeviceCapabilities {
        let mut c = DeviceCapabilities::default();
        c.medium = Medium::Ip;
        c.max_transmission_unit = usize::from(MTU);
        c
    }
}

enum Ev {
    Connected(u64, TcpStream),
    Failed(u64, u8),
}

struct FlowIo {
    handle: Option<SocketHandle>,
    to_exit: Option<mpsc::Sender<Bytes>>,
    from_exit: Option<mpsc::Receiver<Option<Bytes>>>,
    pending: Bytes,
    exit_done: bool,
    fin_sent: bool,
    app_fin: bool,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl FlowIo {
    fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.to_exit = None;
        self.from_exit = None;
    }
}

fn ms(start: Instant, now: Instant) -> smoltcp::time::Instant {
    let d = now.saturating_duration_since(start);
    smoltcp::time::Instant::from_millis(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// The packet loop; returns the core's counters when `shutdown` fires or
/// the TUN fails.
pub async fn run(
    tun: TunDevice,
    cfg: TunnelConfig,
    connector: Connector,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<Counters> {
    let resolver = cfg.policy.resolver_v4;
    let mut core = Tunnel::new(cfg);
    let start = Instant::now();
    let mut dev = Queues {
        rx: VecDeque::new(),
        tx: VecDeque::new(),
    };
    let mut iface = Interface::new(Config::new(HardwareAddress::Ip), &mut dev, ms(start, start));
    // Accept every destination: the synthetic addresses (and, in
    // compatibility mode, any address) are ours to terminate.
    iface.set_any_ip(true);
    iface.update_ip_addrs(|a| {
        let _ = a.push(IpCidr::new(IpAddress::Ipv4(resolver), 32));
    });
    let _ = iface.routes_mut().add_default_ipv4_route(resolver);
    let mut sockets = SocketSet::new(Vec::new());
    let mut flows: HashMap<u64, FlowIo> = HashMap::new();
    let mut zombies: Vec<SocketHandle> = Vec::new();
    let (ev_tx, mut ev_rx) = mpsc::channel::<Ev>(256);
    let notify = Arc::new(Notify::new());
    let mut buf = vec![0u8; MAX_PACKET];
    let mut last_expire = Instant::now();
    tokio::pin!(shutdown);

    loop {
        let now = Instant::now();
        iface.poll(ms(start, now), &mut dev, &mut sockets);
        service(&mut core, &mut flows, &mut sockets, &mut zombies, now);
        iface.poll(ms(start, now), &mut dev, &mut sockets);
        while let Some(p) = dev.tx.pop_front() {
            tun.send(&p).await?;
        }
        zombies.retain(|h| {
            let s = sockets.get::<tcp::Socket>(*h);
            if matches!(s.state(), tcp::State::Closed | tcp::State::TimeWait) {
                sockets.remove(*h);
                false
            } else {
                true
            }
        });
        if now.duration_since(last_expire) >= Duration::from_secs(1) {
            last_expire = now;
            for (id, step) in core.expire(now) {
                apply(
                    id,
                    step,
                    &mut core,
                    &mut flows,
                    &mut sockets,
                    &mut zombies,
                    &mut dev,
                    &tun,
                )
                .await?;
            }
        }
        let delay = iface
            .poll_delay(ms(start, Instant::now()), &sockets)
            .map_or(Duration::from_millis(50), |d| {
                Duration::from_micros(d.total_micros())
            })
            .min(Duration::from_millis(50));
        tokio::select! {
            r = tun.recv(&mut buf) => {
                let n = r?;
                let Some(p) = buf.get_mut(..n) else { continue };
                let out = core.on_packet(Instant::now(), None, p);
                match out {
                    Output::ToStack => {
                        if dev.rx.len() < MAX_QUEUED_PACKETS {
                            dev.rx.push_back(p.to_vec());
                        }
                    }
                    Output::Reply(r) => { tun.send(&r).await?; }
                    Output::OpenStream { id, target, isolation } => {
                        let now = Instant::now();
                        let _ = core.on_flow(now, id, FlowEvent::BeginSent);
                        let Some(pw) = onionmix_tunnel::socks::socks_password(&isolation) else {
                            if let Ok(step) = core.on_flow(now, id, FlowEvent::End(end_reason::MISC)) {
                                apply(id, step, &mut core, &mut flows, &mut sockets, &mut zombies, &mut dev, &tun).await?;
                            }
                            continue;
                        };
                        let fut = connector(target, pw);
                        let tx = ev_tx.clone();
                        let task = tokio::spawn(async move {
                            let ev = match fut.await {
                                Ok(s) => Ev::Connected(id, s),
                                Err(ConnectError::Reply(c)) => Ev::Failed(id, end_reason_for(c)),
                                Err(ConnectError::Timeout) => Ev::Failed(id, end_reason::TIMEOUT),
                                Err(ConnectError::Other(e)) => {
                                    tracing::debug!(error = %e, "tunnel flow connect failed");
                                    Ev::Failed(id, end_reason::MISC)
                                }
                            };
                            let _ = tx.send(ev).await;
                        });
                        flows.insert(id, FlowIo {
                            handle: None, to_exit: None, from_exit: None, pending: Bytes::new(),
                            exit_done: false, fin_sent: false, app_fin: false, task: Some(task),
                        });
                    }
                    Output::Flow { id, step } => {
                        apply(id, step, &mut core, &mut flows, &mut sockets, &mut zombies, &mut dev, &tun).await?;
                    }
                    Output::Resolve { .. } => {
                        // Fallback DNS is not driven yet: optimistic only.
                        tracing::debug!("tunnel: fallback DNS query dropped (not supported by this driver)");
                    }
                    Output::None => {}
                }
            }
            Some(ev) = ev_rx.recv() => {
                let now = Instant::now();
                match ev {
                    Ev::Connected(id, stream) => {
                        let Ok(step) = core.on_flow(now, id, FlowEvent::Connected) else { continue };
                        if let Some(f) = flows.get_mut(&id) {
                            let (to_exit_tx, to_exit_rx) = mpsc::channel(CHANNEL_CHUNKS);
                            let (from_exit_tx, from_exit_rx) = mpsc::channel(CHANNEL_CHUNKS);
                            f.to_exit = Some(to_exit_tx);
                            f.from_exit = Some(from_exit_rx);
                            f.task = Some(tokio::spawn(relay(stream, to_exit_rx, from_exit_tx, notify.clone())));
                        }
                        apply(id, step, &mut core, &mut flows, &mut sockets, &mut zombies, &mut dev, &tun).await?;
                    }
                    Ev::Failed(id, reason) => {
                        if let Ok(step) = core.on_flow(now, id, FlowEvent::End(reason)) {
                            apply(id, step, &mut core, &mut flows, &mut sockets, &mut zombies, &mut dev, &tun).await?;
                        }
                        if let Some(mut f) = flows.remove(&id) { f.stop(); }
                    }
                }
            }
            _ = notify.notified() => {}
            _ = tokio::time::sleep(delay) => {}
            _ = &mut shutdown => break,
        }
    }
    for (_, mut f) in flows.drain() {
        f.stop();
    }
    Ok(core.counters().clone())
}

fn end_reason_for(code: u8) -> u8 {
    onionmix_tunnel::socks::end_reason_for_reply(code).unwrap_or(end_reason::MISC)
}

/// Move bytes between the flow's stream and its channels.
async fn relay(
    stream: TcpStream,
    mut to_exit: mpsc::Receiver<Bytes>,
    from_exit: mpsc::Sender<Option<Bytes>>,
    notify: Arc<Notify>,
) {
    let (mut r, mut w) = stream.into_split();
    let n2 = notify.clone();
    let reader = async move {
        let mut b = vec![0u8; CHUNK];
        loop {
            let n = match tokio::time::timeout(IDLE_TIMEOUT, r.read(&mut b)).await {
                Ok(Ok(n)) if n > 0 => n,
                _ => 0,
            };
            let chunk = b
                .get(..n)
                .filter(|c| !c.is_empty())
                .map(Bytes::copy_from_slice);
            let done = chunk.is_none();
            if from_exit.send(chunk).await.is_err() {
                return;
            }
            n2.notify_one();
            if done {
                return;
            }
        }
    };
    let writer = async move {
        while let Some(b) = to_exit.recv().await {
            match tokio::time::timeout(WRITE_TIMEOUT, w.write_all(&b)).await {
                Ok(Ok(())) => {}
                _ => return,
            }
        }
    };
    tokio::join!(reader, writer);
    notify.notify_one();
}

/// Move data between each connected flow's socket and its channels, and
/// notice the application's FIN and resets.
fn service(
    core: &mut Tunnel,
    flows: &mut HashMap<u64, FlowIo>,
    sockets: &mut SocketSet<'_>,
    zombies: &mut Vec<SocketHandle>,
    now: Instant,
) {
    let mut events: Vec<(u64, FlowEvent)> = Vec::new();
    for (id, f) in flows.iter_mut() {
        let Some(h) = f.handle else { continue };
        let s = sockets.get_mut::<tcp::Socket>(h);
        // Application -> exit, as far as the channel has room.
        if let Some(tx) = &f.to_exit {
            while s.can_recv() {
                let Ok(permit) = tx.try_reserve() else { break };
                match s.recv(|d| {
                    let n = d.len().min(CHUNK);
                    (n, Bytes::copy_from_slice(d.get(..n).unwrap_or_default()))
                }) {
                    Ok(b) if !b.is_empty() => {
                        let (table, c) = core.flows_mut();
                        let _ = table.queued_to_exit(*id, b.len());
                        table.sent_to_exit(*id, b.len(), c);
                        permit.send(b);
                    }
                    _ => break,
                }
            }
        }
        // Exit -> application, as far as the socket has room.
        loop {
            if f.pending.is_empty() && !f.exit_done {
                match f.from_exit.as_mut().map(|r| r.try_recv()) {
                    Some(Ok(Some(b))) => f.pending = b,
                    Some(Ok(None)) | Some(Err(mpsc::error::TryRecvError::Disconnected)) => {
                        f.exit_done = true;
                        events.push((*id, FlowEvent::End(end_reason::DONE)));
                    }
                    _ => {}
                }
            }
            if f.pending.is_empty() {
                break;
            }
            match s.send_slice(&f.pending) {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let _ = f.pending.split_to(n.min(f.pending.len()));
                    let (table, c) = core.flows_mut();
                    let _ = table.queued_to_app(*id, n);
                    table.sent_to_app(*id, n, c);
                }
            }
        }
        if !f.app_fin
            && !s.may_recv()
            && s.state() != tcp::State::Listen
            && s.state() != tcp::State::SynReceived
        {
            f.app_fin = true;
            let ev = if matches!(s.state(), tcp::State::Closed) {
                FlowEvent::AppRst
            } else {
                FlowEvent::AppFin
            };
            events.push((*id, ev));
        }
    }
    for (id, ev) in events {
        if let Ok(step) = core.on_flow(now, id, ev) {
            // The steps of FIN, END DONE and resets write no packet.
            let _ = apply_sync(id, step, flows, sockets, zombies);
        }
    }
}

/// The part of a step that needs no packet written.
fn apply_sync(
    id: u64,
    step: Step,
    flows: &mut HashMap<u64, FlowIo>,
    sockets: &mut SocketSet<'_>,
    zombies: &mut Vec<SocketHandle>,
) -> Option<Vec<u8>> {
    let mut out = None;
    if let Some(f) = flows.get_mut(&id) {
        match step.action {
            FlowAction::FinToApp => {
                f.exit_done = true;
            }
            FlowAction::ResetApp | FlowAction::ResetAndEnd(_) => {
                if let Some(h) = f.handle {
                    sockets.get_mut::<tcp::Socket>(h).abort();
                }
                f.stop();
            }
            FlowAction::SendEnd(_) => f.stop(),
            FlowAction::Refuse(p) => {
                out = Some(p);
                f.stop();
            }
            FlowAction::RefuseAndEnd(p, _) => {
                out = Some(p);
                f.stop();
            }
            FlowAction::AcceptSyn(_) | FlowAction::None => {}
        }
        if f.exit_done
            && f.pending.is_empty()
            && !f.fin_sent
            && let Some(h) = f.handle
        {
            sockets.get_mut::<tcp::Socket>(h).close();
            f.fin_sent = true;
        }
    }
    if step.closed.is_some()
        && let Some(mut f) = flows.remove(&id)
    {
        f.stop();
        if let Some(h) = f.handle {
            if !f.fin_sent {
                sockets.get_mut::<tcp::Socket>(h).close();
            }
            zombies.push(h);
        }
    }
    out
}

#[allow(clippy::too_many_arguments)]
async fn apply(
    id: u64,
    step: Step,
    _core: &mut Tunnel,
    flows: &mut HashMap<u64, FlowIo>,
    sockets: &mut SocketSet<'_>,
    zombies: &mut Vec<SocketHandle>,
    dev: &mut Queues,
    tun: &TunDevice,
) -> std::io::Result<()> {
    if let FlowAction::AcceptSyn(syn) = &step.action {
        if let (Some(f), Some(dst)) = (flows.get_mut(&id), syn_dst(syn)) {
            let mut s = tcp::Socket::new(
                tcp::SocketBuffer::new(vec![0u8; SOCKET_BUFFER]),
                tcp::SocketBuffer::new(vec![0u8; SOCKET_BUFFER]),
            );
            // A peer that vanishes mid-close does not keep the socket.
            s.set_timeout(Some(smoltcp::time::Duration::from_secs(
                SOCKET_TIMEOUT_SECS,
            )));
            if s.listen(dst).is_ok() {
                f.handle = Some(sockets.add(s));
                if dev.rx.len() < MAX_QUEUED_PACKETS {
                    dev.rx.push_back(syn.clone());
                }
            }
        }
        return Ok(());
    }
    if let Some(p) = apply_sync(id, step, flows, sockets, zombies) {
        tun.send(&p).await?;
    }
    Ok(())
}

/// The destination of a SYN (IPv4 or IPv6, fixed header only: the core's
/// policy already dropped what has options in anonymity mode).
fn syn_dst(p: &[u8]) -> Option<IpListenEndpoint> {
    let v = p.first()? >> 4;
    let (addr, l4) = match v {
        4 => {
            let ihl = usize::from(p.first()? & 0x0f).checked_mul(4)?;
            let a: [u8; 4] = p.get(16..20)?.try_into().ok()?;
            (IpAddress::Ipv4(a.into()), ihl)
        }
        6 => {
            let a: [u8; 16] = p.get(24..40)?.try_into().ok()?;
            (IpAddress::Ipv6(a.into()), 40)
        }
        _ => return None,
    };
    let port = u16::from_be_bytes(
        p.get(l4.checked_add(2)?..l4.checked_add(4)?)?
            .try_into()
            .ok()?,
    );
    Some(IpListenEndpoint {
        addr: Some(addr),
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syn_destination() {
        let mut v4 = vec![0u8; 40];
        v4[0] = 0x45;
        v4[16..20].copy_from_slice(&[198, 18, 0, 7]);
        v4[22..24].copy_from_slice(&8080u16.to_be_bytes());
        let e = syn_dst(&v4).expect("v4");
        assert_eq!(e.port, 8080);
        assert_eq!(e.addr, Some(IpAddress::Ipv4([198, 18, 0, 7].into())));
        let mut v6 = vec![0u8; 60];
        v6[0] = 0x60;
        v6[39] = 1;
        v6[42..44].copy_from_slice(&443u16.to_be_bytes());
        let e = syn_dst(&v6).expect("v6");
        assert_eq!(e.port, 443);
        // Truncated or not IP: no destination, no panic.
        for n in 0..24 {
            assert!(syn_dst(v4.get(..n).unwrap_or_default()).is_none(), "{n}");
        }
        assert!(syn_dst(&[0x15; 40]).is_none());
        let mut bad_ihl = v4.clone();
        bad_ihl[0] = 0x4f;
        assert!(syn_dst(&bad_ihl).is_none());
    }
}
