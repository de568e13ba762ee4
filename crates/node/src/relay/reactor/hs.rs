//! Onion-service roles of circuits that end here (tor's `hs_intropoint.c`
//! and `rendmid.c`): ESTABLISH_INTRO / INTRODUCE1 at an introduction
//! point, ESTABLISH_RENDEZVOUS / RENDEZVOUS1 at a rendezvous point, and the
//! splice of two joined rendezvous circuits. The shared tables are
//! `relay::hs`.
//!
//! A circuit has at most one role, and only a circuit that does not
//! continue (no next hop) and has none yet may take one, as tor requires
//! (`CIRCUIT_PURPOSE_OR` and no `n_chan`); a violation closes the circuit
//! with DESTROY(TORPROTOCOL).
//!
//! **Splicing.** Once RENDEZVOUS1 matches a waiting cookie, each circuit
//! records the other's [`PrevLink`] and is marked extended in its
//! [`RelayCircuit`], so the cells it cannot recognize (the end-to-end
//! layer of client and service) come out as `Inbound::Forward`: they are
//! decrypted by this circuit's forward layer, encrypted with the other
//! circuit's backward layer and appended to the other channel's forwarding
//! buffer, exactly like a cell from a next hop (no allocation per cell, and
//! the same back-pressure). Like tor, the rendezvous point keeps no flow
//! control for spliced cells: it does not recognize them, so they count in
//! no window here; the SENDMEs between client and service travel inside
//! the end-to-end layer.
//!
//! The joining is race-free across reactors: the waiting circuit's entry
//! holds a [`JoinSlot`]; the reactor that receives RENDEZVOUS1 takes the
//! cookie from the table, puts the service's circuit in the slot, sends
//! RENDEZVOUS2 down the client's circuit (under its circuit lock, like an
//! exit stream does) and starts forwarding the service's cells at once.
//! The client's reactor picks the slot up before it handles the next cell
//! of that circuit; a closing side empties the slot or tears the other
//! circuit down (DESTROY plus [`HsCmd::SpliceGone`]).
//!
//! After the join the rendezvous point originates nothing on the client's
//! circuit: cells it forwards from the service are encrypted in the
//! service reactor and queued after the ones before them, so the client's
//! backward keystream stays in order. (A client that addresses cells to the
//! rendezvous point itself after the join, which tor never does, may get
//! an answer out of order with spliced cells: it garbles only its own
//! circuit.)

use std::sync::atomic::Ordering;

use onionmix_cell::hs::intro_status;
use onionmix_hs::intro::{IntroError, check_establish_intro, introduce1_auth_key};

use super::*;
use crate::relay::hs::intro::IntroRefusal;
use crate::relay::hs::rend::RendRefusal;
use crate::relay::hs::{JoinSlot, RendWaiter, lock_slot};

/// Commands between reactors about onion-service circuits.
pub enum HsCmd {
    /// The other circuit of a joined pair closed (it already queued the
    /// DESTROY for this one): forget this circuit.
    SpliceGone {
        /// This side's circuit ID.
        circ_id: u32,
        /// The join's token.
        token: u64,
    },
    /// The rendezvous cookie of this waiting circuit expired: close it.
    RendExpired {
        /// Circuit ID.
        circ_id: u32,
        /// The cookie registration's token.
        token: u64,
    },
}

/// The onion-service side of a circuit that ends here.
pub(super) struct HsState {
    /// KH of the circuit's handshake (what ESTABLISH_INTRO's MAC is keyed
    /// with; tor's `rend_circ_nonce`).
    kh: zeroize::Zeroizing<[u8; 20]>,
    role: Role,
    /// An INTRODUCE1 was received (tor allows one per circuit).
    introduced: bool,
}

enum Role {
    /// An ordinary circuit (tor: `CIRCUIT_PURPOSE_OR`).
    None,
    /// Introduction circuit of a service.
    Intro { auth_key: [u8; 32], token: u64 },
    /// Waiting at the rendezvous point.
    RendWaiting {
        cookie: [u8; 20],
        token: u64,
        slot: Arc<Mutex<JoinSlot>>,
    },
    /// Joined with `peer`.
    Joined { peer: Box<PrevLink>, token: u64 },
}

impl HsState {
    /// A circuit whose handshake gave `kh`.
    pub(super) fn new(kh: [u8; 20]) -> Self {
        Self {
            kh: zeroize::Zeroizing::new(kh),
            role: Role::None,
            introduced: false,
        }
    }

    /// Whether a RENDEZVOUS1 may have joined this circuit since we looked.
    pub(super) fn is_waiting(&self) -> bool {
        matches!(self.role, Role::RendWaiting { .. })
    }

    /// Whether this circuit is joined to another.
    pub(super) fn is_joined(&self) -> bool {
        matches!(self.role, Role::Joined { .. })
    }
}

fn ack(status: u16) -> [u8; 3] {
    let s = status.to_be_bytes();
    // STATUS, then an empty extension list (N_EXTENSIONS = 0), as tor.
    [s[0], s[1], 0]
}

impl Reactor {
    fn hs_stats(&self) -> &crate::relay::hs::HsStats {
        &self.ctx.hs.stats
    }

    /// Close an origin circuit for a protocol violation (tor closes with
    /// END_CIRC_REASON_TORPROTOCOL).
    fn hs_close(&mut self, id: u32) {
        self.drop_origin(id, false);
        self.send_destroy(id, destroy_reason::PROTOCOL);
    }

    /// A link to origin circuit `id` for another reactor.
    fn prev_link(&self, id: u32, shared: &SharedCirc) -> PrevLink {
        PrevLink {
            writer: self.me.writer.clone(),
            codec: self.me.codec.clone(),
            circ_id: id,
            chan: self.me.clone(),
            shared: shared.clone(),
        }
    }

    /// Whether origin `id` may take an onion-service role (tor:
    /// `circuit_is_suitable_intro_point`, `CIRCUIT_PURPOSE_OR`, no next).
    fn hs_suitable(&self, id: u32) -> bool {
        self.origins.get(&id).is_some_and(|o| {
            matches!(o.hs.role, Role::None) && o.next.is_none() && !o.circ.has_next()
        })
    }

    /// An onion-service message on origin circuit `id`.
    pub(super) fn hs_cell(&mut self, id: u32, cmd: RelayCmd, data: &[u8]) {
        match cmd {
            RelayCmd::ESTABLISH_INTRO => self.establish_intro(id, data),
            RelayCmd::INTRODUCE1 => self.introduce1(id, data),
            RelayCmd::ESTABLISH_RENDEZVOUS => self.establish_rendezvous(id, data),
            RelayCmd::RENDEZVOUS1 => self.rendezvous1(id, data),
            // INTRODUCE2, RENDEZVOUS2, INTRO_ESTABLISHED,
            // RENDEZVOUS_ESTABLISHED, INTRODUCE_ACK go to clients and
            // services: tor drops them at a relay ("wrong circuit type").
            _ => {
                self.hs_stats()
                    .hs_cells_ignored
                    .fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    fn establish_intro(&mut self, id: u32, data: &[u8]) {
        if !self.hs_suitable(id) {
            self.hs_stats()
                .intro_unsuitable
                .fetch_add(1, Ordering::Relaxed);
            debug!("ESTABLISH_INTRO on an unsuitable circuit");
            self.hs_close(id);
            return;
        }
        let Some(o) = self.origins.get(&id) else {
            return;
        };
        let (m, decision) = match check_establish_intro(data, o.hs.kh.as_slice()) {
            Ok(x) => x,
            Err(e) => {
                let c = match e {
                    IntroError::BadHandshakeMac => &self.hs_stats().intro_bad_mac,
                    IntroError::BadSignature => &self.hs_stats().intro_bad_signature,
                    _ => &self.hs_stats().intro_malformed,
                };
                c.fetch_add(1, Ordering::Relaxed);
                debug!("ESTABLISH_INTRO refused: {e}");
                self.hs_close(id);
                return;
            }
        };
        let ctx = self.ctx.clone();
        let token = ctx.hs.token();
        let link = self.prev_link(id, &o.shared);
        let bucket = ctx
            .hs
            .limits
            .intro_dos
            .bucket_for(decision, ctx.hs.mono_secs());
        // Register and answer under the table lock, so no INTRODUCE2 can
        // overtake INTRO_ESTABLISHED on this circuit.
        let mut table = ctx.hs.intro();
        match table.register(m.auth_key, token, link, bucket) {
            Ok(replaced) => {
                if replaced.is_some() {
                    self.hs_stats()
                        .intro_replaced
                        .fetch_add(1, Ordering::Relaxed);
                }
                if decision != onionmix_hs::intro::DosDecision::ConsensusDefaults {
                    self.hs_stats()
                        .intro_dos_from_extension
                        .fetch_add(1, Ordering::Relaxed);
                }
                self.originate(id, RelayCmd::INTRO_ESTABLISHED, 0, &[0]);
                drop(table);
                if let Some(o) = self.origins.get_mut(&id) {
                    o.hs.role = Role::Intro {
                        auth_key: m.auth_key,
                        token,
                    };
                }
                self.hs_stats()
                    .intro_established
                    .fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                drop(table);
                self.hs_stats()
                    .intro_table_full
                    .fetch_add(1, Ordering::Relaxed);
                debug!("ESTABLISH_INTRO refused: introduction table full");
                self.hs_close(id);
            }
        }
    }

    fn introduce1(&mut self, id: u32, data: &[u8]) {
        let Some(o) = self.origins.get_mut(&id) else {
            return;
        };
        // tor: shorter than a digest, on an intro/rendezvous or continuing
        // circuit, a second INTRODUCE1, or from a one-hop client: close
        // without an answer.
        let suitable = data.len() >= 20
            && matches!(o.hs.role, Role::None)
            && o.next.is_none()
            && !o.circ.has_next()
            && !o.hs.introduced
            && self.me.peer.is_some();
        if !suitable {
            self.hs_stats()
                .introduce1_unsuitable
                .fetch_add(1, Ordering::Relaxed);
            debug!("INTRODUCE1 on an unsuitable circuit");
            self.hs_close(id);
            return;
        }
        o.hs.introduced = true;
        let st = &self.ctx.hs.stats;
        let status = match introduce1_auth_key(data) {
            Err(e) => {
                debug!("INTRODUCE1 refused: {e}");
                st.introduce1_malformed.fetch_add(1, Ordering::Relaxed);
                intro_status::BAD_FORMAT
            }
            Ok(key) => {
                let routed = self.ctx.hs.intro().route(&key, self.ctx.hs.mono_secs());
                match routed {
                    Err(IntroRefusal::UnknownService) => {
                        st.introduce1_unknown_service
                            .fetch_add(1, Ordering::Relaxed);
                        intro_status::UNKNOWN_SERVICE
                    }
                    // tor answers a rate-limited introduction with
                    // "unknown service" too.
                    Err(IntroRefusal::RateLimited) => {
                        st.introduce1_rate_limited.fetch_add(1, Ordering::Relaxed);
                        intro_status::UNKNOWN_SERVICE
                    }
                    Ok(svc) => {
                        // The same bytes, as INTRODUCE2, originated by us
                        // on the service's circuit.
                        if originate_backward(
                            &svc.shared,
                            &svc.chan,
                            svc.circ_id,
                            RelayCmd::INTRODUCE2,
                            0,
                            data,
                        ) {
                            st.introduce1_relayed.fetch_add(1, Ordering::Relaxed);
                            intro_status::SUCCESS
                        } else {
                            st.introduce2_failed.fetch_add(1, Ordering::Relaxed);
                            intro_status::UNKNOWN_SERVICE
                        }
                    }
                }
            }
        };
        self.originate(id, RelayCmd::INTRODUCE_ACK, 0, &ack(status));
    }

    fn establish_rendezvous(&mut self, id: u32, data: &[u8]) {
        let Ok(cookie) = <[u8; 20]>::try_from(data) else {
            self.hs_stats().rend_refused.fetch_add(1, Ordering::Relaxed);
            debug!("ESTABLISH_RENDEZVOUS with a bad length");
            self.hs_close(id);
            return;
        };
        if !self.hs_suitable(id) {
            self.hs_stats().rend_refused.fetch_add(1, Ordering::Relaxed);
            debug!("ESTABLISH_RENDEZVOUS on an unsuitable circuit");
            self.hs_close(id);
            return;
        }
        let Some(o) = self.origins.get(&id) else {
            return;
        };
        let ctx = self.ctx.clone();
        let token = ctx.hs.token();
        let slot = Arc::new(Mutex::new(JoinSlot::Waiting));
        let waiter = RendWaiter {
            link: self.prev_link(id, &o.shared),
            slot: slot.clone(),
        };
        // Register and acknowledge under the table lock: a RENDEZVOUS1
        // for this cookie finds it only after RENDEZVOUS_ESTABLISHED is
        // queued, so RENDEZVOUS2 cannot overtake it.
        let mut table = ctx.hs.rend();
        let (res, expired) = table.register(cookie, token, waiter, ctx.hs.mono_secs());
        match res {
            Ok(()) => {
                self.originate(id, RelayCmd::RENDEZVOUS_ESTABLISHED, 0, &[]);
                drop(table);
                if let Some(o) = self.origins.get_mut(&id) {
                    o.hs.role = Role::RendWaiting {
                        cookie,
                        token,
                        slot,
                    };
                }
                self.hs_stats()
                    .rend_established
                    .fetch_add(1, Ordering::Relaxed);
            }
            Err(why) => {
                drop(table);
                let c = match why {
                    RendRefusal::DuplicateCookie => &self.hs_stats().rend_refused,
                    RendRefusal::TableFull => &self.hs_stats().rend_table_full,
                };
                c.fetch_add(1, Ordering::Relaxed);
                debug!("ESTABLISH_RENDEZVOUS refused: {why:?}");
                self.hs_close(id);
            }
        }
        ctx.hs.close_expired(expired);
    }

    fn rendezvous1(&mut self, id: u32, data: &[u8]) {
        if !self.hs_suitable(id) || data.len() < 20 {
            self.hs_stats()
                .rend1_refused
                .fetch_add(1, Ordering::Relaxed);
            debug!("RENDEZVOUS1 malformed or on an unsuitable circuit");
            self.hs_close(id);
            return;
        }
        let (cookie, info) = data.split_at(20);
        let Ok(cookie) = <[u8; 20]>::try_from(cookie) else {
            return;
        };
        let ctx = self.ctx.clone();
        let taken = ctx.hs.rend().take(&cookie, ctx.hs.mono_secs());
        let Some(w) = taken else {
            // Can happen naturally (the client gave up), so only debug.
            self.hs_stats()
                .rend1_unknown_cookie
                .fetch_add(1, Ordering::Relaxed);
            debug!("RENDEZVOUS1 with an unknown rendezvous cookie");
            self.hs_close(id);
            return;
        };
        let Some(o) = self.origins.get(&id) else {
            return;
        };
        let client = w.link.link;
        let me = self.prev_link(id, &o.shared);
        {
            let mut slot = lock_slot(&w.link.slot);
            if !matches!(*slot, JoinSlot::Waiting) {
                drop(slot);
                // The client's circuit closed meanwhile.
                self.hs_stats()
                    .rend1_unknown_cookie
                    .fetch_add(1, Ordering::Relaxed);
                self.hs_close(id);
                return;
            }
            *slot = JoinSlot::Joined(Box::new(me), w.token);
        }
        // RENDEZVOUS2 with the service's handshake, down the client's
        // circuit, before any cell of ours can be forwarded there.
        if !originate_backward(
            &client.shared,
            &client.chan,
            client.circ_id,
            RelayCmd::RENDEZVOUS2,
            0,
            info,
        ) {
            let mut slot = lock_slot(&w.link.slot);
            if matches!(*slot, JoinSlot::Joined(..)) {
                *slot = JoinSlot::Closed;
            }
            drop(slot);
            self.hs_stats()
                .rend1_refused
                .fetch_add(1, Ordering::Relaxed);
            self.hs_close(id);
            return;
        }
        if let Some(o) = self.origins.get_mut(&id) {
            o.hs.role = Role::Joined {
                peer: Box::new(client),
                token: w.token,
            };
            o.circ.extended(true);
        }
        self.hs_stats().rend_joined.fetch_add(1, Ordering::Relaxed);
    }

    /// A waiting circuit about to handle a cell: install the join if a
    /// RENDEZVOUS1 arrived meanwhile.
    pub(super) fn hs_poll_join(&mut self, id: u32) {
        let Some(o) = self.origins.get_mut(&id) else {
            return;
        };
        let Role::RendWaiting { slot, .. } = &o.hs.role else {
            return;
        };
        let joined = match &*lock_slot(slot) {
            JoinSlot::Joined(peer, token) => Some((peer.clone(), *token)),
            _ => None,
        };
        if let Some((peer, token)) = joined {
            o.hs.role = Role::Joined { peer, token };
            o.circ.extended(true);
        }
    }

    /// Forward a cell this joined circuit did not recognize to the other
    /// circuit (already decrypted by our forward layer). False when that
    /// leaves more cells of this circuit queued on the other circuit's
    /// channel than the consensus allows: the caller closes the circuit.
    pub(super) fn splice_forward(&mut self, id: u32, body: &mut CellBody) -> bool {
        let Reactor {
            origins, fwd, ctx, ..
        } = self;
        let Some(o) = origins.get_mut(&id) else {
            return true;
        };
        let Role::Joined { peer, .. } = &o.hs.role else {
            return true;
        };
        lock(&peer.shared).layer.encrypt_backward(body);
        let buf = fwd_buf_in(fwd, &peer.writer);
        // Spliced cells are always RELAY (tor: "can't be relay_early").
        peer.codec.encode_fixed(peer.circ_id, Cmd::RELAY, body, buf);
        let queued = o.outq.push(&peer.writer, peer.circ_id, buf.len());
        ctx.hs
            .stats
            .rend_cells_spliced
            .fetch_add(1, Ordering::Relaxed);
        !forwarded(
            ctx,
            queued,
            ctx.queue_limits().toward_client,
            "the other circuit's client",
        )
    }

    /// Origin circuit `id` with state `hs` is gone: leave the tables, and
    /// tear down a joined circuit.
    pub(super) fn hs_circuit_gone(&mut self, hs: HsState) {
        let peer = match hs.role {
            Role::None => None,
            Role::Intro { auth_key, token } => {
                self.ctx.hs.intro().remove(&auth_key, token);
                None
            }
            Role::RendWaiting {
                cookie,
                token,
                slot,
            } => {
                self.ctx.hs.rend().remove(&cookie, token);
                let mut s = lock_slot(&slot);
                match std::mem::replace(&mut *s, JoinSlot::Closed) {
                    JoinSlot::Joined(peer, token) => Some((peer, token)),
                    _ => None,
                }
            }
            Role::Joined { peer, token } => Some((peer, token)),
        };
        if let Some((peer, token)) = peer {
            let mut b = [0u8; PAYLOAD_LEN];
            b[0] = destroy_reason::DESTROYED;
            let buf = self.fwd_buf(&peer.writer);
            peer.codec.encode_fixed(peer.circ_id, Cmd::DESTROY, &b, buf);
            peer.chan.send(RCmd::Hs(HsCmd::SpliceGone {
                circ_id: peer.circ_id,
                token,
            }));
        }
    }

    pub(super) fn handle_hs_cmd(&mut self, cmd: HsCmd) {
        match cmd {
            HsCmd::SpliceGone { circ_id, token } => {
                let Some(o) = self.origins.get_mut(&circ_id) else {
                    return;
                };
                let ours = match &o.hs.role {
                    Role::Joined { token: t, .. } => *t == token,
                    Role::RendWaiting { slot, .. } => {
                        matches!(&*lock_slot(slot), JoinSlot::Joined(_, t) if *t == token)
                    }
                    _ => false,
                };
                if ours {
                    // The DESTROY towards our client is already queued by
                    // the other side; just forget the circuit.
                    o.hs.role = Role::None;
                    self.drop_origin(circ_id, false);
                }
            }
            HsCmd::RendExpired { circ_id, token } => {
                let expired = self.origins.get(&circ_id).is_some_and(|o| {
                    matches!(&o.hs.role, Role::RendWaiting { token: t, slot, .. }
                        if *t == token && matches!(&*lock_slot(slot), JoinSlot::Waiting))
                });
                if expired {
                    self.drop_origin(circ_id, false);
                    self.send_destroy(circ_id, destroy_reason::FINISHED);
                }
            }
        }
    }
}
