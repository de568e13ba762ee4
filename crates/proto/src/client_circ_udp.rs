//! UDP streams on the origin side of a circuit (proposal 339, as
//! docs/udp-over-tor.md describes): CONNECT_UDP to the last hop, then one
//! DATAGRAM message per datagram each way. Datagrams count in the
//! circuit's window (or congestion window) like DATA, and SENDMEs follow
//! from them the same way; a UDP stream has no stream window and no
//! XON/XOFF. A datagram the circuit's window cannot take now is dropped
//! (UDP may lose packets; a queue would only add delay); once sent, it is
//! never dropped on the way.

use std::time::Instant;

use onionmix_cell::relay::{ConnectUdp, ConnectedUdp, RelayCmd};
use onionmix_cell::{CellError, RELAY_DATA_LEN};

use super::{CircError, CircEvent, ClientCircuit, OutCell, StreamKind};

impl ClientCircuit {
    /// Open a UDP stream at the last hop (an exit that advertises
    /// `Datagram=1`).
    pub fn connect_udp(&mut self, c: &ConnectUdp) -> Result<(u16, OutCell), CircError> {
        let body = c.encode()?;
        self.open_stream(StreamKind::ConnectingUdp, RelayCmd::CONNECT_UDP, &body)
    }

    /// One datagram on UDP stream `sid` at `now` (optimistic datagrams
    /// before CONNECTED_UDP are allowed, as for DATA). `Ok(None)`: the
    /// circuit's window is closed and the datagram is dropped.
    pub fn send_datagram(
        &mut self,
        sid: u16,
        data: &[u8],
        now: Instant,
    ) -> Result<Option<OutCell>, CircError> {
        let hop = match self.streams.get(&sid) {
            Some(s) if matches!(s.kind, StreamKind::ConnectingUdp | StreamKind::OpenUdp) => s.hop,
            Some(_) => return Err(CircError::Protocol("DATAGRAM on a TCP stream")),
            None => return Err(CircError::NoSuchStream(sid)),
        };
        if data.len() > RELAY_DATA_LEN {
            return Err(CircError::Cell(CellError::DoesNotFit("DATAGRAM")));
        }
        if self.closed || !self.hops[hop].send.can_send() {
            return Ok(None);
        }
        let (body, tag) = self.seal(hop, RelayCmd::DATAGRAM, sid, data)?;
        self.hops[hop].send.on_sent(tag, now);
        Ok(Some(OutCell { early: false, body }))
    }

    /// CONNECTED_UDP arrived on `sid`.
    pub(super) fn on_connected_udp(
        &mut self,
        sid: u16,
        c: ConnectedUdp,
        events: &mut Vec<CircEvent>,
    ) -> Result<(), CircError> {
        match self.streams.get_mut(&sid) {
            Some(s) if s.kind == StreamKind::ConnectingUdp => {
                s.kind = StreamKind::OpenUdp;
                events.push(CircEvent::ConnectedUdp {
                    stream: sid,
                    ours: c.ours,
                    theirs: c.theirs,
                });
                Ok(())
            }
            Some(_) => Err(CircError::Protocol("unexpected CONNECTED_UDP")),
            None => {
                let v = self.half.on_connected(sid);
                self.note_half(v);
                Ok(())
            }
        }
    }

    /// A DATAGRAM arrived on `sid` (already counted in the circuit's
    /// window by the caller).
    pub(super) fn on_datagram(
        &mut self,
        sid: u16,
        d: &[u8],
        events: &mut Vec<CircEvent>,
    ) -> Result<(), CircError> {
        match self.streams.get(&sid) {
            Some(s) if s.kind == StreamKind::OpenUdp => {
                events.push(CircEvent::Datagram {
                    stream: sid,
                    data: d.to_vec(),
                });
                Ok(())
            }
            Some(_) => Err(CircError::Protocol("DATAGRAM on a stream not open for UDP")),
            None => {
                // In flight when we ended the stream: counted, ignored.
                self.stats.half_closed_valid += 1;
                Ok(())
            }
        }
    }
}
