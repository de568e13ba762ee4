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

mod link;
#[cfg(test)]
mod tests;

use crate::packet::{self, ParseError};
use crate::profile::Resolved;
use serde::{Deserialize, Serialize};
use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap, VecDeque};
use std::net::IpAddr;

use link::Link;

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
    /// UDP datagrams dropped by a link that blocks UDP (`drop_udp`).
    #[serde(default)]
    pub drop_udp: u64,
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
            let udp = packet::is_udp(&ev.pkt);
            match self.links[link].process(ev.time, len, udp) {
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
