//! Directory-authority documents (dir-spec §3), sans-IO: microdescriptors
//! built from router descriptors, signed status votes, the consensus
//! computation over several votes (microdesc flavour, consensus method
//! 35), bandwidth weights (§3.8.3), consensus signatures and detached
//! signatures (§3.10).
//!
//! Only onionmix authorities read the votes and detached signatures this
//! module writes, but both follow dir-spec's layouts; the consensus is
//! the document stock tor clients and ours verify and use.
//!
//! Consensus rules applied (dir-spec §3.8.1, for the fields we vote on):
//! a relay is listed when more than half of the votes list it and more
//! than half of those give it `Running`; a flag is set when more than half
//! of the votes that list the relay (and know the flag) set it; the
//! descriptor (and so address, ports, microdescriptor) is the one most
//! votes name, ties to the latest published; `v`/`pr` are the most common
//! values; `w Bandwidth` is the low median, capped at `maxunmeasuredbw`
//! (20) since nothing is measured; header times and protocol lines are
//! the most common values; params are included when more than half of the
//! votes set them, with the low median value.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::SystemTime;

use base64::Engine;
use sha1::{Digest as _, Sha1};
use sha2::Sha256;

use onionmix_crypto::rsa_id::{RsaKeypair, pem_wrap};
use onionmix_crypto::timefmt::{format_utc, parse_utc};

use crate::authority::AuthCertificate;

/// The consensus method this authority implements.
pub const CONSENSUS_METHOD: u32 = 35;
/// Largest vote accepted from a peer.
pub const MAX_VOTE_LEN: usize = 4 << 20;
/// Most relays a vote may list.
pub const MAX_VOTE_RELAYS: usize = 20_000;
/// Bandwidth (KB/s) given to unmeasured relays at most (dir-spec
/// `maxunmeasuredbw`).
pub const MAX_UNMEASURED_BW: u64 = 20;
/// Published time written in consensus `r` lines since method 32... it is
/// a fixed placeholder, as tor writes it.
const FAR_FUTURE: &str = "2038-01-01 00:00:00";

/// Errors reading or building authority documents.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VoteError {
    /// A document is malformed.
    #[error("malformed {what}: {why}")]
    Malformed {
        /// What was being read.
        what: &'static str,
        /// What is wrong.
        why: String,
    },
    /// A signature does not verify or a certificate is bad.
    #[error("bad signature: {0}")]
    BadSignature(String),
    /// Signing failed.
    #[error("signing failed: {0}")]
    Sign(String),
    /// Too few votes to compute a consensus.
    #[error("not enough votes: have {have}, need {need}")]
    NotEnoughVotes {
        /// Votes available.
        have: usize,
        /// Votes needed (more than half of the authorities).
        need: usize,
    },
}

fn malformed(what: &'static str, why: impl Into<String>) -> VoteError {
    VoteError::Malformed {
        what,
        why: why.into(),
    }
}

fn b64(d: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(d)
}
fn b64_nopad(d: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(d)
}
fn unb64(s: &str) -> Option<Vec<u8>> {
    base64::engine::general_purpose::STANDARD_NO_PAD
        .decode(s.trim_end_matches('='))
        .ok()
}

/// What goes into a microdescriptor (dir-spec §3.3), taken from a verified
/// router descriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MicrodescParts {
    /// The descriptor's `onion-key` object (PEM, with BEGIN/END lines and
    /// a final newline), if it has one.
    pub onion_key_pem: Option<String>,
    /// Curve25519 ntor onion key.
    pub ntor_onion_key: [u8; 32],
    /// Family members, as written in the descriptor (`$HEX` or nicknames).
    pub family: Vec<String>,
    /// IPv4 exit port summary (`accept ...` / `reject ...`).
    pub policy_summary: String,
    /// Ed25519 identity.
    pub ed_id: [u8; 32],
}

/// Build a microdescriptor and its SHA-256 digest.
pub fn build_microdesc(p: &MicrodescParts) -> (String, [u8; 32]) {
    let mut s = String::new();
    if let Some(k) = &p.onion_key_pem {
        s.push_str("onion-key\n");
        s.push_str(k);
        if !k.ends_with('\n') {
            s.push('\n');
        }
    }
    s.push_str(&format!(
        "ntor-onion-key {}\n",
        b64_nopad(&p.ntor_onion_key)
    ));
    if !p.family.is_empty() {
        let mut fam = p.family.clone();
        fam.sort();
        fam.dedup();
        s.push_str(&format!("family {}\n", fam.join(" ")));
    }
    if p.policy_summary != "reject 1-65535" && !p.policy_summary.is_empty() {
        s.push_str(&format!("p {}\n", p.policy_summary));
    }
    s.push_str(&format!("id ed25519 {}\n", b64_nopad(&p.ed_id)));
    let d: [u8; 32] = Sha256::digest(s.as_bytes()).into();
    (s, d)
}

/// One relay as an authority votes on it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterEntry {
    /// Nickname.
    pub nickname: String,
    /// RSA identity fingerprint.
    pub rsa_id: [u8; 20],
    /// Ed25519 identity.
    pub ed_id: [u8; 32],
    /// SHA-1 digest of the router descriptor.
    pub desc_digest: [u8; 20],
    /// Descriptor publication time (unix).
    pub published: u64,
    /// IPv4 address.
    pub address: Ipv4Addr,
    /// ORPort.
    pub or_port: u16,
    /// DirPort (0: none).
    pub dir_port: u16,
    /// Flags (any order; written sorted).
    pub flags: BTreeSet<String>,
    /// Version string for the `v` line (platform up to " on "), if any.
    pub version: Option<String>,
    /// `pr` line value.
    pub protocols: String,
    /// Bandwidth in KB/s.
    pub bandwidth_kb: u64,
    /// Exit port summary.
    pub policy_summary: String,
    /// Microdescriptor digest.
    pub md_digest: [u8; 32],
}

/// The header of a vote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VoteHeader {
    /// Authority nickname.
    pub nickname: String,
    /// Authority v3 identity fingerprint.
    pub v3ident: [u8; 20],
    /// Address.
    pub address: Ipv4Addr,
    /// DirPort.
    pub dir_port: u16,
    /// ORPort.
    pub or_port: u16,
    /// Contact line.
    pub contact: String,
    /// When the vote was made (unix).
    pub published: u64,
    /// Consensus times (unix).
    pub valid_after: u64,
    /// See `valid_after`.
    pub fresh_until: u64,
    /// See `valid_after`.
    pub valid_until: u64,
    /// Vote and distribution delays (seconds).
    pub voting_delay: (u32, u32),
    /// Flags this authority knows (votes on).
    pub known_flags: BTreeSet<String>,
    /// recommended-client, recommended-relay, required-client,
    /// required-relay protocol lines.
    pub protocols: [String; 4],
    /// Consensus parameters.
    pub params: BTreeMap<String, i32>,
}

const PROTO_KEYWORDS: [&str; 4] = [
    "recommended-client-protocols",
    "recommended-relay-protocols",
    "required-client-protocols",
    "required-relay-protocols",
];

/// Protocol lines tor 0.4.9 authorities vote, minus the subprotocols
/// onionmix does not implement yet (the onion-service ones HSDir,
/// HSIntro, HSRend): a stock relay or client under onionmix authorities
/// is asked for nothing stock authorities would not ask, and an onionmix
/// relay meets every line it is held to (FlowCtrl=2, congestion control,
/// included).
pub fn default_protocol_lines() -> [String; 4] {
    [
        "Cons=2 Desc=2 DirCache=2 FlowCtrl=1-2 Link=4-5 Microdesc=2 Relay=2-4".into(),
        "Cons=2 Desc=2 DirCache=2 FlowCtrl=1-2 Link=4-5 LinkAuth=3 Microdesc=2 Relay=2-4".into(),
        "Cons=2 Desc=2 FlowCtrl=1 Link=4 Microdesc=2 Relay=2".into(),
        "Cons=2 Desc=2 DirCache=2 FlowCtrl=1-2 Link=4-5 LinkAuth=3 Microdesc=2 Relay=2-4".into(),
    ]
}

/// A parsed vote whose signature and certificate were verified.
#[derive(Debug, Clone)]
pub struct Vote {
    /// Header.
    pub header: VoteHeader,
    /// Relays, sorted by RSA identity.
    pub relays: Vec<RouterEntry>,
    /// SHA-1 digest of the signed part (the consensus `vote-digest`).
    pub digest: [u8; 20],
    /// The embedded key certificate (text).
    pub certificate_text: String,
    /// The embedded key certificate.
    pub certificate: AuthCertificate,
}

fn params_line(p: &BTreeMap<String, i32>) -> String {
    p.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn flags_line(f: &BTreeSet<String>) -> String {
    f.iter().cloned().collect::<Vec<_>>().join(" ")
}

/// Build and sign a status vote. `certificate` is the authority's key
/// certificate text; `signing` its certified signing key.
pub fn build_vote(
    h: &VoteHeader,
    relays: &[RouterEntry],
    certificate: &str,
    signing: &RsaKeypair,
) -> Result<String, VoteError> {
    let mut d = String::with_capacity(4096 + relays.len() * 512);
    d.push_str("network-status-version 3\nvote-status vote\n");
    d.push_str(&format!("consensus-methods {CONSENSUS_METHOD}\n"));
    d.push_str(&format!("published {}\n", format_utc(h.published)));
    d.push_str(&format!("valid-after {}\n", format_utc(h.valid_after)));
    d.push_str(&format!("fresh-until {}\n", format_utc(h.fresh_until)));
    d.push_str(&format!("valid-until {}\n", format_utc(h.valid_until)));
    d.push_str(&format!(
        "voting-delay {} {}\n",
        h.voting_delay.0, h.voting_delay.1
    ));
    d.push_str("client-versions \nserver-versions \n");
    d.push_str(&format!("known-flags {}\n", flags_line(&h.known_flags)));
    for (k, v) in PROTO_KEYWORDS.iter().zip(h.protocols.iter()) {
        d.push_str(&format!("{k} {v}\n"));
    }
    d.push_str(&format!("params {}\n", params_line(&h.params)));
    d.push_str(&format!(
        "dir-source {} {} {} {} {} {}\n",
        h.nickname,
        hex::encode_upper(h.v3ident),
        h.address,
        h.address,
        h.dir_port,
        h.or_port
    ));
    d.push_str(&format!("contact {}\n", h.contact));
    d.push_str(certificate);
    if !certificate.ends_with('\n') {
        d.push('\n');
    }
    let mut sorted: Vec<&RouterEntry> = relays.iter().collect();
    sorted.sort_by_key(|r| r.rsa_id);
    for r in sorted {
        d.push_str(&format!(
            "r {} {} {} {} {} {} {}\n",
            r.nickname,
            b64_nopad(&r.rsa_id),
            b64_nopad(&r.desc_digest),
            format_utc(r.published),
            r.address,
            r.or_port,
            r.dir_port
        ));
        d.push_str(&format!("s {}\n", flags_line(&r.flags)));
        if let Some(v) = &r.version {
            d.push_str(&format!("v {v}\n"));
        }
        d.push_str(&format!("pr {}\n", r.protocols));
        d.push_str(&format!("w Bandwidth={}\n", r.bandwidth_kb));
        d.push_str(&format!("p {}\n", r.policy_summary));
        d.push_str(&format!("id ed25519 {}\n", b64_nopad(&r.ed_id)));
        d.push_str(&format!(
            "m {CONSENSUS_METHOD} sha256={}\n",
            b64_nopad(&r.md_digest)
        ));
    }
    d.push_str("directory-footer\n");
    let sk_fp = signing.public().fingerprint_hex();
    d.push_str("directory-signature ");
    let digest = Sha1::digest(d.as_bytes());
    let sig = signing
        .sign_raw(&digest)
        .map_err(|e| VoteError::Sign(e.to_string()))?;
    d.push_str(&format!("{} {sk_fp}\n", hex::encode_upper(h.v3ident)));
    d.push_str(&pem_wrap("SIGNATURE", &sig));
    Ok(d)
}

fn hex20(s: &str, what: &'static str) -> Result<[u8; 20], VoteError> {
    let v = hex::decode(s).map_err(|_| malformed(what, "bad hex fingerprint"))?;
    v.try_into()
        .map_err(|_| malformed(what, "fingerprint is not 20 bytes"))
}

fn fixed<const N: usize>(s: &str, what: &'static str) -> Result<[u8; N], VoteError> {
    let v = unb64(s).ok_or_else(|| malformed(what, "bad base64"))?;
    v.try_into().map_err(|_| malformed(what, "wrong length"))
}

fn time_of(rest: &str, what: &'static str) -> Result<u64, VoteError> {
    parse_utc(rest.trim()).ok_or_else(|| malformed(what, format!("bad time {rest:?}")))
}

/// Split off a PEM object that starts at `text` (BEGIN line first).
fn take_object<'a>(text: &'a str, label: &str) -> Option<(&'a str, &'a str)> {
    let begin = format!("-----BEGIN {label}-----\n");
    let end = format!("-----END {label}-----\n");
    if !text.starts_with(&begin) {
        return None;
    }
    let e = text.find(&end)? + end.len();
    Some((&text[..e], &text[e..]))
}

fn object_bytes(obj: &str) -> Option<Vec<u8>> {
    let body: String = obj
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .join("");
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

/// Parse a vote, verify its embedded certificate (valid at `now`) and its
/// signature.
pub fn parse_vote(text: &str, now: SystemTime) -> Result<Vote, VoteError> {
    const W: &str = "vote";
    if text.len() > MAX_VOTE_LEN {
        return Err(malformed(W, "too long"));
    }
    if !text.starts_with("network-status-version 3\n") {
        return Err(malformed(W, "does not start with network-status-version 3"));
    }
    // Signature first: everything up to "directory-signature ".
    let sig_at = text
        .rfind("\ndirectory-signature ")
        .ok_or_else(|| malformed(W, "no directory-signature"))?
        + 1;
    let signed = &text[..sig_at + "directory-signature ".len()];
    let digest: [u8; 20] = Sha1::digest(signed.as_bytes()).into();
    let sig_rest = &text[sig_at + "directory-signature ".len()..];
    let (sig_line, sig_obj) = sig_rest
        .split_once('\n')
        .ok_or_else(|| malformed(W, "truncated signature"))?;
    let (sig_obj, _) =
        take_object(sig_obj, "SIGNATURE").ok_or_else(|| malformed(W, "no signature object"))?;
    let sig = object_bytes(sig_obj).ok_or_else(|| malformed(W, "bad signature object"))?;
    let sig_ids: Vec<&str> = sig_line.split_whitespace().collect();
    let [sig_id, sig_sk] = sig_ids[..] else {
        return Err(malformed(W, "bad directory-signature line"));
    };
    let sig_id = hex20(sig_id, W)?;
    let sig_sk = hex20(sig_sk, W)?;

    // The certificate.
    let cstart = text
        .find("\ndir-key-certificate-version 3\n")
        .ok_or_else(|| malformed(W, "no key certificate"))?
        + 1;
    let cend_marker = "dir-key-certification\n";
    let cm = text[cstart..]
        .find(cend_marker)
        .ok_or_else(|| malformed(W, "unterminated key certificate"))?
        + cstart
        + cend_marker.len();
    let (obj, _) = take_object(&text[cm..], "SIGNATURE")
        .ok_or_else(|| malformed(W, "key certificate without signature"))?;
    let cert_text = &text[cstart..cm + obj.len()];
    let cert = AuthCertificate::parse(cert_text, now)
        .map_err(|e| VoteError::BadSignature(format!("key certificate: {e}")))?;
    if cert.id_fingerprint() != sig_id || cert.signing_key_fingerprint() != sig_sk {
        return Err(VoteError::BadSignature(
            "signature names another key than the certificate".into(),
        ));
    }
    if !cert.verify_digest(&digest, &sig) {
        return Err(VoteError::BadSignature("vote signature".into()));
    }

    // Header and relays.
    let mut h = VoteHeader {
        nickname: String::new(),
        v3ident: [0; 20],
        address: Ipv4Addr::UNSPECIFIED,
        dir_port: 0,
        or_port: 0,
        contact: String::new(),
        published: 0,
        valid_after: 0,
        fresh_until: 0,
        valid_until: 0,
        voting_delay: (0, 0),
        known_flags: BTreeSet::new(),
        protocols: Default::default(),
        params: BTreeMap::new(),
    };
    let mut relays: Vec<RouterEntry> = Vec::new();
    let mut seen_source = false;
    let body = format!(
        "{}{}",
        &text[..cstart],
        &text[cstart + cert_text.len()..sig_at]
    );
    for line in body.lines() {
        let (kw, rest) = line.split_once(' ').unwrap_or((line, ""));
        match kw {
            "vote-status" if rest != "vote" => return Err(malformed(W, "not a vote")),
            "published" => h.published = time_of(rest, W)?,
            "valid-after" => h.valid_after = time_of(rest, W)?,
            "fresh-until" => h.fresh_until = time_of(rest, W)?,
            "valid-until" => h.valid_until = time_of(rest, W)?,
            "voting-delay" => {
                let v: Vec<u32> = rest
                    .split_whitespace()
                    .map(|x| x.parse().map_err(|_| malformed(W, "bad voting-delay")))
                    .collect::<Result<_, _>>()?;
                let [a, b] = v[..] else {
                    return Err(malformed(W, "bad voting-delay"));
                };
                h.voting_delay = (a, b);
            }
            "known-flags" => {
                h.known_flags = rest.split_whitespace().map(str::to_string).collect();
            }
            "params" => {
                for kv in rest.split_whitespace() {
                    let (k, v) = kv
                        .split_once('=')
                        .ok_or_else(|| malformed(W, "bad param"))?;
                    let v: i32 = v.parse().map_err(|_| malformed(W, "bad param value"))?;
                    h.params.insert(k.to_string(), v);
                }
            }
            "dir-source" => {
                let f: Vec<&str> = rest.split_whitespace().collect();
                let [nick, id, _host, ip, dp, op] = f[..] else {
                    return Err(malformed(W, "bad dir-source"));
                };
                h.nickname = nick.to_string();
                h.v3ident = hex20(id, W)?;
                h.address = ip
                    .parse()
                    .map_err(|_| malformed(W, "bad dir-source address"))?;
                h.dir_port = dp
                    .parse()
                    .map_err(|_| malformed(W, "bad dir-source port"))?;
                h.or_port = op
                    .parse()
                    .map_err(|_| malformed(W, "bad dir-source port"))?;
                seen_source = true;
            }
            "contact" => h.contact = rest.to_string(),
            "r" => {
                if relays.len() >= MAX_VOTE_RELAYS {
                    return Err(malformed(W, "too many relays"));
                }
                let f: Vec<&str> = rest.split_whitespace().collect();
                let [nick, id, dd, date, time, ip, op, dp] = f[..] else {
                    return Err(malformed(W, "bad r line"));
                };
                relays.push(RouterEntry {
                    nickname: nick.to_string(),
                    rsa_id: fixed(id, W)?,
                    ed_id: [0; 32],
                    desc_digest: fixed(dd, W)?,
                    published: time_of(&format!("{date} {time}"), W)?,
                    address: ip.parse().map_err(|_| malformed(W, "bad r address"))?,
                    or_port: op.parse().map_err(|_| malformed(W, "bad r port"))?,
                    dir_port: dp.parse().map_err(|_| malformed(W, "bad r port"))?,
                    flags: BTreeSet::new(),
                    version: None,
                    protocols: String::new(),
                    bandwidth_kb: 0,
                    policy_summary: "reject 1-65535".into(),
                    md_digest: [0; 32],
                });
            }
            "s" | "v" | "pr" | "w" | "p" | "id" | "m" => {
                let r = relays
                    .last_mut()
                    .ok_or_else(|| malformed(W, "relay item before any r line"))?;
                match kw {
                    "s" => r.flags = rest.split_whitespace().map(str::to_string).collect(),
                    "v" => r.version = Some(rest.to_string()),
                    "pr" => r.protocols = rest.to_string(),
                    "w" => {
                        for kv in rest.split_whitespace() {
                            if let Some(v) = kv.strip_prefix("Bandwidth=") {
                                r.bandwidth_kb =
                                    v.parse().map_err(|_| malformed(W, "bad w line"))?;
                            }
                        }
                    }
                    "p" => r.policy_summary = rest.to_string(),
                    "id" => {
                        let v = rest
                            .strip_prefix("ed25519 ")
                            .ok_or_else(|| malformed(W, "bad id line"))?;
                        r.ed_id = fixed(v, W)?;
                    }
                    _ => {
                        // m <methods> sha256=<digest>
                        let mut it = rest.split_whitespace();
                        let methods = it.next().unwrap_or("");
                        if methods
                            .split(',')
                            .any(|m| m == CONSENSUS_METHOD.to_string())
                        {
                            for d in it {
                                if let Some(v) = d.strip_prefix("sha256=") {
                                    r.md_digest = fixed(v, W)?;
                                }
                            }
                        }
                    }
                }
            }
            _ => {
                if let Some(i) = PROTO_KEYWORDS.iter().position(|k| *k == kw) {
                    h.protocols[i] = rest.to_string();
                }
            }
        }
    }
    if !seen_source {
        return Err(malformed(W, "no dir-source"));
    }
    if h.v3ident != cert.id_fingerprint() {
        return Err(VoteError::BadSignature(
            "dir-source names another authority than the certificate".into(),
        ));
    }
    if !(h.valid_after < h.fresh_until && h.fresh_until < h.valid_until) {
        return Err(malformed(W, "times out of order"));
    }
    for r in &relays {
        if r.md_digest == [0; 32] {
            return Err(malformed(W, format!("relay {} has no m line", r.nickname)));
        }
    }
    relays.sort_by_key(|r| r.rsa_id);
    relays.dedup_by_key(|r| r.rsa_id);
    Ok(Vote {
        header: h,
        relays,
        digest,
        certificate_text: cert_text.to_string(),
        certificate: cert,
    })
}

fn most_common<T: Ord + Clone>(items: impl IntoIterator<Item = T>) -> Option<T> {
    let mut counts: BTreeMap<T, usize> = BTreeMap::new();
    for i in items {
        *counts.entry(i).or_default() += 1;
    }
    // Ties go to the largest value (deterministic for every authority).
    counts
        .into_iter()
        .max_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)))
        .map(|(v, _)| v)
}

fn low_median<T: Ord + Copy>(mut v: Vec<T>) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    v.sort();
    Some(v[(v.len() - 1) / 2])
}

/// Bandwidth weights (dir-spec §3.8.3, consensus method 26 and later:
/// G, M, E, D start at 1). `relays` gives (bandwidth, Guard, Exit) per
/// listed relay. Returned in the order the consensus writes them.
pub fn bandwidth_weights(relays: &[(u64, bool, bool)], scale: i64) -> Vec<(&'static str, i64)> {
    let (mut g, mut m, mut e, mut d) = (1i64, 1i64, 1i64, 1i64);
    for &(bw, guard, exit) in relays {
        let bw = bw as i64;
        match (guard, exit) {
            (true, true) => d += bw,
            (true, false) => g += bw,
            (false, true) => e += bw,
            (false, false) => m += bw,
        }
    }
    let t = g + m + e + d;
    let w = scale;
    let (wgg, wgd, wmg, wme, wmd, wee, wed);
    if 3 * e >= t && 3 * g >= t {
        // Case 1.
        wgd = w / 3;
        wed = w / 3;
        wmd = w / 3;
        wee = (w * (e + g + m)) / (3 * e);
        wme = w - wee;
        wmg = (w * (2 * g - e - m)) / (3 * g);
        wgg = w - wmg;
    } else if 3 * e < t && 3 * g < t {
        // Case 2.
        let (r, s) = if e < g { (e, g) } else { (g, e) };
        if r + d < s {
            wgg = w;
            wee = w;
            wmg = 0;
            wme = 0;
            wmd = 0;
            if e < g {
                wed = w;
                wgd = 0;
            } else {
                wed = 0;
                wgd = w;
            }
        } else {
            let a_wee = (w * (e - g + m)) / e;
            let a_wed = (w * (d - 2 * e + 4 * g - 2 * m)) / (3 * d);
            let a_wme = (w * (g - m)) / e;
            let a_wmd = (w - a_wed) / 2;
            let a_wgd = (w - a_wed) / 2;
            let in_range = |x: i64| (0..=w).contains(&x);
            if [a_wee, a_wed, a_wme, a_wmd, a_wgd]
                .iter()
                .all(|x| in_range(*x))
            {
                wee = a_wee;
                wed = a_wed;
                wme = a_wme;
                wmg = 0;
                wgg = w;
                wmd = a_wmd;
                wgd = a_wgd;
            } else {
                wgg = w;
                wee = w;
                let b_wed = (w * (d - 2 * e + g + m)) / (3 * d);
                let mut b_wmd = (w * (d - 2 * m + g + e)) / (3 * d);
                wme = 0;
                wmg = 0;
                if 3 * m > t || b_wmd < 0 {
                    b_wmd = 0;
                }
                wed = b_wed;
                wmd = b_wmd;
                wgd = w - b_wed - b_wmd;
            }
        }
    } else {
        // Case 3: exactly one of E, G is scarce.
        let g_scarce = 3 * g < t;
        let s = if g_scarce { g } else { e };
        if 3 * (s + d) < t {
            if g_scarce {
                wgg = w;
                wgd = w;
                wmd = 0;
                wed = 0;
                wmg = 0;
                wme = if e < m { 0 } else { (w * (e - m)) / (2 * e) };
                wee = w - wme;
            } else {
                wee = w;
                wed = w;
                wmd = 0;
                wgd = 0;
                wme = 0;
                wmg = if g < m { 0 } else { (w * (g - m)) / (2 * g) };
                wgg = w - wmg;
            }
        } else if g_scarce {
            wgg = w;
            wgd = (w * (d - 2 * g + e + m)) / (3 * d);
            wmg = 0;
            wee = (w * (e + m)) / (2 * e);
            wme = w - wee;
            wmd = (w - wgd) / 2;
            wed = (w - wgd) / 2;
        } else {
            wee = w;
            wed = (w * (d - 2 * e + g + m)) / (3 * d);
            wme = 0;
            wgg = (w * (g + m)) / (2 * g);
            wmg = w - wgg;
            wmd = (w - wed) / 2;
            wgd = (w - wed) / 2;
        }
    }
    vec![
        ("Wbd", wmd),
        ("Wbe", wme),
        ("Wbg", wmg),
        ("Wbm", w),
        ("Wdb", w),
        ("Web", w),
        ("Wed", wed),
        ("Wee", wee),
        ("Weg", wed),
        ("Wem", wee),
        ("Wgb", w),
        ("Wgd", wgd),
        ("Wgg", wgg),
        ("Wgm", wgg),
        ("Wmb", w),
        ("Wmd", wmd),
        ("Wme", wme),
        ("Wmg", wmg),
        ("Wmm", w),
    ]
}

/// The unsigned microdesc consensus computed from `votes` (each verified
/// by the caller), with `n_authorities` configured authorities. The text
/// ends after the `bandwidth-weights` line; signatures follow it.
pub fn compute_consensus(votes: &[Vote], n_authorities: usize) -> Result<String, VoteError> {
    let need = n_authorities / 2 + 1;
    // One vote per authority.
    let mut by_auth: BTreeMap<[u8; 20], &Vote> = BTreeMap::new();
    for v in votes {
        by_auth.entry(v.header.v3ident).or_insert(v);
    }
    if by_auth.len() < need {
        return Err(VoteError::NotEnoughVotes {
            have: by_auth.len(),
            need,
        });
    }
    let votes: Vec<&Vote> = by_auth.values().copied().collect();
    let nv = votes.len();
    let times = most_common(votes.iter().map(|v| {
        (
            v.header.valid_after,
            v.header.fresh_until,
            v.header.valid_until,
            v.header.voting_delay,
        )
    }))
    .ok_or(VoteError::NotEnoughVotes { have: 0, need })?;
    let mut known: BTreeSet<String> = BTreeSet::new();
    for v in &votes {
        known.extend(v.header.known_flags.iter().cloned());
    }
    let mut d = String::with_capacity(8192);
    d.push_str("network-status-version 3 microdesc\nvote-status consensus\n");
    d.push_str(&format!("consensus-method {CONSENSUS_METHOD}\n"));
    d.push_str(&format!("valid-after {}\n", format_utc(times.0)));
    d.push_str(&format!("fresh-until {}\n", format_utc(times.1)));
    d.push_str(&format!("valid-until {}\n", format_utc(times.2)));
    d.push_str(&format!("voting-delay {} {}\n", times.3.0, times.3.1));
    d.push_str("client-versions \nserver-versions \n");
    d.push_str(&format!("known-flags {}\n", flags_line(&known)));
    for (i, k) in PROTO_KEYWORDS.iter().enumerate() {
        let v =
            most_common(votes.iter().map(|v| v.header.protocols[i].clone())).unwrap_or_default();
        d.push_str(&format!("{k} {v}\n"));
    }
    let mut params: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    for v in &votes {
        for (k, x) in &v.header.params {
            params.entry(k.clone()).or_default().push(*x);
        }
    }
    let params: BTreeMap<String, i32> = params
        .into_iter()
        .filter(|(_, xs)| 2 * xs.len() > nv)
        .filter_map(|(k, xs)| low_median(xs).map(|m| (k, m)))
        .collect();
    if !params.is_empty() {
        d.push_str(&format!("params {}\n", params_line(&params)));
    }
    for v in &votes {
        let h = &v.header;
        d.push_str(&format!(
            "dir-source {} {} {} {} {} {}\n",
            h.nickname,
            hex::encode_upper(h.v3ident),
            h.address,
            h.address,
            h.dir_port,
            h.or_port
        ));
        d.push_str(&format!("contact {}\n", h.contact));
        d.push_str(&format!("vote-digest {}\n", hex::encode_upper(v.digest)));
    }
    // Relays.
    let mut ids: BTreeMap<[u8; 20], Vec<&RouterEntry>> = BTreeMap::new();
    for v in &votes {
        for r in &v.relays {
            ids.entry(r.rsa_id).or_default().push(r);
        }
    }
    let mut listed: Vec<(u64, bool, bool)> = Vec::new();
    for (id, entries) in &ids {
        if 2 * entries.len() <= nv {
            continue;
        }
        let n = entries.len();
        let mut flags = BTreeSet::new();
        for f in &known {
            let knowers = votes
                .iter()
                .filter(|v| {
                    v.header.known_flags.contains(f) && v.relays.iter().any(|r| r.rsa_id == *id)
                })
                .count();
            let set = entries.iter().filter(|r| r.flags.contains(f)).count();
            if knowers > 0 && 2 * set > knowers {
                flags.insert(f.clone());
            }
        }
        if !flags.contains("Running") {
            continue;
        }
        let chosen_key = most_common(entries.iter().map(|r| (r.published, r.desc_digest)))
            .unwrap_or((0, [0; 20]));
        let Some(r) = entries
            .iter()
            .find(|r| (r.published, r.desc_digest) == chosen_key)
        else {
            continue;
        };
        let md = most_common(
            entries
                .iter()
                .filter(|e| e.desc_digest == r.desc_digest)
                .map(|e| e.md_digest),
        )
        .unwrap_or(r.md_digest);
        let version = most_common(entries.iter().filter_map(|e| e.version.clone()));
        let proto = most_common(entries.iter().map(|e| e.protocols.clone())).unwrap_or_default();
        let bw = low_median(entries.iter().map(|e| e.bandwidth_kb).collect())
            .unwrap_or(0)
            .min(MAX_UNMEASURED_BW);
        let _ = n;
        d.push_str(&format!(
            "r {} {} {FAR_FUTURE} {} {} {}\n",
            r.nickname,
            b64_nopad(id),
            r.address,
            r.or_port,
            r.dir_port
        ));
        d.push_str(&format!("m {}\n", b64_nopad(&md)));
        d.push_str(&format!("s {}\n", flags_line(&flags)));
        if let Some(v) = version {
            d.push_str(&format!("v {v}\n"));
        }
        d.push_str(&format!("pr {proto}\n"));
        d.push_str(&format!("w Bandwidth={bw} Unmeasured=1\n"));
        listed.push((bw, flags.contains("Guard"), flags.contains("Exit")));
    }
    d.push_str("directory-footer\n");
    let scale = params.get("bwweightscale").copied().unwrap_or(10000).max(1) as i64;
    let weights = bandwidth_weights(&listed, scale);
    d.push_str(&format!(
        "bandwidth-weights {}\n",
        weights
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    ));
    Ok(d)
}

/// The digest a consensus signature covers: SHA-256 of the unsigned body
/// followed by `directory-signature `.
pub fn consensus_digest(body: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(body.as_bytes());
    h.update(b"directory-signature ");
    h.finalize().into()
}

/// One authority's signature on a consensus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsensusSignature {
    /// Authority v3 identity.
    pub identity: [u8; 20],
    /// Signing key fingerprint.
    pub signing_key: [u8; 20],
    /// The RSA signature.
    pub signature: Vec<u8>,
}

/// Sign a consensus body.
pub fn sign_consensus(
    body: &str,
    identity: [u8; 20],
    signing: &RsaKeypair,
) -> Result<ConsensusSignature, VoteError> {
    let digest = consensus_digest(body);
    let signature = signing
        .sign_raw(&digest)
        .map_err(|e| VoteError::Sign(e.to_string()))?;
    Ok(ConsensusSignature {
        identity,
        signing_key: signing.public().fingerprint(),
        signature,
    })
}

/// Whether `sig` is a good signature on `body` by `cert`'s key.
pub fn check_consensus_signature(
    body: &str,
    sig: &ConsensusSignature,
    cert: &AuthCertificate,
) -> bool {
    cert.id_fingerprint() == sig.identity
        && cert.signing_key_fingerprint() == sig.signing_key
        && cert.verify_digest(&consensus_digest(body), &sig.signature)
}

/// The signed consensus: body plus signatures (sorted by identity).
pub fn assemble_consensus(body: &str, sigs: &[ConsensusSignature]) -> String {
    let mut sigs: Vec<&ConsensusSignature> = sigs.iter().collect();
    sigs.sort_by_key(|s| s.identity);
    sigs.dedup_by_key(|s| s.identity);
    let mut out = body.to_string();
    for s in sigs {
        out.push_str(&format!(
            "directory-signature sha256 {} {}\n",
            hex::encode_upper(s.identity),
            hex::encode_upper(s.signing_key)
        ));
        out.push_str(&pem_wrap("SIGNATURE", &s.signature));
    }
    out
}

/// A detached signature document (dir-spec §3.10, microdesc flavour only)
/// carrying one authority's signature.
pub fn build_detached(
    valid_after: u64,
    fresh_until: u64,
    valid_until: u64,
    body: &str,
    sig: &ConsensusSignature,
) -> String {
    let mut d = String::new();
    d.push_str(&format!("valid-after {}\n", format_utc(valid_after)));
    d.push_str(&format!("fresh-until {}\n", format_utc(fresh_until)));
    d.push_str(&format!("valid-until {}\n", format_utc(valid_until)));
    d.push_str(&format!(
        "additional-digest microdesc sha256 {}\n",
        hex::encode_upper(consensus_digest(body))
    ));
    d.push_str(&format!(
        "additional-signature microdesc sha256 {} {}\n",
        hex::encode_upper(sig.identity),
        hex::encode_upper(sig.signing_key)
    ));
    d.push_str(&pem_wrap("SIGNATURE", &sig.signature));
    d
}

/// A parsed detached signature: valid-after, the digest it signs, the
/// signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detached {
    /// `valid-after` of the consensus signed.
    pub valid_after: u64,
    /// The signed digest.
    pub digest: [u8; 32],
    /// The signature.
    pub signature: ConsensusSignature,
}

/// Parse a detached signature document written by [`build_detached`].
pub fn parse_detached(text: &str) -> Result<Detached, VoteError> {
    const W: &str = "detached signature";
    if text.len() > 64 * 1024 {
        return Err(malformed(W, "too long"));
    }
    let mut valid_after = None;
    let mut digest = None;
    let mut ids = None;
    let mut rest = text;
    while let Some((line, tail)) = rest.split_once('\n') {
        let (kw, args) = line.split_once(' ').unwrap_or((line, ""));
        match kw {
            "valid-after" => valid_after = Some(time_of(args, W)?),
            "additional-digest" => {
                let f: Vec<&str> = args.split_whitespace().collect();
                if let ["microdesc", "sha256", hexd] = f[..] {
                    let v = hex::decode(hexd).map_err(|_| malformed(W, "bad digest"))?;
                    digest = Some(
                        <[u8; 32]>::try_from(v).map_err(|_| malformed(W, "bad digest length"))?,
                    );
                }
            }
            "additional-signature" => {
                let f: Vec<&str> = args.split_whitespace().collect();
                let ["microdesc", "sha256", id, sk] = f[..] else {
                    return Err(malformed(W, "bad additional-signature"));
                };
                let (obj, _) = take_object(tail, "SIGNATURE")
                    .ok_or_else(|| malformed(W, "no signature object"))?;
                let sig = object_bytes(obj).ok_or_else(|| malformed(W, "bad signature object"))?;
                ids = Some(ConsensusSignature {
                    identity: hex20(id, W)?,
                    signing_key: hex20(sk, W)?,
                    signature: sig,
                });
                break;
            }
            _ => {}
        }
        rest = tail;
    }
    match (valid_after, digest, ids) {
        (Some(valid_after), Some(digest), Some(signature)) => Ok(Detached {
            valid_after,
            digest,
            signature,
        }),
        _ => Err(malformed(W, "missing valid-after, digest or signature")),
    }
}

impl Detached {
    /// Whether the signature is good for `body` under `cert`.
    pub fn verify(&self, body: &str, cert: &AuthCertificate) -> bool {
        self.digest == consensus_digest(body)
            && check_consensus_signature(body, &self.signature, cert)
    }
}

/// The `v` line value for a descriptor `platform`: the part before " on ".
pub fn version_from_platform(platform: &str) -> Option<String> {
    let v = platform.split(" on ").next().unwrap_or("").trim();
    if v.is_empty() {
        None
    } else {
        Some(v.to_string())
    }
}

/// Base64 (with padding) of a digest, for URLs and logs.
pub fn b64_digest(d: &[u8]) -> String {
    b64(d)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::authority::AuthorityConfig;
    use crate::consensus::{ConsensusError, TimeTolerance, UnverifiedConsensus};
    use onionmix_crypto::keys::AuthorityKeys;
    use std::sync::OnceLock;
    use std::time::{Duration, UNIX_EPOCH};

    const NOW: u64 = 1_790_000_000;

    fn keys() -> &'static Vec<AuthorityKeys> {
        static K: OnceLock<Vec<AuthorityKeys>> = OnceLock::new();
        K.get_or_init(|| {
            use rand::SeedableRng;
            let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
            (0..3)
                .map(|_| {
                    AuthorityKeys::generate(&mut rng, 2048, NOW - 3600, 365 * 86400, None).unwrap()
                })
                .collect()
        })
    }

    fn now() -> SystemTime {
        UNIX_EPOCH + Duration::from_secs(NOW)
    }

    fn entry(i: u8, flags: &[&str]) -> RouterEntry {
        RouterEntry {
            nickname: format!("relay{i}"),
            rsa_id: [i; 20],
            ed_id: [i.wrapping_add(100); 32],
            desc_digest: [i; 20],
            published: NOW - 60,
            address: Ipv4Addr::new(127, 0, 0, 1),
            or_port: 5000 + i as u16,
            dir_port: 0,
            flags: flags.iter().map(|s| s.to_string()).collect(),
            version: Some("onionmix 0.1.0".into()),
            protocols: "Cons=1-2 Desc=1-2 Link=4-5 Relay=2-4".into(),
            bandwidth_kb: 100 + i as u64,
            policy_summary: "reject 1-65535".into(),
            md_digest: [i; 32],
        }
    }

    fn header(k: &AuthorityKeys, i: usize) -> VoteHeader {
        VoteHeader {
            nickname: format!("omauth{i}"),
            v3ident: k.identity.public().fingerprint(),
            address: Ipv4Addr::new(127, 0, 0, 1),
            dir_port: 7000 + i as u16,
            or_port: 5000 + i as u16,
            contact: "test@example.invalid".into(),
            published: NOW - 10,
            valid_after: NOW,
            fresh_until: NOW + 300,
            valid_until: NOW + 900,
            voting_delay: (4, 4),
            known_flags: ["Running", "Valid", "Fast", "Guard", "Exit", "V2Dir"]
                .iter()
                .map(|s| s.to_string())
                .collect(),
            protocols: default_protocol_lines(),
            params: [("cbttestfreq".to_string(), 10 + i as i32)]
                .into_iter()
                .collect(),
        }
    }

    const RGFV: &[&str] = &["Running", "Valid", "Fast", "Guard", "V2Dir"];

    /// Three votes: relay1 everywhere; relay2 Guard only in one vote;
    /// relay3 in one vote only; relay4 Running in one vote only.
    fn votes() -> Vec<String> {
        keys()
            .iter()
            .enumerate()
            .map(|(i, k)| {
                let mut rs = vec![entry(1, RGFV)];
                rs.push(entry(
                    2,
                    if i == 0 {
                        RGFV
                    } else {
                        &["Running", "Valid", "Fast", "Exit"]
                    },
                ));
                if i == 0 {
                    rs.push(entry(3, RGFV));
                }
                rs.push(entry(4, if i == 2 { RGFV } else { &["Valid"] }));
                build_vote(&header(k, i), &rs, &k.certificate, &k.signing).unwrap()
            })
            .collect()
    }

    #[test]
    fn votes_round_trip_and_tampering_is_caught() {
        let texts = votes();
        let v = parse_vote(&texts[0], now()).unwrap();
        assert_eq!(v.header.nickname, "omauth0");
        assert_eq!(v.relays.len(), 4);
        assert_eq!(v.relays[0], entry(1, RGFV));
        let bad = texts[0].replace("relay1", "relayX");
        assert!(matches!(
            parse_vote(&bad, now()),
            Err(VoteError::BadSignature(_))
        ));
        // A vote presented with another authority's certificate.
        let c0 = &keys()[0].certificate;
        let c1 = &keys()[1].certificate;
        let swapped = texts[0].replace(c0.as_str(), c1.as_str());
        assert!(parse_vote(&swapped, now()).is_err());
        assert!(parse_vote("network-status-version 3\n", now()).is_err());
        assert!(parse_vote("", now()).is_err());
    }

    #[test]
    fn consensus_from_votes_verifies_with_the_client_code() {
        let votes: Vec<Vote> = votes()
            .iter()
            .map(|t| parse_vote(t, now()).unwrap())
            .collect();
        let body = compute_consensus(&votes, 3).unwrap();
        // Every authority computes the same text from the same votes.
        let mut rev = votes.clone();
        rev.reverse();
        assert_eq!(compute_consensus(&rev, 3).unwrap(), body);
        let sigs: Vec<ConsensusSignature> = keys()
            .iter()
            .map(|k| sign_consensus(&body, k.identity.public().fingerprint(), &k.signing).unwrap())
            .collect();
        let text = assemble_consensus(&body, &sigs);
        let auths: Vec<AuthorityConfig> = keys()
            .iter()
            .enumerate()
            .map(|(i, k)| AuthorityConfig::new(format!("a{i}"), k.identity.public().fingerprint()))
            .collect();
        let certs: Vec<AuthCertificate> = keys()
            .iter()
            .map(|k| AuthCertificate::parse(&k.certificate, now()).unwrap())
            .collect();
        let c = UnverifiedConsensus::parse(&text)
            .unwrap()
            .verify(&auths, &certs, now(), TimeTolerance::default())
            .unwrap();
        let names: Vec<&str> = c.relays().iter().map(|r| r.nickname.as_str()).collect();
        // relay3 (one vote of three) and relay4 (Running in one) are out.
        assert_eq!(names, ["relay1", "relay2"]);
        let r2 = &c.relays()[1];
        assert!(!r2.flags.contains(crate::RelayFlags::GUARD));
        assert!(r2.flags.contains(crate::RelayFlags::EXIT));
        assert!(c.relays()[0].flags.contains(crate::RelayFlags::GUARD));
        assert_eq!(c.params().get("cbttestfreq"), Some(&11));
        assert!(body.contains("w Bandwidth=20 Unmeasured=1\n"));

        // One signature of three is not enough for a client.
        let one = assemble_consensus(&body, &sigs[..1]);
        let e = UnverifiedConsensus::parse(&one)
            .unwrap()
            .verify(&auths, &certs, now(), TimeTolerance::default())
            .unwrap_err();
        assert!(
            matches!(e, ConsensusError::InsufficientSignatures { .. }),
            "{e}"
        );

        // Two votes of three are a majority; one is not.
        assert!(compute_consensus(&votes[..2], 3).is_ok());
        assert_eq!(
            compute_consensus(&votes[..1], 3),
            Err(VoteError::NotEnoughVotes { have: 1, need: 2 })
        );
    }

    #[test]
    fn detached_signatures_round_trip() {
        let votes: Vec<Vote> = votes()
            .iter()
            .map(|t| parse_vote(t, now()).unwrap())
            .collect();
        let body = compute_consensus(&votes, 3).unwrap();
        let k = &keys()[1];
        let sig = sign_consensus(&body, k.identity.public().fingerprint(), &k.signing).unwrap();
        let doc = build_detached(NOW, NOW + 300, NOW + 900, &body, &sig);
        let d = parse_detached(&doc).unwrap();
        assert_eq!(d.valid_after, NOW);
        let cert = AuthCertificate::parse(&k.certificate, now()).unwrap();
        assert!(d.verify(&body, &cert));
        assert!(!d.verify(&body.replace("relay1", "relayZ"), &cert));
        let other = AuthCertificate::parse(&keys()[0].certificate, now()).unwrap();
        assert!(!d.verify(&body, &other));
        assert!(parse_detached("valid-after 2026-01-01 00:00:00\n").is_err());
    }

    #[test]
    fn bandwidth_weights_match_stock_tor() {
        // A 0.4.9 test network: seven Guard+Exit relays with bandwidths
        // 0,0,4,0,1,0,0; tor wrote these weights for it.
        let relays: Vec<(u64, bool, bool)> = [0, 0, 4, 0, 1, 0, 0]
            .iter()
            .map(|b| (*b, true, true))
            .collect();
        let w: Vec<String> = bandwidth_weights(&relays, 10000)
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        assert_eq!(
            w.join(" "),
            "Wbd=3333 Wbe=0 Wbg=0 Wbm=10000 Wdb=10000 Web=10000 Wed=3333 Wee=10000 Weg=3333 \
             Wem=10000 Wgb=10000 Wgd=3333 Wgg=10000 Wgm=10000 Wmb=10000 Wmd=3333 Wme=0 Wmg=0 Wmm=10000"
        );
        // Case 1 (nothing scarce): the weights of each position sum to scale.
        let w = bandwidth_weights(
            &[(100, true, false), (100, false, true), (100, false, false)],
            10000,
        );
        let get = |k: &str| w.iter().find(|(n, _)| *n == k).unwrap().1;
        assert_eq!(get("Wgg") + get("Wmg"), 10000);
        assert_eq!(get("Wee") + get("Wme"), 10000);
        for &(_, v) in &w {
            assert!((0..=10000).contains(&v));
        }
    }

    #[test]
    fn microdescs_parse_with_the_client_code() {
        let p = MicrodescParts {
            onion_key_pem: Some({
                use rand::SeedableRng;
                let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
                RsaKeypair::generate(&mut rng, 1024)
                    .unwrap()
                    .public()
                    .to_pem()
            }),
            ntor_onion_key: [9; 32],
            family: vec!["$".to_string() + &"AB".repeat(20)],
            policy_summary: "reject 25,119".into(),
            ed_id: [7; 32],
        };
        let (text, digest) = build_microdesc(&p);
        let md = crate::microdesc::Microdesc::parse(&text).unwrap();
        assert_eq!(md.digest, digest);
        assert_eq!(md.ntor_onion_key, [9; 32]);
        assert!(md.ipv4_policy.allows_port(80));
        assert!(!md.ipv4_policy.allows_port(25));
        let (t2, _) = build_microdesc(&MicrodescParts {
            policy_summary: "reject 1-65535".into(),
            ..p
        });
        assert!(!t2.contains("\np "));
    }

    #[test]
    fn platform_versions() {
        assert_eq!(
            version_from_platform("Tor 0.4.9.11 on Linux").as_deref(),
            Some("Tor 0.4.9.11")
        );
        assert_eq!(version_from_platform(""), None);
    }

    /// What stock tor 0.4.9.11 authorities put in a consensus (read from a
    /// `tor-basic` network's cached-consensus).
    const STOCK_0_4_9_LINES: [&str; 4] = [
        "Cons=2 Desc=2 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4 HSRend=2 Link=4-5 Microdesc=2 Relay=2-4",
        "Cons=2 Desc=2 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4-5 HSRend=2 Link=4-5 LinkAuth=3 Microdesc=2 Relay=2-4",
        "Cons=2 Desc=2 FlowCtrl=1 Link=4 Microdesc=2 Relay=2",
        "Cons=2 Desc=2 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4-5 HSRend=2 Link=4-5 LinkAuth=3 Microdesc=2 Relay=2-4",
    ];

    #[test]
    fn protocol_lines_are_stock_minus_what_onionmix_lacks() {
        let not_yet = ["HSDir", "HSIntro", "HSRend"];
        for (ours, stock) in default_protocol_lines().iter().zip(STOCK_0_4_9_LINES) {
            let ours: crate::types::Protocols = ours.parse().unwrap();
            let stock: crate::types::Protocols = stock.parse().unwrap();
            // Nothing asked that stock tor does not ask.
            assert!(stock.missing_from(&ours).is_empty(), "{ours}");
            // Everything stock asks, except the unimplemented ones.
            for (name, v) in ours.missing_from(&stock) {
                assert!(
                    not_yet.contains(&name.as_str()),
                    "{name}={v} dropped from {stock}"
                );
            }
        }
    }
}
