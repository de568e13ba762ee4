//! Application streams on a circuit: open, then pump bytes between a local
//! socket and the channel reactor: data goes out through the stream's
//! [`StreamGate`] and its circuit's queue slots, and every write to the
//! application is reported back (stream SENDMEs, or XON/XOFF with
//! congestion control, follow from it).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc};

use onionmix_cell::RELAY_DATA_LEN;
use onionmix_cell::relay::end_reason;

use crate::gate::StreamGate;
use crate::reactor::{
    ChanCommand, ChannelHandle, ReactorError, STREAM_EVENT_QUEUE, StreamEvent, StreamRequest,
};

/// A stream that has been opened (BEGIN/BEGIN_DIR sent and CONNECTED
/// received, or RESOLVE sent).
#[derive(Debug)]
pub struct Stream {
    chan: ChannelHandle,
    circ_id: u32,
    id: u16,
    events: mpsc::Receiver<StreamEvent>,
    gate: Arc<StreamGate>,
    circ_credits: Arc<Semaphore>,
    ended: bool,
}

/// Why opening a stream failed.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum StreamError {
    /// The exit refused or failed (END with this reason).
    #[error("stream ended by exit: {}", end_reason::name(*.0))]
    End(u8),
    /// The circuit or channel failed.
    #[error("{0}")]
    Reactor(#[from] ReactorError),
    /// No answer in time.
    #[error("timed out waiting for the exit")]
    Timeout,
    /// The exit answered with something unexpected.
    #[error("unexpected reply from exit")]
    Unexpected,
    /// The name may not be sent to an exit (`.onion`, `.exit`).
    #[error("{0}: a name that never leaves the client")]
    LocalOnly(String),
}

impl StreamError {
    /// The END reason to report to SOCKS for this failure.
    pub fn end_reason(&self) -> u8 {
        match self {
            StreamError::End(r) => *r,
            StreamError::Timeout => end_reason::TIMEOUT,
            StreamError::LocalOnly(_) => end_reason::RESOLVEFAILED,
            _ => end_reason::DESTROY,
        }
    }
}

/// Open a stream on a circuit and wait for the first event.
pub async fn open(
    chan: &ChannelHandle,
    circ_id: u32,
    circ_credits: Arc<Semaphore>,
    req: StreamRequest,
    timeout: Duration,
) -> Result<(Stream, StreamEvent), StreamError> {
    let mut s = begin(chan, circ_id, circ_credits, req).await?;
    let first = s.first_event(timeout).await?;
    Ok((s, first))
}

/// Send the stream's BEGIN (BEGIN_DIR, RESOLVE) and return at once; the
/// answer is read with [`Stream::first_event`].
pub async fn begin(
    chan: &ChannelHandle,
    circ_id: u32,
    circ_credits: Arc<Semaphore>,
    req: StreamRequest,
) -> Result<Stream, StreamError> {
    let (tx, rx) = mpsc::channel(STREAM_EVENT_QUEUE);
    let (id, gate) = chan
        .request(|reply| ChanCommand::OpenStream {
            circ_id,
            req,
            events: tx,
            reply,
        })
        .await?;
    Ok(Stream {
        chan: chan.clone(),
        circ_id,
        id,
        events: rx,
        gate,
        circ_credits,
        ended: false,
    })
}

impl Stream {
    /// Stream ID.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Wait for the answer to BEGIN / RESOLVE: CONNECTED or RESOLVED (an
    /// END is returned as [`StreamError::End`]).
    pub async fn first_event(&mut self, timeout: Duration) -> Result<StreamEvent, StreamError> {
        match tokio::time::timeout(timeout, self.events.recv()).await {
            Ok(ev) => self.settle_first(ev),
            Err(_) => Err(StreamError::Timeout),
        }
    }

    /// Judge the first event read with [`Self::next_event`] (`None`: the
    /// circuit is gone), as [`Self::first_event`] does.
    pub fn settle_first(&mut self, ev: Option<StreamEvent>) -> Result<StreamEvent, StreamError> {
        let Some(first) = ev else {
            self.ended = true;
            return Err(StreamError::Reactor(ReactorError::CircuitDestroyed(0)));
        };
        match first {
            StreamEvent::End(r) => {
                self.ended = true;
                Err(StreamError::End(r))
            }
            StreamEvent::Resolved(_) => {
                self.ended = true;
                Ok(first)
            }
            StreamEvent::Data(_) | StreamEvent::Datagram(_) => Err(StreamError::Unexpected),
            StreamEvent::Connected(_) => Ok(first),
        }
    }

    /// Send bytes (split into cells), waiting for flow-control credit.
    pub async fn write_all(&self, mut data: &[u8]) -> Result<(), StreamError> {
        while !data.is_empty() {
            let n = data.len().min(RELAY_DATA_LEN);
            self.send_cell(Bytes::copy_from_slice(&data[..n])).await?;
            data = &data[n..];
        }
        Ok(())
    }

    async fn send_cell(&self, chunk: Bytes) -> Result<(), StreamError> {
        let closed = || StreamError::Reactor(ReactorError::CircuitDestroyed(0));
        self.gate.acquire(chunk.len()).await.map_err(|_| closed())?;
        self.circ_credits
            .acquire()
            .await
            .map_err(|_| closed())?
            .forget();
        self.chan
            .send(ChanCommand::Data {
                circ_id: self.circ_id,
                stream: self.id,
                data: chunk,
            })
            .await?;
        Ok(())
    }

    /// Send one datagram on a UDP stream (at most 498 bytes; the reactor
    /// drops it if the circuit's window is closed).
    pub async fn send_datagram(&self, data: Bytes) -> Result<(), StreamError> {
        self.chan
            .send(ChanCommand::Datagram {
                circ_id: self.circ_id,
                stream: self.id,
                data,
            })
            .await?;
        Ok(())
    }

    /// Receive the next event (None when the reactor is gone).
    pub async fn next_event(&mut self) -> Option<StreamEvent> {
        self.events.recv().await
    }

    /// Tell the reactor the application consumed `cells` cells (`bytes`
    /// bytes) of this stream.
    pub async fn drained(&self, cells: u32, bytes: usize) {
        let _ = self
            .chan
            .send(ChanCommand::Drained {
                circ_id: self.circ_id,
                stream: self.id,
                cells,
                bytes,
            })
            .await;
    }

    /// Read the whole stream into memory until END (for directory fetches),
    /// with a size cap.
    pub async fn read_to_end(
        &mut self,
        limit: usize,
        timeout: Duration,
    ) -> Result<Vec<u8>, StreamError> {
        let mut out = Vec::new();
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let ev = tokio::time::timeout_at(deadline, self.events.recv())
                .await
                .map_err(|_| StreamError::Timeout)?;
            match ev {
                Some(StreamEvent::Data(d)) => {
                    out.extend_from_slice(&d);
                    if out.len() > limit {
                        return Err(StreamError::Unexpected);
                    }
                    self.drained(1, d.len()).await;
                }
                Some(StreamEvent::End(_)) | None => {
                    self.ended = true;
                    return Ok(out);
                }
                Some(_) => return Err(StreamError::Unexpected),
            }
        }
    }

    /// Move bytes both ways between `sock` and this stream until either
    /// side closes. Returns (bytes up, bytes down). The two directions run
    /// concurrently: waiting for flow-control credit upwards never stops
    /// data from being written to the application (which would make our
    /// buffer look undrained and, with congestion control, send XOFF and
    /// advertise a wrong drain rate).
    pub async fn pump<S>(mut self, sock: S, idle_timeout: Duration) -> (u64, u64)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let (mut rd, mut wr) = tokio::io::split(sock);
        let mut events = std::mem::replace(&mut self.events, mpsc::channel(1).1);
        let t0 = tokio::time::Instant::now();
        let ms = move || u64::try_from(t0.elapsed().as_millis()).unwrap_or(u64::MAX);
        let up = AtomicU64::new(0);
        let down = AtomicU64::new(0);
        let last_up = AtomicU64::new(0);
        // `None`: the exit ended the stream; `Some(reason)`: we end it.
        let outcome: Option<u8> = {
            let this = &self;
            let upward = async {
                let mut buf = vec![0u8; RELAY_DATA_LEN * 16];
                loop {
                    match rd.read(&mut buf).await {
                        Ok(0) => return Some(end_reason::DONE),
                        Ok(n) => {
                            up.fetch_add(n as u64, Ordering::Relaxed);
                            last_up.store(ms(), Ordering::Relaxed);
                            if this.write_all(&buf[..n]).await.is_err() {
                                return Some(end_reason::MISC);
                            }
                            last_up.store(ms(), Ordering::Relaxed);
                        }
                        Err(_) => return Some(end_reason::CONNRESET),
                    }
                }
            };
            let downward = async {
                let mut out: Vec<u8> = Vec::with_capacity(64 * 1024 + RELAY_DATA_LEN);
                loop {
                    let ev = match tokio::time::timeout(idle_timeout, events.recv()).await {
                        Ok(ev) => ev,
                        Err(_) => {
                            // Idle only if the application sent nothing
                            // either.
                            let quiet = ms().saturating_sub(last_up.load(Ordering::Relaxed));
                            if u128::from(quiet) < idle_timeout.as_millis() {
                                continue;
                            }
                            return Some(end_reason::TIMEOUT);
                        }
                    };
                    match ev {
                        Some(StreamEvent::Data(d)) => {
                            // Coalesce whatever else already arrived into
                            // one write.
                            out.clear();
                            out.extend_from_slice(&d);
                            let mut n_cells = 1u32;
                            let mut ended = false;
                            while out.len() < 64 * 1024 {
                                match events.try_recv() {
                                    Ok(StreamEvent::Data(more)) => {
                                        out.extend_from_slice(&more);
                                        n_cells += 1;
                                    }
                                    Ok(StreamEvent::End(_)) => {
                                        ended = true;
                                        break;
                                    }
                                    Ok(_) => {}
                                    Err(_) => break,
                                }
                            }
                            down.fetch_add(out.len() as u64, Ordering::Relaxed);
                            if wr.write_all(&out).await.is_err() {
                                return Some(end_reason::CONNRESET);
                            }
                            this.drained(n_cells, out.len()).await;
                            if ended {
                                return None;
                            }
                        }
                        Some(StreamEvent::End(_)) | None => return None,
                        Some(_) => {}
                    }
                }
            };
            tokio::select! {
                r = upward => r,
                r = downward => r,
            }
        };
        let _ = wr.flush().await;
        let _ = wr.shutdown().await;
        if !self.ended {
            self.ended = true;
            if let Some(reason) = outcome {
                let _ = self
                    .chan
                    .send(ChanCommand::EndStream {
                        circ_id: self.circ_id,
                        stream: self.id,
                        reason,
                    })
                    .await;
            }
        }
        (up.into_inner(), down.into_inner())
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        if !self.ended {
            self.chan.try_send(ChanCommand::EndStream {
                circ_id: self.circ_id,
                stream: self.id,
                reason: end_reason::MISC,
            });
        }
    }
}

impl Stream {
    /// A stream the far end opened and we accepted (an onion service's
    /// stream on its rendezvous circuit): its events, its send gate and
    /// the circuit's credits.
    pub fn incoming(
        chan: ChannelHandle,
        circ_id: u32,
        id: u16,
        events: mpsc::Receiver<StreamEvent>,
        gate: Arc<StreamGate>,
        circ_credits: Arc<Semaphore>,
    ) -> Self {
        Stream {
            chan,
            circ_id,
            id,
            events,
            gate,
            circ_credits,
            ended: false,
        }
    }
}
