//! Stream messages arriving on a client circuit (or, for a conflux set,
//! delivered in order by the set): DATA, CONNECTED, END, RESOLVED, XON,
//! XOFF.

use super::*;

impl ClientCircuit {
    /// A stream message (DATA, already counted; CONNECTED, END, RESOLVED,
    /// XON, XOFF) from `hop` for stream `sid`.
    pub(super) fn stream_msg(
        &mut self,
        hop: usize,
        sid: u16,
        msg: RelayMsg<'_>,
        now: Instant,
        events: &mut Vec<CircEvent>,
    ) -> Result<(), CircError> {
        // A stream message from a hop other than the stream's is a
        // protocol violation.
        if sid != 0
            && let Some(s) = self.streams.get(&sid)
            && s.hop != hop
        {
            return Err(CircError::Protocol("stream cell from the wrong hop"));
        }
        match msg {
            RelayMsg::Data(d) => {
                if sid == 0 {
                    return Err(CircError::Protocol("DATA on stream 0"));
                }
                if let Some(s) = self.streams.get_mut(&sid) {
                    if !matches!(s.kind, StreamKind::Open | StreamKind::Incoming) {
                        return Err(CircError::Protocol("DATA before CONNECTED"));
                    }
                    s.rx.on_data()?;
                    events.push(CircEvent::Data {
                        stream: sid,
                        data: d.to_vec(),
                    });
                } else {
                    let v = self.half.on_data(sid, now);
                    self.note_half(v);
                }
            }
            RelayMsg::Xoff | RelayMsg::Xon(_) => {
                let Some(s) = self.streams.get_mut(&sid) else {
                    let v = self.half.on_xon_xoff(sid, now);
                    self.note_half(v);
                    return Ok(());
                };
                let valid = match msg {
                    RelayMsg::Xon(x) => {
                        let v = s.tx.on_xon(x.kbps_ewma)?;
                        self.stats.xon_received += 1;
                        events.push(CircEvent::Xon {
                            stream: sid,
                            kbps: x.kbps_ewma,
                        });
                        v
                    }
                    _ => {
                        let v = s.tx.on_xoff()?;
                        self.stats.xoff_received += 1;
                        events.push(CircEvent::Xoff { stream: sid });
                        v
                    }
                };
                if !valid {
                    self.stats.early_xon_xoff += 1;
                }
            }
            RelayMsg::Connected(c) => {
                if let Some(s) = self.streams.get_mut(&sid) {
                    if s.kind != StreamKind::Connecting {
                        return Err(CircError::Protocol("unexpected CONNECTED"));
                    }
                    s.kind = StreamKind::Open;
                    events.push(CircEvent::Connected {
                        stream: sid,
                        addr: c.addr.map(|(a, _)| a),
                    });
                } else {
                    let v = self.half.on_connected(sid);
                    self.note_half(v);
                }
            }
            RelayMsg::End(e) => {
                if self.streams.remove(&sid).is_some() {
                    events.push(CircEvent::End {
                        stream: sid,
                        reason: e.reason,
                    });
                } else {
                    let v = self.half.on_end(sid);
                    self.note_half(v);
                }
            }
            RelayMsg::Resolved(answers) => {
                if let Some(s) = self.streams.remove(&sid) {
                    if s.kind != StreamKind::Resolving {
                        return Err(CircError::Protocol("unexpected RESOLVED"));
                    }
                    events.push(CircEvent::Resolved {
                        stream: sid,
                        answers,
                    });
                } else {
                    let v = self.half.on_end(sid);
                    self.note_half(v);
                }
            }
            _ => return Err(CircError::Protocol("not a stream message")),
        }
        Ok(())
    }
}
