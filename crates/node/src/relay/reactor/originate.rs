//! Cells this relay originates on a circuit towards the client (ENDs,
//! CONNECTEDs, DATA from exit streams), encrypted and queued under the
//! circuit's lock, and a circuit's sending side (congestion control and
//! the channel's blocked signal).

use std::time::Instant;

use bytes::BytesMut;
use rand::Rng;

use onionmix_cell::PAYLOAD_LEN;
use onionmix_cell::chan::ChanCmd as Cmd;
use onionmix_cell::relay::{self, RelayCmd};
use onionmix_link::ChannelWriter;
use onionmix_proto::cc::{CcParams, CcPath, ChanSignal, CircSender};

use super::{RelayChanHandle, SharedCirc, lock};

/// An unencrypted relay cell body (random padding); `None` if `data` does
/// not fit.
fn plain_cell(cmd: RelayCmd, sid: u16, data: &[u8]) -> Option<[u8; PAYLOAD_LEN]> {
    let mut body = [0u8; PAYLOAD_LEN];
    let mut rng = rand::thread_rng();
    relay::write(&mut body, cmd, sid, data, |p| rng.fill(p)).ok()?;
    Some(body)
}

/// Encrypt a cell originated at this relay towards the client and queue it
/// on the client-side channel, inside the circuit lock so that cells from
/// the reactor and from exit streams keep the order they were encrypted in.
/// Returns whether the channel took it. DATA goes through
/// [`try_originate_data`] instead.
pub fn originate_backward(
    shared: &SharedCirc,
    chan: &RelayChanHandle,
    circ_id: u32,
    cmd: RelayCmd,
    sid: u16,
    data: &[u8],
) -> bool {
    let Some(mut body) = plain_cell(cmd, sid, data) else {
        return false;
    };
    let mut buf = BytesMut::with_capacity(onionmix_cell::CELL_LEN);
    let mut g = lock(shared);
    g.layer.originate_backward(&mut body);
    chan.codec
        .encode_fixed(circ_id, Cmd::RELAY, &body, &mut buf);
    chan.writer.send_now(buf)
}

/// What became of an attempt to send a DATA cell.
#[derive(Debug, Clone)]
pub enum DataSend {
    /// Encrypted and queued on the client's channel.
    Sent,
    /// The circuit's window (or congestion window) is closed: wait for a
    /// SENDME (the circuit's `window_open` notification) and try again.
    WindowClosed,
    /// Every conflux leg with room in its window has a full channel: wait
    /// for this one to drain (or a window to open) and try again.
    ChanFull(ChannelWriter),
    /// The circuit or channel is gone.
    Closed,
}

/// Send one DATA cell towards the client if the circuit's window allows,
/// checking and accounting for it (SENDME digest, congestion window) in
/// the same critical section as the encryption.
pub fn try_originate_data(
    shared: &SharedCirc,
    chan: &RelayChanHandle,
    circ_id: u32,
    sid: u16,
    data: &[u8],
) -> DataSend {
    try_originate_counted(shared, chan, circ_id, RelayCmd::DATA, sid, data)
}

/// [`try_originate_data`] for any message the circuit's window counts
/// (DATA, DATAGRAM).
pub fn try_originate_counted(
    shared: &SharedCirc,
    chan: &RelayChanHandle,
    circ_id: u32,
    cmd: RelayCmd,
    sid: u16,
    data: &[u8],
) -> DataSend {
    let Some(mut body) = plain_cell(cmd, sid, data) else {
        return DataSend::Closed;
    };
    let mut buf = BytesMut::with_capacity(onionmix_cell::CELL_LEN);
    let mut g = lock(shared);
    if g.closed {
        return DataSend::Closed;
    }
    if !g.sender.can_send() {
        return DataSend::WindowClosed;
    }
    let tag = g.layer.originate_backward(&mut body);
    g.sender.on_sent(tag, Instant::now());
    chan.codec
        .encode_fixed(circ_id, Cmd::RELAY, &body, &mut buf);
    if chan.writer.send_now(buf) {
        DataSend::Sent
    } else {
        DataSend::Closed
    }
}

/// Whether `writer`'s queue for circuit `circ_id` counts as blocked for
/// congestion control (on TLS the channel's whole queue, on QUIC the
/// circuit stream's).
pub fn chan_signal(writer: &ChannelWriter, circ_id: u32, p: &CcParams) -> ChanSignal {
    let queued = writer.circuit_queued_bytes(circ_id);
    ChanSignal {
        blocked: queued > p.chan_blocked_bytes(),
        queued_cells: (queued / onionmix_cell::CELL_LEN) as u64,
    }
}

/// A new circuit's sending side: congestion control with `cc_sendme_inc`
/// if negotiated, else the fixed window.
pub fn new_sender(p: &CcParams, cc_sendme_inc: Option<u8>) -> CircSender {
    match cc_sendme_inc {
        Some(inc) => CircSender::vegas(p, CcPath::Exit, inc),
        None => CircSender::fixed(p.sendme_accept_min_version),
    }
}
