//! The service side's sans-IO state: the introduction points
//! ([`intro::IntroPointSet`]), the descriptor upload schedule
//! ([`publish::UploadSchedule`]) and the port map from virtual ports to
//! local targets ([`PortMap`], tor's `HiddenServicePort`). The async
//! service (`onionmix-node`'s `service` module) drives them.

pub mod intro;
pub mod publish;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

/// Most `ports` entries one service may have.
pub const MAX_PORTS: usize = 256;

/// Why a `ports` entry is not usable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PortError {
    /// Not `VIRTPORT [TARGET]`.
    #[error("{0:?}: expected \"VIRTPORT [ADDR:]PORT\" (like tor's HiddenServicePort)")]
    Syntax(String),
    /// More than [`MAX_PORTS`] entries.
    #[error("more than {MAX_PORTS} ports")]
    TooMany,
}

/// Virtual port to local target, as tor's `HiddenServicePort VIRTPORT
/// [TARGET]`: TARGET is `ADDR:PORT`, `PORT` (on 127.0.0.1) or absent (the
/// virtual port on 127.0.0.1). Unix sockets are not supported.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortMap {
    entries: Vec<(u16, SocketAddr)>,
}

fn port(s: &str) -> Option<u16> {
    s.parse::<u16>().ok().filter(|p| *p != 0)
}

impl PortMap {
    /// Parse the configured entries.
    pub fn parse<S: AsRef<str>>(lines: &[S]) -> Result<Self, PortError> {
        if lines.len() > MAX_PORTS {
            return Err(PortError::TooMany);
        }
        let mut entries = Vec::with_capacity(lines.len());
        for l in lines {
            let l = l.as_ref();
            let bad = || PortError::Syntax(l.to_string());
            let mut parts = l.split_whitespace();
            let virt = parts.next().and_then(port).ok_or_else(bad)?;
            let target = match parts.next() {
                None => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), virt),
                Some(t) => match port(t) {
                    Some(p) => SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), p),
                    None => t
                        .parse::<SocketAddr>()
                        .ok()
                        .filter(|a| a.port() != 0)
                        .ok_or_else(bad)?,
                },
            };
            if parts.next().is_some() {
                return Err(bad());
            }
            entries.push((virt, target));
        }
        Ok(Self { entries })
    }

    /// The target of a virtual port (the first entry for it, as tor picks
    /// one of several at random; onionmix takes the first).
    pub fn target(&self, virt: u16) -> Option<SocketAddr> {
        self.entries
            .iter()
            .find(|(v, _)| *v == virt)
            .map(|(_, t)| *t)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True if there are none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hidden_service_port_forms() {
        let m = PortMap::parse(&["80 127.0.0.1:8080", "22", "443 8443", "81 [::1]:9000"])
            .expect("parses");
        assert_eq!(m.len(), 4);
        assert_eq!(m.target(80), Some("127.0.0.1:8080".parse().expect("a")));
        assert_eq!(m.target(22), Some("127.0.0.1:22".parse().expect("a")));
        assert_eq!(m.target(443), Some("127.0.0.1:8443".parse().expect("a")));
        assert_eq!(m.target(81), Some("[::1]:9000".parse().expect("a")));
        assert_eq!(m.target(8080), None);
        for bad in [
            "",
            "0",
            "x 80",
            "80 host:80",
            "80 127.0.0.1:0",
            "80 1 2",
            "70000",
        ] {
            assert!(PortMap::parse(&[bad]).is_err(), "{bad:?}");
        }
        let many: Vec<String> = (1..=300).map(|p| p.to_string()).collect();
        assert_eq!(PortMap::parse(&many), Err(PortError::TooMany));
    }
}
