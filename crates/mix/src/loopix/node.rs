//! Sans-IO Loopix node logic: mixes, providers and clients.
//!
//! Nodes take datagrams and a clock value (`now`) and queue datagrams to
//! send with their send time; [`MixNode::poll`] / [`ClientNode::poll`]
//! return what is due. No sockets, no tasks, no wall clock here.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::codec::{
    self, Built, Control, Dest, DropReason, Hop, Outcome, ProcessedPacket, Profile, RoutingEntry,
    SecretKey,
};
use super::config::LoopixParams;
use super::control::{ControlKind, ProviderAuth, Refusal};
use crate::directory::{Directory, NodeInfo};
use crate::sphinx::replay::ReplayCache;

/// A datagram to send at `at`.
#[derive(Clone, Debug)]
pub struct Outgoing {
    pub at: Instant,
    pub host: String,
    pub port: u16,
    pub data: Vec<u8>,
}

/// Draws from Exp(mean) (mean in seconds): `-mean * ln(U)`.
pub fn sample_exp(rng: &mut impl Rng, mean: f64) -> f64 {
    if mean <= 0.0 {
        return 0.0;
    }
    let u: f64 = 1.0 - rng.r#gen::<f64>(); // (0, 1]
    -mean * u.ln()
}

pub(super) fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.clamp(0.0, 1e7))
}

/// Wall-clock time (Unix milliseconds) derived from the monotonic `now`
/// the node is given: the driver anchors it with `set_wall_clock`.
#[derive(Clone, Copy, Debug)]
pub(super) struct WallClock {
    anchor: Instant,
    anchor_ms: u64,
}

impl WallClock {
    /// Counts from 0 at `now` until anchored.
    pub(super) fn new(now: Instant) -> WallClock {
        WallClock::at(now, 0)
    }

    pub(super) fn at(now: Instant, unix_ms: u64) -> WallClock {
        WallClock {
            anchor: now,
            anchor_ms: unix_ms,
        }
    }

    pub(super) fn unix_ms(&self, now: Instant) -> u64 {
        if now >= self.anchor {
            let d = u64::try_from(now.duration_since(self.anchor).as_millis()).unwrap_or(u64::MAX);
            self.anchor_ms.saturating_add(d)
        } else {
            let d = u64::try_from(self.anchor.duration_since(now).as_millis()).unwrap_or(u64::MAX);
            self.anchor_ms.saturating_sub(d)
        }
    }
}

/// Counters every node keeps (roles use the fields that apply).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Stats {
    pub name: String,
    pub role: String,
    pub uptime_s: f64,
    pub received: u64,
    pub processed: u64,
    pub forwarded: u64,
    pub dropped_malformed: u64,
    pub dropped_bad_mac: u64,
    pub dropped_bad_body: u64,
    pub dropped_replay: u64,
    pub dropped_bad_routing: u64,
    pub dropped_overload: u64,
    pub dropped_wrong_dest: u64,
    pub queue_len: u64,
    pub loops_sent: u64,
    pub loops_returned: u64,
    pub loop_latency_sum_s: f64,
    // provider
    pub drop_cover_received: u64,
    pub stored: u64,
    pub stored_now: u64,
    pub pulls: u64,
    pub pulled_messages: u64,
    pub dummies_sent: u64,
    pub pushed: u64,
    pub subscribed_clients: u64,
    /// Authenticated SUBSCRIBE/PULL requests accepted.
    pub control_accepted: u64,
    /// Reference-format (unauthenticated) SUBSCRIBE/PULL, never answered.
    pub dropped_unauthenticated: u64,
    /// Wrong provider, unknown client or bad MAC.
    pub dropped_bad_auth: u64,
    /// Timestamp outside the allowed clock skew.
    pub dropped_stale: u64,
    /// Control request replayed.
    pub dropped_control_replay: u64,
    /// Authentic requests over the client's rate.
    pub dropped_rate_limited: u64,
    /// Refused requests from a source over its refusal budget.
    pub dropped_source_limited: u64,
    // client
    pub sent_real: u64,
    pub sent_drop: u64,
    pub sent_drop_substitute: u64,
    pub sent_loop: u64,
    /// Seconds of each Poisson stream's schedule skipped because the
    /// client fell more than 1 s behind it (a busy machine): no catch-up
    /// burst is sent, so rate checks discount this time.
    pub skipped_s_payload: f64,
    pub skipped_s_loop: f64,
    pub skipped_s_drop: f64,
    pub sent_control: u64,
    pub delivered: u64,
    pub dummies_received: u64,
    pub bytes_sent: u64,
    pub bytes_received: u64,
}

impl Stats {
    pub fn count_drop(&mut self, r: DropReason) {
        match r {
            DropReason::Malformed => self.dropped_malformed += 1,
            DropReason::BadMac => self.dropped_bad_mac += 1,
            DropReason::BadBody => self.dropped_bad_body += 1,
            DropReason::Replay => self.dropped_replay += 1,
            DropReason::BadRouting => self.dropped_bad_routing += 1,
            DropReason::Overload => self.dropped_overload += 1,
            DropReason::WrongDest => self.dropped_wrong_dest += 1,
        }
    }

    pub fn count_refusal(&mut self, r: Refusal) {
        match r {
            Refusal::Unauthenticated => self.dropped_unauthenticated += 1,
            Refusal::WrongProvider | Refusal::UnknownClient | Refusal::BadMac => {
                self.dropped_bad_auth += 1
            }
            Refusal::Stale => self.dropped_stale += 1,
            Refusal::Replay => self.dropped_control_replay += 1,
            Refusal::RateLimited => self.dropped_rate_limited += 1,
            Refusal::SourceLimited => self.dropped_source_limited += 1,
        }
    }

    pub fn dropped_total(&self) -> u64 {
        self.dropped_unauthenticated
            + self.dropped_bad_auth
            + self.dropped_stale
            + self.dropped_control_replay
            + self.dropped_rate_limited
            + self.dropped_source_limited
            + self.dropped_malformed
            + self.dropped_bad_mac
            + self.dropped_bad_body
            + self.dropped_replay
            + self.dropped_bad_routing
            + self.dropped_overload
            + self.dropped_wrong_dest
    }
}

#[derive(Clone)]
struct Scheduled {
    at: Instant,
    seq: u64,
    out: Outgoing,
}
impl PartialEq for Scheduled {
    fn eq(&self, o: &Self) -> bool {
        self.at == o.at && self.seq == o.seq
    }
}
impl Eq for Scheduled {}
impl PartialOrd for Scheduled {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Scheduled {
    fn cmp(&self, o: &Self) -> Ordering {
        // min-heap on (at, seq)
        o.at.cmp(&self.at).then(o.seq.cmp(&self.seq))
    }
}

/// A bounded delay queue.
#[derive(Clone)]
struct DelayQueue {
    heap: BinaryHeap<Scheduled>,
    seq: u64,
    cap: usize,
}

impl DelayQueue {
    fn new(cap: usize) -> Self {
        DelayQueue {
            heap: BinaryHeap::new(),
            seq: 0,
            cap,
        }
    }
    fn push(&mut self, out: Outgoing) -> bool {
        if self.heap.len() >= self.cap {
            return false;
        }
        self.seq += 1;
        self.heap.push(Scheduled {
            at: out.at,
            seq: self.seq,
            out,
        });
        true
    }
    fn pop_due(&mut self, now: Instant, into: &mut Vec<Outgoing>) {
        while let Some(top) = self.heap.peek() {
            if top.at > now {
                break;
            }
            if let Some(s) = self.heap.pop() {
                into.push(s.out);
            }
        }
    }
    fn next(&self) -> Option<Instant> {
        self.heap.peek().map(|s| s.at)
    }
    fn len(&self) -> usize {
        self.heap.len()
    }
}

pub(super) fn entry_for(n: &NodeInfo, delay: f64, drop: bool) -> RoutingEntry {
    RoutingEntry {
        host: n.host.clone(),
        port: n.port,
        drop,
        type_flag: None,
        delay,
        name: n.name.clone(),
    }
}

pub(super) fn loop_payload(noise: usize, rng: &mut StdRng) -> Vec<u8> {
    let mut m = vec![0u8; 2 + noise];
    m[0] = b'H';
    m[1] = b'T';
    rng.fill(&mut m[2..]);
    m
}

/// Whether a delivered message is a loop (the reference's `HT` prefix).
pub fn is_loop(msg: &[u8]) -> bool {
    msg.starts_with(b"HT")
}

pub(super) fn loop_key(msg: &[u8]) -> Option<[u8; 8]> {
    msg.get(2..10).and_then(|s| s.try_into().ok())
}

/// A mix node or a provider. `Clone` copies its whole state (the fuzz
/// target starts every input from one node built once).
#[derive(Clone)]
pub struct MixNode {
    pub name: String,
    profile: Profile,
    key: Arc<SecretKey>,
    dir: Arc<Directory>,
    params: LoopixParams,
    provider: bool,
    me: NodeInfo,
    replay: ReplayCache,
    queue: DelayQueue,
    next_loop: Option<Instant>,
    pending_loops: HashMap<[u8; 8], Instant>,
    /// Providers: admission of SUBSCRIBE/PULL.
    auth: Option<ProviderAuth>,
    /// Providers: directory address of each of their clients (the only
    /// place replies and pushed packets go).
    client_addrs: HashMap<String, (String, u16)>,
    /// Providers: clients that sent an authenticated SUBSCRIBE (when).
    subscribed: HashMap<String, Instant>,
    inbox: HashMap<String, VecDeque<Vec<u8>>>,
    clock: WallClock,
    /// Logged once: a client over its control rate.
    warned_rate: bool,
    started: Instant,
    pub stats: Stats,
    rng: StdRng,
}

pub(super) const MAX_PENDING_LOOPS: usize = 10_000;

impl MixNode {
    pub fn new(
        name: &str,
        provider: bool,
        profile: Profile,
        key: Arc<SecretKey>,
        dir: Arc<Directory>,
        params: LoopixParams,
        now: Instant,
    ) -> Result<MixNode, String> {
        let me = if provider {
            dir.provider(name)
        } else {
            dir.mix(name)
        }
        .ok_or_else(|| {
            format!(
                "{name} is not listed in the directory as a {}",
                if provider { "provider" } else { "mix" }
            )
        })?
        .clone();
        if me.key != key.public() {
            return Err(format!(
                "the secret key does not match {name}'s public key in the directory"
            ));
        }
        let mut rng = StdRng::from_entropy();
        let next_loop = (params.exp_params_loops > 0.0)
            .then(|| now + secs(sample_exp(&mut rng, params.exp_params_loops)));
        let (auth, client_addrs) = if provider {
            let addrs = dir
                .clients
                .iter()
                .filter(|c| c.provider == name)
                .map(|c| (c.node.name.clone(), (c.node.host.clone(), c.node.port)))
                .collect();
            let auth = ProviderAuth::new(name, key.clone(), me.key, &dir, &params, now);
            (Some(auth), addrs)
        } else {
            (None, HashMap::new())
        };
        Ok(MixNode {
            name: name.to_string(),
            profile,
            key,
            replay: ReplayCache::new(params.replay_cache),
            queue: DelayQueue::new(params.max_queue),
            dir,
            provider,
            me,
            next_loop,
            pending_loops: HashMap::new(),
            auth,
            client_addrs,
            subscribed: HashMap::new(),
            inbox: HashMap::new(),
            clock: WallClock::new(now),
            warned_rate: false,
            started: now,
            stats: Stats {
                name: name.to_string(),
                role: if provider { "provider" } else { "mix" }.into(),
                ..Stats::default()
            },
            params,
            rng,
        })
    }

    pub fn profile(&self) -> Profile {
        self.profile
    }
    pub fn key(&self) -> Arc<SecretKey> {
        self.key.clone()
    }

    /// Sets the wall clock (Unix milliseconds at `now`) that control
    /// request timestamps are checked against; the driver calls it at start
    /// and now and then. Without it the node counts from 0 at its creation
    /// (enough for nodes that share one virtual clock).
    pub fn set_wall_clock(&mut self, now: Instant, unix_ms: u64) {
        self.clock = WallClock::at(now, unix_ms);
    }

    /// Handles one datagram from `from`, doing the Sphinx work inline.
    pub fn handle_datagram(&mut self, now: Instant, from: IpAddr, data: &[u8]) {
        if let Some(c) = self.pre_dispatch(now, data) {
            self.handle_control(now, from, c);
            return;
        }
        let r = codec::process_datagram(&self.profile, &self.key, data);
        self.handle_processed(now, r);
    }

    /// Counts the datagram and returns a control message when it is one;
    /// packets go to [`codec::process_datagram`] (possibly on a worker) and
    /// then [`MixNode::handle_processed`].
    pub fn pre_dispatch(&mut self, _now: Instant, data: &[u8]) -> Option<Control> {
        self.stats.received += 1;
        self.stats.bytes_received += data.len() as u64;
        Control::parse(data)
    }

    /// Handles a control message from source address `from`. Nothing is
    /// ever sent back for a refused one; accepted ones are answered only at
    /// the client's directory address.
    pub fn handle_control(&mut self, now: Instant, from: IpAddr, c: Control) {
        let Some(auth) = self.auth.as_mut() else {
            self.stats.count_drop(DropReason::Malformed);
            return;
        };
        let req = match c {
            Control::Auth(r) => r,
            Control::Legacy { .. } => {
                let r = auth.unauthenticated(now, from);
                self.refused(r);
                return;
            }
            Control::Dummy => {
                self.stats.count_drop(DropReason::Malformed);
                return;
            }
        };
        if let Err(r) = auth.check(now, self.clock.unix_ms(now), from, &req) {
            self.refused(r);
            return;
        }
        self.stats.control_accepted += 1;
        match req.kind {
            ControlKind::Subscribe => {
                // Bounded: only the provider's own directory clients pass.
                self.subscribed.insert(req.client, now);
                self.stats.subscribed_clients = self.subscribed.len() as u64;
            }
            ControlKind::Pull => self.pull(now, &req.client),
        }
    }

    fn refused(&mut self, r: Refusal) {
        self.stats.count_refusal(r);
        if r == Refusal::RateLimited && !self.warned_rate {
            self.warned_rate = true;
            tracing::warn!(
                node = %self.name,
                "a client's SUBSCRIBE/PULL requests exceed CONTROL_RATE; if honest clients pull \
                 more often than TIME_PULL here says, set TIME_PULL or CONTROL_RATE to match"
            );
        }
        tracing::debug!(node = %self.name, reason = ?r, "control request refused");
    }

    /// The directory address of one of this provider's clients.
    fn client_addr(&self, name: &str) -> Option<(String, u16)> {
        self.client_addrs.get(name).cloned()
    }

    fn pull(&mut self, now: Instant, name: &str) {
        let Some((host, port)) = self.client_addr(name) else {
            self.stats.count_drop(DropReason::WrongDest);
            return;
        };
        self.stats.pulls += 1;
        let mut msgs: Vec<Vec<u8>> = Vec::new();
        if let Some(q) = self.inbox.get_mut(name) {
            while msgs.len() < self.params.max_retrieve {
                match q.pop_front() {
                    Some(m) => msgs.push(m),
                    None => break,
                }
            }
            if q.is_empty() {
                self.inbox.remove(name);
            }
        }
        self.stats.pulled_messages += msgs.len() as u64;
        self.stats.stored_now = self.inbox.values().map(|q| q.len() as u64).sum();
        while msgs.len() < self.params.max_retrieve {
            msgs.push(Control::dummy(self.params.noise_length, &mut self.rng));
            self.stats.dummies_sent += 1;
        }
        for data in msgs {
            self.enqueue(Outgoing {
                at: now,
                host: host.clone(),
                port,
                data,
            });
        }
    }

    fn enqueue(&mut self, o: Outgoing) {
        if !self.queue.push(o) {
            self.stats.count_drop(DropReason::Overload);
        }
        self.stats.queue_len = self.queue.len() as u64;
    }

    /// Applies the result of Sphinx processing.
    pub fn handle_processed(&mut self, now: Instant, r: Result<ProcessedPacket, DropReason>) {
        let p = match r {
            Ok(p) => p,
            Err(e) => {
                self.stats.count_drop(e);
                return;
            }
        };
        if !self.replay.check_and_insert(p.tag) {
            self.stats.count_drop(DropReason::Replay);
            return;
        }
        self.stats.processed += 1;
        match p.outcome {
            Outcome::Relay { next, packet } => {
                if self.provider && next.drop {
                    self.stats.drop_cover_received += 1;
                    return;
                }
                let delay = next.delay.clamp(0.0, self.params.max_delay);
                let delay = if delay.is_finite() { delay } else { 0.0 };
                if self.provider && self.is_my_client(&next.name) {
                    // Push only to a client that subscribed (authenticated),
                    // and only at its directory address.
                    let push_addr = self
                        .subscribed
                        .contains_key(&next.name)
                        .then(|| self.client_addr(&next.name))
                        .flatten();
                    if let (true, Some((h, port))) = (self.params.push_messages, push_addr) {
                        self.stats.pushed += 1;
                        self.enqueue(Outgoing {
                            at: now + secs(delay),
                            host: h,
                            port,
                            data: packet,
                        });
                    } else {
                        self.store(&next.name, packet);
                    }
                    return;
                }
                self.stats.forwarded += 1;
                self.enqueue(Outgoing {
                    at: now + secs(delay),
                    host: next.host,
                    port: next.port,
                    data: packet,
                });
            }
            Outcome::Deliver { dest, msg } => {
                if dest.name == self.name && is_loop(&msg) {
                    self.stats.loops_returned += 1;
                    if let Some(t) = loop_key(&msg).and_then(|k| self.pending_loops.remove(&k)) {
                        self.stats.loop_latency_sum_s +=
                            now.saturating_duration_since(t).as_secs_f64();
                    }
                } else {
                    self.stats.count_drop(DropReason::WrongDest);
                }
            }
        }
    }

    fn is_my_client(&self, name: &str) -> bool {
        self.client_addrs.contains_key(name)
    }

    /// Stores a packet for one of this provider's clients (so the inbox
    /// table is bounded by the directory; each inbox by
    /// `MAX_STORED_PER_CLIENT`).
    fn store(&mut self, name: &str, packet: Vec<u8>) {
        let q = self.inbox.entry(name.to_string()).or_default();
        if q.len() >= self.params.max_stored_per_client {
            self.stats.count_drop(DropReason::Overload);
            return;
        }
        q.push_back(packet);
        self.stats.stored += 1;
        self.stats.stored_now += 1;
    }

    fn loop_path(&mut self) -> Option<Vec<Hop>> {
        let dir = self.dir.clone();
        let layers = dir.layers();
        if layers.is_empty() || dir.providers.is_empty() {
            return None;
        }
        let n = layers.len();
        let mut seq: Vec<&NodeInfo> = Vec::new();
        if self.provider {
            for l in &layers {
                seq.push(l[self.rng.gen_range(0..l.len())]);
            }
        } else {
            let own = dir.layer_index_of(&self.name)?;
            let mut l = (own + 1) % n;
            while l != own {
                let layer = &layers[l];
                seq.push(layer[self.rng.gen_range(0..layer.len())]);
                l = (l + 1) % n;
            }
            let prov = &dir.providers[self.rng.gen_range(0..dir.providers.len())];
            seq.insert(n - 1 - own, prov);
        }
        seq.push(&self.me);
        let d = self.params.exp_params_delay;
        Some(
            seq.into_iter()
                .map(|node| Hop {
                    entry: entry_for(node, sample_exp(&mut self.rng, d), false),
                    key: node.key,
                })
                .collect(),
        )
    }

    fn send_loop(&mut self, now: Instant) {
        let Some(path) = self.loop_path() else { return };
        let msg = loop_payload(self.params.noise_length, &mut self.rng);
        let dest = Dest {
            host: self.me.host.clone(),
            port: self.me.port,
            name: self.name.clone(),
        };
        match codec::build_packet(&self.profile, &path, &dest, &msg, &mut self.rng) {
            Ok(Built {
                first_host,
                first_port,
                bytes,
            }) => {
                if let Some(k) = loop_key(&msg) {
                    if self.pending_loops.len() >= MAX_PENDING_LOOPS {
                        self.pending_loops.clear();
                    }
                    self.pending_loops.insert(k, now);
                }
                self.stats.loops_sent += 1;
                self.enqueue(Outgoing {
                    at: now,
                    host: first_host,
                    port: first_port,
                    data: bytes,
                });
            }
            Err(e) => tracing::warn!(node = %self.name, "cannot build loop packet: {e}"),
        }
    }

    /// Returns every datagram due at `now` (runs the loop stream too).
    pub fn poll(&mut self, now: Instant) -> Vec<Outgoing> {
        while let Some(t) = self.next_loop {
            if t > now {
                break;
            }
            self.send_loop(now);
            let mut next = t + secs(sample_exp(&mut self.rng, self.params.exp_params_loops));
            if next + Duration::from_secs(1) < now {
                next = now;
            }
            self.next_loop = Some(next);
        }
        let mut out = Vec::new();
        self.queue.pop_due(now, &mut out);
        for o in &out {
            self.stats.bytes_sent += o.data.len() as u64;
        }
        self.stats.queue_len = self.queue.len() as u64;
        self.stats.uptime_s = now.saturating_duration_since(self.started).as_secs_f64();
        out
    }

    pub fn next_wakeup(&self) -> Option<Instant> {
        match (self.queue.next(), self.next_loop) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

pub use super::client::{ClientNode, Delivered};

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
