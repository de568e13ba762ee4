//! HSFETCH (control-spec §3.26) and HSPOST (§3.27): fetch an onion
//! service's descriptor from its HSDirs, or upload one, with the argument
//! checks, order of checks, error codes and texts of stock tor 0.4.9
//! (`handle_control_hsfetch`, `handle_control_hspost`,
//! `control_cmd_parse_args`). Only v3 addresses exist (56 characters,
//! no `.onion`, either case). Parsing only: the fetch or upload itself,
//! and whether a `SERVER=` names a relay, is the [`Backend`]'s business.

use super::reply::Reply;
use super::session::{Backend, Outcome, out};
use super::syntax::{self, KvFlags, SyntaxError, positional};
use crate::addr::parse_onion_v3;

/// Most `SERVER=` arguments one command may carry (tor has no limit; each
/// one is a request to an HSDir).
pub const MAX_SERVERS: usize = 64;

/// A parsed HSFETCH.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HsFetch {
    /// The address in lower case, without `.onion` (as events print it).
    pub address: String,
    /// The service's identity key.
    pub key: [u8; 32],
    /// `SERVER=` values as given (each known to the backend): the HSDirs
    /// to ask instead of one of the responsible ones.
    pub servers: Vec<String>,
}

/// A parsed HSPOST.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HsPost {
    /// `HSADDRESS=` in lower case.
    pub address: String,
    /// The service's identity key.
    pub key: [u8; 32],
    /// `SERVER=` values as given: the HSDirs to upload to instead of the
    /// responsible ones.
    pub servers: Vec<String>,
    /// The descriptor (the data block, lines ending in LF).
    pub body: Vec<u8>,
}

/// tor's `hs_address_is_valid`: a well-formed v3 address without
/// `.onion`; the identity key.
pub fn valid_address(s: &str) -> Option<[u8; 32]> {
    parse_onion_v3(s).ok()
}

fn bad_args(kw: &str, e: &SyntaxError) -> Outcome {
    // tor names the command as the controller spelled it.
    out(
        Reply::single(512, &format!("Bad arguments to {kw}: {e}")),
        false,
    )
}

fn server_not_found(server: &str) -> Outcome {
    out(
        Reply::single(552, &format!("Server \"{server}\" not found")),
        false,
    )
}

fn too_many_servers() -> Outcome {
    out(Reply::single(552, "Too many SERVER arguments"), false)
}

/// Parse HSFETCH (`kw` as sent); servers are checked with the backend in
/// the order given. The error is the reply tor gives.
pub fn parse_hsfetch(kw: &str, args: &str, b: &mut dyn Backend) -> Result<HsFetch, Outcome> {
    let (pos, rest) = positional(args, 1, 1, true).map_err(|e| bad_args(kw, &e))?;
    let kws = match rest {
        Some(r) => syntax::parse_kvline(r, KvFlags::default())
            .and_then(|k| syntax::check_keywords(&k, &["SERVER"]).map(|()| k))
            .map_err(|e| bad_args(kw, &e))?,
        None => Vec::new(),
    };
    let arg = pos.first().copied().unwrap_or("");
    let Some(key) = valid_address(arg) else {
        return Err(out(
            Reply::single(513, &format!("Invalid argument \"{arg}\"")),
            false,
        ));
    };
    let mut servers = Vec::new();
    for k in &kws {
        let s = k.value_str();
        if !b.hs_server_known(&s) {
            return Err(server_not_found(&s));
        }
        if servers.len() >= MAX_SERVERS {
            return Err(too_many_servers());
        }
        servers.push(s);
    }
    Ok(HsFetch {
        address: arg.to_ascii_lowercase(),
        key,
        servers,
    })
}

/// Parse `+HSPOST` (`kw` as sent) and its data block. Keywords are
/// checked in the order given, as tor does. HSPOST without `HSADDRESS=`
/// (a v2 descriptor once) gets `512 Missing HSADDRESS`: tor 0.4.9 sends
/// no reply at all then, which leaves the controller waiting.
pub fn parse_hspost(
    kw: &str,
    args: &str,
    data: Option<&[u8]>,
    b: &mut dyn Backend,
) -> Result<HsPost, Outcome> {
    let body = match data {
        Some(d) if !d.is_empty() => d,
        _ => return Err(bad_args(kw, &SyntaxError::EmptyBody)),
    };
    let (_, rest) = positional(args, 0, 0, true).map_err(|e| bad_args(kw, &e))?;
    let kws = match rest {
        Some(r) => syntax::parse_kvline(r, KvFlags::default())
            .and_then(|k| syntax::check_keywords(&k, &["SERVER", "HSADDRESS"]).map(|()| k))
            .map_err(|e| bad_args(kw, &e))?,
        None => Vec::new(),
    };
    let mut servers = Vec::new();
    let mut address = None;
    for k in &kws {
        let v = k.value_str();
        if k.key.eq_ignore_ascii_case("SERVER") {
            if !b.hs_server_known(&v) {
                return Err(server_not_found(&v));
            }
            if servers.len() >= MAX_SERVERS {
                return Err(too_many_servers());
            }
            servers.push(v);
        } else {
            let Some(key) = valid_address(&v) else {
                return Err(out(Reply::single(512, "Malformed onion address"), false));
            };
            address = Some((v.to_ascii_lowercase(), key));
        }
    }
    let Some((address, key)) = address else {
        return Err(out(Reply::single(512, "Missing HSADDRESS"), false));
    };
    Ok(HsPost {
        address,
        key,
        servers,
        body: body.to_vec(),
    })
}

pub(crate) fn hsfetch(kw: &str, args: &str, b: &mut dyn Backend) -> Outcome {
    let req = match parse_hsfetch(kw, args, b) {
        Ok(r) => r,
        Err(o) => return o,
    };
    match b.hs_fetch(&req) {
        Ok(()) => out(Reply::ok(), false),
        Err(e) => out(Reply::single(e.code, &e.msg), false),
    }
}

pub(crate) fn hspost(kw: &str, args: &str, data: Option<&[u8]>, b: &mut dyn Backend) -> Outcome {
    let req = match parse_hspost(kw, args, data, b) {
        Ok(r) => r,
        Err(o) => return o,
    };
    match b.hs_post(req) {
        Ok(()) => out(Reply::ok(), false),
        Err(e) => out(Reply::single(e.code, &e.msg), false),
    }
}
