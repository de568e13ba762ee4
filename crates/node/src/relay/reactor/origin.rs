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
                debug!("closing circuit: {e}");
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
                if self.me.peer.is_none() && !self.ctx.cfg.allow_single_hop_exits {
                    // As stock tor: no exit streams on a client's first hop
                    // (BEGIN_DIR and RESOLVE are still served).
                    debug!("refused BEGIN on the first hop of a client's circuit");
                    self.ctx
                        .stats
                        .single_hop_begins_refused
                        .fetch_add(1, Ordering::Relaxed);
                    o.circ.stream_closed(stream);
                    self.originate(id, RelayCmd::END, stream, &[end_reason::TORPROTOCOL]);
                } else {
                    self.open_exit_stream(id, stream, exit::Request::Connect(begin));
                }
            }
            Inbound::BeginDir { stream } => {
                self.open_exit_stream(id, stream, exit::Request::Dir);
            }
            Inbound::Resolve { stream, name } => {
                self.open_exit_stream(id, stream, exit::Request::Resolve(name));
            }
            Inbound::Data { stream, data } => {
                let data = Bytes::copy_from_slice(data);
                if let Some(s) = o.streams.get(&stream)
                    && s.data.try_send(data).is_err()
                {
                    // Flow control guarantees room; a full queue means
                    // the client ignored the stream window.
                    o.circ.stream_closed(stream);
                    if let Some(s) = o.streams.remove(&stream) {
                        s.credits.close();
                    }
                    self.originate(id, RelayCmd::END, stream, &[end_reason::TORPROTOCOL]);
                }
            }
            Inbound::End { stream, .. } => {
                if let Some(s) = o.streams.remove(&stream) {
                    s.credits.close();
                }
            }
            Inbound::Sendme { stream: 0, tag } => {
                let ok = lock(&o.shared).pkg.on_sendme(tag.as_ref()).is_ok();
                if ok {
                    o.circ_credits.add_permits(CIRC_WINDOW_INC as usize);
                } else {
                    debug!("bad circuit SENDME; closing circuit");
                    self.drop_origin(id, true);
                    return;
                }
            }
            Inbound::Sendme { stream, .. } => {
                if let Some(s) = o.streams.get(&stream) {
                    s.credits.add_permits(STREAM_WINDOW_INC as usize);
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
        if let Some(d) = circ_sendme {
            let m = Sendme::Authenticated(d).encode();
            self.originate(id, RelayCmd::SENDME, 0, &m);
        }
    }

    pub(super) fn open_exit_stream(&mut self, id: u32, sid: u16, req: exit::Request) {
        let Some(o) = self.origins.get_mut(&id) else {
            return;
        };
        let (tx, rx) = mpsc::channel(exit::STREAM_QUEUE);
        let credits = Arc::new(Semaphore::new(
            onionmix_proto::flow::STREAM_WINDOW_START as usize,
        ));
        o.streams.insert(
            sid,
            StreamTx {
                data: tx,
                credits: credits.clone(),
            },
        );
        let s = exit::ExitStream {
            ctx: self.ctx.clone(),
            origin: self.me.clone(),
            circ_id: id,
            stream: sid,
            shared: o.shared.clone(),
            circ_credits: o.circ_credits.clone(),
            credits,
            data: rx,
        };
        tokio::spawn(exit::run(s, req));
    }
}
