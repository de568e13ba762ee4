//! DNS: the wire codec ([`wire`]) and the tunnel's resolver.
//!
//! The resolver answers at once: a name gets a synthetic address from the
//! [`MappingTable`] (optimistic mode), and the flow to that address later
//! carries the name in BEGIN. In fallback mode it asks the network
//! instead (the driver sends RESOLVE and calls [`answer_resolved`]);
//! `.onion` names are always mapped, as no exit can resolve them.

pub mod wire;

use std::net::IpAddr;
use std::time::Instant;

use crate::counters::{self, Counters, DropReason};
use crate::mapping::{Family, MappingError, MappingTable};
use wire::{Query, Rcode, TYPE_A, TYPE_AAAA};

/// TTL of the records the resolver gives out, in seconds. Short (the
/// value the issue cites for OnionMasq and Orbot): an application asks
/// again soon, which renews the mapping, and a cached answer never
/// outlives the mapping's 10 s grace past its 60 s TTL.
pub const ANSWER_TTL: u32 = 10;

/// How names are resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DnsMode {
    /// Answer with synthetic addresses at once.
    #[default]
    Optimistic,
    /// Resolve through the network (RESOLVE), except `.onion` names.
    Fallback,
}

/// What to do with a DNS datagram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DnsAction {
    /// Send this answer back.
    Reply(Vec<u8>),
    /// Resolve `name` through the network, then answer with
    /// [`answer_resolved`] (fallback mode).
    Resolve {
        /// The query, to answer.
        query: Query,
        /// The name to resolve.
        name: String,
    },
    /// No answer (a response, or no header; counted).
    Drop,
}

/// Whether `name` (lower case) is an onion service's.
pub fn is_onion(name: &str) -> bool {
    name == "onion" || name.ends_with(".onion")
}

/// Answer one query datagram at `now`.
pub fn handle(
    table: &mut MappingTable,
    mode: DnsMode,
    now: Instant,
    datagram: &[u8],
    c: &mut Counters,
) -> DnsAction {
    let q = match wire::parse_query(datagram) {
        Ok(q) => q,
        Err(wire::WireError::Malformed) => {
            return match wire::formerr(datagram) {
                Some(r) => reply(c, r),
                None => dropped(c),
            };
        }
        Err(_) => return dropped(c),
    };
    if q.opcode != 0 || q.qclass != wire::CLASS_IN {
        return reply(c, wire::build_answer(&q, Rcode::NotImp, &[], ANSWER_TTL));
    }
    if q.hostname() == Some("") {
        // The root: it exists, with no address.
        return reply(c, wire::build_answer(&q, Rcode::NoError, &[], ANSWER_TTL));
    }
    let Some(name) = q
        .hostname()
        .filter(|n| valid_hostname(n))
        .map(str::to_owned)
    else {
        // Bytes no hostname has: it could not travel in BEGIN.
        return reply(c, wire::build_answer(&q, Rcode::NxDomain, &[], ANSWER_TTL));
    };
    let family = match q.qtype {
        TYPE_A => Family::V4,
        TYPE_AAAA => Family::V6,
        // Any other type (MX, TXT, HTTPS, ...): the name exists, with no
        // such record, as a resolver that cannot look would say.
        _ => return reply(c, wire::build_answer(&q, Rcode::NoError, &[], ANSWER_TTL)),
    };
    if mode == DnsMode::Fallback && !is_onion(&name) {
        return DnsAction::Resolve { query: q, name };
    }
    let known = table.addr_of(now, &name, family).is_some();
    match table.query(now, &name, family) {
        Ok(addr) => {
            if !known {
                counters::inc(&mut c.dns_mappings);
            }
            reply(
                c,
                wire::build_answer(&q, Rcode::NoError, &[addr], ANSWER_TTL),
            )
        }
        // AAAA with no IPv6 range: no such record, so the application
        // uses A.
        Err(MappingError::NoV6) => {
            reply(c, wire::build_answer(&q, Rcode::NoError, &[], ANSWER_TTL))
        }
        Err(MappingError::Full | MappingError::Exhausted) => {
            counters::inc(&mut c.dns_refused);
            reply(c, wire::build_answer(&q, Rcode::ServFail, &[], 0))
        }
    }
}

/// The answer to `query` once the network resolved it (fallback mode):
/// `None` for a failed resolution (NXDOMAIN), else the addresses of the
/// query's family (possibly none).
pub fn answer_resolved(query: &Query, addrs: Option<&[IpAddr]>, c: &mut Counters) -> Vec<u8> {
    counters::inc(&mut c.dns_answered);
    match addrs {
        Some(a) => wire::build_answer(query, Rcode::NoError, a, ANSWER_TTL),
        None => wire::build_answer(query, Rcode::NxDomain, &[], ANSWER_TTL),
    }
}

/// SERVFAIL for `query`: the network could not be asked (fallback mode).
pub fn answer_failed(query: &Query, c: &mut Counters) -> Vec<u8> {
    counters::inc(&mut c.dns_refused);
    wire::build_answer(query, Rcode::ServFail, &[], 0)
}

/// A name that can go in BEGIN: labels of letters, digits, '-' and '_'.
fn valid_hostname(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= wire::MAX_NAME_LEN
        && name.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= wire::MAX_LABEL_LEN
                && l.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

fn reply(c: &mut Counters, r: Vec<u8>) -> DnsAction {
    counters::inc(&mut c.dns_answered);
    DnsAction::Reply(r)
}

fn dropped(c: &mut Counters) -> DnsAction {
    c.drop(DropReason::Dns);
    DnsAction::Drop
}

#[cfg(test)]
mod tests;
