//! Onion-service plumbing in the client channel reactor: circuit-level
//! onion-service messages out (ESTABLISH_INTRO, ESTABLISH_RENDEZVOUS,
//! INTRODUCE1, RENDEZVOUS1) and in (INTRO_ESTABLISHED, INTRODUCE2,
//! INTRODUCE_ACK, RENDEZVOUS_ESTABLISHED, RENDEZVOUS2), the virtual hop,
//! and the streams a client opens on a service's rendezvous circuit.
//!
//! A driver registers a listener per circuit ([`HsCommand::Listen`]); the
//! reactor forwards that circuit's onion-service messages and incoming
//! streams to it through a bounded queue. When the circuit ends the
//! listener's queue closes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::mpsc;
use tracing::debug;

use onionmix_cell::relay::{RelayCmd, end_reason};
use onionmix_proto::client_circ::CircEvent;
use onionmix_proto::layer::ClientLayer;

use super::{Reactor, Reply, STREAM_EVENT_QUEUE, StreamEvent, StreamSink};
use crate::gate::StreamGate;

/// Depth of a circuit's onion-service event queue. An introduction
/// circuit's INTRODUCE2 cells beyond it are dropped (the client retries),
/// incoming streams beyond it refused with RESOURCELIMIT.
pub const HS_EVENT_QUEUE: usize = 64;

/// An onion-service virtual hop to add to a circuit (rend-spec-v3 §4.2).
pub struct VirtualHop {
    /// The end-to-end layer.
    pub layer: Box<dyn ClientLayer>,
    /// Accept BEGIN from it (the service side).
    pub accept_incoming: bool,
    /// Congestion control with this SENDME increment (both ends agreed
    /// through the descriptor and INTRODUCE, proposal 324 §9), or the
    /// fixed windows.
    pub cc_sendme_inc: Option<u8>,
}

/// Onion-service commands into a channel reactor.
pub enum HsCommand {
    /// Deliver this circuit's onion-service messages and incoming streams
    /// to `events` (replacing any earlier listener).
    Listen {
        /// Circuit.
        circ_id: u32,
        /// Where to deliver.
        events: mpsc::Sender<HsEvent>,
    },
    /// Send an onion-service message to the last hop; then, if given, add
    /// the virtual hop in the same step (so nothing from the far end can
    /// arrive in between) and accept streams from it if the flag is set.
    Send {
        /// Circuit.
        circ_id: u32,
        /// Relay command (32-40).
        cmd: RelayCmd,
        /// Body.
        data: Vec<u8>,
        /// The virtual hop to add after sending.
        then_add_hop: Option<VirtualHop>,
        /// Reply once queued (or why not).
        reply: Reply<()>,
    },
    /// Add the virtual hop (the client, after RENDEZVOUS2).
    AddVirtualHop {
        /// Circuit.
        circ_id: u32,
        /// The hop.
        hop: VirtualHop,
    },
    /// Accept a stream announced by [`HsEvent::IncomingStream`] (sends
    /// CONNECTED). Refuse one with [`super::ChanCommand::EndStream`].
    AcceptStream {
        /// Circuit.
        circ_id: u32,
        /// Stream.
        stream: u16,
    },
}

/// What a listener receives.
#[derive(Debug)]
pub enum HsEvent {
    /// An onion-service message from hop `hop`.
    Msg {
        /// The hop (0 = first).
        hop: usize,
        /// Relay command.
        cmd: RelayCmd,
        /// Body.
        data: Vec<u8>,
    },
    /// The far end opened a stream (service side). Its events already
    /// flow into `events`; accept or refuse it.
    IncomingStream {
        /// Stream ID.
        stream: u16,
        /// Requested (virtual) port.
        port: u16,
        /// The stream's events (data may arrive before acceptance).
        events: mpsc::Receiver<StreamEvent>,
        /// The stream's send gate.
        gate: Arc<StreamGate>,
    },
}

impl Reactor {
    pub(super) fn handle_hs_cmd(&mut self, cmd: HsCommand) {
        match cmd {
            HsCommand::Listen { circ_id, events } => {
                if let Some(e) = self.circuits.get_mut(&circ_id) {
                    e.hs = Some(events);
                }
            }
            HsCommand::Send {
                circ_id,
                cmd,
                data,
                then_add_hop,
                reply,
            } => {
                let Some(e) = self.circuits.get_mut(&circ_id) else {
                    let _ = reply.send(Err(super::ReactorError::CircuitDestroyed(
                        onionmix_cell::chan::destroy_reason::NONE,
                    )));
                    return;
                };
                match e.circ.send_hs(cmd, &data) {
                    Ok(cell) => {
                        if let Some(hop) = then_add_hop {
                            self.add_virtual_hop(circ_id, hop);
                        }
                        self.out_cells.push(cell);
                        self.send_out_cells(circ_id);
                        let _ = reply.send(Ok(()));
                    }
                    Err(err) => {
                        let _ = reply.send(Err(super::ReactorError::Circuit(err.to_string())));
                    }
                }
            }
            HsCommand::AddVirtualHop { circ_id, hop } => self.add_virtual_hop(circ_id, hop),
            HsCommand::AcceptStream { circ_id, stream } => {
                let Some(e) = self.circuits.get_mut(&circ_id) else {
                    return;
                };
                match e.circ.accept_stream(stream) {
                    Ok(cell) => {
                        self.out_cells.push(cell);
                        self.send_out_cells(circ_id);
                    }
                    Err(err) => debug!("cannot accept stream {stream}: {err}"),
                }
            }
        }
    }

    fn add_virtual_hop(&mut self, circ_id: u32, hop: VirtualHop) {
        let Some(e) = self.circuits.get_mut(&circ_id) else {
            return;
        };
        e.circ.add_onion_hop(hop.layer, hop.cc_sendme_inc);
        e.circ.set_accept_incoming(hop.accept_incoming);
        if hop.cc_sendme_inc.is_some() {
            self.stats.cc_circuits.fetch_add(1, Ordering::Relaxed);
        }
    }

    pub(super) fn dispatch_hs(&mut self, circ_id: u32, ev: CircEvent) {
        let Some(e) = self.circuits.get_mut(&circ_id) else {
            return;
        };
        match ev {
            CircEvent::Hs { hop, cmd, data } => {
                let delivered =
                    e.hs.as_ref()
                        .is_some_and(|l| l.try_send(HsEvent::Msg { hop, cmd, data }).is_ok());
                if !delivered {
                    debug!("dropping an onion-service message ({cmd:?}) nobody waits for");
                }
            }
            CircEvent::IncomingStream { stream, port } => {
                let (tx, rx) = mpsc::channel(STREAM_EVENT_QUEUE);
                let gate = Arc::new(StreamGate::for_circuit(e.circ.is_cc()));
                let ev = HsEvent::IncomingStream {
                    stream,
                    port,
                    events: rx,
                    gate: gate.clone(),
                };
                let delivered = e.hs.as_ref().is_some_and(|l| l.try_send(ev).is_ok());
                if delivered {
                    e.streams.insert(
                        stream,
                        StreamSink {
                            events: tx,
                            gate,
                            buffered: 0,
                            queued: 0,
                            end_after_flush: None,
                        },
                    );
                } else if let Ok(cell) =
                    e.circ
                        .end_stream(stream, end_reason::RESOURCELIMIT, Instant::now())
                {
                    self.out_cells.push(cell);
                    self.send_out_cells(circ_id);
                }
            }
            _ => {}
        }
    }
}
