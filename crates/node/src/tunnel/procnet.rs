//! The kernel's socket tables (`/proc/<pid>/net/{tcp,tcp6,udp,udp6}`,
//! per network namespace): who owns a socket (per-app isolation), and
//! where a process's sockets go (the leak tests audit the tunnel's own).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// One line of a table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProcSocket {
    /// Local address.
    pub local: SocketAddr,
    /// Remote address (unspecified, port 0, when not connected).
    pub remote: SocketAddr,
    /// Owner uid.
    pub uid: u32,
    /// Socket inode (as in `/proc/<pid>/fd/* -> socket:[inode]`).
    pub inode: u64,
}

/// Parse `ADDR:PORT` as the kernel prints it: the address as 32-bit words
/// in host byte order, the port in hex.
fn parse_addr(s: &str) -> Option<SocketAddr> {
    let (a, p) = s.split_once(':')?;
    let port = u16::from_str_radix(p, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let h = a.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(h, 16).ok()?.to_ne_bytes())
    };
    let ip = match a.len() {
        8 => IpAddr::from(word(0)?),
        32 => {
            let mut o = [0u8; 16];
            for (i, chunk) in o.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(o))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

/// Every well-formed line of one table (the header and garbage skipped).
pub fn parse_table(table: &str) -> Vec<ProcSocket> {
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            Some(ProcSocket {
                local: parse_addr(f.get(1)?)?,
                remote: parse_addr(f.get(2)?)?,
                uid: f.get(7)?.parse().ok()?,
                inode: f.get(9)?.parse().ok()?,
            })
        })
        .collect()
}

/// The uid of the socket bound to `src` (or to the unspecified address
/// and `src`'s port) in one table.
pub fn uid_in(table: &str, src: SocketAddr) -> Option<u32> {
    let mut wildcard = None;
    for s in parse_table(table) {
        if s.local.port() != src.port() {
            continue;
        }
        if s.local.ip() == src.ip() {
            return Some(s.uid);
        }
        if s.local.ip().is_unspecified() {
            wildcard = Some(s.uid);
        }
    }
    wildcard
}

/// The sockets process `pid` holds (by its fds), with their table entries
/// (TCP and UDP, IPv4 and IPv6, in the process's namespace). Sockets of
/// other kinds (Unix, netlink, ...) are not listed.
pub fn sockets_of(pid: u32) -> Vec<(bool, ProcSocket)> {
    let inodes: std::collections::HashSet<u64> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(|e| {
                let l = std::fs::read_link(e.ok()?.path()).ok()?;
                let l = l.to_string_lossy();
                l.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
            })
            .collect()
        })
        .unwrap_or_default();
    let mut out = Vec::new();
    for (name, tcp) in [
        ("tcp", true),
        ("tcp6", true),
        ("udp", false),
        ("udp6", false),
    ] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{name}")).unwrap_or_default();
        out.extend(
            parse_table(&text)
                .into_iter()
                .filter(|s| inodes.contains(&s.inode))
                .map(|s| (tcp, s)),
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_net_tables() {
        let v4 = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 0100FF0A:9C40 0100007F:0050 02 00000000:00000000 01:00000064 00000000  1000        0 12345 1 0 100 0 0 10 0\n   1: 00000000:0035 00000000:0000 07 00000000:00000000 00:00000000 00000000    65534        0 2 2 0 0 0\n";
        let src: SocketAddr = "10.255.0.1:40000".parse().expect("addr");
        // The parser is for the host's byte order: build the lines for it.
        let word = |o: [u8; 4]| format!("{:08X}", u32::from_ne_bytes(o));
        let table = v4
            .replace("0100FF0A", &word([10, 255, 0, 1]))
            .replace("0100007F", &word([127, 0, 0, 1]));
        assert_eq!(uid_in(&table, src), Some(1000));
        let all = parse_table(&table);
        assert_eq!(all.len(), 2);
        assert_eq!(all[0].remote, "127.0.0.1:80".parse().expect("addr"));
        assert_eq!(all[0].inode, 12345);
        // A socket bound to any address, same port.
        let any: SocketAddr = "10.255.0.1:53".parse().expect("addr");
        assert_eq!(uid_in(&table, any), Some(65534));
        assert_eq!(uid_in(&table, "10.255.0.1:1".parse().expect("addr")), None);
        let six: Ipv6Addr = "fd6f:6e69:6f6e:7400::1".parse().expect("v6");
        let words: Vec<String> = six
            .octets()
            .chunks_exact(4)
            .map(|c| word([c[0], c[1], c[2], c[3]]))
            .collect();
        let line = format!(
            "header\n 0: {}:1F90 00000000000000000000000000000000:0000 02 0:0 0:0 0 4242 0 1\n",
            words.concat()
        );
        let src6 = SocketAddr::new(IpAddr::V6(six), 8080);
        assert_eq!(uid_in(&line, src6), Some(4242));
        // Garbage lines are skipped, never a panic.
        for bad in [
            "",
            "x",
            "h\n0: zz:zz a b c d e f",
            "h\n0: 0A:1 0 0 0 0 0 notanumber",
        ] {
            assert_eq!(uid_in(bad, src), None);
            assert!(parse_table(bad).is_empty());
        }
    }

    #[test]
    fn our_own_sockets_are_found() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let a = l.local_addr().expect("addr");
        let c = std::net::TcpStream::connect(a).expect("connect");
        let mine = sockets_of(std::process::id());
        let local = c.local_addr().expect("addr");
        assert!(
            mine.iter()
                .any(|(tcp, s)| *tcp && s.local == local && s.remote == a),
            "{mine:?}"
        );
    }
}
