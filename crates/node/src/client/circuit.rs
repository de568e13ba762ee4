//! Building circuits hop by hop, and the handle streams use.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tracing::debug;

use onionmix_cell::chan::Create2;
use onionmix_cell::relay::{Extend2, LinkSpec};

use crate::glue;
use crate::reactor::{ChanCommand, ChannelHandle, ReactorError, StreamRequest, circuit_credits};

use super::stream::{self, Stream, StreamError};
use crate::reactor::StreamEvent;

/// Everything needed to reach and handshake with one relay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HopTarget {
    /// Nickname (for logs).
    pub nickname: String,
    /// RSA identity digest.
    pub rsa_id: [u8; 20],
    /// Ed25519 identity.
    pub ed_id: Option<[u8; 32]>,
    /// ORPort.
    pub or_addr: SocketAddr,
    /// ntor onion key.
    pub ntor_key: [u8; 32],
    /// Use ntor-v3 (the relay advertises Relay=4).
    pub ntor_v3: bool,
}

impl HopTarget {
    /// The link specifiers that name this relay in EXTEND2 (and in onion
    /// service messages and descriptors).
    pub fn link_specs(&self) -> Vec<LinkSpec> {
        let mut v = Vec::new();
        if let SocketAddr::V4(a) = self.or_addr {
            v.push(LinkSpec::Ipv4(a));
        }
        v.push(LinkSpec::LegacyId(self.rsa_id));
        if let Some(ed) = self.ed_id {
            v.push(LinkSpec::Ed25519Id(ed));
        }
        if let SocketAddr::V6(a) = self.or_addr {
            v.push(LinkSpec::Ipv6(a));
        }
        v
    }
}

/// Why a circuit could not be built.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    /// Channel to the first hop failed.
    #[error("connecting to {relay}: {err}")]
    Channel {
        /// Relay nickname.
        relay: String,
        /// Error.
        err: String,
    },
    /// A hop refused or failed.
    #[error("hop {hop} ({relay}): {err}")]
    Hop {
        /// Index.
        hop: usize,
        /// Relay nickname.
        relay: String,
        /// Error.
        err: String,
    },
    /// Took too long.
    #[error("circuit build timed out after {0:?}")]
    Timeout(Duration),
    /// Empty path.
    #[error("empty path")]
    EmptyPath,
}

/// An open circuit. Dropping the last reference destroys it.
#[derive(Debug)]
pub struct Circuit {
    /// Channel to the first hop.
    pub chan: ChannelHandle,
    /// Circuit ID on that channel.
    pub circ_id: u32,
    /// Circuit-level send credits.
    pub credits: Arc<Semaphore>,
    /// The relays, first hop first.
    pub path: Vec<HopTarget>,
    /// When it finished building.
    pub built_at: Instant,
    /// How long the build took.
    pub build_time: Duration,
    /// The last hop's handshake `KH` (onion services bind ESTABLISH_INTRO
    /// to it).
    pub last_hop_kh: [u8; 20],
    first_used: Mutex<Option<Instant>>,
}

impl Circuit {
    /// Whether the circuit can still take streams.
    pub fn is_usable(&self, max_dirtiness: Duration) -> bool {
        if self.chan.is_closed() || self.credits.is_closed() {
            return false;
        }
        match *self.first_used.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(t) => t.elapsed() < max_dirtiness,
            None => true,
        }
    }
    /// Whether it was ever used for a stream.
    pub fn is_dirty(&self) -> bool {
        self.first_used
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }
    fn mark_used(&self) {
        let mut g = self.first_used.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() {
            *g = Some(Instant::now());
        }
    }
    /// Whether the circuit is dead.
    pub fn is_closed(&self) -> bool {
        self.chan.is_closed() || self.credits.is_closed()
    }

    /// Open a stream at the last hop and wait for CONNECTED / RESOLVED.
    pub async fn open_stream(
        &self,
        req: StreamRequest,
        timeout: Duration,
    ) -> Result<(Stream, StreamEvent), StreamError> {
        // The last line of defence: whatever front end asked, a `.onion` or
        // `.exit` name is never put in a BEGIN or RESOLVE cell.
        let name = match &req {
            StreamRequest::Begin(b) => match &b.host {
                onionmix_cell::relay::TargetHost::Hostname(h) => Some(h.as_str()),
                _ => None,
            },
            StreamRequest::Resolve(h) => Some(h.as_str()),
            _ => None,
        };
        if let Some(h) = name
            && onionmix_frontend::addr::classify(h).is_local_only()
        {
            return Err(StreamError::LocalOnly(h.to_string()));
        }
        self.mark_used();
        stream::open(&self.chan, self.circ_id, self.credits.clone(), req, timeout).await
    }
}

impl Drop for Circuit {
    fn drop(&mut self) {
        self.chan.try_send(ChanCommand::Destroy {
            circ_id: self.circ_id,
        });
    }
}

/// Build a circuit along `path` on `chan` (a channel to `path[0]`).
pub async fn build(
    chan: ChannelHandle,
    path: Vec<HopTarget>,
    timeout: Duration,
) -> Result<Circuit, BuildError> {
    let start = Instant::now();
    let first = path.first().ok_or(BuildError::EmptyPath)?.clone();
    let fut = async {
        // First hop: CREATE2 with ntor or ntor-v3.
        let (state, htype, onionskin) = glue::handshake_start(&first);
        let create2 = Create2 {
            htype,
            hdata: onionskin,
        };
        let (circ_id, created) = chan
            .request(|reply| ChanCommand::Create { create2, reply })
            .await
            .map_err(|e| hop_err(0, &first, e))?;
        // From here on, a failure must destroy the circuit.
        let guard = DestroyOnDrop {
            chan: chan.clone(),
            circ_id,
            armed: true,
        };
        let (layer, mut kh) =
            glue::handshake_finish_kh(state, &created.hdata).map_err(|e| BuildError::Hop {
                hop: 0,
                relay: first.nickname.clone(),
                err: e,
            })?;
        let credits = circuit_credits();
        chan.send(ChanCommand::Install {
            circ_id,
            layer,
            credits: credits.clone(),
        })
        .await
        .map_err(|e| hop_err(0, &first, e))?;
        for (i, hop) in path.iter().enumerate().skip(1) {
            let (state, htype, onionskin) = glue::handshake_start(hop);
            let msg = Extend2 {
                specs: hop.link_specs(),
                create: Create2 {
                    htype,
                    hdata: onionskin,
                },
            };
            let created = chan
                .request(|reply| ChanCommand::Extend {
                    circ_id,
                    msg,
                    reply,
                })
                .await
                .map_err(|e| hop_err(i, hop, e))?;
            let (layer, hop_kh) =
                glue::handshake_finish_kh(state, &created.hdata).map_err(|e| BuildError::Hop {
                    hop: i,
                    relay: hop.nickname.clone(),
                    err: e,
                })?;
            kh = hop_kh;
            chan.send(ChanCommand::AddHop { circ_id, layer })
                .await
                .map_err(|e| hop_err(i, hop, e))?;
        }
        let mut guard = guard;
        guard.armed = false;
        Ok((circ_id, credits, kh))
    };
    let (circ_id, credits, last_hop_kh) = tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| BuildError::Timeout(timeout))??;
    let build_time = start.elapsed();
    debug!(
        "built circuit {:08x} through {} hops in {:?}",
        circ_id,
        path.len(),
        build_time
    );
    Ok(Circuit {
        chan,
        circ_id,
        credits,
        path,
        built_at: Instant::now(),
        build_time,
        last_hop_kh,
        first_used: Mutex::new(None),
    })
}

fn hop_err(hop: usize, t: &HopTarget, e: ReactorError) -> BuildError {
    BuildError::Hop {
        hop,
        relay: t.nickname.clone(),
        err: e.to_string(),
    }
}

struct DestroyOnDrop {
    chan: ChannelHandle,
    circ_id: u32,
    armed: bool,
}

impl Drop for DestroyOnDrop {
    fn drop(&mut self) {
        if self.armed {
            self.chan.try_send(ChanCommand::Destroy {
                circ_id: self.circ_id,
            });
        }
    }
}
