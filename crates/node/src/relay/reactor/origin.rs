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
                if let Some(n) = &o.next {
                    let cmd = if early { Cmd::RELAY_EARLY } else { Cmd::RELAY };
                    let b: [u8; PAYLOAD_LEN] = *body;
                    let buf = fwd_buf_in(&mut self.fwd, &n.writer);
                    n.codec.encode_fixed(n.circ_id, cmd, &b, buf);
                    let queued = o.outq.push(&n.writer, n.circ_id, buf.len());
                    let limit = self.ctx.queue_limits().away_from_client;
                    if forwarded(&self.ctx, queued, limit, "its next hop") {
                        // tor counts this against the client's address.
                        if let Some((addr, _)) = self.client_addr() {
                            self.ctx.dos_on_max_outq(addr);
                        }
                        self.drop_origin(id, true);
                        return;
                    }
                } else if o.hs.is_joined() && !self.splice_forward(id, body) {
                    self.drop_origin(id, true);
                    return;
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
            a @ (Inbound::Begin { .. }
            | Inbound::ConnectUdp { .. }
            | Inbound::Datagram { .. }
            | Inbound::BeginDir { .. }
            | Inbound::Resolve { .. }
            | Inbound::Data { .. }
            | Inbound::End { .. }
            | Inbound::Xoff { .. }
            | Inbound::Xon { .. }) => {
                let from_client = self.me.peer.is_none();
                let ctx = self.ctx.clone();
                let mut host = streams::CircHost {
                    o,
                    me: &self.me,
                    out: &mut self.out,
                    id,
                };
                if streams::stream_action(&ctx, &mut host, a, from_client) {
                    self.drop_origin(id, true);
                    return;
                }
            }
            Inbound::Sendme { stream: 0, msg } => {
                let chan = chan_signal(&self.me.writer, id, &o.params);
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
            Inbound::ConfluxLink(l) => self.conflux_link(id, l),
            Inbound::ConfluxLinkedAck => self.conflux_linked_ack(id),
            Inbound::ConfluxSwitch(seq) => self.conflux_switch(id, seq),
            Inbound::Multiplexed {
                cmd,
                stream,
                data,
                sequenced,
            } => self.conflux_msg(id, cmd, stream, data, sequenced),
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
}
