//! Sans-IO Loopix client: the real, loop and drop streams, authenticated
//! SUBSCRIBE/PULL to its provider, and delivery of what it pulls.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::codec::{self, Control, Dest, DropReason, Hop, Outcome, Profile, SecretKey};
use super::config::LoopixParams;
use super::control::{AuthRequest, ControlKey, ControlKind};
use super::node::{
    MAX_PENDING_LOOPS, Outgoing, Stats, WallClock, entry_for, is_loop, loop_key, loop_payload,
    sample_exp, secs,
};
use crate::directory::{Directory, NodeInfo};
use crate::sphinx::replay::ReplayCache;

/// A delivered application message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Delivered {
    pub msg: Vec<u8>,
}

/// A Loopix client. `Clone` copies its whole state (the fuzz target
/// starts every input from one client built once).
#[derive(Clone)]
pub struct ClientNode {
    pub name: String,
    profile: Profile,
    key: SecretKey,
    dir: Arc<Directory>,
    params: LoopixParams,
    provider: NodeInfo,
    /// MAC key for SUBSCRIBE/PULL, shared with the provider.
    control_key: ControlKey,
    /// Timestamp of the last control request (strictly increasing).
    last_control_ms: u64,
    clock: WallClock,
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
        let control_key = ControlKey::derive(
            &key,
            &provider.key,
            name,
            &ci.node.key,
            &provider.name,
            &provider.key,
        )
        .ok_or_else(|| format!("cannot derive the control key with {}", provider.name))?;
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
            provider,
            control_key,
            last_control_ms: 0,
            clock: WallClock::new(now),
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

    /// Sets the wall clock (Unix milliseconds at `now`) that timestamps
    /// control requests; the driver calls it at start and now and then.
    /// Without it the node counts from 0 at its creation (enough for nodes
    /// that share one virtual clock).
    pub fn set_wall_clock(&mut self, now: Instant, unix_ms: u64) {
        self.clock = WallClock::at(now, unix_ms);
    }

    /// Sends an authenticated SUBSCRIBE or PULL to the provider.
    fn control(&mut self, now: Instant, kind: ControlKind) {
        let ts = self
            .clock
            .unix_ms(now)
            .max(self.last_control_ms.saturating_add(1));
        self.last_control_ms = ts;
        let req = AuthRequest::sign(&self.control_key, kind, &self.name, &self.provider.name, ts);
        let data = Control::Auth(req).encode();
        self.stats.sent_control += 1;
        self.stats.bytes_sent += data.len() as u64;
        self.out.push(Outgoing {
            at: now,
            host: self.provider.host.clone(),
            port: self.provider.port,
            data,
        });
    }

    /// The next event of a stream after one due at `t`. More than 1 s
    /// behind, the schedule restarts at `now` (no burst to catch up); the
    /// skipped time is added to `skipped`.
    fn advance(
        rng: &mut StdRng,
        t: Instant,
        mean: f64,
        now: Instant,
        skipped: &mut f64,
    ) -> Instant {
        let mut next = t + secs(sample_exp(rng, mean));
        if next + Duration::from_secs(1) < now {
            *skipped += (now - next).as_secs_f64();
            next = now;
        }
        next
    }

    /// Runs the streams and returns every datagram due at `now`.
    pub fn poll(&mut self, now: Instant) -> Vec<Outgoing> {
        if self.next_pull <= now {
            self.control(now, ControlKind::Subscribe);
            self.control(now, ControlKind::Pull);
            self.next_pull = now + secs(self.params.effective_time_pull());
        }
        while let Some(t) = self.next_real.filter(|t| *t <= now) {
            if let Some((to, msg)) = self.send_queue.pop_front() {
                if self.send_to(now, &to, &msg, false) {
                    self.stats.sent_real += 1;
                }
            } else if self.send_drop(now) {
                self.stats.sent_drop_substitute += 1;
            }
            self.next_real = Some(Self::advance(
                &mut self.rng,
                t,
                self.params.exp_params_payload,
                now,
                &mut self.stats.skipped_s_payload,
            ));
        }
        while let Some(t) = self.next_loop.filter(|t| *t <= now) {
            self.send_loop(now);
            self.next_loop = Some(Self::advance(
                &mut self.rng,
                t,
                self.params.exp_params_loops,
                now,
                &mut self.stats.skipped_s_loop,
            ));
        }
        while let Some(t) = self.next_drop.filter(|t| *t <= now) {
            if self.send_drop(now) {
                self.stats.sent_drop += 1;
            }
            self.next_drop = Some(Self::advance(
                &mut self.rng,
                t,
                self.params.exp_params_drop,
                now,
                &mut self.stats.skipped_s_drop,
            ));
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
