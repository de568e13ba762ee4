//! Application front ends. For now: a sans-IO SOCKS5 server codec (RFC 1928,
//! RFC 1929 and Tor's socks-extensions.txt: RESOLVE, RESOLVE_PTR, and
//! username/password used for stream isolation).

pub mod socks;
