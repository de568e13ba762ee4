//! onionmix-emu: the link emulator.
//!
//! Every node of a test network gets its own network namespace with one TUN
//! interface; one emulator process holds the TUN file descriptors and
//! forwards every IP packet between nodes after applying the impairments of
//! the links it crosses (delay, bounded jitter, random or burst loss, token
//! bucket rate with a drop-tail byte queue, optional reordering). Dropped
//! packets simply vanish in user space, so the senders' TCP stacks (and our
//! QUIC) see real loss, not the local congestion signal that `tc netem` on a
//! sender's own interface produces.
//!
//! Modules:
//! - [`profile`]: link profiles, named profiles, topology (TOML).
//! - [`engine`]: the sans-IO packet scheduler with a fake-clock-testable API.
//! - [`netns`]: namespaces, TUN devices, addresses, stale-state cleanup.
//! - [`run`]: the emulator process (main loop, status file, shutdown) and the
//!   launcher-facing API to start, query and stop it.
//! - [`status`]: the counters file format and its table rendering.
//! - [`probe`]: small measurement programs (TCP echo/RTT, UDP loss, TCP bulk).
//! - [`capture`]: packet capture on every interface of a namespace
//!   (`AF_PACKET`), for leak tests.

pub mod capture;
pub mod engine;
pub mod netns;
pub mod packet;
pub mod probe;
pub mod profile;
pub mod rng;
pub mod run;
pub mod status;
mod sys;
pub mod testkit;

pub use engine::{Engine, Limits, LinkCounters, LinkInfo, LinkKind};
pub use netns::{EmuError, NetnsError, check_privileges, cleanup_stale, command_in};
pub use profile::{
    GilbertElliott, JitterDist, LinkProfile, NodeSpec, PairOverride, ProfileRef, Reorder, Topology,
    named_profile,
};
pub use run::{EmuConfig, EmulatorHandle, ReadyInfo};
pub use status::StatusSnapshot;
