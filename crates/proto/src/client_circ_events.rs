//! What a client circuit reports: the events the driver acts on, and
//! the flow-control counters.

use onionmix_cell::chan::Created2;
use onionmix_cell::relay::{ConfluxLink, RelayCmd, ResolvedAnswer};

/// Flow-control messages a circuit sent and cells it refused to count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CircStats {
    /// XOFFs sent.
    pub xoff_sent: u64,
    /// XONs sent.
    pub xon_sent: u64,
    /// XOFFs received.
    pub xoff_received: u64,
    /// XONs received.
    pub xon_received: u64,
    /// Cells for half-closed streams within what they could carry.
    pub half_closed_valid: u64,
    /// Cells for unknown streams, or for half-closed ones beyond what
    /// they could carry (tor's "dropped cells").
    pub invalid_cells: u64,
    /// XON/XOFF earlier than the data we sent explains (proposal 324
    /// §4.1.4): obeyed, and counted, as tor does.
    pub early_xon_xoff: u64,
}

/// Something the driver must act on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CircEvent {
    /// Stream data arrived.
    Data {
        /// Stream.
        stream: u16,
        /// Bytes.
        data: Vec<u8>,
    },
    /// The exit connected the stream.
    Connected {
        /// Stream.
        stream: u16,
        /// Address it connected to, if reported.
        addr: Option<std::net::IpAddr>,
    },
    /// The stream ended (the entry is gone).
    End {
        /// Stream.
        stream: u16,
        /// END reason.
        reason: u8,
    },
    /// The exit opened a UDP stream (CONNECTED_UDP).
    ConnectedUdp {
        /// Stream.
        stream: u16,
        /// The exit's bound address.
        ours: std::net::SocketAddr,
        /// The target's.
        theirs: std::net::SocketAddr,
    },
    /// A datagram arrived on a UDP stream.
    Datagram {
        /// Stream.
        stream: u16,
        /// The datagram.
        data: Vec<u8>,
    },
    /// A RESOLVE was answered.
    Resolved {
        /// Stream.
        stream: u16,
        /// Answers.
        answers: Vec<ResolvedAnswer>,
    },
    /// The pending EXTEND2 was answered; finish the handshake with this
    /// server data and call [`ClientCircuit::add_hop`].
    Extended(Created2),
    /// A SENDME opened a package window: on the circuit (`stream` 0) or on
    /// one stream (by 50 cells).
    Sendme {
        /// Stream ID, or 0 for the circuit.
        stream: u16,
    },
    /// The exit asked us to stop sending on a stream (congestion control).
    Xoff {
        /// Stream.
        stream: u16,
    },
    /// The exit lets us send on a stream again, at most at this rate.
    Xon {
        /// Stream.
        stream: u16,
        /// Advised rate in 1000 bytes/s (0: unlimited).
        kbps: u32,
    },
    /// The circuit is gone (DESTROY or TRUNCATED).
    Destroyed {
        /// Reason code.
        reason: u8,
    },
    /// An onion-service message (relay commands 32-40) on stream 0.
    Hs {
        /// The hop it came from.
        hop: usize,
        /// Its relay command.
        cmd: RelayCmd,
        /// Its body.
        data: Vec<u8>,
    },
    /// A BEGIN from the last hop on a circuit that accepts streams: accept
    /// with [`ClientCircuit::accept_stream`] or refuse with
    /// [`ClientCircuit::end_stream`].
    IncomingStream {
        /// Stream ID (chosen by the other end).
        stream: u16,
        /// The port it asked for.
        port: u16,
    },
    /// The exit answered our CONFLUX_LINK (nonce checked): LINKED_ACK is
    /// in the cells to send; link the leg with
    /// [`ClientCircuit::set_conflux_leg`].
    ///
    /// [`ClientCircuit::set_conflux_leg`]: super::ClientCircuit::set_conflux_leg
    ConfluxLinked(ConfluxLink),
    /// CONFLUX_SWITCH from the exit on a leg.
    ConfluxSwitch(u32),
    /// A stream message on a conflux leg (DATA already counted for this
    /// circuit's SENDMEs): sequence it in the set, then hand it to the
    /// circuit that holds the set's streams
    /// ([`ClientCircuit::handle_conflux_msg`]).
    ///
    /// [`ClientCircuit::handle_conflux_msg`]: super::ClientCircuit::handle_conflux_msg
    Multiplexed {
        /// Relay command.
        cmd: RelayCmd,
        /// Stream.
        stream: u16,
        /// Message data.
        data: Vec<u8>,
    },
}
