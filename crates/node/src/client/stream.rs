//! Application streams on a circuit: open, then pump bytes between a local
//! socket and the channel reactor with credit-based flow control.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Semaphore, mpsc};

use onionmix_cell::RELAY_DATA_LEN;
use onionmix_cell::relay::end_reason;
use onionmix_proto::flow::STREAM_WINDOW_INC;

use crate::reactor::{
    ChanCommand, ChannelHandle, ReactorError, STREAM_EVENT_QUEUE, StreamEvent, StreamRequest,
    stream_credits,
};

/// A stream that has been opened (BEGIN/BEGIN_DIR sent and CONNECTED
/// received, or RESOLVE sent).
#[derive(Debug)]
pub struct Stream {
    chan: ChannelHandle,
    circ_id: u32,
    id: u16,
    events: mpsc::Receiver<StreamEvent>,
    credits: Arc<Semaphore>,
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
    let (tx, rx) = mpsc::channel(STREAM_EVENT_QUEUE);
    let credits = stream_credits();
    let cr = credits.clone();
    let id = chan
        .request(|reply| ChanCommand::OpenStream {
            circ_id,
            req,
            events: tx,
            credits: cr,
            reply,
        })
        .await?;
    let mut s = Stream {
        chan: chan.clone(),
        circ_id,
        id,
        events: rx,
        credits,
        circ_credits,
        ended: false,
    };
    let first = match tokio::time::timeout(timeout, s.events.recv()).await {
        Ok(Some(ev)) => ev,
        Ok(None) => {
            s.ended = true;
            return Err(StreamError::Reactor(ReactorError::CircuitDestroyed(0)));
        }
        Err(_) => return Err(StreamError::Timeout),
    };
    if let StreamEvent::End(r) = first {
        s.ended = true;
        return Err(StreamError::End(r));
    }
    if let StreamEvent::Resolved(_) = first {
        s.ended = true;
    }
    Ok((s, first))
}

impl Stream {
    /// Stream ID.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Send bytes (split into cells), waiting for flow-control credit.
    pub async fn write_all(&mut self, mut data: &[u8]) -> Result<(), StreamError> {
        while !data.is_empty() {
            let n = data.len().min(RELAY_DATA_LEN);
            self.send_cell(Bytes::copy_from_slice(&data[..n])).await?;
            data = &data[n..];
        }
        Ok(())
    }

    async fn send_cell(&self, chunk: Bytes) -> Result<(), StreamError> {
        let closed = || StreamError::Reactor(ReactorError::CircuitDestroyed(0));
        self.credits.acquire().await.map_err(|_| closed())?.forget();
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

    /// Receive the next event (None when the reactor is gone).
    pub async fn next_event(&mut self) -> Option<StreamEvent> {
        self.events.recv().await
    }

    /// Tell the reactor the application consumed a window increment.
    pub async fn drained(&self) {
        let _ = self
            .chan
            .send(ChanCommand::Drained {
                circ_id: self.circ_id,
                stream: self.id,
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
        let mut cells = 0u16;
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
                    cells += 1;
                    if cells == STREAM_WINDOW_INC {
                        cells = 0;
                        self.drained().await;
                    }
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
    /// side closes. Returns (bytes up, bytes down).
    pub async fn pump<S>(mut self, sock: S, idle_timeout: Duration) -> (u64, u64)
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let (mut rd, mut wr) = tokio::io::split(sock);
        let mut up = 0u64;
        let mut down = 0u64;
        let mut buf = vec![0u8; RELAY_DATA_LEN * 16];
        let mut out: Vec<u8> = Vec::with_capacity(64 * 1024 + RELAY_DATA_LEN);
        let mut cells = 0u16;
        let mut reason = end_reason::DONE;
        let mut app_open = true;
        loop {
            tokio::select! {
                r = rd.read(&mut buf), if app_open => {
                    match r {
                        Ok(0) => { app_open = false; break; }
                        Ok(n) => {
                            up += n as u64;
                            if self.write_all(&buf[..n]).await.is_err() {
                                reason = end_reason::MISC;
                                break;
                            }
                        }
                        Err(_) => { reason = end_reason::CONNRESET; break; }
                    }
                }
                ev = tokio::time::timeout(idle_timeout, self.events.recv()) => {
                    match ev {
                        Ok(Some(StreamEvent::Data(d))) => {
                            // Coalesce whatever else already arrived into one write.
                            out.clear();
                            out.extend_from_slice(&d);
                            let mut n_cells = 1u16;
                            let mut ended = false;
                            while out.len() < 64 * 1024 {
                                match self.events.try_recv() {
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
                            down += out.len() as u64;
                            if wr.write_all(&out).await.is_err() {
                                reason = end_reason::CONNRESET;
                                break;
                            }
                            for _ in 0..n_cells {
                                cells += 1;
                                if cells == STREAM_WINDOW_INC {
                                    cells = 0;
                                    self.drained().await;
                                }
                            }
                            if ended {
                                self.ended = true;
                                break;
                            }
                        }
                        Ok(Some(StreamEvent::End(_))) | Ok(None) => {
                            self.ended = true;
                            break;
                        }
                        Ok(Some(_)) => {}
                        Err(_) => { reason = end_reason::TIMEOUT; break; }
                    }
                }
            }
        }
        let _ = app_open;
        let _ = wr.flush().await;
        let _ = wr.shutdown().await;
        if !self.ended {
            self.ended = true;
            let _ = self
                .chan
                .send(ChanCommand::EndStream {
                    circ_id: self.circ_id,
                    stream: self.id,
                    reason,
                })
                .await;
        }
        (up, down)
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
    /// stream on its rendezvous circuit): its events, its send credits
    /// and the circuit's.
    pub fn incoming(
        chan: ChannelHandle,
        circ_id: u32,
        id: u16,
        events: mpsc::Receiver<StreamEvent>,
        credits: Arc<Semaphore>,
        circ_credits: Arc<Semaphore>,
    ) -> Self {
        Stream {
            chan,
            circ_id,
            id,
            events,
            credits,
            circ_credits,
            ended: false,
        }
    }
}
