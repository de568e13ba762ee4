//! The DNS wire codec (RFC 1035 §4): the one in the project. The exit's
//! nameserver client builds queries and reads A/AAAA answers with it
//! (`onionmix-node`'s `relay::dns`); the tunnel's resolver reads queries
//! and builds answers with it.
//!
//! Only what those two need: a header, one question, A/AAAA records.
//! Every length is checked; compression pointers are followed only in
//! answers, and only a bounded number of times.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Length of the fixed DNS header.
pub const HEADER_LEN: usize = 12;
/// Longest name in text form (RFC 1035 §2.3.4 allows 255 bytes on the
/// wire, which is 253 characters without the trailing dot).
pub const MAX_NAME_LEN: usize = 253;
/// Longest label.
pub const MAX_LABEL_LEN: usize = 63;

/// Record type A.
pub const TYPE_A: u16 = 1;
/// Record type AAAA.
pub const TYPE_AAAA: u16 = 28;
/// Class IN.
pub const CLASS_IN: u16 = 1;

/// Response codes (RFC 1035 §4.1.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Rcode {
    /// No error.
    NoError = 0,
    /// The query could not be interpreted.
    FormErr = 1,
    /// The server could not process the query.
    ServFail = 2,
    /// The name does not exist.
    NxDomain = 3,
    /// The kind of query is not supported.
    NotImp = 4,
    /// Refused by policy.
    Refused = 5,
}

/// Why a datagram is not a query we can answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// Shorter than a header: nothing to answer (no ID to echo).
    #[error("shorter than a DNS header")]
    Short,
    /// A response, not a query: never answered (no loops).
    #[error("not a query")]
    NotQuery,
    /// A header but no readable question: answer FORMERR.
    #[error("malformed question")]
    Malformed,
}

/// One query, as the resolver reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    /// Message ID, echoed in the answer.
    pub id: u16,
    /// Opcode (0 = standard query).
    pub opcode: u8,
    /// Recursion desired, echoed.
    pub rd: bool,
    /// The name asked, lower-cased, without the trailing dot; a byte that
    /// is not printable ASCII (or is a '.' inside a label) reads as '?'
    /// and makes the name not a [`Query::hostname`].
    pub name: String,
    /// Whether every byte of the name was printable ASCII.
    printable: bool,
    /// The question type.
    pub qtype: u16,
    /// The question class.
    pub qclass: u16,
    /// The question exactly as it was on the wire (name, type, class).
    question: Vec<u8>,
}

impl Query {
    /// The name, if it can be a hostname's text (every byte printable).
    pub fn hostname(&self) -> Option<&str> {
        self.printable.then_some(self.name.as_str())
    }

    /// Where the question section ends in the query.
    pub fn question_end(&self) -> usize {
        HEADER_LEN.saturating_add(self.question.len())
    }
}

fn be16(b: &[u8], i: usize) -> Option<u16> {
    let hi = *b.get(i)?;
    let lo = *b.get(i.checked_add(1)?)?;
    Some(u16::from_be_bytes([hi, lo]))
}

/// Read the question of a query.
///
/// `Short` and `NotQuery` are dropped by a server; `Malformed` is
/// answered with [`formerr`]. A question must hold exactly one
/// uncompressed name; records in the other sections (an EDNS OPT record,
/// say) are ignored.
pub fn parse_query(q: &[u8]) -> Result<Query, WireError> {
    let header = q.get(..HEADER_LEN).ok_or(WireError::Short)?;
    let flags = header.get(2).copied().ok_or(WireError::Short)?;
    if flags & 0x80 != 0 {
        return Err(WireError::NotQuery);
    }
    let id = be16(header, 0).ok_or(WireError::Short)?;
    let qdcount = be16(header, 4).ok_or(WireError::Short)?;
    if qdcount != 1 {
        return Err(WireError::Malformed);
    }
    let mut i = HEADER_LEN;
    let mut text = String::new();
    let mut printable = true;
    loop {
        let len = usize::from(*q.get(i).ok_or(WireError::Malformed)?);
        i = i.checked_add(1).ok_or(WireError::Malformed)?;
        if len == 0 {
            break;
        }
        // Compression pointers (0xC0) and the reserved label types
        // (0x40, 0x80) have no place in a lone question.
        if len > MAX_LABEL_LEN {
            return Err(WireError::Malformed);
        }
        let end = i.checked_add(len).ok_or(WireError::Malformed)?;
        let label = q.get(i..end).ok_or(WireError::Malformed)?;
        if !text.is_empty() {
            text.push('.');
        }
        for &c in label {
            if c.is_ascii_graphic() && c != b'.' {
                text.push(char::from(c.to_ascii_lowercase()));
            } else {
                printable = false;
                text.push('?');
            }
        }
        if text.len() > MAX_NAME_LEN {
            return Err(WireError::Malformed);
        }
        i = end;
    }
    let qtype = be16(q, i).ok_or(WireError::Malformed)?;
    let qclass =
        be16(q, i.checked_add(2).ok_or(WireError::Malformed)?).ok_or(WireError::Malformed)?;
    let qend = i.checked_add(4).ok_or(WireError::Malformed)?;
    let question = q
        .get(HEADER_LEN..qend)
        .ok_or(WireError::Malformed)?
        .to_vec();
    Ok(Query {
        id,
        opcode: (flags >> 3) & 0x0f,
        rd: flags & 0x01 != 0,
        name: text,
        printable,
        qtype,
        qclass,
        question,
    })
}

fn response_header(
    out: &mut Vec<u8>,
    id: u16,
    opcode: u8,
    rd: bool,
    rcode: Rcode,
    qd: u16,
    an: u16,
) {
    out.extend_from_slice(&id.to_be_bytes());
    // QR, the opcode, RD echoed; RA set: we are the application's
    // recursive resolver.
    out.push(0x80 | ((opcode & 0x0f) << 3) | u8::from(rd));
    out.push(0x80 | rcode as u8);
    out.extend_from_slice(&qd.to_be_bytes());
    out.extend_from_slice(&an.to_be_bytes());
    out.extend_from_slice(&[0, 0, 0, 0]);
}

/// The answer to `q`: `rcode` and the addresses of the records (`ttl`
/// seconds each). Records are written for the question's own name (a
/// pointer to it); an address of the other family than the question's
/// type is skipped, and so is everything past 32 records.
pub fn build_answer(q: &Query, rcode: Rcode, addrs: &[IpAddr], ttl: u32) -> Vec<u8> {
    let records: Vec<&IpAddr> = addrs
        .iter()
        .filter(|a| match a {
            IpAddr::V4(_) => q.qtype == TYPE_A,
            IpAddr::V6(_) => q.qtype == TYPE_AAAA,
        })
        .take(32)
        .collect();
    let an = u16::try_from(records.len()).unwrap_or(0);
    let mut out = Vec::with_capacity(HEADER_LEN + q.question.len() + records.len() * 28);
    response_header(&mut out, q.id, q.opcode, q.rd, rcode, 1, an);
    out.extend_from_slice(&q.question);
    for a in records {
        out.extend_from_slice(&[0xc0, 0x0c]);
        let (t, data): (u16, Vec<u8>) = match a {
            IpAddr::V4(v4) => (TYPE_A, v4.octets().to_vec()),
            IpAddr::V6(v6) => (TYPE_AAAA, v6.octets().to_vec()),
        };
        out.extend_from_slice(&t.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&ttl.to_be_bytes());
        out.extend_from_slice(&u16::try_from(data.len()).unwrap_or(0).to_be_bytes());
        out.extend_from_slice(&data);
    }
    out
}

/// FORMERR for a datagram with a header but no readable question (no
/// question echoed). `None` when there is no header to answer.
pub fn formerr(q: &[u8]) -> Option<Vec<u8>> {
    let header = q.get(..HEADER_LEN)?;
    if header.get(2)? & 0x80 != 0 {
        return None;
    }
    let id = be16(header, 0)?;
    let flags = *header.get(2)?;
    let mut out = Vec::with_capacity(HEADER_LEN);
    response_header(
        &mut out,
        id,
        (flags >> 3) & 0x0f,
        flags & 1 != 0,
        Rcode::FormErr,
        0,
        0,
    );
    Some(out)
}

/// Build a recursive query for `name` of `qtype` (1 = A, 28 = AAAA).
/// `None` for a name that cannot be one (empty or long labels, longer than
/// [`MAX_NAME_LEN`]).
pub fn build_query(id: u16, name: &str, qtype: u16) -> Option<Vec<u8>> {
    let name = name.trim_end_matches('.');
    if name.len() > MAX_NAME_LEN {
        return None;
    }
    let mut q = Vec::with_capacity(HEADER_LEN + 6 + name.len());
    q.extend_from_slice(&id.to_be_bytes());
    q.extend_from_slice(&[0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0]);
    for label in name.split('.') {
        if label.is_empty() || label.len() > MAX_LABEL_LEN {
            return None;
        }
        q.push(u8::try_from(label.len()).ok()?);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&CLASS_IN.to_be_bytes());
    Some(q)
}

/// Skip a possibly compressed name at `i`; the index after it.
fn skip_name(r: &[u8], mut i: usize) -> Option<usize> {
    for _ in 0..128 {
        let len = *r.get(i)?;
        if len & 0xC0 == 0xC0 {
            return i.checked_add(2);
        }
        if len & 0xC0 != 0 {
            return None;
        }
        if len == 0 {
            return i.checked_add(1);
        }
        i = i.checked_add(1 + usize::from(len))?;
    }
    None
}

/// The addresses (A and AAAA records) in a response to query `id`; an
/// empty list for an error response. `None` when `r` is not a readable
/// response to `id`. At most 64 answer records are read.
pub fn parse_answer(r: &[u8], id: u16) -> Option<Vec<IpAddr>> {
    if be16(r, 0)? != id || r.get(2)? & 0x80 == 0 || r.len() < HEADER_LEN {
        return None;
    }
    if r.get(3)? & 0x0f != 0 {
        return Some(Vec::new());
    }
    let qd = be16(r, 4)?;
    let an = be16(r, 6)?;
    let mut i = HEADER_LEN;
    for _ in 0..qd {
        i = skip_name(r, i)?.checked_add(4)?;
    }
    let mut out = Vec::new();
    for _ in 0..an.min(64) {
        i = skip_name(r, i)?;
        let t = be16(r, i)?;
        let len = usize::from(be16(r, i.checked_add(8)?)?);
        let start = i.checked_add(10)?;
        let end = start.checked_add(len)?;
        let data = r.get(start..end)?;
        if let Ok(v4) = <[u8; 4]>::try_from(data)
            && t == TYPE_A
        {
            out.push(IpAddr::V4(Ipv4Addr::from(v4)));
        } else if let Ok(v6) = <[u8; 16]>::try_from(data)
            && t == TYPE_AAAA
        {
            out.push(IpAddr::V6(Ipv6Addr::from(v6)));
        }
        i = end;
    }
    Some(out)
}

#[cfg(test)]
mod tests;
