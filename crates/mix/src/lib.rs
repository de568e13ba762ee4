//! onionmix-mix: the Loopix mix network.
//!
//! - [`sphinx`]: Sphinx packet formats, sans-IO (profiles `sphinxmix`,
//!   byte-compatible with PyPI sphinxmix 0.0.7, and `x25519`);
//! - [`loopix`]: sans-IO node logic for clients, providers and mixes;
//! - [`directory`]: the reference's SQLite node database and our signed
//!   directory document;
//! - [`net`]: thin tokio UDP drivers;
//! - [`testnet`]: generates a Loopix network (keys, configs, directory) and
//!   the process specs to run it.
pub mod directory;
pub mod loopix;
pub mod net;
pub mod sphinx;
pub mod testnet;
