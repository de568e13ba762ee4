//! Shared randomness (srv-spec, tor's `shared_random*.c`), sans-IO.
//!
//! Directory authorities run a commit-and-reveal protocol over their
//! votes: every protocol run is 24 voting rounds, the first 12 (by
//! `valid-after`) the commit phase, the last 12 the reveal phase. At the
//! first round of the next run each authority computes the shared random
//! value (SRV) from the reveals it collected; the consensus carries the
//! value a majority of votes agree on (for a fresh value at least
//! `AuthDirNumSRVAgreements`). Clients use the current and previous SRV
//! for the onion-service HSDir hash ring (rend-spec-v3 §2.2.3); when the
//! consensus has none they use [`disaster_srv`].
//!
//! Encodings follow stock tor 0.4.9 where it differs from the spec text:
//! SRVs are written in base64 (with padding), not hex; `HASHED_REVEALS`
//! hashes the upper-case hex identity and the *encoded* reveal of each
//! authority; the pairs are ordered by the commitment's `H(REVEAL)`.
//!
//! This module has the value types, encodings, the SRV computation and
//! the majority rule; [`SrState`] (in `state.rs`) is the per-authority
//! protocol state machine.

mod state;

#[cfg(test)]
mod tests;

use std::fmt;

use base64::Engine;
use rand::{CryptoRng, RngCore};
use sha3::{Digest, Sha3_256};
use subtle::ConstantTimeEq;

pub use state::SrState;

/// Protocol version written in commit lines and hashed into the SRV.
pub const SR_PROTO_VERSION: u32 = 1;
/// The only digest algorithm of version 1.
pub const SR_ALG_NAME: &str = "sha3-256";
/// Voting rounds in each phase.
pub const ROUNDS_PER_PHASE: u64 = 12;
/// Voting rounds in one protocol run (commit phase, then reveal phase).
pub const ROUNDS_PER_RUN: u64 = 2 * ROUNDS_PER_PHASE;
/// Length of an encoded commit or reveal: base64 (padded) of 8 + 32 bytes.
pub const ENCODED_LEN: usize = 56;
/// Length of an encoded SRV: base64 (padded) of 32 bytes.
pub const SRV_ENCODED_LEN: usize = 44;
/// Most `shared-rand-commit` lines taken from one vote.
pub const MAX_VOTE_COMMITS: usize = 64;
/// Consensus parameter: how many votes must agree on a fresh SRV.
pub const NUM_AGREEMENTS_PARAM: &str = "AuthDirNumSRVAgreements";

const SRV_TOKEN: &[u8] = b"shared-random";
const DISASTER_TOKEN: &[u8] = b"shared-random-disaster";

/// Errors reading shared-random items.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SrvError {
    /// An item is malformed.
    #[error("malformed {what}: {why}")]
    Malformed {
        /// Which item.
        what: &'static str,
        /// What is wrong.
        why: &'static str,
    },
    /// A commit of a protocol version or algorithm we do not know.
    #[error("unsupported commit: {0}")]
    Unsupported(&'static str),
}

fn malformed(what: &'static str, why: &'static str) -> SrvError {
    SrvError::Malformed { what, why }
}

fn b64(d: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(d)
}

/// Decode canonical padded base64 of exactly `N` bytes encoded in `len`
/// characters (what tor writes); anything else is refused.
fn decode_exact<const N: usize>(s: &str, len: usize) -> Option<[u8; N]> {
    if s.len() != len {
        return None;
    }
    let v = base64::engine::general_purpose::STANDARD.decode(s).ok()?;
    let out: [u8; N] = v.try_into().ok()?;
    // Canonical: re-encoding gives the same text (no stray bits).
    (b64(&out) == s).then_some(out)
}

fn sha3(parts: &[&[u8]]) -> [u8; 32] {
    let mut h = Sha3_256::new();
    for p in parts {
        h.update(p);
    }
    h.finalize().into()
}

/// The phase of the protocol at a voting round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Rounds 0-11 of a run: authorities publish commitments.
    Commit,
    /// Rounds 12-23: authorities publish their reveals.
    Reveal,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Commit => "commit",
            Phase::Reveal => "reveal",
        })
    }
}

/// The round of the run `t` falls in: `(t / interval) mod 24`. An
/// `interval` of 0 is treated as 1.
pub fn round_of(t: u64, interval: u64) -> u64 {
    (t / interval.max(1)) % ROUNDS_PER_RUN
}

/// The phase of the round with this `valid-after` (tor's
/// `get_sr_protocol_phase`).
pub fn phase_of(valid_after: u64, interval: u64) -> Phase {
    if round_of(valid_after, interval) < ROUNDS_PER_PHASE {
        Phase::Commit
    } else {
        Phase::Reveal
    }
}

/// Start of the protocol run that `t` falls in.
pub fn run_start(t: u64, interval: u64) -> u64 {
    let interval = interval.max(1);
    let round_start = t - t % interval;
    round_start.saturating_sub(round_of(t, interval) * interval)
}

/// End of the protocol run that `t` falls in (start of the next one).
pub fn run_end(t: u64, interval: u64) -> u64 {
    run_start(t, interval).saturating_add(ROUNDS_PER_RUN.saturating_mul(interval.max(1)))
}

/// A shared random value as votes and consensuses carry it.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct SharedRandom {
    /// How many reveals went into it.
    pub num_reveals: u64,
    /// The value.
    pub value: [u8; 32],
}

impl fmt::Debug for SharedRandom {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedRandom({} {})", self.num_reveals, self.encoded())
    }
}

impl SharedRandom {
    /// The value in base64 (44 characters), as in documents and tor's
    /// `GETINFO sr/current`.
    pub fn encoded(&self) -> String {
        b64(&self.value)
    }

    /// The item arguments: `NUM_REVEALS VALUE`.
    pub fn to_args(&self) -> String {
        format!("{} {}", self.num_reveals, self.encoded())
    }

    /// Parse `NUM_REVEALS VALUE` (further arguments are ignored, as tor
    /// does).
    pub fn parse_args(args: &str) -> Result<SharedRandom, SrvError> {
        const W: &str = "shared random value";
        let mut it = args.split_ascii_whitespace();
        let n = it.next().ok_or_else(|| malformed(W, "no reveal count"))?;
        let v = it.next().ok_or_else(|| malformed(W, "no value"))?;
        if !n.bytes().all(|b| b.is_ascii_digit()) {
            return Err(malformed(W, "bad reveal count"));
        }
        let num_reveals = n.parse().map_err(|_| malformed(W, "bad reveal count"))?;
        let value =
            decode_exact::<32>(v, SRV_ENCODED_LEN).ok_or_else(|| malformed(W, "bad value"))?;
        Ok(SharedRandom { num_reveals, value })
    }
}

/// An authority's reveal: `base64(TIMESTAMP || H(RN))`.
#[derive(Clone, PartialEq, Eq)]
struct Reveal {
    timestamp: u64,
    encoded: String,
}

/// One authority's commitment for a protocol run, with its reveal once
/// known. Our own commit always holds its reveal (secret until the reveal
/// phase: `Debug` never prints it).
#[derive(Clone, PartialEq, Eq)]
pub struct Commit {
    identity: [u8; 20],
    timestamp: u64,
    hashed_reveal: [u8; 32],
    encoded: String,
    reveal: Option<Reveal>,
}

impl fmt::Debug for Commit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Commit")
            .field("identity", &hex::encode_upper(self.identity))
            .field("timestamp", &self.timestamp)
            .field("commit", &self.encoded)
            .field("has_reveal", &self.reveal.is_some())
            .finish()
    }
}

impl Commit {
    /// A fresh commitment for the run whose first vote we publish at
    /// `timestamp` (srv-spec §4.1.1): RN is 32 random bytes, REVEAL =
    /// base64(TIMESTAMP || SHA3(RN)), COMMIT = base64(TIMESTAMP ||
    /// SHA3(REVEAL)).
    pub fn generate<R: RngCore + CryptoRng>(
        identity: [u8; 20],
        timestamp: u64,
        rng: &mut R,
    ) -> Commit {
        // RN is hashed so that no raw generator output reaches the
        // network (srv-spec §4.1.1).
        let mut rn = [0u8; 32];
        rng.fill_bytes(&mut rn);
        let random = sha3(&[&rn]);
        let mut raw = [0u8; 40];
        raw[..8].copy_from_slice(&timestamp.to_be_bytes());
        raw[8..].copy_from_slice(&random);
        Commit::from_reveal(identity, b64(&raw))
    }

    /// The commit belonging to an encoded reveal (the reveal must be the
    /// base64 of 40 bytes; callers construct it).
    fn from_reveal(identity: [u8; 20], encoded_reveal: String) -> Commit {
        let timestamp = decode_exact::<40>(&encoded_reveal, ENCODED_LEN)
            .map(|r| u64::from_be_bytes(r[..8].try_into().unwrap_or([0; 8])))
            .unwrap_or(0);
        let hashed_reveal = sha3(&[encoded_reveal.as_bytes()]);
        let mut raw = [0u8; 40];
        raw[..8].copy_from_slice(&timestamp.to_be_bytes());
        raw[8..].copy_from_slice(&hashed_reveal);
        Commit {
            identity,
            timestamp,
            hashed_reveal,
            encoded: b64(&raw),
            reveal: Some(Reveal {
                timestamp,
                encoded: encoded_reveal,
            }),
        }
    }

    /// Parse the arguments of a `shared-rand-commit` line (or a state
    /// file's `Commit` line): `VERSION ALGNAME IDENTITY COMMIT [REVEAL]`.
    /// Whether the reveal matches is checked by [`Commit::reveal_matches`].
    pub fn parse_args(args: &str) -> Result<Commit, SrvError> {
        const W: &str = "shared-rand-commit";
        let f: Vec<&str> = args.split_ascii_whitespace().take(6).collect();
        let (version, alg, id, commit, reveal) = match f[..] {
            [v, a, i, c] => (v, a, i, c, None),
            [v, a, i, c, r, ..] => (v, a, i, c, Some(r)),
            _ => return Err(malformed(W, "too few arguments")),
        };
        let version: u32 = version.parse().map_err(|_| malformed(W, "bad version"))?;
        if version == 0 || version > SR_PROTO_VERSION {
            return Err(SrvError::Unsupported("protocol version"));
        }
        if alg != SR_ALG_NAME {
            return Err(SrvError::Unsupported("digest algorithm"));
        }
        let identity =
            crate::parse_hex20(id).ok_or_else(|| malformed(W, "bad identity fingerprint"))?;
        let raw =
            decode_exact::<40>(commit, ENCODED_LEN).ok_or_else(|| malformed(W, "bad commit"))?;
        let (ts, hashed) = raw.split_at(8);
        let timestamp = u64::from_be_bytes(ts.try_into().map_err(|_| malformed(W, "bad commit"))?);
        let hashed_reveal: [u8; 32] = hashed.try_into().map_err(|_| malformed(W, "bad commit"))?;
        let reveal = match reveal {
            None => None,
            Some(r) => {
                let raw =
                    decode_exact::<40>(r, ENCODED_LEN).ok_or_else(|| malformed(W, "bad reveal"))?;
                let ts: [u8; 8] = raw[..8]
                    .try_into()
                    .map_err(|_| malformed(W, "bad reveal"))?;
                Some(Reveal {
                    timestamp: u64::from_be_bytes(ts),
                    encoded: (*r).to_string(),
                })
            }
        };
        Ok(Commit {
            identity,
            timestamp,
            hashed_reveal,
            encoded: commit.to_string(),
            reveal,
        })
    }

    /// The authority (v3 identity) that made this commitment.
    pub fn identity(&self) -> [u8; 20] {
        self.identity
    }
    /// The commitment's timestamp.
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }
    /// `H(REVEAL)` from the commitment.
    pub fn hashed_reveal(&self) -> &[u8; 32] {
        &self.hashed_reveal
    }
    /// The encoded commitment.
    pub fn encoded_commit(&self) -> &str {
        &self.encoded
    }
    /// The encoded reveal, if known.
    pub fn encoded_reveal(&self) -> Option<&str> {
        self.reveal.as_ref().map(|r| r.encoded.as_str())
    }
    /// Whether the reveal is known.
    pub fn has_reveal(&self) -> bool {
        self.reveal.is_some()
    }

    /// Whether the commit has a reveal that belongs to it (srv-spec
    /// §4.1.2): same timestamp, and `SHA3(REVEAL)` equals the committed
    /// hash (compared in constant time).
    pub fn reveal_matches(&self) -> bool {
        let Some(r) = &self.reveal else {
            return false;
        };
        let h = sha3(&[r.encoded.as_bytes()]);
        r.timestamp == self.timestamp && bool::from(h.ct_eq(&self.hashed_reveal))
    }

    /// Whether `other` carries the same commitment (the reveal aside).
    pub fn same_commitment(&self, other: &Commit) -> bool {
        self.identity == other.identity && self.encoded == other.encoded
    }

    /// This commit without its reveal (what the commit phase shows).
    pub fn without_reveal(&self) -> Commit {
        Commit {
            reveal: None,
            ..self.clone()
        }
    }

    /// Take the reveal of `other` (same commitment, checked by the caller).
    fn take_reveal(&mut self, other: &Commit) {
        self.reveal = other.reveal.clone();
    }

    /// The arguments as written in votes and the state file.
    pub fn to_args(&self) -> String {
        let mut s = format!(
            "{SR_PROTO_VERSION} {SR_ALG_NAME} {} {}",
            hex::encode_upper(self.identity),
            self.encoded
        );
        if let Some(r) = &self.reveal {
            s.push(' ');
            s.push_str(&r.encoded);
        }
        s
    }
}

/// The SRV from the commits that have reveals (srv-spec §3.3.1, tor's
/// `sr_compute_srv`):
///
/// ```text
/// HASHED_REVEALS = SHA3-256(ID_a | R_a | ID_b | R_b | ...)
/// SRV = SHA3-256("shared-random" | INT_8(REVEAL_NUM) | INT_4(VERSION) |
///                HASHED_REVEALS | PREVIOUS_SRV)
/// ```
///
/// with `ID` the upper-case hex identity, `R` the encoded reveal, the
/// pairs ordered by the commitment's `H(REVEAL)` (ties by identity), and
/// 32 zero bytes when there is no previous SRV. No reveals at all still
/// gives a value (with `REVEAL_NUM` 0), as tor computes it.
pub fn compute_srv<'a>(
    commits: impl IntoIterator<Item = &'a Commit>,
    previous: Option<&SharedRandom>,
) -> SharedRandom {
    let mut with: Vec<&Commit> = commits.into_iter().filter(|c| c.has_reveal()).collect();
    with.sort_by(|a, b| {
        a.hashed_reveal
            .cmp(&b.hashed_reveal)
            .then(a.identity.cmp(&b.identity))
    });
    let mut h = Sha3_256::new();
    for c in &with {
        h.update(hex::encode_upper(c.identity).as_bytes());
        if let Some(r) = &c.reveal {
            h.update(r.encoded.as_bytes());
        }
    }
    let hashed_reveals: [u8; 32] = h.finalize().into();
    let n = with.len() as u64;
    let prev = previous.map(|p| p.value).unwrap_or([0; 32]);
    let value = sha3(&[
        SRV_TOKEN,
        &n.to_be_bytes(),
        &SR_PROTO_VERSION.to_be_bytes(),
        &hashed_reveals,
        &prev,
    ]);
    SharedRandom {
        num_reveals: n,
        value,
    }
}

/// The SRV clients and services use for a time period whose SRV the
/// consensus lacks (rend-spec-v3 §2.3.1, tor's `get_disaster_srv`):
/// `SHA3-256("shared-random-disaster" | INT_8(period_length) |
/// INT_8(period_num))`, with the period length in minutes.
pub fn disaster_srv(period_length_minutes: u64, period_num: u64) -> [u8; 32] {
    sha3(&[
        DISASTER_TOKEN,
        &period_length_minutes.to_be_bytes(),
        &period_num.to_be_bytes(),
    ])
}

/// The shared-random part of a vote (dir-spec §3.4.1, srv-spec §4.1).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SrVoteInfo {
    /// `shared-rand-participate`: the authority runs the protocol.
    pub participate: bool,
    /// `shared-rand-commit` lines (only kept when participating).
    pub commits: Vec<Commit>,
    /// `shared-rand-previous-value`.
    pub previous: Option<SharedRandom>,
    /// `shared-rand-current-value`.
    pub current: Option<SharedRandom>,
}

/// Vote keywords this module reads.
pub const VOTE_KEYWORDS: [&str; 4] = [
    "shared-rand-participate",
    "shared-rand-commit",
    "shared-rand-previous-value",
    "shared-rand-current-value",
];

impl SrVoteInfo {
    /// The vote lines, as tor writes them: nothing unless participating;
    /// then the participate line, the commit lines sorted, and the
    /// previous and current SRVs.
    pub fn vote_lines(&self) -> String {
        if !self.participate {
            return String::new();
        }
        let mut s = String::from("shared-rand-participate\n");
        let mut lines: Vec<String> = self
            .commits
            .iter()
            .map(|c| format!("shared-rand-commit {}\n", c.to_args()))
            .collect();
        lines.sort();
        for l in lines {
            s.push_str(&l);
        }
        s.push_str(&srv_lines(self.previous.as_ref(), self.current.as_ref()));
        s
    }

    /// Take one vote line: returns `Ok(false)` when `kw` is not a
    /// shared-random keyword. A commit that does not parse is skipped
    /// (tor: "unable to parse commit", the vote stays valid), and of two
    /// commits for one authority only the first counts (dir-spec §3.4.1);
    /// two values of a kind or a malformed value make the vote invalid.
    pub fn take_line(&mut self, kw: &str, args: &str) -> Result<bool, SrvError> {
        match kw {
            "shared-rand-participate" => self.participate = true,
            "shared-rand-commit" => {
                if self.commits.len() >= MAX_VOTE_COMMITS {
                    return Err(malformed("vote", "too many shared-rand-commit lines"));
                }
                match Commit::parse_args(args) {
                    Ok(c) => {
                        if self.commits.iter().any(|o| o.identity == c.identity) {
                            tracing::debug!("ignoring a second commit for one authority");
                        } else {
                            self.commits.push(c);
                        }
                    }
                    Err(e) => tracing::debug!("skipping a shared-rand-commit line: {e}"),
                }
            }
            "shared-rand-previous-value" | "shared-rand-current-value" => {
                let v = SharedRandom::parse_args(args)?;
                let slot = if kw == "shared-rand-previous-value" {
                    &mut self.previous
                } else {
                    &mut self.current
                };
                if slot.is_some() {
                    return Err(malformed("vote", "repeated shared random value"));
                }
                *slot = Some(v);
            }
            _ => return Ok(false),
        }
        Ok(true)
    }

    /// Call after the last line: commits count only from participants.
    pub fn finish(&mut self) {
        if !self.participate {
            self.commits.clear();
        }
    }
}

/// `shared-rand-previous-value` then `shared-rand-current-value` lines
/// for the values present (srv-spec §4.1.5: previous first).
pub fn srv_lines(previous: Option<&SharedRandom>, current: Option<&SharedRandom>) -> String {
    let mut s = String::new();
    if let Some(p) = previous {
        s.push_str(&format!("shared-rand-previous-value {}\n", p.to_args()));
    }
    if let Some(c) = current {
        s.push_str(&format!("shared-rand-current-value {}\n", c.to_args()));
    }
    s
}

/// The (previous, current) SRVs in a document we wrote (a consensus or
/// vote body); lines that do not parse are ignored.
pub fn scan_srv_lines(text: &str) -> (Option<SharedRandom>, Option<SharedRandom>) {
    let mut prev = None;
    let mut cur = None;
    for line in text.lines() {
        if let Some(a) = line.strip_prefix("shared-rand-previous-value ") {
            prev = prev.or(SharedRandom::parse_args(a).ok());
        } else if let Some(a) = line.strip_prefix("shared-rand-current-value ") {
            cur = cur.or(SharedRandom::parse_args(a).ok());
        } else if line.starts_with("dir-source ") || line.starts_with("r ") {
            break;
        }
    }
    (prev, cur)
}

/// Default `AuthDirNumSRVAgreements`: two thirds of the authorities,
/// rounded down (tor's default).
pub fn default_num_agreements(n_authorities: usize) -> i64 {
    (n_authorities as i64).saturating_mul(2) / 3
}

/// The SRV to put in the consensus (tor's `get_majority_srv_from_votes`):
/// the value most participating votes carry (ties to the smallest value),
/// if at least a majority of the `n_authorities` carry it, and, when
/// `fresh` (this authority just computed a new SRV), at least
/// `num_agreements`.
pub fn majority_srv(
    votes: &[&SrVoteInfo],
    current: bool,
    n_authorities: usize,
    fresh: bool,
    num_agreements: i64,
) -> Option<SharedRandom> {
    let mut values: Vec<SharedRandom> = votes
        .iter()
        .filter(|v| v.participate)
        .filter_map(|v| if current { v.current } else { v.previous })
        .collect();
    values.sort_by(|a, b| {
        a.value
            .cmp(&b.value)
            .then(a.num_reveals.cmp(&b.num_reveals))
    });
    let mut best: Option<(SharedRandom, usize)> = None;
    for group in values.chunk_by(|a, b| a.value == b.value) {
        if let Some(first) = group.first()
            && best.is_none_or(|(_, c)| group.len() > c)
        {
            best = Some((*first, group.len()));
        }
    }
    let (srv, count) = best?;
    let majority = n_authorities / 2 + 1;
    if count < majority {
        tracing::info!("SR: SRV did not reach a majority ({count} of {majority})");
        return None;
    }
    if fresh && (count as i64) < num_agreements {
        tracing::info!("SR: new SRV did not reach agreement ({count} of {num_agreements})");
        return None;
    }
    Some(srv)
}
