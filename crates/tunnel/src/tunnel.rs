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
    /// Nothing to do (dropped and counted, or a SYN already waiting).
    None,
}

/// The tunnel's sans-IO state.
#[derive(Debug)]
pub struct Tunnel {
    policy: Policy,
    dns_mode: DnsMode,
    mapping: MappingTable,
    flows: FlowTable,
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
