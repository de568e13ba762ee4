//! The client's side of conflux (proposal 329) on one circuit: LINK to
//! the exit, its LINKED (answered with LINKED_ACK at once, as tor does)
//! and SWITCH, and the stream messages of a linked leg, which belong to
//! the set rather than to this circuit.

use onionmix_cell::relay::Nonce;

use super::*;
use crate::conflux::should_multiplex;

/// Where a circuit stands in conflux.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LegState {
    /// Not a conflux circuit.
    None,
    /// CONFLUX_LINK with this nonce sent; LINKED awaited.
    LinkSent(Nonce),
    /// A leg of a linked set.
    Linked,
}

impl ClientCircuit {
    /// Build the CONFLUX_LINK to the last hop. Only on a circuit of more
    /// than one hop whose exit runs congestion control (tor's conflux
    /// requires it), with no stream and no LINK before.
    pub fn conflux_link(&mut self, link: &ConfluxLink) -> Result<OutCell, CircError> {
        if self.conflux != LegState::None {
            return Err(CircError::Protocol("CONFLUX_LINK already sent"));
        }
        if self.hops.len() < 2 || !self.is_cc() || self.extending || !self.streams.is_empty() {
            return Err(CircError::Protocol(
                "conflux needs an idle multi-hop circuit with congestion control",
            ));
        }
        let last = self.hops.len() - 1;
        let cell = self.out(last, RelayCmd::CONFLUX_LINK, 0, &link.encode(), false)?;
        self.conflux = LegState::LinkSent(link.nonce);
        Ok(cell)
    }

    /// The set was formed: from now on this circuit's stream messages
    /// are the set's.
    pub fn set_conflux_leg(&mut self) -> Result<(), CircError> {
        match self.conflux {
            LegState::LinkSent(_) => {
                self.conflux = LegState::Linked;
                Ok(())
            }
            _ => Err(CircError::Protocol("no CONFLUX_LINKED on this circuit")),
        }
    }

    /// Whether the circuit is a leg of a linked set.
    pub fn is_conflux_leg(&self) -> bool {
        self.conflux == LegState::Linked
    }

    /// A multiplexed message of the set, delivered in order, for this
    /// circuit's streams (the set keeps them on one leg): as if it came
    /// from our last hop.
    pub fn handle_conflux_msg(
        &mut self,
        cmd: RelayCmd,
        sid: u16,
        data: &[u8],
        now: Instant,
        events: &mut Vec<CircEvent>,
    ) -> Result<(), CircError> {
        if self.closed {
            return Ok(());
        }
        let msg = RelayMsg::parse(cmd, data)?;
        let last = self.hops.len() - 1;
        self.stream_msg(last, sid, msg, now, events)
    }

    /// Conflux handling of a decoded inbound message from `hop`: true when
    /// it was taken here (LINKED, SWITCH, a leg's stream messages).
    #[allow(clippy::too_many_arguments)]
    pub(super) fn conflux_intercept(
        &mut self,
        hop: usize,
        sid: u16,
        msg: &RelayMsg<'_>,
        data: &[u8],
        digest: [u8; 20],
        events: &mut Vec<CircEvent>,
        out: &mut Vec<OutCell>,
    ) -> Result<bool, CircError> {
        let last = self.hops.len() - 1;
        match msg {
            RelayMsg::ConfluxLinked(l) => {
                // tor's conflux_process_linked checks.
                let LegState::LinkSent(nonce) = self.conflux else {
                    return Err(CircError::Protocol("CONFLUX_LINKED without a LINK"));
                };
                if hop != last {
                    return Err(CircError::Protocol("CONFLUX_LINKED from a middle hop"));
                }
                if l.nonce != nonce {
                    return Err(CircError::Protocol("CONFLUX_LINKED for another nonce"));
                }
                out.push(self.out(last, RelayCmd::CONFLUX_LINKED_ACK, 0, &[], false)?);
                events.push(CircEvent::ConfluxLinked(*l));
                return Ok(true);
            }
            RelayMsg::ConfluxSwitch(seq) => {
                if self.conflux != LegState::Linked || hop != last {
                    return Err(CircError::Protocol("CONFLUX_SWITCH off a linked leg"));
                }
                events.push(CircEvent::ConfluxSwitch(*seq));
                return Ok(true);
            }
            _ => {}
        }
        let cmd = msg.cmd();
        if self.conflux != LegState::Linked || !should_multiplex(cmd) {
            return Ok(false);
        }
        if hop != last {
            return Err(CircError::Protocol(
                "conflux stream message from a middle hop",
            ));
        }
        match cmd {
            RelayCmd::BEGIN | RelayCmd::RESOLVE => {
                return Err(CircError::Protocol("forward-only relay command from a hop"));
            }
            RelayCmd::DATA => {
                if sid == 0 {
                    return Err(CircError::Protocol("DATA on stream 0"));
                }
                self.count_data(hop, digest, out)?;
            }
            _ => {}
        }
        events.push(CircEvent::Multiplexed {
            cmd,
            stream: sid,
            data: data.to_vec(),
        });
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;
    use crate::client_circ::testutil::{self, Xor, at_hop};
    use onionmix_cell::relay::conflux::ux;

    const KEYS: [u8; 3] = [3, 5, 9];

    /// A three-hop circuit whose exit agreed to congestion control.
    fn cc_circuit() -> ClientCircuit {
        let mut c = ClientCircuit::new(Box::new(Xor(KEYS[0])), Default::default());
        c.add_hop(Box::new(Xor(KEYS[1])), None);
        c.add_hop(Box::new(Xor(KEYS[2])), Some(31));
        c
    }

    fn link(n: u8) -> ConfluxLink {
        ConfluxLink {
            nonce: Nonce([n; 32]),
            last_seqno_sent: 0,
            last_seqno_recv: 0,
            desired_ux: ux::HIGH_THROUGHPUT,
        }
    }

    fn feed(
        c: &mut ClientCircuit,
        hop: usize,
        cmd: RelayCmd,
        sid: u16,
        data: &[u8],
    ) -> Result<(Vec<CircEvent>, Vec<OutCell>), CircError> {
        testutil::feed(c, &KEYS, hop, cmd, sid, data)
    }

    /// A circuit that sent LINK with nonce 7 and got LINKED.
    fn linked() -> ClientCircuit {
        let mut c = cc_circuit();
        c.conflux_link(&link(7)).unwrap();
        feed(&mut c, 2, RelayCmd::CONFLUX_LINKED, 0, &link(7).encode()).unwrap();
        c.set_conflux_leg().unwrap();
        c
    }

    #[test]
    fn link_only_on_an_idle_congestion_controlled_circuit() {
        let mut fixed = ClientCircuit::new(Box::new(Xor(3)), Default::default());
        fixed.add_hop(Box::new(Xor(5)), None);
        assert!(
            fixed.conflux_link(&link(1)).is_err(),
            "no congestion control"
        );
        let mut c = cc_circuit();
        let cell = c.conflux_link(&link(1)).unwrap();
        let seen = at_hop(&KEYS, 2, &cell);
        let (_, msg) = RelayMsg::decode(&seen).unwrap();
        assert_eq!(msg, RelayMsg::ConfluxLink(link(1)));
        assert!(c.conflux_link(&link(1)).is_err(), "second LINK");
        assert!(c.set_conflux_leg().is_ok());
        assert!(c.is_conflux_leg());
    }

    #[test]
    fn linked_is_checked_as_tor_checks_it_and_acked_at_once() {
        // Without a LINK.
        let mut c = cc_circuit();
        assert!(feed(&mut c, 2, RelayCmd::CONFLUX_LINKED, 0, &link(7).encode()).is_err());
        // Another nonce (a confirmation attack across sets).
        let mut c = cc_circuit();
        c.conflux_link(&link(7)).unwrap();
        assert!(feed(&mut c, 2, RelayCmd::CONFLUX_LINKED, 0, &link(8).encode()).is_err());
        // From a middle hop.
        let mut c = cc_circuit();
        c.conflux_link(&link(7)).unwrap();
        assert!(feed(&mut c, 1, RelayCmd::CONFLUX_LINKED, 0, &link(7).encode()).is_err());
        // The right one: an event and LINKED_ACK to the exit.
        let mut c = cc_circuit();
        c.conflux_link(&link(7)).unwrap();
        let (ev, out) = feed(&mut c, 2, RelayCmd::CONFLUX_LINKED, 0, &link(7).encode()).unwrap();
        assert_eq!(ev, vec![CircEvent::ConfluxLinked(link(7))]);
        let ack = at_hop(&KEYS, 2, &out[0]);
        assert_eq!(relay::header(&ack).cmd, RelayCmd::CONFLUX_LINKED_ACK);
        // SWITCH before the set is formed.
        assert!(feed(&mut c, 2, RelayCmd::CONFLUX_SWITCH, 0, &[0, 0, 0, 1]).is_err());
    }

    #[test]
    fn a_legs_stream_messages_go_to_the_set() {
        let mut c = linked();
        let (ev, _) = feed(&mut c, 2, RelayCmd::CONFLUX_SWITCH, 0, &[0, 0, 0, 31]).unwrap();
        assert_eq!(ev, vec![CircEvent::ConfluxSwitch(31)]);
        // DATA for a stream this leg never opened: the set's; it still
        // counts for this circuit's SENDMEs.
        let mut sendmes = 0;
        for _ in 0..31 {
            let (ev, out) = feed(&mut c, 2, RelayCmd::DATA, 9, b"abc").unwrap();
            assert_eq!(
                ev,
                vec![CircEvent::Multiplexed {
                    cmd: RelayCmd::DATA,
                    stream: 9,
                    data: b"abc".to_vec()
                }]
            );
            sendmes += out.len();
        }
        assert_eq!(sendmes, 1);
        // From a middle hop, or forward-only: refused.
        assert!(feed(&mut c, 1, RelayCmd::DATA, 9, b"x").is_err());
        let mut c = linked();
        assert!(feed(&mut c, 2, RelayCmd::RESOLVE, 9, b"example.com\0").is_err());
        // SWITCH from a middle hop.
        let mut c = linked();
        assert!(feed(&mut c, 1, RelayCmd::CONFLUX_SWITCH, 0, &[0, 0, 0, 1]).is_err());
    }

    #[test]
    fn the_home_leg_takes_the_sets_messages_in_order() {
        let mut c = linked();
        let (sid, _) = c
            .begin(&onionmix_cell::relay::Begin {
                host: onionmix_cell::relay::TargetHost::Hostname("example.com".into()),
                port: 80,
                flags: 0,
            })
            .unwrap();
        let mut ev = Vec::new();
        let now = Instant::now();
        c.handle_conflux_msg(RelayCmd::CONNECTED, sid, &[], now, &mut ev)
            .unwrap();
        c.handle_conflux_msg(RelayCmd::DATA, sid, b"hello", now, &mut ev)
            .unwrap();
        c.handle_conflux_msg(RelayCmd::END, sid, &[6], now, &mut ev)
            .unwrap();
        assert_eq!(
            ev,
            vec![
                CircEvent::Connected {
                    stream: sid,
                    addr: None
                },
                CircEvent::Data {
                    stream: sid,
                    data: b"hello".to_vec()
                },
                CircEvent::End {
                    stream: sid,
                    reason: 6
                },
            ]
        );
        // Data for a stream that is gone is counted, as on any circuit.
        c.handle_conflux_msg(RelayCmd::DATA, sid, b"late", now, &mut ev)
            .unwrap();
        assert!(c.stats().half_closed_valid + c.stats().invalid_cells >= 1);
    }
}
