//! One authority's shared-random protocol state (tor's
//! `shared_random_state.c`), sans-IO: time comes in as `valid-after`
//! values, randomness through an RNG argument, and the caller writes
//! [`SrState::to_text`] to disk after every call that returns `true`.
//!
//! The calls, in the order an authority makes them each voting round:
//!
//! 1. [`SrState::update`] for the round about to be voted on (at start-up
//!    and after each consensus, through [`SrState::post_consensus`]):
//!    rotates phases, makes our commitment at the start of a run, and at
//!    the first round of a run computes the new SRV from the reveals of
//!    the run that ended;
//! 2. [`SrState::vote_info`] for our vote;
//! 3. [`SrState::handle_vote`] for every vote received for that round;
//! 4. [`super::majority_srv`] (with [`SrState::is_fresh`]) while computing
//!    the consensus;
//! 5. [`SrState::post_consensus`] with the SRVs of the consensus that
//!    was published (the consensus is the ground truth).

use std::collections::{BTreeMap, BTreeSet};

use rand::{CryptoRng, RngCore};
use tracing::{debug, info};

use onionmix_crypto::timefmt::{format_utc, parse_utc};

use super::{
    Commit, MAX_VOTE_COMMITS, Phase, ROUNDS_PER_PHASE, SharedRandom, SrVoteInfo, SrvError,
    compute_srv, malformed, phase_of, run_end, run_start,
};

/// The protocol state of one authority.
#[derive(Debug, Clone)]
pub struct SrState {
    identity: [u8; 20],
    interval: u64,
    authorities: BTreeSet<[u8; 20]>,
    valid_after: u64,
    valid_until: u64,
    phase: Phase,
    commits: BTreeMap<[u8; 20], Commit>,
    previous: Option<SharedRandom>,
    current: Option<SharedRandom>,
    fresh: bool,
    commit_rounds: u32,
    reveal_rounds: u32,
}

impl SrState {
    /// A fresh state for the authority `identity` among `authorities`
    /// (v3 identities, ours included) voting every `interval` seconds, at
    /// unix time `now`. Call [`SrState::update`] for the next round.
    pub fn new(
        identity: [u8; 20],
        interval: u64,
        authorities: impl IntoIterator<Item = [u8; 20]>,
        now: u64,
    ) -> SrState {
        let interval = interval.max(1);
        SrState {
            identity,
            interval,
            authorities: authorities.into_iter().collect(),
            valid_after: 0,
            valid_until: run_end(now, interval),
            phase: phase_of(now, interval),
            commits: BTreeMap::new(),
            previous: None,
            current: None,
            fresh: false,
            commit_rounds: 0,
            reveal_rounds: 0,
        }
    }

    /// The round (`valid-after`) the state is prepared for.
    pub fn valid_after(&self) -> u64 {
        self.valid_after
    }
    /// When the state expires (the end of the current protocol run).
    pub fn valid_until(&self) -> u64 {
        self.valid_until
    }
    /// The phase of the round the state is prepared for.
    pub fn phase(&self) -> Phase {
        self.phase
    }
    /// The previous SRV.
    pub fn previous(&self) -> Option<&SharedRandom> {
        self.previous.as_ref()
    }
    /// The current SRV.
    pub fn current(&self) -> Option<&SharedRandom> {
        self.current.as_ref()
    }
    /// Whether we computed the current SRV and no consensus has confirmed
    /// or replaced it yet.
    pub fn is_fresh(&self) -> bool {
        self.fresh
    }
    /// The commitments of this run, by authority.
    pub fn commits(&self) -> impl Iterator<Item = &Commit> {
        self.commits.values()
    }
    /// Our own commitment for this run.
    pub fn own_commit(&self) -> Option<&Commit> {
        self.commits.get(&self.identity)
    }

    /// Prepare for the voting round `next_valid_after` (tor's
    /// `sr_state_update`). Entering the commit phase starts a new run:
    /// if the state was in the reveal phase, the current SRV becomes the
    /// previous one and the new SRV is computed from the reveals; the
    /// commits are dropped and we commit afresh. In the commit phase
    /// without a commitment of ours (start-up) we commit now. Returns
    /// whether the state changed (nothing happens for a round not after
    /// the one already prepared).
    pub fn update<R: RngCore + CryptoRng>(&mut self, next_valid_after: u64, rng: &mut R) -> bool {
        if next_valid_after <= self.valid_after {
            return false;
        }
        let next = phase_of(next_valid_after, self.interval);
        // Rounds were skipped past the end of this run (a clock jump, a
        // stalled voting loop): tor only compares phases; we also start
        // over when the run changed, so that no stale commitment survives.
        let other_run = self.valid_after != 0
            && run_start(next_valid_after, self.interval)
                != run_start(self.valid_after, self.interval);
        if next != self.phase || other_run {
            if next == Phase::Commit {
                self.new_run(next_valid_after, rng);
            } else if other_run {
                // The commit phase of this run was missed: no commitment
                // of ours, none of the old run's kept.
                self.commits.clear();
                self.valid_until = run_end(next_valid_after, self.interval);
            }
            self.phase = next;
        } else if self.phase == Phase::Commit && !self.commits.contains_key(&self.identity) {
            let c = Commit::generate(self.identity, next_valid_after, rng);
            self.commits.insert(self.identity, c);
        }
        self.valid_after = next_valid_after;
        match self.phase {
            Phase::Commit => {
                self.commit_rounds = self.commit_rounds.saturating_add(1);
                self.reveal_rounds = 0;
            }
            Phase::Reveal => self.reveal_rounds = self.reveal_rounds.saturating_add(1),
        }
        debug!(
            "SR: prepared for {} ({} phase, {} commit and {} reveal rounds)",
            format_utc(next_valid_after),
            self.phase,
            self.commit_rounds,
            self.reveal_rounds
        );
        true
    }

    fn new_run<R: RngCore + CryptoRng>(&mut self, valid_after: u64, rng: &mut R) {
        // The SRV is computed at the end of a reveal phase: the one of the
        // run just before (or, fresh from start-up, whatever reveal phase
        // we booted in, as tor does).
        let follows = self.valid_after == 0
            || run_end(self.valid_after, self.interval) == run_start(valid_after, self.interval);
        if self.phase == Phase::Reveal && follows {
            // Rotate, then compute the SRV of the run that just ended from
            // the commits of known authorities.
            self.previous = self.current.take();
            let known = self
                .commits
                .values()
                .filter(|c| self.authorities.contains(&c.identity()));
            let srv = compute_srv(known, self.previous.as_ref());
            info!(
                "SR: computed the shared random value {} from {} reveals",
                srv.encoded(),
                srv.num_reveals
            );
            self.current = Some(srv);
            self.fresh = true;
        }
        self.commit_rounds = 0;
        self.reveal_rounds = 0;
        self.valid_until = run_end(valid_after, self.interval);
        self.valid_after = valid_after;
        self.commits.clear();
        let ours = Commit::generate(self.identity, valid_after, rng);
        self.commits.insert(self.identity, ours);
    }

    /// The shared-random part of our vote: every commitment we hold (with
    /// reveals only in the reveal phase) and the SRVs we believe in.
    pub fn vote_info(&self, participate: bool) -> SrVoteInfo {
        SrVoteInfo {
            participate,
            commits: self
                .commits
                .values()
                .map(|c| match self.phase {
                    Phase::Commit => c.without_reveal(),
                    Phase::Reveal => c.clone(),
                })
                .collect(),
            previous: self.previous,
            current: self.current,
        }
    }

    /// Take the commitments and reveals from a vote by `voter` (its v3
    /// identity, already verified) for the round the state is prepared
    /// for (tor's `sr_handle_received_commits`). Returns whether the
    /// state changed.
    pub fn handle_vote(&mut self, voter: [u8; 20], info: &SrVoteInfo) -> bool {
        if !info.participate {
            return false;
        }
        let mut changed = false;
        for c in &info.commits {
            changed |= self.take_commit(voter, c);
        }
        changed
    }

    /// tor's `should_keep_commit` and `save_commit_to_state`.
    fn take_commit(&mut self, voter: [u8; 20], c: &Commit) -> bool {
        let who = hex::encode_upper(c.identity());
        // Only an authority's own commitment counts ("authoritative").
        if c.identity() != voter {
            return false;
        }
        if !self.authorities.contains(&voter) {
            info!("SR: ignoring a commit from {who}, which is not a configured authority");
            return false;
        }
        let saved = self.commits.get(&voter);
        match self.phase {
            Phase::Commit => {
                if let Some(s) = saved {
                    if !s.same_commitment(c) {
                        info!("SR: {who} changed its commitment within a run; keeping the first");
                    }
                    return false;
                }
                if c.has_reveal() {
                    info!("SR: {who} sent a reveal during the commit phase; ignoring the commit");
                    return false;
                }
                // A commitment must be made for this run's commit phase
                // (our addition to tor's checks: a replayed commitment of
                // an earlier run is refused).
                let start = run_start(self.valid_after, self.interval);
                let commit_end =
                    start.saturating_add(ROUNDS_PER_PHASE.saturating_mul(self.interval));
                if !(start..commit_end).contains(&c.timestamp()) {
                    info!("SR: {who} committed with a timestamp outside this run's commit phase");
                    return false;
                }
                if self.commits.len() >= MAX_VOTE_COMMITS {
                    return false;
                }
                self.commits.insert(voter, c.clone());
                true
            }
            Phase::Reveal => {
                let Some(s) = saved else {
                    debug!("SR: ignoring a commit from {who} first seen in the reveal phase");
                    return false;
                };
                if !s.same_commitment(c) {
                    info!("SR: {who}'s commitment differs from the one we hold; ignoring it");
                    return false;
                }
                if s.has_reveal() || !c.has_reveal() {
                    return false;
                }
                if !c.reveal_matches() {
                    info!("SR: {who}'s reveal does not match its commitment");
                    return false;
                }
                if let Some(s) = self.commits.get_mut(&voter) {
                    s.take_reveal(c);
                }
                true
            }
        }
    }

    /// A consensus was published (or not): take its SRVs (`srvs`: the
    /// latest consensus's previous and current values, `None` when there
    /// is no consensus at all) as the truth, then prepare for the round
    /// `next_valid_after` (tor's `sr_act_post_consensus`). Returns whether
    /// the state changed.
    pub fn post_consensus<R: RngCore + CryptoRng>(
        &mut self,
        srvs: Option<(Option<SharedRandom>, Option<SharedRandom>)>,
        next_valid_after: u64,
        rng: &mut R,
    ) -> bool {
        let mut changed = false;
        if let Some((prev, cur)) = srvs {
            changed = self.previous != prev || self.current != cur;
            self.previous = prev;
            self.current = cur;
            self.fresh = false;
        }
        self.update(next_valid_after, rng) || changed
    }

    /// The state file (srv-spec §4.3's layout, plus `VotingInterval`).
    /// It holds our reveal before the reveal phase: write it private.
    pub fn to_text(&self) -> String {
        let mut s = String::from(
            "# onionmix shared random state (srv-spec 4.3); do not edit\n\
             Version 1\n",
        );
        s.push_str(&format!("VotingInterval {}\n", self.interval));
        s.push_str(&format!("ValidAfter {}\n", format_utc(self.valid_after)));
        s.push_str(&format!("ValidUntil {}\n", format_utc(self.valid_until)));
        for c in self.commits.values() {
            s.push_str(&format!("Commit {}\n", c.to_args()));
        }
        if let Some(p) = &self.previous {
            s.push_str(&format!("SharedRandPreviousValue {}\n", p.to_args()));
        }
        if let Some(c) = &self.current {
            s.push_str(&format!("SharedRandCurrentValue {}\n", c.to_args()));
        }
        s
    }

    /// Read a state file written by [`SrState::to_text`]. Refused (start
    /// afresh) when it is malformed, expired at `now`, or made for
    /// another voting interval. Commits that do not parse are dropped.
    pub fn from_text(
        text: &str,
        identity: [u8; 20],
        interval: u64,
        authorities: impl IntoIterator<Item = [u8; 20]>,
        now: u64,
    ) -> Result<SrState, SrvError> {
        const W: &str = "shared random state";
        let interval = interval.max(1);
        let mut version = None;
        let mut file_interval = None;
        let mut valid_after = None;
        let mut valid_until = None;
        let mut commits = BTreeMap::new();
        let mut previous = None;
        let mut current = None;
        for line in text.lines() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let (kw, args) = line.split_once(' ').unwrap_or((line, ""));
            match kw {
                "Version" => version = args.trim().parse::<u32>().ok(),
                "VotingInterval" => file_interval = args.trim().parse::<u64>().ok(),
                "ValidAfter" => valid_after = parse_utc(args.trim()),
                "ValidUntil" => valid_until = parse_utc(args.trim()),
                "Commit" => {
                    if commits.len() >= MAX_VOTE_COMMITS {
                        return Err(malformed(W, "too many commits"));
                    }
                    match Commit::parse_args(args) {
                        Ok(c) => {
                            commits.insert(c.identity(), c);
                        }
                        Err(e) => debug!("SR: dropping a commit from the state file: {e}"),
                    }
                }
                "SharedRandPreviousValue" | "SharedRandCurrentValue" => {
                    let v = SharedRandom::parse_args(args)?;
                    let slot = if kw == "SharedRandPreviousValue" {
                        &mut previous
                    } else {
                        &mut current
                    };
                    if slot.is_some() {
                        return Err(malformed(W, "repeated shared random value"));
                    }
                    *slot = Some(v);
                }
                _ => {}
            }
        }
        if version != Some(1) {
            return Err(malformed(W, "missing or unsupported Version"));
        }
        if file_interval.is_some_and(|i| i != interval) {
            return Err(malformed(W, "made for another voting interval"));
        }
        let (Some(valid_after), Some(valid_until)) = (valid_after, valid_until) else {
            return Err(malformed(W, "missing ValidAfter or ValidUntil"));
        };
        if valid_until < now {
            return Err(malformed(W, "expired"));
        }
        if valid_after >= valid_until {
            return Err(malformed(W, "ValidAfter not before ValidUntil"));
        }
        Ok(SrState {
            identity,
            interval,
            authorities: authorities.into_iter().collect(),
            valid_after,
            valid_until,
            phase: phase_of(valid_after, interval),
            commits,
            previous,
            current,
            fresh: false,
            commit_rounds: 0,
            reveal_rounds: 0,
        })
    }
}
