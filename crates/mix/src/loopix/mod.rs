//! Loopix node logic (sans-IO): profiles and wire codec, parameters,
//! mixes, providers and clients.
pub mod codec;
pub mod config;
pub mod node;
