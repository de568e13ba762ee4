//! Onion services hosted by this process (rend-spec-v3 §1.9, §2.5, §3,
//! §4): the async driver around `onionmix_hs::service`.
//!
//! One task per service keeps its introduction points (circuits with
//! ESTABLISH_INTRO, the DoS extension when configured, re-established
//! when they fail), builds the descriptors of the current and next time
//! periods (both layers, client authorization, PoW parameters) and uploads
//! them to the responsible HSDirs when the upload scheduler says so,
//! answers INTRODUCE2 (replay cache per introduction point, MAC and
//! decryption over the subcredentials of the descriptors it published, PoW
//! check when enabled) with a rendezvous circuit, RENDEZVOUS1 and the
//! virtual hop, and connects the streams opened on it to the configured
//! local targets (`rend.rs`).

pub mod config;
mod intro;
mod keys;
mod publish;
mod rend;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::OsRng;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::task::JoinHandle;
use tracing::{debug, info, warn};

use onionmix_cell::hs::DosParams;
use onionmix_crypto::Ed25519Keypair;
use onionmix_frontend::control::{HsDescEvent, HsDirName};
use onionmix_hs::intro::{ReplayCache, open_introduce2};
use onionmix_hs::keys::ServiceIdentity;
use onionmix_hs::service::PortMap;
use onionmix_hs::service::intro::{IntroParams, IntroPointSet, Retry};
use onionmix_netdoc::Position;
use x25519_dalek::StaticSecret;

use crate::client::circmgr::CircMgr;
use crate::client::circuit::HopTarget;
use crate::client::control::hub::ControlHub;
use crate::client::dir::DirMgr;
use crate::client::hs::net::{HsNet, is_intro_point};
pub use config::OnionServiceConfig;
pub use keys::{authorized_clients, load_or_create};

/// How often the service looks at its state.
const TICK: Duration = Duration::from_secs(1);
/// Depth of the service's event queue (INTRODUCE2 beyond it are dropped;
/// the client retries).
const EVENT_QUEUE: usize = 256;
/// Rendezvous circuits being set up or carrying streams at once.
pub const MAX_RENDEZVOUS: usize = 512;
/// INTRODUCE2 replay cache per introduction point: entries and seconds.
const REPLAY_CACHE: (usize, u64) = (16_384, 300);

/// What the process needs from its client to host services.
#[derive(Clone)]
pub struct ServiceCtx {
    /// Directory (consensus, paths).
    pub dir: Arc<DirMgr>,
    /// Circuits.
    pub circmgr: CircMgr,
    /// Becomes true once the client has bootstrapped.
    pub ready: watch::Receiver<bool>,
    /// Where `HS_DESC` events go (the control port), if anywhere.
    pub hub: Option<Arc<ControlHub>>,
    /// The service's address without `.onion`, the REND_QUERY of its
    /// circuits on the control port (set when the service starts).
    pub rend_query: Option<Arc<str>>,
}

/// Counters of one service (in the client's `status.json`).
#[derive(Debug, Default)]
pub struct ServiceStats {
    /// Introduction points currently established.
    pub intro_established: AtomicU64,
    /// Descriptor uploads an HSDir accepted.
    pub uploads_ok: AtomicU64,
    /// Descriptor uploads that failed.
    pub uploads_failed: AtomicU64,
    /// INTRODUCE2 received.
    pub introduce2: AtomicU64,
    /// INTRODUCE2 refused (replay, MAC, PoW) or dropped (overload).
    pub introduce2_refused: AtomicU64,
    /// PoW solutions verified.
    pub pow_verified: AtomicU64,
    /// Rendezvous circuits joined.
    pub rendezvous_ok: AtomicU64,
    /// Of those, circuits running congestion control (the client asked).
    pub rendezvous_cc: AtomicU64,
    /// Rendezvous attempts that failed.
    pub rendezvous_failed: AtomicU64,
    /// Streams connected to a local target.
    pub streams: AtomicU64,
}

impl ServiceStats {
    fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// A running service.
#[derive(Debug, Clone)]
pub struct ServiceHandle {
    /// Its address (`<56 chars>.onion`).
    pub address: String,
    /// Its key directory (empty for an ephemeral service).
    pub dir: PathBuf,
    /// Counters.
    pub stats: Arc<ServiceStats>,
    stop: Arc<watch::Sender<bool>>,
}

impl ServiceHandle {
    /// Stop the service: its introduction circuits are closed and its
    /// descriptors no longer uploaded. Rendezvous circuits already joined
    /// carry their streams to the end, as in tor (`DEL_ONION`). A service
    /// also stops once every clone of its handle is gone.
    pub fn stop(&self) {
        self.stop.send_replace(true);
    }

    /// Whether [`Self::stop`] was called.
    pub fn is_stopped(&self) -> bool {
        *self.stop.borrow()
    }

    /// Status as JSON. The address is the service's own (not a client's),
    /// written so the testbed can find it; the `hostname` file has it too.
    pub fn status(&self) -> serde_json::Value {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let s = &self.stats;
        serde_json::json!({
            "address": self.address,
            "dir": self.dir.display().to_string(),
            "intro_established": g(&s.intro_established),
            "uploads_ok": g(&s.uploads_ok),
            "uploads_failed": g(&s.uploads_failed),
            "introduce2": g(&s.introduce2),
            "introduce2_refused": g(&s.introduce2_refused),
            "pow_verified": g(&s.pow_verified),
            "rendezvous_ok": g(&s.rendezvous_ok),
            "rendezvous_cc": g(&s.rendezvous_cc),
            "rendezvous_failed": g(&s.rendezvous_failed),
            "streams": g(&s.streams),
        })
    }
}

/// The keys of one introduction point.
pub(crate) struct IntroKeys {
    /// The relay.
    pub hop: HopTarget,
    /// `KP_hs_ipt_sid` / its secret.
    pub auth: Ed25519Keypair,
    /// `KS_hss_ntor`.
    pub enc: StaticSecret,
    /// `KP_hss_ntor`.
    pub enc_pub: [u8; 32],
    /// INTRODUCE2 seen at this point.
    pub replay: std::sync::Mutex<ReplayCache>,
}

impl std::fmt::Debug for IntroKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IntroKeys")
            .field("relay", &self.hop.nickname)
            .finish()
    }
}

/// Events from the service's tasks.
pub(crate) enum Ev {
    /// INTRO_ESTABLISHED on point `id`.
    IntroUp(u64),
    /// Point `id`'s circuit failed or closed.
    IntroDown(u64),
    /// INTRODUCE2 at point `id`.
    Introduce2(u64, Vec<u8>),
    /// An upload of period `period`'s descriptor to `hsdir` ended.
    Uploaded {
        /// Time period.
        period: u64,
        /// HSDir.
        hsdir: [u8; 20],
        /// Its nickname (for `HS_DESC` events).
        nickname: String,
        /// None: accepted; else the `HS_DESC FAILED` reason.
        failure: Option<&'static str>,
    },
}

/// Start hosting a service (its task waits for the client to bootstrap).
pub fn start(ctx: ServiceCtx, cfg: OnionServiceConfig) -> Result<ServiceHandle, String> {
    cfg.validate()?;
    let id = keys::load_or_create(&cfg.dir)?;
    let auth = keys::authorized_clients(&cfg.dir);
    info!(
        "onion service in {} starting ({} ports, client authorization {})",
        cfg.dir.display(),
        cfg.ports.len(),
        if auth.is_some() { "on" } else { "off" }
    );
    launch(ctx, cfg, id, auth)
}

/// Start an ephemeral service (ADD_ONION): identity and authorized
/// clients in memory, nothing written to disk.
pub fn start_ephemeral(
    ctx: ServiceCtx,
    cfg: OnionServiceConfig,
    id: ServiceIdentity,
    auth: Option<Vec<[u8; 32]>>,
) -> Result<ServiceHandle, String> {
    cfg.validate()?;
    debug!(
        "ephemeral onion service starting ({} ports, client authorization {})",
        cfg.ports.len(),
        if auth.is_some() { "on" } else { "off" }
    );
    launch(ctx, cfg, id, auth)
}

fn launch(
    mut ctx: ServiceCtx,
    cfg: OnionServiceConfig,
    id: ServiceIdentity,
    auth: Option<Vec<[u8; 32]>>,
) -> Result<ServiceHandle, String> {
    let onion = id.address().map_err(|e| e.to_string())?;
    let address = onion.to_string();
    let service_id = onion.label().to_string();
    ctx.rend_query = Some(Arc::from(service_id.as_str()));
    let stats = Arc::new(ServiceStats::default());
    let (stop_tx, stop_rx) = watch::channel(false);
    let handle = ServiceHandle {
        address,
        dir: cfg.dir.clone(),
        stats: stats.clone(),
        stop: Arc::new(stop_tx),
    };
    let (tx, rx) = mpsc::channel(EVENT_QUEUE);
    let testing = ctx.dir.testing_network();
    let svc = Service {
        intros: IntroPointSet::new(if testing {
            IntroParams::testing(cfg.num_intro_points)
        } else {
            IntroParams {
                count: cfg.num_intro_points,
                ..IntroParams::default()
            }
        }),
        ports: Arc::new(cfg.port_map()),
        dos: match (cfg.intro_dos_rate_per_sec, cfg.intro_dos_burst_per_sec) {
            (Some(r), Some(b)) => Some(DosParams {
                rate_per_sec: Some(u64::from(r)),
                burst_per_sec: Some(u64::from(b)),
            }),
            _ => None,
        },
        cfg,
        ctx,
        id: Arc::new(id),
        auth,
        intro_tasks: HashMap::new(),
        relaunch: HashSet::new(),
        descs: BTreeMap::new(),
        tx,
        stats,
        rend_limit: Arc::new(Semaphore::new(MAX_RENDEZVOUS)),
        cookies: ReplayCache::new(REPLAY_CACHE.0, REPLAY_CACHE.1),
        testing,
        warned_no_hsdirs: false,
        service_id,
    };
    tokio::spawn(svc.run(rx, stop_rx));
    Ok(handle)
}

struct Service {
    ctx: ServiceCtx,
    cfg: OnionServiceConfig,
    ports: Arc<PortMap>,
    dos: Option<DosParams>,
    id: Arc<ServiceIdentity>,
    auth: Option<Vec<[u8; 32]>>,
    intros: IntroPointSet<Arc<IntroKeys>>,
    intro_tasks: HashMap<u64, JoinHandle<()>>,
    relaunch: HashSet<u64>,
    descs: BTreeMap<u64, publish::DescSlot>,
    tx: mpsc::Sender<Ev>,
    stats: Arc<ServiceStats>,
    rend_limit: Arc<Semaphore>,
    cookies: ReplayCache,
    testing: bool,
    warned_no_hsdirs: bool,
    /// The address without `.onion` (`HS_DESC` events).
    service_id: String,
}

impl Service {
    async fn run(mut self, mut rx: mpsc::Receiver<Ev>, mut stop: watch::Receiver<bool>) {
        let mut ready = self.ctx.ready.clone();
        tokio::select! {
            r = ready.wait_for(|r| *r) => if r.is_err() {
                return;
            },
            _ = stop.wait_for(|s| *s) => return,
        }
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                ev = rx.recv() => match ev {
                    Some(ev) => self.handle(ev),
                    None => break,
                },
                _ = tick.tick() => self.tick(),
                // Stopped (or every handle gone): dropping `self` aborts
                // the introduction tasks, which destroys their circuits.
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        debug!("onion service stopped");
    }

    fn hs_desc(&self, blinded: &[u8; 32], ev: HsDescEvent) {
        if let Some(hub) = &self.ctx.hub {
            hub.emit("HS_DESC", || {
                onionmix_frontend::control::onion::hs_desc_event(&self.service_id, blinded, &ev)
            });
        }
    }

    fn handle(&mut self, ev: Ev) {
        match ev {
            Ev::IntroUp(id) => {
                self.intros.established_ok(id);
                self.count_established();
            }
            Ev::IntroDown(id) => {
                self.intro_tasks.remove(&id);
                match self.intros.circuit_failed(id) {
                    Retry::Same => {
                        self.relaunch.insert(id);
                    }
                    Retry::Replace => debug!("introduction point {id} replaced"),
                }
                self.count_established();
            }
            Ev::Introduce2(id, data) => self.introduce2(id, &data),
            Ev::Uploaded {
                period,
                hsdir,
                nickname,
                failure,
            } => {
                let ok = failure.is_none();
                ServiceStats::bump(if ok {
                    &self.stats.uploads_ok
                } else {
                    &self.stats.uploads_failed
                });
                let name = HsDirName {
                    rsa_id: hsdir,
                    nickname,
                };
                let blinded = self.descs.get(&period).map(|d| *d.blinded.public());
                if let Some(b) = blinded {
                    self.hs_desc(
                        &b,
                        match failure {
                            None => HsDescEvent::Uploaded { hsdir: name },
                            Some(reason) => HsDescEvent::UploadFailed {
                                hsdir: name,
                                reason,
                            },
                        },
                    );
                }
                if let Some(d) = self.descs.get_mut(&period) {
                    d.schedule.result(&hsdir, ok, crate::clock::now_unix());
                }
            }
        }
    }

    fn count_established(&self) {
        let n = self.intros.established().count() as u64;
        self.stats.intro_established.store(n, Ordering::Relaxed);
    }

    fn tick(&mut self) {
        let now = crate::clock::now_unix();
        for id in self.intros.expire(now) {
            if let Some(t) = self.intro_tasks.remove(&id) {
                t.abort();
            }
            self.relaunch.remove(&id);
        }
        let net = match HsNet::current(&self.ctx.dir) {
            Ok(n) => n,
            Err(e) => {
                debug!("onion service waits for the directory: {e}");
                return;
            }
        };
        // Retries of existing points, then new points.
        let retry: Vec<u64> = self.relaunch.iter().copied().collect();
        for id in retry {
            if !self.intros.may_launch(now) {
                break;
            }
            self.relaunch.remove(&id);
            if let Some(keys) = self.intros.get(id).map(|p| p.keys.clone()) {
                self.intros.launched(now);
                self.spawn_intro(id, keys);
            }
        }
        let want = self.intros.wanted(now);
        for _ in 0..want {
            let Some(keys) = self.new_intro_keys(&net) else {
                break;
            };
            let relay = keys.hop.rsa_id;
            let keys = Arc::new(keys);
            let id = self.intros.add(relay, keys.clone(), now, &mut OsRng);
            self.spawn_intro(id, keys);
        }
        self.publish(&net, now);
    }

    fn new_intro_keys(&self, net: &HsNet) -> Option<IntroKeys> {
        let used: HashSet<[u8; 20]> = self.intros.relays().into_iter().collect();
        let candidates: Vec<&onionmix_netdoc::Relay> = net
            .nd
            .relays()
            .filter(|r| is_intro_point(r) && !used.contains(&r.rsa_id))
            .collect();
        let r =
            onionmix_netdoc::path::choose_weighted(&mut rand::thread_rng(), &candidates, |r| {
                net.nd.relay_weight(r, Position::Middle)
            })?;
        let enc = StaticSecret::random_from_rng(OsRng);
        let enc_pub = x25519_dalek::PublicKey::from(&enc).to_bytes();
        Some(IntroKeys {
            hop: DirMgr::hs_hop(r),
            auth: Ed25519Keypair::generate(&mut OsRng),
            enc,
            enc_pub,
            replay: std::sync::Mutex::new(ReplayCache::new(REPLAY_CACHE.0, REPLAY_CACHE.1)),
        })
    }

    fn spawn_intro(&mut self, id: u64, keys: Arc<IntroKeys>) {
        let task = tokio::spawn(intro::run(
            self.ctx.clone(),
            id,
            keys,
            self.dos,
            self.tx.clone(),
        ));
        if let Some(old) = self.intro_tasks.insert(id, task) {
            old.abort();
        }
    }

    fn introduce2(&mut self, id: u64, data: &[u8]) {
        ServiceStats::bump(&self.stats.introduce2);
        let refuse = |why: &str, stats: &ServiceStats| {
            debug!("INTRODUCE2 refused: {why}");
            ServiceStats::bump(&stats.introduce2_refused);
        };
        let Some(keys) = self.intros.get(id).map(|p| p.keys.clone()) else {
            return refuse("unknown introduction point", &self.stats);
        };
        // Counted towards the point's rotation; it keeps serving until
        // `expire` replaces it.
        let _ = self.intros.introduce2(id);
        let now = crate::clock::now_unix();
        let replay = keys
            .replay
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .check_and_add(data, now);
        if replay {
            return refuse("replay", &self.stats);
        }
        let periods: Vec<u64> = self.descs.keys().copied().collect();
        let subs: Vec<[u8; 32]> = self
            .descs
            .values()
            .map(|d| *d.blinded.subcredential())
            .collect();
        let opened = match open_introduce2(data, &keys.enc, &keys.auth.public(), &subs) {
            Ok(o) => o,
            Err(e) => return refuse(&e.to_string(), &self.stats),
        };
        let Some(period) = periods.get(opened.subcredential_index).copied() else {
            return refuse("no descriptor", &self.stats);
        };
        // tor drops a second INTRODUCE2 with a rendezvous cookie it has
        // already answered (a client retrying through another point).
        if self
            .cookies
            .check_and_add(&opened.plaintext.rend_cookie, now)
        {
            return refuse("rendezvous cookie seen before", &self.stats);
        }
        if self.cfg.pow_defenses {
            #[cfg(feature = "pow")]
            if let Some(sol) = &opened.pow {
                let ok = self
                    .descs
                    .get_mut(&period)
                    .and_then(|d| d.pow.as_mut())
                    .map(|(v, _)| v.check(sol));
                match ok {
                    Some(Ok(_)) => ServiceStats::bump(&self.stats.pow_verified),
                    Some(Err(e)) => return refuse(&format!("PoW: {e}"), &self.stats),
                    None => return refuse("PoW for an unknown seed", &self.stats),
                }
            }
        }
        let Some(subcred) = subs.get(opened.subcredential_index).copied() else {
            return;
        };
        let Ok(permit) = self.rend_limit.clone().try_acquire_owned() else {
            return refuse("too many rendezvous at once", &self.stats);
        };
        let settings = rend::Settings {
            ports: self.ports.clone(),
            max_streams: self.cfg.max_streams,
            allow_unknown_ports: self.cfg.allow_unknown_ports,
            max_streams_close_circuit: self.cfg.max_streams_close_circuit,
        };
        tokio::spawn(rend::serve(
            self.ctx.clone(),
            keys,
            opened,
            subcred,
            settings,
            self.stats.clone(),
            permit,
        ));
    }

    fn publish(&mut self, net: &HsNet, now: u64) {
        if net.n_hsdirs() == 0 {
            if !self.warned_no_hsdirs {
                warn!(
                    "onion service: the consensus lists no HSDirs (relays with the HSDir flag and \
                     HSDir=2); its descriptors cannot be published"
                );
                self.warned_no_hsdirs = true;
            }
            return;
        }
        self.warned_no_hsdirs = false;
        let cur = net.plan.current_desc_period;
        let next = net.plan.next_desc_period;
        for p in [cur, next] {
            if let std::collections::btree_map::Entry::Vacant(e) = self.descs.entry(p) {
                match publish::DescSlot::new(&self.id, net, p, self.testing, &self.cfg) {
                    Ok(slot) => {
                        e.insert(slot);
                    }
                    Err(err) => warn!("onion service: cannot make the period {p} keys: {err}"),
                }
            }
        }
        // Keep the previous period's keys a little longer: clients may
        // still introduce with its subcredential.
        self.descs.retain(|p, _| p.saturating_add(1) >= cur);
        let ready = self.intros.ready(now);
        let version = self.intros.version();
        let mut events = Vec::new();
        for (period, kind) in [
            (cur, onionmix_hs::ring::RingKind::StoreFirst),
            (next, onionmix_hs::ring::RingKind::StoreSecond),
        ] {
            let Some(slot) = self.descs.get_mut(&period) else {
                continue;
            };
            let hsdirs = net.responsible(kind, slot.blinded.public(), period);
            slot.schedule
                .set_responsible(hsdirs.iter().map(|h| h.rsa_id).collect());
            let Some(plan) = slot.schedule.due(now, version, ready, &mut OsRng) else {
                continue;
            };
            if plan.rebuild {
                let input = publish::BuildInput {
                    intros: &self.intros,
                    net,
                    now,
                    is_current: period == cur,
                    auth_clients: self.auth.as_deref(),
                };
                let first = slot.text.is_none();
                if let Err(e) = slot.rebuild(&input) {
                    warn!("onion service: cannot build the descriptor: {e}");
                    continue;
                }
                if first {
                    events.push((*slot.blinded.public(), HsDescEvent::Created));
                }
            }
            let Some(text) = slot.text.clone() else {
                continue;
            };
            let spec = net.plan.spec(kind);
            let period_len = net.schedule.period_length_minutes();
            for t in plan.targets {
                if let Some(h) = hsdirs.iter().find(|h| h.rsa_id == t) {
                    if let Some(ed) = &h.ed_id {
                        let hsdir_index =
                            onionmix_hs::ring::hsdir_index(ed, &spec.srv, spec.period, period_len);
                        events.push((
                            *slot.blinded.public(),
                            HsDescEvent::Upload {
                                hsdir: HsDirName {
                                    rsa_id: h.rsa_id,
                                    nickname: h.nickname.clone(),
                                },
                                hsdir_index,
                            },
                        ));
                    }
                    tokio::spawn(publish::upload(
                        self.ctx.clone(),
                        h.clone(),
                        text.clone(),
                        period,
                        self.tx.clone(),
                    ));
                }
            }
        }
        for (blinded, ev) in events {
            self.hs_desc(&blinded, ev);
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        for t in self.intro_tasks.values() {
            t.abort();
        }
    }
}
