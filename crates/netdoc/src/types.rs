//! Small value types shared by the directory model: relay flags, port
//! policy summaries and protocol version lists.
//!
//! These are onionmix's own types; the parsers in this crate convert Arti's
//! `tor-netdoc` representations into them so no `tor-netdoc` type leaks out.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

/// Error parsing one of the small value types.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot parse {what}: {detail}")]
pub struct ValueParseError {
    /// What was being parsed.
    pub what: &'static str,
    /// Why it failed.
    pub detail: String,
}

fn perr(what: &'static str, detail: impl Into<String>) -> ValueParseError {
    ValueParseError {
        what,
        detail: detail.into(),
    }
}

/// Set of consensus flags of one relay (dir-spec §3.4.1 "s" line).
#[derive(Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RelayFlags(u16);

macro_rules! flags {
    ($($name:ident = $bit:expr, $s:literal;)*) => {
        impl RelayFlags {
            $(
                #[doc = concat!("The `", $s, "` flag.")]
                pub const $name: RelayFlags = RelayFlags(1 << $bit);
            )*
            const ALL: &'static [(RelayFlags, &'static str)] = &[$((RelayFlags::$name, $s),)*];
        }
    };
}

flags! {
    AUTHORITY = 0, "Authority";
    BAD_EXIT = 1, "BadExit";
    EXIT = 2, "Exit";
    FAST = 3, "Fast";
    GUARD = 4, "Guard";
    HSDIR = 5, "HSDir";
    MIDDLE_ONLY = 6, "MiddleOnly";
    NO_ED_CONSENSUS = 7, "NoEdConsensus";
    STABLE = 8, "Stable";
    STALE_DESC = 9, "StaleDesc";
    RUNNING = 10, "Running";
    VALID = 11, "Valid";
    V2DIR = 12, "V2Dir";
}

impl RelayFlags {
    /// No flags.
    pub const fn empty() -> Self {
        RelayFlags(0)
    }
    /// True if every flag in `other` is set.
    pub const fn contains(self, other: RelayFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// Set the flags in `other`.
    pub fn insert(&mut self, other: RelayFlags) {
        self.0 |= other.0;
    }
    /// Clear the flags in `other`.
    pub fn remove(&mut self, other: RelayFlags) {
        self.0 &= !other.0;
    }
    /// Union.
    #[must_use]
    pub const fn with(self, other: RelayFlags) -> Self {
        RelayFlags(self.0 | other.0)
    }
    /// Names of the set flags, in the canonical (alphabetical) order.
    pub fn names(self) -> impl Iterator<Item = &'static str> {
        Self::ALL
            .iter()
            .filter(move |(f, _)| self.contains(*f))
            .map(|(_, n)| *n)
    }
    /// The flag with this name, if known.
    pub fn from_name(name: &str) -> Option<RelayFlags> {
        Self::ALL.iter().find(|(_, n)| *n == name).map(|(f, _)| *f)
    }
}

impl fmt::Debug for RelayFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RelayFlags({self})")
    }
}

impl fmt::Display for RelayFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v: Vec<&str> = self.names().collect();
        f.write_str(&v.join(" "))
    }
}

impl FromStr for RelayFlags {
    type Err = ValueParseError;
    /// Space-separated flag names; unknown names are ignored (as clients must).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut f = RelayFlags::empty();
        for n in s.split_ascii_whitespace() {
            if let Some(x) = RelayFlags::from_name(n) {
                f.insert(x);
            }
        }
        Ok(f)
    }
}

/// An exit policy summary: the set of ports a relay accepts for "most"
/// addresses (dir-spec §3.4.1 `p`, microdesc `p` / `p6`).
///
/// Stored as sorted, disjoint, non-adjacent inclusive ranges of accepted
/// ports.  The default value rejects everything.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct PortPolicy {
    accepted: Vec<(u16, u16)>,
}

/// Most port ranges a policy summary may hold (a full 1-65535 alternation
/// would be absurd; tor's summaries are short).
pub const MAX_POLICY_RANGES: usize = 4096;

impl PortPolicy {
    /// A policy rejecting all ports.
    pub fn reject_all() -> Self {
        PortPolicy::default()
    }
    /// A policy accepting all ports.
    pub fn accept_all() -> Self {
        PortPolicy {
            accepted: vec![(1, 65535)],
        }
    }
    /// A policy accepting exactly these ranges (inclusive; normalised).
    pub fn accepting(ranges: &[(u16, u16)]) -> Self {
        let mut v: Vec<(u16, u16)> = ranges
            .iter()
            .filter(|(a, b)| a <= b)
            .map(|&(a, b)| (a.max(1), b))
            .filter(|(a, b)| a <= b)
            .collect();
        v.sort_unstable();
        let mut out: Vec<(u16, u16)> = Vec::with_capacity(v.len());
        for (a, b) in v {
            if let Some(last) = out.last_mut()
                && u32::from(a) <= u32::from(last.1) + 1
            {
                last.1 = last.1.max(b);
                continue;
            }
            out.push((a, b));
        }
        PortPolicy { accepted: out }
    }
    /// True if connections to `port` are accepted (port 0 never is).
    pub fn allows_port(&self, port: u16) -> bool {
        port != 0 && self.accepted.iter().any(|&(a, b)| a <= port && port <= b)
    }
    /// True if any port is accepted (policy is not "reject 1-65535").
    pub fn allows_some_port(&self) -> bool {
        !self.accepted.is_empty()
    }
    /// The accepted ranges (inclusive, sorted, disjoint).
    pub fn accepted_ranges(&self) -> &[(u16, u16)] {
        &self.accepted
    }
    fn inverted(&self) -> Vec<(u16, u16)> {
        let mut out = Vec::new();
        let mut next: u32 = 1;
        for &(a, b) in &self.accepted {
            if u32::from(a) > next {
                out.push((next as u16, a - 1));
            }
            next = u32::from(b) + 1;
        }
        if next <= 65535 {
            out.push((next as u16, 65535));
        }
        out
    }
}

fn fmt_ranges(r: &[(u16, u16)]) -> String {
    r.iter()
        .map(|&(a, b)| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect::<Vec<_>>()
        .join(",")
}

impl fmt::Display for PortPolicy {
    /// The shorter of the `accept` and `reject` forms, as tor writes them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.accepted.is_empty() {
            return f.write_str("reject 1-65535");
        }
        let acc = fmt_ranges(&self.accepted);
        let inv = self.inverted();
        if inv.is_empty() {
            return f.write_str("accept 1-65535");
        }
        let rej = fmt_ranges(&inv);
        if rej.len() < acc.len() {
            write!(f, "reject {rej}")
        } else {
            write!(f, "accept {acc}")
        }
    }
}

impl fmt::Debug for PortPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "PortPolicy({self})")
    }
}

impl FromStr for PortPolicy {
    type Err = ValueParseError;
    /// Parse `accept <portlist>` or `reject <portlist>`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        let (kw, list) = s
            .split_once(' ')
            .ok_or_else(|| perr("port policy", "expected `accept|reject <ports>`"))?;
        let accept = match kw {
            "accept" => true,
            "reject" => false,
            _ => return Err(perr("port policy", format!("bad keyword {kw:?}"))),
        };
        let mut ranges = Vec::new();
        for item in list.trim().split(',') {
            if ranges.len() >= MAX_POLICY_RANGES {
                return Err(perr("port policy", "too many ranges"));
            }
            let (a, b) = match item.split_once('-') {
                Some((a, b)) => (a, b),
                None => (item, item),
            };
            let a: u16 = a
                .parse()
                .map_err(|_| perr("port policy", format!("bad port {a:?}")))?;
            let b: u16 = b
                .parse()
                .map_err(|_| perr("port policy", format!("bad port {b:?}")))?;
            if a == 0 || a > b {
                return Err(perr("port policy", format!("bad range {item:?}")));
            }
            ranges.push((a, b));
        }
        let p = PortPolicy::accepting(&ranges);
        if accept {
            Ok(p)
        } else {
            Ok(PortPolicy {
                accepted: p.inverted(),
            })
        }
    }
}

/// Subprotocol versions (`pr` line, `recommended-client-protocols` ...),
/// e.g. `Link=4-5 Relay=2-4 FlowCtrl=1-2`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Protocols {
    map: BTreeMap<String, Vec<(u32, u32)>>,
}

/// Most distinct protocol names accepted on one line.
pub const MAX_PROTOCOL_NAMES: usize = 64;
/// Longest protocol name (tor's `MAX_PROTOCOL_NAME_LENGTH`).
pub const MAX_PROTOCOL_NAME_LEN: usize = 100;

impl Protocols {
    /// True if `proto` version `version` is listed.
    pub fn supports(&self, proto: &str, version: u32) -> bool {
        self.map
            .get(proto)
            .is_some_and(|r| r.iter().any(|&(a, b)| a <= version && version <= b))
    }
    /// Highest listed version of `proto`.
    pub fn max_version(&self, proto: &str) -> Option<u32> {
        self.map
            .get(proto)
            .and_then(|r| r.iter().map(|&(_, b)| b).max())
    }
    /// Listed version ranges for `proto` (inclusive).
    pub fn ranges(&self, proto: &str) -> &[(u32, u32)] {
        self.map.get(proto).map(|v| v.as_slice()).unwrap_or(&[])
    }
    /// All protocol names listed.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.map.keys().map(|s| s.as_str())
    }
    /// Protocols in `required` that `self` does not fully support,
    /// as (name, version) pairs.
    pub fn missing_from(&self, required: &Protocols) -> Vec<(String, u32)> {
        let mut out = Vec::new();
        for (name, ranges) in &required.map {
            for &(a, b) in ranges {
                for v in a..=b.min(a.saturating_add(64)) {
                    if !self.supports(name, v) {
                        out.push((name.clone(), v));
                    }
                }
            }
        }
        out
    }
}

impl fmt::Display for Protocols {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        for (name, ranges) in &self.map {
            if !first {
                f.write_str(" ")?;
            }
            first = false;
            let r: Vec<String> = ranges
                .iter()
                .map(|&(a, b)| {
                    if a == b {
                        a.to_string()
                    } else {
                        format!("{a}-{b}")
                    }
                })
                .collect();
            write!(f, "{name}={}", r.join(","))?;
        }
        Ok(())
    }
}

impl fmt::Debug for Protocols {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Protocols({self})")
    }
}

impl FromStr for Protocols {
    type Err = ValueParseError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut map: BTreeMap<String, Vec<(u32, u32)>> = BTreeMap::new();
        for ent in s.split_ascii_whitespace() {
            if map.len() >= MAX_PROTOCOL_NAMES {
                return Err(perr("protocols", "too many protocol names"));
            }
            let (name, vers) = ent
                .split_once('=')
                .ok_or_else(|| perr("protocols", format!("no '=' in {ent:?}")))?;
            // As tor and Arti: 1 to 100 characters, letters, digits, '-'.
            if name.is_empty()
                || name.len() > MAX_PROTOCOL_NAME_LEN
                || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
            {
                return Err(perr("protocols", format!("bad name {name:?}")));
            }
            let mut ranges = Vec::new();
            if !vers.is_empty() {
                for item in vers.split(',') {
                    if ranges.len() >= 64 {
                        return Err(perr("protocols", "too many ranges"));
                    }
                    let (a, b) = item.split_once('-').unwrap_or((item, item));
                    let a: u32 = a
                        .parse()
                        .map_err(|_| perr("protocols", format!("bad version {a:?}")))?;
                    let b: u32 = b
                        .parse()
                        .map_err(|_| perr("protocols", format!("bad version {b:?}")))?;
                    if a > b || b > 63 {
                        return Err(perr("protocols", format!("bad range {item:?}")));
                    }
                    // Version 0 means nothing and is ignored, as tor
                    // does; Arti refuses it in a consensus, so it must
                    // not survive a re-encoding.
                    if b > 0 {
                        ranges.push((a.max(1), b));
                    }
                }
            }
            map.entry(name.to_string()).or_default().extend(ranges);
        }
        // Canonical form: sorted, overlapping and adjacent ranges merged
        // (a name may be listed more than once). Versions are at most 63,
        // so an entry ends with at most 32 ranges and prints to a list
        // that parses back to the same value.
        for ranges in map.values_mut() {
            ranges.sort_unstable();
            let mut merged: Vec<(u32, u32)> = Vec::with_capacity(ranges.len());
            for &(a, b) in ranges.iter() {
                match merged.last_mut() {
                    Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
                    _ => merged.push((a, b)),
                }
            }
            *ranges = merged;
        }
        Ok(Protocols { map })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn flags_roundtrip() {
        let f: RelayFlags = "Exit Fast Guard Running Valid Sybil".parse().unwrap();
        assert!(f.contains(RelayFlags::EXIT.with(RelayFlags::GUARD)));
        assert!(!f.contains(RelayFlags::STABLE));
        assert_eq!(f.to_string(), "Exit Fast Guard Running Valid");
    }

    #[test]
    fn policy() {
        let p: PortPolicy = "accept 80,443".parse().unwrap();
        assert!(p.allows_port(80) && p.allows_port(443) && !p.allows_port(22));
        assert_eq!(p.to_string(), "accept 80,443");
        let r: PortPolicy = "reject 25,119,135-139,445".parse().unwrap();
        assert!(!r.allows_port(25) && !r.allows_port(137) && r.allows_port(80));
        assert!(r.allows_port(65535) && !r.allows_port(0));
        assert_eq!(r.to_string(), "reject 25,119,135-139,445");
        let none: PortPolicy = "reject 1-65535".parse().unwrap();
        assert!(!none.allows_some_port());
        assert_eq!(none, PortPolicy::reject_all());
        assert_eq!(
            "accept 1-65535".parse::<PortPolicy>().unwrap(),
            PortPolicy::accept_all()
        );
        assert!("accept 0".parse::<PortPolicy>().is_err());
        assert!("accept 5-3".parse::<PortPolicy>().is_err());
        assert!("allow 5".parse::<PortPolicy>().is_err());
        assert_eq!(
            PortPolicy::accepting(&[(1, 5), (6, 9), (20, 30), (25, 40)]).accepted_ranges(),
            &[(1, 9), (20, 40)]
        );
    }

    #[test]
    fn protocols() {
        let p: Protocols = "Conflux=1 Cons=1-2 FlowCtrl=1-2 Link=3-5 Relay=2-6"
            .parse()
            .unwrap();
        assert!(p.supports("Link", 5) && !p.supports("Link", 6) && p.supports("Relay", 3));
        assert_eq!(p.max_version("Relay"), Some(6));
        assert_eq!(
            p.to_string(),
            "Conflux=1 Cons=1-2 FlowCtrl=1-2 Link=3-5 Relay=2-6"
        );
        let req: Protocols = "Link=4 Relay=2 Desc=2".parse().unwrap();
        assert_eq!(p.missing_from(&req), vec![("Desc".to_string(), 2)]);
        assert!("Link=5-3".parse::<Protocols>().is_err());
        // Repeated names and overlapping ranges are merged (found by the
        // netdoc_types fuzz target: 65 ranges printed, then refused).
        let many: String = (0..70).map(|_| "Desc=1-2 ").collect();
        let p: Protocols = format!("{many}Desc=4,3,9-10 Link=5,4").parse().unwrap();
        assert_eq!(p.to_string(), "Desc=1-4,9-10 Link=4-5");
        assert_eq!(p.to_string().parse::<Protocols>().unwrap(), p);
        assert!("Link".parse::<Protocols>().is_err());
        // Version 0 is dropped and leading zeros vanish: the canonical
        // text is what Arti's strict parser accepts.
        let z: Protocols = "Relay=0-4 Link=0 Cons=02".parse().unwrap();
        assert_eq!(z.to_string(), "Cons=2 Link= Relay=1-4");
        assert!(!z.supports("Relay", 0) && z.supports("Relay", 1));
        assert!(
            format!("{}=1", "a".repeat(100))
                .parse::<Protocols>()
                .is_ok()
        );
        assert!(
            format!("{}=1", "a".repeat(101))
                .parse::<Protocols>()
                .is_err()
        );
        assert!("Link=99".parse::<Protocols>().is_err());
    }
}
