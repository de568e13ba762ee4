//! Sans-IO Loopix node logic: mixes, providers and clients.
//!
//! Nodes take datagrams and a clock value (`now`) and queue datagrams to
//! send with their send time; [`MixNode::poll`] / [`ClientNode::poll`]
//! return what is due. No sockets, no tasks, no wall clock here.

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
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

fn secs(s: f64) -> Duration {
    Duration::from_secs_f64(s.clamp(0.0, 1e7))
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
    // client
    pub sent_real: u64,
    pub sent_drop: u64,
    pub sent_drop_substitute: u64,
    pub sent_loop: u64,
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

    pub fn dropped_total(&self) -> u64 {
        self.dropped_malformed
            + self.dropped_bad_mac
            + self.dropped_bad_body
            + self.dropped_replay
            + self.dropped_bad_routing
            + self.dropped_overload
            + self.dropped_wrong_dest
    }
}

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

fn entry_for(n: &NodeInfo, delay: f64, drop: bool) -> RoutingEntry {
    RoutingEntry {
        host: n.host.clone(),
        port: n.port,
        drop,
        type_flag: None,
        delay,
        name: n.name.clone(),
    }
}

fn loop_payload(noise: usize, rng: &mut StdRng) -> Vec<u8> {
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

fn loop_key(msg: &[u8]) -> Option<[u8; 8]> {
    msg.get(2..10).and_then(|s| s.try_into().ok())
}

/// A mix node or a provider.
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
    subscribed: HashMap<String, (String, u16, Instant)>,
    inbox: HashMap<String, VecDeque<Vec<u8>>>,
    started: Instant,
    pub stats: Stats,
    rng: StdRng,
}

const MAX_SUBSCRIBED: usize = 100_000;
const MAX_PENDING_LOOPS: usize = 10_000;

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
            subscribed: HashMap::new(),
            inbox: HashMap::new(),
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

    /// Handles one datagram, doing the Sphinx work inline.
    pub fn handle_datagram(&mut self, now: Instant, data: &[u8]) {
        if let Some(c) = self.pre_dispatch(now, data) {
            self.handle_control(now, c);
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

    pub fn handle_control(&mut self, now: Instant, c: Control) {
        if !self.provider {
            self.stats.count_drop(DropReason::Malformed);
            return;
        }
        match c {
            Control::Subscribe { name, host, port } => {
                let known = self
                    .dir
                    .client(&name)
                    .is_some_and(|ci| ci.provider == self.name);
                if known
                    || self.subscribed.contains_key(&name)
                    || self.subscribed.len() < MAX_SUBSCRIBED
                {
                    self.subscribed.insert(name, (host, port, now));
                    self.stats.subscribed_clients = self.subscribed.len() as u64;
                } else {
                    self.stats.count_drop(DropReason::Overload);
                }
            }
            Control::Pull { name } => self.pull(now, &name),
            Control::Dummy => self.stats.count_drop(DropReason::Malformed),
        }
    }

    fn client_addr(&self, name: &str) -> Option<(String, u16)> {
        if let Some((h, p, _)) = self.subscribed.get(name) {
            return Some((h.clone(), *p));
        }
        self.dir
            .client(name)
            .filter(|c| c.provider == self.name)
            .map(|c| (c.node.host.clone(), c.node.port))
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
                    let subscribed_addr = self
                        .subscribed
                        .get(&next.name)
                        .map(|(h, p, _)| (h.clone(), *p));
                    if let (true, Some((h, port))) = (self.params.push_messages, subscribed_addr) {
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
        self.subscribed.contains_key(name)
            || self
                .dir
                .client(name)
                .is_some_and(|c| c.provider == self.name)
    }

    fn store(&mut self, name: &str, packet: Vec<u8>) {
        let known = self.inbox.contains_key(name);
        if !known && self.inbox.len() >= MAX_SUBSCRIBED {
            self.stats.count_drop(DropReason::Overload);
            return;
        }
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

/// A delivered application message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    pub msg: Vec<u8>,
}

/// A Loopix client.
pub struct ClientNode {
    pub name: String,
    profile: Profile,
    key: SecretKey,
    dir: Arc<Directory>,
    params: LoopixParams,
    me: NodeInfo,
    provider: NodeInfo,
    next_real: Option<Instant>,
    next_loop: Option<Instant>,
    next_drop: Option<Instant>,
    next_pull: Instant,
    send_queue: VecDeque<(String, Vec<u8>)>,
    pending_loops: HashMap<[u8; 8], Instant>,
    replay: ReplayCache,
    delivered: VecDeque<Delivered>,
    out: Vec<Outgoing>,
    started: Instant,
    pub stats: Stats,
    rng: StdRng,
}

/// Bound on delivered messages waiting for the application.
const MAX_DELIVERED: usize = 10_000;

impl ClientNode {
    pub fn new(
        name: &str,
        profile: Profile,
        key: SecretKey,
        dir: Arc<Directory>,
        params: LoopixParams,
        now: Instant,
    ) -> Result<ClientNode, String> {
        let ci = dir
            .client(name)
            .ok_or_else(|| format!("client {name} is not in the directory"))?
            .clone();
        if ci.node.key != key.public() {
            return Err(format!(
                "the secret key does not match {name}'s public key in the directory"
            ));
        }
        let provider = dir
            .provider(&ci.provider)
            .ok_or_else(|| format!("provider {} of {name} is not in the directory", ci.provider))?
            .clone();
        if dir.layers().is_empty() {
            return Err("the directory lists no mixes".into());
        }
        let mut rng = StdRng::from_entropy();
        let first =
            |rng: &mut StdRng, mean: f64| (mean > 0.0).then(|| now + secs(sample_exp(rng, mean)));
        Ok(ClientNode {
            name: name.to_string(),
            next_real: first(&mut rng, params.exp_params_payload),
            next_loop: first(&mut rng, params.exp_params_loops),
            next_drop: first(&mut rng, params.exp_params_drop),
            next_pull: now,
            profile,
            key,
            replay: ReplayCache::new(params.replay_cache.min(100_000)),
            send_queue: VecDeque::new(),
            pending_loops: HashMap::new(),
            delivered: VecDeque::new(),
            out: Vec::new(),
            me: ci.node,
            provider,
            dir,
            started: now,
            stats: Stats {
                name: name.to_string(),
                role: "client".into(),
                ..Stats::default()
            },
            params,
            rng,
        })
    }

    /// Queues a real message for `recipient`; it leaves on the next tick of
    /// the λP stream.
    pub fn queue_message(&mut self, recipient: &str, msg: Vec<u8>) -> Result<(), String> {
        if self.dir.client(recipient).is_none() {
            return Err(format!("unknown recipient {recipient}"));
        }
        if msg.len() > self.profile.max_message() {
            return Err(format!(
                "message of {} bytes exceeds the limit of {}",
                msg.len(),
                self.profile.max_message()
            ));
        }
        if self.send_queue.len() >= self.params.send_queue {
            return Err("send queue full".into());
        }
        self.send_queue.push_back((recipient.to_string(), msg));
        Ok(())
    }

    pub fn queued(&self) -> usize {
        self.send_queue.len()
    }

    /// Messages delivered since the last call.
    pub fn take_delivered(&mut self) -> Vec<Delivered> {
        self.delivered.drain(..).collect()
    }

    fn path_to(
        &mut self,
        recipient: &NodeInfo,
        recipient_provider: &NodeInfo,
        drop: bool,
    ) -> Vec<Hop> {
        let dir = self.dir.clone();
        let layers = dir.layers();
        let take = if self.params.path_length == 0 {
            layers.len()
        } else {
            self.params.path_length.min(layers.len())
        };
        let mut nodes: Vec<&NodeInfo> = vec![&self.provider];
        for l in layers.iter().take(take) {
            nodes.push(l[self.rng.gen_range(0..l.len())]);
        }
        nodes.push(recipient_provider);
        nodes.push(recipient);
        let last = nodes.len() - 1;
        let d = self.params.exp_params_delay;
        nodes
            .into_iter()
            .enumerate()
            .map(|(i, n)| Hop {
                entry: entry_for(n, sample_exp(&mut self.rng, d), drop && i == last),
                key: n.key,
            })
            .collect()
    }

    fn send_to(&mut self, now: Instant, recipient: &str, msg: &[u8], drop: bool) -> bool {
        let dir = self.dir.clone();
        let Some(ci) = dir.client(recipient) else {
            return false;
        };
        let Some(rp) = dir.provider(&ci.provider) else {
            return false;
        };
        let path = self.path_to(&ci.node, rp, drop);
        let dest = Dest {
            host: ci.node.host.clone(),
            port: ci.node.port,
            name: ci.node.name.clone(),
        };
        match codec::build_packet(&self.profile, &path, &dest, msg, &mut self.rng) {
            Ok(b) => {
                self.stats.bytes_sent += b.bytes.len() as u64;
                self.out.push(Outgoing {
                    at: now,
                    host: b.first_host,
                    port: b.first_port,
                    data: b.bytes,
                });
                true
            }
            Err(e) => {
                tracing::warn!(node = %self.name, "cannot build packet: {e}");
                false
            }
        }
    }

    fn send_drop(&mut self, now: Instant) -> bool {
        if self.dir.clients.is_empty() {
            return false;
        }
        let i = self.rng.gen_range(0..self.dir.clients.len());
        let to = self.dir.clients[i].node.name.clone();
        let mut noise = vec![0u8; self.params.noise_length];
        self.rng.fill(&mut noise[..]);
        self.send_to(now, &to, &noise, true)
    }

    fn send_loop(&mut self, now: Instant) {
        let msg = loop_payload(self.params.noise_length, &mut self.rng);
        let me = self.name.clone();
        if self.send_to(now, &me, &msg, false) {
            self.stats.sent_loop += 1;
            if let Some(k) = loop_key(&msg) {
                if self.pending_loops.len() >= MAX_PENDING_LOOPS {
                    self.pending_loops.clear();
                }
                self.pending_loops.insert(k, now);
            }
        }
    }

    fn control(&mut self, now: Instant, c: Control) {
        let data = c.encode();
        self.stats.sent_control += 1;
        self.stats.bytes_sent += data.len() as u64;
        self.out.push(Outgoing {
            at: now,
            host: self.provider.host.clone(),
            port: self.provider.port,
            data,
        });
    }

    fn advance(&mut self, t: Instant, mean: f64, now: Instant) -> Instant {
        let mut next = t + secs(sample_exp(&mut self.rng, mean));
        if next + Duration::from_secs(1) < now {
            next = now;
        }
        next
    }

    /// Runs the streams and returns every datagram due at `now`.
    pub fn poll(&mut self, now: Instant) -> Vec<Outgoing> {
        if self.next_pull <= now {
            let (name, host, port) = (self.name.clone(), self.me.host.clone(), self.me.port);
            self.control(
                now,
                Control::Subscribe {
                    name: name.clone(),
                    host,
                    port,
                },
            );
            self.control(now, Control::Pull { name });
            let tp = if self.params.time_pull > 0.0 {
                self.params.time_pull
            } else {
                10.0
            };
            self.next_pull = now + secs(tp);
        }
        while let Some(t) = self.next_real.filter(|t| *t <= now) {
            if let Some((to, msg)) = self.send_queue.pop_front() {
                if self.send_to(now, &to, &msg, false) {
                    self.stats.sent_real += 1;
                }
            } else if self.send_drop(now) {
                self.stats.sent_drop_substitute += 1;
            }
            self.next_real = Some(self.advance(t, self.params.exp_params_payload, now));
        }
        while let Some(t) = self.next_loop.filter(|t| *t <= now) {
            self.send_loop(now);
            self.next_loop = Some(self.advance(t, self.params.exp_params_loops, now));
        }
        while let Some(t) = self.next_drop.filter(|t| *t <= now) {
            if self.send_drop(now) {
                self.stats.sent_drop += 1;
            }
            self.next_drop = Some(self.advance(t, self.params.exp_params_drop, now));
        }
        self.stats.uptime_s = now.saturating_duration_since(self.started).as_secs_f64();
        std::mem::take(&mut self.out)
    }

    pub fn next_wakeup(&self) -> Instant {
        [self.next_real, self.next_loop, self.next_drop]
            .into_iter()
            .flatten()
            .fold(self.next_pull, Instant::min)
    }

    /// Handles a datagram from the provider.
    pub fn handle_datagram(&mut self, now: Instant, data: &[u8]) {
        self.stats.received += 1;
        self.stats.bytes_received += data.len() as u64;
        if let Some(c) = Control::parse(data) {
            if c == Control::Dummy {
                self.stats.dummies_received += 1;
            } else {
                self.stats.count_drop(DropReason::Malformed);
            }
            return;
        }
        let p = match codec::process_datagram(&self.profile, &self.key, data) {
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
            Outcome::Deliver { dest, msg } if dest.name == self.name => {
                if is_loop(&msg) {
                    if let Some(t) = loop_key(&msg).and_then(|k| self.pending_loops.remove(&k)) {
                        self.stats.loops_returned += 1;
                        self.stats.loop_latency_sum_s +=
                            now.saturating_duration_since(t).as_secs_f64();
                    }
                } else {
                    self.stats.delivered += 1;
                    if self.delivered.len() >= MAX_DELIVERED {
                        self.delivered.pop_front();
                        self.stats.count_drop(DropReason::Overload);
                    }
                    self.delivered.push_back(Delivered { msg });
                }
            }
            _ => self.stats.count_drop(DropReason::WrongDest),
        }
    }
}
