//! Relay cells on circuits that end here (origin entries): decrypt,
//! act on the message (forward, extend, exit streams, SENDMEs, truncate)
//! and originate cells back towards the client.

use super::*;

impl Reactor {
    /// Originate a relay cell towards the client on an origin circuit.
    pub(super) fn originate(&mut self, id: u32, cmd: RelayCmd, sid: u16, data: &[u8]) {
        let Some(o) = self.origins.get(&id) else {
            return;
        };
        // Keep everything queued so far ahead of this cell.
        let pending = self.out.split();
        self.me.writer.send_now(pending);
        originate_backward(&o.shared, &self.me, id, cmd, sid, data);
    }

    /// Send stream flow-control messages (stream SENDMEs, XON, XOFF).
    pub(super) fn send_flow(&mut self, id: u32, sid: u16, msgs: &[StreamFlowMsg]) {
        for m in msgs {
            let stat = match m {
                StreamFlowMsg::Xoff => Some(&self.ctx.stats.xoff_sent),
                StreamFlowMsg::Xon(_) => Some(&self.ctx.stats.xon_sent),
                StreamFlowMsg::Sendme => None,
            };
            if let Some(c) = stat {
                c.fetch_add(1, Ordering::Relaxed);
            }
            let (cmd, body) = m.encode();
            self.originate(id, cmd, sid, &body);
        }
    }

    pub(super) fn origin_relay(&mut self, id: u32, early: bool, body: &mut CellBody) {
        if self.origins.get(&id).is_some_and(|o| o.hs.is_waiting()) {
            self.hs_poll_join(id);
        }
        let Some(o) = self.origins.get_mut(&id) else {
            return;
        };
        let handled = match o.circ.handle_inbound(early, body) {
            Ok(h) => h,
            Err(e) => {
                debug!(
                    "closing circuit: {e} (relay header {})",
                    hex::encode(&body[..11])
                );
                self.drop_origin(id, true);
                return;
            }
        };
        let circ_sendme = handled.circ_sendme;
        match handled.action {
            Inbound::Forward { early } => {
                if let Some(n) = o.next.clone() {
                    let cmd = if early { Cmd::RELAY_EARLY } else { Cmd::RELAY };
                    let b: [u8; PAYLOAD_LEN] = *body;
                    let buf = self.fwd_buf(&n.writer);
                    n.codec.encode_fixed(n.circ_id, cmd, &b, buf);
                    self.ctx
                        .stats
                        .cells_forwarded
                        .fetch_add(1, Ordering::Relaxed);
                } else if o.hs.is_joined() {
                    self.splice_forward(id, body);
                }
            }
            Inbound::Extend(e) => {
                let prev = PrevLink {
                    writer: self.me.writer.clone(),
                    codec: self.me.codec.clone(),
                    circ_id: id,
                    chan: self.me.clone(),
                    shared: o.shared.clone(),
                };
                let ctx = self.ctx.clone();
                tokio::spawn(async move {
                    crate::relay::extend::extend(ctx, prev, e).await;
                });
            }
            Inbound::Begin { stream, begin } => {
                self.exit_stream_unless_one_hop(id, stream, exit::Request::Connect(begin));
            }
            Inbound::ConnectUdp { stream, connect } => {
                self.exit_stream_unless_one_hop(id, stream, exit::Request::ConnectUdp(connect));
            }
            Inbound::Datagram { stream, data } => {
                // UDP: a full queue drops the datagram, the stream lives.
                if let Some(s) = o.streams.get(&stream)
                    && s.data.try_send(Bytes::copy_from_slice(data)).is_err()
                {
                    self.ctx
                        .stats
                        .datagrams_dropped
                        .fetch_add(1, Ordering::Relaxed);
                }
            }
            Inbound::BeginDir { stream } => {
                self.open_exit_stream(id, stream, exit::Request::Dir);
            }
            Inbound::Resolve { stream, name } => {
                self.open_exit_stream(id, stream, exit::Request::Resolve(name));
            }
            Inbound::Data { stream, data } => {
                let len = data.len();
                let data = Bytes::copy_from_slice(data);
                let Some(s) = o.streams.get_mut(&stream) else {
                    return self.after_inbound(id, circ_sendme);
                };
                if s.data.try_send(data).is_err() {
                    // Flow control guarantees room; a full queue means
                    // the client ignored the stream window or our XOFF.
                    o.circ.stream_closed(stream);
                    if let Some(s) = o.streams.remove(&stream) {
                        s.gate.close();
                    }
                    self.originate(id, RelayCmd::END, stream, &[end_reason::TORPROTOCOL]);
                } else {
                    s.buffered = s.buffered.saturating_add(len);
                    let buffered = s.buffered;
                    if let Some(m) = o.circ.stream_buffered(stream, buffered, Instant::now()) {
                        self.send_flow(id, stream, &[m]);
                    }
                }
            }
            Inbound::End { stream, .. } => {
                if let Some(s) = o.streams.remove(&stream) {
                    s.gate.close();
                }
            }
            Inbound::Sendme { stream: 0, msg } => {
                let chan = chan_signal(&self.me.writer, &o.params);
                let res = {
                    let mut g = lock(&o.shared);
                    let r = g.sender.on_sendme(&msg, Instant::now(), chan);
                    trace!(cc = ?g.sender.snapshot(), ?chan, "circuit SENDME");
                    r
                };
                match res {
                    Ok(()) => o.window_open.notify_waiters(),
                    Err(e) => {
                        debug!("bad circuit SENDME ({e}); closing circuit");
                        self.drop_origin(id, true);
                        return;
                    }
                }
            }
            Inbound::Sendme { stream, .. } => {
                if let Some(s) = o.streams.get(&stream)
                    && let Err(e) = s.gate.on_sendme()
                {
                    debug!("bad stream SENDME ({e}); closing circuit");
                    self.drop_origin(id, true);
                    return;
                }
            }
            Inbound::Xoff { stream } => {
                debug!("XOFF for an exit stream");
                self.ctx.stats.xoff_received.fetch_add(1, Ordering::Relaxed);
                if let Some(s) = o.streams.get(&stream) {
                    s.gate.on_xoff();
                }
            }
            Inbound::Xon { stream, kbps } => {
                debug!("XON for an exit stream ({kbps} kB/s)");
                self.ctx.stats.xon_received.fetch_add(1, Ordering::Relaxed);
                if let Some(s) = o.streams.get(&stream) {
                    s.gate.on_xon(kbps);
                }
            }
            Inbound::Truncate => {
                if let Some(n) = o.next.take() {
                    o.circ.next_gone();
                    let mut b = [0u8; PAYLOAD_LEN];
                    b[0] = destroy_reason::NONE;
                    let buf = self.fwd_buf(&n.writer);
                    n.codec.encode_fixed(n.circ_id, Cmd::DESTROY, &b, buf);
                    n.chan.send(RCmd::PrevGone { circ_id: n.circ_id });
                }
                self.originate(id, RelayCmd::TRUNCATED, 0, &[destroy_reason::REQUESTED]);
            }
            Inbound::OnionService { cmd, data, .. } => self.hs_cell(id, cmd, data),
            Inbound::Nothing => {}
        }
        self.after_inbound(id, circ_sendme);
    }

    /// Send the circuit-level SENDME a DATA cell made due.
    fn after_inbound(&mut self, id: u32, circ_sendme: Option<[u8; 20]>) {
        if let Some(d) = circ_sendme {
            let m = Sendme::Authenticated(d).encode();
            self.originate(id, RelayCmd::SENDME, 0, &m);
        }
    }

    /// Open an exit stream (BEGIN, CONNECT_UDP), unless the circuit's
    /// previous hop is a client: as stock tor, no exit streams on a
    /// client's first hop (BEGIN_DIR and RESOLVE are still served).
    fn exit_stream_unless_one_hop(&mut self, id: u32, sid: u16, req: exit::Request) {
        if self.me.peer.is_none() && !self.ctx.cfg.allow_single_hop_exits {
            debug!("refused an exit stream on the first hop of a client's circuit");
            self.ctx
                .stats
                .single_hop_begins_refused
                .fetch_add(1, Ordering::Relaxed);
            if let Some(o) = self.origins.get_mut(&id) {
                o.circ.stream_closed(sid);
            }
            self.originate(id, RelayCmd::END, sid, &[end_reason::TORPROTOCOL]);
        } else {
            self.open_exit_stream(id, sid, req);
        }
    }

    pub(super) fn open_exit_stream(&mut self, id: u32, sid: u16, req: exit::Request) {
        let Some(o) = self.origins.get_mut(&id) else {
            return;
        };
        let (tx, rx) = mpsc::channel(exit::STREAM_QUEUE);
        let gate = Arc::new(StreamGate::for_circuit(o.circ.is_cc()));
        o.streams.insert(
            sid,
            StreamTx {
                data: tx,
                gate: gate.clone(),
                buffered: 0,
            },
        );
        let s = exit::ExitStream {
            ctx: self.ctx.clone(),
            origin: self.me.clone(),
            circ_id: id,
            stream: sid,
            shared: o.shared.clone(),
            window_open: o.window_open.clone(),
            gate,
            data: rx,
        };
        tokio::spawn(exit::run(s, req));
    }
}
