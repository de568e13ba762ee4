//! The TCP side of the packet loop: smoltcp's in-memory device, each
//! flow's socket and stream channels, moving bytes between them, and the
//! flow table's steps applied to sockets.

use super::{
    CHANNEL_CHUNKS, CHUNK, IDLE_TIMEOUT, MAX_QUEUED_PACKETS, SOCKET_BUFFER, SOCKET_TIMEOUT_SECS,
    WRITE_TIMEOUT,
};
use crate::tunnel::dev::MTU;
use bytes::Bytes;
use onionmix_cell::relay::end_reason;
use onionmix_tunnel::Tunnel;
use onionmix_tunnel::flows::{FlowAction, FlowEvent, Step};
use smoltcp::iface::{SocketHandle, SocketSet};
use smoltcp::phy::{Device, DeviceCapabilities, Medium, RxToken, TxToken};
use smoltcp::socket::tcp;
use smoltcp::wire::{IpAddress, IpListenEndpoint};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{Notify, mpsc};

/// smoltcp's device: two bounded in-memory packet queues.
pub(super) struct Queues {
    pub(super) rx: VecDeque<Vec<u8>>,
    pub(super) tx: VecDeque<Vec<u8>>,
}

impl Queues {
    pub(super) fn new() -> Self {
        Queues {
            rx: VecDeque::new(),
            tx: VecDeque::new(),
        }
    }

    /// Queue a packet for the stack (dropped when the queue is full; TCP
    /// retransmits).
    pub(super) fn push_rx(&mut self, p: Vec<u8>) {
        if self.rx.len() < MAX_QUEUED_PACKETS {
            self.rx.push_back(p);
        }
    }
}

pub(super) struct Rx(Vec<u8>);
pub(super) struct Tx<'a>(&'a mut VecDeque<Vec<u8>>);

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

/// A TCP flow's side of the driver: its socket and stream channels.
pub(super) struct FlowIo {
    pub(super) handle: Option<SocketHandle>,
    pub(super) to_exit: Option<mpsc::Sender<Bytes>>,
    pub(super) from_exit: Option<mpsc::Receiver<Option<Bytes>>>,
    pub(super) pending: Bytes,
    pub(super) exit_done: bool,
    pub(super) fin_sent: bool,
    pub(super) app_fin: bool,
    pub(super) task: Option<tokio::task::JoinHandle<()>>,
}

impl FlowIo {
    /// A flow whose stream is being opened by `task`.
    pub(super) fn connecting(task: tokio::task::JoinHandle<()>) -> Self {
        FlowIo {
            handle: None,
            to_exit: None,
            from_exit: None,
            pending: Bytes::new(),
            exit_done: false,
            fin_sent: false,
            app_fin: false,
            task: Some(task),
        }
    }

    /// The stream is open: channels to and from it, and the task that
    /// moves bytes between them and the stream.
    pub(super) fn connected(&mut self, stream: TcpStream, notify: Arc<Notify>) {
        let (to_exit_tx, to_exit_rx) = mpsc::channel(CHANNEL_CHUNKS);
        let (from_exit_tx, from_exit_rx) = mpsc::channel(CHANNEL_CHUNKS);
        self.to_exit = Some(to_exit_tx);
        self.from_exit = Some(from_exit_rx);
        self.task = Some(tokio::spawn(relay(
            stream,
            to_exit_rx,
            from_exit_tx,
            notify,
        )));
    }

    pub(super) fn stop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
        self.to_exit = None;
        self.from_exit = None;
    }
}

pub(super) fn ms(start: Instant, now: Instant) -> smoltcp::time::Instant {
    let d = now.saturating_duration_since(start);
    smoltcp::time::Instant::from_millis(i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

/// Move bytes between the flow's stream and its channels.
pub(super) async fn relay(
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
pub(super) fn service(
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
pub(super) fn apply_sync(
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

/// Do what `step` says; the packet to write to the TUN, if any. A held
/// SYN becomes a listening socket for exactly its destination, and the SYN
/// goes into the stack, which answers SYN/ACK.
pub(super) fn apply(
    id: u64,
    step: Step,
    flows: &mut HashMap<u64, FlowIo>,
    sockets: &mut SocketSet<'_>,
    zombies: &mut Vec<SocketHandle>,
    dev: &mut Queues,
) -> Option<Vec<u8>> {
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
            // What the exit sends goes out at once: the tunnel relays, the
            // application chose its own Nagle; coalescing here would only
            // add a round trip of delay to small writes.
            s.set_nagle_enabled(false);
            if s.listen(dst).is_ok() {
                f.handle = Some(sockets.add(s));
                dev.push_rx(syn.clone());
            }
        }
        return None;
    }
    apply_sync(id, step, flows, sockets, zombies)
}

/// The destination of a SYN (IPv4 or IPv6, fixed header only: the core's
/// policy already dropped what has options in anonymity mode).
pub(super) fn syn_dst(p: &[u8]) -> Option<IpListenEndpoint> {
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
