//! Kernel counters of a running network: datagrams dropped at full UDP
//! socket buffers in the network namespaces its processes run in. The
//! link emulator's losses are the experiment; these are not, and a
//! measurement that had them says so (`summary.md`, `meta.json`).

use std::collections::BTreeSet;

use onionmix_measure::record::SocketDrops;

use crate::netinfo::NetworkInfo;

/// Drops counted so far, summed over the distinct network namespaces of
/// the network's nodes and sink (the host's own counters when the
/// network is not emulated: then they include every process on it). A
/// process that is gone, or a /proc that cannot be read, adds nothing.
pub fn socket_drops(info: &NetworkInfo) -> SocketDrops {
    let pids = info
        .nodes
        .iter()
        .map(|n| n.pid)
        .chain(info.sink.as_ref().map(|s| s.pid));
    let mut seen = BTreeSet::new();
    let mut total = SocketDrops::default();
    for pid in pids {
        let Ok(ns) = std::fs::read_link(format!("/proc/{pid}/ns/net")) else {
            continue;
        };
        if !seen.insert(ns) {
            continue;
        }
        let v4 = std::fs::read_to_string(format!("/proc/{pid}/net/snmp"))
            .map(|t| parse_snmp(&t))
            .unwrap_or_default();
        let v6 = std::fs::read_to_string(format!("/proc/{pid}/net/snmp6"))
            .map(|t| parse_snmp6(&t))
            .unwrap_or_default();
        total.udp_receive = total
            .udp_receive
            .saturating_add(v4.udp_receive)
            .saturating_add(v6.udp_receive);
        total.udp_send = total
            .udp_send
            .saturating_add(v4.udp_send)
            .saturating_add(v6.udp_send);
    }
    total
}

/// `/proc/net/snmp`: a `Udp:` line of names, then a `Udp:` line of
/// values.
fn parse_snmp(text: &str) -> SocketDrops {
    let mut udp = text.lines().filter(|l| l.starts_with("Udp: "));
    let (Some(names), Some(values)) = (udp.next(), udp.next()) else {
        return SocketDrops::default();
    };
    let pairs: Vec<(&str, &str)> = names
        .split_whitespace()
        .zip(values.split_whitespace())
        .skip(1)
        .collect();
    let get = |k: &str| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0)
    };
    SocketDrops {
        udp_receive: get("RcvbufErrors"),
        udp_send: get("SndbufErrors"),
    }
}

/// `/proc/net/snmp6`: one `Name value` pair per line.
fn parse_snmp6(text: &str) -> SocketDrops {
    let get = |k: &str| {
        text.lines()
            .filter_map(|l| l.split_once(char::is_whitespace))
            .find(|(n, _)| *n == k)
            .and_then(|(_, v)| v.trim().parse().ok())
            .unwrap_or(0)
    };
    SocketDrops {
        udp_receive: get("Udp6RcvbufErrors"),
        udp_send: get("Udp6SndbufErrors"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snmp_udp_line_is_read_by_name() {
        let t = "Ip: Forwarding DefaultTTL\nIp: 1 64\n\
                 Udp: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors InCsumErrors IgnoredMulti MemErrors\n\
                 Udp: 49391 3 59 48000 59 2 0 0 0\n\
                 UdpLite: InDatagrams NoPorts InErrors OutDatagrams RcvbufErrors SndbufErrors\n\
                 UdpLite: 0 0 0 0 7 7\n";
        assert_eq!(
            parse_snmp(t),
            SocketDrops {
                udp_receive: 59,
                udp_send: 2
            }
        );
        // No Udp lines, a names line without values, garbage values.
        assert_eq!(parse_snmp("Ip: a\nIp: 1\n"), SocketDrops::default());
        assert_eq!(parse_snmp("Udp: RcvbufErrors\n"), SocketDrops::default());
        assert_eq!(
            parse_snmp("Udp: RcvbufErrors SndbufErrors\nUdp: x 5\n"),
            SocketDrops {
                udp_receive: 0,
                udp_send: 5
            }
        );
    }

    #[test]
    fn snmp6_pairs_are_read_by_name() {
        let t = "Ip6InReceives                   \t10\nUdp6RcvbufErrors                \t4\nUdp6SndbufErrors                \t1\nUdpLite6RcvbufErrors\t9\n";
        assert_eq!(
            parse_snmp6(t),
            SocketDrops {
                udp_receive: 4,
                udp_send: 1
            }
        );
        assert_eq!(parse_snmp6(""), SocketDrops::default());
    }

    #[test]
    fn drops_since_never_go_negative() {
        let a = SocketDrops {
            udp_receive: 10,
            udp_send: 1,
        };
        let b = SocketDrops {
            udp_receive: 4,
            udp_send: 3,
        };
        assert_eq!(
            a.since(b),
            SocketDrops {
                udp_receive: 6,
                udp_send: 0
            }
        );
    }

    /// The counters this reads exist where the tests run (Linux).
    #[test]
    fn this_namespace_has_the_counters() {
        let text = std::fs::read_to_string("/proc/self/net/snmp").unwrap_or_default();
        if text.is_empty() {
            eprintln!("skipping: no /proc/self/net/snmp on this system");
            return;
        }
        assert!(text.contains("RcvbufErrors"), "{text}");
    }
}
