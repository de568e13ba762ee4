//! The streams of an exit circuit, or of a conflux set whose legs end at
//! this exit: which stream IDs are open, and their receive-side flow
//! control (stream windows, or XON/XOFF with congestion control).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use onionmix_cell::relay::RelayMsg;

use super::{Inbound, RelayCircError};
use crate::cc::CcParams;
use crate::xonxoff::{FlowRx, StreamFlowMsg, StreamRx};

/// Most streams on one exit circuit (or conflux set).
pub const MAX_EXIT_STREAMS: usize = 512;

#[derive(Debug)]
struct ExitStream {
    rx: StreamRx,
    /// A UDP stream (DATAGRAM, no stream window).
    udp: bool,
}

/// Open exit streams and their flow state.
#[derive(Debug)]
pub struct ExitStreams {
    streams: HashMap<u16, ExitStream>,
    cc: Option<Arc<CcParams>>,
    /// New streams and resolves, for the stream-creation DoS defence.
    pub dos: crate::dos_stream::StreamBucket,
}

impl ExitStreams {
    /// No streams yet; `cc` holds the parameters when the circuit (every
    /// leg of a set) runs congestion control.
    pub fn new(cc: Option<Arc<CcParams>>) -> Self {
        ExitStreams {
            streams: HashMap::new(),
            cc,
            dos: Default::default(),
        }
    }

    /// Number of open streams.
    pub fn len(&self) -> usize {
        self.streams.len()
    }
    /// Whether no stream is open.
    pub fn is_empty(&self) -> bool {
        self.streams.is_empty()
    }

    /// Handle a stream message from the client (BEGIN, BEGIN_DIR, RESOLVE,
    /// DATA, END, XON, XOFF, CONNECT_UDP, DATAGRAM; a DATA or DATAGRAM cell
    /// was already counted in its circuit's deliver window). Anything else
    /// is refused.
    pub fn handle<'a>(
        &mut self,
        sid: u16,
        msg: RelayMsg<'a>,
    ) -> Result<Inbound<'a>, RelayCircError> {
        Ok(match msg {
            RelayMsg::Begin(b) => {
                self.check_new_stream(sid)?;
                Inbound::Begin {
                    stream: sid,
                    begin: b,
                }
            }
            RelayMsg::BeginDir => {
                self.check_new_stream(sid)?;
                Inbound::BeginDir { stream: sid }
            }
            RelayMsg::ConnectUdp(c) => {
                self.check_new_stream(sid)?;
                if let Some(s) = self.streams.get_mut(&sid) {
                    s.udp = true;
                }
                Inbound::ConnectUdp {
                    stream: sid,
                    connect: c,
                }
            }
            RelayMsg::Datagram(d) => match self.streams.get(&sid) {
                Some(s) if s.udp => Inbound::Datagram {
                    stream: sid,
                    data: d,
                },
                Some(_) => {
                    return Err(RelayCircError::Protocol("DATAGRAM on a TCP stream"));
                }
                None => Inbound::Nothing,
            },
            RelayMsg::Resolve(name) => {
                // A lookup is a stream until its RESOLVED is sent: counted
                // against the circuit's streams, never on a live ID.
                self.check_new_stream(sid)?;
                Inbound::Resolve { stream: sid, name }
            }
            RelayMsg::Data(d) => {
                if sid == 0 {
                    return Err(RelayCircError::Protocol("DATA with stream 0"));
                }
                match self.streams.get_mut(&sid) {
                    Some(s) if s.udp => {
                        return Err(RelayCircError::Protocol("DATA on a UDP stream"));
                    }
                    Some(s) => {
                        s.rx.on_data()?;
                        Inbound::Data {
                            stream: sid,
                            data: d,
                        }
                    }
                    None => Inbound::Nothing,
                }
            }
            RelayMsg::End(e) => {
                self.streams.remove(&sid);
                Inbound::End {
                    stream: sid,
                    reason: e.reason,
                }
            }
            RelayMsg::Xoff | RelayMsg::Xon(_) => {
                if self.cc.is_none() || sid == 0 {
                    return Err(crate::flow::FlowError::UnexpectedXonXoff.into());
                }
                if !self.streams.contains_key(&sid) {
                    Inbound::Nothing
                } else if let RelayMsg::Xon(x) = msg {
                    Inbound::Xon {
                        stream: sid,
                        kbps: x.kbps_ewma,
                    }
                } else {
                    Inbound::Xoff { stream: sid }
                }
            }
            _ => return Err(RelayCircError::Protocol("not a stream message")),
        })
    }

    /// A stream ended from the exit side (connect failed, target closed).
    pub fn stream_closed(&mut self, sid: u16) {
        self.streams.remove(&sid);
    }

    /// Data for `sid` was queued towards its target: `buffered` bytes wait.
    /// With congestion control this may call for an XOFF.
    pub fn stream_buffered(
        &mut self,
        sid: u16,
        buffered: usize,
        now: Instant,
    ) -> Option<StreamFlowMsg> {
        self.streams
            .get_mut(&sid)
            .and_then(|s| s.rx.on_buffered(buffered, now))
    }

    /// The target took `cells` cells (`bytes` bytes) of `sid`; `buffered`
    /// bytes remain. Stream SENDMEs or XONs to send are appended to `out`.
    pub fn stream_drained(
        &mut self,
        sid: u16,
        cells: u32,
        bytes: usize,
        buffered: usize,
        now: Instant,
        out: &mut Vec<StreamFlowMsg>,
    ) {
        if let Some(s) = self.streams.get_mut(&sid) {
            s.rx.on_drained(cells, bytes, buffered, now, out);
        }
    }

    fn check_new_stream(&mut self, sid: u16) -> Result<(), RelayCircError> {
        if sid == 0 {
            return Err(RelayCircError::Protocol("stream ID 0"));
        }
        if self.streams.contains_key(&sid) {
            return Err(RelayCircError::Protocol("duplicate stream ID"));
        }
        if self.streams.len() >= MAX_EXIT_STREAMS {
            return Err(RelayCircError::Protocol("too many streams"));
        }
        let rx = match &self.cc {
            Some(p) => StreamRx::Flow(FlowRx::new(p, false)),
            None => StreamRx::window(),
        };
        self.streams.insert(sid, ExitStream { rx, udp: false });
        Ok(())
    }
}
