//! The flow table: each TCP flow from an application is one Tor stream.
//!
//! The application's SYN is held, not answered, until the exit says
//! CONNECTED: only then does the TCP stack see it (and answer SYN/ACK).
//! An END before that refuses the SYN with a TCP RST or an ICMP
//! unreachable, by END reason ([`reject_for_end`]).
//!
//! States: `SynReceived` (SYN held, no stream yet) -> `Connecting` (BEGIN
//! sent) -> `Open` (CONNECTED) -> `AppFinished` (FIN from the application)
//! or `ExitFinished` (END DONE from the exit) -> closed (removed).
//!
//! Half-close as far as Tor allows: a stream has no half-close, END ends
//! it both ways, and an exit that gets END closes its connection to the
//! server (losing the answer to a request the application sent before its
//! FIN). So a FIN from the application does not send END: the stream stays
//! open, and the exit's END (the server closed) ends the flow; only after
//! [`FlowConfig::half_close_linger`] without it does the tunnel send END
//! itself. An END DONE from the exit is a FIN to the application; the flow
//! ends when the application closes too.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use onionmix_cell::relay::end_reason;

use crate::counters::{self, Counters, DropReason};
use crate::packet::{Unreachable, icmp_unreachable, tcp_rst_for_syn};

/// How flows share circuits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Isolation {
    /// One circuit per destination host.
    #[default]
    PerDestination,
    /// One circuit per application (as the driver identifies it);
    /// flows of an unknown application get one each.
    PerApp,
    /// One circuit per flow.
    PerFlow,
}

/// What the client's stream isolation keys on: streams with different
/// keys never share a circuit.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum IsolationKey {
    /// The destination host (name or address).
    Destination(String),
    /// The application.
    App(u64),
    /// The (TCP) flow alone.
    Flow(u64),
    /// The UDP flow alone (UDP flows are numbered apart).
    UdpFlow(u64),
}

/// Where a flow goes: the hostname behind a synthetic address (sent in
/// BEGIN, resolved by the exit), or an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A hostname and port.
    Host(String, u16),
    /// An address and port.
    Addr(SocketAddr),
}

impl Target {
    /// The host: the name, or the address as text.
    pub fn host(&self) -> String {
        match self {
            Target::Host(h, _) => h.clone(),
            Target::Addr(a) => a.ip().to_string(),
        }
    }
}

/// A TCP flow: the application's socket and the destination it asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FlowKey {
    /// The application's side.
    pub src: SocketAddr,
    /// The destination (possibly a synthetic address).
    pub dst: SocketAddr,
}

/// Flow states.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowState {
    /// SYN held, stream not yet asked for.
    SynReceived,
    /// BEGIN sent, waiting for CONNECTED.
    Connecting,
    /// Data both ways.
    Open,
    /// The application sent FIN; the stream is still open.
    AppFinished,
    /// The exit ended the stream (DONE); the application may still read.
    ExitFinished,
}

/// What happened to a flow.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlowEvent {
    /// The driver sent BEGIN.
    BeginSent,
    /// The exit answered CONNECTED.
    Connected,
    /// The exit sent END with this reason.
    End(u8),
    /// The stream is gone without an END (circuit destroyed).
    StreamLost,
    /// The application sent FIN (the stack read it).
    AppFin,
    /// The application reset or aborted the connection.
    AppRst,
}

/// What the driver must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlowAction {
    /// Nothing.
    None,
    /// Hand the held SYN to the TCP stack, which answers SYN/ACK.
    AcceptSyn(Vec<u8>),
    /// Send this packet to the application (RST or ICMP unreachable
    /// refusing its SYN).
    Refuse(Vec<u8>),
    /// Send END with this reason on the stream.
    SendEnd(u8),
    /// FIN to the application once the data queued for it is out.
    FinToApp,
    /// Reset the application's connection (abort the stack's socket).
    ResetApp,
    /// Reset the application and send END.
    ResetAndEnd(u8),
    /// Send the refusal to the application and END on the stream.
    RefuseAndEnd(Vec<u8>, u8),
}

/// How to refuse a SYN.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reject {
    /// TCP RST: "connection refused".
    Rst,
    /// ICMP (v6) destination unreachable.
    Icmp(Unreachable),
}

/// The refusal for a stream ended by `reason` before CONNECTED: what an
/// application would have seen connecting directly.
pub fn reject_for_end(reason: u8) -> Reject {
    match reason {
        end_reason::CONNECTREFUSED | end_reason::CONNRESET | end_reason::DONE => Reject::Rst,
        end_reason::RESOLVEFAILED | end_reason::TIMEOUT => Reject::Icmp(Unreachable::Host),
        end_reason::NOROUTE => Reject::Icmp(Unreachable::Net),
        end_reason::EXITPOLICY => Reject::Icmp(Unreachable::Prohibited),
        // MISC, DESTROY, HIBERNATING, INTERNAL, RESOURCELIMIT,
        // TORPROTOCOL and unknown reasons: the network failed us, which
        // an application reads best as "host unreachable" (it may retry).
        _ => Reject::Icmp(Unreachable::Host),
    }
}

/// Flow table limits.
#[derive(Debug, Clone)]
pub struct FlowConfig {
    /// Isolation.
    pub isolation: Isolation,
    /// The most flows at once.
    pub max_flows: usize,
    /// The most bytes buffered per flow in each direction.
    pub max_buffer: usize,
    /// How long a SYN waits for CONNECTED.
    pub connect_timeout: Duration,
    /// How long after the application's FIN the stream is kept open
    /// for the answer.
    pub half_close_linger: Duration,
    /// TTL / hop limit of refusals.
    pub hop_limit: u8,
}

impl Default for FlowConfig {
    fn default() -> Self {
        FlowConfig {
            isolation: Isolation::PerDestination,
            max_flows: 1024,
            max_buffer: 256 * 1024,
            connect_timeout: Duration::from_secs(120),
            half_close_linger: Duration::from_secs(60),
            hop_limit: 64,
        }
    }
}

/// Flow errors (the driver's mistakes or a peer's protocol violation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FlowError {
    /// No such flow.
    #[error("no such flow")]
    NoFlow,
    /// The event makes no sense in the flow's state.
    #[error("{0:?} in state {1:?}")]
    State(FlowEvent, FlowState),
    /// No data this way in the flow's state.
    #[error("no data in state {0:?}")]
    NoData(FlowState),
    /// More bytes than the flow's buffer holds.
    #[error("flow buffer full")]
    BufferFull,
}

/// A flow.
#[derive(Debug, Clone)]
pub struct Flow {
    /// Its number.
    pub id: u64,
    /// Its 5-tuple (TCP).
    pub key: FlowKey,
    /// Where it goes.
    pub target: Target,
    /// Its isolation key.
    pub isolation: IsolationKey,
    /// Its state.
    pub state: FlowState,
    /// Bytes buffered towards the exit / the application.
    pub to_exit: usize,
    /// See `to_exit`.
    pub to_app: usize,
    /// Bytes delivered each way.
    pub bytes_to_exit: u64,
    /// See `bytes_to_exit`.
    pub bytes_to_app: u64,
    since: Instant,
    syn: Vec<u8>,
}

/// A new flow, or why not.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SynOutcome {
    /// Open a stream for flow `id` to `target`, isolated by `isolation`,
    /// then report [`FlowEvent::BeginSent`].
    Open {
        /// The flow.
        id: u64,
        /// Where to.
        target: Target,
        /// Isolation key.
        isolation: IsolationKey,
    },
    /// A retransmitted SYN of a flow still connecting: ignore it.
    Pending,
    /// Refused: send this packet back (RST), if any.
    Refused(Option<Vec<u8>>),
}

/// One transition's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// What to do.
    pub action: FlowAction,
    /// The flow ended and left the table (its key, to release a
    /// synthetic address's mapping).
    pub closed: Option<FlowKey>,
}

/// Longest SYN held (an IPv6 header with extensions and TCP options).
const MAX_SYN: usize = 1500;

/// The flow table.
#[derive(Debug)]
pub struct FlowTable {
    cfg: FlowConfig,
    flows: HashMap<u64, Flow>,
    by_key: HashMap<FlowKey, u64>,
    next_id: u64,
}

impl FlowTable {
    /// An empty table.
    pub fn new(cfg: FlowConfig) -> Self {
        FlowTable {
            cfg,
            flows: HashMap::new(),
            by_key: HashMap::new(),
            next_id: 1,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &FlowConfig {
        &self.cfg
    }

    /// Every flow, in no order.
    pub fn iter(&self) -> impl Iterator<Item = &Flow> {
        self.flows.values()
    }

    /// Flows open.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// No flows.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// The flow `id`.
    pub fn get(&self, id: u64) -> Option<&Flow> {
        self.flows.get(&id)
    }

    /// The flow of `key`.
    pub fn find(&self, key: &FlowKey) -> Option<&Flow> {
        self.flows.get(self.by_key.get(key)?)
    }

    /// A SYN for `key` to `target` (the SYN packet itself, `syn`, is held
    /// until CONNECTED); `app` identifies the application when the driver
    /// can.
    pub fn on_syn(
        &mut self,
        now: Instant,
        key: FlowKey,
        target: Target,
        app: Option<u64>,
        syn: &[u8],
        c: &mut Counters,
    ) -> SynOutcome {
        if let Some(f) = self.find(&key) {
            return match f.state {
                FlowState::SynReceived | FlowState::Connecting => SynOutcome::Pending,
                // A SYN on an established flow: the stack deals with it.
                _ => SynOutcome::Refused(None),
            };
        }
        if self.flows.len() >= self.cfg.max_flows || syn.len() > MAX_SYN {
            c.drop(DropReason::FlowLimit);
            counters::inc(&mut c.flows_refused);
            return SynOutcome::Refused(tcp_rst_for_syn(syn, self.cfg.hop_limit));
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let isolation = match (self.cfg.isolation, app) {
            (Isolation::PerDestination, _) => IsolationKey::Destination(target.host()),
            (Isolation::PerApp, Some(a)) => IsolationKey::App(a),
            (Isolation::PerApp, None) | (Isolation::PerFlow, _) => IsolationKey::Flow(id),
        };
        let flow = Flow {
            id,
            key,
            target: target.clone(),
            isolation: isolation.clone(),
            state: FlowState::SynReceived,
            to_exit: 0,
            to_app: 0,
            bytes_to_exit: 0,
            bytes_to_app: 0,
            since: now,
            syn: syn.to_vec(),
        };
        self.flows.insert(id, flow);
        self.by_key.insert(key, id);
        counters::inc(&mut c.flows_opened);
        SynOutcome::Open {
            id,
            target,
            isolation,
        }
    }

    fn refusal(&self, f: &Flow, reject: Reject) -> FlowAction {
        let p = match reject {
            Reject::Rst => tcp_rst_for_syn(&f.syn, self.cfg.hop_limit),
            Reject::Icmp(u) => icmp_unreachable(&f.syn, u, self.cfg.hop_limit),
        };
        p.map_or(FlowAction::None, FlowAction::Refuse)
    }

    /// Apply `ev` to flow `id` at `now`.
    pub fn handle(
        &mut self,
        now: Instant,
        id: u64,
        ev: FlowEvent,
        c: &mut Counters,
    ) -> Result<Step, FlowError> {
        use FlowState as S;
        let f = self.flows.get(&id).ok_or(FlowError::NoFlow)?;
        let bad = Err(FlowError::State(ev, f.state));
        let (next, action) = match (f.state, ev) {
            (S::SynReceived, FlowEvent::BeginSent) => (Some(S::Connecting), FlowAction::None),
            (S::Connecting, FlowEvent::Connected) => {
                counters::inc(&mut c.flows_connected);
                (Some(S::Open), FlowAction::AcceptSyn(f.syn.clone()))
            }
            (S::SynReceived | S::Connecting, FlowEvent::End(r)) => {
                counters::inc(&mut c.flows_refused);
                (None, self.refusal(f, reject_for_end(r)))
            }
            (S::SynReceived | S::Connecting, FlowEvent::StreamLost) => {
                counters::inc(&mut c.flows_refused);
                (None, self.refusal(f, reject_for_end(end_reason::DESTROY)))
            }
            // The application gave up while we were connecting.
            (S::SynReceived, FlowEvent::AppRst) => (None, FlowAction::None),
            (S::Connecting, FlowEvent::AppRst) => (None, FlowAction::SendEnd(end_reason::DONE)),
            (S::Open, FlowEvent::End(end_reason::DONE)) => {
                (Some(S::ExitFinished), FlowAction::FinToApp)
            }
            (S::AppFinished, FlowEvent::End(end_reason::DONE)) => (None, FlowAction::FinToApp),
            (S::Open | S::AppFinished, FlowEvent::End(_) | FlowEvent::StreamLost) => {
                (None, FlowAction::ResetApp)
            }
            (S::Open, FlowEvent::AppFin) => (Some(S::AppFinished), FlowAction::None),
            (S::ExitFinished, FlowEvent::AppFin | FlowEvent::AppRst) => (None, FlowAction::None),
            (S::ExitFinished, FlowEvent::End(_) | FlowEvent::StreamLost) => {
                (Some(S::ExitFinished), FlowAction::None)
            }
            (S::Open | S::AppFinished, FlowEvent::AppRst) => {
                (None, FlowAction::SendEnd(end_reason::DONE))
            }
            (S::AppFinished, FlowEvent::AppFin) => (Some(S::AppFinished), FlowAction::None),
            _ => return bad,
        };
        Ok(self.apply(now, id, next, action))
    }

    fn apply(
        &mut self,
        now: Instant,
        id: u64,
        next: Option<FlowState>,
        action: FlowAction,
    ) -> Step {
        match next {
            Some(s) => {
                if let Some(f) = self.flows.get_mut(&id) {
                    if f.state != s {
                        f.since = now;
                    }
                    f.state = s;
                    if s == FlowState::Open {
                        // Held only until CONNECTED.
                        f.syn = Vec::new();
                    }
                }
                Step {
                    action,
                    closed: None,
                }
            }
            None => Step {
                action,
                closed: self.remove(id),
            },
        }
    }

    fn remove(&mut self, id: u64) -> Option<FlowKey> {
        let f = self.flows.remove(&id)?;
        self.by_key.remove(&f.key);
        Some(f.key)
    }

    /// Flows whose time ran out at `now`: a SYN not CONNECTED within
    /// [`FlowConfig::connect_timeout`] (refused as END TIMEOUT would be),
    /// a half-closed flow past [`FlowConfig::half_close_linger`] (END and
    /// FIN). Each with what to do.
    pub fn expire(&mut self, now: Instant, c: &mut Counters) -> Vec<(u64, Step)> {
        let mut due: Vec<(u64, FlowState)> = self
            .flows
            .values()
            .filter(|f| {
                let age = now.saturating_duration_since(f.since);
                match f.state {
                    FlowState::SynReceived | FlowState::Connecting => {
                        age >= self.cfg.connect_timeout
                    }
                    FlowState::AppFinished | FlowState::ExitFinished => {
                        age >= self.cfg.half_close_linger
                    }
                    FlowState::Open => false,
                }
            })
            .map(|f| (f.id, f.state))
            .collect();
        due.sort_unstable_by_key(|(id, _)| *id);
        due.into_iter()
            .map(|(id, state)| {
                let action = match state {
                    FlowState::SynReceived | FlowState::Connecting => {
                        counters::inc(&mut c.flows_refused);
                        let refuse = self.flows.get(&id).map_or(FlowAction::None, |f| {
                            self.refusal(f, reject_for_end(end_reason::TIMEOUT))
                        });
                        match (state, refuse) {
                            // The stream may still answer: end it too.
                            (FlowState::Connecting, FlowAction::Refuse(p)) => {
                                FlowAction::RefuseAndEnd(p, end_reason::TIMEOUT)
                            }
                            (FlowState::Connecting, _) => FlowAction::SendEnd(end_reason::TIMEOUT),
                            (_, other) => other,
                        }
                    }
                    FlowState::AppFinished => FlowAction::ResetAndEnd(end_reason::DONE),
                    FlowState::ExitFinished => FlowAction::ResetApp,
                    FlowState::Open => FlowAction::None,
                };
                (id, self.apply(now, id, None, action))
            })
            .collect()
    }

    /// Bytes the application sent on flow `id` that fit its buffer
    /// towards the exit; the driver reads no more than that from the TCP
    /// stack (so the TCP window closes). None once the exit ended the
    /// stream: what the application writes then has nowhere to go, its
    /// window stays shut, and the linger timeout resets it.
    pub fn room_to_exit(&self, id: u64) -> usize {
        self.flows
            .get(&id)
            .filter(|f| f.state == FlowState::Open)
            .map_or(0, |f| self.cfg.max_buffer.saturating_sub(f.to_exit))
    }

    /// `n` bytes from the application were queued towards the exit.
    pub fn queued_to_exit(&mut self, id: u64, n: usize) -> Result<(), FlowError> {
        let max = self.cfg.max_buffer;
        let f = self.flows.get_mut(&id).ok_or(FlowError::NoFlow)?;
        if f.state != FlowState::Open {
            return Err(FlowError::NoData(f.state));
        }
        let total = f
            .to_exit
            .checked_add(n)
            .filter(|t| *t <= max)
            .ok_or(FlowError::BufferFull)?;
        f.to_exit = total;
        Ok(())
    }

    /// `n` queued bytes went out in DATA cells.
    pub fn sent_to_exit(&mut self, id: u64, n: usize, c: &mut Counters) {
        if let Some(f) = self.flows.get_mut(&id) {
            let n = n.min(f.to_exit);
            f.to_exit -= n;
            counters::add(&mut f.bytes_to_exit, n);
            counters::add(&mut c.bytes_to_exit, n);
        }
    }

    /// `n` bytes arrived from the exit for the application. More than the
    /// buffer holds is the peer's violation (stream windows bound what it
    /// may send): `BufferFull`, and the driver ends the stream.
    pub fn queued_to_app(&mut self, id: u64, n: usize) -> Result<(), FlowError> {
        let max = self.cfg.max_buffer;
        let f = self.flows.get_mut(&id).ok_or(FlowError::NoFlow)?;
        if !matches!(f.state, FlowState::Open | FlowState::AppFinished) {
            return Err(FlowError::NoData(f.state));
        }
        let total = f
            .to_app
            .checked_add(n)
            .filter(|t| *t <= max)
            .ok_or(FlowError::BufferFull)?;
        f.to_app = total;
        Ok(())
    }

    /// `n` bytes went to the application (the stack took them).
    pub fn sent_to_app(&mut self, id: u64, n: usize, c: &mut Counters) {
        if let Some(f) = self.flows.get_mut(&id) {
            let n = n.min(f.to_app);
            f.to_app -= n;
            counters::add(&mut f.bytes_to_app, n);
            counters::add(&mut c.bytes_to_app, n);
        }
    }

    /// Flows to `ip` (a synthetic address's mappings stay while any is
    /// open).
    pub fn count_to(&self, ip: IpAddr) -> usize {
        self.flows.values().filter(|f| f.key.dst.ip() == ip).count()
    }
}

#[cfg(test)]
mod tests;
