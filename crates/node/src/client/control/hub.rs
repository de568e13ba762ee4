//! The client's observable state for the control and metrics ports:
//! circuits, streams and OR connections with controller ids, byte
//! counters, bootstrap phase, and the event fan-out to control
//! connections. The data path only touches atomics and short critical
//! sections; formatting an event happens only when some connection asked
//! for it (one atomic load otherwise).

use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::{Semaphore, mpsc, oneshot};

use onionmix_frontend::control::events::{
    self as ev, CircStatus, EventMask, StreamStatus, bootstrap_text, iso_time_usec, long_name,
};
use onionmix_frontend::control::reply;

use crate::client::circuit::{Circuit, HopTarget};
use crate::control::OrConns;
use crate::control::bus::EventBus;
use crate::reactor::ChannelHandle;

pub use crate::control::bus::EVENT_QUEUE;
/// Most circuits tracked for the controller.
pub const MAX_TRACKED_CIRCUITS: usize = 8192;
/// Most streams tracked for the controller.
pub const MAX_TRACKED_STREAMS: usize = 8192;
/// tor's NEWNYM rate limit.
pub const NEWNYM_INTERVAL: Duration = Duration::from_secs(10);

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_micros() -> u64 {
    crate::clock::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A tracked circuit.
pub struct CircEntry {
    /// Status for events and `circuit-status`.
    pub status: CircStatus,
    /// Relays of the path (RSA ids), first hop first.
    pub relays: Vec<[u8; 20]>,
    /// The circuit once it is built and someone holds it.
    pub weak: Option<Weak<Circuit>>,
    /// A controller-built circuit is kept alive here until closed.
    pub strong: Option<Arc<Circuit>>,
    /// Channel and id, to close it.
    pub chan: Option<(ChannelHandle, u32, Arc<Semaphore>)>,
    /// Bytes since the last CIRC_BW event (read, written).
    pub bw: Arc<(AtomicU64, AtomicU64)>,
    /// Streams attached so far.
    pub streams: u64,
}

/// What an attached stream is told: the circuit chosen by the controller.
pub type AttachTx = oneshot::Sender<Arc<Circuit>>;

/// A tracked stream.
pub struct StreamEntry {
    /// Status for events and `stream-status`.
    pub status: StreamStatus,
    /// Set while the stream waits for ATTACHSTREAM.
    pub attach: Option<AttachTx>,
    /// Close request (CLOSESTREAM's reason).
    pub close: Option<oneshot::Sender<u8>>,
}

/// Counters for the metrics endpoint.
#[derive(Default)]
pub struct Counters {
    /// Circuits launched.
    pub circ_launched: AtomicU64,
    /// Circuits built.
    pub circ_built: AtomicU64,
    /// Circuits that failed to build.
    pub circ_failed: AtomicU64,
    /// Sum of build times (microseconds) of built circuits.
    pub build_micros_sum: AtomicU64,
    /// Build-time histogram (buckets in [`BUILD_BUCKETS_MS`], then +Inf).
    pub build_buckets: [AtomicU64; 9],
    /// Streams requested.
    pub streams_new: AtomicU64,
    /// Streams that connected.
    pub streams_ok: AtomicU64,
    /// Streams that failed.
    pub streams_failed: AtomicU64,
}

/// Upper bounds of the build-time histogram buckets, milliseconds.
pub const BUILD_BUCKETS_MS: [u64; 8] = [50, 100, 250, 500, 1000, 2500, 5000, 10000];

/// The hub (one per client).
pub struct ControlHub {
    /// Event fan-out to control connections.
    pub bus: EventBus,
    next_circ: AtomicU64,
    next_stream: AtomicU64,
    circs: Mutex<BTreeMap<u64, CircEntry>>,
    streams: Mutex<BTreeMap<u64, StreamEntry>>,
    orconns: OrConns,
    /// Application bytes read from the network (delivered to SOCKS clients).
    pub read: AtomicU64,
    /// Application bytes written to the network.
    pub written: AtomicU64,
    bw_last: Mutex<(u64, u64)>,
    bootstrap: Mutex<(u8, &'static str, &'static str)>,
    bootstrap_watch: tokio::sync::watch::Sender<BootstrapPhase>,
    /// A first exit circuit was built.
    pub circuit_established: AtomicBool,
    /// Enough directory info to build circuits.
    pub enough_dir_info: AtomicBool,
    /// NEWNYM epoch (streams of different epochs never share a circuit).
    pub epoch: AtomicU64,
    /// `__LeaveStreamsUnattached`.
    pub leave_unattached: AtomicBool,
    /// `DisableNetwork`.
    pub disable_network: AtomicBool,
    newnym_last: Mutex<Option<Instant>>,
    newnym_pending: AtomicBool,
    /// Exits of circuits in use at the last NEWNYM: the next exit circuit
    /// avoids them when it can.
    pub newnym_avoid: Mutex<HashSet<[u8; 20]>>,
    /// When the client started.
    pub started: Instant,
    /// Metrics counters.
    pub counters: Counters,
}

impl std::fmt::Debug for ControlHub {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlHub").finish()
    }
}

impl Default for ControlHub {
    fn default() -> Self {
        Self::new()
    }
}

/// A bootstrap phase as tor reports it (`STATUS_CLIENT BOOTSTRAP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BootstrapPhase {
    /// Percent done (tor's phases: 5, 75, 95, 100).
    pub progress: u8,
    /// The phase's tag (`conn`, `enough_dirinfo`, `circuit_create`, `done`).
    pub tag: &'static str,
    /// A human-readable summary.
    pub summary: &'static str,
}

impl Default for BootstrapPhase {
    fn default() -> Self {
        BootstrapPhase {
            progress: 0,
            tag: "starting",
            summary: "Starting",
        }
    }
}

impl ControlHub {
    /// A fresh hub.
    pub fn new() -> Self {
        ControlHub {
            bus: EventBus::default(),
            next_circ: AtomicU64::new(1),
            next_stream: AtomicU64::new(1),
            circs: Mutex::new(BTreeMap::new()),
            streams: Mutex::new(BTreeMap::new()),
            orconns: OrConns::default(),
            read: AtomicU64::new(0),
            written: AtomicU64::new(0),
            bw_last: Mutex::new((0, 0)),
            bootstrap: Mutex::new((0, "starting", "Starting")),
            bootstrap_watch: tokio::sync::watch::Sender::new(BootstrapPhase::default()),
            circuit_established: AtomicBool::new(false),
            enough_dir_info: AtomicBool::new(false),
            epoch: AtomicU64::new(0),
            leave_unattached: AtomicBool::new(false),
            disable_network: AtomicBool::new(false),
            newnym_last: Mutex::new(None),
            newnym_pending: AtomicBool::new(false),
            newnym_avoid: Mutex::new(HashSet::new()),
            started: Instant::now(),
            counters: Counters::default(),
        }
    }

    // ---- events ----

    /// Register a control connection; its event queue.
    pub fn subscribe(&self) -> Option<(u64, mpsc::Receiver<Vec<u8>>)> {
        self.bus.subscribe()
    }

    /// Change what a connection wants.
    pub fn set_mask(&self, id: u64, mask: EventMask) {
        self.bus.set_mask(id, mask);
    }

    /// Forget a connection.
    pub fn unsubscribe(&self, id: u64) {
        self.bus.unsubscribe(id);
    }

    /// Whether anyone wants `event`.
    pub fn wants(&self, event: &str) -> bool {
        self.bus.wants(event)
    }

    /// Send an event (built only if someone wants it).
    pub fn emit(&self, event: &str, make: impl FnOnce() -> Vec<u8>) {
        self.bus.emit(event, make);
    }

    /// A NOTICE/WARN/ERR log event.
    pub fn log(&self, severity: &str, msg: &str) {
        self.bus.log(severity, msg);
    }

    // ---- bootstrap ----

    /// Record a bootstrap phase (STATUS_CLIENT BOOTSTRAP).
    pub fn bootstrap(&self, progress: u8, tag: &'static str, summary: &'static str) {
        *lock(&self.bootstrap) = (progress, tag, summary);
        self.bootstrap_watch.send_replace(BootstrapPhase {
            progress,
            tag,
            summary,
        });
        self.emit("STATUS_CLIENT", || {
            reply::event(&format!(
                "STATUS_CLIENT {}",
                bootstrap_text(progress, tag, summary)
            ))
        });
        if progress == 100 {
            self.circuit_established.store(true, Ordering::Relaxed);
            self.emit("STATUS_CLIENT", || {
                reply::event("STATUS_CLIENT NOTICE CIRCUIT_ESTABLISHED")
            });
        }
        if progress >= 75 {
            self.enough_dir_info.store(true, Ordering::Relaxed);
        }
    }

    /// `status/bootstrap-phase`.
    pub fn bootstrap_phase(&self) -> String {
        let (p, t, s) = *lock(&self.bootstrap);
        bootstrap_text(p, t, s)
    }

    /// The current progress, percent.
    pub fn bootstrap_progress(&self) -> u8 {
        lock(&self.bootstrap).0
    }

    /// Follow the bootstrap phases as they are recorded (the embedding
    /// API's bootstrap events).
    pub fn bootstrap_events(&self) -> tokio::sync::watch::Receiver<BootstrapPhase> {
        self.bootstrap_watch.subscribe()
    }

    // ---- circuits ----

    fn emit_circ(&self, st: &CircStatus) {
        self.emit("CIRC", || reply::event(&format!("CIRC {}", st.line())));
    }

    /// A circuit build starts; its controller id.
    pub fn circ_launched(&self, path: &[HopTarget], controller: bool) -> u64 {
        self.circ_launched_as(path, controller, false)
    }

    /// [`Self::circ_launched`]; `internal`: a circuit for onion services
    /// (tor's BUILD_FLAGS IS_INTERNAL, NEED_CAPACITY, NEED_UPTIME).
    pub fn circ_launched_as(&self, path: &[HopTarget], controller: bool, internal: bool) -> u64 {
        let id = self.next_circ.fetch_add(1, Ordering::Relaxed);
        self.counters.circ_launched.fetch_add(1, Ordering::Relaxed);
        let build_flags = if path.len() == 1 {
            vec!["ONEHOP_TUNNEL", "IS_INTERNAL", "NEED_CAPACITY"]
        } else if internal {
            vec!["IS_INTERNAL", "NEED_CAPACITY", "NEED_UPTIME"]
        } else {
            vec!["NEED_CAPACITY"]
        };
        let status = CircStatus {
            id,
            status: "LAUNCHED",
            path: Vec::new(),
            build_flags,
            purpose: if controller { "CONTROLLER" } else { "GENERAL" },
            hs_state: None,
            rend_query: None,
            time_created: iso_time_usec(now_micros()),
            reason: None,
            remote_reason: None,
            socks_auth: None,
        };
        self.emit_circ(&status);
        let mut circs = lock(&self.circs);
        if circs.len() < MAX_TRACKED_CIRCUITS {
            circs.insert(
                id,
                CircEntry {
                    status,
                    relays: path.iter().map(|h| h.rsa_id).collect(),
                    weak: None,
                    strong: None,
                    chan: None,
                    bw: Arc::new((AtomicU64::new(0), AtomicU64::new(0))),
                    streams: 0,
                },
            );
        }
        id
    }

    /// Circuit `id` has its first `hops_done` hops of `path` (tor sends
    /// EXTENDED for every hop, the last one included, then BUILT).
    pub fn circ_extended(&self, id: u64, path: &[HopTarget], hops_done: usize) {
        let mut circs = lock(&self.circs);
        let Some(e) = circs.get_mut(&id) else {
            return;
        };
        e.status.path = path
            .iter()
            .take(hops_done)
            .map(|h| long_name(&h.rsa_id, &h.nickname))
            .collect();
        e.status.status = "EXTENDED";
        let st = e.status.clone();
        drop(circs);
        self.emit_circ(&st);
    }

    /// A controller starts adding hops to built circuit `id` (tor's
    /// circuit goes back to building: `circuit-status` says EXTENDED, no
    /// event). False when the circuit is gone or not built.
    pub fn circ_extending(&self, id: u64) -> bool {
        match lock(&self.circs).get_mut(&id) {
            Some(e) if e.status.status == "BUILT" => {
                e.status.status = "EXTENDED";
                true
            }
            _ => false,
        }
    }

    /// The hops a controller added to circuit `id` are built: its path is
    /// now `path` (BUILT again, as tor reports a circuit that opened).
    pub fn circ_reopened(&self, id: u64, path: &[HopTarget]) {
        let mut circs = lock(&self.circs);
        let Some(e) = circs.get_mut(&id) else {
            return;
        };
        e.relays = path.iter().map(|h| h.rsa_id).collect();
        e.status.path = path
            .iter()
            .map(|h| long_name(&h.rsa_id, &h.nickname))
            .collect();
        e.status.status = "BUILT";
        let st = e.status.clone();
        drop(circs);
        self.emit_circ(&st);
    }

    /// The circuit is built (BUILT): record how to reach and close it.
    pub fn circ_built(
        &self,
        id: u64,
        chan: ChannelHandle,
        circ_id: u32,
        credits: Arc<Semaphore>,
        took: Duration,
    ) {
        self.counters.circ_built.fetch_add(1, Ordering::Relaxed);
        let us = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        self.counters
            .build_micros_sum
            .fetch_add(us, Ordering::Relaxed);
        let ms = us / 1000;
        let b = BUILD_BUCKETS_MS
            .iter()
            .position(|&ub| ms <= ub)
            .unwrap_or(BUILD_BUCKETS_MS.len());
        if let Some(c) = self.counters.build_buckets.get(b) {
            c.fetch_add(1, Ordering::Relaxed);
        }
        let mut circs = lock(&self.circs);
        let Some(e) = circs.get_mut(&id) else {
            return;
        };
        e.chan = Some((chan, circ_id, credits));
        e.status.status = "BUILT";
        let st = e.status.clone();
        drop(circs);
        self.emit_circ(&st);
    }

    /// An onion-service use of circuit `id`: its PURPOSE, HS_STATE and
    /// REND_QUERY (the address without `.onion`). A changed purpose is
    /// announced as tor does (`CIRC_MINOR PURPOSE_CHANGED`); a new HS_STATE
    /// alone shows in later CIRC events and `circuit-status`.
    pub fn circ_purpose(
        &self,
        id: u64,
        purpose: &'static str,
        hs_state: Option<&'static str>,
        rend_query: Option<&str>,
    ) {
        let mut circs = lock(&self.circs);
        let Some(e) = circs.get_mut(&id) else {
            return;
        };
        let (old, old_hs) = (e.status.purpose, e.status.hs_state);
        e.status.purpose = purpose;
        e.status.hs_state = hs_state;
        if let Some(q) = rend_query {
            e.status.rend_query = Some(q.to_string());
        }
        if old == purpose {
            return;
        }
        let st = e.status.clone();
        drop(circs);
        self.emit("CIRC_MINOR", || {
            reply::event(&st.purpose_changed_line(old, old_hs))
        });
    }

    /// A build failed.
    pub fn circ_failed(&self, id: u64, reason: &'static str) {
        self.counters.circ_failed.fetch_add(1, Ordering::Relaxed);
        if let Some(mut e) = lock(&self.circs).remove(&id) {
            e.status.status = "FAILED";
            e.status.reason = Some(reason);
            self.emit_circ(&e.status);
        }
    }

    /// A circuit went away.
    pub fn circ_closed(&self, id: u64, remote: bool) {
        let e = lock(&self.circs).remove(&id);
        if let Some(mut e) = e {
            e.status.status = "CLOSED";
            if remote {
                e.status.remote_reason = Some("NONE");
            } else {
                e.status.reason = Some("FINISHED");
            }
            self.emit_circ(&e.status);
        }
    }

    /// Remember the shared handle of a circuit (so the controller can
    /// attach streams to it); `keep` holds it alive (controller circuits).
    pub fn circ_handle(&self, c: &Arc<Circuit>, keep: bool) {
        if let Some(e) = lock(&self.circs).get_mut(&c.ctl_id) {
            if e.weak.is_none() {
                e.weak = Some(Arc::downgrade(c));
            }
            if keep {
                e.strong = Some(c.clone());
            }
        }
    }

    /// Run `f` on a circuit entry.
    pub fn with_circ<T>(&self, id: u64, f: impl FnOnce(&mut CircEntry) -> T) -> Option<T> {
        lock(&self.circs).get_mut(&id).map(f)
    }

    /// Remove an entry (CLOSECIRCUIT), returning it.
    pub fn take_circ(&self, id: u64) -> Option<CircEntry> {
        lock(&self.circs).remove(&id)
    }

    /// `circuit-status`.
    pub fn circuit_status(&self) -> String {
        lock(&self.circs)
            .values()
            .map(|e| e.status.line())
            .collect::<Vec<_>>()
            .join("\r\n")
    }

    /// Circuits by status (metrics).
    pub fn circuit_counts(&self) -> (usize, usize) {
        let c = lock(&self.circs);
        let built = c.values().filter(|e| e.status.status == "BUILT").count();
        (built, c.len() - built)
    }

    /// Drop entries whose circuits died without being dropped yet; emit
    /// CLOSED for them.
    pub fn sweep_circuits(&self) {
        let dead: Vec<u64> = lock(&self.circs)
            .iter()
            .filter(|(_, e)| {
                e.chan
                    .as_ref()
                    .is_some_and(|(ch, _, cr)| ch.is_closed() || cr.is_closed())
            })
            .map(|(id, _)| *id)
            .collect();
        for id in dead {
            self.circ_closed(id, true);
        }
    }

    /// Per-circuit byte counters of circuit `id`.
    pub fn circ_bw(&self, id: u64) -> Option<Arc<(AtomicU64, AtomicU64)>> {
        lock(&self.circs).get(&id).map(|e| e.bw.clone())
    }

    /// Exits of circuits that carried streams (for NEWNYM).
    pub fn used_exits(&self) -> HashSet<[u8; 20]> {
        lock(&self.circs)
            .values()
            .filter(|e| e.streams > 0 && is_exit_circuit(&e.status))
            .filter_map(|e| e.relays.last().copied())
            .collect()
    }

    // ---- streams ----

    /// A new SOCKS request; its stream id.
    pub fn stream_new(&self, mut status: StreamStatus) -> u64 {
        let id = self.next_stream.fetch_add(1, Ordering::Relaxed);
        self.counters.streams_new.fetch_add(1, Ordering::Relaxed);
        status.id = id;
        self.emit("STREAM", || {
            reply::event(&format!("STREAM {}", status.event_line()))
        });
        let mut s = lock(&self.streams);
        if s.len() < MAX_TRACKED_STREAMS {
            status.source_addr = None;
            status.purpose = None;
            s.insert(
                id,
                StreamEntry {
                    status,
                    attach: None,
                    close: None,
                },
            );
        }
        id
    }

    /// Change a stream's status and emit the event.
    pub fn stream_status(
        &self,
        id: u64,
        status: &'static str,
        circ: Option<u64>,
        reason: Option<&'static str>,
        remote_reason: Option<&'static str>,
    ) {
        let mut s = lock(&self.streams);
        let Some(e) = s.get_mut(&id) else {
            return;
        };
        e.status.status = status;
        if let Some(c) = circ {
            e.status.circ_id = c;
        }
        e.status.reason = reason;
        e.status.remote_reason = remote_reason;
        let line = e.status.event_line();
        // As tor: a stream that fails is then closed, and controllers see
        // both (FAILED when the application is answered, CLOSED, with the
        // same reasons, when the connection goes).
        let closed_line = (status == "FAILED").then(|| {
            let mut c = e.status.clone();
            c.status = "CLOSED";
            c.event_line()
        });
        if matches!(status, "CLOSED" | "FAILED") {
            s.remove(&id);
        }
        drop(s);
        match status {
            "SUCCEEDED" => self.counters.streams_ok.fetch_add(1, Ordering::Relaxed),
            "FAILED" => self.counters.streams_failed.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
        if let (Some(c), "SENTCONNECT" | "SENTRESOLVE") = (circ, status) {
            let exit = self
                .with_circ(c, |e| {
                    e.streams += 1;
                    let general = is_exit_circuit(&e.status);
                    e.relays
                        .last()
                        .copied()
                        .filter(|_| general && e.relays.len() >= 2)
                })
                .flatten();
            // The first stream after NEWNYM that leaves through an exit the
            // old circuits did not use ends the avoidance (an onion-service
            // circuit, whose last hop is no exit, does not).
            if let Some(x) = exit {
                let mut av = lock(&self.newnym_avoid);
                if !av.is_empty() && !av.contains(&x) {
                    av.clear();
                }
            }
        }
        self.emit("STREAM", || reply::event(&format!("STREAM {line}")));
        if let Some(l) = closed_line {
            self.emit("STREAM", || reply::event(&format!("STREAM {l}")));
        }
    }

    /// Run `f` on a stream entry.
    pub fn with_stream<T>(&self, id: u64, f: impl FnOnce(&mut StreamEntry) -> T) -> Option<T> {
        lock(&self.streams).get_mut(&id).map(f)
    }

    /// `stream-status`.
    pub fn stream_status_text(&self) -> String {
        lock(&self.streams)
            .values()
            .map(|e| e.status.short_line())
            .collect::<Vec<_>>()
            .join("\r\n")
    }

    /// Streams open now (metrics).
    pub fn open_streams(&self) -> usize {
        lock(&self.streams).len()
    }

    // ---- OR connections ----

    /// ORCONN LAUNCHED / CONNECTED / FAILED / CLOSED.
    pub fn orconn(
        &self,
        rsa_id: [u8; 20],
        nickname: &str,
        status: &'static str,
        reason: Option<&str>,
    ) {
        self.orconns
            .event(&self.bus, rsa_id, nickname, status, reason);
    }

    /// `orconn-status` lines and the set of live channel peers.
    pub fn orconn_status(&self) -> (String, Vec<[u8; 20]>) {
        self.orconns.status()
    }

    // ---- bandwidth ----

    /// Emit BW (and CIRC_BW for circuits that moved bytes); once a second.
    pub fn tick_bandwidth(&self) {
        let (r, w) = (
            self.read.load(Ordering::Relaxed),
            self.written.load(Ordering::Relaxed),
        );
        let (dr, dw) = {
            let mut last = lock(&self.bw_last);
            let d = (r.saturating_sub(last.0), w.saturating_sub(last.1));
            *last = (r, w);
            d
        };
        self.emit("BW", || reply::event(&format!("BW {dr} {dw}")));
        if !self.wants("CIRC_BW") {
            return;
        }
        let now = iso_time_usec(now_micros());
        let lines: Vec<String> = lock(&self.circs)
            .iter()
            .filter_map(|(id, e)| {
                let r = e.bw.0.swap(0, Ordering::Relaxed);
                let w = e.bw.1.swap(0, Ordering::Relaxed);
                (r > 0 || w > 0).then(|| {
                    // Cells: 498 payload bytes each, 509 with the relay header.
                    let cells_r = r.div_ceil(498);
                    let cells_w = w.div_ceil(498);
                    ev::circ_bw_line(
                        *id,
                        cells_r * 509,
                        cells_w * 509,
                        &now,
                        r,
                        cells_r * 498 - r,
                        w,
                        cells_w * 498 - w,
                    )
                })
            })
            .collect();
        for l in lines {
            self.emit("CIRC_BW", || reply::event(&l));
        }
    }

    // ---- NEWNYM ----

    /// NEWNYM with tor's rate limit: now, or deferred to 10 s after the
    /// last one. Returns the delay applied (zero: done now).
    pub fn newnym_due(&self) -> Option<Duration> {
        let mut last = lock(&self.newnym_last);
        let now = Instant::now();
        match *last {
            Some(t) if now.duration_since(t) < NEWNYM_INTERVAL => {
                if self.newnym_pending.swap(true, Ordering::Relaxed) {
                    None
                } else {
                    Some(NEWNYM_INTERVAL - now.duration_since(t))
                }
            }
            _ => {
                *last = Some(now);
                Some(Duration::ZERO)
            }
        }
    }

    /// Apply a NEWNYM: new epoch, remember exits to avoid, SIGNAL event.
    pub fn newnym_apply(&self) {
        *lock(&self.newnym_last) = Some(Instant::now());
        self.newnym_pending.store(false, Ordering::Relaxed);
        let exits = self.used_exits();
        *lock(&self.newnym_avoid) = exits;
        self.epoch.fetch_add(1, Ordering::Relaxed);
        self.emit("SIGNAL", || reply::event("SIGNAL NEWNYM"));
    }
}

/// Whether a circuit is one whose last hop is an exit (not an onion
/// service's or another internal one).
fn is_exit_circuit(st: &CircStatus) -> bool {
    matches!(st.purpose, "GENERAL" | "CONTROLLER") && !st.build_flags.contains(&"IS_INTERNAL")
}
