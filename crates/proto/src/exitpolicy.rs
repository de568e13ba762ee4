//! Exit policies in tor's syntax (`accept|reject ADDR[/BITS]:PORT[-PORT]`,
//! dir-spec §2.1.3 and the torrc `ExitPolicy` option), evaluation, and the
//! port-list summary that microdescriptors carry (`p accept 80,443`).

use std::net::IpAddr;

/// One policy rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Accept (true) or reject.
    pub accept: bool,
    /// Address pattern: None matches any address.
    pub addr: Option<(IpAddr, u8)>,
    /// Only IPv4 (`*4`) or only IPv6 (`*6`) wildcards.
    pub family: Family,
    /// Inclusive port range.
    pub ports: (u16, u16),
}

/// Which address family a wildcard rule covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// Both.
    Any,
    /// IPv4 only.
    V4,
    /// IPv6 only.
    V6,
}

/// An ordered list of rules; the first match wins; no match accepts (as in
/// tor, policies end with an explicit catch-all in practice).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ExitPolicy {
    /// Rules in order.
    pub rules: Vec<Rule>,
}

/// A policy line that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad exit policy rule {rule:?}: {why}")]
pub struct PolicyError {
    /// The rule text.
    pub rule: String,
    /// Why.
    pub why: &'static str,
}

/// Private and local networks rejected by default (tor's
/// `ExitPolicyRejectPrivate`).
pub const PRIVATE_NETS: &[&str] = &[
    "0.0.0.0/8",
    "169.254.0.0/16",
    "127.0.0.0/8",
    "192.168.0.0/16",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "[::]/8",
    "[fc00::]/7",
    "[fe80::]/10",
    "[fec0::]/10",
    "[::1]/128",
];

fn err(rule: &str, why: &'static str) -> PolicyError {
    PolicyError {
        rule: rule.to_owned(),
        why,
    }
}

fn parse_addr(rule: &str, s: &str) -> Result<(Option<(IpAddr, u8)>, Family), PolicyError> {
    match s {
        "*" => return Ok((None, Family::Any)),
        "*4" => return Ok((None, Family::V4)),
        "*6" => return Ok((None, Family::V6)),
        _ => {}
    }
    let (a, bits) = match s.rsplit_once('/') {
        Some((a, b)) if !a.ends_with(':') => (a, Some(b)),
        _ => (s, None),
    };
    let a = a.trim_start_matches('[').trim_end_matches(']');
    let ip: IpAddr = a.parse().map_err(|_| err(rule, "bad address"))?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let bits = match bits {
        Some(b) => b.parse::<u8>().map_err(|_| err(rule, "bad mask"))?,
        None => max,
    };
    if bits > max {
        return Err(err(rule, "mask too long"));
    }
    let fam = if ip.is_ipv4() { Family::V4 } else { Family::V6 };
    Ok((Some((ip, bits)), fam))
}

fn parse_ports(rule: &str, s: &str) -> Result<(u16, u16), PolicyError> {
    if s == "*" {
        return Ok((1, 65535));
    }
    let (lo, hi) = match s.split_once('-') {
        Some((a, b)) => (a, b),
        None => (s, s),
    };
    let lo: u16 = lo.parse().map_err(|_| err(rule, "bad port"))?;
    let hi: u16 = hi.parse().map_err(|_| err(rule, "bad port"))?;
    if lo == 0 || hi < lo {
        return Err(err(rule, "bad port range"));
    }
    Ok((lo, hi))
}

impl Rule {
    /// Parse one rule (`accept 127.0.0.0/8:*`, `reject *:25`, `accept6 [::1]:80`).
    pub fn parse(text: &str) -> Result<Rule, PolicyError> {
        let t = text.trim();
        let (verb, rest) = t
            .split_once(char::is_whitespace)
            .ok_or_else(|| err(t, "missing pattern"))?;
        let (accept, v6only) = match verb {
            "accept" => (true, false),
            "reject" => (false, false),
            "accept6" => (true, true),
            "reject6" => (false, true),
            _ => return Err(err(t, "must start with accept or reject")),
        };
        let rest = rest.trim();
        let (addr_s, port_s) = rest
            .rsplit_once(':')
            .ok_or_else(|| err(t, "missing :port"))?;
        let (addr, mut family) = parse_addr(t, addr_s)?;
        if v6only {
            if family == Family::V4 {
                return Err(err(t, "accept6/reject6 with an IPv4 address"));
            }
            family = Family::V6;
        }
        let ports = parse_ports(t, port_s)?;
        Ok(Rule {
            accept,
            addr: addr.map(|(ip, bits)| (mask(ip, bits), bits)),
            family,
            ports,
        })
    }

    fn matches_addr(&self, ip: &IpAddr) -> bool {
        match (self.family, ip) {
            (Family::V4, IpAddr::V6(_)) | (Family::V6, IpAddr::V4(_)) => return false,
            _ => {}
        }
        match self.addr {
            None => true,
            Some((net, bits)) => net.is_ipv4() == ip.is_ipv4() && mask(*ip, bits) == net,
        }
    }

    fn matches_port(&self, port: u16) -> bool {
        self.ports.0 <= port && port <= self.ports.1
    }
}

impl std::fmt::Display for Rule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let verb = if self.accept { "accept" } else { "reject" };
        let addr = match (self.addr, self.family) {
            (None, Family::Any) => "*".to_string(),
            (None, Family::V4) => "*4".to_string(),
            (None, Family::V6) => "*6".to_string(),
            (Some((IpAddr::V4(a), 32)), _) => a.to_string(),
            (Some((IpAddr::V4(a), b)), _) => format!("{a}/{b}"),
            (Some((IpAddr::V6(a), 128)), _) => format!("[{a}]"),
            (Some((IpAddr::V6(a), b)), _) => format!("[{a}]/{b}"),
        };
        let ports = if self.ports == (1, 65535) {
            "*".to_string()
        } else if self.ports.0 == self.ports.1 {
            self.ports.0.to_string()
        } else {
            format!("{}-{}", self.ports.0, self.ports.1)
        };
        write!(f, "{verb} {addr}:{ports}")
    }
}

fn mask(ip: IpAddr, bits: u8) -> IpAddr {
    match ip {
        IpAddr::V4(a) => {
            let m = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - bits as u32)
            };
            IpAddr::V4((u32::from(a) & m).into())
        }
        IpAddr::V6(a) => {
            let m = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - bits as u32)
            };
            IpAddr::V6((u128::from(a) & m).into())
        }
    }
}

impl ExitPolicy {
    /// Parse rules, one per item (or comma-separated within an item).
    pub fn parse<S: AsRef<str>>(items: &[S]) -> Result<Self, PolicyError> {
        let mut rules = Vec::new();
        for item in items {
            for part in item.as_ref().split(',') {
                let part = part.trim();
                if !part.is_empty() {
                    rules.push(Rule::parse(part)?);
                }
            }
        }
        Ok(ExitPolicy { rules })
    }

    /// A policy that rejects everything (non-exit relays).
    pub fn reject_all() -> Self {
        ExitPolicy {
            rules: vec![Rule {
                accept: false,
                addr: None,
                family: Family::Any,
                ports: (1, 65535),
            }],
        }
    }

    /// Prepend rejections of private networks (`ExitPolicyRejectPrivate 1`).
    pub fn with_private_rejected(mut self) -> Self {
        let mut rules: Vec<Rule> = PRIVATE_NETS
            .iter()
            .filter_map(|n| Rule::parse(&format!("reject {n}:*")).ok())
            .collect();
        rules.append(&mut self.rules);
        self.rules = rules;
        self
    }

    /// Prepend a rejection of each of `addrs` (tor's
    /// `ExitPolicyRejectPrivate` also rejects the relay's own addresses:
    /// an exit must not connect to its own services for its clients).
    pub fn with_addresses_rejected(mut self, addrs: &[IpAddr]) -> Self {
        let mut rules: Vec<Rule> = addrs
            .iter()
            .filter_map(|a| {
                let a = match a {
                    IpAddr::V4(v) => v.to_string(),
                    IpAddr::V6(v) => format!("[{v}]"),
                };
                Rule::parse(&format!("reject {a}:*")).ok()
            })
            .collect();
        rules.append(&mut self.rules);
        self.rules = rules;
        self
    }

    /// Whether a connection to `ip:port` is allowed.
    pub fn allows(&self, ip: &IpAddr, port: u16) -> bool {
        for r in &self.rules {
            if r.matches_addr(ip) && r.matches_port(port) {
                return r.accept;
            }
        }
        true
    }

    /// Whether some address is allowed on `port` for the address family
    /// (used to decide whether to even try a hostname).
    pub fn allows_port_somewhere(&self, port: u16, v6: bool) -> bool {
        self.summary(v6).allows(port)
    }

    /// The microdescriptor summary: ports accepted for *most* addresses
    /// (dir-spec §3.8.2: a rule that rejects only some addresses does not
    /// reject the port in the summary).
    pub fn summary(&self, v6: bool) -> PortSummary {
        let mut decided = vec![None::<bool>; 65536];
        for r in &self.rules {
            let fam_ok = !matches!((r.family, v6), (Family::V4, true) | (Family::V6, false));
            if !fam_ok {
                continue;
            }
            let wildcard = match r.addr {
                None => true,
                Some((_, 0)) => true,
                Some(_) => false,
            };
            for p in r.ports.0..=r.ports.1 {
                let slot = &mut decided[p as usize];
                if slot.is_none() {
                    if wildcard {
                        *slot = Some(r.accept);
                    } else if r.accept {
                        // Accepting some addresses leaves the port open to
                        // the later wildcard decision; ignore.
                    }
                }
            }
        }
        let mut accept = Vec::new();
        let mut p: u32 = 1;
        while p <= 65535 {
            if decided[p as usize].unwrap_or(true) {
                let start = p;
                while p <= 65535 && decided[p as usize].unwrap_or(true) {
                    p += 1;
                }
                accept.push((start as u16, (p - 1) as u16));
            } else {
                p += 1;
            }
        }
        PortSummary { accept }
    }
}

/// A port list summary (`p accept 1-65535` / `p reject 25,119`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PortSummary {
    /// Accepted inclusive ranges, sorted.
    pub accept: Vec<(u16, u16)>,
}

impl PortSummary {
    /// Whether `port` is accepted.
    pub fn allows(&self, port: u16) -> bool {
        self.accept.iter().any(|(a, b)| *a <= port && port <= *b)
    }
    /// Whether nothing is accepted.
    pub fn is_reject_all(&self) -> bool {
        self.accept.is_empty()
    }
    /// Render as a microdescriptor `p`/`p6` line value: the shorter of the
    /// accept list and the reject list.
    pub fn to_line_value(&self) -> String {
        let fmt = |v: &[(u16, u16)]| {
            v.iter()
                .map(|(a, b)| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}-{b}")
                    }
                })
                .collect::<Vec<_>>()
                .join(",")
        };
        let mut reject = Vec::new();
        let mut next = 1u32;
        for (a, b) in &self.accept {
            if (*a as u32) > next {
                reject.push((next as u16, (*a - 1)));
            }
            next = *b as u32 + 1;
        }
        if next <= 65535 {
            reject.push((next as u16, 65535));
        }
        if self.accept.is_empty() {
            return "reject 1-65535".into();
        }
        let acc = format!("accept {}", fmt(&self.accept));
        if reject.is_empty() {
            return acc;
        }
        let rej = format!("reject {}", fmt(&reject));
        if rej.len() < acc.len() { rej } else { acc }
    }
    /// Parse a `p`/`p6` line value.
    pub fn parse(s: &str) -> Result<Self, PolicyError> {
        let (verb, list) = s
            .trim()
            .split_once(' ')
            .ok_or_else(|| err(s, "missing port list"))?;
        let mut ranges = Vec::new();
        for part in list.split(',') {
            ranges.push(parse_ports(s, part.trim())?);
        }
        ranges.sort();
        let accept = match verb {
            // Sorted and merged: `to_line_value` computes the complement
            // from this list, so overlapping or adjacent ranges must be
            // one range (`accept 1-100,2-3` printed as `reject 4-65535`
            // before; found by the exit_policy fuzz target).
            "accept" => {
                let mut merged: Vec<(u16, u16)> = Vec::with_capacity(ranges.len());
                for (a, b) in ranges {
                    match merged.last_mut() {
                        Some(last) if u32::from(a) <= u32::from(last.1) + 1 => {
                            last.1 = last.1.max(b);
                        }
                        _ => merged.push((a, b)),
                    }
                }
                merged
            }
            "reject" => {
                let mut acc = Vec::new();
                let mut next = 1u32;
                for (a, b) in ranges {
                    if (a as u32) > next {
                        acc.push((next as u16, a - 1));
                    }
                    next = next.max(b as u32 + 1);
                }
                if next <= 65535 {
                    acc.push((next as u16, 65535));
                }
                acc
            }
            _ => return Err(err(s, "must be accept or reject")),
        };
        Ok(PortSummary { accept })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_match_wins() {
        let p = ExitPolicy::parse(&["accept 127.0.0.0/8:*", "reject *:*"]).unwrap();
        assert!(p.allows(&"127.0.0.1".parse().unwrap(), 80));
        assert!(!p.allows(&"10.0.0.1".parse().unwrap(), 80));
        let p = ExitPolicy::parse(&["accept *:*"])
            .unwrap()
            .with_private_rejected();
        assert!(!p.allows(&"192.168.1.1".parse().unwrap(), 443));
        assert!(!p.allows(&"::1".parse().unwrap(), 443));
        assert!(!p.allows(&"fec0::1".parse().unwrap(), 443));
        assert!(p.allows(&"8.8.8.8".parse().unwrap(), 443));
        // The relay's own public addresses too.
        let own: [IpAddr; 2] = [
            "198.51.100.7".parse().unwrap(),
            "2001:db8::7".parse().unwrap(),
        ];
        let p = p.with_addresses_rejected(&own);
        assert!(!p.allows(&own[0], 80) && !p.allows(&own[1], 80));
        assert!(p.allows(&"198.51.100.8".parse().unwrap(), 80));
    }

    #[test]
    fn summaries() {
        let p = ExitPolicy::parse(&["reject *:25", "accept *:*"]).unwrap();
        let s = p.summary(false);
        assert!(!s.allows(25));
        assert!(s.allows(80));
        assert_eq!(s.to_line_value(), "reject 25");
        let p = ExitPolicy::parse(&["accept *:80,accept *:443,reject *:*"]).unwrap();
        assert_eq!(p.summary(false).to_line_value(), "accept 80,443");
        // A rule for some addresses only does not decide the summary.
        let p = ExitPolicy::parse(&["accept 127.0.0.0/8:*", "reject *:*"]).unwrap();
        assert!(p.summary(false).is_reject_all());
        assert_eq!(
            PortSummary::parse("reject 25,119").unwrap().to_line_value(),
            "reject 25,119"
        );
        assert!(PortSummary::parse("accept 1-65535").unwrap().allows(9));
        assert!(ExitPolicy::reject_all().summary(false).is_reject_all());
        // Overlapping, adjacent and unsorted accept ranges keep their ports
        // when printed (the exit_policy fuzz target's finding).
        let s = PortSummary::parse("accept 1-100,2-3,200,101-150").unwrap();
        assert_eq!(s.accept, [(1, 150), (200, 200)]);
        let line = s.to_line_value();
        assert_eq!(line, "accept 1-150,200");
        let back = PortSummary::parse(&line).unwrap();
        assert!((1..=150).chain([200]).all(|p| back.allows(p)));
        assert!(!back.allows(151) && !back.allows(65535));
    }

    #[test]
    fn bad_rules() {
        for bad in [
            "allow *:*",
            "accept *",
            "accept 1.2.3.4/40:*",
            "accept *:0",
            "accept *:9-3",
            "accept6 1.2.3.4:*",
        ] {
            assert!(Rule::parse(bad).is_err(), "{bad}");
        }
        let r = Rule::parse("accept [::1]/64:80-90").unwrap();
        assert_eq!(r.to_string(), "accept [::]/64:80-90");
    }

    proptest::proptest! {
        #[test]
        fn parsers_never_panic(s in ".{0,80}") {
            let _ = Rule::parse(&s);
            let _ = PortSummary::parse(&s);
        }
    }
}
