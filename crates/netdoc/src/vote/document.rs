//! Writing and reading signed status votes (dir-spec §3.4.1 vote layout).

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::SystemTime;

use base64::Engine;
use sha1::{Digest as _, Sha1};

use onionmix_crypto::rsa_id::{RsaKeypair, pem_wrap};
use onionmix_crypto::timefmt::{format_utc, parse_utc};

use super::{
    CONSENSUS_METHOD, MAX_VOTE_LEN, MAX_VOTE_RELAYS, PROTO_KEYWORDS, RouterEntry, Vote, VoteError,
    VoteHeader, b64_nopad, flags_line, malformed, params_line, unb64,
};
use crate::authority::AuthCertificate;
use crate::srv::{self, SrVoteInfo};

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
    d.push_str(&h.shared_rand.vote_lines());
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
    // Fuzzing builds only: a stand-in, which `parse_vote` accepts there
    // (see `FUZZING_ACCEPTS_SIGNATURES`).
    let sig = if crate::FUZZING_ACCEPTS_SIGNATURES {
        vec![0; signing.public().bits().div_ceil(8)]
    } else {
        signing
            .sign_raw(&Sha1::digest(d.as_bytes()))
            .map_err(|e| VoteError::Sign(e.to_string()))?
    };
    d.push_str(&format!("{} {sk_fp}\n", hex::encode_upper(h.v3ident)));
    d.push_str(&pem_wrap("SIGNATURE", &sig));
    Ok(d)
}

pub(super) fn hex20(s: &str, what: &'static str) -> Result<[u8; 20], VoteError> {
    let v = hex::decode(s).map_err(|_| malformed(what, "bad hex fingerprint"))?;
    v.try_into()
        .map_err(|_| malformed(what, "fingerprint is not 20 bytes"))
}

fn fixed<const N: usize>(s: &str, what: &'static str) -> Result<[u8; N], VoteError> {
    let v = unb64(s).ok_or_else(|| malformed(what, "bad base64"))?;
    v.try_into().map_err(|_| malformed(what, "wrong length"))
}

pub(super) fn time_of(rest: &str, what: &'static str) -> Result<u64, VoteError> {
    parse_utc(rest.trim()).ok_or_else(|| malformed(what, format!("bad time {rest:?}")))
}

/// Split off a PEM object that starts at `text` (BEGIN line first).
pub(super) fn take_object<'a>(text: &'a str, label: &str) -> Option<(&'a str, &'a str)> {
    let begin = format!("-----BEGIN {label}-----\n");
    let end = format!("-----END {label}-----\n");
    if !text.starts_with(&begin) {
        return None;
    }
    let e = text.find(&end)? + end.len();
    Some((&text[..e], &text[e..]))
}

pub(super) fn object_bytes(obj: &str) -> Option<Vec<u8>> {
    let body: String = obj
        .lines()
        .filter(|l| !l.starts_with("-----"))
        .collect::<Vec<_>>()
        .join("");
    base64::engine::general_purpose::STANDARD.decode(body).ok()
}

/// A legal relay nickname (tor: 1-19 ASCII letters and digits).
fn is_nickname(s: &str) -> bool {
    (1..=19).contains(&s.len()) && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A flag name as tor writes them (ASCII letters and digits).
fn is_flag_name(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A consensus parameter name (letters, digits, `_` and `-`).
fn is_param_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// A protocol list (`Link=4-5 Relay=2-4`) clients parse.
fn is_protocol_list(s: &str) -> bool {
    s.parse::<crate::types::Protocols>().is_ok()
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
    // Values are copied into the consensus: no NUL (refused by every
    // parser), no tab or CR (tor-netdoc splits arguments on tabs too).
    if text.bytes().any(|b| (b < 0x20 && b != b'\n') || b == 0x7f) {
        return Err(malformed(W, "control character"));
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
    let cert_end = cm + obj.len();
    // The certificate is part of the signed text: before the signature.
    if cert_end > sig_at {
        return Err(malformed(W, "key certificate after the signature"));
    }
    let cert_text = &text[cstart..cert_end];
    let cert = AuthCertificate::parse(cert_text, now)
        .map_err(|e| VoteError::BadSignature(format!("key certificate: {e}")))?;
    if cert.id_fingerprint() != sig_id || cert.signing_key_fingerprint() != sig_sk {
        return Err(VoteError::BadSignature(
            "signature names another key than the certificate".into(),
        ));
    }
    // (Accepted unchecked in fuzzing builds only: see
    // `FUZZING_ACCEPTS_SIGNATURES`.)
    if !crate::FUZZING_ACCEPTS_SIGNATURES && !cert.verify_digest(&digest, &sig) {
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
        shared_rand: SrVoteInfo::default(),
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
                let flags: BTreeSet<String> = rest.split_whitespace().map(str::to_string).collect();
                if !flags.iter().all(|f| is_flag_name(f)) {
                    return Err(malformed(W, "bad flag name in known-flags"));
                }
                h.known_flags = flags;
            }
            "params" => {
                for kv in rest.split_whitespace() {
                    let (k, v) = kv
                        .split_once('=')
                        .ok_or_else(|| malformed(W, "bad param"))?;
                    let v: i32 = v.parse().map_err(|_| malformed(W, "bad param value"))?;
                    if !is_param_name(k) {
                        return Err(malformed(W, "bad param name"));
                    }
                    h.params.insert(k.to_string(), v);
                }
            }
            "dir-source" => {
                let f: Vec<&str> = rest.split_whitespace().collect();
                let [nick, id, _host, ip, dp, op] = f[..] else {
                    return Err(malformed(W, "bad dir-source"));
                };
                if !is_nickname(nick) {
                    return Err(malformed(W, "bad dir-source nickname"));
                }
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
            // Leading spaces would not survive the consensus (tor-netdoc
            // refuses a contact value starting with whitespace).
            "contact" => h.contact = rest.trim().to_string(),
            "r" => {
                if relays.len() >= MAX_VOTE_RELAYS {
                    return Err(malformed(W, "too many relays"));
                }
                let f: Vec<&str> = rest.split_whitespace().collect();
                let [nick, id, dd, date, time, ip, op, dp] = f[..] else {
                    return Err(malformed(W, "bad r line"));
                };
                if !is_nickname(nick) {
                    return Err(malformed(W, "bad r nickname"));
                }
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
                    "v" => {
                        let v = rest.trim();
                        r.version = (!v.is_empty()).then(|| v.to_string());
                    }
                    "pr" => {
                        if !is_protocol_list(rest) {
                            return Err(malformed(W, "bad pr line"));
                        }
                        r.protocols = rest.to_string();
                    }
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
            _ if srv::VOTE_KEYWORDS.contains(&kw) => {
                h.shared_rand
                    .take_line(kw, rest)
                    .map_err(|e| malformed(W, e.to_string()))?;
            }
            _ => {
                if let Some(i) = PROTO_KEYWORDS.iter().position(|k| *k == kw) {
                    if !is_protocol_list(rest) || rest.trim().is_empty() {
                        return Err(malformed(W, "bad protocol line"));
                    }
                    h.protocols[i] = rest.to_string();
                }
            }
        }
    }
    h.shared_rand.finish();
    if !seen_source {
        return Err(malformed(W, "no dir-source"));
    }
    if h.protocols.iter().any(String::is_empty) {
        return Err(malformed(W, "missing protocol line"));
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
        // As tor: a router status may only use flags the vote declares.
        if !r.flags.is_subset(&h.known_flags) {
            return Err(malformed(
                W,
                format!("relay {} has unknown flags", r.nickname),
            ));
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
