//! The pieces put together: one packet from the TUN device in, one
//! decision out. The driver (a later slice) owns the device, the TCP
//! stack and the streams; it calls [`Tunnel::on_packet`] for every packet
//! an application writes and [`Tunnel::on_flow`] for everything that
//! happens to a flow, and acts on what they return.
//!
//! Fail closed: a packet the tunnel cannot place is dropped (and
//! counted); a flow to a synthetic address nobody was given is refused.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use crate::counters::{Counters, DropReason};
use crate::dns::{self, DnsAction, DnsMode};
use crate::flows::{
    FlowConfig, FlowEvent, FlowState, FlowTable, IsolationKey, Step, SynOutcome, Target,
};
use crate::mapping::{MappingConfig, MappingTable};
use crate::packet::{self, Policy, Unreachable, Verdict, tcp_flags};
use crate::udp::{UdpConfig, UdpEnded, UdpKey, UdpStep, UdpTable};

/// Everything configurable.
#[derive(Debug, Clone, Default)]
pub struct TunnelConfig {
    /// Packet policy (mode, resolver address, UDP policy).
    pub policy: Policy,
    /// Optimistic or fallback DNS.
    pub dns: DnsMode,
    /// Synthetic address ranges and the mapping's timing and bound.
    pub mapping: MappingConfig,
    /// Flow isolation and limits.
    pub flows: FlowConfig,
    /// UDP flows (when the policy carries UDP).
    pub udp: UdpConfig,
}

/// What to do with a packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Give the packet (as it now is) to the TCP stack.
    ToStack,
    /// Send this packet back to the application.
    Reply(Vec<u8>),
    /// A new flow: open a stream to `target` isolated by `isolation`,
    /// report [`FlowEvent::BeginSent`]; the SYN is held by the table.
    OpenStream {
        /// The flow.
        id: u64,
        /// Where to.
        target: Target,
        /// The isolation key.
        isolation: IsolationKey,
    },
    /// Resolve `name` through the network, answer with
    /// [`Tunnel::dns_resolved`] (fallback DNS mode).
    Resolve {
        /// The query.
        query: dns::wire::Query,
        /// The name.
        name: String,
        /// The application's socket, to answer.
        app: SocketAddr,
        /// The resolver's, to answer from.
        resolver: SocketAddr,
    },
    /// A flow changed because of this packet (the application reset a
    /// connection still waiting for CONNECTED): do what `step` says.
    Flow {
        /// The flow.
        id: u64,
        /// What to do.
        step: Step,
    },
    /// A new UDP flow: open a UDP stream to `target` isolated by
    /// `isolation`, then call [`Tunnel::udp_opened`] or
    /// [`Tunnel::udp_failed`]. The datagram waits in the flow.
    UdpOpen {
        /// The UDP flow.
        id: u64,
        /// Where to.
        target: Target,
        /// The isolation key.
        isolation: IsolationKey,
    },
    /// Send this datagram on UDP flow `id`'s stream.
    UdpSend {
        /// The UDP flow.
        id: u64,
        /// The payload.
        payload: Vec<u8>,
    },
    /// Nothing to do (dropped and counted, or a SYN already waiting).
    None,
}

/// What a status view shows (a snapshot).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// The counters.
    pub counters: Counters,
    /// TCP flows in the table.
    pub flows_open: usize,
    /// UDP flows in the table (refused ones included).
    pub udp_flows: usize,
    /// UDP flows whose stream is open.
    pub udp_flows_open: usize,
    /// Names with a synthetic address.
    pub dns_mappings: usize,
    /// The TCP flows (at most [`STATUS_FLOWS`]).
    pub flows: Vec<FlowSummary>,
}

/// Most flows listed in a [`Status`].
pub const STATUS_FLOWS: usize = 64;

/// One flow in a [`Status`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FlowSummary {
    /// The flow.
    pub id: u64,
    /// Where to (the hostname for a synthetic address).
    pub target: String,
    /// Its state.
    pub state: FlowState,
    /// Payload bytes towards the exit.
    pub bytes_to_exit: u64,
    /// Payload bytes towards the application.
    pub bytes_to_app: u64,
}

/// The tunnel's sans-IO state.
#[derive(Debug)]
pub struct Tunnel {
    policy: Policy,
    dns_mode: DnsMode,
    mapping: MappingTable,
    flows: FlowTable,
    udp: UdpTable,
    counters: Counters,
}

impl Tunnel {
    /// A tunnel with no mappings and no flows. The resolver's own
    /// addresses are never handed out as synthetic ones.
    pub fn new(mut cfg: TunnelConfig) -> Self {
        cfg.mapping
            .reserved
            .push(IpAddr::V4(cfg.policy.resolver_v4));
        if let Some(v6) = cfg.policy.resolver_v6 {
            cfg.mapping.reserved.push(IpAddr::V6(v6));
        }
        cfg.flows.hop_limit = cfg.policy.hop_limit;
        Tunnel {
            policy: cfg.policy,
            dns_mode: cfg.dns,
            mapping: MappingTable::new(cfg.mapping),
            flows: FlowTable::new(cfg.flows),
            udp: UdpTable::new(cfg.udp),
            counters: Counters::default(),
        }
    }

    /// The counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// The mapping table.
    pub fn mapping(&mut self) -> &mut MappingTable {
        &mut self.mapping
    }

    /// The flow table.
    pub fn flows(&self) -> &FlowTable {
        &self.flows
    }

    /// The UDP flow table.
    pub fn udp(&self) -> &UdpTable {
        &self.udp
    }

    /// A snapshot for a status view at `now` (mappings due are purged).
    pub fn status(&mut self, now: Instant) -> Status {
        let mut flows: Vec<FlowSummary> = self
            .flows
            .iter()
            .map(|f| FlowSummary {
                id: f.id,
                target: match &f.target {
                    Target::Host(h, p) => format!("{h}:{p}"),
                    Target::Addr(a) => a.to_string(),
                },
                state: f.state,
                bytes_to_exit: f.bytes_to_exit,
                bytes_to_app: f.bytes_to_app,
            })
            .collect();
        flows.sort_unstable_by_key(|f| f.id);
        flows.truncate(STATUS_FLOWS);
        Status {
            counters: self.counters.clone(),
            flows_open: self.flows.len(),
            udp_flows: self.udp.len(),
            udp_flows_open: self.udp.open_count(),
            dns_mappings: self.mapping.len(now),
            flows,
        }
    }

    /// The flow table and the counters, for the byte accounting
    /// ([`FlowTable::queued_to_exit`] and its kin).
    pub fn flows_mut(&mut self) -> (&mut FlowTable, &mut Counters) {
        (&mut self.flows, &mut self.counters)
    }

    /// One packet from an application at `now`; `app` identifies the
    /// application when the driver can (for per-app isolation). The
    /// packet may be rewritten in place (anonymity mode).
    pub fn on_packet(&mut self, now: Instant, app: Option<u64>, p: &mut [u8]) -> Output {
        match packet::inspect(&self.policy, &mut self.counters, p) {
            Verdict::Drop(_) => Output::None,
            Verdict::Reply(r) => Output::Reply(r),
            Verdict::Reassemble => Output::ToStack,
            Verdict::Dns { src, dst, payload } => {
                self.dns(now, src, dst, p.get(payload).unwrap_or(&[]))
            }
            Verdict::Udp { src, dst, payload } => self.udp_datagram(now, app, src, dst, payload, p),
            Verdict::Tcp(t) => {
                let key = crate::flows::FlowKey {
                    src: t.src,
                    dst: t.dst,
                };
                if !t.is_syn() {
                    let Some(f) = self.flows.find(&key) else {
                        self.counters.drop(DropReason::NoFlow);
                        return Output::None;
                    };
                    if f.state != FlowState::SynReceived && f.state != FlowState::Connecting {
                        return Output::ToStack;
                    }
                    // The stack has not seen the SYN yet: a reset means
                    // the application gave up; anything else waits.
                    if t.flags & tcp_flags::RST == 0 {
                        return Output::None;
                    }
                    let id = f.id;
                    return match self.on_flow(now, id, FlowEvent::AppRst) {
                        Ok(step) => Output::Flow { id, step },
                        Err(_) => Output::None,
                    };
                }
                let target = if self.mapping.is_synthetic(t.dst.ip()) {
                    if self.flows.find(&key).is_none() {
                        match self.mapping.flow_opened(now, t.dst.ip()) {
                            Some(name) => Target::Host(name, t.dst.port()),
                            None => {
                                self.counters.drop(DropReason::UnknownSynthetic);
                                let hl = self.policy.hop_limit;
                                return packet::icmp_unreachable(p, Unreachable::Host, hl)
                                    .map_or(Output::None, Output::Reply);
                            }
                        }
                    } else {
                        // A retransmission: no second hold on the mapping.
                        Target::Addr(t.dst)
                    }
                } else {
                    Target::Addr(t.dst)
                };
                match self
                    .flows
                    .on_syn(now, key, target, app, p, &mut self.counters)
                {
                    SynOutcome::Open {
                        id,
                        target,
                        isolation,
                    } => Output::OpenStream {
                        id,
                        target,
                        isolation,
                    },
                    SynOutcome::Pending => Output::None,
                    SynOutcome::Refused(r) => {
                        // The hold taken above is released at once.
                        if self.flows.find(&key).is_none() && self.mapping.is_synthetic(t.dst.ip())
                        {
                            self.mapping.flow_closed(now, t.dst.ip());
                        }
                        r.map_or(Output::ToStack, Output::Reply)
                    }
                }
            }
        }
    }

    fn udp_datagram(
        &mut self,
        now: Instant,
        app: Option<u64>,
        src: SocketAddr,
        dst: SocketAddr,
        payload: std::ops::Range<usize>,
        p: &[u8],
    ) -> Output {
        let key = UdpKey { src, dst };
        let new = self.udp.find(&key).is_none();
        let mut name = None;
        if new && self.mapping.is_synthetic(dst.ip()) {
            match self.mapping.flow_opened(now, dst.ip()) {
                Some(n) => name = Some(n),
                None => {
                    // Fail closed, as for TCP.
                    self.counters.drop(DropReason::UnknownSynthetic);
                    let hl = self.policy.hop_limit;
                    return packet::icmp_unreachable(p, Unreachable::Host, hl)
                        .map_or(Output::None, Output::Reply);
                }
            }
        }
        let held = name.is_some();
        let target = move || match name {
            Some(n) => Target::Host(n, dst.port()),
            None => Target::Addr(dst),
        };
        let step = self.udp.on_datagram(
            now,
            key,
            target,
            self.flows.config().isolation,
            app,
            p.get(payload).unwrap_or(&[]),
            p,
            &mut self.counters,
        );
        if held && !matches!(step, UdpStep::Open { .. }) {
            // No flow took the hold (table full, datagram too big).
            self.mapping.flow_closed(now, dst.ip());
        }
        match step {
            UdpStep::Open {
                id,
                target,
                isolation,
            } => Output::UdpOpen {
                id,
                target,
                isolation,
            },
            UdpStep::Send { id, payload } => Output::UdpSend { id, payload },
            UdpStep::Refused => match packet::udp_fallback(&self.policy, &mut self.counters, p) {
                Some(r) => Output::Reply(r),
                None => {
                    self.counters.drop(DropReason::Udp);
                    Output::None
                }
            },
            UdpStep::None => Output::None,
        }
    }

    /// UDP flow `id`'s stream is open: the payloads that waited, to send.
    pub fn udp_opened(&mut self, now: Instant, id: u64) -> Vec<Vec<u8>> {
        self.udp.opened(now, id, &mut self.counters)
    }

    /// UDP flow `id`'s stream could not be opened: the flow falls back to
    /// the packet policy; the answer to its first datagram, if any.
    pub fn udp_failed(&mut self, now: Instant, id: u64) -> Option<Vec<u8>> {
        let first = self.udp.failed(now, id, &mut self.counters)?;
        let r = packet::udp_fallback(&self.policy, &mut self.counters, &first);
        if r.is_none() {
            self.counters.drop(DropReason::Udp);
        }
        r
    }

    /// A datagram from the exit on UDP flow `id`: the packet to give the
    /// application (from the flow's destination to its source).
    pub fn udp_from_exit(&mut self, now: Instant, id: u64, payload: &[u8]) -> Option<Vec<u8>> {
        let key = self
            .udp
            .from_exit(now, id, payload.len(), &mut self.counters)?;
        packet::udp_packet(key.dst, key.src, payload, self.policy.hop_limit)
    }

    /// UDP flow `id`'s stream ended: the flow is gone; or, if it never
    /// heard back, refused ([`UdpTable::ended`]), and the packet answering
    /// its first datagram per the policy comes back (ICMP port
    /// unreachable), so the application learns at once.
    pub fn udp_closed(&mut self, now: Instant, id: u64) -> Option<Vec<u8>> {
        match self.udp.ended(now, id, &mut self.counters) {
            UdpEnded::Removed(k) => {
                self.release_udp(now, k);
                None
            }
            UdpEnded::Refused(first) => {
                let r = packet::udp_fallback(&self.policy, &mut self.counters, &first);
                if r.is_none() {
                    self.counters.drop(DropReason::Udp);
                }
                r
            }
            UdpEnded::Gone => None,
        }
    }

    /// UDP flows idle at `now`, removed: the driver closes their streams.
    pub fn expire_udp(&mut self, now: Instant) -> Vec<u64> {
        let due = self.udp.expire(now);
        due.into_iter()
            .map(|(id, k)| {
                self.release_udp(now, k);
                id
            })
            .collect()
    }

    fn release_udp(&mut self, now: Instant, k: UdpKey) {
        if self.mapping.is_synthetic(k.dst.ip()) {
            self.mapping.flow_closed(now, k.dst.ip());
        }
    }

    fn dns(&mut self, now: Instant, app: SocketAddr, resolver: SocketAddr, q: &[u8]) -> Output {
        match dns::handle(&mut self.mapping, self.dns_mode, now, q, &mut self.counters) {
            DnsAction::Reply(r) => packet::udp_packet(resolver, app, &r, self.policy.hop_limit)
                .map_or(Output::None, Output::Reply),
            DnsAction::Resolve { query, name } => Output::Resolve {
                query,
                name,
                app,
                resolver,
            },
            DnsAction::Drop => Output::None,
        }
    }

    /// The answer to a query the network could not resolve for a reason
    /// other than the name (no circuit, proxy down): SERVFAIL, so the
    /// application may try again.
    pub fn dns_failed(
        &mut self,
        query: &dns::wire::Query,
        app: SocketAddr,
        resolver: SocketAddr,
    ) -> Option<Vec<u8>> {
        let r = dns::answer_failed(query, &mut self.counters);
        packet::udp_packet(resolver, app, &r, self.policy.hop_limit)
    }

    /// Count a drop the driver made (a full queue towards a stream).
    pub fn count_drop(&mut self, r: DropReason) {
        self.counters.drop(r);
    }

    /// Whether per-app isolation needs to know who sent `p`: for a packet
    /// that would start a flow (a TCP SYN, or a UDP datagram the policy
    /// carries, of no flow yet), its protocol and source socket. `None`
    /// otherwise (and without per-app isolation), so the driver looks
    /// applications up only for new flows.
    pub fn wants_app(&self, p: &[u8]) -> Option<(u8, SocketAddr)> {
        if self.flows.config().isolation != crate::flows::Isolation::PerApp {
            return None;
        }
        let ip = packet::parse_ip(p).ok()?;
        let l4 = p.get(ip.l4..)?;
        let sport = u16::from_be_bytes([*l4.first()?, *l4.get(1)?]);
        let dport = u16::from_be_bytes([*l4.get(2)?, *l4.get(3)?]);
        let src = SocketAddr::new(ip.src, sport);
        let dst = SocketAddr::new(ip.dst, dport);
        match ip.proto {
            packet::proto::TCP => {
                let flags = *l4.get(13)?;
                let syn = flags & (tcp_flags::SYN | tcp_flags::ACK) == tcp_flags::SYN;
                let key = crate::flows::FlowKey { src, dst };
                (syn && self.flows.find(&key).is_none()).then_some((ip.proto, src))
            }
            packet::proto::UDP => {
                let to_resolver = dport == 53
                    && match ip.dst {
                        IpAddr::V4(d) => d == self.policy.resolver_v4,
                        IpAddr::V6(d) => Some(d) == self.policy.resolver_v6,
                    };
                let wanted = if to_resolver {
                    // A lookup through the network goes on the app's circuit.
                    self.dns_mode == DnsMode::Fallback
                } else {
                    self.policy.carry_udp && self.udp.find(&UdpKey { src, dst }).is_none()
                };
                wanted.then_some((ip.proto, src))
            }
            _ => None,
        }
    }

    /// The packet answering a query resolved through the network.
    pub fn dns_resolved(
        &mut self,
        query: &dns::wire::Query,
        addrs: Option<&[IpAddr]>,
        app: SocketAddr,
        resolver: SocketAddr,
    ) -> Option<Vec<u8>> {
        let r = dns::answer_resolved(query, addrs, &mut self.counters);
        packet::udp_packet(resolver, app, &r, self.policy.hop_limit)
    }

    /// Something happened to flow `id`: what to do. A flow that ends
    /// releases its hold on its synthetic address's mapping.
    pub fn on_flow(
        &mut self,
        now: Instant,
        id: u64,
        ev: FlowEvent,
    ) -> Result<Step, crate::flows::FlowError> {
        let step = self.flows.handle(now, id, ev, &mut self.counters)?;
        self.release(now, &step);
        Ok(step)
    }

    /// Time-outs due at `now` (call about once a second).
    pub fn expire(&mut self, now: Instant) -> Vec<(u64, Step)> {
        let due = self.flows.expire(now, &mut self.counters);
        for (_, step) in &due {
            self.release(now, step);
        }
        self.mapping.purge(now);
        due
    }

    fn release(&mut self, now: Instant, step: &Step) {
        if let Some(k) = step.closed
            && self.mapping.is_synthetic(k.dst.ip())
        {
            self.mapping.flow_closed(now, k.dst.ip());
        }
    }
}

#[cfg(test)]
mod tests;
