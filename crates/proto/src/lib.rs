//! Sans-IO Tor protocol state machines.
//!
//! Nothing here touches sockets, tasks or the wall clock: callers feed
//! cells and a `now` value in, and get cells and events out. The async
//! drivers in `onionmix-node` move bytes; this crate decides what they mean.

pub mod cbt;
pub mod cc;
pub mod channel;
pub mod client_circ;
pub mod conflux;
pub mod dos_cc;
pub mod dos_stream;
pub mod exitpolicy;
pub mod flow;
pub mod halfclosed;
pub mod layer;
pub mod netaddr;
pub mod optimistic;
pub mod preempt;
pub mod queue_limits;
pub mod relay_circ;
pub mod xonxoff;

pub use client_circ::{CircError, CircEvent, ClientCircuit};
pub use layer::{ClientLayer, RelayLayer};
