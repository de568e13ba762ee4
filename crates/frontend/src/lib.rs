//! Application front ends: a sans-IO SOCKS server codec (SOCKS5 per RFC 1928
//! and RFC 1929, SOCKS4 and SOCKS4a, and Tor's socks-extensions.txt:
//! RESOLVE, RESOLVE_PTR, extended onion-service errors, username/password
//! used for stream isolation), and the rules for which names may leave the
//! client (`.onion` and `.exit` never do), and Tor's control protocol
//! (`control`). `socks_udp`: the SOCKS5 UDP request header (RFC 1928 §7)
//! that UDP ASSOCIATE datagrams carry.

pub mod addr;
pub mod control;
pub mod socks;
pub mod socks_udp;
