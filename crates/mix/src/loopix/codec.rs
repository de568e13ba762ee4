//! Profile-level packet handling for Loopix nodes: keys, routing entries,
//! destinations, control messages, and one-hop processing.

use std::fmt;

use rand_core::RngCore;
use serde::{Deserialize, Serialize};

use zeroize::Zeroizing;

use super::control::{AuthRequest, ControlKind};
use crate::sphinx::msgpack::{self, Value};
use crate::sphinx::p224::{Point, scalar_from_be_mod_n};
use crate::sphinx::{SphinxError, ct_eq, sphinxmix, x25519};

/// Which Sphinx format a network uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProfileKind {
    Sphinxmix,
    X25519,
}

impl fmt::Display for ProfileKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProfileKind::Sphinxmix => "sphinxmix",
            ProfileKind::X25519 => "x25519",
        })
    }
}

/// A profile with its lengths.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    Sphinxmix(sphinxmix::Params),
    X25519(x25519::Params),
}

impl Profile {
    /// Loopix settings: sphinxmix header 1024 / body 1024, x25519 default.
    pub fn loopix(kind: ProfileKind) -> Profile {
        match kind {
            ProfileKind::Sphinxmix => Profile::Sphinxmix(sphinxmix::Params::LOOPIX),
            ProfileKind::X25519 => Profile::X25519(x25519::Params::DEFAULT),
        }
    }

    pub fn kind(&self) -> ProfileKind {
        match self {
            Profile::Sphinxmix(_) => ProfileKind::Sphinxmix,
            Profile::X25519(_) => ProfileKind::X25519,
        }
    }

    /// Largest datagram a node must accept.
    pub fn max_datagram(&self) -> usize {
        match self {
            Profile::Sphinxmix(p) => p.header_len + p.body_len + 256,
            Profile::X25519(p) => p.packet_len().max(2048),
        }
    }

    /// Largest application message that fits one packet (a conservative
    /// bound that leaves room for the destination encoding).
    pub fn max_message(&self) -> usize {
        match self {
            Profile::Sphinxmix(p) => p.body_len - sphinxmix::K - 1 - 3 - 3 - 80,
            Profile::X25519(p) => p.body_len - x25519::K - 1 - 2 - 64,
        }
    }
}

/// A node's secret key.
#[derive(Clone)]
pub enum SecretKey {
    P224([u8; 28]),
    X25519([u8; 32]),
}

impl fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SecretKey(..)")
    }
}

/// A node's public key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PublicKey {
    P224(Point),
    X25519([u8; 32]),
}

impl SecretKey {
    pub fn generate(kind: ProfileKind, rng: &mut dyn RngCore) -> SecretKey {
        match kind {
            ProfileKind::Sphinxmix => SecretKey::P224(sphinxmix::KeyPair::generate(rng).secret),
            ProfileKind::X25519 => SecretKey::X25519(x25519::KeyPair::generate(rng).secret),
        }
    }

    pub fn public(&self) -> PublicKey {
        match self {
            SecretKey::P224(s) => {
                PublicKey::P224(Point::generator().mul(s).unwrap_or_else(Point::generator))
            }
            SecretKey::X25519(s) => PublicKey::X25519(x25519::KeyPair::from_secret(*s).public),
        }
    }

    /// Static Diffie-Hellman with a peer's public key (constant time): the
    /// x coordinate of `secret * peer` (P-224, 28 bytes) or the X25519
    /// output (32 bytes). `None` for mismatched profiles or a degenerate
    /// result (identity, all-zero X25519 output).
    pub fn dh(&self, peer: &PublicKey) -> Option<Zeroizing<Vec<u8>>> {
        match (self, peer) {
            (SecretKey::P224(s), PublicKey::P224(pt)) => {
                let shared = Zeroizing::new(pt.mul(s)?.to_uncompressed());
                Some(Zeroizing::new(shared[1..29].to_vec()))
            }
            (SecretKey::X25519(s), PublicKey::X25519(pk)) => {
                let out = Zeroizing::new(
                    curve25519_dalek::montgomery::MontgomeryPoint(*pk)
                        .mul_clamped(*s)
                        .to_bytes(),
                );
                if ct_eq(&out[..], &[0u8; 32]) {
                    return None;
                }
                Some(Zeroizing::new(out.to_vec()))
            }
            _ => None,
        }
    }

    /// Key file contents: petlib-encoded Bn (`secret*.prv`) for P-224, raw
    /// 32 bytes for X25519.
    pub fn to_file_bytes(&self) -> Vec<u8> {
        match self {
            SecretKey::P224(s) => msgpack::bn_value(s).encode(),
            SecretKey::X25519(s) => s.to_vec(),
        }
    }

    pub fn from_file_bytes(kind: ProfileKind, b: &[u8]) -> Result<SecretKey, SphinxError> {
        match kind {
            ProfileKind::Sphinxmix => {
                let v = Value::decode(b).map_err(SphinxError::Msgpack)?;
                let mag = msgpack::bn_bytes(&v).ok_or(SphinxError::BadKey)?;
                let k = sphinxmix::KeyPair::from_secret_bytes(mag)?;
                Ok(SecretKey::P224(k.secret))
            }
            ProfileKind::X25519 => Ok(SecretKey::X25519(
                b.try_into().map_err(|_| SphinxError::BadKey)?,
            )),
        }
    }
}

impl PublicKey {
    /// Directory encoding: petlib EcPt (as in the reference `pubk` column)
    /// or raw 32 bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            PublicKey::P224(p) => msgpack::ecpt_value(&p.to_compressed()).encode(),
            PublicKey::X25519(k) => k.to_vec(),
        }
    }

    pub fn from_bytes(kind: ProfileKind, b: &[u8]) -> Result<PublicKey, SphinxError> {
        match kind {
            ProfileKind::Sphinxmix => {
                let v = Value::decode(b).map_err(SphinxError::Msgpack)?;
                let pt = msgpack::ecpt_bytes(&v).ok_or(SphinxError::BadKey)?;
                Ok(PublicKey::P224(
                    Point::from_sec1(pt).ok_or(SphinxError::BadKey)?,
                ))
            }
            ProfileKind::X25519 => Ok(PublicKey::X25519(
                b.try_into().map_err(|_| SphinxError::BadKey)?,
            )),
        }
    }
}

/// The per-hop routing command (`[(host, port), drop, type, delay, name]`).
#[derive(Clone, Debug, PartialEq)]
pub struct RoutingEntry {
    pub host: String,
    pub port: u16,
    pub drop: bool,
    pub type_flag: Option<i64>,
    /// Seconds the node reading this entry waits before forwarding.
    pub delay: f64,
    pub name: String,
}

/// Message type flags (the JLoopix fork's convention; upstream sends None).
pub const TYPE_REAL: i64 = 1;
pub const TYPE_DROP: i64 = 2;
pub const TYPE_LOOP: i64 = 3;

impl RoutingEntry {
    pub fn encode(&self, kind: ProfileKind) -> Vec<u8> {
        match kind {
            ProfileKind::Sphinxmix => sphinxmix::nenc(Value::Array(vec![
                Value::Array(vec![
                    Value::str(&self.host),
                    Value::Int(i128::from(self.port)),
                ]),
                Value::Bool(self.drop),
                self.type_flag
                    .map(|t| Value::Int(i128::from(t)))
                    .unwrap_or(Value::Nil),
                Value::F64(self.delay),
                Value::str(&self.name),
            ])),
            ProfileKind::X25519 => {
                // flags | type | delay_us u32be | port u16be | host_len | host | name_len | name
                let mut v = Vec::with_capacity(10 + self.host.len() + self.name.len());
                let flags = u8::from(self.drop) | (u8::from(self.type_flag.is_some()) << 1);
                v.push(flags);
                v.push(self.type_flag.unwrap_or(0).clamp(0, 255) as u8);
                let us = (self.delay.max(0.0) * 1e6).min(f64::from(u32::MAX)) as u32;
                v.extend_from_slice(&us.to_be_bytes());
                v.extend_from_slice(&self.port.to_be_bytes());
                v.push(self.host.len().min(255) as u8);
                v.extend_from_slice(&self.host.as_bytes()[..self.host.len().min(255)]);
                v.push(self.name.len().min(255) as u8);
                v.extend_from_slice(&self.name.as_bytes()[..self.name.len().min(255)]);
                v
            }
        }
    }

    /// Decodes the relay entry from a sphinxmix routing blob (`[flag, info]`).
    fn from_sphinxmix_info(info: &Value) -> Option<RoutingEntry> {
        let a = info.as_array()?;
        if a.len() != 5 {
            return None;
        }
        let addr = a[0].as_array()?;
        if addr.len() != 2 {
            return None;
        }
        let host = addr[0].as_text()?.to_string();
        let port = u16::try_from(addr[1].as_int()?).ok()?;
        let drop = a[1].as_bool()?;
        let type_flag = match &a[2] {
            Value::Nil => None,
            v => Some(i64::try_from(v.as_int()?).ok()?),
        };
        let delay = a[3].as_f64()?;
        let name = a[4].as_text()?.to_string();
        Some(RoutingEntry {
            host,
            port,
            drop,
            type_flag,
            delay,
            name,
        })
    }

    fn from_x25519(b: &[u8]) -> Option<RoutingEntry> {
        let flags = *b.first()?;
        let t = *b.get(1)?;
        let us = u32::from_be_bytes(b.get(2..6)?.try_into().ok()?);
        let port = u16::from_be_bytes(b.get(6..8)?.try_into().ok()?);
        let hl = usize::from(*b.get(8)?);
        let host = String::from_utf8(b.get(9..9 + hl)?.to_vec()).ok()?;
        let nl = usize::from(*b.get(9 + hl)?);
        let name = String::from_utf8(b.get(10 + hl..10 + hl + nl)?.to_vec()).ok()?;
        if b.len() != 10 + hl + nl {
            return None;
        }
        Some(RoutingEntry {
            host,
            port,
            drop: flags & 1 == 1,
            type_flag: (flags & 2 == 2).then_some(i64::from(t)),
            delay: f64::from(us) / 1e6,
            name,
        })
    }
}

/// Destination of a message: `(host, port, name)` in the reference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Dest {
    pub host: String,
    pub port: u16,
    pub name: String,
}

impl Dest {
    fn to_value(&self) -> Value {
        Value::Array(vec![
            Value::str(&self.host),
            Value::Int(i128::from(self.port)),
            Value::str(&self.name),
        ])
    }
    fn from_value(v: &Value) -> Option<Dest> {
        let a = v.as_array()?;
        if a.len() != 3 {
            return None;
        }
        Some(Dest {
            host: a[0].as_text()?.to_string(),
            port: u16::try_from(a[1].as_int()?).ok()?,
            name: a[2].as_text()?.to_string(),
        })
    }
    fn to_x25519(&self) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&self.port.to_be_bytes());
        v.push(self.host.len().min(255) as u8);
        v.extend_from_slice(&self.host.as_bytes()[..self.host.len().min(255)]);
        v.extend_from_slice(&self.name.as_bytes()[..self.name.len().min(200)]);
        v
    }
    fn from_x25519(b: &[u8]) -> Option<Dest> {
        let port = u16::from_be_bytes(b.get(0..2)?.try_into().ok()?);
        let hl = usize::from(*b.get(2)?);
        let host = String::from_utf8(b.get(3..3 + hl)?.to_vec()).ok()?;
        let name = String::from_utf8(b.get(3 + hl..)?.to_vec()).ok()?;
        Some(Dest { host, port, name })
    }
}

/// One hop of a path: where to send, the key, and the routing entry the
/// previous hop reads.
#[derive(Clone, Debug)]
pub struct Hop {
    pub entry: RoutingEntry,
    pub key: PublicKey,
}

/// A packet ready to send.
#[derive(Clone, Debug)]
pub struct Built {
    pub first_host: String,
    pub first_port: u16,
    pub bytes: Vec<u8>,
}

/// Builds a forward packet along `path` to `dest`.
pub fn build_packet(
    profile: &Profile,
    path: &[Hop],
    dest: &Dest,
    msg: &[u8],
    rng: &mut dyn RngCore,
) -> Result<Built, SphinxError> {
    let first = path.first().ok_or(SphinxError::BadPath)?;
    let kind = profile.kind();
    let routing: Vec<Vec<u8>> = path.iter().map(|h| h.entry.encode(kind)).collect();
    let bytes = match profile {
        Profile::Sphinxmix(p) => {
            let keys: Vec<Point> = path
                .iter()
                .map(|h| match h.key {
                    PublicKey::P224(pt) => Ok(pt),
                    PublicKey::X25519(_) => Err(SphinxError::BadKey),
                })
                .collect::<Result<_, _>>()?;
            let mut xb = [0u8; 40];
            rng.fill_bytes(&mut xb);
            let x = scalar_from_be_mod_n(&xb);
            let mut pad = |b: &mut [u8]| rng.fill_bytes(b);
            sphinxmix::create_forward_message(
                p,
                &routing,
                &keys,
                &dest.to_value(),
                msg,
                &x,
                &mut pad,
            )?
            .encode()
        }
        Profile::X25519(p) => {
            let keys: Vec<[u8; 32]> = path
                .iter()
                .map(|h| match h.key {
                    PublicKey::X25519(k) => Ok(k),
                    PublicKey::P224(_) => Err(SphinxError::BadKey),
                })
                .collect::<Result<_, _>>()?;
            x25519::create_forward(p, &routing, &keys, &dest.to_x25519(), msg, rng)?.encode()
        }
    };
    Ok(Built {
        first_host: first.entry.host.clone(),
        first_port: first.entry.port,
        bytes,
    })
}

/// What one hop of processing yields.
#[derive(Clone, Debug)]
pub enum Outcome {
    /// Forward `packet` to the node named in `next` after `next.delay`.
    Relay { next: RoutingEntry, packet: Vec<u8> },
    /// This node is the destination.
    Deliver { dest: Dest, msg: Vec<u8> },
}

/// A processed packet with its replay tag.
#[derive(Clone, Debug)]
pub struct ProcessedPacket {
    pub tag: [u8; 16],
    pub outcome: Outcome,
}

/// Why an incoming datagram was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropReason {
    /// Not a well-formed packet (garbage, truncated, bad structure, bad alpha).
    Malformed,
    /// Header MAC did not verify (wrong key or tampered header).
    BadMac,
    /// Body failed its integrity check at the destination.
    BadBody,
    /// Replay tag seen before.
    Replay,
    /// Routing entry could not be decoded.
    BadRouting,
    /// A queue or table was full.
    Overload,
    /// Delivered to a node that is not the destination named inside.
    WrongDest,
}

fn classify(e: &SphinxError) -> DropReason {
    match e {
        SphinxError::HeaderMac => DropReason::BadMac,
        SphinxError::BodyMac => DropReason::BadBody,
        _ => DropReason::Malformed,
    }
}

/// Processes one packet datagram with the node's key (pure; safe to run on
/// worker threads).
pub fn process_datagram(
    profile: &Profile,
    key: &SecretKey,
    data: &[u8],
) -> Result<ProcessedPacket, DropReason> {
    match (profile, key) {
        (Profile::Sphinxmix(p), SecretKey::P224(sk)) => {
            let pkt = sphinxmix::Packet::decode(data).map_err(|e| classify(&e))?;
            let out =
                sphinxmix::process(p, sk, &pkt.header, &pkt.body).map_err(|e| classify(&e))?;
            let r = Value::decode(&out.routing).map_err(|_| DropReason::BadRouting)?;
            let arr = r.as_array().ok_or(DropReason::BadRouting)?;
            let flag = arr
                .first()
                .and_then(sphinxmix::flag_of)
                .ok_or(DropReason::BadRouting)?;
            if flag == sphinxmix::RELAY_FLAG && arr.len() == 2 {
                let next =
                    RoutingEntry::from_sphinxmix_info(&arr[1]).ok_or(DropReason::BadRouting)?;
                Ok(ProcessedPacket {
                    tag: out.tag,
                    outcome: Outcome::Relay {
                        next,
                        packet: out.packet.encode(),
                    },
                })
            } else if flag == sphinxmix::DEST_FLAG {
                let v = sphinxmix::receive_forward(&out.mac_key, &out.packet.body)
                    .map_err(|e| classify(&e))?;
                let a = v.as_array().ok_or(DropReason::BadBody)?;
                if a.len() != 2 {
                    return Err(DropReason::BadBody);
                }
                let dest = Dest::from_value(&a[0]).ok_or(DropReason::BadBody)?;
                // The reference's receive_forward returns the message as
                // packed (Python 2 clients: bin; a Python 3 str stays str).
                let msg = a[1].as_str_or_bin().ok_or(DropReason::BadBody)?.to_vec();
                Ok(ProcessedPacket {
                    tag: out.tag,
                    outcome: Outcome::Deliver { dest, msg },
                })
            } else {
                Err(DropReason::BadRouting)
            }
        }
        (Profile::X25519(p), SecretKey::X25519(sk)) => {
            let pkt = x25519::Packet::decode(p, data).map_err(|e| classify(&e))?;
            let out = x25519::process(p, sk, &pkt).map_err(|e| classify(&e))?;
            if out.routing.is_empty() {
                let (d, msg) =
                    x25519::receive_forward(&out.packet.body).map_err(|e| classify(&e))?;
                let dest = Dest::from_x25519(&d).ok_or(DropReason::BadBody)?;
                Ok(ProcessedPacket {
                    tag: out.tag,
                    outcome: Outcome::Deliver { dest, msg },
                })
            } else {
                let next = RoutingEntry::from_x25519(&out.routing).ok_or(DropReason::BadRouting)?;
                Ok(ProcessedPacket {
                    tag: out.tag,
                    outcome: Outcome::Relay {
                        next,
                        packet: out.packet.encode(),
                    },
                })
            }
        }
        _ => Err(DropReason::Malformed),
    }
}

/// Control messages between clients and providers (msgpack arrays whose
/// first item is a word; Sphinx datagrams never look like that).
#[derive(Clone, Debug, PartialEq)]
pub enum Control {
    /// An authenticated SUBSCRIBE or PULL (see [`super::control`]).
    Auth(AuthRequest),
    /// The reference's unauthenticated `['SUBSCRIBE', name, host, port(,
    /// pubk)]` or `['PULL', name]`: recognised only to be refused and
    /// counted (it is never answered).
    Legacy { kind: ControlKind, name: String },
    /// `('DUMMY', noise, noise)`: a provider's filler answer to PULL.
    Dummy,
}

impl Control {
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Control::Auth(r) => r.encode(),
            Control::Legacy {
                kind: ControlKind::Subscribe,
                name,
            } => legacy_subscribe(name, "0.0.0.0", 0),
            Control::Legacy {
                kind: ControlKind::Pull,
                name,
            } => legacy_pull(name),
            // The shape `dummy` sends (word and two noise fields), so that
            // `parse` recognises it: a one-item array is not a control
            // message.
            Control::Dummy => Value::Array(vec![
                Value::str("DUMMY"),
                Value::Bin(vec![]),
                Value::Bin(vec![]),
            ])
            .encode(),
        }
    }

    /// A dummy with `noise` random bytes in each of its two fields.
    pub fn dummy(noise: usize, rng: &mut dyn RngCore) -> Vec<u8> {
        let mut a = vec![0u8; noise];
        let mut b = vec![0u8; noise];
        rng.fill_bytes(&mut a);
        rng.fill_bytes(&mut b);
        Value::Array(vec![Value::str("DUMMY"), Value::Bin(a), Value::Bin(b)]).encode()
    }

    /// Recognises a control message; `None` for anything else (packets).
    pub fn parse(data: &[u8]) -> Option<Control> {
        // Control messages are short msgpack arrays (2 to 6 items) whose
        // first item is a word (str from Python 3, bin from Python 2).
        let first = *data.first()?;
        if !(0x92..=0x96).contains(&first) || data.len() > 4096 {
            return None;
        }
        let v = Value::decode(data).ok()?;
        let a = v.as_array()?;
        let word = match a.first()? {
            w @ (Value::Str(_) | Value::Bin(_)) => w.as_text()?,
            _ => return None,
        };
        if word == "DUMMY" {
            return Some(Control::Dummy);
        }
        let kind = ControlKind::from_word(word)?;
        if let Some(r) = AuthRequest::from_items(kind, a) {
            return Some(Control::Auth(r));
        }
        let name = a.get(1)?.as_text()?.to_string();
        let legacy_shape = match kind {
            ControlKind::Subscribe => {
                (a.len() == 4 || a.len() == 5)
                    && a[2].as_text().is_some()
                    && a[3].as_int().is_some()
            }
            ControlKind::Pull => a.len() == 2,
        };
        legacy_shape.then_some(Control::Legacy { kind, name })
    }
}

/// The reference's unauthenticated SUBSCRIBE (for tests and tools).
pub fn legacy_subscribe(name: &str, host: &str, port: u16) -> Vec<u8> {
    Value::Array(vec![
        Value::str("SUBSCRIBE"),
        Value::str(name),
        Value::str(host),
        Value::Int(i128::from(port)),
    ])
    .encode()
}

/// The reference's unauthenticated PULL (for tests and tools).
pub fn legacy_pull(name: &str) -> Vec<u8> {
    Value::Array(vec![Value::str("PULL"), Value::str(name)]).encode()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routing_entries_roundtrip_both_profiles() {
        let e = RoutingEntry {
            host: "127.0.0.1".into(),
            port: 30101,
            drop: true,
            type_flag: Some(TYPE_DROP),
            delay: 0.0123,
            name: "mix0".into(),
        };
        let b = e.encode(ProfileKind::X25519);
        assert_eq!(RoutingEntry::from_x25519(&b), Some(e.clone()));
        let s = e.encode(ProfileKind::Sphinxmix);
        let v = Value::decode(&s).expect("msgpack");
        assert_eq!(
            RoutingEntry::from_sphinxmix_info(&v.as_array().expect("arr")[1]),
            Some(e)
        );
    }

    #[test]
    fn control_messages() {
        let sub = legacy_subscribe("c1", "127.0.0.1", 5);
        assert_eq!(
            Control::parse(&sub),
            Some(Control::Legacy {
                kind: ControlKind::Subscribe,
                name: "c1".into()
            })
        );
        assert_eq!(
            Control::parse(&legacy_pull("c1")),
            Some(Control::Legacy {
                kind: ControlKind::Pull,
                name: "c1".into()
            })
        );
        // Python 2 packs the words as bin: still recognised (and refused)
        let py2 = Value::Array(vec![Value::bin(b"PULL"), Value::bin(b"c1")]).encode();
        assert!(matches!(Control::parse(&py2), Some(Control::Legacy { .. })));
        let r = AuthRequest {
            kind: ControlKind::Pull,
            client: "c1".into(),
            provider: "p0".into(),
            ts_ms: 1_800_000_000_000,
            mac: [7; 16],
        };
        assert_eq!(Control::parse(&r.encode()), Some(Control::Auth(r.clone())));
        // a MAC of the wrong length or a str MAC is not an auth request
        let mut bad = Value::decode(&r.encode()).expect("msgpack");
        if let Value::Array(a) = &mut bad {
            a[5] = Value::Str(vec![7; 16]);
        }
        assert_eq!(Control::parse(&bad.encode()), None);
        let mut rng = rand::thread_rng();
        assert_eq!(
            Control::parse(&Control::dummy(500, &mut rng)),
            Some(Control::Dummy)
        );
        assert_eq!(
            Control::parse(&Control::Dummy.encode()),
            Some(Control::Dummy)
        );
        assert_eq!(Control::parse(b"garbage"), None);
        assert_eq!(Control::parse(&[0x92, 0x01, 0x02]), None);
    }

    #[test]
    fn routing_entry_python2_bin_fields() {
        // Python 2 Loopix packs str as bin: flag `c4 01 f0`, host and name
        // as bin. Header bytes differ from Python 3's, the entry is the same.
        let e = RoutingEntry {
            host: "127.0.0.1".into(),
            port: 30101,
            drop: false,
            type_flag: None,
            delay: 0.0123,
            name: "mix0".into(),
        };
        let py2 = Value::Array(vec![
            Value::Bin(vec![sphinxmix::RELAY_FLAG]),
            Value::Array(vec![
                Value::Array(vec![Value::bin(b"127.0.0.1"), Value::Int(30101)]),
                Value::Bool(false),
                Value::Nil,
                Value::F64(0.0123),
                Value::bin(b"mix0"),
            ]),
        ]);
        let a = py2.as_array().expect("array");
        assert_eq!(sphinxmix::flag_of(&a[0]), Some(sphinxmix::RELAY_FLAG));
        assert_eq!(RoutingEntry::from_sphinxmix_info(&a[1]), Some(e));
        // a name that is not UTF-8 is refused in either form
        let bad = Value::Array(vec![
            Value::Array(vec![Value::bin(b"127.0.0.1"), Value::Int(1)]),
            Value::Bool(false),
            Value::Nil,
            Value::F64(0.0),
            Value::Str(vec![0xff]),
        ]);
        assert_eq!(RoutingEntry::from_sphinxmix_info(&bad), None);
    }

    #[test]
    fn reference_loopix_routing_bytes() {
        // From fixtures/sphinxmix_vec2 (produced by Python sphinxmix Nenc).
        let e = RoutingEntry {
            host: "127.0.0.1".into(),
            port: 30101,
            drop: false,
            type_flag: None,
            delay: 0.0123,
            name: "mix0".into(),
        };
        assert_eq!(
            hex::encode(e.encode(ProfileKind::Sphinxmix)),
            "92a2c3b09592a93132372e302e302e31cd7595c2c0cb3f8930be0ded288da46d697830"
        );
    }
}
