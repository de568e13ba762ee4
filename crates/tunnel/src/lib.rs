//! The sans-IO core of `onionmix tunnel` (issue 16): what to do with each
//! IP packet an application writes into the TUN device, the optimistic DNS
//! resolver and its table of synthetic addresses, and the table of TCP
//! flows carried as Tor streams. No sockets, tasks or clocks: every method
//! that depends on time takes `now`.
//!
//! - [`dns`]: the DNS wire codec (shared with the exit's nameserver client)
//!   and the tunnel's resolver;
//! - [`mapping`]: hostname <-> synthetic address, with its TTL, purge and
//!   bounds;
//! - [`packet`]: IPv4/IPv6 header checks, the per-mode policy, and the
//!   packets the tunnel answers with itself (DNS over UDP, ICMP
//!   unreachable, TCP RST);
//! - [`flows`]: the flow table, isolation keys and the per-flow state
//!   machine;
//! - [`socks`]: isolation key -> SOCKS5 auth, SOCKS5 reply -> END reason
//!   (for a driver that carries flows over a SOCKS port);
//! - [`counters`]: what the tunnel counts;
//! - [`udp`]: UDP flows carried through the network (when the policy
//!   carries UDP);
//! - [`tunnel`]: the pieces together, one packet in, one decision out.

pub mod counters;
pub mod dns;
pub mod flows;
pub mod mapping;
pub mod packet;
pub mod socks;
#[cfg(test)]
mod testutil;
pub mod tunnel;
pub mod udp;

pub use counters::{Counters, DropReason};
pub use tunnel::{FlowSummary, Output, Status, Tunnel, TunnelConfig};
