//! [`DataStream`]: the application's end of a connected stream.

use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

use onionmix_node::client::circuit::Circuit;

/// The circuit a stream runs on (exit streams; onion-service streams run
/// on rendezvous circuits the onion-service client keeps to itself).
#[derive(Debug, Clone)]
pub struct CircuitInfo {
    circ: Weak<Circuit>,
    /// Relay nicknames, guard first, exit last (local state: do not log
    /// it where others read).
    pub path: Vec<String>,
    /// Relay RSA identity fingerprints (40 hex digits), in path order.
    pub fingerprints: Vec<String>,
}

impl CircuitInfo {
    pub(crate) fn of(c: &Arc<Circuit>) -> Self {
        CircuitInfo {
            circ: Arc::downgrade(c),
            path: c.path().iter().map(|h| h.nickname.clone()).collect(),
            fingerprints: c
                .path()
                .iter()
                .map(|h| {
                    h.rsa_id
                        .iter()
                        .map(|b| format!("{b:02X}"))
                        .collect::<String>()
                })
                .collect(),
        }
    }

    /// Whether both describe the same circuit (while it is open: a closed
    /// circuit is the same as nothing).
    pub fn same_circuit(&self, other: &CircuitInfo) -> bool {
        self.circ.strong_count() > 0 && Weak::ptr_eq(&self.circ, &other.circ)
    }

    /// Whether the circuit is still open.
    pub fn is_open(&self) -> bool {
        self.circ.upgrade().is_some_and(|c| !c.is_closed())
    }
}

/// A connected stream: read what the target sends, write what it should
/// receive. An END from the far side reads as end of file. Shutting
/// down the write half, or dropping the value, ends the whole stream (as
/// closing a SOCKS connection does: streams are not half-closed), so keep
/// it open until the answer has been read.
///
/// Bytes pass through a bounded in-memory pipe
/// ([`STREAM_BUFFER`](crate::STREAM_BUFFER) each way) to a task on the
/// client's runtime that moves them to and from the circuit with its flow
/// control.
#[derive(Debug)]
pub struct DataStream {
    io: DuplexStream,
    circuit: Option<CircuitInfo>,
}

impl DataStream {
    pub(crate) fn new(io: DuplexStream, circuit: Option<CircuitInfo>) -> Self {
        DataStream { io, circuit }
    }

    /// The circuit of an exit stream (`None` for onion-service streams).
    pub fn circuit(&self) -> Option<&CircuitInfo> {
        self.circuit.as_ref()
    }
}

impl AsyncRead for DataStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl AsyncWrite for DataStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
