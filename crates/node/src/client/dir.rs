//! Directory manager: fetches the microdesc consensus, authority key
//! certificates and microdescriptors (from authorities' DirPorts at
//! bootstrap, over BEGIN_DIR on one-hop circuits afterwards), verifies
//! them, keeps the current [`NetDir`] and the guard state, and chooses
//! paths.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, SystemTime};

use onionmix_netdoc::vanguards::{Layer2Set, VanguardParams};
use rand::seq::SliceRandom;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::{debug, info, warn};

use onionmix_netdoc::{
    AuthCertificate, AuthorityConfig, DirRequest, DirResponse, ExitTarget, GuardParams, GuardSet,
    NetDir, PathBuilder, PathConfig, PathError, RelayFlags, RelayId, RsaId, TimeTolerance,
    UnverifiedConsensus, merge_certificates, parse_microdescs,
};

use onionmix_proto::cc::CcParams;

use super::circmgr::{CircMgr, Purpose};

/// Most authority key certificates a client keeps.
const MAX_CERTS: usize = 64;
use super::circuit::HopTarget;
use super::config::ClientConfig;
use crate::reactor::StreamRequest;

/// Time allowed for one directory download.
pub const DIR_FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Why the directory could not be obtained.
#[derive(Debug, thiserror::Error)]
pub enum DirError {
    /// Every authority failed; the last error is given.
    #[error("no authority gave a usable {what}: {last}")]
    AllFailed {
        /// Which document.
        what: &'static str,
        /// Last error seen.
        last: String,
    },
    /// Not enough relays have descriptors yet.
    #[error("not enough directory info: {have:.2} of the weighted paths usable, {need:.2} needed")]
    NotEnough {
        /// Fraction usable.
        have: f64,
        /// Fraction needed.
        need: f64,
    },
}

/// The directory manager.
pub struct DirMgr {
    cfg: Arc<ClientConfig>,
    auths: Vec<AuthorityConfig>,
    netdir: RwLock<Option<Arc<NetDir>>>,
    certs: Mutex<Vec<AuthCertificate>>,
    guards: Mutex<GuardSet>,
    /// Vanguards-lite layer 2 guards (memory only, as in tor).
    layer2: Mutex<Layer2Set>,
    path_cfg: PathConfig,
    pub(crate) only: onionmix_netdoc::NodeRestrictions,
    guard_file: PathBuf,
    /// The refresh time picked for the consensus with this valid-after.
    refresh_at: Mutex<Option<(SystemTime, SystemTime)>>,
}

impl std::fmt::Debug for DirMgr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirMgr").finish()
    }
}

fn parse_hex20(s: &str) -> Option<[u8; 20]> {
    hex::decode(s).ok()?.try_into().ok()
}

impl DirMgr {
    /// The client's configuration.
    pub fn config(&self) -> &ClientConfig {
        &self.cfg
    }

    /// Create, loading the guard state file if present.
    pub fn new(cfg: Arc<ClientConfig>) -> Result<Self, String> {
        let mut auths = Vec::new();
        for a in &cfg.authorities {
            let v3 = parse_hex20(&a.v3ident).ok_or("bad v3ident")?;
            let mut ac = AuthorityConfig::new(a.nickname.clone(), v3);
            ac.dir_addr = Some(a.dir_addr);
            ac.or_addr = Some(a.or_addr);
            ac.rsa_id = parse_hex20(&a.fingerprint);
            auths.push(ac);
        }
        let guard_file = cfg.data_dir.join("guards.json");
        let params = GuardParams::default();
        let guards = match std::fs::read_to_string(&guard_file) {
            Ok(text) => GuardSet::from_json(&text, params.clone()).unwrap_or_else(|e| {
                warn!(
                    "ignoring unreadable guard state {}: {e}",
                    guard_file.display()
                );
                GuardSet::new(params)
            }),
            Err(_) => GuardSet::new(params),
        };
        let path_cfg = if cfg.testing_network {
            PathConfig::testing_network()
        } else {
            PathConfig::default()
        };
        let only = cfg.node_restrictions();
        Ok(DirMgr {
            cfg,
            auths,
            netdir: RwLock::new(None),
            refresh_at: Mutex::new(None),
            certs: Mutex::new(Vec::new()),
            guards: Mutex::new(guards),
            layer2: Mutex::new(Layer2Set::default()),
            path_cfg,
            only,
            guard_file,
        })
    }

    /// The current network directory.
    pub fn netdir(&self) -> Option<Arc<NetDir>> {
        self.netdir
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn save_guards(&self) {
        let json = self
            .guards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .to_json();
        if onionmix_fsutil::write_atomic(&self.guard_file, json).is_err() {
            warn!(
                "could not save guard state to {}",
                self.guard_file.display()
            );
        }
    }

    pub(crate) async fn fetch_dirport(
        addr: SocketAddr,
        req: &DirRequest,
    ) -> Result<DirResponse, String> {
        let fut = async {
            let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
            s.write_all(&req.encode(Some(&addr.to_string())))
                .await
                .map_err(|e| e.to_string())?;
            let mut p = req.response_parser();
            let mut buf = vec![0u8; 64 * 1024];
            loop {
                let n = s.read(&mut buf).await.map_err(|e| e.to_string())?;
                if n == 0 {
                    break;
                }
                p.push(&buf[..n]).map_err(|e| e.to_string())?;
                if p.is_complete() {
                    break;
                }
            }
            p.finish().map_err(|e| e.to_string())
        };
        tokio::time::timeout(DIR_FETCH_TIMEOUT, fut)
            .await
            .map_err(|_| "directory fetch timed out".to_string())?
    }

    async fn fetch_begindir(
        circmgr: &CircMgr,
        hop: HopTarget,
        req: &DirRequest,
    ) -> Result<DirResponse, String> {
        let circ = circmgr
            .build_path(vec![hop])
            .await
            .map_err(|e| e.to_string())?;
        let (mut s, _) = circ
            .open_stream(StreamRequest::BeginDir, DIR_FETCH_TIMEOUT)
            .await
            .map_err(|e| e.to_string())?;
        s.write_all(&req.encode(None))
            .await
            .map_err(|e| e.to_string())?;
        let body = s
            .read_to_end(req.max_body_len() + 64 * 1024, DIR_FETCH_TIMEOUT)
            .await
            .map_err(|e| e.to_string())?;
        let mut p = req.response_parser();
        p.push(&body).map_err(|e| e.to_string())?;
        p.finish().map_err(|e| e.to_string())
    }

    /// The authorities as BEGIN_DIR targets (needs a consensus for keys).
    fn authority_hops(&self) -> Vec<HopTarget> {
        let Some(nd) = self.netdir() else {
            return Vec::new();
        };
        let params = Arc::new(CcParams::from_consensus(nd.params()));
        self.auths
            .iter()
            .filter_map(|a| {
                let r = nd.relay_by_rsa_id(&a.rsa_id?)?;
                Some(self.hop(r, &params))
            })
            .collect()
    }

    /// Fetch `req` from any authority (BEGIN_DIR when `via` is given and we
    /// have keys for the authorities, DirPort otherwise).
    async fn fetch_any(
        &self,
        req: &DirRequest,
        via: Option<&CircMgr>,
    ) -> Result<DirResponse, String> {
        let mut last = "no authorities configured".to_string();
        if let Some(cm) = via {
            let mut hops = self.authority_hops();
            hops.shuffle(&mut rand::thread_rng());
            for hop in hops {
                match Self::fetch_begindir(cm, hop, req).await {
                    Ok(r) => return Ok(r),
                    Err(e) => {
                        debug!("BEGIN_DIR fetch of {} failed: {e}", req.path());
                        last = e;
                    }
                }
            }
        }
        let mut addrs: Vec<SocketAddr> = self.auths.iter().filter_map(|a| a.dir_addr).collect();
        addrs.shuffle(&mut rand::thread_rng());
        for a in addrs {
            match Self::fetch_dirport(a, req).await {
                Ok(r) => return Ok(r),
                Err(e) => {
                    debug!("DirPort fetch of {} failed: {e}", req.path());
                    last = e;
                }
            }
        }
        Err(last)
    }

    /// Fetch the key certificates of authorities `ids` and keep the valid
    /// ones.
    async fn fetch_certs(
        &self,
        ids: &[[u8; 20]],
        via: Option<&CircMgr>,
        now: std::time::SystemTime,
    ) -> Result<(), String> {
        let req = DirRequest::authority_certs(ids).map_err(|e| e.to_string())?;
        let resp = self.fetch_any(&req, via).await?;
        let text = resp.body_text().map_err(|e| e.to_string())?;
        let mut fetched = Vec::new();
        for c in AuthCertificate::parse_all(text, now) {
            match c {
                Ok(c) => fetched.push(c),
                Err(e) => warn!("rejected an authority key certificate: {e}"),
            }
        }
        let mut certs = self.certs.lock().unwrap_or_else(|e| e.into_inner());
        merge_certificates(&mut certs, fetched, &self.auths, now, MAX_CERTS);
        Ok(())
    }

    /// Fetch and verify a fresh consensus and the microdescriptors it needs;
    /// install the result. `via` enables BEGIN_DIR.
    pub async fn refresh(&self, via: Option<&CircMgr>) -> Result<Arc<NetDir>, DirError> {
        let now = crate::clock::now();
        let fail = |what, last: String| DirError::AllFailed { what, last };
        // A process without key certificates (a fresh client) asks for
        // every configured authority's alongside the consensus (as tor
        // does at bootstrap), rather than a round trip after it.
        let all_ids: Vec<[u8; 20]> = self.auths.iter().map(|a| a.v3ident).collect();
        let no_certs = self
            .certs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty();
        let early_certs = async {
            if no_certs
                && !all_ids.is_empty()
                && let Err(e) = self.fetch_certs(&all_ids, via, now).await
            {
                debug!("key certificates alongside the consensus: {e}");
            }
        };
        let consensus_req = DirRequest::microdesc_consensus();
        let (resp, ()) = tokio::join!(self.fetch_any(&consensus_req, via), early_certs);
        let resp = resp.map_err(|e| fail("consensus", e))?;
        let text = resp
            .body_text()
            .map_err(|e| fail("consensus", e.to_string()))?;
        let unverified =
            UnverifiedConsensus::parse(text).map_err(|e| fail("consensus", e.to_string()))?;
        let missing = {
            let certs = self.certs.lock().unwrap_or_else(|e| e.into_inner());
            unverified.missing_certificates(&self.auths, &certs, now)
        };
        if !missing.is_empty() {
            self.fetch_certs(&missing, via, now)
                .await
                .map_err(|e| fail("key certificates", e))?;
        }
        let certs = self.certs.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let consensus = unverified
            .verify(&self.auths, &certs, now, TimeTolerance::default())
            .map_err(|e| fail("consensus", format!("consensus refused: {e}")))?;
        let mut nd = match self.netdir() {
            Some(old) => old.with_new_consensus(consensus),
            None => NetDir::new(consensus),
        };
        let missing = nd.missing_microdescs();
        for batch in DirRequest::microdesc_batches(&missing) {
            match self.fetch_any(&batch, via).await {
                Ok(resp) => match resp.body_text() {
                    Ok(text) => {
                        // add_microdescs keeps only those the consensus lists.
                        let b = parse_microdescs(text);
                        nd.add_microdescs(b.microdescs);
                    }
                    Err(e) => warn!("bad microdescriptor reply: {e}"),
                },
                Err(e) => warn!("microdescriptor fetch failed: {e}"),
            }
        }
        let need = nd.paths_needed(Some(self.cfg.paths_needed_to_build_circuits));
        if !nd.has_enough_dir_info(Some(self.cfg.paths_needed_to_build_circuits)) {
            return Err(DirError::NotEnough {
                have: nd.usable_fraction(),
                need,
            });
        }
        {
            let mut g = self.guards.lock().unwrap_or_else(|e| e.into_inner());
            g.update(&nd, now, &mut rand::thread_rng());
        }
        self.save_guards();
        let nd = Arc::new(nd);
        *self.netdir.write().unwrap_or_else(|e| e.into_inner()) = Some(nd.clone());
        info!(
            "directory: {} relays usable, consensus valid until {}",
            nd.relays().count(),
            humantime(nd.lifetime().valid_until)
        );
        Ok(nd)
    }

    /// When to refresh next (wall clock): a random time in the
    /// consensus's refresh window, chosen once per consensus; soon if there
    /// is none.
    pub fn next_refresh_at(&self) -> SystemTime {
        let now = crate::clock::now();
        let Some(nd) = self.netdir() else {
            return now + Duration::from_secs(5);
        };
        let mut slot = self.refresh_at.lock().unwrap_or_else(|e| e.into_inner());
        let va = nd.lifetime().valid_after;
        match *slot {
            Some((for_va, at)) if for_va == va => at,
            _ => {
                let at = nd.lifetime().pick_refresh_time(&mut rand::thread_rng());
                let at = at.max(now + Duration::from_secs(1));
                *slot = Some((va, at));
                at
            }
        }
    }

    /// [`Self::hop`] for onion-service circuits: they never ask their last
    /// relay (HSDir, introduction or rendezvous point) for congestion
    /// control, as tor (which negotiates it end to end with the service,
    /// not built here); consensus defaults for the SENDME parameters.
    /// No QUIC hints either.
    pub fn hs_hop(r: &onionmix_netdoc::Relay) -> HopTarget {
        let mut h = Self::relay_hop(r, &Arc::new(CcParams::default()));
        h.flowctrl_cc = false;
        h.quic_port = None;
        h
    }

    /// How to reach and handshake with a relay, as this client does: its
    /// QUIC port only when the client uses QUIC.
    pub fn hop(&self, r: &onionmix_netdoc::Relay, params: &Arc<CcParams>) -> HopTarget {
        let mut h = Self::relay_hop(r, params);
        if !self.cfg.quic {
            h.quic_port = None;
        }
        h
    }

    /// How to reach and handshake with a relay (all it advertises).
    pub fn relay_hop(r: &onionmix_netdoc::Relay, params: &Arc<CcParams>) -> HopTarget {
        HopTarget {
            nickname: r.nickname.clone(),
            rsa_id: r.rsa_id,
            ed_id: r.ed_id,
            or_addr: SocketAddr::V4(r.ipv4),
            ntor_key: r.ntor_onion_key,
            ntor_v3: r.protocols.supports("Relay", 4),
            optimistic_data: r.protocols.supports("Relay", 2),
            flowctrl_cc: r.protocols.supports("FlowCtrl", 2),
            datagram: r.protocols.supports("Datagram", 1),
            params: Some(params.clone()),
            quic_port: r.quic_port,
        }
    }

    /// Choose a path for `purpose`, avoiding `avoid` where possible.
    pub fn pick_path(
        &self,
        purpose: Purpose,
        avoid: &HashSet<[u8; 20]>,
    ) -> Result<Vec<HopTarget>, String> {
        match self.pick_path_excluding(purpose, avoid) {
            Ok(p) => Ok(p),
            // Everything usable was excluded: better an old failure than none.
            Err(_) if !avoid.is_empty() => self.pick_path_excluding(purpose, &HashSet::new()),
            Err(e) => Err(e),
        }
    }

    fn pick_path_excluding(
        &self,
        purpose: Purpose,
        avoid: &HashSet<[u8; 20]>,
    ) -> Result<Vec<HopTarget>, String> {
        self.pick_path_within(purpose, avoid, &self.only)
    }

    /// [`Self::pick_path`] within `only` (the user's pins, or narrower),
    /// strictly avoiding `avoid`.
    pub(crate) fn pick_path_within(
        &self,
        purpose: Purpose,
        avoid: &HashSet<[u8; 20]>,
        only: &onionmix_netdoc::NodeRestrictions,
    ) -> Result<Vec<HopTarget>, String> {
        let nd = self.netdir().ok_or("no directory yet")?;
        let guards = self
            .guards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let now = crate::clock::now();
        // Exit circuits take any middle: vanguards-lite is for
        // onion-service circuits only (`internal_path`).
        let pb = PathBuilder::new(&nd, &self.path_cfg)
            .with_guards(&guards, now)
            .excluding(avoid)
            .restricted(only);
        let mut rng = rand::thread_rng();
        let params = Arc::new(CcParams::from_consensus(nd.params()));
        let (target, udp) = match purpose {
            Purpose::Exit(Some(p)) => (ExitTarget::Port(p), false),
            Purpose::Exit(None) => (ExitTarget::AnyPort, false),
            Purpose::Udp(p) => (ExitTarget::Datagram(p), true),
        };
        let mut last = String::new();
        for _ in 0..8 {
            // In testing networks the exits' policies may accept only
            // 127.0.0.0/8, which a port summary cannot express: fall back
            // to any relay with the Exit flag, as tor effectively does.
            let res = match pb.exit_path(&mut rng, target) {
                Err(PathError::NoExit(_)) if self.cfg.testing_network => {
                    pb.exit_path(&mut rng, ExitTarget::Internal).and_then(|p| {
                        let exit = nd.relay(&p[2]).ok_or(PathError::NoExit(target))?;
                        if exit.flags.contains(RelayFlags::EXIT)
                            && (!udp || exit.protocols.supports("Datagram", 1))
                        {
                            Ok(p)
                        } else {
                            Err(PathError::NoExit(target))
                        }
                    })
                }
                r => r,
            };
            match res {
                Ok(ids) => {
                    let hops: Option<Vec<HopTarget>> = ids
                        .iter()
                        .map(|id| nd.relay(id).map(|r| self.hop(r, &params)))
                        .collect();
                    if let Some(hops) = hops {
                        return Ok(hops);
                    }
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(if last.is_empty() {
            "no path".into()
        } else {
            last
        })
    }

    /// A 3-hop internal path (guard, middle, last; exit policies ignored)
    /// whose last hop satisfies `last_ok`, avoiding `avoid` in every
    /// position: the start of onion-service circuits (rend-spec-v3). With
    /// vanguards-lite (the default) the middle is one of the layer 2
    /// guards, kept up to date here.
    pub fn internal_path(
        &self,
        avoid: &HashSet<[u8; 20]>,
        last_ok: &dyn Fn(&onionmix_netdoc::Relay) -> bool,
    ) -> Result<Vec<HopTarget>, String> {
        let nd = self.netdir().ok_or("no directory yet")?;
        let guards = self
            .guards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let now = crate::clock::now();
        let layer2 = self.layer2_ids(&nd, now);
        let pb = PathBuilder::new(&nd, &self.path_cfg)
            .with_guards(&guards, now)
            .excluding(avoid)
            .restricted(&self.only);
        let pb = match &layer2 {
            Some(ids) => pb.with_layer2(ids),
            None => pb,
        };
        let mut rng = rand::thread_rng();
        let mut last = "no relay fits the last hop".to_string();
        for _ in 0..32 {
            match pb.exit_path(&mut rng, ExitTarget::Internal) {
                Ok(ids) => {
                    let hops: Option<Vec<&onionmix_netdoc::Relay>> =
                        ids.iter().map(|id| nd.relay(id)).collect();
                    if let Some(hops) = hops
                        && hops.last().is_some_and(|r| last_ok(r))
                    {
                        return Ok(hops.into_iter().map(Self::hs_hop).collect());
                    }
                }
                Err(e) => last = e.to_string(),
            }
        }
        Err(last)
    }

    /// The layer 2 guards onion-service circuits take their middle from,
    /// brought up to date; `None` when vanguards-lite is off or the
    /// configuration pins the middles (`middle_nodes` wins, as
    /// MiddleNodes does in tor).
    fn layer2_ids(&self, nd: &NetDir, now: SystemTime) -> Option<Vec<RsaId>> {
        if !self.cfg.vanguards_lite || !self.only.middle.is_empty() {
            return None;
        }
        let mut set = self.layer2.lock().unwrap_or_else(|e| e.into_inner());
        let params = VanguardParams::from_consensus(nd.params());
        set.maintain(
            nd,
            crate::clock::to_unix(now),
            &params,
            &mut rand::thread_rng(),
        );
        Some(set.ids())
    }

    /// Whether this client runs on a testing network.
    pub fn testing_network(&self) -> bool {
        self.cfg.testing_network
    }

    /// Whether the exit `rsa_id` can serve `port`.
    pub fn exit_allows(&self, rsa_id: &[u8; 20], port: u16) -> bool {
        let Some(nd) = self.netdir() else {
            return false;
        };
        let Some(r) = nd.relay(&RelayId(*rsa_id)) else {
            return false;
        };
        r.allows_exit_port(port, false)
            || (self.cfg.testing_network && r.flags.contains(RelayFlags::EXIT))
    }

    /// Record a guard outcome and persist the guard state.
    pub fn report_guard(&self, rsa_id: &[u8; 20], ok: bool) {
        {
            let mut g = self.guards.lock().unwrap_or_else(|e| e.into_inner());
            let id = RelayId(*rsa_id);
            if ok {
                g.record_success(&id, crate::clock::now());
            } else {
                g.record_failure(&id, crate::clock::now());
            }
        }
        self.save_guards();
    }

    /// The primary guards (for status and tests).
    pub fn primary_guards(&self) -> Vec<[u8; 20]> {
        self.guards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .primary_guards()
            .into_iter()
            .map(|r| r.0)
            .collect()
    }
}

fn humantime(t: SystemTime) -> String {
    match t.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => format!("{}s after epoch", d.as_secs()),
        Err(_) => "?".into(),
    }
}

#[cfg(test)]
impl DirMgr {
    /// Install `nd` as the current directory, as a successful fetch would.
    pub(crate) fn install_netdir(&self, nd: NetDir) {
        let mut g = self.guards.lock().unwrap_or_else(|e| e.into_inner());
        g.update(&nd, crate::clock::now(), &mut rand::thread_rng());
        drop(g);
        *self.netdir.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::new(nd));
    }

    /// Make `ids` the layer 2 guards (they never expire).
    pub(crate) fn set_layer2(&self, ids: &[RsaId]) {
        let guards = ids
            .iter()
            .map(|&rsa_id| onionmix_netdoc::vanguards::Layer2Guard {
                rsa_id,
                expires: u64::MAX,
            })
            .collect();
        *self.layer2.lock().unwrap_or_else(|e| e.into_inner()) = Layer2Set::from_guards(guards);
    }

    /// The current layer 2 guards.
    pub(crate) fn layer2_members(&self) -> Vec<RsaId> {
        self.layer2.lock().unwrap_or_else(|e| e.into_inner()).ids()
    }
}

#[cfg(test)]
#[path = "dir_tests.rs"]
pub(crate) mod tests;
