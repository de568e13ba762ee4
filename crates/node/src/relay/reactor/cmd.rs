//! Commands from other tasks (extends completing, cells and teardown
//! from the other channel of a circuit) and CREATED2 on next entries.

use super::*;

/// Most bytes of an EXTENDED2 body (a relay cell's data field): a CREATED2
/// whose handshake does not fit cannot be passed on.
const MAX_EXTENDED2_BODY: usize = PAYLOAD_LEN - relay::DATA_OFFSET;

impl Reactor {
    pub(super) fn handle_created2(&mut self, id: u32, payload: &[u8]) {
        let Some(n) = self.nexts.get_mut(&id) else {
            return;
        };
        if n.open {
            self.kill_next(id, true);
            return;
        }
        if lock(&n.prev.shared).closed {
            // The client gave up on the circuit while we waited.
            self.drop_orphan_next(id);
            return;
        }
        // The handshake must fit an EXTENDED2 towards the client (tor
        // closes the circuit when it cannot format one).
        let Some(created) = Created2::parse(payload)
            .ok()
            .filter(|c| c.encode().len() <= MAX_EXTENDED2_BODY)
        else {
            self.kill_next(id, true);
            return;
        };
        n.open = true;
        let next = NextLink {
            writer: self.me.writer.clone(),
            codec: self.me.codec.clone(),
            circ_id: id,
            chan: self.me.clone(),
        };
        n.prev.chan.send(RCmd::ExtendDone {
            circ_id: n.prev.circ_id,
            shared: n.prev.shared.clone(),
            next,
            created,
        });
    }

    pub(super) fn alloc_circ_id(&self) -> Option<u32> {
        let mut rng = rand::thread_rng();
        for _ in 0..64 {
            // The initiator of a link uses IDs with the high bit set, the
            // responder without (tor-spec §5.1.1).
            let raw = rng.r#gen::<u32>();
            let id = if self.initiated {
                raw | 0x8000_0000
            } else {
                raw & 0x7FFF_FFFF
            };
            if id != 0 && !self.origins.contains_key(&id) && !self.nexts.contains_key(&id) {
                return Some(id);
            }
        }
        None
    }

    pub(super) fn handle_cmd(&mut self, cmd: RCmd) {
        match cmd {
            RCmd::CreateFor { create2, prev } => {
                let Some(id) = self.alloc_circ_id() else {
                    prev.chan.send(RCmd::ExtendFailed {
                        circ_id: prev.circ_id,
                        shared: prev.shared.clone(),
                        reason: destroy_reason::RESOURCELIMIT,
                    });
                    return;
                };
                match RawCell::fixed(id, Cmd::CREATE2, &create2.encode()) {
                    Ok(cell) => {
                        if let Some(b) = cell.body() {
                            let b = *b;
                            self.me
                                .codec
                                .encode_fixed(id, Cmd::CREATE2, &b, &mut self.out);
                        }
                        self.nexts.insert(
                            id,
                            Next {
                                prev,
                                outq: CircQueue::default(),
                                open: false,
                                since: Instant::now(),
                            },
                        );
                        self.circuit_added();
                    }
                    Err(_) => prev.chan.send(RCmd::ExtendFailed {
                        circ_id: prev.circ_id,
                        shared: prev.shared.clone(),
                        reason: destroy_reason::PROTOCOL,
                    }),
                }
            }
            RCmd::ExtendDone {
                circ_id,
                shared,
                next,
                created,
            } => {
                let same = |o: &&mut Origin| Arc::ptr_eq(&o.shared, &shared);
                let Some(o) = self.origins.get_mut(&circ_id).filter(same) else {
                    // The client went away meanwhile: undo the extension.
                    let mut b = [0u8; PAYLOAD_LEN];
                    b[0] = destroy_reason::DESTROYED;
                    let mut buf = BytesMut::new();
                    next.codec
                        .encode_fixed(next.circ_id, Cmd::DESTROY, &b, &mut buf);
                    next.writer.send_now(buf);
                    next.chan.send(RCmd::PrevGone {
                        circ_id: next.circ_id,
                    });
                    return;
                };
                o.next = Some(next);
                o.circ.extended(true);
                self.originate(circ_id, RelayCmd::EXTENDED2, 0, &created.encode());
            }
            RCmd::ExtendFailed {
                circ_id,
                shared,
                reason,
            } => {
                // Only for the circuit that asked, not a later one that
                // reuses its ID.
                let Some(o) = self
                    .origins
                    .get_mut(&circ_id)
                    .filter(|o| Arc::ptr_eq(&o.shared, &shared))
                else {
                    return;
                };
                o.circ.extended(false);
                // tor-spec recommends DESTROY towards the client.
                self.drop_origin(circ_id, false);
                self.send_destroy(circ_id, reason);
            }
            RCmd::NextGone { circ_id, shared } => {
                // Only the circuit the next hop served, not a later one
                // that reuses its ID.
                if let Some(o) = self
                    .origins
                    .get_mut(&circ_id)
                    .filter(|o| Arc::ptr_eq(&o.shared, &shared))
                {
                    // DESTROY towards the client was already queued by the
                    // next channel's reactor; just forget the circuit.
                    o.next = None;
                    self.drop_origin(circ_id, false);
                }
            }
            RCmd::PrevGone { circ_id } => {
                if self.nexts.remove(&circ_id).is_some() {
                    self.circuit_gone();
                }
            }
            RCmd::StreamDrained { circ_id, stream } => {
                let ctx = self.ctx.clone();
                if let Some(o) = self.origins.get_mut(&circ_id) {
                    let Some((cells, bytes)) = o.streams.get(&stream).map(|s| s.tally.take())
                    else {
                        return;
                    };
                    let mut host = streams::CircHost {
                        o,
                        me: &self.me,
                        out: &mut self.out,
                        id: circ_id,
                    };
                    streams::stream_drained(&ctx, &mut host, stream, cells, bytes);
                }
            }
            RCmd::StreamClosed { circ_id, stream } => {
                if let Some(o) = self.origins.get_mut(&circ_id) {
                    let mut host = streams::CircHost {
                        o,
                        me: &self.me,
                        out: &mut self.out,
                        id: circ_id,
                    };
                    streams::stream_closed(&mut host, stream);
                }
            }
            RCmd::ConfluxTeardown { circ_id, reason } => self.close_origin(circ_id, reason),
            RCmd::Hs(c) => self.handle_hs_cmd(c),
            RCmd::Close => {}
        }
    }
}
