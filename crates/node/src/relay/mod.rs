//! The relay: accepts links, answers CREATE2, forwards cells, extends
//! circuits, and (as an exit) connects streams.

pub mod config;
pub mod conflux;
pub mod control;
pub mod dircache;
pub mod dns;
pub mod exit;
pub mod exit_udp;
pub mod extend;
pub mod hs;
pub mod idle;
mod link;
pub mod netparams;
pub mod oom;
pub mod publish;
pub mod quic;
pub mod reactor;
pub mod rotate;
pub mod statsfile;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use onionmix_crypto::NtorSecretKey;
use onionmix_crypto::keys::RelayKeys;
use onionmix_crypto::x509::TlsIdentity;
use onionmix_link::{QuicServerIdentity, TlsTransport};
use onionmix_proto::cc::CcParams;
use onionmix_proto::conflux::ConfluxParams;
use onionmix_proto::dos_cc::{CircuitCreationDos, DosCcParams, DosCcStats, Verdict};
use onionmix_proto::dos_stream::DosStreamParams;
use onionmix_proto::exitpolicy::ExitPolicy;
use onionmix_proto::queue_limits::QueueLimits;

use crate::admission::{Admission, AdmissionConfig, KnownAddrs, Permit};
use crate::glue::RelayLinkIdentity;
use config::RelayConfig;
use exit::DirServer;
use link::connect;
pub use link::serve;
use reactor::RelayChanHandle;

/// Time allowed for an inbound or outbound link handshake.
pub const LINK_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);
/// Relay addresses remembered as known peers at most.
pub const MAX_KNOWN_ADDRS: usize = 16_384;
/// Client addresses the circuit-creation DoS defence tracks at once.
pub const DOS_CC_MAX_ADDRS: usize = 65_536;
/// Lifetime of our TLS link certificate.
pub const TLS_CERT_LIFETIME: u64 = 7 * 24 * 3600;

/// Counters a relay keeps (exported by `status` and tests).
#[derive(Debug, Default)]
pub struct RelayStats {
    /// Open channels.
    pub channels: AtomicUsize,
    /// Open circuits (both roles).
    pub circuits: AtomicUsize,
    /// Circuits created since start.
    pub circuits_created: AtomicU64,
    /// CREATE2 cells refused by DoS limits.
    pub creates_refused: AtomicU64,
    /// Of those, refused because the client's address is marked by the
    /// circuit-creation DoS defence.
    pub creates_refused_dos: AtomicU64,
    /// Exit streams and resolves refused (or circuits closed) by the
    /// stream-creation DoS defence.
    pub streams_refused_dos: AtomicU64,
    /// Relay cells forwarded.
    pub cells_forwarded: AtomicU64,
    /// Circuits closed for queueing more cells on a channel than the
    /// consensus allows (`circ_max_cell_queue_size`).
    pub queue_limit_kills: AtomicU64,
    /// Exit streams opened.
    pub streams: AtomicU64,
    /// Channels closed by the memory-pressure handler.
    pub oom_channels_closed: AtomicU64,
    /// Bytes their queues held.
    pub oom_bytes_freed: AtomicU64,
    /// BEGINs refused because the previous hop was a client.
    pub single_hop_begins_refused: AtomicU64,
    /// BEGINs and RESOLVEs for `.onion` names refused without a lookup
    /// (RFC 7686: no resolver is ever asked for one).
    pub onion_names_refused: AtomicU64,
    /// Bytes from targets to clients.
    pub exit_bytes_down: AtomicU64,
    /// Bytes from clients to targets.
    pub exit_bytes_up: AtomicU64,
    /// Bytes clients sent on exit streams before we answered CONNECTED
    /// (optimistic data, prop 174), written once the target connected.
    pub optimistic_bytes: AtomicU64,
    /// Exit streams that carried optimistic data.
    pub optimistic_streams: AtomicU64,
    /// Circuits on which a client negotiated congestion control with us.
    pub cc_circuits: AtomicU64,
    /// XOFFs sent (our buffer towards a target filled).
    pub xoff_sent: AtomicU64,
    /// XONs sent.
    pub xon_sent: AtomicU64,
    /// XOFFs received from clients.
    pub xoff_received: AtomicU64,
    /// XONs received from clients.
    pub xon_received: AtomicU64,
    /// Conflux sets created (a first CONFLUX_LINK with a new nonce).
    pub conflux_sets: AtomicU64,
    /// Circuits linked into conflux sets.
    pub conflux_legs_linked: AtomicU64,
    /// CONFLUX_LINKs refused (conflux off, too many legs, data loss).
    pub conflux_refused: AtomicU64,
    /// CONFLUX_SWITCHes sent (we moved a set's traffic to another leg).
    pub conflux_switches_sent: AtomicU64,
    /// CONFLUX_SWITCHes received.
    pub conflux_switches_received: AtomicU64,
    /// Multiplexed messages delivered to a set's streams.
    pub conflux_cells_delivered: AtomicU64,
    /// ... of which waited in a reorder queue first.
    pub conflux_cells_reordered: AtomicU64,
    /// UDP streams opened (CONNECT_UDP answered CONNECTED_UDP).
    pub udp_streams: AtomicU64,
    /// Datagrams from clients sent to targets.
    pub datagrams_up: AtomicU64,
    /// Datagrams from targets sent to clients.
    pub datagrams_down: AtomicU64,
    /// Datagrams dropped (queue or circuit window full, too large).
    pub datagrams_dropped: AtomicU64,
}

/// Everything the relay's tasks share.
pub struct RelayCtx {
    /// Configuration.
    pub cfg: RelayConfig,
    /// Our RSA identity digest.
    pub rsa_id: [u8; 20],
    /// Our Ed25519 identity.
    pub ed_id: [u8; 32],
    ntor: RwLock<Vec<NtorSecretKey>>,
    link: RwLock<LinkSet>,
    /// QUIC links: the endpoint (once started) and what we know of peers.
    pub quic: quic::RelayQuic,
    /// Effective exit policy.
    pub exit_policy: ExitPolicy,
    /// Open relay channels by peer identity.
    pub channels: ChannelRegistry,
    /// Counters.
    pub stats: RelayStats,
    /// Directory service for BEGIN_DIR (authorities).
    pub dir: Option<Arc<dyn DirServer>>,
    /// When the relay started (for `uptime`).
    pub started: std::time::Instant,
    /// The ORPort actually bound (set by [`start`]).
    bound_or_port: std::sync::atomic::AtomicU16,
    /// Held while keys or the link identity are being renewed, so the
    /// rotation loop and a handshake that finds them expired never both do.
    pub(crate) rotation: Mutex<()>,
    /// Who may open a connection to the ORPort.
    pub admission: Arc<Admission>,
    /// Addresses of authorities and of relays that proved their identity
    /// (they skip per-address limits and may use reserved slots).
    pub known: KnownAddrs,
    /// Every channel's outbound queue (the memory-pressure handler's view).
    pub queues: Arc<oom::QueueRegistry>,
    /// Onion-service roles: HSDir store, introduction and rendezvous
    /// tables, their counters.
    pub hs: hs::HsRelay,
    /// Consensus parameters (congestion and flow control, SENDMEs).
    cc_params: RwLock<Arc<CcParams>>,
    /// What the control port reports (traffic, OR connections, events).
    pub control: control::RelayControl,
    /// Consensus parameters of conflux.
    cfx_params: RwLock<ConfluxParams>,
    /// Conflux sets whose legs end here.
    pub conflux: conflux::ConfluxPool,
    /// Cells one circuit may queue on a channel towards the client, and
    /// away from it (consensus parameters; see [`QueueLimits`]).
    max_queue_toward_client: AtomicU32,
    max_queue_away_from_client: AtomicU32,
    /// The circuit-creation DoS defence's consensus parameters.
    dos_params: RwLock<DosCcParams>,
    /// Its per-client-address state.
    dos_cc: Mutex<CircuitCreationDos>,
    /// The stream-creation DoS defence's consensus parameters.
    dos_stream: RwLock<DosStreamParams>,
}

impl RelayCtx {
    /// Current ntor keys (current first).
    pub fn ntor_keys(&self) -> Vec<NtorSecretKey> {
        self.ntor.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
    /// Replace the ntor keys (rotation).
    pub fn set_ntor_keys(&self, k: Vec<NtorSecretKey>) {
        *self.ntor.write().unwrap_or_else(|e| e.into_inner()) = k;
    }
    /// The current consensus parameters.
    pub fn cc_params(&self) -> Arc<CcParams> {
        self.cc_params
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
    /// Replace the consensus parameters (a new consensus).
    pub fn set_cc_params(&self, p: CcParams) {
        *self.cc_params.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(p);
    }
    /// The per-circuit queue limits (cells) the consensus sets.
    pub fn queue_limits(&self) -> QueueLimits {
        QueueLimits {
            toward_client: self.max_queue_toward_client.load(Ordering::Relaxed),
            away_from_client: self.max_queue_away_from_client.load(Ordering::Relaxed),
        }
    }
    /// Replace the per-circuit queue limits (a new consensus; tests).
    pub fn set_queue_limits(&self, l: QueueLimits) {
        self.max_queue_toward_client
            .store(l.toward_client, Ordering::Relaxed);
        self.max_queue_away_from_client
            .store(l.away_from_client, Ordering::Relaxed);
    }
    /// The stream-creation DoS defence's consensus parameters.
    pub fn dos_stream_params(&self) -> DosStreamParams {
        *self.dos_stream.read().unwrap_or_else(|e| e.into_inner())
    }
    /// Replace them (a new consensus; tests).
    pub fn set_dos_stream_params(&self, p: DosStreamParams) {
        *self.dos_stream.write().unwrap_or_else(|e| e.into_inner()) = p;
    }
    /// The circuit-creation DoS defence's parameters: the consensus's,
    /// with `dos_circuit_creation` from the configuration overriding
    /// whether it is on.
    pub fn dos_cc_params(&self) -> DosCcParams {
        let mut p = *self.dos_params.read().unwrap_or_else(|e| e.into_inner());
        if let Some(on) = self.cfg.dos_circuit_creation {
            p.enabled = on;
        }
        p
    }
    /// Replace the DoS defence's consensus parameters (a new consensus).
    pub fn set_dos_cc_params(&self, p: DosCcParams) {
        *self.dos_params.write().unwrap_or_else(|e| e.into_inner()) = p;
    }
    /// The circuit-creation DoS defence's verdict on a CREATE cell from a
    /// client at `addr` that has `connections` connections open.
    pub fn dos_on_create(&self, addr: std::net::IpAddr, connections: usize) -> Verdict {
        let p = self.dos_cc_params();
        if !p.enabled {
            return Verdict::Allow;
        }
        let jitter = rand::random::<f64>();
        let mut t = self.dos_cc.lock().unwrap_or_else(|e| e.into_inner());
        let before = t.stats().marked;
        let v = t.on_create(&p, addr, connections, std::time::Instant::now(), jitter);
        if t.stats().marked > before {
            // The address is not logged (a client's).
            info!("marked a client address for circuit-creation DoS");
        }
        v
    }
    /// A circuit of a client at `addr` was closed for its outbound queue.
    pub fn dos_on_max_outq(&self, addr: std::net::IpAddr) {
        let p = self.dos_cc_params();
        if !p.enabled {
            return;
        }
        let jitter = rand::random::<f64>();
        self.dos_cc
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .on_max_outq(&p, addr, std::time::Instant::now(), jitter);
    }
    /// The DoS defence's counters and tracked addresses.
    pub fn dos_cc_stats(&self) -> (DosCcStats, usize) {
        let t = self.dos_cc.lock().unwrap_or_else(|e| e.into_inner());
        (t.stats(), t.len())
    }
    /// The current conflux consensus parameters.
    pub fn cfx_params(&self) -> ConfluxParams {
        *self.cfx_params.read().unwrap_or_else(|e| e.into_inner())
    }
    /// Replace the conflux consensus parameters.
    pub fn set_cfx_params(&self, p: ConfluxParams) {
        *self.cfx_params.write().unwrap_or_else(|e| e.into_inner()) = p;
    }
    pub(crate) fn link(&self) -> LinkSet {
        self.link.read().unwrap_or_else(|e| e.into_inner()).clone()
    }
    /// Install a new link set; the QUIC endpoint serves its certificate to
    /// connections arriving from now on.
    fn install_link(&self, set: LinkSet) {
        let q = set.quic.clone();
        *self.link.write().unwrap_or_else(|e| e.into_inner()) = set;
        if let (Some(q), Some(t)) = (q, self.quic.endpoint()) {
            t.set_server_identity(&q);
        }
    }
    /// Install new keys (after a rotation) at `now_unix`: a fresh TLS
    /// identity and link certificates for new channels (on both
    /// transports), the new ntor keys for CREATE2. Channels already open
    /// keep working.
    pub fn replace_keys(&self, keys: RelayKeys, now_unix: u64) -> Result<(), String> {
        let ntor = keys.ntor_keys();
        self.install_link(link_identity(keys, now_unix, self.quic.endpoint())?);
        self.set_ntor_keys(ntor);
        Ok(())
    }
    /// A new TLS key and certificate and new link certificates with the
    /// same relay keys (tor renews its TLS identity every few hours), on
    /// both transports.
    pub fn renew_link(&self, now_unix: u64) -> Result<(), String> {
        self.install_link(link_identity(self.keys(), now_unix, self.quic.endpoint())?);
        Ok(())
    }
    /// The relay's keys.
    pub fn keys(&self) -> RelayKeys {
        self.link().id.keys().clone()
    }
    /// Admit a new connection (TLS or QUIC) from `peer` under the ORPort's
    /// limits; known relays and authorities skip the per-address ones.
    pub(crate) fn admit(&self, peer: SocketAddr) -> Result<Permit, crate::admission::Refusal> {
        let known = self.known.contains(peer.ip());
        self.admission
            .admit(peer.ip(), known, std::time::Instant::now())
    }
    /// The ORPort we listen on.
    pub fn or_port(&self) -> u16 {
        match self.bound_or_port.load(Ordering::Relaxed) {
            0 => self.cfg.or_listen.port(),
            p => p,
        }
    }
    /// Observed bandwidth (bytes/s) for the descriptor: the exit traffic
    /// rate since start, at least 1 KiB/s.
    pub fn observed_bandwidth(&self) -> u64 {
        let secs = self.started.elapsed().as_secs().max(1);
        let bytes = self.stats.exit_bytes_down.load(Ordering::Relaxed)
            + self.stats.exit_bytes_up.load(Ordering::Relaxed)
            + self.stats.cells_forwarded.load(Ordering::Relaxed) * 514;
        (bytes / secs).max(1024)
    }
}

use crate::clock::now_unix;

/// What a relay presents on new links, built together so they always
/// match: the link certificates (CERTS type 5 covers the TLS certificate)
/// and the TLS certificate served on both transports.
#[derive(Clone)]
pub(crate) struct LinkSet {
    /// Keys and CERTS payloads.
    pub(crate) id: Arc<RelayLinkIdentity>,
    /// The TLS transport serving the certificate.
    pub(crate) tls: TlsTransport,
    /// The same certificate for the QUIC endpoint, once it runs.
    pub(crate) quic: Option<QuicServerIdentity>,
    /// The TLS certificate and key (for the QUIC endpoint when it starts).
    pub(crate) cert: Arc<TlsIdentity>,
}

/// A fresh TLS identity (certificate signed by the RSA identity) and the
/// link certificates for `keys`, served by the TLS transport and, when
/// given, the QUIC endpoint.
fn link_identity(
    keys: RelayKeys,
    now: u64,
    quic: Option<&onionmix_link::QuicTransport>,
) -> Result<LinkSet, String> {
    let tls = TlsIdentity::generate(
        &mut rand::rngs::OsRng,
        &keys.rsa_identity,
        now,
        TLS_CERT_LIFETIME,
    )
    .map_err(|e| format!("TLS identity: {e}"))?;
    let transport = TlsTransport::server(tls.cert_der.clone(), tls.key_pkcs8_der.to_vec())
        .map_err(|e| format!("TLS config: {e}"))?;
    let quic = match quic {
        Some(t) => Some(
            t.server_identity(tls.cert_der.clone(), tls.key_pkcs8_der.to_vec())
                .map_err(|e| format!("QUIC config: {e}"))?,
        ),
        None => None,
    };
    let link = RelayLinkIdentity::new(keys, &tls, now)?;
    Ok(LinkSet {
        id: Arc::new(link),
        tls: transport,
        quic,
        cert: Arc::new(tls),
    })
}

/// Build a relay context from config and keys.
pub fn make_ctx(
    cfg: RelayConfig,
    keys: RelayKeys,
    dir: Option<Arc<dyn DirServer>>,
) -> Result<Arc<RelayCtx>, String> {
    let rsa_id = keys.rsa_id();
    let ed_id = keys.ed_id();
    let ntor = keys.ntor_keys();
    let link = link_identity(keys, now_unix(), None)?;
    let exit_policy = cfg.exit_policy()?;
    let quic_fallback = Duration::from_secs(cfg.quic_fallback_secs);
    let testing = cfg.testing_network;
    let max_chans = cfg.max_channels;
    let cfg_hs = cfg.hs_limits();
    let admission = Admission::new(AdmissionConfig {
        max_per_addr: cfg.max_conns_per_addr,
        ..AdmissionConfig::orport(max_chans)
    });
    let fixed = cfg.authorities.iter().map(|a| a.or_addr.ip()).collect();
    let known = KnownAddrs::new(fixed, MAX_KNOWN_ADDRS);
    // All reorder queues together: a fifth of the memory cap (where tor's
    // out-of-memory handler starts looking at them).
    let ooo_budget = oom::cap(&cfg) / 5;
    Ok(Arc::new(RelayCtx {
        cfg,
        rsa_id,
        ed_id,
        ntor: RwLock::new(ntor),
        link: RwLock::new(link),
        quic: quic::RelayQuic::new(quic_fallback, testing),
        exit_policy,
        channels: ChannelRegistry::new(max_chans),
        stats: RelayStats::default(),
        dir,
        started: std::time::Instant::now(),
        bound_or_port: std::sync::atomic::AtomicU16::new(0),
        rotation: Mutex::new(()),
        admission,
        known,
        queues: Arc::default(),
        hs: hs::HsRelay::new(cfg_hs),
        cc_params: RwLock::default(),
        control: control::RelayControl::default(),
        cfx_params: RwLock::default(),
        conflux: conflux::ConfluxPool::new(ooo_budget),
        max_queue_toward_client: AtomicU32::new(QueueLimits::default().toward_client),
        max_queue_away_from_client: AtomicU32::new(QueueLimits::default().away_from_client),
        dos_params: RwLock::default(),
        dos_cc: Mutex::new(CircuitCreationDos::new(DOS_CC_MAX_ADDRS)),
        dos_stream: RwLock::default(),
    }))
}

type Slot = Arc<tokio::sync::Mutex<Option<RelayChanHandle>>>;

/// Relay channels by peer RSA identity, for reuse when extending.
pub struct ChannelRegistry {
    slots: Mutex<HashMap<[u8; 20], Slot>>,
    max: usize,
}

impl ChannelRegistry {
    fn new(max: usize) -> Self {
        ChannelRegistry {
            slots: Mutex::new(HashMap::new()),
            max,
        }
    }

    fn slot(&self, id: [u8; 20]) -> Result<Slot, String> {
        let mut s = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if !s.contains_key(&id) && s.len() >= self.max {
            s.retain(|_, v| match v.try_lock() {
                Ok(g) => g.as_ref().is_some_and(|h| !h.is_closed()),
                Err(_) => true,
            });
            if s.len() >= self.max {
                return Err("too many relay channels".into());
            }
        }
        Ok(s.entry(id).or_default().clone())
    }

    /// Record an authenticated inbound channel so extends can reuse it.
    pub fn register(&self, id: [u8; 20], h: RelayChanHandle) {
        if let Ok(slot) = self.slot(id)
            && let Ok(mut g) = slot.try_lock()
            && g.as_ref().is_none_or(|x| x.is_closed())
        {
            *g = Some(h);
        }
    }

    /// The channel to relay `id` at `addr`, opening one if needed: over
    /// QUIC when we run QUIC and `quic` (a hint: the EXTEND2 link
    /// specifier, the descriptor) or what we learned says the peer does,
    /// falling back to TLS (see [`crate::linkchoice`]).
    pub async fn get_or_connect(
        &self,
        ctx: &Arc<RelayCtx>,
        id: [u8; 20],
        ed: Option<[u8; 32]>,
        addr: SocketAddr,
        quic: Option<SocketAddr>,
    ) -> Result<RelayChanHandle, String> {
        let slot = self.slot(id)?;
        let mut g = slot.lock().await;
        if let Some(h) = g.as_ref()
            && !h.is_closed()
        {
            if let (Some(want), Some(p)) = (ed, h.peer.as_ref())
                && want != p.ed_id
            {
                return Err("Ed25519 identity differs from the open channel's".into());
            }
            return Ok(h.clone());
        }
        let h = connect(ctx, id, ed, addr, quic).await?;
        *g = Some(h.clone());
        Ok(h)
    }
}

/// The relay's counters as JSON (also written to `<data_dir>/status.json`
/// about every second by a running relay).
pub fn status(ctx: &RelayCtx) -> serde_json::Value {
    let s = &ctx.stats;
    let n = |c: &AtomicU64| c.load(Ordering::Relaxed);
    let cc = ctx.cc_params();
    serde_json::json!({
        "channels": s.channels.load(Ordering::Relaxed),
        "circuits": s.circuits.load(Ordering::Relaxed),
        "circuits_created": n(&s.circuits_created),
        "streams": n(&s.streams),
        "cells_forwarded": n(&s.cells_forwarded),
        "exit_bytes_down": n(&s.exit_bytes_down),
        "exit_bytes_up": n(&s.exit_bytes_up),
        "quic_port": ctx.quic.port(),
        "links": ctx.queues.links_json(),
        "udp": {
            "enabled": ctx.cfg.exit && ctx.cfg.exit_udp,
            "streams": n(&s.udp_streams),
            "datagrams_up": n(&s.datagrams_up),
            "datagrams_down": n(&s.datagrams_down),
            "datagrams_dropped": n(&s.datagrams_dropped),
        },
        "congestion_control": {
            "enabled": cc.enabled(),
            "sendme_inc": cc.sendme_inc,
            "cc_circuits": n(&s.cc_circuits),
            "xoff_sent": n(&s.xoff_sent),
            "xon_sent": n(&s.xon_sent),
            "xoff_received": n(&s.xoff_received),
            "xon_received": n(&s.xon_received),
        },
        "conflux": {
            "enabled": ctx.cfg.conflux && ctx.cfx_params().enabled,
            "sets_open": ctx.conflux.len(),
            "reorder_queue_bytes": ctx.conflux.ooo_bytes(),
            "sets": n(&s.conflux_sets),
            "legs_linked": n(&s.conflux_legs_linked),
            "refused": n(&s.conflux_refused),
            "switches_sent": n(&s.conflux_switches_sent),
            "switches_received": n(&s.conflux_switches_received),
            "cells_delivered": n(&s.conflux_cells_delivered),
            "cells_reordered": n(&s.conflux_cells_reordered),
        },
    })
}

/// Rewrite `<data_dir>/status.json` (see [`status`]) about every second.
pub(crate) async fn write_status_forever(ctx: Arc<RelayCtx>) {
    let path = ctx.cfg.data_dir.join("status.json");
    let mut last = String::new();
    loop {
        let text = status(&ctx).to_string();
        if text != last {
            if onionmix_fsutil::write_atomic(&path, &text).is_err() {
                debug!("cannot write {}", path.display());
            }
            last = text;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Load the relay's keys from `<data_dir>/keys`, generating them on first
/// start.
pub fn load_or_generate_keys(data_dir: &std::path::Path) -> Result<RelayKeys, String> {
    let dir = data_dir.join("keys");
    let now = now_unix();
    let mut rng = rand::rngs::OsRng;
    if dir.join("secret_id_key").exists() {
        let mut k = RelayKeys::load(&dir, &mut rng, now).map_err(|e| e.to_string())?;
        if k.signing_key_needs_rotation(now)
            .map_err(|e| e.to_string())?
        {
            if let Err(e) = k.rotate_signing_key(&mut rng, now) {
                warn!("signing key rotation failed: {e}");
            }
            k.save(&dir).map_err(|e| e.to_string())?;
        }
        Ok(k)
    } else {
        let k = RelayKeys::generate(&mut rng, now).map_err(|e| e.to_string())?;
        k.save(&dir).map_err(|e| e.to_string())?;
        info!("generated new relay keys");
        Ok(k)
    }
}

/// Bind the ORPort and start serving; returns the bound address.
pub async fn start(ctx: Arc<RelayCtx>) -> Result<SocketAddr, String> {
    let listener = TcpListener::bind(ctx.cfg.or_listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", ctx.cfg.or_listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    ctx.bound_or_port.store(addr.port(), Ordering::Relaxed);
    if let Some(mut bind) = ctx.cfg.quic_bind() {
        if bind.port() == 0 {
            // The ORPort's number, on UDP.
            bind.set_port(addr.port());
        }
        quic::start(&ctx, bind)?;
    }
    if let Some(m) = ctx.cfg.metrics_port {
        crate::metrics::serve(m, crate::metrics::Source::Relay(ctx.clone())).await?;
    }
    control::start(ctx.clone()).await?;
    tokio::spawn(oom::oom_loop(ctx.clone()));
    tokio::spawn(hs::maintenance_loop(ctx.clone()));
    tokio::spawn(serve(ctx, listener));
    Ok(addr)
}

/// Run a relay until SIGINT/SIGTERM: load or create keys, listen, publish.
pub async fn run(cfg: RelayConfig) -> Result<(), String> {
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| format!("cannot create {}: {e}", cfg.data_dir.display()))?;
    let keys = load_or_generate_keys(&cfg.data_dir)?;
    // A directory cache (BEGIN_DIR) unless turned off: tor clients take
    // only directory caches (V2Dir) as guards.
    let dir: Option<Arc<dyn DirServer>> = if cfg.dir_cache && !cfg.authorities.is_empty() {
        let ups = cfg.authorities.iter().map(|a| a.dir_addr).collect();
        Some(Arc::new(dircache::DirCache::new(ups)))
    } else {
        None
    };
    let ctx = make_ctx(cfg, keys, dir)?;
    let addr = start(ctx.clone()).await?;
    info!(
        "relay {} listening on {addr} (fingerprint {})",
        ctx.cfg.nickname,
        hex::encode_upper(ctx.rsa_id)
    );
    tokio::spawn(publish::publish_loop(ctx.clone()));
    tokio::spawn(netparams::netparams_loop(ctx.clone()));
    tokio::spawn(write_status_forever(ctx.clone()));
    tokio::spawn(rotate::rotation_loop(ctx.clone()));
    tokio::spawn(statsfile::stats_loop(ctx.clone()));
    let load = ctx.clone();
    tokio::spawn(crate::memory::trim_loop(move || {
        load.stats.channels.load(Ordering::Relaxed) + load.stats.circuits.load(Ordering::Relaxed)
    }));
    control::wait_for_shutdown(&ctx).await;
    info!("shutting down");
    Ok(())
}
