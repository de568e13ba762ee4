//! Building circuits hop by hop, and the handle streams use.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tracing::debug;

use onionmix_cell::chan::Create2;
use onionmix_cell::relay::{Extend2, LinkSpec};

use onionmix_proto::cc::CcParams;

use crate::glue;
use crate::reactor::{
    ChanCommand, ChannelHandle, CircCcStatus, ReactorError, StreamRequest, circuit_credits,
};

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
    /// As an exit, it accepts DATA cells before it answers BEGIN with
    /// CONNECTED (optimistic data, prop 174: every tor since 0.2.3.1;
    /// the directory sets it for relays that advertise Relay=2, i.e. any
    /// tor since 0.2.4.19, and for ours).
    pub optimistic_data: bool,
    /// The relay advertises FlowCtrl=2 (congestion control at exits).
    pub flowctrl_cc: bool,
    /// The relay advertises Datagram=1 (UDP streams at exits, proposal
    /// 339 as docs/udp-over-tor.md describes).
    pub datagram: bool,
    /// The consensus parameters the relay was chosen under (congestion
    /// and flow control, SENDME versions); defaults when `None`.
    pub params: Option<Arc<CcParams>>,
    /// UDP port of onionmix QUIC links, when the relay advertises them and
    /// the client uses QUIC (first hop over QUIC, EXTEND2 hint).
    pub quic_port: Option<u16>,
}

impl HopTarget {
    /// A relay running in this process, listening at `addr`, as a client
    /// with no directory reaches it (in-process networks and tests): ntor,
    /// fixed windows, optimistic data, its QUIC port if it runs QUIC.
    pub fn local_relay(ctx: &crate::relay::RelayCtx, addr: SocketAddr) -> HopTarget {
        HopTarget {
            nickname: ctx.cfg.nickname.clone(),
            rsa_id: ctx.rsa_id,
            ed_id: Some(ctx.ed_id),
            or_addr: addr,
            ntor_key: ctx
                .ntor_keys()
                .first()
                .map(|k| k.public())
                .unwrap_or_default(),
            ntor_v3: false,
            optimistic_data: true,
            flowctrl_cc: false,
            quic_port: ctx.quic.port(),
            datagram: ctx.cfg.exit && ctx.cfg.exit_udp,
            params: None,
        }
    }

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

    /// The link specifiers an EXTEND2 to this relay carries: those of
    /// [`Self::link_specs`] plus onionmix's QUIC hint when it has a QUIC
    /// port (the extending relay then prefers a QUIC link).
    pub fn extend_specs(&self) -> Vec<LinkSpec> {
        let mut v = self.link_specs();
        if let Some(p) = self.quic_port {
            v.push(LinkSpec::onionmix_quic(p));
        }
        v
    }

    /// Where it takes QUIC links, if it does (and we use them).
    pub fn quic_addr(&self) -> Option<SocketAddr> {
        self.quic_port
            .map(|p| SocketAddr::new(self.or_addr.ip(), p))
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
    /// Passed the learned build timeout while extending to hop `hop`
    /// (0-based); it may still complete, as a measurement circuit.
    #[error("circuit build passed the {timeout:?} build timeout at hop {hop}")]
    Slow {
        /// The hop being built.
        hop: usize,
        /// The timeout passed.
        timeout: Duration,
    },
    /// Empty path.
    #[error("empty path")]
    EmptyPath,
}

/// What a circuit's hops are. A controller's EXTENDCIRCUIT may add hops
/// to a built circuit that others share, hence behind a lock.
#[derive(Debug)]
struct Hops {
    /// The relays, first hop first.
    path: Arc<Vec<HopTarget>>,
    /// The SENDME increment, when the last hop agreed to congestion
    /// control.
    cc_sendme_inc: Option<u8>,
    /// The last hop's handshake `KH`.
    last_hop_kh: [u8; 20],
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
    /// When it finished building.
    pub built_at: Instant,
    /// How long the build took.
    pub build_time: Duration,
    /// The id the control port knows it by (0: not tracked).
    pub ctl_id: u64,
    hops: Mutex<Hops>,
    /// Set while a controller's EXTENDCIRCUIT adds hops: no new streams.
    extending: AtomicBool,
    first_used: Mutex<Option<Instant>>,
    /// The other leg of the conflux set this circuit is the home leg of
    /// (kept open as long as this one).
    conflux_partner: Mutex<Option<Box<Circuit>>>,
}

impl Circuit {
    fn hops(&self) -> MutexGuard<'_, Hops> {
        self.hops.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// The relays, first hop first (the last one is where streams go).
    pub fn path(&self) -> Arc<Vec<HopTarget>> {
        self.hops().path.clone()
    }
    /// The SENDME increment, when the last hop agreed to congestion
    /// control.
    pub fn cc_sendme_inc(&self) -> Option<u8> {
        self.hops().cc_sendme_inc
    }
    /// The last hop's handshake `KH` (onion services bind ESTABLISH_INTRO
    /// to it).
    pub fn last_hop_kh(&self) -> [u8; 20] {
        self.hops().last_hop_kh
    }
    /// Whether a controller is adding hops to it now.
    pub fn is_extending(&self) -> bool {
        self.extending.load(Ordering::Relaxed)
    }
    /// Share a built circuit, and let the control port reach it
    /// (EXTENDCIRCUIT, ATTACHSTREAM, CLOSECIRCUIT on its id).
    pub fn into_shared(self) -> Arc<Circuit> {
        let c = Arc::new(self);
        if let Some(h) = &c.chan.hub {
            h.circ_handle(&c, false);
        }
        c
    }
    /// Tell the control port what an onion-service circuit is for (its
    /// PURPOSE, HS_STATE and REND_QUERY, tor's names; a no-op without a
    /// control port).
    pub fn set_control_purpose(
        &self,
        purpose: &'static str,
        hs_state: Option<&'static str>,
        rend_query: Option<&str>,
    ) {
        if let Some(h) = &self.chan.hub {
            h.circ_purpose(self.ctl_id, purpose, hs_state, rend_query);
        }
    }
    /// Whether the circuit can still take streams.
    pub fn is_usable(&self, max_dirtiness: Duration) -> bool {
        if self.chan.is_closed() || self.credits.is_closed() || self.is_extending() {
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

    /// Keep `other`, this circuit's partner leg in a conflux set, open as
    /// long as this one.
    pub fn set_conflux_partner(&self, other: Circuit) {
        *self
            .conflux_partner
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(Box::new(other));
    }

    /// The other leg's path, if this is the home leg of a conflux set.
    pub fn conflux_partner_path(&self) -> Option<Vec<HopTarget>> {
        self.conflux_partner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(|c| (*c.path()).clone())
    }

    /// Whether the exit takes stream data before CONNECTED.
    pub fn exit_supports_optimistic_data(&self) -> bool {
        self.hops().path.last().is_some_and(|h| h.optimistic_data)
    }

    /// The circuit's congestion-control state and flow counters (None if
    /// the circuit is gone).
    pub async fn cc_status(&self) -> Option<CircCcStatus> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.chan
            .send(ChanCommand::CcStatus {
                circ_id: self.circ_id,
                reply: tx,
            })
            .await
            .ok()?;
        rx.await.ok().flatten()
    }

    /// Open a stream at the last hop and wait for CONNECTED / RESOLVED.
    pub async fn open_stream(
        &self,
        req: StreamRequest,
        timeout: Duration,
    ) -> Result<(Stream, StreamEvent), StreamError> {
        let mut s = self.begin_stream(req).await?;
        let first = s.first_event(timeout).await?;
        Ok((s, first))
    }

    /// Send BEGIN / BEGIN_DIR / RESOLVE at the last hop without waiting
    /// for the answer (read it with [`Stream::first_event`]); data written
    /// meanwhile is optimistic data.
    pub async fn begin_stream(&self, req: StreamRequest) -> Result<Stream, StreamError> {
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
        stream::begin(&self.chan, self.circ_id, self.credits.clone(), req).await
    }
}

impl Drop for Circuit {
    fn drop(&mut self) {
        if let Some(h) = &self.chan.hub {
            h.circ_closed(self.ctl_id, self.is_closed());
        }
        self.chan.try_send(ChanCommand::Destroy {
            circ_id: self.circ_id,
        });
    }
}

/// Whether to ask `path`'s last hop for congestion control: a circuit of
/// more than one hop (tor never negotiates it on one-hop circuits), an
/// exit that advertises FlowCtrl=2 and speaks ntor-v3, and a consensus
/// whose `cc_alg` is not 0 (proposal 324 §10.1, as tor 0.4.9 decides).
pub fn wants_cc(path: &[HopTarget], params: &CcParams) -> bool {
    match path.last() {
        Some(last) if path.len() > 1 => {
            params.enabled() && last.flowctrl_cc && last.ntor_v3 && last.ed_id.is_some()
        }
        _ => false,
    }
}

/// Build a circuit along `path` on `chan` (a channel to `path[0]`).
pub async fn build(
    chan: ChannelHandle,
    path: Vec<HopTarget>,
    timeout: Duration,
) -> Result<Circuit, BuildError> {
    build_with_progress(chan, path, timeout, Instant::now(), |_| {}).await
}

/// [`build`], calling `on_hop(n)` each time the `n`th hop (1-based)
/// completes its handshake; the build time counts from `start`.
pub async fn build_with_progress(
    chan: ChannelHandle,
    path: Vec<HopTarget>,
    timeout: Duration,
    start: Instant,
    on_hop: impl Fn(usize) + Send + Sync,
) -> Result<Circuit, BuildError> {
    let id = chan.hub.as_ref().map(|h| h.circ_launched(&path, false));
    build_launched_with_progress(chan, path, timeout, id.unwrap_or(0), start, on_hop).await
}

/// [`build`] for a circuit the control port already announced as `ctl_id`.
pub async fn build_launched(
    chan: ChannelHandle,
    path: Vec<HopTarget>,
    timeout: Duration,
    ctl_id: u64,
) -> Result<Circuit, BuildError> {
    build_launched_with_progress(chan, path, timeout, ctl_id, Instant::now(), |_| {}).await
}

/// [`build_with_progress`] for a circuit the control port already
/// announced as `ctl_id` (0: none).
pub async fn build_launched_with_progress(
    chan: ChannelHandle,
    path: Vec<HopTarget>,
    timeout: Duration,
    ctl_id: u64,
    start: Instant,
    on_hop: impl Fn(usize) + Send + Sync,
) -> Result<Circuit, BuildError> {
    let hub = chan.hub.clone();
    let res = build_inner(chan, path, timeout, ctl_id, start, on_hop).await;
    if let Some(h) = &hub {
        match &res {
            Ok(c) => h.circ_built(
                ctl_id,
                c.chan.clone(),
                c.circ_id,
                c.credits.clone(),
                c.build_time,
            ),
            Err(e) => h.circ_failed(ctl_id, e.circ_reason()),
        }
    }
    res
}

impl BuildError {
    /// The REASON a CIRC FAILED event gives for it.
    pub fn circ_reason(&self) -> &'static str {
        match self {
            BuildError::Timeout(_) | BuildError::Slow { .. } => "TIMEOUT",
            BuildError::Channel { .. } => "CONNECTFAILED",
            BuildError::Hop { .. } => "DESTROYED",
            BuildError::EmptyPath => "NOPATH",
        }
    }
}

async fn build_inner(
    chan: ChannelHandle,
    path: Vec<HopTarget>,
    timeout: Duration,
    ctl_id: u64,
    start: Instant,
    on_hop: impl Fn(usize) + Send + Sync,
) -> Result<Circuit, BuildError> {
    let hub = chan.hub.clone();
    let report = |done: usize| {
        if let Some(h) = &hub {
            h.circ_extended(ctl_id, &path, done);
        }
        on_hop(done);
    };
    let first = path.first().ok_or(BuildError::EmptyPath)?.clone();
    let params = path
        .last()
        .and_then(|h| h.params.clone())
        .unwrap_or_default();
    let want_cc = wants_cc(&path, &params);
    let last = path.len() - 1;
    let fut = async {
        // First hop: CREATE2 with ntor or ntor-v3.
        let (state, htype, onionskin) = glue::handshake_start(&first, want_cc && last == 0);
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
        let keys = glue::handshake_finish(state, &created.hdata, &params).map_err(|e| {
            BuildError::Hop {
                hop: 0,
                relay: first.nickname.clone(),
                err: e,
            }
        })?;
        let mut kh = keys.kh;
        let credits = circuit_credits();
        let mut cc_sendme_inc = keys.cc_sendme_inc;
        chan.send(ChanCommand::Install {
            circ_id,
            layer: keys.layer,
            params: params.clone(),
            credits: credits.clone(),
        })
        .await
        .map_err(|e| hop_err(0, &first, e))?;
        report(1);
        for (i, hop) in path.iter().enumerate().skip(1) {
            let (hop_kh, hop_cc) =
                extend_hop(&chan, circ_id, i, hop, want_cc && i == last, &params).await?;
            kh = hop_kh;
            cc_sendme_inc = hop_cc;
            report(i + 1);
        }
        let mut guard = guard;
        guard.armed = false;
        Ok((circ_id, credits, cc_sendme_inc, kh))
    };
    let (circ_id, credits, cc_sendme_inc, last_hop_kh) = tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| BuildError::Timeout(timeout))??;
    let build_time = start.elapsed();
    debug!(
        "built circuit {:08x} through {} hops in {:?}{}",
        circ_id,
        path.len(),
        build_time,
        match cc_sendme_inc {
            Some(i) => format!(" (congestion control, sendme_inc {i})"),
            None => String::new(),
        }
    );
    Ok(Circuit {
        chan,
        circ_id,
        credits,
        built_at: Instant::now(),
        build_time,
        ctl_id,
        hops: Mutex::new(Hops {
            path: Arc::new(path),
            cc_sendme_inc,
            last_hop_kh,
        }),
        extending: AtomicBool::new(false),
        first_used: Mutex::new(None),
        conflux_partner: Mutex::new(None),
    })
}

/// Extend a built circuit by one hop with fixed windows (an onion-service
/// circuit: a pre-built internal circuit to an introduction point, a
/// rendezvous point or an HSDir, as tor cannibalizes one). On failure the
/// circuit is dropped, i.e. destroyed.
pub async fn extend_circuit(
    mut c: Circuit,
    hop: HopTarget,
    timeout: Duration,
) -> Result<Circuit, BuildError> {
    let i = c.path().len();
    let params = hop.params.clone().unwrap_or_default();
    let (chan, circ_id) = (c.chan.clone(), c.circ_id);
    let fut = extend_hop(&chan, circ_id, i, &hop, false, &params);
    let (kh, _) = tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| BuildError::Timeout(timeout))??;
    let h = c.hops.get_mut().unwrap_or_else(|e| e.into_inner());
    Arc::make_mut(&mut h.path).push(hop);
    h.last_hop_kh = kh;
    h.cc_sendme_inc = None;
    Ok(c)
}

/// Add `new` hops to a built circuit that others may hold (a
/// controller's EXTENDCIRCUIT on an existing circuit, control-spec §3.10):
/// one EXTEND2 per hop through the current last hop, as tor does; the
/// last new hop is asked for congestion control when it offers it. No
/// stream is given the circuit meanwhile ([`Circuit::is_usable`]); streams
/// already on it stay with their hop. The caller marked the control
/// port's entry ([`ControlHub::circ_extending`]); this reports CIRC
/// EXTENDED per hop and BUILT with the longer path, or, when a hop fails
/// or `timeout` passes, destroys the circuit (FAILED, as tor closes a
/// circuit whose extension failed).
///
/// [`ControlHub::circ_extending`]: crate::client::control::hub::ControlHub::circ_extending
pub async fn extend_shared(
    c: &Circuit,
    new: Vec<HopTarget>,
    timeout: Duration,
) -> Result<(), BuildError> {
    if c.extending.swap(true, Ordering::Relaxed) {
        return Err(BuildError::Hop {
            hop: c.path().len(),
            relay: "-".into(),
            err: "an extension is already in progress".into(),
        });
    }
    let hub = c.chan.hub.clone();
    let fut = async {
        let mut path: Vec<HopTarget> = c.path().as_ref().clone();
        let mut full = path.clone();
        full.extend(new.iter().cloned());
        let params = new
            .last()
            .and_then(|h| h.params.clone())
            .unwrap_or_default();
        let want_cc = wants_cc(&full, &params);
        for (k, hop) in new.iter().enumerate() {
            let last = k + 1 == new.len();
            let i = path.len();
            let (kh, inc) =
                extend_hop(&c.chan, c.circ_id, i, hop, want_cc && last, &params).await?;
            path.push(hop.clone());
            {
                let mut h = c.hops();
                h.path = Arc::new(path.clone());
                h.last_hop_kh = kh;
                h.cc_sendme_inc = inc;
            }
            if let Some(hub) = &hub {
                hub.circ_extended(c.ctl_id, &path, path.len());
            }
        }
        Ok::<_, BuildError>(path)
    };
    let res = match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(BuildError::Timeout(timeout)),
    };
    match res {
        Ok(path) => {
            if let Some(hub) = &hub {
                hub.circ_reopened(c.ctl_id, &path);
            }
            c.extending.store(false, Ordering::Relaxed);
            debug!(
                "extended circuit {:08x} to {} hops at the controller's request",
                c.circ_id,
                path.len()
            );
            Ok(())
        }
        Err(e) => {
            // Half-extended circuits are not used again: destroy it. The
            // flag stays set, so nothing takes it meanwhile.
            c.credits.close();
            c.chan.try_send(ChanCommand::Destroy { circ_id: c.circ_id });
            if let Some(hub) = &hub {
                hub.circ_failed(c.ctl_id, e.circ_reason());
            }
            Err(e)
        }
    }
}

/// One EXTEND2 on circuit `circ_id` to `hop` (position `i`): the
/// handshake (asking for congestion control when `want_cc`), EXTENDED2,
/// and the new layer added. Returns the hop's KH and, when negotiated, its
/// `cc_sendme_inc`.
async fn extend_hop(
    chan: &ChannelHandle,
    circ_id: u32,
    i: usize,
    hop: &HopTarget,
    want_cc: bool,
    params: &CcParams,
) -> Result<([u8; 20], Option<u8>), BuildError> {
    let (state, htype, onionskin) = glue::handshake_start(hop, want_cc);
    let msg = Extend2 {
        specs: hop.extend_specs(),
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
    let keys =
        glue::handshake_finish(state, &created.hdata, params).map_err(|e| BuildError::Hop {
            hop: i,
            relay: hop.nickname.clone(),
            err: e,
        })?;
    let cc_sendme_inc = if want_cc { keys.cc_sendme_inc } else { None };
    chan.send(ChanCommand::AddHop {
        circ_id,
        layer: keys.layer,
        cc_sendme_inc,
    })
    .await
    .map_err(|e| hop_err(i, hop, e))?;
    Ok((keys.kh, cc_sendme_inc))
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
