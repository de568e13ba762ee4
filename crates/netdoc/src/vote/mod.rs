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

mod compute;
mod document;
mod signature;
mod weights;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use base64::Engine;
use sha2::{Digest as _, Sha256};

use crate::authority::AuthCertificate;
use crate::srv::SrVoteInfo;

pub use compute::compute_consensus;
pub use document::{build_vote, parse_vote};
pub use signature::{
    ConsensusSignature, Detached, assemble_consensus, build_detached, check_consensus_signature,
    consensus_digest, parse_detached, sign_consensus,
};
pub use weights::bandwidth_weights;

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
    /// UDP port of onionmix QUIC links, copied from the descriptor's
    /// `onionmix-quic` line.
    pub quic_port: Option<u16>,
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
    if let Some(port) = p.quic_port {
        s.push_str(&format!("{} {port}\n", crate::microdesc::QUIC_KEYWORD));
    }
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
    /// Shared randomness: participation, commits and reveals, SRVs
    /// (written after `contact`, as tor writes them).
    pub shared_rand: SrVoteInfo,
}

/// How this authority takes part in the shared-random lines of the
/// consensus it computes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SrParams {
    /// Run the protocol (tor's `AuthDirSharedRandomness`): without it the
    /// consensus carries no SRV.
    pub participate: bool,
    /// This authority computed the current SRV in this round and no
    /// consensus has carried it yet: it then needs
    /// `AuthDirNumSRVAgreements` votes, not only a majority.
    pub fresh: bool,
}

const PROTO_KEYWORDS: [&str; 4] = [
    "recommended-client-protocols",
    "recommended-relay-protocols",
    "required-client-protocols",
    "required-relay-protocols",
];

/// Protocol lines tor 0.4.9 authorities vote: a stock relay or client
/// under onionmix authorities is asked for nothing stock authorities would
/// not ask, and an onionmix relay meets every line it is held to
/// (congestion control `FlowCtrl=1-2`; onionmix relays are HSDirs,
/// introduction and rendezvous points: `HSDir=2 HSIntro=4-5 HSRend=2`).
pub fn default_protocol_lines() -> [String; 4] {
    [
        "Cons=2 Desc=2 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4 HSRend=2 Link=4-5 Microdesc=2 Relay=2-4".into(),
        "Cons=2 Desc=2 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4-5 HSRend=2 Link=4-5 LinkAuth=3 Microdesc=2 Relay=2-4".into(),
        "Cons=2 Desc=2 FlowCtrl=1 Link=4 Microdesc=2 Relay=2".into(),
        "Cons=2 Desc=2 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4-5 HSRend=2 Link=4-5 LinkAuth=3 Microdesc=2 Relay=2-4".into(),
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
