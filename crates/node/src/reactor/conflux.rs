//! Conflux legs on a client channel (see `client::conflux`): LINK and
//! LINKED, SWITCH, and a leg's stream messages, numbered in the set; the
//! home leg's reactor hands the messages now in order to its streams.

use super::*;
use crate::client::conflux::{ClientLeg, Queued};
use onionmix_cell::relay::{ConfluxLink, RelayCmd};

impl Reactor {
    /// Send CONFLUX_LINK on `circ_id`; `reply` gets the LINKED.
    pub(super) fn conflux_send_link(
        &mut self,
        circ_id: u32,
        link: ConfluxLink,
        reply: Reply<ConfluxLink>,
    ) {
        let Some(e) = self.circuits.get_mut(&circ_id) else {
            let _ = reply.send(Err(ReactorError::CircuitDestroyed(destroy_reason::NONE)));
            return;
        };
        match e.circ.conflux_link(&link) {
            Ok(cell) => {
                e.pending_link = Some(reply);
                self.out_cells.push(cell);
                self.send_out_cells(circ_id);
            }
            Err(err) => {
                let _ = reply.send(Err(ReactorError::Circuit(err.to_string())));
            }
        }
    }

    /// The set is formed: `circ_id` is its leg `leg`.
    pub(super) fn conflux_attach(&mut self, circ_id: u32, leg: ClientLeg) {
        let Some(e) = self.circuits.get_mut(&circ_id) else {
            leg.set.teardown(circ_id);
            return;
        };
        if e.circ.set_conflux_leg().is_err() {
            leg.set.teardown(circ_id);
            self.kill_circuit(circ_id, destroy_reason::PROTOCOL, true);
            return;
        }
        e.leg = Some(leg);
    }

    fn leg(&self, circ_id: u32) -> Option<ClientLeg> {
        self.circuits.get(&circ_id)?.leg.clone()
    }

    /// A set failed on `circ_id`: close it (the set closes the others).
    fn conflux_fail(&mut self, circ_id: u32, why: &dyn std::fmt::Display) {
        debug!("conflux set failed: {why}");
        self.kill_circuit(circ_id, destroy_reason::PROTOCOL, true);
    }

    /// CONFLUX_SWITCH from the exit.
    pub(super) fn conflux_switch(&mut self, circ_id: u32, seq: u32) {
        let Some(leg) = self.leg(circ_id) else {
            return;
        };
        if let Err(e) = leg.set.on_switch(leg.id, seq) {
            self.conflux_fail(circ_id, &e);
        }
    }

    /// A stream message on a leg: number it; the home drains what is in
    /// order (now, or when woken).
    pub(super) fn conflux_multiplexed(
        &mut self,
        circ_id: u32,
        cmd: RelayCmd,
        stream: u16,
        data: Vec<u8>,
    ) {
        let Some(leg) = self.leg(circ_id) else {
            return;
        };
        if let Err(e) = leg.set.on_msg(leg.id, Queued { cmd, stream, data }) {
            self.conflux_fail(circ_id, &e);
            return;
        }
        if leg.home {
            self.conflux_drain(circ_id);
        } else {
            leg.set.wake_home();
        }
    }

    /// Hand the set's messages in order to the home circuit's streams.
    fn conflux_drain(&mut self, circ_id: u32) {
        let Some(leg) = self.leg(circ_id) else {
            return;
        };
        let now = Instant::now();
        for q in leg.set.take_delivery() {
            let Some(e) = self.circuits.get_mut(&circ_id) else {
                return;
            };
            let mut events = std::mem::take(&mut self.events);
            let res = e
                .circ
                .handle_conflux_msg(q.cmd, q.stream, &q.data, now, &mut events);
            if let Err(err) = res {
                self.events = events;
                self.events.clear();
                self.conflux_fail(circ_id, &err);
                return;
            }
            for ev in events.drain(..) {
                self.dispatch(circ_id, ev);
            }
            self.events = events;
        }
        if let Some(e) = self.circuits.get_mut(&circ_id) {
            report_stats(&self.stats, e);
        }
    }

    /// Woken by another leg: drain every home leg on this channel.
    pub(super) fn conflux_drain_all(&mut self) {
        let homes: Vec<u32> = self
            .circuits
            .iter()
            .filter(|(_, e)| e.leg.as_ref().is_some_and(|l| l.home))
            .map(|(id, _)| *id)
            .collect();
        for id in homes {
            self.conflux_drain(id);
        }
    }
}
