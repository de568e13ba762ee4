//! Exit-stream messages from the client (BEGIN, BEGIN_DIR, RESOLVE, DATA,
//! END, XON, XOFF, CONNECT_UDP, DATAGRAM) acted on for whatever holds the streams: one circuit
//! (its origin entry) or a conflux set (all its legs).

use super::*;
use crate::relay::RelayCtx;
use crate::relay::exit::StreamPath;
use onionmix_proto::dos_stream::StreamVerdict;
use onionmix_proto::relay_circ::ExitStreams;

/// What holds a group of exit streams and carries their messages back.
pub(crate) trait StreamHost {
    /// The streams' queues towards their targets, and their gates.
    fn txs(&mut self) -> &mut HashMap<u16, StreamTx>;
    /// Their flow-control state.
    fn flow(&mut self) -> &mut ExitStreams;
    /// Send a stream-level message (END, XON, XOFF, stream SENDME)
    /// towards the client.
    fn send(&mut self, cmd: RelayCmd, sid: u16, data: &[u8]);
    /// Where a new exit stream task sends.
    fn path(&self) -> StreamPath;
    /// Whether the streams run under congestion control.
    fn is_cc(&self) -> bool;
    /// DATA messages that may reach one stream at once beyond what flow
    /// control bounds (a conflux set's reorder queue releasing).
    fn reorder_burst(&self) -> usize {
        0
    }
}

/// Send stream flow-control messages (stream SENDMEs, XON, XOFF),
/// counting XON/XOFF.
pub(crate) fn send_flow(
    ctx: &RelayCtx,
    host: &mut dyn StreamHost,
    sid: u16,
    msgs: &[StreamFlowMsg],
) {
    for m in msgs {
        let stat = match m {
            StreamFlowMsg::Xoff => Some(&ctx.stats.xoff_sent),
            StreamFlowMsg::Xon(_) => Some(&ctx.stats.xon_sent),
            StreamFlowMsg::Sendme => None,
        };
        if let Some(c) = stat {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let (cmd, body) = m.encode();
        host.send(cmd, sid, &body);
    }
}

/// An exit stream wrote `cells` DATA cells (`bytes` bytes) to its target.
pub(crate) fn stream_drained(
    ctx: &RelayCtx,
    host: &mut dyn StreamHost,
    sid: u16,
    cells: u32,
    bytes: usize,
) {
    let Some(s) = host.txs().get_mut(&sid) else {
        return;
    };
    s.buffered = s.buffered.saturating_sub(bytes);
    let buffered = s.buffered;
    let mut msgs = Vec::new();
    host.flow()
        .stream_drained(sid, cells, bytes, buffered, Instant::now(), &mut msgs);
    send_flow(ctx, host, sid, &msgs);
}

/// An exit stream ended from our side (its END was sent).
pub(crate) fn stream_closed(host: &mut dyn StreamHost, sid: u16) {
    host.flow().stream_closed(sid);
    if let Some(s) = host.txs().remove(&sid) {
        s.gate.close();
    }
}

/// Start an exit stream task for `req` on stream `sid`.
pub(crate) fn open_exit_stream(
    ctx: &Arc<RelayCtx>,
    host: &mut dyn StreamHost,
    sid: u16,
    req: exit::Request,
    anonymous: bool,
) {
    let (tx, rx) = mpsc::channel(exit::STREAM_QUEUE.saturating_add(host.reorder_burst()));
    let gate = Arc::new(StreamGate::for_circuit(host.is_cc()));
    let tally = Arc::new(exit::DrainTally::default());
    host.txs().insert(
        sid,
        StreamTx {
            data: tx,
            gate: gate.clone(),
            tally: tally.clone(),
            buffered: 0,
        },
    );
    let s = exit::ExitStream {
        ctx: ctx.clone(),
        path: host.path(),
        stream: sid,
        gate,
        tally,
        data: rx,
        anonymous,
    };
    tokio::spawn(exit::run(s, req));
}

/// Open an exit stream (BEGIN, CONNECT_UDP) unless `anonymous` is false
/// (the circuit's previous hop is a client): as stock tor, no exit streams
/// on a client's first hop (BEGIN_DIR and RESOLVE are still served).
fn exit_stream_unless_one_hop(
    ctx: &Arc<RelayCtx>,
    host: &mut dyn StreamHost,
    stream: u16,
    req: exit::Request,
    anonymous: bool,
) {
    if anonymous {
        open_exit_stream(ctx, host, stream, req, anonymous);
    } else {
        debug!("refused an exit stream on the first hop of a client's circuit");
        ctx.stats
            .single_hop_begins_refused
            .fetch_add(1, Ordering::Relaxed);
        host.flow().stream_closed(stream);
        host.send(RelayCmd::END, stream, &[end_reason::TORPROTOCOL]);
    }
}

/// The stream-creation DoS defence's verdict on a new stream or resolve
/// `stream` of `host`: true to go on. A refused stream is answered END
/// RESOURCELIMIT here; `close` is set when the circuit must close.
fn admit_stream(ctx: &RelayCtx, host: &mut dyn StreamHost, stream: u16, close: &mut bool) -> bool {
    let p = ctx.dos_stream_params();
    match host.flow().dos.on_new_stream(&p, Instant::now()) {
        StreamVerdict::Allow => true,
        StreamVerdict::Refuse => {
            ctx.stats
                .streams_refused_dos
                .fetch_add(1, Ordering::Relaxed);
            host.flow().stream_closed(stream);
            host.send(RelayCmd::END, stream, &[end_reason::RESOURCELIMIT]);
            false
        }
        StreamVerdict::CloseCircuit => {
            ctx.stats
                .streams_refused_dos
                .fetch_add(1, Ordering::Relaxed);
            debug!("closing a circuit that opens streams too fast");
            *close = true;
            false
        }
    }
}

/// Act on a stream message for `host`; `from_client`: the circuit it came
/// on has a client (an unauthenticated connection) as previous hop.
/// Anything that is not a stream message is ignored here. True when the
/// circuit (or set) must be closed (the stream-creation DoS defence).
#[must_use]
pub(crate) fn stream_action(
    ctx: &Arc<RelayCtx>,
    host: &mut dyn StreamHost,
    action: Inbound<'_>,
    from_client: bool,
) -> bool {
    let anonymous = !from_client || ctx.cfg.allow_single_hop_exits;
    let mut close = false;
    let new_stream = match &action {
        Inbound::Begin { stream, .. }
        | Inbound::ConnectUdp { stream, .. }
        | Inbound::Resolve { stream, .. } => Some(*stream),
        _ => None,
    };
    if let Some(stream) = new_stream
        && !admit_stream(ctx, host, stream, &mut close)
    {
        return close;
    }
    match action {
        Inbound::Begin { stream, begin } => {
            exit_stream_unless_one_hop(ctx, host, stream, exit::Request::Connect(begin), anonymous);
        }
        Inbound::ConnectUdp { stream, connect } => {
            let req = exit::Request::ConnectUdp(connect);
            exit_stream_unless_one_hop(ctx, host, stream, req, anonymous);
        }
        Inbound::Datagram { stream, data } => {
            // UDP: a full queue drops the datagram, the stream lives.
            if let Some(s) = host.txs().get(&stream)
                && s.data.try_send(Bytes::copy_from_slice(data)).is_err()
            {
                ctx.stats.datagrams_dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        Inbound::BeginDir { stream } => {
            open_exit_stream(ctx, host, stream, exit::Request::Dir, anonymous);
        }
        Inbound::Resolve { stream, name } => {
            open_exit_stream(ctx, host, stream, exit::Request::Resolve(name), anonymous);
        }
        Inbound::Data { stream, data } => {
            let len = data.len();
            let data = Bytes::copy_from_slice(data);
            let queued = match host.txs().get_mut(&stream) {
                None => return false,
                Some(s) => match s.data.try_send(data) {
                    Ok(()) => {
                        s.buffered = s.buffered.saturating_add(len);
                        Some(s.buffered)
                    }
                    Err(_) => None,
                },
            };
            match queued {
                Some(buffered) => {
                    if let Some(m) = host
                        .flow()
                        .stream_buffered(stream, buffered, Instant::now())
                    {
                        send_flow(ctx, host, stream, &[m]);
                    }
                }
                None => {
                    // Flow control guarantees room; a full queue means
                    // the client ignored the stream window or our XOFF.
                    stream_closed(host, stream);
                    host.send(RelayCmd::END, stream, &[end_reason::TORPROTOCOL]);
                }
            }
        }
        Inbound::End { stream, .. } => {
            if let Some(s) = host.txs().remove(&stream) {
                s.gate.close();
            }
        }
        Inbound::Xoff { stream } => {
            debug!("XOFF for an exit stream");
            ctx.stats.xoff_received.fetch_add(1, Ordering::Relaxed);
            if let Some(s) = host.txs().get(&stream) {
                s.gate.on_xoff();
            }
        }
        Inbound::Xon { stream, kbps } => {
            debug!("XON for an exit stream ({kbps} kB/s)");
            ctx.stats.xon_received.fetch_add(1, Ordering::Relaxed);
            if let Some(s) = host.txs().get(&stream) {
                s.gate.on_xon(kbps);
            }
        }
        _ => {}
    }
    false
}

/// A circuit's own streams (not a conflux leg's).
pub(super) struct CircHost<'a> {
    pub(super) o: &'a mut Origin,
    pub(super) me: &'a RelayChanHandle,
    pub(super) out: &'a mut BytesMut,
    pub(super) id: u32,
}

impl StreamHost for CircHost<'_> {
    fn txs(&mut self) -> &mut HashMap<u16, StreamTx> {
        &mut self.o.streams
    }
    fn flow(&mut self) -> &mut ExitStreams {
        self.o.circ.streams_mut()
    }
    fn send(&mut self, cmd: RelayCmd, sid: u16, data: &[u8]) {
        // Keep everything queued so far ahead of this cell.
        let pending = self.out.split();
        self.me.writer.send_now(pending);
        originate_backward(&self.o.shared, self.me, self.id, cmd, sid, data);
    }
    fn path(&self) -> StreamPath {
        StreamPath::Circ {
            shared: self.o.shared.clone(),
            origin: Box::new(self.me.clone()),
            circ_id: self.id,
            window_open: self.o.window_open.clone(),
        }
    }
    fn is_cc(&self) -> bool {
        self.o.circ.is_cc()
    }
}
