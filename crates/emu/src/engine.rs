//! The packet scheduler: a sans-IO engine driven by an explicit clock.
//!
//! The driver hands it every packet read from a node's TUN together with the
//! time it was read ([`Engine::ingress`]), asks when the next packet is due
//! ([`Engine::next_deadline`]) and collects due packets with their
//! destination ([`Engine::poll_output`]). All decisions (loss, queueing,
//! delay, jitter, reordering) are made in virtual time from these clock
//! values, so a fake clock gives exactly reproducible results and a late
//! wake-up of the driver never changes a rate or a drop decision.
//!
//! A packet from node A to node B crosses up to three links in order: A's
//! uplink (shared by everything A sends), the A->B core link, and B's
//! downlink (shared by everything B receives). Packets to or from the host
//! endpoint are forwarded unimpaired.

use crate::packet::{self, ParseError};
use crate::profile::{JitterDist, LinkProfile, Resolved};
use crate::rng::{Rng, derive_seed};
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::IpAddr;

/// Nanoseconds on the driver's monotonic clock.
pub type Nanos = u64;
/// Index of an endpoint: nodes are 0..n in topology order, the host is n.
pub type EndpointId = usize;
/// Index of a link in the engine's link table.
pub type LinkId = usize;

/// Limits that keep the engine's memory bounded whatever the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct Limits {
    /// Bytes held in queues and delay lines, all links together.
    pub max_inflight_bytes: u64,
    /// Packets held, all links together.
    pub max_inflight_packets: usize,
    /// Directed links (core links are created on first use).
    pub max_links: usize,
    /// Largest packet accepted (bytes).
    pub max_packet: usize,
    /// Spare buffers kept for reuse.
    pub pool_buffers: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_inflight_bytes: 256 << 20,
            max_inflight_packets: 400_000,
            max_links: 100_000,
            max_packet: 65_535,
            pool_buffers: 8192,
        }
    }
}

/// Which part of a path a link is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LinkKind {
    Uplink,
    Core,
    Downlink,
}

/// Identity of a link for status output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkInfo {
    pub kind: LinkKind,
    /// Sending node (for a downlink: "*", any sender).
    pub from: String,
    /// Receiving node (for an uplink: "*", any receiver).
    pub to: String,
}

impl LinkInfo {
    pub fn label(&self) -> String {
        let k = match self.kind {
            LinkKind::Uplink => "uplink",
            LinkKind::Core => "core",
            LinkKind::Downlink => "downlink",
        };
        format!("{k}/{}/{}", self.from, self.to)
    }
}

/// Counters of one directed link.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct LinkCounters {
    /// Packets/bytes that arrived at the link.
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Packets/bytes that passed it (scheduled onward).
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Dropped by random loss.
    pub drop_loss: u64,
    /// Dropped by the Gilbert-Elliott burst model.
    pub drop_burst: u64,
    /// Dropped because the queue was full (drop-tail).
    pub drop_queue: u64,
    /// Largest queue occupancy seen, bytes.
    pub queue_hwm_bytes: u64,
    /// Packets deliberately reordered.
    pub reordered: u64,
    /// Smallest and largest one-way delay (base delay plus jitter) the link
    /// decided for a packet, in microseconds; queueing and deliberate
    /// reordering are not included. `None` before the first packet passed.
    /// Tests check timing against these, the emulator's own decisions, so
    /// that scheduling noise at the endpoints does not fail them.
    #[serde(default)]
    pub delay_min_us: Option<u64>,
    #[serde(default)]
    pub delay_max_us: Option<u64>,
    /// Longest time a packet waited in the rate limiter's queue, in
    /// microseconds (0 without a rate limit).
    #[serde(default)]
    pub queue_delay_max_us: u64,
}

/// Counters for the whole emulator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct GlobalCounters {
    /// Packets/bytes handed to the engine.
    pub rx_packets: u64,
    pub rx_bytes: u64,
    /// Packets/bytes handed back for delivery.
    pub delivered_packets: u64,
    pub delivered_bytes: u64,
    /// Of those, packets to or from the host endpoint (unimpaired).
    pub host_packets: u64,
    /// Not a valid IPv4/IPv6 packet.
    pub drop_malformed: u64,
    /// Source address is not the sending endpoint's address.
    pub drop_bad_source: u64,
    /// Destination is no endpoint (multicast, IPv6 noise, outside subnet).
    pub drop_unknown_dst: u64,
    /// Global in-flight limit reached.
    pub drop_overflow: u64,
    /// Link table full.
    pub drop_link_table: u64,
    /// Longer than the packet limit.
    pub drop_oversize: u64,
    /// Writing to the destination TUN failed (counted by the driver).
    pub write_errors: u64,
    /// Largest in-flight byte count seen.
    pub inflight_hwm_bytes: u64,
}

#[derive(Debug, Clone)]
struct Params {
    delay: Nanos,
    jitter: Nanos,
    dist: JitterDist,
    loss: f64,
    ge: Option<crate::profile::GilbertElliott>,
    /// Bytes per nanosecond.
    rate: Option<f64>,
    burst: f64,
    queue_limit: u64,
    reorder: Option<(f64, Nanos)>,
}

fn ms_to_ns(ms: f64) -> Nanos {
    (ms * 1e6).round().max(0.0) as Nanos
}

impl Params {
    fn from_profile(p: &LinkProfile) -> Self {
        Params {
            delay: ms_to_ns(p.delay_ms),
            jitter: ms_to_ns(p.jitter_ms),
            dist: p.jitter_dist,
            loss: p.loss,
            ge: p.gilbert_elliott,
            rate: p.rate_mbit.map(|r| r * 1e6 / 8.0 / 1e9),
            burst: f64::from(p.effective_burst_bytes()),
            queue_limit: p.effective_queue_bytes(),
            reorder: p
                .reorder
                .map(|r| (r.probability, ms_to_ns(r.extra_delay_ms))),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drop {
    Loss,
    Burst,
    Queue,
}

struct Link {
    info: LinkInfo,
    p: Params,
    loss_rng: Rng,
    jitter_rng: Rng,
    reorder_rng: Rng,
    ge_bad: bool,
    /// Jitter process: (time of knot a, value a, value b at a + tau).
    knots: Option<(Nanos, f64, f64)>,
    tokens: f64,
    tokens_at: Nanos,
    last_depart: Nanos,
    queue: VecDeque<(Nanos, u32)>,
    queue_bytes: u64,
    last_out: Nanos,
    c: LinkCounters,
}

impl Link {
    fn new(info: LinkInfo, profile: &LinkProfile, seed: u64) -> Self {
        let label = info.label();
        let p = Params::from_profile(profile);
        Link {
            loss_rng: Rng::new(derive_seed(seed, &format!("{label}/loss"))),
            jitter_rng: Rng::new(derive_seed(seed, &format!("{label}/jitter"))),
            reorder_rng: Rng::new(derive_seed(seed, &format!("{label}/reorder"))),
            info,
            tokens: p.burst,
            p,
            ge_bad: false,
            knots: None,
            tokens_at: 0,
            last_depart: 0,
            queue: VecDeque::new(),
            queue_bytes: 0,
            last_out: 0,
            c: LinkCounters::default(),
        }
    }

    fn lose(&mut self) -> Option<Drop> {
        if let Some(ge) = &self.p.ge {
            if self.ge_bad {
                if self.loss_rng.chance(ge.r) {
                    self.ge_bad = false;
                }
            } else if self.loss_rng.chance(ge.p) {
                self.ge_bad = true;
            }
            let pl = if self.ge_bad {
                ge.loss_bad
            } else {
                ge.loss_good
            };
            if self.loss_rng.chance(pl) {
                return Some(Drop::Burst);
            }
            None
        } else if self.p.loss > 0.0 && self.loss_rng.chance(self.p.loss) {
            Some(Drop::Loss)
        } else {
            None
        }
    }

    /// Token bucket with a drop-tail byte queue in front. Returns the time
    /// the packet leaves the bucket.
    fn shape(&mut self, t: Nanos, len: u32) -> Result<Nanos, Drop> {
        let Some(rate) = self.p.rate else {
            return Ok(t);
        };
        while let Some(&(d, l)) = self.queue.front() {
            if d > t {
                break;
            }
            self.queue.pop_front();
            self.queue_bytes -= u64::from(l);
        }
        if self.queue_bytes + u64::from(len) > self.p.queue_limit && !self.queue.is_empty() {
            return Err(Drop::Queue);
        }
        let burst = self.p.burst.max(f64::from(len));
        let t0 = t.max(self.last_depart);
        let avail = (self.tokens + (t0 - self.tokens_at) as f64 * rate).min(burst);
        let need = f64::from(len);
        let depart = if avail >= need {
            t0
        } else {
            t0 + ((need - avail) / rate).ceil() as Nanos
        };
        let at_depart = (avail + (depart - t0) as f64 * rate).min(burst);
        self.tokens = (at_depart - need).max(0.0);
        self.tokens_at = depart;
        self.last_depart = depart;
        if depart > t {
            self.queue.push_back((depart, len));
            self.queue_bytes += u64::from(len);
            self.c.queue_hwm_bytes = self.c.queue_hwm_bytes.max(self.queue_bytes);
        }
        Ok(depart)
    }

    fn sample_jitter(&mut self) -> f64 {
        let j = self.p.jitter as f64;
        match self.p.dist {
            JitterDist::Uniform => (2.0 * self.jitter_rng.next_f64() - 1.0) * j,
            JitterDist::Normal => {
                let mut v = 0.0;
                for _ in 0..32 {
                    v = self.jitter_rng.normal() * j / 2.0;
                    if v.abs() <= j {
                        break;
                    }
                }
                v.clamp(-j, j)
            }
        }
    }

    /// Jitter at time `t`: a random process, linear between independent
    /// samples ("knots") taken every `4 * jitter`. Its slope is at most 1/2,
    /// so delay never falls faster than time advances: packets are never
    /// reordered, and the distribution does not depend on the packet rate
    /// (clamping independent per-packet samples to FIFO order would push
    /// every packet of a fast flow to the top of the range).
    fn jitter(&mut self, t: Nanos) -> i64 {
        if self.p.jitter == 0 {
            return 0;
        }
        let tau = self.p.jitter.saturating_mul(4).max(1);
        match self.knots {
            None => {
                let a = self.sample_jitter();
                let b = self.sample_jitter();
                self.knots = Some((t, a, b));
            }
            Some((t0, _, b)) if t >= t0 + tau => {
                let steps = (t - t0) / tau;
                let base = t0 + steps * tau;
                let (na, nb) = if steps == 1 {
                    (b, self.sample_jitter())
                } else {
                    (self.sample_jitter(), self.sample_jitter())
                };
                self.knots = Some((base, na, nb));
            }
            Some(_) => {}
        }
        let (t0, a, b) = self.knots.unwrap_or((t, 0.0, 0.0));
        let frac = (t.saturating_sub(t0)) as f64 / tau as f64;
        (a + (b - a) * frac.min(1.0)).round() as i64
    }

    /// Run one packet through the link at time `t`: Ok(time it leaves).
    fn process(&mut self, t: Nanos, len: u32) -> Result<Nanos, Drop> {
        self.c.rx_packets += 1;
        self.c.rx_bytes += u64::from(len);
        let res = self.process_inner(t, len);
        match res {
            Ok(_) => {
                self.c.tx_packets += 1;
                self.c.tx_bytes += u64::from(len);
            }
            Err(Drop::Loss) => self.c.drop_loss += 1,
            Err(Drop::Burst) => self.c.drop_burst += 1,
            Err(Drop::Queue) => self.c.drop_queue += 1,
        }
        res
    }

    fn process_inner(&mut self, t: Nanos, len: u32) -> Result<Nanos, Drop> {
        if let Some(d) = self.lose() {
            return Err(d);
        }
        let depart = self.shape(t, len)?;
        self.c.queue_delay_max_us = self
            .c
            .queue_delay_max_us
            .max(depart.saturating_sub(t) / 1000);
        let base = depart + self.p.delay;
        let j = self.jitter(depart);
        let mut out = if j >= 0 {
            base + j as u64
        } else {
            base.saturating_sub(j.unsigned_abs()).max(depart)
        };
        if let Some((prob, extra)) = self.p.reorder
            && self.reorder_rng.chance(prob)
        {
            self.c.reordered += 1;
            self.note_delay(out - depart);
            return Ok(out + extra);
        }
        out = out.max(self.last_out);
        self.last_out = out;
        self.note_delay(out - depart);
        Ok(out)
    }

    fn note_delay(&mut self, ns: Nanos) {
        let us = ns / 1000;
        self.c.delay_min_us = Some(self.c.delay_min_us.map_or(us, |m| m.min(us)));
        self.c.delay_max_us = Some(self.c.delay_max_us.map_or(us, |m| m.max(us)));
    }
}

struct Event {
    time: Nanos,
    seq: u64,
    dst: EndpointId,
    route: [LinkId; 3],
    route_len: u8,
    next: u8,
    pkt: Vec<u8>,
}

impl PartialEq for Event {
    fn eq(&self, o: &Self) -> bool {
        self.time == o.time && self.seq == o.seq
    }
}
impl Eq for Event {}
impl PartialOrd for Event {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Event {
    // Reversed: BinaryHeap is a max-heap, we want the earliest first.
    fn cmp(&self, o: &Self) -> Ordering {
        o.time.cmp(&self.time).then(o.seq.cmp(&self.seq))
    }
}

/// A packet due for delivery.
#[derive(Debug)]
pub struct Delivery {
    pub dst: EndpointId,
    pub pkt: Vec<u8>,
    /// The virtual time it was due.
    pub due: Nanos,
}

/// What happened to a packet handed to [`Engine::ingress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ingress {
    /// Accepted (it may still be dropped by a link's loss or queue).
    Accepted,
    Malformed(ParseError),
    BadSource,
    UnknownDst,
    Overflow,
    LinkTableFull,
    Oversize,
}

/// One endpoint: a node or the host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Endpoint {
    pub name: String,
    pub address: IpAddr,
}

/// The scheduler.
pub struct Engine {
    resolved: Resolved,
    limits: Limits,
    endpoints: Vec<Endpoint>,
    addr_map: HashMap<IpAddr, EndpointId>,
    host: Option<EndpointId>,
    links: Vec<Link>,
    uplink: Vec<Option<LinkId>>,
    downlink: Vec<Option<LinkId>>,
    core: HashMap<(usize, usize), LinkId>,
    heap: BinaryHeap<Event>,
    ready: VecDeque<Delivery>,
    seq: u64,
    inflight_bytes: u64,
    inflight_packets: usize,
    pool: Vec<Vec<u8>>,
    g: GlobalCounters,
}

impl Engine {
    /// Build an engine for a resolved topology. With `host_endpoint`, the
    /// endpoint after the last node is the root namespace.
    pub fn new(resolved: Resolved, host_endpoint: bool, limits: Limits) -> Self {
        let mut endpoints: Vec<Endpoint> = resolved
            .nodes
            .iter()
            .map(|n| Endpoint {
                name: n.name.clone(),
                address: IpAddr::V4(n.address),
            })
            .collect();
        let host = if host_endpoint {
            endpoints.push(Endpoint {
                name: "host".into(),
                address: IpAddr::V4(resolved.host_address),
            });
            Some(endpoints.len() - 1)
        } else {
            None
        };
        let addr_map = endpoints
            .iter()
            .enumerate()
            .map(|(i, e)| (e.address, i))
            .collect();
        let mut links = Vec::new();
        let mut uplink = vec![None; endpoints.len()];
        let mut downlink = vec![None; endpoints.len()];
        for (i, n) in resolved.nodes.iter().enumerate() {
            if let Some(p) = &n.uplink {
                uplink[i] = Some(links.len());
                links.push(Link::new(
                    LinkInfo {
                        kind: LinkKind::Uplink,
                        from: n.name.clone(),
                        to: "*".into(),
                    },
                    p,
                    resolved.seed,
                ));
            }
            if let Some(p) = &n.downlink {
                downlink[i] = Some(links.len());
                links.push(Link::new(
                    LinkInfo {
                        kind: LinkKind::Downlink,
                        from: "*".into(),
                        to: n.name.clone(),
                    },
                    p,
                    resolved.seed,
                ));
            }
        }
        Engine {
            resolved,
            limits,
            endpoints,
            addr_map,
            host,
            links,
            uplink,
            downlink,
            core: HashMap::new(),
            heap: BinaryHeap::new(),
            ready: VecDeque::new(),
            seq: 0,
            inflight_bytes: 0,
            inflight_packets: 0,
            pool: Vec::new(),
            g: GlobalCounters::default(),
        }
    }

    pub fn endpoints(&self) -> &[Endpoint] {
        &self.endpoints
    }

    pub fn host(&self) -> Option<EndpointId> {
        self.host
    }

    fn core_link(&mut self, from: EndpointId, to: EndpointId) -> Option<LinkId> {
        if let Some(id) = self.core.get(&(from, to)) {
            return Some(*id);
        }
        if self.links.len() >= self.limits.max_links {
            return None;
        }
        let profile = self.resolved.core_profile(from, to).clone();
        let info = LinkInfo {
            kind: LinkKind::Core,
            from: self.endpoints[from].name.clone(),
            to: self.endpoints[to].name.clone(),
        };
        let id = self.links.len();
        self.links
            .push(Link::new(info, &profile, self.resolved.seed));
        self.core.insert((from, to), id);
        Some(id)
    }

    fn take_buf(&mut self, data: &[u8]) -> Vec<u8> {
        let mut v = self.pool.pop().unwrap_or_default();
        v.clear();
        v.extend_from_slice(data);
        v
    }

    /// Give a delivered packet's buffer back for reuse.
    pub fn recycle(&mut self, mut buf: Vec<u8>) {
        if self.pool.len() < self.limits.pool_buffers
            && buf.capacity() <= 2 * self.limits.max_packet
        {
            buf.clear();
            self.pool.push(buf);
        }
    }

    /// Create every core link between nodes now (normally they are created
    /// on first use), so that status shows all of them from the start.
    pub fn create_all_links(&mut self) {
        let n = self.resolved.nodes.len();
        for a in 0..n {
            for b in 0..n {
                if a != b && self.core_link(a, b).is_none() {
                    return;
                }
            }
        }
    }

    /// A packet read from endpoint `from` at time `now`.
    pub fn ingress(&mut self, now: Nanos, from: EndpointId, data: &[u8]) -> Ingress {
        self.advance(now);
        self.g.rx_packets += 1;
        self.g.rx_bytes += data.len() as u64;
        if data.len() > self.limits.max_packet {
            self.g.drop_oversize += 1;
            return Ingress::Oversize;
        }
        let addrs = match packet::parse(data) {
            Ok(a) => a,
            Err(e) => {
                self.g.drop_malformed += 1;
                return Ingress::Malformed(e);
            }
        };
        match self.endpoints.get(from) {
            Some(e) if e.address == addrs.src => {}
            _ => {
                self.g.drop_bad_source += 1;
                return Ingress::BadSource;
            }
        }
        let dst = match self.addr_map.get(&addrs.dst) {
            Some(&d) if d != from => d,
            _ => {
                self.g.drop_unknown_dst += 1;
                return Ingress::UnknownDst;
            }
        };
        let len = data.len() as u64;
        if self.inflight_bytes + len > self.limits.max_inflight_bytes
            || self.inflight_packets >= self.limits.max_inflight_packets
        {
            self.g.drop_overflow += 1;
            return Ingress::Overflow;
        }
        let mut route = [0usize; 3];
        let mut route_len = 0u8;
        let host_path = Some(from) == self.host || Some(dst) == self.host;
        if !host_path {
            if let Some(u) = self.uplink[from] {
                route[usize::from(route_len)] = u;
                route_len += 1;
            }
            let Some(c) = self.core_link(from, dst) else {
                self.g.drop_link_table += 1;
                return Ingress::LinkTableFull;
            };
            route[usize::from(route_len)] = c;
            route_len += 1;
            if let Some(d) = self.downlink[dst] {
                route[usize::from(route_len)] = d;
                route_len += 1;
            }
        } else {
            self.g.host_packets += 1;
        }
        let pkt = self.take_buf(data);
        self.inflight_bytes += len;
        self.inflight_packets += 1;
        self.g.inflight_hwm_bytes = self.g.inflight_hwm_bytes.max(self.inflight_bytes);
        self.seq += 1;
        self.heap.push(Event {
            time: now,
            seq: self.seq,
            dst,
            route,
            route_len,
            next: 0,
            pkt,
        });
        self.advance(now);
        Ingress::Accepted
    }

    /// Move every event due at or before `now` along its route.
    fn advance(&mut self, now: Nanos) {
        while let Some(top) = self.heap.peek() {
            if top.time > now {
                break;
            }
            let Some(mut ev) = self.heap.pop() else { break };
            if ev.next >= ev.route_len {
                self.ready.push_back(Delivery {
                    dst: ev.dst,
                    due: ev.time,
                    pkt: ev.pkt,
                });
                continue;
            }
            let link = ev.route[usize::from(ev.next)];
            let len = ev.pkt.len() as u32;
            match self.links[link].process(ev.time, len) {
                Ok(t) => {
                    ev.time = t;
                    ev.next += 1;
                    self.seq += 1;
                    ev.seq = self.seq;
                    self.heap.push(ev);
                }
                Err(_) => {
                    self.inflight_bytes -= u64::from(len);
                    self.inflight_packets -= 1;
                    let pkt = ev.pkt;
                    self.recycle(pkt);
                }
            }
        }
    }

    /// Earliest time at which [`Engine::poll_output`] will have something.
    pub fn next_deadline(&self) -> Option<Nanos> {
        if let Some(d) = self.ready.front() {
            return Some(d.due);
        }
        self.heap.peek().map(|e| e.time)
    }

    /// Next packet due at or before `now`, in due order.
    pub fn poll_output(&mut self, now: Nanos) -> Option<Delivery> {
        if self.ready.is_empty() {
            self.advance(now);
        }
        let d = self.ready.pop_front()?;
        self.inflight_bytes -= d.pkt.len() as u64;
        self.inflight_packets -= 1;
        self.g.delivered_packets += 1;
        self.g.delivered_bytes += d.pkt.len() as u64;
        Some(d)
    }

    /// The driver could not write a delivered packet.
    pub fn note_write_error(&mut self) {
        self.g.write_errors += 1;
    }

    pub fn global(&self) -> GlobalCounters {
        self.g
    }

    /// Bytes currently held.
    pub fn inflight_bytes(&self) -> u64 {
        self.inflight_bytes
    }

    /// Every link with its counters and current queue occupancy.
    pub fn links(&self) -> impl Iterator<Item = (&LinkInfo, LinkCounters, u64)> {
        self.links.iter().map(|l| (&l.info, l.c, l.queue_bytes))
    }

    /// Counters of the core link `from -> to` by node name, if it exists.
    pub fn core_counters(&self, from: &str, to: &str) -> Option<LinkCounters> {
        self.links
            .iter()
            .find(|l| l.info.kind == LinkKind::Core && l.info.from == from && l.info.to == to)
            .map(|l| l.c)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::ipv4_udp;
    use crate::profile::{GilbertElliott, NodeSpec, ProfileRef, Reorder, Topology};
    use std::net::Ipv4Addr;

    const MS: Nanos = 1_000_000;

    fn engine(t: Topology) -> Engine {
        Engine::new(t.resolve().expect("valid"), true, Limits::default())
    }

    fn addr(e: &Engine, i: EndpointId) -> Ipv4Addr {
        match e.endpoints()[i].address {
            IpAddr::V4(a) => a,
            IpAddr::V6(_) => unreachable!("tests use IPv4"),
        }
    }

    fn pkt(e: &Engine, from: EndpointId, to: EndpointId, len: usize) -> Vec<u8> {
        let mut p = ipv4_udp(addr(e, from), addr(e, to), len - 28);
        // Tag with a sequence-like payload so reordering can be seen.
        p.truncate(len);
        p
    }

    fn tag(p: &mut [u8], n: u32) {
        p[28..32].copy_from_slice(&n.to_be_bytes());
    }

    fn read_tag(p: &[u8]) -> u32 {
        match p.get(28..32) {
            Some(b) => u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            None => 0,
        }
    }

    /// Drain everything, returning (due time, tag) in delivery order.
    fn drain(e: &mut Engine) -> Vec<(Nanos, u32)> {
        let mut out = Vec::new();
        while let Some(t) = e.next_deadline() {
            while let Some(d) = e.poll_output(t) {
                out.push((d.due, read_tag(&d.pkt)));
                e.recycle(d.pkt);
            }
        }
        out
    }

    #[test]
    fn fixed_delay() {
        let mut e = engine(Topology::uniform(&["a", "b"], LinkProfile::delay(20.0), 1));
        let mut p = pkt(&e, 0, 1, 100);
        tag(&mut p, 7);
        assert_eq!(e.ingress(5 * MS, 0, &p), Ingress::Accepted);
        assert_eq!(e.next_deadline(), Some(25 * MS));
        assert!(e.poll_output(25 * MS - 1).is_none());
        let d = e.poll_output(25 * MS).expect("due");
        assert_eq!(d.dst, 1);
        assert_eq!(d.due, 25 * MS);
        assert_eq!(read_tag(&d.pkt), 7);
        let c = e.core_counters("a", "b").expect("link");
        assert_eq!((c.rx_packets, c.tx_packets), (1, 1));
        assert_eq!(
            (c.delay_min_us, c.delay_max_us),
            (Some(20_000), Some(20_000))
        );
        assert_eq!(c.queue_delay_max_us, 0);
    }

    #[test]
    fn host_path_is_unimpaired() {
        let mut e = engine(Topology::uniform(&["a", "b"], LinkProfile::delay(20.0), 1));
        let host = e.host().expect("host");
        let p = pkt(&e, host, 1, 60);
        assert_eq!(e.ingress(MS, host, &p), Ingress::Accepted);
        let d = e.poll_output(MS).expect("immediate");
        assert_eq!(d.dst, 1);
        let p = pkt(&e, 0, host, 60);
        assert_eq!(e.ingress(2 * MS, 0, &p), Ingress::Accepted);
        assert_eq!(e.poll_output(2 * MS).expect("immediate").dst, host);
        assert_eq!(e.global().host_packets, 2);
    }

    #[test]
    fn jitter_is_bounded_and_never_reorders() {
        for dist in [JitterDist::Uniform, JitterDist::Normal] {
            let prof = LinkProfile {
                delay_ms: 20.0,
                jitter_ms: 5.0,
                jitter_dist: dist,
                ..Default::default()
            };
            let mut e = engine(Topology::uniform(&["a", "b"], prof, 3));
            let mut sent = Vec::new();
            for i in 0..5000u32 {
                let t = u64::from(i) * 200_000; // 0.2 ms apart
                let mut p = pkt(&e, 0, 1, 64);
                tag(&mut p, i);
                e.ingress(t, 0, &p);
                sent.push(t);
            }
            let out = drain(&mut e);
            assert_eq!(out.len(), 5000);
            let mut below = 0;
            let mut sum = 0.0;
            for w in out.windows(2) {
                assert!(w[0].1 < w[1].1, "reordered: {:?}", w);
            }
            for (due, i) in &out {
                let d = due - sent[*i as usize];
                assert!((15 * MS..=25 * MS).contains(&d), "delay {d}");
                if d < 20 * MS {
                    below += 1;
                }
                sum += d as f64;
            }
            // Not pushed to the top of the range: centred on the delay.
            let mean = sum / out.len() as f64;
            assert!((mean - 20e6).abs() < 1e6, "{dist:?}: mean {mean}");
            assert!(below > 1500, "{dist:?}: only {below} below the mean");
            let c = e.core_counters("a", "b").expect("link");
            assert_eq!(c.reordered, 0);
            // The link's own record of what it decided spans the range.
            let (lo, hi) = (c.delay_min_us.expect("min"), c.delay_max_us.expect("max"));
            assert!(lo >= 15_000 && hi <= 25_000, "{lo}..{hi}");
            assert!(hi - lo >= 5_000, "{dist:?}: jitter spread {lo}..{hi}");
        }
    }

    #[test]
    fn reorder_only_when_asked() {
        let prof = LinkProfile {
            delay_ms: 10.0,
            reorder: Some(Reorder {
                probability: 0.05,
                extra_delay_ms: 3.0,
            }),
            ..Default::default()
        };
        let mut e = engine(Topology::uniform(&["a", "b"], prof, 3));
        for i in 0..2000u32 {
            let mut p = pkt(&e, 0, 1, 64);
            tag(&mut p, i);
            e.ingress(u64::from(i) * 100_000, 0, &p);
        }
        let out = drain(&mut e);
        let inversions = out.windows(2).filter(|w| w[0].1 > w[1].1).count();
        let c = e.core_counters("a", "b").expect("link");
        assert!(c.reordered > 50 && c.reordered < 150, "{}", c.reordered);
        assert!(inversions > 50, "{inversions}");
    }

    fn loss_run(seed: u64, p: f64, n: u32) -> Vec<u32> {
        let prof = LinkProfile {
            delay_ms: 1.0,
            loss: p,
            ..Default::default()
        };
        let mut e = engine(Topology::uniform(&["a", "b"], prof, seed));
        let mut got = vec![false; n as usize];
        for i in 0..n {
            let mut pk = pkt(&e, 0, 1, 64);
            tag(&mut pk, i);
            e.ingress(u64::from(i) * 10_000, 0, &pk);
        }
        for (_, i) in drain(&mut e) {
            got[i as usize] = true;
        }
        (0..n).filter(|i| !got[*i as usize]).collect()
    }

    #[test]
    fn loss_rate_and_reproducibility() {
        let n = 100_000u32;
        for p in [0.005, 0.01, 0.05] {
            let lost = loss_run(11, p, n);
            let rate = lost.len() as f64 / f64::from(n);
            let sd = (p * (1.0 - p) / f64::from(n)).sqrt();
            assert!((rate - p).abs() < 2.576 * sd + 1e-9, "p={p} rate={rate}");
            assert_eq!(lost, loss_run(11, p, n), "same seed, same drops");
            assert_ne!(lost, loss_run(12, p, n), "other seed, other drops");
        }
    }

    #[test]
    fn gilbert_elliott_bursts() {
        let ge = GilbertElliott {
            p: 0.002,
            r: 0.25,
            loss_good: 0.0,
            loss_bad: 1.0,
        };
        let prof = LinkProfile {
            gilbert_elliott: Some(ge),
            ..Default::default()
        };
        let mut e = engine(Topology::uniform(&["a", "b"], prof, 5));
        let n = 400_000u32;
        let mut got = vec![false; n as usize];
        for i in 0..n {
            let mut pk = pkt(&e, 0, 1, 64);
            tag(&mut pk, i);
            e.ingress(u64::from(i) * 1000, 0, &pk);
            while let Some(d) = e.poll_output(u64::from(i) * 1000) {
                got[read_tag(&d.pkt) as usize] = true;
                e.recycle(d.pkt);
            }
        }
        let lost = got.iter().filter(|g| !**g).count();
        let rate = lost as f64 / f64::from(n);
        let want = ge.mean_loss();
        assert!((rate - want).abs() < 0.2 * want, "rate {rate} want {want}");
        // Mean burst length ~ 1/r = 4.
        let mut bursts = 0;
        let mut prev = true;
        for g in &got {
            if !*g && prev {
                bursts += 1;
            }
            prev = *g;
        }
        let mean_burst = lost as f64 / f64::from(bursts);
        assert!((mean_burst - 4.0).abs() < 0.6, "mean burst {mean_burst}");
        let c = e.core_counters("a", "b").expect("link");
        assert_eq!(c.drop_burst as usize, lost);
    }

    #[test]
    fn rate_and_queue_limit() {
        // 10 Mbit/s: a 1250-byte packet takes 1 ms.
        let prof = LinkProfile {
            rate_mbit: Some(10.0),
            burst_bytes: Some(1600),
            queue_bytes: Some(12_500),
            ..Default::default()
        };
        let mut e = engine(Topology::uniform(&["a", "b"], prof, 1));
        // 30 packets at once: the first passes on its tokens, ten more fit
        // in the queue, the rest are tail-dropped.
        for i in 0..30u32 {
            let mut p = pkt(&e, 0, 1, 1250);
            tag(&mut p, i);
            e.ingress(0, 0, &p);
        }
        let out = drain(&mut e);
        let c = e.core_counters("a", "b").expect("link");
        assert_eq!(out.len(), 11, "{out:?}");
        assert_eq!(c.drop_queue, 19);
        assert!(c.queue_hwm_bytes <= 12_500);
        assert_eq!(c.queue_hwm_bytes, 12_500);
        // The last packet waited for the ten before it: 10 ms less the
        // 0.28 ms the first one's tokens gave.
        assert_eq!(c.queue_delay_max_us, 9_720);
        // The first leaves at once on its tokens; the second waits for the
        // 900 bytes the first left missing (0.72 ms); then exactly 1 ms apart.
        for (k, (due, _)) in out.iter().enumerate() {
            let want = if k == 0 { 0 } else { k as u64 * MS - 280_000 };
            assert_eq!(*due, want, "{out:?}");
        }
    }

    #[test]
    fn sustained_rate_matches() {
        let prof = LinkProfile {
            rate_mbit: Some(1.0),
            queue_bytes: Some(1 << 20),
            ..Default::default()
        };
        let mut e = engine(Topology::uniform(&["a", "b"], prof, 1));
        // Offer 2 Mbit/s for 10 s; 1 Mbit/s must come out.
        let mut t = 0;
        let mut delivered = 0u64;
        let mut last = 0;
        for i in 0..1667u32 {
            t = u64::from(i) * 6 * MS; // 1500 B every 6 ms = 2 Mbit/s
            let p = pkt(&e, 0, 1, 1500);
            e.ingress(t, 0, &p);
            while let Some(d) = e.poll_output(t) {
                delivered += d.pkt.len() as u64;
                last = d.due;
                e.recycle(d.pkt);
            }
        }
        let _ = t;
        let rate = delivered as f64 * 8.0 / (last as f64 / 1e9);
        assert!((rate - 1e6).abs() < 0.01e6, "{rate}");
    }

    #[test]
    fn shared_uplink_is_shared() {
        let mut t = Topology::uniform(&["a", "b", "c"], LinkProfile::default(), 1);
        t.nodes[0].uplink = Some(ProfileRef::Inline(LinkProfile {
            rate_mbit: Some(8.0),
            queue_bytes: Some(1 << 20),
            ..Default::default()
        }));
        let mut e = engine(t);
        // 100 packets of 1000 B to b and 100 to c, all at t=0: 200 KB at
        // 1 MB/s through the shared uplink takes ~0.2 s.
        for i in 0..200u32 {
            let p = pkt(&e, 0, 1 + (i % 2) as usize, 1000);
            e.ingress(0, 0, &p);
        }
        let out = drain(&mut e);
        assert_eq!(out.len(), 200);
        let last = out.last().map(|x| x.0).unwrap_or(0);
        assert!((196 * MS..=200 * MS).contains(&last), "{last}");
    }

    #[test]
    fn downlink_and_pair_override_compose() {
        let mut t = Topology::uniform(&["a", "b", "c"], LinkProfile::delay(10.0), 1);
        t.nodes[1].downlink = Some(ProfileRef::Inline(LinkProfile::delay(5.0)));
        t.pairs.push(crate::profile::PairOverride {
            from: "a".into(),
            to: "b".into(),
            profile: ProfileRef::Inline(LinkProfile::delay(30.0)),
            symmetric: true,
        });
        let mut e = engine(t);
        let p = pkt(&e, 0, 1, 64);
        e.ingress(0, 0, &p);
        let p = pkt(&e, 2, 1, 64);
        e.ingress(0, 2, &p);
        let p = pkt(&e, 1, 0, 64);
        e.ingress(0, 1, &p);
        let out: Vec<Nanos> = drain(&mut e).into_iter().map(|x| x.0).collect();
        assert_eq!(out, vec![15 * MS, 30 * MS, 35 * MS]);
    }

    #[test]
    fn bad_packets_are_counted_not_forwarded() {
        let mut e = engine(Topology::uniform(&["a", "b"], LinkProfile::default(), 1));
        assert!(matches!(e.ingress(0, 0, &[1, 2, 3]), Ingress::Malformed(_)));
        // Spoofed source: b's address sent from a.
        let p = pkt(&e, 1, 0, 64);
        assert_eq!(e.ingress(0, 0, &p), Ingress::BadSource);
        // Unknown destination.
        let mut p = pkt(&e, 0, 1, 64);
        p[16..20].copy_from_slice(&[224, 0, 0, 1]);
        assert_eq!(e.ingress(0, 0, &p), Ingress::UnknownDst);
        // Out-of-range endpoint index.
        assert_eq!(e.ingress(0, 99, &pkt(&e, 0, 1, 64)), Ingress::BadSource);
        let g = e.global();
        assert_eq!(
            (g.drop_malformed, g.drop_bad_source, g.drop_unknown_dst),
            (1, 2, 1)
        );
        assert!(e.next_deadline().is_none());
    }

    #[test]
    fn inflight_limit_bounds_memory() {
        let limits = Limits {
            max_inflight_packets: 10,
            ..Default::default()
        };
        let t = Topology::uniform(&["a", "b"], LinkProfile::delay(100.0), 1);
        let mut e = Engine::new(t.resolve().expect("ok"), false, limits);
        for i in 0..20 {
            let p = pkt(&e, 0, 1, 64);
            e.ingress(i, 0, &p);
        }
        assert_eq!(e.global().drop_overflow, 10);
        assert_eq!(drain(&mut e).len(), 10);
        assert_eq!(e.inflight_bytes(), 0);
    }

    #[test]
    fn link_table_limit() {
        let limits = Limits {
            max_links: 1,
            ..Default::default()
        };
        let t = Topology::uniform(&["a", "b", "c"], LinkProfile::default(), 1);
        let mut e = Engine::new(t.resolve().expect("ok"), false, limits);
        assert_eq!(e.ingress(0, 0, &pkt(&e, 0, 1, 64)), Ingress::Accepted);
        assert_eq!(e.ingress(0, 0, &pkt(&e, 0, 2, 64)), Ingress::LinkTableFull);
    }

    #[test]
    fn node_spec_addresses_reach_engine() {
        let mut t = Topology::default();
        t.nodes.push(NodeSpec::new("x"));
        let e = engine(t);
        assert_eq!(
            e.endpoints()[0].address,
            IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2))
        );
        assert_eq!(e.endpoints()[1].name, "host");
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_input_never_panics(
            pkts in proptest::collection::vec(
                (0usize..4, proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80)),
                0..50)
        ) {
            let prof = LinkProfile { delay_ms: 1.0, loss: 0.1, rate_mbit: Some(1.0), ..Default::default() };
            let mut e = engine(Topology::uniform(&["a", "b"], prof, 1));
            let mut t = 0;
            for (from, mut bytes) in pkts {
                // Make some of them valid-looking.
                if bytes.len() >= 20 && from < 2 {
                    bytes[0] = 0x45;
                    let l = bytes.len() as u16;
                    bytes[2..4].copy_from_slice(&l.to_be_bytes());
                    let a = addr(&e, from).octets();
                    bytes[12..16].copy_from_slice(&a);
                    let b = addr(&e, 1 - from).octets();
                    bytes[16..20].copy_from_slice(&b);
                }
                t += 100_000;
                let _ = e.ingress(t, from, &bytes);
                while let Some(d) = e.poll_output(t) { e.recycle(d.pkt); }
            }
            drain(&mut e);
            proptest::prop_assert_eq!(e.inflight_bytes(), 0);
        }
    }
}
