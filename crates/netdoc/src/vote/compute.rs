//! The consensus computed from votes (dir-spec §3.8.1, microdesc flavour).

use std::collections::{BTreeMap, BTreeSet};

use onionmix_crypto::timefmt::format_utc;

use super::{
    CONSENSUS_METHOD, FAR_FUTURE, MAX_UNMEASURED_BW, PROTO_KEYWORDS, RouterEntry, SrParams, Vote,
    VoteError, b64_nopad, bandwidth_weights, flags_line, params_line,
};
use crate::srv::{self, SrVoteInfo};

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

/// A protocol list as the consensus carries it: parsed and re-encoded
/// (names sorted, ranges merged, version 0 and leading zeros gone), as
/// tor recomputes these lines rather than copying a vote's text. Votes
/// that say the same thing in other words then count as one, and a
/// client with a strict parser (Arti) accepts the result. Text that does
/// not parse (votes are checked when parsed, so only votes built some
/// other way) gives an empty list.
fn canonical_protocols(s: &str) -> String {
    s.parse::<crate::types::Protocols>()
        .map(|p| p.to_string())
        .unwrap_or_default()
}

fn low_median<T: Ord + Copy>(mut v: Vec<T>) -> Option<T> {
    if v.is_empty() {
        return None;
    }
    v.sort();
    Some(v[(v.len() - 1) / 2])
}

/// The unsigned microdesc consensus computed from `votes` (each verified
/// by the caller), with `n_authorities` configured authorities. The text
/// ends after the `bandwidth-weights` line; signatures follow it. With
/// `sr.participate` the `shared-rand-previous-value` and
/// `shared-rand-current-value` lines follow `params` for the values a
/// majority of the votes carry ([`srv::majority_srv`]).
pub fn compute_consensus(
    votes: &[Vote],
    n_authorities: usize,
    sr: SrParams,
) -> Result<String, VoteError> {
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
        let v = most_common(
            votes
                .iter()
                .map(|v| canonical_protocols(&v.header.protocols[i])),
        )
        .unwrap_or_default();
        // An empty line would not parse; parse_vote refuses votes without
        // one, so this only guards votes built some other way.
        if !v.is_empty() {
            d.push_str(&format!("{k} {v}\n"));
        }
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
    // Shared random values right after the params, as tor writes them in
    // both flavours.
    if sr.participate {
        let agreements = params
            .get(srv::NUM_AGREEMENTS_PARAM)
            .map(|v| i64::from(*v))
            .unwrap_or_else(|| srv::default_num_agreements(n_authorities));
        let infos: Vec<&SrVoteInfo> = votes.iter().map(|v| &v.header.shared_rand).collect();
        let prev = srv::majority_srv(&infos, false, n_authorities, sr.fresh, agreements);
        let cur = srv::majority_srv(&infos, true, n_authorities, sr.fresh, agreements);
        d.push_str(&srv::srv_lines(prev.as_ref(), cur.as_ref()));
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
        let proto = most_common(entries.iter().map(|e| canonical_protocols(&e.protocols)))
            .unwrap_or_default();
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
