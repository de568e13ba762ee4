//! The onion-routing client.

pub mod chanmgr;
pub mod circmgr;
pub mod circuit;
pub mod config;
pub mod socks;
pub mod stream;
