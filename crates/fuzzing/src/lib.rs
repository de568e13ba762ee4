//! onionmix-fuzzing: one function per fuzz target, each feeding bytes to a
//! real parser or state machine of network input.
//!
//! Every target is `pub fn <name>(data: &[u8])` and is called from two
//! places:
//!
//! - `fuzz/fuzz_targets/<name>.rs`, the cargo-fuzz (libFuzzer) harness at
//!   the repository root, built with nightly Rust;
//! - `tests/corpus.rs`, the stable test that replays the kept corpus
//!   (`fuzz/corpus/<name>/`) and the kept regressions
//!   (`fuzz/artifacts/<name>/`) and runs a short seeded mutation loop
//!   ([`mutate`]) for every target in [`TARGETS`].
//!
//! A target never reports an error for bad input: the code under test
//! must refuse it with a typed error. A target panics only when the code
//! under test panics, loops, or breaks an invariant the target asserts
//! (what decoded must re-encode to the same bytes, a message split
//! anywhere must parse the same, what one side of a handshake builds the
//! other side must accept). Where an input must carry a signature or MAC
//! to get past the first check, the target signs it with fixed keys
//! ([`fixtures`]) so the code behind the check is fuzzed too.
//!
//! Adding a target: write the function in the module of its crate, list
//! it in [`TARGETS`], add `fuzz/fuzz_targets/<name>.rs` and the `[[bin]]`
//! entry in `fuzz/Cargo.toml`, and seed `fuzz/corpus/<name>/` (see
//! `docs/fuzzing.md`).

pub mod cells;
pub mod circuits;
pub mod conflux;
pub mod control;
pub mod crypto;
pub mod emu;
pub mod fixtures;
pub mod frontend;
pub mod http;
pub mod mix;
pub mod mutate;
pub mod netdoc;
pub mod node;
pub mod seeds;
pub mod testbed;
pub mod tunnel;

mod input;

pub use cells::{cell_codec, relay_msg};
pub use circuits::{chan_initiator, chan_responder, circ_client, circ_relay};
pub use conflux::conflux;
pub use control::control_port;
pub use crypto::{circuit_handshake, ed25519_cert, link_certs, x509_cert};
pub use emu::emu_packet;
pub use frontend::{onion_addr, socks};
pub use http::{http_chunked, http_request, http_response};
pub use mix::{loopix_control, loopix_nodes, msgpack, sphinx_x25519, sphinxmix};
pub use netdoc::{
    authcert, consensus, detached_sig, dir_response, microdesc, netdoc_types, routerdesc, vote,
};
pub use node::{dir_request, exit_dns, exit_policy};
pub use testbed::{sink_dns, sink_http, torctl_event};
pub use tunnel::{tunnel_dns, tunnel_packet};

/// A fuzz target: its name (the cargo-fuzz target and corpus directory),
/// the function, and how many mutated inputs the stable test runs (fewer
/// for targets that do public-key work on every input).
#[derive(Clone, Copy)]
pub struct Target {
    /// Name of the target, its `fuzz_targets/<name>.rs` and corpus dir.
    pub name: &'static str,
    /// The target function.
    pub run: fn(&[u8]),
    /// Mutated inputs the stable corpus test runs.
    pub ci_iterations: u32,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").field("name", &self.name).finish()
    }
}

const fn t(name: &'static str, run: fn(&[u8]), ci_iterations: u32) -> Target {
    Target {
        name,
        run,
        ci_iterations,
    }
}

/// Every fuzz target.
pub const TARGETS: &[Target] = &[
    // crates/cell
    t("cell_codec", cell_codec, 30_000),
    t("relay_msg", relay_msg, 30_000),
    // crates/proto: link handshakes and circuit machines
    t("chan_initiator", chan_initiator, 3_000),
    t("chan_responder", chan_responder, 3_000),
    t("circ_client", circ_client, 20_000),
    t("circ_relay", circ_relay, 20_000),
    t("conflux", conflux, 30_000),
    // crates/crypto
    t("ed25519_cert", ed25519_cert, 20_000),
    t("x509_cert", x509_cert, 5_000),
    t("link_certs", link_certs, 3_000),
    t("circuit_handshake", circuit_handshake, 5_000),
    // crates/netdoc
    t("consensus", consensus, 1_000),
    t("microdesc", microdesc, 3_000),
    t("authcert", authcert, 1_000),
    t("routerdesc", routerdesc, 1_000),
    t("vote", vote, 1_000),
    t("detached_sig", detached_sig, 20_000),
    t("dir_response", dir_response, 10_000),
    t("netdoc_types", netdoc_types, 20_000),
    // crates/frontend
    t("socks", socks, 30_000),
    t("onion_addr", onion_addr, 20_000),
    t("control_port", control_port, 20_000),
    // crates/http
    t("http_request", http_request, 20_000),
    t("http_response", http_response, 20_000),
    t("http_chunked", http_chunked, 20_000),
    // crates/node
    t("exit_dns", exit_dns, 30_000),
    t("dir_request", dir_request, 20_000),
    t("exit_policy", exit_policy, 20_000),
    // crates/mix
    t("sphinxmix", sphinxmix, 150),
    t("sphinx_x25519", sphinx_x25519, 2_000),
    t("msgpack", msgpack, 30_000),
    t("loopix_control", loopix_control, 3_000),
    t("loopix_nodes", loopix_nodes, 1_000),
    // crates/emu
    t("emu_packet", emu_packet, 20_000),
    // crates/testbed
    t("sink_http", sink_http, 20_000),
    t("sink_dns", sink_dns, 30_000),
    t("torctl_event", torctl_event, 30_000),
    // crates/tunnel
    t("tunnel_packet", tunnel_packet, 20_000),
    t("tunnel_dns", tunnel_dns, 30_000),
];

/// Build every fixture now (a few RSA key generations), so the first
/// input a fuzzer runs is not charged for it (libFuzzer's `-timeout`).
pub fn warm_up() {
    fixtures::warm_up();
    netdoc::warm_up();
    mix::warm_up();
    emu::warm_up();
}

/// The target called `name`.
pub fn target(name: &str) -> Option<&'static Target> {
    TARGETS.iter().find(|t| t.name == name)
}
