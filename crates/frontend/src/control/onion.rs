//! Ephemeral onion services on the control port (control-spec §3.27
//! ADD_ONION, §3.28 DEL_ONION) and the `HS_DESC` / `HS_DESC_CONTENT`
//! events (§4.1.25, §4.1.26), with the checks, error codes and texts of
//! stock tor 0.4.9 (`handle_control_add_onion`,
//! `add_onion_helper_keyarg`, `hs_parse_port_config`,
//! `control_event_hs_descriptor_*`). Parsing only: what a request starts
//! is the [`Backend`]'s business.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use base64::Engine;
use base64::engine::general_purpose::{GeneralPurpose, GeneralPurposeConfig, STANDARD_NO_PAD};
use base64::engine::{DecodePaddingMode, general_purpose::STANDARD};
use zeroize::Zeroizing;

use super::events::long_name;
use super::reply::{Reply, dot_encode};
use super::session::{Backend, CmdError, Outcome, bad_args, out};
use super::syntax::{self, KvFlags, positional, quote};
use crate::addr::{decode_x25519_base32, parse_onion_v3};

/// The v3 key type's name (`KeyType` and `KeyBlob` of ADD_ONION).
pub const ED25519_V3: &str = "ED25519-V3";
/// Keywords ADD_ONION takes (tor's `add_onion_keywords`).
const KEYWORDS: &[&str] = &["Port", "Flags", "MaxStreams", "ClientAuth", "ClientAuthV3"];
/// Most `Port=` arguments one ADD_ONION may carry (tor has no limit; the
/// service's port map holds 256).
pub const MAX_PORTS: usize = 256;
/// Most `ClientAuthV3=` arguments (the descriptor's client limit).
pub const MAX_CLIENT_AUTH: usize = 1024;

/// The service key ADD_ONION asks for.
#[derive(Clone)]
pub enum OnionKey {
    /// `NEW:BEST` or `NEW:ED25519-V3`: generate one.
    Generate,
    /// `ED25519-V3:<base64>`: the 64-byte expanded secret key (scalar,
    /// then PRF secret), as tor stores it.
    Given(Zeroizing<[u8; 64]>),
}

impl std::fmt::Debug for OnionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OnionKey::Generate => f.write_str("Generate"),
            OnionKey::Given(_) => f.write_str("Given(..)"),
        }
    }
}

/// A parsed ADD_ONION.
#[derive(Debug, Clone)]
pub struct AddOnion {
    /// The key.
    pub key: OnionKey,
    /// Virtual port to target, in the order given.
    pub ports: Vec<(u16, SocketAddr)>,
    /// `Flags=DiscardPK`: do not return a generated key.
    pub discard_pk: bool,
    /// `Flags=Detach`: the service outlives this control connection.
    pub detach: bool,
    /// `MaxStreams=` (0: no limit).
    pub max_streams: u16,
    /// `Flags=MaxStreamsCloseCircuit`.
    pub max_streams_close_circuit: bool,
    /// `ClientAuthV3=` keys (with `Flags=V3Auth`): the text as given (tor
    /// echoes it) and the x25519 public key.
    pub client_auth_v3: Vec<(String, [u8; 32])>,
}

/// What the backend made of an ADD_ONION.
#[derive(Debug, Clone)]
pub struct AddedOnion {
    /// The address without `.onion`.
    pub service_id: String,
    /// The generated expanded secret key (None when a key was given).
    pub generated: Option<Zeroizing<[u8; 64]>>,
}

fn err(code: u16, msg: &str) -> CmdError {
    CmdError::new(code, msg)
}

/// tor's `tor_parse_long(s, 10, 1, 65535)`: a port, not 0.
fn port(s: &str) -> Option<u16> {
    if s.is_empty() || !s.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    s.parse::<u16>().ok().filter(|p| *p != 0)
}

/// `VIRTPORT[,TARGET]` as tor's `hs_parse_port_config(.., ",")`: TARGET is
/// a port (on 127.0.0.1), `ADDR:PORT`, `ADDR` (the virtual port), or
/// absent. `unix:` targets are not supported (512, like any bad target).
pub fn parse_port(v: &str) -> Option<(u16, SocketAddr)> {
    let mut parts = v.splitn(2, ',').map(str::trim).filter(|p| !p.is_empty());
    let virt = port(parts.next()?)?;
    let local = IpAddr::V4(Ipv4Addr::LOCALHOST);
    let Some(t) = parts.next() else {
        return Some((virt, SocketAddr::new(local, virt)));
    };
    if t.contains([':', '.']) {
        if let Ok(a) = t.parse::<SocketAddr>() {
            let p = if a.port() == 0 { virt } else { a.port() };
            return Some((virt, SocketAddr::new(a.ip(), p)));
        }
        if let Ok(ip) = t.trim_start_matches('[').trim_end_matches(']').parse() {
            return Some((virt, SocketAddr::new(ip, virt)));
        }
        // tor resolves names here; only `localhost` is taken.
        let (host, p) = match t.rsplit_once(':') {
            Some((h, p)) => (h, port(p)?),
            None => (t, virt),
        };
        return host
            .eq_ignore_ascii_case("localhost")
            .then(|| (virt, SocketAddr::new(local, p)));
    }
    Some((virt, SocketAddr::new(local, port(t)?)))
}

fn decode_key(blob: &str) -> Option<Zeroizing<[u8; 64]>> {
    // tor's base64_decode takes the blob with or without padding.
    let engine = GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
    );
    let v = Zeroizing::new(engine.decode(blob.as_bytes()).ok()?);
    let mut k = Zeroizing::new([0u8; 64]);
    if v.len() != k.len() {
        return None;
    }
    k.copy_from_slice(&v);
    Some(k)
}

/// The `KeyType:KeyBlob` argument (tor's `add_onion_helper_keyarg`).
fn parse_keyarg(arg: &str) -> Result<OnionKey, CmdError> {
    let parts: Vec<&str> = arg.split(':').filter(|p| !p.is_empty()).collect();
    let [kind, blob] = parts.as_slice() else {
        return Err(err(512, "Invalid key type/blob"));
    };
    if kind.eq_ignore_ascii_case(ED25519_V3) {
        return decode_key(blob)
            .map(OnionKey::Given)
            .ok_or_else(|| err(512, "Failed to decode ED25519-V3 key"));
    }
    if kind.eq_ignore_ascii_case("NEW")
        && (blob.eq_ignore_ascii_case(ED25519_V3) || blob.eq_ignore_ascii_case("BEST"))
    {
        return Ok(OnionKey::Generate);
    }
    Err(err(513, "Invalid key type"))
}

/// Parse ADD_ONION's arguments; the error is the reply tor gives.
pub fn parse_add_onion(args: &str) -> Result<AddOnion, Outcome> {
    let (pos, rest) = positional(args, 1, 1, true).map_err(|e| bad_args("ADD_ONION", &e))?;
    let kws = syntax::parse_kvline(rest.unwrap_or(""), KvFlags::default())
        .and_then(|k| syntax::check_keywords(&k, KEYWORDS).map(|()| k))
        .map_err(|e| bad_args("ADD_ONION", &e))?;
    let fail = |code: u16, msg: &str| out(Reply::single(code, msg), false);
    let mut req = AddOnion {
        key: OnionKey::Generate,
        ports: Vec::new(),
        discard_pk: false,
        detach: false,
        max_streams: 0,
        max_streams_close_circuit: false,
        client_auth_v3: Vec::new(),
    };
    let mut v3auth = false;
    for kw in &kws {
        let value = kw.value_str();
        if kw.key.eq_ignore_ascii_case("Port") {
            let p = parse_port(&value).ok_or_else(|| fail(512, "Invalid VIRTPORT/TARGET"))?;
            if req.ports.len() >= MAX_PORTS {
                return Err(fail(512, "Invalid VIRTPORT/TARGET"));
            }
            req.ports.push(p);
        } else if kw.key.eq_ignore_ascii_case("MaxStreams") {
            req.max_streams = (!value.is_empty() && value.bytes().all(|c| c.is_ascii_digit()))
                .then(|| value.parse::<u16>().ok())
                .flatten()
                .ok_or_else(|| fail(512, "Invalid MaxStreams"))?;
        } else if kw.key.eq_ignore_ascii_case("Flags") {
            let flags: Vec<&str> = value.split(',').filter(|f| !f.is_empty()).collect();
            if flags.is_empty() {
                return Err(fail(512, "Invalid 'Flags' argument"));
            }
            // Repeated flags are accepted, as tor does.
            for f in flags {
                match f.to_ascii_lowercase().as_str() {
                    "discardpk" => req.discard_pk = true,
                    "detach" => req.detach = true,
                    "maxstreamsclosecircuit" => req.max_streams_close_circuit = true,
                    "v3auth" => v3auth = true,
                    // Single onion services are not supported: we are
                    // always in anonymous mode, so tor's answer follows.
                    "nonanonymous" => {
                        return Err(fail(512, "Tor is in anonymous hidden service mode"));
                    }
                    _ => {
                        return Err(fail(
                            512,
                            &format!("Invalid 'Flags' argument: {}", quote(f.as_bytes())),
                        ));
                    }
                }
            }
        } else if kw.key.eq_ignore_ascii_case("ClientAuthV3") {
            let key = decode_x25519_base32(&value)
                .ok_or_else(|| fail(512, "Cannot decode v3 client auth key"))?;
            if req.client_auth_v3.len() >= MAX_CLIENT_AUTH {
                return Err(fail(512, "Invalid client authorization"));
            }
            req.client_auth_v3.push((value, key));
        } else {
            // `ClientAuth=` (v2 client authorization): tor 0.4.9 accepts the
            // keyword but has nothing to do with it (and sends no reply).
            return Err(fail(
                512,
                "ClientAuth is for v2 onion services, which are gone",
            ));
        }
    }
    if req.ports.is_empty() {
        return Err(fail(512, "Missing 'Port' argument"));
    }
    if !v3auth && !req.client_auth_v3.is_empty() {
        return Err(fail(512, "No auth type specified"));
    }
    if v3auth && req.client_auth_v3.is_empty() {
        return Err(fail(512, "No auth clients specified"));
    }
    let keyarg = pos.first().copied().unwrap_or("");
    req.key = parse_keyarg(keyarg).map_err(|e| fail(e.code, &e.msg))?;
    Ok(req)
}

/// `250-ServiceID=`, `250-PrivateKey=` (a generated key, unless
/// DiscardPK), `250-ClientAuthV3=` lines, `250 OK`.
pub fn add_onion_reply(req: &AddOnion, added: &AddedOnion) -> Reply {
    let mut r = Reply::new();
    r.line(250, &format!("ServiceID={}", added.service_id));
    if let (Some(k), false) = (&added.generated, req.discard_pk) {
        let b64 = Zeroizing::new(STANDARD.encode(k.as_slice()));
        r.line(250, &format!("PrivateKey={ED25519_V3}:{}", b64.as_str()));
    }
    for (text, _) in &req.client_auth_v3 {
        r.line(250, &format!("ClientAuthV3={text}"));
    }
    r.line(250, "OK");
    r
}

pub(crate) fn add_onion(args: &str, b: &mut dyn Backend) -> Outcome {
    let req = match parse_add_onion(args) {
        Ok(r) => r,
        Err(o) => return o,
    };
    match b.add_onion(&req) {
        Ok(added) => out(add_onion_reply(&req, &added), false),
        Err(e) => out(Reply::single(e.code, &e.msg), false),
    }
}

pub(crate) fn del_onion(args: &str, b: &mut dyn Backend) -> Outcome {
    let (pos, _) = match positional(args, 1, 1, false) {
        Ok(x) => x,
        Err(e) => return bad_args("DEL_ONION", &e),
    };
    let id = pos.first().copied().unwrap_or("");
    if parse_onion_v3(id).is_err() {
        return out(Reply::single(512, "Malformed Onion Service id"), false);
    }
    match b.del_onion(id) {
        Ok(()) => out(Reply::ok(), false),
        Err(e) => out(Reply::single(e.code, &e.msg), false),
    }
}

// ---- HS_DESC events ----

/// An HSDir as the events name it: `$FP~nickname` (tor's
/// `node_describe_longname_by_id`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HsDirName {
    /// RSA identity.
    pub rsa_id: [u8; 20],
    /// Nickname ("" if unknown: then only `$FP`).
    pub nickname: String,
}

impl HsDirName {
    fn long(&self) -> String {
        long_name(&self.rsa_id, &self.nickname)
    }
}

/// The descriptor id of a v3 descriptor in events: the blinded key in
/// base64 without padding (tor's `ed25519_public_to_base64`).
pub fn desc_id(blinded: &[u8; 32]) -> String {
    STANDARD_NO_PAD.encode(blinded)
}

fn upper_hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02X}")).collect()
}

/// What an `HS_DESC` event reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HsDescEvent {
    /// Client: a fetch from `hsdir` starts (`HSDIR_INDEX` is the HSDir's
    /// fetch index).
    Requested {
        /// HSDir asked.
        hsdir: HsDirName,
        /// Its index on the fetch ring.
        hsdir_index: [u8; 32],
    },
    /// Client: a usable descriptor arrived from `hsdir`.
    Received {
        /// HSDir that answered.
        hsdir: HsDirName,
    },
    /// Client: the fetch failed (`BAD_DESC`, `QUERY_REJECTED`, `NOT_FOUND`,
    /// `UNEXPECTED`, `QUERY_NO_HSDIR`); no HSDir for `QUERY_NO_HSDIR`.
    FetchFailed {
        /// HSDir asked.
        hsdir: Option<HsDirName>,
        /// REASON.
        reason: &'static str,
    },
    /// Service: a descriptor was built for a new time period.
    Created,
    /// Service: an upload to `hsdir` starts (`HSDIR_INDEX`: its index on
    /// the store ring of the descriptor).
    Upload {
        /// HSDir.
        hsdir: HsDirName,
        /// Its index on the store ring.
        hsdir_index: [u8; 32],
    },
    /// Service: `hsdir` accepted the descriptor.
    Uploaded {
        /// HSDir.
        hsdir: HsDirName,
    },
    /// Service: the upload to `hsdir` failed (`UPLOAD_REJECTED`,
    /// `UNEXPECTED`).
    UploadFailed {
        /// HSDir.
        hsdir: HsDirName,
        /// REASON.
        reason: &'static str,
    },
}

/// The `HS_DESC` event for service `address` (56 characters, no
/// `.onion`) and the descriptor of blinded key `blinded`, as tor 0.4.9
/// writes it (`650 HS_DESC ...\r\n`).
pub fn hs_desc_event(address: &str, blinded: &[u8; 32], ev: &HsDescEvent) -> Vec<u8> {
    let id = desc_id(blinded);
    let text = match ev {
        HsDescEvent::Requested { hsdir, hsdir_index } => format!(
            "HS_DESC REQUESTED {address} NO_AUTH {} {id} HSDIR_INDEX={}",
            hsdir.long(),
            upper_hex(hsdir_index)
        ),
        HsDescEvent::Received { hsdir } => {
            format!("HS_DESC RECEIVED {address} NO_AUTH {} {id}", hsdir.long())
        }
        HsDescEvent::FetchFailed { hsdir, reason } => format!(
            "HS_DESC FAILED {address} NO_AUTH {} {id} REASON={reason}",
            hsdir.as_ref().map_or("UNKNOWN".into(), HsDirName::long)
        ),
        HsDescEvent::Created => format!("HS_DESC CREATED {address} UNKNOWN UNKNOWN {id}"),
        HsDescEvent::Upload { hsdir, hsdir_index } => format!(
            "HS_DESC UPLOAD {address} UNKNOWN {} {id} HSDIR_INDEX={}",
            hsdir.long(),
            upper_hex(hsdir_index)
        ),
        HsDescEvent::Uploaded { hsdir } => {
            format!("HS_DESC UPLOADED {address} UNKNOWN {}", hsdir.long())
        }
        // tor 0.4.9 reports a failed v3 upload as a failed fetch
        // (`hs_control_desc_event_failed`): NO_AUTH and the descriptor id.
        HsDescEvent::UploadFailed { hsdir, reason } => format!(
            "HS_DESC FAILED {address} NO_AUTH {} {id} REASON={reason}",
            hsdir.long()
        ),
    };
    super::reply::event(&text)
}

/// The `HS_DESC_CONTENT` event after a fetch: the descriptor's text, or
/// an empty one after a failure (tor 0.4.9 keeps the address and HSDir
/// then too).
pub fn hs_desc_content_event(
    address: &str,
    blinded: &[u8; 32],
    hsdir: Option<&HsDirName>,
    body: &str,
) -> Vec<u8> {
    let mut out = format!(
        "650+HS_DESC_CONTENT {address} {} {}\r\n",
        desc_id(blinded),
        hsdir.map_or("UNKNOWN".into(), HsDirName::long)
    )
    .into_bytes();
    // The header is one line whatever the names hold.
    for b in out.iter_mut().take_while(|b| **b != b'\r') {
        if *b == b'\n' {
            *b = b' ';
        }
    }
    dot_encode(body, &mut out);
    out.extend_from_slice(b"650 OK\r\n");
    out
}

#[cfg(test)]
#[path = "onion_tests.rs"]
mod tests;
