//! Async drivers for onionmix nodes. They move bytes between sockets and the
//! sans-IO machines in `onionmix-proto`, own timers and persistence, and
//! nothing else.

pub mod admission;
pub mod authority;
pub mod client;
pub mod clock;
pub mod control;
pub mod gate;
pub mod glue;
pub mod linkchoice;
pub mod memory;
pub mod metrics;
pub mod procinfo;
pub mod reactor;
pub mod relay;
pub mod service;
pub mod tunnel;
