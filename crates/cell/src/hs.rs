//! Onion-service relay messages (rend-spec-v3 §3, §4; proposals 305 and
//! 327), relay commands 32-40: parse and encode, nothing else. The
//! cryptographic fields (ESTABLISH_INTRO's MAC and signature, INTRODUCE1's
//! encrypted section and MAC, RENDEZVOUS1's handshake) are carried as
//! bytes; `onionmix-hs` computes and checks them, using the `*_signed_len`
//! / `mac_offset` helpers here to know which bytes they cover.
//!
//! These messages arrive from [`crate::relay::RelayMsg::decode`] as
//! `Unknown(cmd, data)`; [`HsMsg::parse`] decodes them.

use crate::relay::{LinkSpec, RelayCmd};
use crate::{CellError, RELAY_DATA_LEN, Reader};

impl RelayCmd {
    /// ESTABLISH_INTRO (service to introduction point).
    pub const ESTABLISH_INTRO: RelayCmd = RelayCmd(32);
    /// ESTABLISH_RENDEZVOUS (client to rendezvous point).
    pub const ESTABLISH_RENDEZVOUS: RelayCmd = RelayCmd(33);
    /// INTRODUCE1 (client to introduction point).
    pub const INTRODUCE1: RelayCmd = RelayCmd(34);
    /// INTRODUCE2 (introduction point to service).
    pub const INTRODUCE2: RelayCmd = RelayCmd(35);
    /// RENDEZVOUS1 (service to rendezvous point).
    pub const RENDEZVOUS1: RelayCmd = RelayCmd(36);
    /// RENDEZVOUS2 (rendezvous point to client).
    pub const RENDEZVOUS2: RelayCmd = RelayCmd(37);
    /// INTRO_ESTABLISHED.
    pub const INTRO_ESTABLISHED: RelayCmd = RelayCmd(38);
    /// RENDEZVOUS_ESTABLISHED.
    pub const RENDEZVOUS_ESTABLISHED: RelayCmd = RelayCmd(39);
    /// INTRODUCE_ACK.
    pub const INTRODUCE_ACK: RelayCmd = RelayCmd(40);
}

/// AUTH_KEY_TYPE for Ed25519 keys (the only one v3 uses).
pub const AUTH_KEY_TYPE_ED25519: u8 = 2;
/// ONION_KEY_TYPE for ntor keys.
pub const ONION_KEY_TYPE_NTOR: u8 = 1;
/// Length of a rendezvous cookie.
pub const REND_COOKIE_LEN: usize = 20;
/// Length of HANDSHAKE_AUTH and of INTRODUCE1's MAC.
pub const MAC_LEN: usize = 32;
/// ESTABLISH_INTRO extension: DoS parameters (proposal 305).
pub const EXT_DOS_PARAMS: u8 = 1;
/// Encrypted INTRODUCE extension: congestion control requested on the
/// rendezvous circuit (proposal 324 §9.2; no body).
pub const EXT_CC_REQUEST: u8 = 1;
/// Encrypted INTRODUCE extension: proof of work (proposal 327).
pub const EXT_POW: u8 = 2;
/// Prefix of ESTABLISH_INTRO's signature.
pub const ESTABLISH_INTRO_SIG_PREFIX: &[u8] = b"Tor establish-intro cell v1";

/// INTRODUCE_ACK status codes.
pub mod intro_status {
    /// Success: the introduction was relayed.
    pub const SUCCESS: u16 = 0;
    /// Service ID not recognized.
    pub const UNKNOWN_SERVICE: u16 = 1;
    /// Bad message format.
    pub const BAD_FORMAT: u16 = 2;
    /// Can't relay the message to the service.
    pub const CANT_RELAY: u16 = 3;
}

/// One `EXT_FIELD_TYPE EXT_FIELD_LEN EXT_FIELD` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extension {
    /// EXT_FIELD_TYPE.
    pub ext_type: u8,
    /// EXT_FIELD (at most 255 bytes).
    pub data: Vec<u8>,
}

fn read_extensions(r: &mut Reader<'_>) -> Result<Vec<Extension>, CellError> {
    let n = r.u8("N_EXTENSIONS")?;
    let mut out = Vec::with_capacity(usize::from(n).min(16));
    for _ in 0..n {
        let ext_type = r.u8("EXT_FIELD_TYPE")?;
        let len = r.u8("EXT_FIELD_LEN")?;
        let data = r.take(usize::from(len), "EXT_FIELD")?.to_vec();
        out.push(Extension { ext_type, data });
    }
    Ok(out)
}

fn write_extensions(out: &mut Vec<u8>, exts: &[Extension]) -> Result<(), CellError> {
    let n = u8::try_from(exts.len()).map_err(|_| CellError::DoesNotFit("extensions"))?;
    out.push(n);
    for e in exts {
        let len = u8::try_from(e.data.len()).map_err(|_| CellError::DoesNotFit("extension"))?;
        out.push(e.ext_type);
        out.push(len);
        out.extend_from_slice(&e.data);
    }
    Ok(())
}

fn read_auth_key(r: &mut Reader<'_>) -> Result<[u8; 32], CellError> {
    let t = r.u8("AUTH_KEY_TYPE")?;
    let len = r.u16("AUTH_KEY_LEN")?;
    if t != AUTH_KEY_TYPE_ED25519 || len != 32 {
        return Err(CellError::invalid(
            "AUTH_KEY",
            format!("type {t} length {len}"),
        ));
    }
    r.array("AUTH_KEY")
}

fn write_auth_key(out: &mut Vec<u8>, key: &[u8; 32]) {
    out.push(AUTH_KEY_TYPE_ED25519);
    out.extend_from_slice(&32u16.to_be_bytes());
    out.extend_from_slice(key);
}

fn fits(v: Vec<u8>, what: &'static str) -> Result<Vec<u8>, CellError> {
    if v.len() > RELAY_DATA_LEN {
        Err(CellError::DoesNotFit(what))
    } else {
        Ok(v)
    }
}

/// ESTABLISH_INTRO (rend-spec-v3 §3.1.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EstablishIntro {
    /// `KP_hs_ipt_sid`.
    pub auth_key: [u8; 32],
    /// Extensions (DoS parameters: [`DosParams`]).
    pub extensions: Vec<Extension>,
    /// HANDSHAKE_AUTH: MAC with the circuit's KH of the bytes before it.
    pub handshake_auth: [u8; 32],
    /// SIG by `auth_key` over the prefix and the bytes before SIG_LEN.
    pub sig: Vec<u8>,
}

impl EstablishIntro {
    /// Encode the fields before HANDSHAKE_AUTH (what the MAC covers).
    pub fn encode_mac_input(
        auth_key: &[u8; 32],
        extensions: &[Extension],
    ) -> Result<Vec<u8>, CellError> {
        let mut out = Vec::with_capacity(64);
        write_auth_key(&mut out, auth_key);
        write_extensions(&mut out, extensions)?;
        Ok(out)
    }

    /// Encode the whole message.
    pub fn encode(&self) -> Result<Vec<u8>, CellError> {
        let mut out = Self::encode_mac_input(&self.auth_key, &self.extensions)?;
        out.extend_from_slice(&self.handshake_auth);
        let n = u16::try_from(self.sig.len()).map_err(|_| CellError::DoesNotFit("SIG"))?;
        out.extend_from_slice(&n.to_be_bytes());
        out.extend_from_slice(&self.sig);
        fits(out, "ESTABLISH_INTRO")
    }

    /// Parse; returns the message and the offsets the MAC and signature
    /// cover (`mac_len` bytes before HANDSHAKE_AUTH, `signed_len` bytes
    /// before SIG_LEN).
    pub fn parse(d: &[u8]) -> Result<(Self, usize, usize), CellError> {
        let mut r = Reader::new(d);
        let auth_key = read_auth_key(&mut r)?;
        let extensions = read_extensions(&mut r)?;
        let mac_len = d.len().saturating_sub(r.remaining());
        let handshake_auth = r.array("HANDSHAKE_AUTH")?;
        let signed_len = d.len().saturating_sub(r.remaining());
        let n = r.u16("SIG_LEN")?;
        let sig = r.take(usize::from(n), "SIG")?.to_vec();
        if r.remaining() != 0 {
            return Err(CellError::invalid("ESTABLISH_INTRO", "trailing bytes"));
        }
        Ok((
            Self {
                auth_key,
                extensions,
                handshake_auth,
                sig,
            },
            mac_len,
            signed_len,
        ))
    }
}

/// The DoS-parameters extension of ESTABLISH_INTRO (proposal 305).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DosParams {
    /// `DOS_INTRODUCE2_RATE_PER_SEC` (param type 1).
    pub rate_per_sec: Option<u64>,
    /// `DOS_INTRODUCE2_BURST_PER_SEC` (param type 2).
    pub burst_per_sec: Option<u64>,
}

impl DosParams {
    /// As an extension.
    pub fn to_extension(&self) -> Extension {
        let mut data = vec![0u8];
        for (t, v) in [(1u8, self.rate_per_sec), (2u8, self.burst_per_sec)] {
            if let Some(v) = v {
                data.push(t);
                data.extend_from_slice(&v.to_be_bytes());
                data[0] += 1;
            }
        }
        Extension {
            ext_type: EXT_DOS_PARAMS,
            data,
        }
    }

    /// From an extension's data. Unknown parameter types are skipped;
    /// the count must match the data.
    pub fn parse(data: &[u8]) -> Result<Self, CellError> {
        let mut r = Reader::new(data);
        let n = r.u8("N_PARAMS")?;
        let mut p = DosParams::default();
        for _ in 0..n {
            let t = r.u8("PARAM_TYPE")?;
            let v = u64::from_be_bytes(r.array("PARAM_VALUE")?);
            match t {
                1 => p.rate_per_sec = Some(v),
                2 => p.burst_per_sec = Some(v),
                _ => {}
            }
        }
        if r.remaining() != 0 {
            return Err(CellError::invalid("DoS extension", "trailing bytes"));
        }
        Ok(p)
    }
}

/// INTRODUCE1 / INTRODUCE2 (rend-spec-v3 §3.2.1; the same layout).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Introduce {
    /// LEGACY_KEY_ID: all zeros for v3.
    pub legacy_key_id: [u8; 20],
    /// `KP_hs_ipt_sid` of the introduction point.
    pub auth_key: [u8; 32],
    /// Cleartext extensions.
    pub extensions: Vec<Extension>,
    /// `CLIENT_PK | ENCRYPTED_DATA | MAC`.
    pub encrypted: Vec<u8>,
}

impl Introduce {
    /// Encode the part before the encrypted section.
    pub fn encode_header(&self) -> Result<Vec<u8>, CellError> {
        let mut out = Vec::with_capacity(64);
        out.extend_from_slice(&self.legacy_key_id);
        write_auth_key(&mut out, &self.auth_key);
        write_extensions(&mut out, &self.extensions)?;
        Ok(out)
    }

    /// Encode the whole message.
    pub fn encode(&self) -> Result<Vec<u8>, CellError> {
        let mut out = self.encode_header()?;
        out.extend_from_slice(&self.encrypted);
        fits(out, "INTRODUCE1")
    }

    /// Parse. The encrypted section must hold at least CLIENT_PK and MAC.
    pub fn parse(d: &[u8]) -> Result<Self, CellError> {
        let mut r = Reader::new(d);
        let legacy_key_id = r.array("LEGACY_KEY_ID")?;
        let auth_key = read_auth_key(&mut r)?;
        let extensions = read_extensions(&mut r)?;
        let encrypted = r.rest().to_vec();
        if encrypted.len() < 32 + MAC_LEN {
            return Err(CellError::Truncated("INTRODUCE encrypted section"));
        }
        Ok(Self {
            legacy_key_id,
            auth_key,
            extensions,
            encrypted,
        })
    }

    /// `CLIENT_PK` of the encrypted section.
    pub fn client_pk(&self) -> Option<[u8; 32]> {
        self.encrypted.get(..32)?.try_into().ok()
    }

    /// `ENCRYPTED_DATA` of the encrypted section.
    pub fn encrypted_data(&self) -> Option<&[u8]> {
        let end = self.encrypted.len().checked_sub(MAC_LEN)?;
        self.encrypted.get(32..end)
    }

    /// The trailing MAC.
    pub fn mac(&self) -> Option<[u8; 32]> {
        let start = self.encrypted.len().checked_sub(MAC_LEN)?;
        self.encrypted.get(start..)?.try_into().ok()
    }
}

/// The decrypted `ENCRYPTED_DATA` of INTRODUCE1/2 (rend-spec-v3 §3.3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntroducePlaintext {
    /// RENDEZVOUS_COOKIE.
    pub rend_cookie: [u8; 20],
    /// Extensions (proof of work: [`PowSolution`]).
    pub extensions: Vec<Extension>,
    /// The rendezvous point's ntor onion key.
    pub onion_key: [u8; 32],
    /// How to reach the rendezvous point.
    pub link_specifiers: Vec<LinkSpec>,
    /// Zero padding after the link specifiers.
    pub pad_len: usize,
}

impl IntroducePlaintext {
    /// Encode, with `pad_len` zero bytes at the end.
    pub fn encode(&self) -> Result<Vec<u8>, CellError> {
        let mut out = Vec::with_capacity(128 + self.pad_len);
        out.extend_from_slice(&self.rend_cookie);
        write_extensions(&mut out, &self.extensions)?;
        out.push(ONION_KEY_TYPE_NTOR);
        out.extend_from_slice(&32u16.to_be_bytes());
        out.extend_from_slice(&self.onion_key);
        let n = u8::try_from(self.link_specifiers.len())
            .map_err(|_| CellError::DoesNotFit("link specifiers"))?;
        out.push(n);
        for ls in &self.link_specifiers {
            ls.write(&mut out);
        }
        if self.pad_len > RELAY_DATA_LEN {
            return Err(CellError::DoesNotFit("padding"));
        }
        out.resize(out.len() + self.pad_len, 0);
        Ok(out)
    }

    /// Parse. Anything after the link specifiers is padding (tor does not
    /// require it to be zero).
    pub fn parse(d: &[u8]) -> Result<Self, CellError> {
        let mut r = Reader::new(d);
        let rend_cookie = r.array("RENDEZVOUS_COOKIE")?;
        let extensions = read_extensions(&mut r)?;
        let kt = r.u8("ONION_KEY_TYPE")?;
        let kl = r.u16("ONION_KEY_LEN")?;
        if kt != ONION_KEY_TYPE_NTOR || kl != 32 {
            return Err(CellError::invalid(
                "ONION_KEY",
                format!("type {kt} length {kl}"),
            ));
        }
        let onion_key = r.array("ONION_KEY")?;
        let n = r.u8("NSPEC")?;
        let mut link_specifiers = Vec::with_capacity(usize::from(n).min(8));
        for _ in 0..n {
            link_specifiers.push(LinkSpec::read(&mut r)?);
        }
        let pad_len = r.remaining();
        Ok(Self {
            rend_cookie,
            extensions,
            onion_key,
            link_specifiers,
            pad_len,
        })
    }
}

/// The proof-of-work extension of INTRODUCE's encrypted part (v1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PowSolution {
    /// POW_NONCE.
    pub nonce: [u8; 16],
    /// POW_EFFORT.
    pub effort: u32,
    /// POW_SEED: the first 4 bytes of the seed.
    pub seed_head: [u8; 4],
    /// POW_SOLUTION (Equi-X solution bytes).
    pub solution: [u8; 16],
}

impl PowSolution {
    /// As an extension (POW_VERSION 1).
    pub fn to_extension(&self) -> Extension {
        let mut data = Vec::with_capacity(41);
        data.push(1);
        data.extend_from_slice(&self.nonce);
        data.extend_from_slice(&self.effort.to_be_bytes());
        data.extend_from_slice(&self.seed_head);
        data.extend_from_slice(&self.solution);
        Extension {
            ext_type: EXT_POW,
            data,
        }
    }

    /// From an extension's data; `Ok(None)` for another POW_VERSION.
    pub fn parse(data: &[u8]) -> Result<Option<Self>, CellError> {
        let mut r = Reader::new(data);
        if r.u8("POW_VERSION")? != 1 {
            return Ok(None);
        }
        let s = Self {
            nonce: r.array("POW_NONCE")?,
            effort: r.u32("POW_EFFORT")?,
            seed_head: r.array("POW_SEED")?,
            solution: r.array("POW_SOLUTION")?,
        };
        if r.remaining() != 0 {
            return Err(CellError::invalid("PoW extension", "trailing bytes"));
        }
        Ok(Some(s))
    }
}

/// RENDEZVOUS1 (rend-spec-v3 §4.2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendezvous1 {
    /// RENDEZVOUS_COOKIE.
    pub cookie: [u8; 20],
    /// HANDSHAKE_INFO (`SERVER_PK | AUTH` for hs-ntor), passed to the
    /// client in RENDEZVOUS2 unchanged.
    pub handshake_info: Vec<u8>,
}

/// A decoded onion-service relay message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HsMsg {
    /// ESTABLISH_INTRO with the MAC and signature coverage lengths.
    EstablishIntro(EstablishIntro, usize, usize),
    /// INTRO_ESTABLISHED (extensions).
    IntroEstablished(Vec<Extension>),
    /// INTRODUCE1.
    Introduce1(Introduce),
    /// INTRODUCE2.
    Introduce2(Introduce),
    /// INTRODUCE_ACK: status and extensions.
    IntroduceAck(u16, Vec<Extension>),
    /// ESTABLISH_RENDEZVOUS with its cookie.
    EstablishRendezvous([u8; 20]),
    /// RENDEZVOUS_ESTABLISHED.
    RendezvousEstablished,
    /// RENDEZVOUS1.
    Rendezvous1(Rendezvous1),
    /// RENDEZVOUS2: HANDSHAKE_INFO.
    Rendezvous2(Vec<u8>),
}

impl HsMsg {
    /// Parse the data of a relay message with command `cmd`; `Ok(None)` if
    /// `cmd` is not an onion-service command.
    pub fn parse(cmd: RelayCmd, d: &[u8]) -> Result<Option<Self>, CellError> {
        Ok(Some(match cmd {
            RelayCmd::ESTABLISH_INTRO => {
                let (m, a, b) = EstablishIntro::parse(d)?;
                HsMsg::EstablishIntro(m, a, b)
            }
            RelayCmd::INTRO_ESTABLISHED => {
                // tor sends an empty body or an extension list.
                if d.is_empty() {
                    HsMsg::IntroEstablished(Vec::new())
                } else {
                    HsMsg::IntroEstablished(read_extensions(&mut Reader::new(d))?)
                }
            }
            RelayCmd::INTRODUCE1 => HsMsg::Introduce1(Introduce::parse(d)?),
            RelayCmd::INTRODUCE2 => HsMsg::Introduce2(Introduce::parse(d)?),
            RelayCmd::INTRODUCE_ACK => {
                let mut r = Reader::new(d);
                let status = r.u16("STATUS")?;
                let exts = if r.remaining() == 0 {
                    Vec::new()
                } else {
                    read_extensions(&mut r)?
                };
                HsMsg::IntroduceAck(status, exts)
            }
            RelayCmd::ESTABLISH_RENDEZVOUS => {
                let mut r = Reader::new(d);
                HsMsg::EstablishRendezvous(r.array("RENDEZVOUS_COOKIE")?)
            }
            RelayCmd::RENDEZVOUS_ESTABLISHED => HsMsg::RendezvousEstablished,
            RelayCmd::RENDEZVOUS1 => {
                let mut r = Reader::new(d);
                let cookie = r.array("RENDEZVOUS_COOKIE")?;
                HsMsg::Rendezvous1(Rendezvous1 {
                    cookie,
                    handshake_info: r.rest().to_vec(),
                })
            }
            RelayCmd::RENDEZVOUS2 => HsMsg::Rendezvous2(d.to_vec()),
            _ => return Ok(None),
        }))
    }

    /// The relay command.
    pub fn cmd(&self) -> RelayCmd {
        match self {
            HsMsg::EstablishIntro(..) => RelayCmd::ESTABLISH_INTRO,
            HsMsg::IntroEstablished(_) => RelayCmd::INTRO_ESTABLISHED,
            HsMsg::Introduce1(_) => RelayCmd::INTRODUCE1,
            HsMsg::Introduce2(_) => RelayCmd::INTRODUCE2,
            HsMsg::IntroduceAck(..) => RelayCmd::INTRODUCE_ACK,
            HsMsg::EstablishRendezvous(_) => RelayCmd::ESTABLISH_RENDEZVOUS,
            HsMsg::RendezvousEstablished => RelayCmd::RENDEZVOUS_ESTABLISHED,
            HsMsg::Rendezvous1(_) => RelayCmd::RENDEZVOUS1,
            HsMsg::Rendezvous2(_) => RelayCmd::RENDEZVOUS2,
        }
    }

    /// Encode the message data (at most one relay cell's worth).
    pub fn encode(&self) -> Result<Vec<u8>, CellError> {
        let out = match self {
            HsMsg::EstablishIntro(m, ..) => return m.encode(),
            HsMsg::IntroEstablished(exts) => {
                let mut out = Vec::new();
                write_extensions(&mut out, exts)?;
                out
            }
            HsMsg::Introduce1(m) | HsMsg::Introduce2(m) => return m.encode(),
            HsMsg::IntroduceAck(status, exts) => {
                let mut out = status.to_be_bytes().to_vec();
                write_extensions(&mut out, exts)?;
                out
            }
            HsMsg::EstablishRendezvous(c) => c.to_vec(),
            HsMsg::RendezvousEstablished => Vec::new(),
            HsMsg::Rendezvous1(m) => {
                let mut out = m.cookie.to_vec();
                out.extend_from_slice(&m.handshake_info);
                out
            }
            HsMsg::Rendezvous2(h) => h.clone(),
        };
        fits(out, "onion-service message")
    }
}

/// A BEGIN received on a rendezvous circuit (rend-spec-v3 §4.3 "[ADDR]
/// ignored"): the service looks only at the port. Stock tor clients send
/// an empty address (`":80"`), which [`crate::relay::Begin::parse`] (an
/// exit's parser) refuses, so services parse with this instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OnionBegin {
    /// The virtual port.
    pub port: u16,
    /// BEGIN flags, if any.
    pub flags: u32,
}

impl OnionBegin {
    /// Parse a BEGIN body: `ADDRPORT NUL [FLAGS]`, any (or no) address, a
    /// port from 1 to 65535.
    pub fn parse(d: &[u8]) -> Result<Self, CellError> {
        let nul = d
            .iter()
            .position(|&b| b == 0)
            .ok_or(CellError::Truncated("BEGIN addrport"))?;
        let addrport = d.get(..nul).ok_or(CellError::Truncated("BEGIN"))?;
        let colon = addrport
            .iter()
            .rposition(|&b| b == b':')
            .ok_or_else(|| CellError::invalid("BEGIN", "no port"))?;
        let port_s = addrport
            .get(colon + 1..)
            .and_then(|p| std::str::from_utf8(p).ok())
            .ok_or_else(|| CellError::invalid("BEGIN", "bad port"))?;
        let port: u16 = port_s
            .parse()
            .map_err(|_| CellError::invalid("BEGIN", "bad port"))?;
        if port == 0 {
            return Err(CellError::invalid("BEGIN", "port 0"));
        }
        let rest = d.get(nul + 1..).unwrap_or(&[]);
        let flags = match rest {
            [a, b, c, e, ..] => u32::from_be_bytes([*a, *b, *c, *e]),
            _ => 0,
        };
        Ok(Self { port, flags })
    }
}

#[cfg(test)]
#[path = "hs_tests.rs"]
mod tests;
