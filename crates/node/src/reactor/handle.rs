//! The client channel reactor's interface: the handle other tasks hold,
//! the commands they send, the events streams receive, and the counters.

use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use bytes::Bytes;
use tokio::sync::{Semaphore, mpsc, oneshot};

use onionmix_cell::chan::{Create2, Created2, destroy_reason};
use onionmix_cell::relay::{Begin, ConnectUdp, Extend2, ResolvedAnswer};
use onionmix_proto::cc::{CcParams, CcSnapshot};
use onionmix_proto::client_circ::CircStats;
use onionmix_proto::flow::STREAM_WINDOW_START;
use onionmix_proto::layer::ClientLayer;
use onionmix_proto::xonxoff::STREAM_BUFFER_EXTRA_CELLS;

use crate::gate::StreamGate;

/// Most circuits one client channel carries.
pub const MAX_CIRCUITS_PER_CHANNEL: usize = 4096;
/// Depth of the command queue into a reactor.
pub(super) const CMD_QUEUE: usize = 1024;
/// DATA cells a stream on a plain circuit may hold for its application: a
/// full stream window, or the XOFF threshold plus what an exit in slow
/// start may still have in flight when our XOFF reaches it. A peer that
/// respects flow control never passes it; one that does not loses the
/// stream.
pub const STREAM_PLAIN_CELLS: usize = STREAM_WINDOW_START as usize + STREAM_BUFFER_EXTRA_CELLS;
/// DATA cells a stream on a conflux set may hold: the above plus
/// everything the set may hand over at once. The set's other leg takes
/// cells (and answers them with circuit SENDMEs) on another channel's
/// reactor; the home reactor sees them, and can send XOFF, only when it
/// drains the set's delivery queue (at most `MAX_DELIVERY` messages), so
/// an exit that honours every XOFF can still put that many in one burst.
/// (With 5,500 cells, 100 MB/s downloads over QUIC links on loopback lost
/// their streams whenever the home reactor drained some 30 ms late.)
pub const STREAM_SET_CELLS: usize = STREAM_PLAIN_CELLS + crate::client::conflux::MAX_DELIVERY;
/// Depth of a stream's inbound event queue: the larger cell bound plus
/// the control events. Slots are allocated as used, not up front.
pub const STREAM_EVENT_QUEUE: usize = STREAM_SET_CELLS + 16;
const _: () =
    assert!(STREAM_EVENT_QUEUE > STREAM_SET_CELLS && STREAM_SET_CELLS > STREAM_PLAIN_CELLS);

/// Whether a stream holding `queued` DATA cells for its application may
/// take one more (`on_set`: its circuit is a leg of a conflux set).
pub fn stream_may_queue(queued: usize, on_set: bool) -> bool {
    queued
        < if on_set {
            STREAM_SET_CELLS
        } else {
            STREAM_PLAIN_CELLS
        }
}
/// DATA cells a circuit may hold queued in its reactor, waiting for the
/// circuit's window (one TLS record's worth, times eight).
pub const CIRC_QUEUE_SLOTS: usize = 256;

/// Errors reported to callers of a channel.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ReactorError {
    /// The channel is closed.
    #[error("channel closed: {0}")]
    ChannelClosed(String),
    /// The circuit was destroyed.
    #[error("circuit destroyed ({})", destroy_reason::name(*.0))]
    CircuitDestroyed(u8),
    /// Something the circuit machine refused.
    #[error("circuit error: {0}")]
    Circuit(String),
    /// Too many circuits on this channel.
    #[error("too many circuits on this channel")]
    TooManyCircuits,
}

/// What the application side of a stream receives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEvent {
    /// CONNECTED.
    Connected(Option<IpAddr>),
    /// Data.
    Data(Bytes),
    /// END (or the circuit died: reason DESTROY).
    End(u8),
    /// RESOLVED.
    Resolved(Vec<ResolvedAnswer>),
    /// A datagram on a UDP stream (CONNECTED_UDP is [`Self::Connected`]
    /// with the target's address).
    Datagram(Bytes),
}

/// How to open a stream.
#[derive(Debug, Clone)]
pub enum StreamRequest {
    /// RELAY_BEGIN.
    Begin(Begin),
    /// RELAY_BEGIN_DIR.
    BeginDir,
    /// RELAY_RESOLVE of a name (or an in-addr.arpa name).
    Resolve(String),
    /// CONNECT_UDP (proposal 339; only to exits with `Datagram=1`).
    ConnectUdp(ConnectUdp),
}

pub(super) type Reply<T> = oneshot::Sender<Result<T, ReactorError>>;

/// Commands into a reactor.
pub enum ChanCommand {
    /// Send CREATE2 on a new circuit ID; reply with the ID and CREATED2.
    Create {
        /// The handshake.
        create2: Create2,
        /// Reply.
        reply: Reply<(u32, Created2)>,
    },
    /// Install the first hop's crypto on a created circuit.
    Install {
        /// Circuit.
        circ_id: u32,
        /// First hop.
        layer: Box<dyn ClientLayer>,
        /// Consensus parameters for the circuit.
        params: Arc<CcParams>,
        /// The circuit's queue slots (shared with stream writers).
        credits: Arc<Semaphore>,
    },
    /// Send EXTEND2; reply with EXTENDED2's body.
    Extend {
        /// Circuit.
        circ_id: u32,
        /// The message.
        msg: Extend2,
        /// Reply.
        reply: Reply<Created2>,
    },
    /// Add a hop after EXTENDED2.
    AddHop {
        /// Circuit.
        circ_id: u32,
        /// The hop's crypto.
        layer: Box<dyn ClientLayer>,
        /// The SENDME increment if the hop agreed to congestion control.
        cc_sendme_inc: Option<u8>,
    },
    /// Open a stream at the last hop.
    OpenStream {
        /// Circuit.
        circ_id: u32,
        /// What to open.
        req: StreamRequest,
        /// Where to deliver the stream's events.
        events: mpsc::Sender<StreamEvent>,
        /// Reply with the stream ID and its send gate.
        reply: Reply<(u16, Arc<StreamGate>)>,
    },
    /// Send stream data (at most 498 bytes; gate passed and a queue slot
    /// taken).
    Data {
        /// Circuit.
        circ_id: u32,
        /// Stream.
        stream: u16,
        /// Bytes.
        data: Bytes,
    },
    /// Send one datagram on a UDP stream (dropped if the circuit's window
    /// is closed; takes no queue slot).
    Datagram {
        /// Circuit.
        circ_id: u32,
        /// Stream.
        stream: u16,
        /// The datagram (at most 498 bytes).
        data: Bytes,
    },
    /// The application consumed data on a stream.
    Drained {
        /// Circuit.
        circ_id: u32,
        /// Stream.
        stream: u16,
        /// DATA cells consumed.
        cells: u32,
        /// Bytes consumed.
        bytes: usize,
    },
    /// Report the circuit's congestion-control state.
    CcStatus {
        /// Circuit.
        circ_id: u32,
        /// Reply.
        reply: oneshot::Sender<Option<CircCcStatus>>,
    },
    /// Close a stream.
    EndStream {
        /// Circuit.
        circ_id: u32,
        /// Stream.
        stream: u16,
        /// END reason.
        reason: u8,
    },
    /// Tear the circuit down.
    Destroy {
        /// Circuit.
        circ_id: u32,
    },
    /// Onion-service messages and streams (see [`super::hs`]).
    Hs(super::hs::HsCommand),
    /// Send CONFLUX_LINK on an idle circuit; reply with the exit's
    /// CONFLUX_LINKED (LINKED_ACK is sent at once).
    ConfluxLink {
        /// Circuit.
        circ_id: u32,
        /// The LINK message.
        link: onionmix_cell::relay::ConfluxLink,
        /// Reply.
        reply: Reply<onionmix_cell::relay::ConfluxLink>,
    },
    /// The circuit is now a leg of this set.
    ConfluxAttach {
        /// Circuit.
        circ_id: u32,
        /// Its place in the set.
        leg: crate::client::conflux::ClientLeg,
    },
}

/// A cloneable handle to a channel's reactor.
#[derive(Clone, Debug)]
pub struct ChannelHandle {
    pub(super) tx: mpsc::Sender<ChanCommand>,
    pub(super) closed: Arc<AtomicBool>,
    /// RSA identity of the peer.
    pub peer_rsa_id: [u8; 20],
    /// Ed25519 identity of the peer, if it proved one.
    pub peer_ed_id: Option<[u8; 32]>,
    /// Where circuits built on this channel report to the control port.
    pub hub: Option<Arc<crate::client::control::hub::ControlHub>>,
    /// Wakes the reactor to hand conflux messages that other legs
    /// received in order to its streams.
    pub conflux_wake: Arc<tokio::sync::Notify>,
    /// The channel's outbound queue (None for test handles).
    pub(crate) queue: Option<onionmix_link::ChannelWriter>,
}

impl ChannelHandle {
    /// A handle with no reactor behind it: the commands sent to it.
    #[cfg(test)]
    pub(crate) fn for_tests() -> (ChannelHandle, mpsc::Receiver<ChanCommand>) {
        let (tx, rx) = mpsc::channel(16);
        let h = ChannelHandle {
            tx,
            closed: Arc::default(),
            peer_rsa_id: [0; 20],
            peer_ed_id: None,
            hub: None,
            conflux_wake: Arc::default(),
            queue: None,
        };
        (h, rx)
    }
    /// Bytes queued towards the peer and not yet written.
    pub fn queued_bytes(&self) -> usize {
        self.queue.as_ref().map_or(0, |q| q.queued_bytes())
    }
    /// Whether the reactor has exited.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Relaxed) || self.tx.is_closed()
    }
    /// Send a command to the reactor.
    pub async fn send(&self, cmd: ChanCommand) -> Result<(), ReactorError> {
        self.tx
            .send(cmd)
            .await
            .map_err(|_| ReactorError::ChannelClosed("reactor gone".into()))
    }
    /// Send a command without waiting (for Drop paths).
    pub fn try_send(&self, cmd: ChanCommand) {
        let _ = self.tx.try_send(cmd);
    }
    /// Send a command and await its reply.
    pub async fn request<T>(
        &self,
        make: impl FnOnce(Reply<T>) -> ChanCommand,
    ) -> Result<T, ReactorError> {
        let (tx, rx) = oneshot::channel();
        self.send(make(tx)).await?;
        rx.await
            .map_err(|_| ReactorError::ChannelClosed("reactor dropped the request".into()))?
    }
}

/// A circuit's congestion and flow control, as `CcStatus` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CircCcStatus {
    /// The exit's congestion control (None: fixed windows).
    pub cc: Option<CcSnapshot>,
    /// Flow-control counters.
    pub stats: CircStats,
}

/// Counters over all client channels (for status output and tests).
#[derive(Debug, Default)]
pub struct ClientFlowStats {
    /// Circuits built with congestion control negotiated.
    pub cc_circuits: AtomicU64,
    /// XOFFs sent.
    pub xoff_sent: AtomicU64,
    /// XONs sent.
    pub xon_sent: AtomicU64,
    /// XOFFs received.
    pub xoff_received: AtomicU64,
    /// XONs received.
    pub xon_received: AtomicU64,
    /// Cells for closed streams that were within what they could carry.
    pub half_closed_cells: AtomicU64,
    /// Cells for unknown streams or beyond a half-closed stream's limits.
    pub invalid_cells: AtomicU64,
    /// XON/XOFF earlier than the data sent explains (obeyed, counted).
    pub early_xon_xoff: AtomicU64,
    /// Datagrams dropped (circuit window closed, or the application's
    /// queue full).
    pub datagrams_dropped: AtomicU64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::conflux::MAX_DELIVERY;

    #[test]
    fn plain_streams_hold_the_xoff_threshold_and_two_legs_in_flight() {
        // 500-cell window (or XOFF threshold) plus slow start on two legs.
        assert_eq!(STREAM_PLAIN_CELLS, 500 + 2 * 5000);
        assert!(stream_may_queue(STREAM_PLAIN_CELLS - 1, false));
        assert!(!stream_may_queue(STREAM_PLAIN_CELLS, false));
    }

    #[test]
    fn a_conflux_stream_takes_the_whole_delivery_queue_at_once() {
        // The home reactor may find a full delivery queue on top of what
        // the stream already holds: all of it must fit, or an exit that
        // honours XOFF loses the stream.
        let held = STREAM_PLAIN_CELLS - 1;
        assert!(stream_may_queue(held + MAX_DELIVERY - 1, true));
        assert!(!stream_may_queue(STREAM_SET_CELLS, true));
    }
}
