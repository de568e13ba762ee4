//! What the tunnel counts: flows, bytes, DNS, and packets dropped by
//! reason. Plain numbers, read by the driver (and by tests instead of
//! timing).

/// Why a packet from an application was dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// Not a well-formed IPv4/IPv6 packet (short, bad lengths, bad
    /// header checksum, version neither 4 nor 6).
    Malformed,
    /// An IP fragment (anonymity mode).
    Fragment,
    /// IPv4 options (anonymity mode).
    Ipv4Options,
    /// IPv6 extension headers (anonymity mode).
    Ipv6Extension,
    /// A protocol the tunnel does not carry (ICMP echo, SCTP, ...).
    Protocol,
    /// UDP other than DNS to the resolver, when the policy drops it
    /// silently.
    Udp,
    /// A DNS datagram that gets no answer (a response, or no header).
    Dns,
    /// TCP to a synthetic address nobody was given (fail closed).
    UnknownSynthetic,
    /// TCP for no flow, not a SYN.
    NoFlow,
    /// The flow table is full.
    FlowLimit,
    /// From or to an address the tunnel refuses (multicast, broadcast,
    /// unspecified, loopback).
    Address,
    /// A UDP datagram larger than one DATAGRAM message carries.
    UdpTooBig,
    /// A UDP datagram that found its flow's queue full (stream opening).
    UdpQueue,
}

impl DropReason {
    /// Every reason, in counter order.
    pub const ALL: [DropReason; 13] = [
        DropReason::Malformed,
        DropReason::Fragment,
        DropReason::Ipv4Options,
        DropReason::Ipv6Extension,
        DropReason::Protocol,
        DropReason::Udp,
        DropReason::Dns,
        DropReason::UnknownSynthetic,
        DropReason::NoFlow,
        DropReason::FlowLimit,
        DropReason::Address,
        DropReason::UdpTooBig,
        DropReason::UdpQueue,
    ];

    /// Name for logs and metrics.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::Fragment => "fragment",
            DropReason::Ipv4Options => "ipv4_options",
            DropReason::Ipv6Extension => "ipv6_extension",
            DropReason::Protocol => "protocol",
            DropReason::Udp => "udp",
            DropReason::Dns => "dns",
            DropReason::UnknownSynthetic => "unknown_synthetic",
            DropReason::NoFlow => "no_flow",
            DropReason::FlowLimit => "flow_limit",
            DropReason::Address => "address",
            DropReason::UdpTooBig => "udp_too_big",
            DropReason::UdpQueue => "udp_queue",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// The tunnel's counters.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    /// Flows opened (SYN accepted into the table).
    pub flows_opened: u64,
    /// Flows refused (END before CONNECTED, or no stream).
    pub flows_refused: u64,
    /// Flows that reached CONNECTED.
    pub flows_connected: u64,
    /// Payload bytes from applications towards exits.
    pub bytes_to_exit: u64,
    /// Payload bytes from exits towards applications.
    pub bytes_to_app: u64,
    /// DNS queries answered.
    pub dns_answered: u64,
    /// New DNS mappings made.
    pub dns_mappings: u64,
    /// DNS queries refused for want of room or addresses (SERVFAIL).
    pub dns_refused: u64,
    /// UDP datagrams answered with ICMP port unreachable.
    pub icmp_unreachable: u64,
    /// UDP flows opened (streams asked for).
    pub udp_flows_opened: u64,
    /// UDP flows whose stream could not be opened (fallback policy).
    pub udp_flows_refused: u64,
    /// UDP datagrams sent towards exits.
    pub udp_datagrams_to_exit: u64,
    /// UDP datagrams from exits to applications.
    pub udp_datagrams_to_app: u64,
    /// UDP payload bytes towards exits.
    pub udp_bytes_to_exit: u64,
    /// UDP payload bytes towards applications.
    pub udp_bytes_to_app: u64,
    drops: [u64; DropReason::ALL.len()],
}

impl Counters {
    /// Count a drop.
    pub fn drop(&mut self, r: DropReason) {
        if let Some(c) = self.drops.get_mut(r.index()) {
            *c = c.saturating_add(1);
        }
    }

    /// Drops for `r` so far.
    pub fn drops(&self, r: DropReason) -> u64 {
        self.drops.get(r.index()).copied().unwrap_or(0)
    }

    /// Every reason with its count, in counter order.
    pub fn drops_by_reason(&self) -> impl Iterator<Item = (DropReason, u64)> + '_ {
        DropReason::ALL.iter().map(|r| (*r, self.drops(*r)))
    }

    /// All drops so far.
    pub fn drops_total(&self) -> u64 {
        self.drops.iter().fold(0u64, |a, b| a.saturating_add(*b))
    }
}

/// Add `n` to a counter without overflow.
pub(crate) fn add(c: &mut u64, n: usize) {
    *c = c.saturating_add(u64::try_from(n).unwrap_or(u64::MAX));
}

/// Add one.
pub(crate) fn inc(c: &mut u64) {
    *c = c.saturating_add(1);
}
