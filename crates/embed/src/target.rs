//! Checking a stream's target before anything leaves the process.

use std::net::IpAddr;

use onionmix_cell::relay::TargetHost;
use onionmix_frontend::addr::{self, HostKind};
use onionmix_hs::OnionAddress;

use crate::EmbedError;

/// Longest hostname accepted (a SOCKS5 name's limit, and DNS's).
pub const MAX_HOST_LEN: usize = 255;

/// A checked stream target.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// A hostname or address the exit connects to.
    Exit {
        /// The host, sent to the exit as is (resolved there).
        host: TargetHost,
        /// The port (never 0).
        port: u16,
    },
    /// A v3 onion service.
    Onion {
        /// The service address.
        addr: OnionAddress,
        /// The virtual port (never 0).
        port: u16,
    },
}

impl Target {
    /// Check `host:port`: refuses port 0, empty, overlong or malformed
    /// hosts (control characters, spaces, `:` outside a bracketed IPv6
    /// literal), `.exit` names and invalid `.onion` names.
    pub fn parse(host: &str, port: u16) -> Result<Self, EmbedError> {
        if port == 0 {
            return Err(EmbedError::BadTarget("port 0".into()));
        }
        if host.is_empty() {
            return Err(EmbedError::BadTarget("empty host".into()));
        }
        if host.len() > MAX_HOST_LEN {
            return Err(EmbedError::BadTarget(format!(
                "host longer than {MAX_HOST_LEN} bytes"
            )));
        }
        // An address literal, IPv6 with or without brackets.
        let literal = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = literal.parse::<IpAddr>() {
            return Ok(Target::Exit {
                host: TargetHost::Ip(ip),
                port,
            });
        }
        if !host
            .bytes()
            .all(|b| b.is_ascii_graphic() && b != b':' && b != b'[' && b != b']')
        {
            return Err(EmbedError::BadTarget(
                "host has characters a hostname cannot have".into(),
            ));
        }
        match addr::classify(host) {
            HostKind::Public => Ok(Target::Exit {
                host: TargetHost::Hostname(host.to_string()),
                port,
            }),
            HostKind::Exit => Err(EmbedError::ExitNotation),
            HostKind::BadOnion(e) => Err(EmbedError::BadOnion(e.to_string())),
            HostKind::Onion { .. } => match OnionAddress::parse_host(host) {
                Ok(addr) => Ok(Target::Onion { addr, port }),
                Err(e) => Err(EmbedError::BadOnion(e.to_string())),
            },
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn refuses_bad_targets() {
        assert!(matches!(
            Target::parse("example.com", 0),
            Err(EmbedError::BadTarget(_))
        ));
        assert!(matches!(
            Target::parse("", 80),
            Err(EmbedError::BadTarget(_))
        ));
        assert!(matches!(
            Target::parse(&"a".repeat(256), 80),
            Err(EmbedError::BadTarget(_))
        ));
        for h in ["a b", "a:b", "a\0b", "a\nb", "ex\u{e9}mple.com"] {
            assert!(
                matches!(Target::parse(h, 80), Err(EmbedError::BadTarget(_))),
                "{h:?}"
            );
        }
        assert!(matches!(
            Target::parse("bad.onion", 80),
            Err(EmbedError::BadOnion(_))
        ));
        assert!(matches!(
            Target::parse("www.bad.onion", 80),
            Err(EmbedError::BadOnion(_))
        ));
        assert!(matches!(
            Target::parse("x.exit", 80),
            Err(EmbedError::ExitNotation)
        ));
        assert!(matches!(
            Target::parse("host.relay.EXIT.", 80),
            Err(EmbedError::ExitNotation)
        ));
    }

    #[test]
    fn accepts_names_addresses_and_onions() {
        assert_eq!(
            Target::parse("example.com", 443).unwrap(),
            Target::Exit {
                host: TargetHost::Hostname("example.com".into()),
                port: 443
            }
        );
        assert_eq!(
            Target::parse("[2001:db8::1]", 80).unwrap(),
            Target::Exit {
                host: TargetHost::Ip("2001:db8::1".parse().unwrap()),
                port: 80
            }
        );
        assert_eq!(
            Target::parse("192.0.2.1", 80).unwrap(),
            Target::Exit {
                host: TargetHost::Ip("192.0.2.1".parse().unwrap()),
                port: 80
            }
        );
        // A valid v3 address: the Ed25519 base point as the service key.
        let mut key = [0x66u8; 32];
        key[0] = 0x58;
        let onion = OnionAddress::from_key(key).unwrap().to_string();
        match Target::parse(&onion, 80) {
            Ok(Target::Onion { port, .. }) => assert_eq!(port, 80),
            other => panic!("{other:?}"),
        }
    }
}
