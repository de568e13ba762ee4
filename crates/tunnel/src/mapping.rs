//! The optimistic DNS table: hostname <-> synthetic address.
//!
//! A query for a name is answered at once with an address from a private
//! range; a TCP flow to that address later carries the name in BEGIN, so
//! the name is only ever resolved by the exit.
//!
//! Timing (every method takes `now`, so tests drive the clock):
//! - a mapping lives [`MappingConfig::ttl`] (60 s) after its last query;
//!   a new query for the name within that time gets the same address and
//!   renews it;
//! - it is purged [`MappingConfig::purge_after`] (70 s) after its last
//!   query or the end of its last flow: the 10 s past the TTL cover an
//!   application that cached an answer (TTL 10 s) given just before expiry.
//!   Between the two the mapping is *expired*: it still serves flows and
//!   queries (which renew it), but it is the first to go when the table is
//!   full;
//! - a mapping with a flow open is never purged; the end of its last flow
//!   counts as a use;
//! - the table holds at most [`MappingConfig::max_entries`] names. When full
//!   it purges what is due, then evicts the oldest expired mapping without
//!   flows; with none, a new name is refused ([`MappingError::Full`]);
//! - an address is handed out again only after its mapping is gone, and
//!   the allocator walks the whole range before coming back to it.

use std::collections::HashMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::time::{Duration, Instant};

/// A CIDR range of synthetic addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddrRange {
    base: IpAddr,
    prefix: u8,
}

/// A range that cannot hold synthetic addresses.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    /// Not `address/prefix`.
    #[error("not an address/prefix range")]
    Syntax,
    /// Too small to be useful (fewer than 4 addresses) or too large to be
    /// private (an IPv4 prefix shorter than /8, an IPv6 one shorter than
    /// /16).
    #[error("prefix length out of range")]
    Prefix,
    /// Host bits set in the base address.
    #[error("host bits set in the base address")]
    HostBits,
}

fn to_u128(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

impl AddrRange {
    /// The range `base/prefix`.
    pub fn new(base: IpAddr, prefix: u8) -> Result<Self, RangeError> {
        let (min, max) = if base.is_ipv4() { (8, 30) } else { (16, 126) };
        if !(min..=max).contains(&prefix) {
            return Err(RangeError::Prefix);
        }
        let r = AddrRange { base, prefix };
        if to_u128(base) & (r.size() - 1) != 0 {
            return Err(RangeError::HostBits);
        }
        Ok(r)
    }

    fn bits(&self) -> u32 {
        if self.base.is_ipv4() { 32 } else { 128 }
    }

    /// Number of addresses in the range.
    pub fn size(&self) -> u128 {
        1u128 << (self.bits() - u32::from(self.prefix))
    }

    /// Whether `ip` is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.base.is_ipv4()
            && to_u128(ip) & !(self.size() - 1) == to_u128(self.base)
    }

    /// The address at offset `off` (taken modulo the size).
    fn nth(&self, off: u128) -> IpAddr {
        let v = to_u128(self.base) | (off & (self.size() - 1));
        match self.base {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(u32::try_from(v).unwrap_or(0))),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(v)),
        }
    }

    /// Whether offset `off` may be handed out: not the network address,
    /// nor (IPv4) the broadcast address.
    fn usable(&self, off: u128) -> bool {
        off != 0 && (self.base.is_ipv6() || off != self.size() - 1)
    }
}

impl FromStr for AddrRange {
    type Err = RangeError;
    fn from_str(s: &str) -> Result<Self, RangeError> {
        let (a, p) = s.split_once('/').ok_or(RangeError::Syntax)?;
        let base: IpAddr = a.parse().map_err(|_| RangeError::Syntax)?;
        let prefix: u8 = p.parse().map_err(|_| RangeError::Syntax)?;
        AddrRange::new(base, prefix)
    }
}

impl fmt::Display for AddrRange {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.base, self.prefix)
    }
}

/// The default IPv4 range: 198.18.0.0/15 (RFC 2544's benchmarking block;
/// see docs/ARCHITECTURE.md for why not 10/8 or 100.64/10).
pub const DEFAULT_V4: &str = "198.18.0.0/15";
/// The default IPv6 range: a fixed ULA /64 (RFC 4193).
pub const DEFAULT_V6: &str = "fd6f:6e69:6f6e:7475::/64";

/// The table's configuration.
#[derive(Debug, Clone)]
pub struct MappingConfig {
    /// Where IPv4 synthetic addresses come from.
    pub v4: AddrRange,
    /// Where IPv6 ones come from; `None`: AAAA queries get no address.
    pub v6: Option<AddrRange>,
    /// Addresses in the ranges never handed out (the resolver's own).
    pub reserved: Vec<IpAddr>,
    /// How long a mapping lives after its last query.
    pub ttl: Duration,
    /// When it is purged after its last query or flow.
    pub purge_after: Duration,
    /// The most names held.
    pub max_entries: usize,
}

impl Default for MappingConfig {
    fn default() -> Self {
        MappingConfig {
            v4: DEFAULT_V4.parse().unwrap_or(AddrRange {
                base: IpAddr::V4(Ipv4Addr::new(198, 18, 0, 0)),
                prefix: 15,
            }),
            v6: DEFAULT_V6.parse().ok(),
            reserved: Vec::new(),
            ttl: Duration::from_secs(60),
            purge_after: Duration::from_secs(70),
            max_entries: 4096,
        }
    }
}

/// Why no address was handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MappingError {
    /// The table is full of live mappings.
    #[error("mapping table full")]
    Full,
    /// Every address of the range is in use.
    #[error("synthetic address range exhausted")]
    Exhausted,
    /// AAAA asked but no IPv6 range configured.
    #[error("no IPv6 range configured")]
    NoV6,
}

/// Address family of a query.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// A.
    V4,
    /// AAAA.
    V6,
}

#[derive(Debug)]
struct Entry {
    v4: Option<IpAddr>,
    v6: Option<IpAddr>,
    last_query: Instant,
    last_use: Instant,
    flows: u32,
}

impl Entry {
    fn purge_due(&self, now: Instant, cfg: &MappingConfig) -> bool {
        self.flows == 0 && now.saturating_duration_since(self.last_use) >= cfg.purge_after
    }
    fn expired(&self, now: Instant, cfg: &MappingConfig) -> bool {
        self.flows == 0 && now.saturating_duration_since(self.last_query) >= cfg.ttl
    }
}

/// The table. See the module documentation for its rules.
#[derive(Debug)]
pub struct MappingTable {
    cfg: MappingConfig,
    by_name: HashMap<String, Entry>,
    by_addr: HashMap<IpAddr, String>,
    cursor_v4: u128,
    cursor_v6: u128,
}

impl MappingTable {
    /// An empty table.
    pub fn new(cfg: MappingConfig) -> Self {
        MappingTable {
            cfg,
            by_name: HashMap::new(),
            by_addr: HashMap::new(),
            cursor_v4: 0,
            cursor_v6: 0,
        }
    }

    /// The configuration.
    pub fn config(&self) -> &MappingConfig {
        &self.cfg
    }

    /// Whether `ip` is in one of the synthetic ranges.
    pub fn is_synthetic(&self, ip: IpAddr) -> bool {
        self.cfg.v4.contains(ip) || self.cfg.v6.is_some_and(|r| r.contains(ip))
    }

    /// Number of mappings held, after purging what is due at `now`.
    pub fn len(&mut self, now: Instant) -> usize {
        self.purge(now);
        self.by_name.len()
    }

    /// Whether the table is empty at `now`.
    pub fn is_empty(&mut self, now: Instant) -> bool {
        self.len(now) == 0
    }

    /// Remove every mapping due for purge at `now`; how many went.
    pub fn purge(&mut self, now: Instant) -> usize {
        let due: Vec<String> = self
            .by_name
            .iter()
            .filter(|(_, e)| e.purge_due(now, &self.cfg))
            .map(|(n, _)| n.clone())
            .collect();
        for n in &due {
            self.remove(n);
        }
        due.len()
    }

    fn remove(&mut self, name: &str) {
        if let Some(e) = self.by_name.remove(name) {
            for a in [e.v4, e.v6].into_iter().flatten() {
                self.by_addr.remove(&a);
            }
        }
    }

    /// Drop the mapping of `name` if it is due at `now`.
    fn purge_one(&mut self, now: Instant, name: &str) {
        if self
            .by_name
            .get(name)
            .is_some_and(|e| e.purge_due(now, &self.cfg))
        {
            self.remove(name);
        }
    }

    /// The synthetic address of `name` (lower-case, no trailing dot) for
    /// a query of `family` at `now`: the mapping's if there is one (it is
    /// renewed), else a new one.
    pub fn query(
        &mut self,
        now: Instant,
        name: &str,
        family: Family,
    ) -> Result<IpAddr, MappingError> {
        self.purge_one(now, name);
        let range = match family {
            Family::V4 => self.cfg.v4,
            Family::V6 => self.cfg.v6.ok_or(MappingError::NoV6)?,
        };
        if let Some(e) = self.by_name.get_mut(name) {
            e.last_query = now;
            e.last_use = e.last_use.max(now);
            let have = match family {
                Family::V4 => e.v4,
                Family::V6 => e.v6,
            };
            if let Some(a) = have {
                return Ok(a);
            }
        } else if self.by_name.len() >= self.cfg.max_entries {
            self.make_room(now)?;
        }
        let addr = self.allocate(now, range, family)?;
        let e = self.by_name.entry(name.to_owned()).or_insert(Entry {
            v4: None,
            v6: None,
            last_query: now,
            last_use: now,
            flows: 0,
        });
        match family {
            Family::V4 => e.v4 = Some(addr),
            Family::V6 => e.v6 = Some(addr),
        }
        self.by_addr.insert(addr, name.to_owned());
        Ok(addr)
    }

    /// Purge what is due; with no room still, evict the oldest expired
    /// mapping without flows; with none, `Full`.
    fn make_room(&mut self, now: Instant) -> Result<(), MappingError> {
        self.purge(now);
        if self.by_name.len() < self.cfg.max_entries {
            return Ok(());
        }
        let oldest = self
            .by_name
            .iter()
            .filter(|(_, e)| e.expired(now, &self.cfg))
            .min_by_key(|(_, e)| e.last_use)
            .map(|(n, _)| n.clone())
            .ok_or(MappingError::Full)?;
        self.remove(&oldest);
        Ok(())
    }

    /// The next free address of `range` (next fit: the cursor moves on,
    /// so a freed address comes back only after the rest of the range).
    fn allocate(
        &mut self,
        now: Instant,
        range: AddrRange,
        family: Family,
    ) -> Result<IpAddr, MappingError> {
        // At most `by_addr.len()` addresses are taken, plus the reserved
        // ones and the two unusable: past that many tries one is free.
        let bound = self
            .by_addr
            .len()
            .saturating_add(self.cfg.reserved.len())
            .saturating_add(3);
        let tries = range.size().min(u128::try_from(bound).unwrap_or(u128::MAX));
        let mut purged = false;
        loop {
            let cursor = match family {
                Family::V4 => &mut self.cursor_v4,
                Family::V6 => &mut self.cursor_v6,
            };
            for _ in 0..tries {
                *cursor = cursor.wrapping_add(1) & (range.size() - 1);
                let off = *cursor;
                let a = range.nth(off);
                if range.usable(off)
                    && !self.by_addr.contains_key(&a)
                    && !self.cfg.reserved.contains(&a)
                {
                    return Ok(a);
                }
            }
            // A small range may be full of mappings due for purge.
            if purged || self.purge(now) == 0 {
                return Err(MappingError::Exhausted);
            }
            purged = true;
        }
    }

    /// The name behind synthetic address `ip` at `now`, if it is mapped.
    pub fn name_of(&mut self, now: Instant, ip: IpAddr) -> Option<&str> {
        let name = self.by_addr.get(&ip)?.clone();
        self.purge_one(now, &name);
        self.by_addr.get(&ip).map(String::as_str)
    }

    /// The current address of `name` for `family`, without renewing it.
    pub fn addr_of(&mut self, now: Instant, name: &str, family: Family) -> Option<IpAddr> {
        self.purge_one(now, name);
        let e = self.by_name.get(name)?;
        match family {
            Family::V4 => e.v4,
            Family::V6 => e.v6,
        }
    }

    /// A flow to `ip` opens: its mapping stays until the flow ends. The
    /// name, or `None` for an address not mapped (the flow must then be
    /// refused: fail closed).
    pub fn flow_opened(&mut self, now: Instant, ip: IpAddr) -> Option<String> {
        let name = self.name_of(now, ip)?.to_owned();
        let e = self.by_name.get_mut(&name)?;
        e.flows = e.flows.saturating_add(1);
        e.last_use = e.last_use.max(now);
        Some(name)
    }

    /// A flow to `ip` ended: the mapping's purge clock restarts at `now`.
    pub fn flow_closed(&mut self, now: Instant, ip: IpAddr) {
        if let Some(name) = self.by_addr.get(&ip)
            && let Some(e) = self.by_name.get_mut(name)
        {
            e.flows = e.flows.saturating_sub(1);
            e.last_use = e.last_use.max(now);
        }
    }
}

#[cfg(test)]
mod tests;
