//! UDP flows carried through the network (UDP other than DNS to the
//! resolver, when the policy carries it; docs/udp-over-tor.md).
//!
//! A flow is an application socket and one destination (a connected UDP
//! socket in proposal 339's terms). Its first datagram asks the driver to
//! open a UDP stream ([`UdpStep::Open`]); datagrams that come before the
//! stream is open wait in the flow (a few, bounded). When the stream
//! cannot be opened (a stock tor client or exit, an exit policy) the flow
//! is *refused*: it stays in the table until it has been idle for
//! [`UdpConfig::idle`], and its datagrams get the packet policy's
//! fallback (ICMP port unreachable, or a silent drop), without asking the
//! network again for every datagram. A flow with no datagram either way
//! for [`UdpConfig::idle`] is closed.
//!
//! Limits: [`UdpConfig::max_flows`] flows, [`UdpConfig::max_pending`]
//! datagrams waiting per flow, [`UdpConfig::max_payload`] bytes per
//! datagram (one DATAGRAM message carries one datagram: 498 bytes).

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use crate::counters::{self, Counters, DropReason};
use crate::flows::{Isolation, IsolationKey, Target};

/// Limits and timing.
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// The most flows at once.
    pub max_flows: usize,
    /// Datagrams held per flow while its stream opens.
    pub max_pending: usize,
    /// Largest payload carried (a relay message's 498 bytes).
    pub max_payload: usize,
    /// A flow idle this long is closed (refused ones are forgotten).
    pub idle: Duration,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            max_flows: 256,
            max_pending: 8,
            max_payload: 498,
            idle: Duration::from_secs(120),
        }
    }
}

/// A UDP flow: the application's socket and its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpKey {
    /// The application's side.
    pub src: SocketAddr,
    /// The destination (possibly a synthetic address).
    pub dst: SocketAddr,
}

/// A flow's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UdpState {
    /// The stream is being opened.
    Opening,
    /// Datagrams go both ways.
    Open,
    /// The stream could not be opened: the fallback policy applies.
    Refused,
}

#[derive(Debug)]
struct UdpFlow {
    key: UdpKey,
    target: Target,
    state: UdpState,
    pending: VecDeque<Vec<u8>>,
    /// The first datagram's packet, quoted in an ICMP error if refused
    /// (kept until the exit answers).
    first_packet: Vec<u8>,
    /// A datagram came back from the exit.
    replied: bool,
    last: Instant,
}

/// What to do with a datagram from an application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UdpStep {
    /// Open a UDP stream for new flow `id` to `target`, isolated by
    /// `isolation`; then call [`UdpTable::opened`] or
    /// [`UdpTable::failed`]. The datagram waits in the flow.
    Open {
        /// The flow.
        id: u64,
        /// Where to.
        target: Target,
        /// Isolation key.
        isolation: IsolationKey,
    },
    /// Send this payload on flow `id`'s stream.
    Send {
        /// The flow.
        id: u64,
        /// The payload.
        payload: Vec<u8>,
    },
    /// The flow is refused: apply the fallback policy to the packet.
    Refused,
    /// Nothing (held or dropped, counted).
    None,
}

/// What became of a flow whose stream ended ([`UdpTable::ended`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UdpEnded {
    /// Removed (it had an answer): its key.
    Removed(UdpKey),
    /// Refused from now on: its first packet, to answer per the policy.
    Refused(Vec<u8>),
    /// No such flow.
    Gone,
}

/// The UDP flow table.
#[derive(Debug)]
pub struct UdpTable {
    cfg: UdpConfig,
    flows: HashMap<u64, UdpFlow>,
    by_key: HashMap<UdpKey, u64>,
    next_id: u64,
}

/// Longest packet kept for an ICMP quote.
const MAX_QUOTED: usize = 576;

impl UdpTable {
    /// An empty table.
    pub fn new(cfg: UdpConfig) -> Self {
        UdpTable {
            cfg,
            flows: HashMap::new(),
            by_key: HashMap::new(),
            next_id: 1,
        }
    }

    /// Flows in the table (refused ones included).
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// No flows.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// Flows whose stream is open.
    pub fn open_count(&self) -> usize {
        self.flows
            .values()
            .filter(|f| f.state == UdpState::Open)
            .count()
    }

    /// The state and target of flow `id`.
    pub fn get(&self, id: u64) -> Option<(UdpKey, &Target, UdpState)> {
        self.flows.get(&id).map(|f| (f.key, &f.target, f.state))
    }

    /// The flow of `key`.
    pub fn find(&self, key: &UdpKey) -> Option<u64> {
        self.by_key.get(key).copied()
    }

    /// A datagram for `key` with `payload` (the whole packet is `packet`);
    /// `target` is where a new flow goes, `isolation` and `app` give its
    /// isolation key.
    #[allow(clippy::too_many_arguments)]
    pub fn on_datagram(
        &mut self,
        now: Instant,
        key: UdpKey,
        target: impl FnOnce() -> Target,
        isolation: Isolation,
        app: Option<u64>,
        payload: &[u8],
        packet: &[u8],
        c: &mut Counters,
    ) -> UdpStep {
        if payload.len() > self.cfg.max_payload {
            c.drop(DropReason::UdpTooBig);
            return UdpStep::None;
        }
        if let Some(id) = self.find(&key) {
            let Some(f) = self.flows.get_mut(&id) else {
                return UdpStep::None;
            };
            f.last = now;
            return match f.state {
                UdpState::Open => {
                    counters::inc(&mut c.udp_datagrams_to_exit);
                    counters::add(&mut c.udp_bytes_to_exit, payload.len());
                    UdpStep::Send {
                        id,
                        payload: payload.to_vec(),
                    }
                }
                UdpState::Opening => {
                    if f.pending.len() < self.cfg.max_pending {
                        f.pending.push_back(payload.to_vec());
                    } else {
                        c.drop(DropReason::UdpQueue);
                    }
                    UdpStep::None
                }
                UdpState::Refused => UdpStep::Refused,
            };
        }
        if self.flows.len() >= self.cfg.max_flows {
            c.drop(DropReason::FlowLimit);
            return UdpStep::None;
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let target = target();
        let isolation = match (isolation, app) {
            (Isolation::PerDestination, _) => IsolationKey::Destination(target.host()),
            (Isolation::PerApp, Some(a)) => IsolationKey::App(a),
            (Isolation::PerApp, None) | (Isolation::PerFlow, _) => IsolationKey::UdpFlow(id),
        };
        let mut pending = VecDeque::new();
        pending.push_back(payload.to_vec());
        self.flows.insert(
            id,
            UdpFlow {
                key,
                target: target.clone(),
                state: UdpState::Opening,
                pending,
                first_packet: packet
                    .get(..packet.len().min(MAX_QUOTED))
                    .unwrap_or_default()
                    .to_vec(),
                replied: false,
                last: now,
            },
        );
        self.by_key.insert(key, id);
        counters::inc(&mut c.udp_flows_opened);
        UdpStep::Open {
            id,
            target,
            isolation,
        }
    }

    /// The stream of flow `id` is open: the payloads that waited, to send.
    pub fn opened(&mut self, now: Instant, id: u64, c: &mut Counters) -> Vec<Vec<u8>> {
        let Some(f) = self.flows.get_mut(&id) else {
            return Vec::new();
        };
        if f.state != UdpState::Opening {
            return Vec::new();
        }
        f.state = UdpState::Open;
        f.last = now;
        let out: Vec<Vec<u8>> = f.pending.drain(..).collect();
        for p in &out {
            counters::inc(&mut c.udp_datagrams_to_exit);
            counters::add(&mut c.udp_bytes_to_exit, p.len());
        }
        out
    }

    /// Flow `id`'s stream could not be opened: the flow is refused (its
    /// waiting datagrams are dropped). Returns its first packet, for the
    /// fallback policy's answer.
    pub fn failed(&mut self, now: Instant, id: u64, c: &mut Counters) -> Option<Vec<u8>> {
        let f = self.flows.get_mut(&id)?;
        if f.state != UdpState::Opening {
            return None;
        }
        f.state = UdpState::Refused;
        f.last = now;
        f.pending.clear();
        counters::inc(&mut c.udp_flows_refused);
        Some(std::mem::take(&mut f.first_packet))
    }

    /// A datagram came from the exit on flow `id`: the flow's key (the
    /// answer goes from its destination to its source), if the flow is
    /// open.
    pub fn from_exit(
        &mut self,
        now: Instant,
        id: u64,
        len: usize,
        c: &mut Counters,
    ) -> Option<UdpKey> {
        let f = self.flows.get_mut(&id)?;
        if f.state != UdpState::Open {
            return None;
        }
        f.last = now;
        f.replied = true;
        f.first_packet = Vec::new();
        counters::inc(&mut c.udp_datagrams_to_app);
        counters::add(&mut c.udp_bytes_to_app, len);
        Some(f.key)
    }

    /// Flow `id`'s stream ended. One that never heard back from the exit
    /// is taken as refused (no exit could carry it, or its target
    /// answered port unreachable): it stays, and its datagrams get the
    /// fallback until it has been idle for [`UdpConfig::idle`]; its first
    /// packet comes back for the fallback's answer. Any other is removed.
    pub fn ended(&mut self, now: Instant, id: u64, c: &mut Counters) -> UdpEnded {
        let Some(f) = self.flows.get_mut(&id) else {
            return UdpEnded::Gone;
        };
        if !f.replied && f.state != UdpState::Refused {
            f.state = UdpState::Refused;
            f.last = now;
            f.pending.clear();
            counters::inc(&mut c.udp_flows_refused);
            return UdpEnded::Refused(std::mem::take(&mut f.first_packet));
        }
        match self.close(id) {
            Some(k) => UdpEnded::Removed(k),
            None => UdpEnded::Gone,
        }
    }

    /// Remove flow `id`: its key.
    pub fn close(&mut self, id: u64) -> Option<UdpKey> {
        let f = self.flows.remove(&id)?;
        self.by_key.remove(&f.key);
        Some(f.key)
    }

    /// Flows idle at `now` for [`UdpConfig::idle`]: removed; their ids
    /// and keys (the driver closes their streams).
    pub fn expire(&mut self, now: Instant) -> Vec<(u64, UdpKey)> {
        let idle = self.cfg.idle;
        let mut due: Vec<u64> = self
            .flows
            .iter()
            .filter(|(_, f)| now.saturating_duration_since(f.last) >= idle)
            .map(|(id, _)| *id)
            .collect();
        due.sort_unstable();
        due.into_iter()
            .filter_map(|id| self.close(id).map(|k| (id, k)))
            .collect()
    }
}

#[cfg(test)]
mod tests;
