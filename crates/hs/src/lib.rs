//! onionmix-hs: the sans-IO core of v3 onion services (rend-spec-v3,
//! proposals 305 and 327). Everything here is computation on bytes and
//! times given as arguments; the async client, service and relay drivers
//! (in `crates/node`) do the I/O and call into this crate.
//!
//! | module | what it owns |
//! |---|---|
//! | [`addr`] | [`OnionAddress`]: v3 addresses (codec in `onionmix_frontend::addr`) |
//! | [`auth`] | client-authorization key files in tor's formats (`.auth`, `.auth_private`) |
//! | [`error`] | client failures and their SOCKS5 extended errors (prop 304) |
//! | [`time`] | time periods, the SRV schedule, `hsdir_interval`, lifetimes |
//! | [`keys`] | identity keys (tor's key files), blinding, subcredentials, type-08 certs, revision counters |
//! | `pow` | proof of work v1 (feature `pow`): solve, verify with replay cache, AIMD suggested effort |
//! | [`ring`] | `hs_index`/`hsdir_index`, disaster SRV, responsible HSDirs |
//! | [`desc`] | descriptors: build/sign/encrypt (service), parse/verify/decrypt (client), outer checks (HSDir) |
//! | [`intro`] | ESTABLISH_INTRO (MAC, signature, DoS ext), INTRODUCE1/2 (padding, encryption, MAC), RENDEZVOUS1/2 |
//! | [`ntor`] | hs-ntor: INTRODUCE1 keys and MAC, RENDEZVOUS1 AUTH, virtual-hop keys |
//! | [`client`] | the client's connect machine (fetch, introduce, retry, give up) and its bounded caches |
//! | [`service`] | the service's introduction-point set, descriptor upload schedule, port map |
//!
//! Cell codecs for the onion-service relay messages are in
//! `onionmix_cell::hs`, the virtual-hop relay crypto in
//! `onionmix_crypto::relay_crypto_hs`.

#![warn(missing_docs)]

pub mod addr;
pub mod auth;
pub mod client;
pub mod desc;
pub mod error;
pub mod intro;
pub mod keys;
pub mod ntor;
#[cfg(feature = "pow")]
pub mod pow;
pub mod ring;
pub mod service;
pub mod time;

pub use addr::{AddressError, OnionAddress};
pub use error::HsClientError;
