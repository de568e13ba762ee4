//! Loopix node logic (sans-IO): profiles and wire codec, parameters,
//! authenticated provider control messages, mixes, providers and clients.
pub mod client;
pub mod codec;
pub mod config;
pub mod control;
pub mod node;
