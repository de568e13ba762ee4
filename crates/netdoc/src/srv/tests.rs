#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;

use onionmix_crypto::timefmt::parse_utc;
use rand::SeedableRng;

/// An "RNG" that returns the same byte forever (tor's test vectors use
/// 32 'A's as the random number).
struct Fixed(u8);
impl RngCore for Fixed {
    fn next_u32(&mut self) -> u32 {
        u32::from_ne_bytes([self.0; 4])
    }
    fn next_u64(&mut self) -> u64 {
        u64::from_ne_bytes([self.0; 8])
    }
    fn fill_bytes(&mut self, dest: &mut [u8]) {
        dest.fill(self.0);
    }
    fn try_fill_bytes(&mut self, dest: &mut [u8]) -> Result<(), rand::Error> {
        dest.fill(self.0);
        Ok(())
    }
}
impl CryptoRng for Fixed {}

fn rng() -> rand_chacha::ChaCha20Rng {
    rand_chacha::ChaCha20Rng::seed_from_u64(250)
}

fn t(s: &str) -> u64 {
    parse_utc(s).unwrap()
}

#[test]
fn phases_follow_valid_after() {
    // tor's test_get_sr_protocol_phase (hourly voting).
    for (when, phase) in [
        ("2015-04-20 23:59:00", Phase::Reveal),
        ("2015-04-20 00:00:00", Phase::Commit),
        ("2015-04-20 00:00:01", Phase::Commit),
        ("2015-04-20 11:59:00", Phase::Commit),
        ("2015-04-20 12:00:00", Phase::Reveal),
        ("2015-04-20 12:00:01", Phase::Reveal),
        ("2015-04-20 13:00:00", Phase::Reveal),
    ] {
        assert_eq!(phase_of(t(when), 3600), phase, "{when}");
    }
    // Testing networks: 20 s rounds, so a run is 480 s and each phase 240 s,
    // boundaries by valid-after.
    let start = t("2026-01-01 00:00:00");
    assert_eq!(start % 480, 0);
    for round in 0..24u64 {
        let va = start + round * 20;
        let want = if round < 12 {
            Phase::Commit
        } else {
            Phase::Reveal
        };
        assert_eq!(phase_of(va, 20), want, "round {round}");
        assert_eq!(round_of(va, 20), round);
        assert_eq!(run_start(va, 20), start);
        assert_eq!(run_start(va + 19, 20), start);
        assert_eq!(run_end(va, 20), start + 480);
    }
    assert_eq!(phase_of(start + 480, 20), Phase::Commit);
    assert_eq!(run_start(start + 480, 20), start + 480);
    // tor's test_get_start_time_of_current_run: 10 s rounds, a 240 s run.
    let now = t("2015-04-20 00:00:11");
    assert_eq!(run_start(now, 10), t("2015-04-20 00:00:00"));
    assert_eq!(run_start(t("2015-04-20 00:03:59"), 10), now - 11);
    assert_eq!(run_start(t("2015-04-20 00:04:00"), 10), now - 11 + 240);
    // Daily runs start at 00:00 UTC.
    assert_eq!(
        run_start(t("2015-04-20 17:30:00"), 3600),
        t("2015-04-20 00:00:00")
    );
}

#[test]
fn commit_and_reveal_match_tors_test_vector() {
    // tor's test_encoding / sr_commit_calc_ref.py: RN = 32 'A's.
    let ts = 1_454_333_590;
    let c = Commit::generate([7; 20], ts, &mut Fixed(b'A'));
    assert_eq!(
        c.encoded_reveal(),
        Some("AAAAAFavXpZJxbwTupvaJCTeIUCQmOPxAMblc7ChL5H2nZKuGchdaA==")
    );
    assert_eq!(
        c.encoded_commit(),
        "AAAAAFavXpbkBMzMQG7aNoaGLFNpm2Wkk1ozXhuWWqL//GynltxVAg=="
    );
    assert_eq!(c.timestamp(), ts);
    assert!(c.reveal_matches());
    // The line parses back to the same commit.
    let parsed = Commit::parse_args(&c.to_args()).unwrap();
    assert_eq!(parsed, c);
    assert!(parsed.reveal_matches());
    // Debug never shows the reveal.
    assert!(!format!("{c:?}").contains("AAAAAFavXpZJ"));
}

#[test]
fn reveals_are_checked_against_commitments() {
    let c = Commit::generate([1; 20], 1000, &mut rng());
    let other = Commit::generate([1; 20], 1000, &mut rng_other());
    let reveal = c.encoded_reveal().unwrap();
    let bare = format!(
        "1 sha3-256 {} {}",
        hex::encode_upper([1u8; 20]),
        c.encoded_commit()
    );
    let good = Commit::parse_args(&format!("{bare} {reveal}")).unwrap();
    assert!(good.reveal_matches());
    assert!(!Commit::parse_args(&bare).unwrap().reveal_matches());
    // Someone else's reveal.
    let wrong = format!("{bare} {}", other.encoded_reveal().unwrap());
    assert!(!Commit::parse_args(&wrong).unwrap().reveal_matches());
    // Same random value, another timestamp: tor's "timestamp doesn't
    // match" case.
    let shifted = Commit::generate([1; 20], 1001, &mut rng());
    let mixed = format!("{bare} {}", shifted.encoded_reveal().unwrap());
    assert!(!Commit::parse_args(&mixed).unwrap().reveal_matches());
}

fn rng_other() -> rand_chacha::ChaCha20Rng {
    rand_chacha::ChaCha20Rng::seed_from_u64(251)
}

#[test]
fn malformed_commits_are_refused() {
    let c = Commit::generate([1; 20], 1000, &mut rng());
    let id = hex::encode_upper([1u8; 20]);
    let cm = c.encoded_commit();
    for (bad, why) in [
        (format!("1 sha3-256 {id}"), "too few"),
        (format!("2 sha3-256 {id} {cm}"), "version"),
        (format!("0 sha3-256 {id} {cm}"), "version"),
        (format!("x sha3-256 {id} {cm}"), "version"),
        (format!("1 sha256 {id} {cm}"), "algorithm"),
        (format!("1 sha3-256 {} {cm}", &id[2..]), "identity"),
        (format!("1 sha3-256 {id} {}", &cm[4..]), "short commit"),
        (
            format!("1 sha3-256 {id} {}", cm.replace('=', "A")),
            "unpadded",
        ),
        (format!("1 sha3-256 {id} {cm} AAAA"), "short reveal"),
        (
            format!("1 sha3-256 {id} {cm} {}", "!".repeat(56)),
            "bad reveal",
        ),
    ] {
        assert!(Commit::parse_args(&bad).is_err(), "{why}: {bad}");
    }
    assert!(SharedRandom::parse_args("3").is_err());
    assert!(SharedRandom::parse_args("-1 WlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlo=").is_err());
    assert!(SharedRandom::parse_args("1 WlpaWlpa").is_err());
    assert!(SharedRandom::parse_args("1 WlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlo").is_err());
    // Extra arguments (prop 342 timestamps) are ignored.
    let v = SharedRandom::parse_args(
        "3 WlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlo= 2026-01-01T00:00:00",
    )
    .unwrap();
    assert_eq!((v.num_reveals, v.value), (3, [b'Z'; 32]));
}

/// A commit as tor's `test_sr_setup_commits` builds it: identity,
/// hashed reveal and encoded reveal set by hand.
fn surgical(letter: u8, with_reveal: bool) -> Commit {
    let enc = String::from_utf8(vec![letter; 56]).unwrap();
    Commit {
        identity: [letter; 20],
        timestamp: 0,
        hashed_reveal: [letter; 32],
        encoded: enc.clone(),
        reveal: with_reveal.then_some(Reveal {
            timestamp: 0,
            encoded: enc,
        }),
    }
}

#[test]
fn srv_matches_tors_test_vector() {
    // tor's test_sr_compute_srv / sr_srv_calc_ref.py: reveals from
    // authorities 'A', 'B', 'C' (and 'D' without a reveal, ignored),
    // previous SRV 32 'Z's.
    let commits = [
        surgical(b'C', true),
        surgical(b'A', true),
        surgical(b'D', false),
        surgical(b'B', true),
    ];
    let prev = SharedRandom {
        num_reveals: 42,
        value: [b'Z'; 32],
    };
    let srv = compute_srv(&commits, Some(&prev));
    assert_eq!(srv.num_reveals, 3);
    assert_eq!(
        hex::encode_upper(srv.value),
        "2A9B1D6237DAB312A40F575DA85C147663E7ED3F80E9555395F15B515C74253D"
    );
    // Order of input does not matter; the previous value does.
    let mut rev = commits.clone();
    rev.reverse();
    assert_eq!(compute_srv(&rev, Some(&prev)), srv);
    assert_ne!(compute_srv(&commits, None), srv);
    // No reveals still makes a value, with REVEAL_NUM 0.
    let none = compute_srv(&[surgical(b'D', false)], None);
    assert_eq!(none.num_reveals, 0);
    assert_eq!(none, compute_srv(&[], None));
}

#[test]
fn disaster_srv_matches_tors_test() {
    // tor's test_disaster_srv: one-day periods (1440 minutes), period 1.
    assert_eq!(
        hex::encode_upper(disaster_srv(1440, 1)),
        "F8A4948707653837FA44ABB5BBC75A12F6F101E7F8FAF699B9715F4965D3507D"
    );
    assert_ne!(disaster_srv(1440, 2), disaster_srv(1440, 1));
    assert_ne!(disaster_srv(60, 1), disaster_srv(1440, 1));
}

fn srv(letter: u8, n: u64) -> SharedRandom {
    SharedRandom {
        num_reveals: n,
        value: [letter; 32],
    }
}

#[test]
fn vote_lines_round_trip_as_tor_writes_them() {
    // tor's test_vote: reveal phase, our commit with its reveal, previous
    // 42 'Z's and current 128 'N's.
    let c = Commit::generate([0xAB; 20], 1000, &mut rng());
    let info = SrVoteInfo {
        participate: true,
        commits: vec![c.clone()],
        previous: Some(srv(b'Z', 42)),
        current: Some(srv(b'N', 128)),
    };
    let text = info.vote_lines();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0], "shared-rand-participate");
    let f: Vec<&str> = lines[1].split(' ').collect();
    assert_eq!(f.len(), 6);
    assert_eq!(
        &f[..4],
        ["shared-rand-commit", "1", "sha3-256", &"AB".repeat(20)]
    );
    assert_eq!(f[4], c.encoded_commit());
    assert_eq!(Some(f[5]), c.encoded_reveal());
    assert_eq!(
        lines[2],
        "shared-rand-previous-value 42 WlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlo="
    );
    assert_eq!(
        lines[3],
        "shared-rand-current-value 128 Tk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk5OTk4="
    );
    let mut back = SrVoteInfo::default();
    for l in text.lines() {
        let (kw, args) = l.split_once(' ').unwrap_or((l, ""));
        assert!(back.take_line(kw, args).unwrap());
    }
    back.finish();
    assert_eq!(back, info);
    assert_eq!(
        scan_srv_lines(&text),
        (Some(srv(b'Z', 42)), Some(srv(b'N', 128)))
    );
    // Not participating: nothing in the vote; commits of a vote without
    // the participate line are dropped.
    assert_eq!(
        SrVoteInfo {
            participate: false,
            ..info.clone()
        }
        .vote_lines(),
        ""
    );
    let mut np = SrVoteInfo::default();
    np.take_line("shared-rand-commit", &c.to_args()).unwrap();
    np.finish();
    assert!(np.commits.is_empty());
    // Of two commits for one authority the first counts; an unknown
    // keyword is not ours; a bad commit line is skipped.
    let mut dup = SrVoteInfo::default();
    let later = Commit::generate([0xAB; 20], 1020, &mut rng());
    dup.take_line("shared-rand-commit", &c.to_args()).unwrap();
    assert!(
        dup.take_line("shared-rand-commit", &later.to_args())
            .unwrap()
    );
    assert_eq!(dup.commits, std::slice::from_ref(&c));
    assert!(!dup.take_line("known-flags", "Running").unwrap());
    assert!(dup.take_line("shared-rand-commit", "1 md5 x y").unwrap());
    assert!(
        dup.take_line("shared-rand-current-value", "1 x").is_err(),
        "a malformed value invalidates the vote"
    );
}

#[test]
fn majority_rules_match_tor() {
    // tor's test_sr_get_majority_srv_from_votes: 9 authorities.
    let vote = |v: SharedRandom| SrVoteInfo {
        participate: true,
        current: Some(v),
        ..Default::default()
    };
    let one = [vote(srv(b'A', 42))];
    let refs: Vec<&SrVoteInfo> = one.iter().collect();
    assert_eq!(majority_srv(&refs, true, 9, true, 6), None);
    let mut votes: Vec<SrVoteInfo> = (0..7).map(|_| vote(srv(b'A', 42))).collect();
    votes.extend((0..2).map(|_| vote(srv(b'B', 42))));
    let refs: Vec<&SrVoteInfo> = votes.iter().collect();
    // Majority, but not AuthDirNumSRVAgreements = 8 for a fresh value.
    assert_eq!(majority_srv(&refs, true, 9, true, 8), None);
    assert_eq!(majority_srv(&refs, true, 9, true, 7), Some(srv(b'A', 42)));
    // Not fresh: a majority is enough.
    assert_eq!(majority_srv(&refs, true, 9, false, 8), Some(srv(b'A', 42)));
    // Previous values are looked up separately.
    assert_eq!(majority_srv(&refs, false, 9, false, 8), None);
    // Non-participants do not count.
    let silent: Vec<SrVoteInfo> = votes
        .iter()
        .map(|v| SrVoteInfo {
            participate: false,
            ..v.clone()
        })
        .collect();
    let refs: Vec<&SrVoteInfo> = silent.iter().collect();
    assert_eq!(majority_srv(&refs, true, 9, false, 0), None);
    assert_eq!(default_num_agreements(9), 6);
    assert_eq!(default_num_agreements(3), 2);
}

const IDS: [[u8; 20]; 3] = [[0x11; 20], [0x22; 20], [0x33; 20]];

/// Three authorities voting every 20 s from `start` for `rounds` rounds:
/// each round every state updates, votes, takes the others' votes and
/// computes the consensus SRVs; the consensus (what all agree on) is
/// posted back. Returns the consensus SRVs of every round.
type Srvs = (Option<SharedRandom>, Option<SharedRandom>);

fn run_rounds(states: &mut [SrState], start: u64, rounds: u64, r: &mut impl RngCore) -> Vec<Srvs> {
    let mut out = Vec::new();
    let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(r.next_u64());
    for i in 0..rounds {
        let va = start + i * 20;
        for s in states.iter_mut() {
            s.update(va, &mut rng);
        }
        let votes: Vec<SrVoteInfo> = states.iter().map(|s| s.vote_info(true)).collect();
        for s in states.iter_mut() {
            for (j, v) in votes.iter().enumerate() {
                s.handle_vote(IDS[j], v);
            }
        }
        let refs: Vec<&SrVoteInfo> = votes.iter().collect();
        let cons: Vec<Srvs> = states
            .iter()
            .map(|s| {
                let n = default_num_agreements(3);
                (
                    majority_srv(&refs, false, 3, s.is_fresh(), n),
                    majority_srv(&refs, true, 3, s.is_fresh(), n),
                )
            })
            .collect();
        assert!(cons.iter().all(|c| *c == cons[0]), "authorities disagree");
        for s in states.iter_mut() {
            s.post_consensus(Some(cons[0]), va + 20, &mut rng);
        }
        out.push(cons[0]);
    }
    out
}

fn three(now: u64) -> Vec<SrState> {
    IDS.iter()
        .map(|id| SrState::new(*id, 20, IDS, now))
        .collect()
}

#[test]
fn a_full_run_produces_an_srv_every_authority_agrees_on() {
    let start = t("2026-01-01 00:00:00");
    // Boot a little before the run starts (last reveal round), so the
    // first round prepared is the run's first commit round.
    let mut states = three(start - 5);
    let mut r = rng();
    // Reveal phase at boot, no commits: the first run boundary makes an
    // SRV from no reveals, as tor does.
    let srvs = run_rounds(&mut states, start, 23, &mut r);
    let zero = compute_srv(&[], None);
    assert_eq!(srvs[0], (None, Some(zero)));
    assert!(srvs.iter().all(|s| *s == (None, Some(zero))));
    // Prepared for the last round: everybody holds everybody's commit and
    // reveal.
    for s in &states {
        assert_eq!(s.valid_after(), start + 460);
        assert_eq!(s.phase(), Phase::Reveal);
        assert_eq!(s.commits().count(), 3);
        assert!(s.commits().all(|c| c.reveal_matches()));
    }
    let expected = compute_srv(states[0].commits(), Some(&zero));
    assert_eq!(expected.num_reveals, 3);
    // First round of the next run: the new SRV, agreed by all three.
    let next = run_rounds(&mut states, start + 460, 2, &mut r);
    assert_eq!(next[0], (None, Some(zero)));
    assert_eq!(next[1], (Some(zero), Some(expected)));
    for s in &states {
        assert_eq!(s.current(), Some(&expected));
        assert!(!s.is_fresh(), "the consensus confirmed it");
        // New run: one fresh commit of ours.
        assert_eq!(s.commits().count(), 3, "commits of the new run");
    }
}

#[test]
fn one_reveal_missing_still_agrees() {
    // Authority 2 never sends its reveal (it stops taking part after the
    // commit phase): the others compute from two reveals.
    let start = t("2026-01-01 00:00:00");
    let mut states = three(start - 5);
    let mut rng = rng();
    run_rounds(&mut states, start, 12, &mut rng);
    let mut r2 = rand_chacha::ChaCha20Rng::seed_from_u64(9);
    for i in 12..24u64 {
        let va = start + i * 20;
        for s in states.iter_mut() {
            s.update(va, &mut r2);
        }
        let votes: Vec<SrVoteInfo> = states.iter().take(2).map(|s| s.vote_info(true)).collect();
        for s in states.iter_mut() {
            for (j, v) in votes.iter().enumerate() {
                s.handle_vote(IDS[j], v);
            }
        }
    }
    let a = compute_srv(states[0].commits(), None);
    assert_eq!(a.num_reveals, 2);
    assert_eq!(a, compute_srv(states[1].commits(), None));
}

#[test]
fn commits_are_checked_like_tor() {
    let start = t("2026-01-01 00:00:00");
    let mut a = SrState::new(IDS[0], 20, IDS, start - 5);
    let mut r = rng();
    assert!(a.update(start, &mut r));
    assert!(!a.update(start, &mut r), "same round twice");
    assert_eq!(a.phase(), Phase::Commit);
    let own = a.own_commit().unwrap().clone();
    assert_eq!(own.timestamp(), start);
    let b1 = Commit::generate(IDS[1], start, &mut r);
    let b2 = Commit::generate(IDS[1], start + 20, &mut r);
    let c1 = Commit::generate(IDS[2], start, &mut r);
    let vote = |c: Vec<Commit>| SrVoteInfo {
        participate: true,
        commits: c,
        ..Default::default()
    };
    // Reveals are not shown in the commit phase.
    assert!(a.vote_info(true).commits.iter().all(|c| !c.has_reveal()));
    // A commit with a reveal in the commit phase is ignored.
    assert!(!a.handle_vote(IDS[1], &vote(vec![b1.clone()])));
    // Not authoritative: B's vote carrying C's commit.
    assert!(!a.handle_vote(IDS[1], &vote(vec![c1.without_reveal()])));
    // Not a configured authority.
    let stranger = Commit::generate([0x44; 20], start, &mut r);
    assert!(!a.handle_vote([0x44; 20], &vote(vec![stranger.without_reveal()])));
    // Not participating.
    assert!(!a.handle_vote(
        IDS[1],
        &SrVoteInfo {
            participate: false,
            ..vote(vec![b1.without_reveal()])
        }
    ));
    // A replayed commitment of the previous run.
    let old = Commit::generate(IDS[1], start - 480, &mut r);
    assert!(!a.handle_vote(IDS[1], &vote(vec![old.without_reveal()])));
    // B's commitment is kept; a second, different one later is ignored.
    assert!(a.handle_vote(IDS[1], &vote(vec![b1.without_reveal()])));
    assert!(a.update(start + 20, &mut r));
    assert!(!a.handle_vote(IDS[1], &vote(vec![b2.without_reveal()])));
    assert!(
        a.commits()
            .find(|c| c.identity() == IDS[1])
            .unwrap()
            .same_commitment(&b1)
    );
    // Our own commitment never changes within the run.
    assert_eq!(a.own_commit(), Some(&own));
    // Reveal phase.
    for i in 2..=12 {
        a.update(start + i * 20, &mut r);
    }
    assert_eq!(a.phase(), Phase::Reveal);
    assert_eq!(
        a.own_commit(),
        Some(&own),
        "no new commit in the reveal phase"
    );
    assert!(a.vote_info(true).commits.iter().any(|c| c.has_reveal()));
    // C first seen now: ignored. B's reveal for another commitment:
    // ignored. B's wrong reveal: ignored. B's reveal: taken.
    assert!(!a.handle_vote(IDS[2], &vote(vec![c1.clone()])));
    assert!(!a.handle_vote(IDS[1], &vote(vec![b2.clone()])));
    let forged = Commit::parse_args(&format!(
        "{} {}",
        b1.without_reveal().to_args(),
        b2.encoded_reveal().unwrap()
    ))
    .unwrap();
    assert!(!a.handle_vote(IDS[1], &vote(vec![forged])));
    assert!(!a.handle_vote(IDS[1], &vote(vec![b1.without_reveal()])));
    assert!(a.handle_vote(IDS[1], &vote(vec![b1.clone()])));
    assert!(!a.handle_vote(IDS[1], &vote(vec![b1.clone()])), "known");
    assert_eq!(a.commits().filter(|c| c.has_reveal()).count(), 2);
}

#[test]
fn booting_in_the_commit_phase_commits_at_once() {
    let start = t("2026-01-01 00:00:00");
    let mut s = SrState::new(IDS[0], 20, IDS, start + 100);
    assert!(s.own_commit().is_none());
    s.update(start + 120, &mut rng());
    assert_eq!(s.own_commit().unwrap().timestamp(), start + 120);
    // Booting in the reveal phase: no commitment until the next run.
    let mut s = SrState::new(IDS[0], 20, IDS, start + 300);
    s.update(start + 320, &mut rng());
    assert!(s.own_commit().is_none());
    s.update(start + 480, &mut rng());
    assert_eq!(s.own_commit().unwrap().timestamp(), start + 480);
    assert!(s.is_fresh());
}

#[test]
fn skipped_rounds_never_keep_a_stale_commitment() {
    let start = t("2026-01-01 00:00:00");
    let mut r = rng();
    let mut s = SrState::new(IDS[0], 20, IDS, start - 5);
    s.update(start, &mut r);
    let b = Commit::generate(IDS[1], start, &mut r).without_reveal();
    s.handle_vote(
        IDS[1],
        &SrVoteInfo {
            participate: true,
            commits: vec![b],
            ..Default::default()
        },
    );
    let cur = s.current().copied();
    assert_eq!(s.commits().count(), 2);
    // Two runs later, commit phase again: a new run with a new commitment
    // of ours only, and no SRV from the old run's (unrevealed) commits.
    assert!(s.update(start + 2 * 480 + 40, &mut r));
    assert_eq!(s.commits().count(), 1);
    assert_eq!(s.own_commit().unwrap().timestamp(), start + 2 * 480 + 40);
    assert_eq!(s.current().copied(), cur);
    // A later run's reveal phase: nothing of ours to reveal, nothing kept.
    assert!(s.update(start + 5 * 480 + 300, &mut r));
    assert_eq!(s.phase(), Phase::Reveal);
    assert_eq!(s.commits().count(), 0);
    assert_eq!(s.valid_until(), start + 6 * 480);
}

#[test]
fn state_survives_a_restart() {
    let start = t("2026-01-01 00:00:00");
    let mut states = three(start - 5);
    let mut r = rng();
    run_rounds(&mut states, start, 14, &mut r);
    let a = &states[0];
    let text = a.to_text();
    let back = SrState::from_text(&text, IDS[0], 20, IDS, start + 280).unwrap();
    assert_eq!(back.to_text(), text);
    assert_eq!(back.phase(), Phase::Reveal);
    assert_eq!(back.own_commit(), a.own_commit());
    assert_eq!(back.commits().count(), 3);
    assert_eq!(back.current(), a.current());
    // After the restart the run goes on with the same commitment.
    let mut again = back.clone();
    again.update(start + 300, &mut r);
    assert_eq!(again.own_commit(), a.own_commit());
    // Restart in the commit phase: no second commitment.
    let mut b = SrState::new(IDS[1], 20, IDS, start - 5);
    b.update(start, &mut r);
    let mut reloaded = SrState::from_text(&b.to_text(), IDS[1], 20, IDS, start + 10).unwrap();
    reloaded.update(start + 20, &mut r);
    assert_eq!(reloaded.own_commit(), b.own_commit());
    // Refused: expired, another interval, garbage, repeated values.
    assert!(SrState::from_text(&text, IDS[0], 20, IDS, start + 10_000).is_err());
    assert!(SrState::from_text(&text, IDS[0], 10, IDS, start + 280).is_err());
    assert!(SrState::from_text("garbage", IDS[0], 20, IDS, start).is_err());
    let twice =
        format!("{text}SharedRandCurrentValue 1 WlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlpaWlo=\n");
    assert!(SrState::from_text(&twice, IDS[0], 20, IDS, start + 280).is_err());
}

#[test]
fn reads_tors_state_file() {
    // tor's test_state_load_from_disk (its commits predate the current
    // encoding but parse; no VotingInterval line: accepted as is).
    let text = "Version 1\n\
        TorVersion 0.2.9.0-alpha-dev\n\
        ValidAfter 2037-04-19 07:16:00\n\
        ValidUntil 2037-04-20 07:16:00\n\
        Commit 1 sha3-256 FA3CEC2C99DC68D3166B9B6E4FA21A4026C2AB1C \
        7M8GdubCAAdh7WUG0DiwRyxTYRKji7HATa7LLJEZ/UAAAAAAVmfUSg== \
        AAAAAFZn1EojfIheIw42bjK3VqkpYyjsQFSbv/dxNna3Q8hUEPKpOw==\n\
        Commit 1 sha3-256 41E89EDFBFBA44983E21F18F2230A4ECB5BFB543 \
        17aUsYuMeRjd2N1r8yNyg7aHqRa6gf4z7QPoxxAZbp0AAAAAVmfUSg==\n\
        Commit 1 sha3-256 36637026573A04110CF3E6B1D201FB9A98B88734 \
        DDDYtripvdOU+XPEUm5xpU64d9IURSds1xSwQsgeB8oAAAAAVmfUSg==\n\
        SharedRandPreviousValue 4 qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqo=\n\
        SharedRandCurrentValue 3 8dWeW12KEzTGEiLGgO1UVJ7Z91CekoRcxt6Q9KhnOFI=\n";
    let s = SrState::from_text(text, IDS[0], 3600, IDS, t("2037-04-19 08:00:00")).unwrap();
    assert_eq!(s.commits().count(), 3);
    assert_eq!(s.previous().unwrap().num_reveals, 4);
    assert_eq!(s.previous().unwrap().value, [0xAA; 32]);
    assert_eq!(s.current().unwrap().num_reveals, 3);
    assert_eq!(
        s.current().unwrap().encoded(),
        "8dWeW12KEzTGEiLGgO1UVJ7Z91CekoRcxt6Q9KhnOFI="
    );
}

mod fuzz {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn parsers_never_panic(kw in prop::sample::select(VOTE_KEYWORDS.to_vec()), args in ".{0,200}") {
            let mut v = SrVoteInfo::default();
            let _ = v.take_line(kw, &args);
            let _ = Commit::parse_args(&args);
            let _ = SharedRandom::parse_args(&args);
            let _ = SrState::from_text(&args, [0; 20], 20, [[0; 20]], 0);
        }
    }
}
