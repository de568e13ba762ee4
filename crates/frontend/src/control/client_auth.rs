//! Client-side onion-service authorization on the control port
//! (control-spec §3.30-3.32: ONION_CLIENT_AUTH_ADD, _REMOVE, _VIEW), with
//! stock tor 0.4.9's replies (`control_hs.c`). Parsing and formatting
//! only; the keys live in the [`Backend`].

use base64::Engine;
use base64::engine::DecodePaddingMode;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD};
use zeroize::Zeroizing;

use super::reply::Reply;
use super::session::{Backend, Outcome, bad_args, out};
use super::syntax::{self, KvFlags, quote, split_args};
use crate::addr::parse_onion_v3;

/// tor's `REND_CLIENTNAME_MAX_LEN`.
pub const MAX_CLIENT_NAME: usize = 16;

/// One client credential (ONION_CLIENT_AUTH_ADD's arguments, and what
/// VIEW lists).
#[derive(Clone)]
pub struct ClientAuthCred {
    /// The service's address without `.onion`.
    pub address: String,
    /// The x25519 secret key.
    pub secret: Zeroizing<[u8; 32]>,
    /// `Flags=Permanent`: kept in the client's auth directory.
    pub permanent: bool,
    /// `ClientName=`.
    pub name: Option<String>,
}

impl std::fmt::Debug for ClientAuthCred {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClientAuthCred")
            .field("permanent", &self.permanent)
            .finish()
    }
}

/// How ONION_CLIENT_AUTH_ADD went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthAdded {
    /// New credentials (250 OK).
    Added,
    /// Replaced earlier ones (251).
    Replaced,
}

fn one(code: u16, msg: &str) -> Outcome {
    out(Reply::single(code, msg), false)
}

fn invalid_addr(a: &str) -> Outcome {
    one(512, &format!("Invalid v3 address \"{a}\""))
}

fn decode_secret(blob: &str) -> Option<Zeroizing<[u8; 32]>> {
    let engine = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let v = Zeroizing::new(engine.decode(blob.as_bytes()).ok()?);
    let mut k = Zeroizing::new([0u8; 32]);
    if v.len() != k.len() {
        return None;
    }
    k.copy_from_slice(&v);
    Some(k)
}

/// Parse ONION_CLIENT_AUTH_ADD; the error is tor's reply.
pub fn parse_add(args: &str) -> Result<ClientAuthCred, Outcome> {
    let (pos, rest) = split_args(args, 2);
    let kws = syntax::parse_kvline(rest.unwrap_or(""), KvFlags::default())
        .map_err(|e| bad_args("ONION_CLIENT_AUTH_ADD", &e))?;
    let [addr, key] = pos.as_slice() else {
        return Err(one(512, "Incomplete ONION_CLIENT_AUTH_ADD command"));
    };
    if parse_onion_v3(addr).is_err() {
        return Err(invalid_addr(addr));
    }
    let parts: Vec<&str> = key.split(':').filter(|p| !p.is_empty()).collect();
    let [kind, blob] = parts.as_slice() else {
        return Err(one(512, "Invalid key type/blob"));
    };
    if !kind.eq_ignore_ascii_case("x25519") {
        return Err(one(552, &format!("Unrecognized key type \"{kind}\"")));
    }
    let secret =
        decode_secret(blob).ok_or_else(|| one(512, "Failed to decode x25519 private key"))?;
    if secret.iter().all(|b| *b == 0) {
        return Err(one(553, &format!("Invalid private key \"{blob}\"")));
    }
    let mut cred = ClientAuthCred {
        address: (*addr).to_string(),
        secret,
        permanent: false,
        name: None,
    };
    for kw in &kws {
        let v = kw.value_str();
        // tor matches "Flags" as a prefix of the keyword.
        if kw.key.len() >= 5
            && kw
                .key
                .get(..5)
                .is_some_and(|k| k.eq_ignore_ascii_case("Flags"))
        {
            let flags: Vec<&str> = v.split(',').filter(|f| !f.is_empty()).collect();
            if flags.is_empty() {
                return Err(one(512, "Invalid 'Flags' argument"));
            }
            for f in flags {
                if f.eq_ignore_ascii_case("Permanent") {
                    cred.permanent = true;
                } else {
                    return Err(one(
                        512,
                        &format!("Invalid 'Flags' argument: {}", quote(f.as_bytes())),
                    ));
                }
            }
        }
        if kw.key.eq_ignore_ascii_case("ClientName") {
            if v.len() > MAX_CLIENT_NAME {
                return Err(one(
                    512,
                    &format!("ClientName longer than {MAX_CLIENT_NAME} chars"),
                ));
            }
            cred.name = Some(v);
        }
    }
    Ok(cred)
}

/// A VIEW line: `CLIENT <addr> x25519:<base64> [Flags=Permanent]
/// [ClientName=<name>]`.
pub fn view_line(c: &ClientAuthCred) -> Zeroizing<String> {
    let mut s = Zeroizing::new(format!(
        "CLIENT {} x25519:{}",
        c.address,
        Zeroizing::new(STANDARD.encode(c.secret.as_slice())).as_str()
    ));
    if c.permanent {
        s.push_str(" Flags=Permanent");
    }
    if let Some(n) = &c.name {
        s.push_str(&format!(" ClientName={n}"));
    }
    s
}

pub(crate) fn add(args: &str, b: &mut dyn Backend) -> Outcome {
    let cred = match parse_add(args) {
        Ok(c) => c,
        Err(o) => return o,
    };
    match b.client_auth_add(cred) {
        Ok(AuthAdded::Added) => out(Reply::ok(), false),
        Ok(AuthAdded::Replaced) => one(251, "Client for onion existed and replaced"),
        Err(e) => one(e.code, &e.msg),
    }
}

pub(crate) fn remove(args: &str, b: &mut dyn Backend) -> Outcome {
    let cmd = "ONION_CLIENT_AUTH_REMOVE";
    let (pos, rest) = split_args(args, 1);
    if let Err(e) = syntax::parse_kvline(rest.unwrap_or(""), KvFlags::default()) {
        return bad_args(cmd, &e);
    }
    let Some(addr) = pos.first() else {
        return one(512, "Incomplete ONION_CLIENT_AUTH_REMOVE command");
    };
    if parse_onion_v3(addr).is_err() {
        return invalid_addr(addr);
    }
    match b.client_auth_remove(addr) {
        Ok(true) => out(Reply::ok(), false),
        Ok(false) => one(251, &format!("No credentials for \"{addr}\"")),
        Err(e) => one(e.code, &e.msg),
    }
}

pub(crate) fn view(args: &str, b: &mut dyn Backend) -> Outcome {
    let cmd = "ONION_CLIENT_AUTH_VIEW";
    let (pos, rest) = split_args(args, 1);
    if let Err(e) = syntax::parse_kvline(rest.unwrap_or(""), KvFlags::default()) {
        return bad_args(cmd, &e);
    }
    let addr = pos.first().copied();
    if let Some(a) = addr
        && parse_onion_v3(a).is_err()
    {
        return invalid_addr(a);
    }
    let mut r = Reply::new();
    match addr {
        Some(a) => r.line(250, &format!("ONION_CLIENT_AUTH_VIEW {a}")),
        None => r.line(250, "ONION_CLIENT_AUTH_VIEW"),
    };
    let mut lines: Vec<Zeroizing<String>> = b
        .client_auth_view()
        .iter()
        .filter(|c| addr.is_none_or(|a| a == c.address))
        .map(view_line)
        .collect();
    lines.sort_unstable_by(|x, y| x.as_str().cmp(y.as_str()));
    for l in &lines {
        r.line(250, l);
    }
    r.line(250, "OK");
    out(r, false)
}
