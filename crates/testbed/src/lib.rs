//! The testbed: private networks on one machine (stock tor nodes, onionmix
//! nodes, or both), the sink they carry traffic to, and small clients
//! (SOCKS5, HTTP) that tests, the demo and the measurement suite use.
//!
//! This crate never links the protocol crates: onionmix nodes are started
//! as processes of the onionmix binary, exactly like stock tor nodes.

pub mod arti;
pub mod http;
pub mod kstats;
pub mod launcher;
pub mod loopix;
pub mod netinfo;
pub mod onion;
pub mod proc;
pub mod sink;
pub mod socks;
pub mod spec;
pub mod torctl;
pub mod torrc;
pub mod workload;
