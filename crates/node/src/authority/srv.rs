//! Shared randomness for the authority: the protocol state
//! ([`onionmix_netdoc::srv::SrState`]) advanced with the voting schedule
//! and kept in `<data_dir>/sr-state` (mode 0600: it holds our reveal
//! before the reveal phase), written after every change so that a
//! restarted authority never commits twice in one protocol run.

use std::path::{Path, PathBuf};
use std::sync::MutexGuard;

use tracing::{info, warn};

use onionmix_netdoc::srv::{self, SrState, SrVoteInfo};
use onionmix_netdoc::vote::{SrParams, Vote};

use super::{Authority, AuthorityConfig};
use crate::clock::now_unix;

/// The state file's name in the data directory (tor's).
const STATE_FILE: &str = "sr-state";

fn state_path(cfg: &AuthorityConfig) -> PathBuf {
    cfg.data_dir.join(STATE_FILE)
}

fn save(path: &Path, sr: &SrState) {
    if let Err(e) = onionmix_fsutil::write_private_atomic(path, sr.to_text()) {
        warn!("could not save the shared random state: {e}");
    }
}

/// Load the state saved in the data directory (or start afresh) and
/// prepare it for the next voting round, as tor's `sr_state_init`.
pub(super) fn load(cfg: &AuthorityConfig, identity: [u8; 20], authorities: &[[u8; 20]]) -> SrState {
    let now = now_unix();
    let interval = cfg.voting_interval_secs;
    let path = state_path(cfg);
    let mut sr = match std::fs::read_to_string(&path) {
        Ok(text) => {
            match SrState::from_text(&text, identity, interval, authorities.iter().copied(), now) {
                Ok(s) => {
                    info!(
                        "SR: resuming the saved shared random state ({} phase, {} commits)",
                        s.phase(),
                        s.commits().count()
                    );
                    s
                }
                Err(e) => {
                    info!("SR: not using the saved shared random state: {e}");
                    SrState::new(identity, interval, authorities.iter().copied(), now)
                }
            }
        }
        Err(_) => SrState::new(identity, interval, authorities.iter().copied(), now),
    };
    let next = (now / interval + 1) * interval;
    sr.update(next, &mut rand::rngs::OsRng);
    save(&path, &sr);
    sr
}

impl Authority {
    fn sr_lock(&self) -> MutexGuard<'_, SrState> {
        self.sr.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn sr_save(&self, sr: &SrState) {
        save(&state_path(&self.cfg), sr);
    }

    /// The shared-random part of our vote for `valid_after`.
    pub(super) fn sr_vote_info(&self, valid_after: u64) -> SrVoteInfo {
        let mut sr = self.sr_lock();
        if sr.update(valid_after, &mut rand::rngs::OsRng) {
            self.sr_save(&sr);
        }
        sr.vote_info(self.cfg.shared_randomness)
    }

    /// Take the commits and reveals of the votes for `valid_after` (ours
    /// aside) and say how to write the consensus's SRV lines.
    pub(super) fn sr_take_votes(&self, valid_after: u64, votes: &[Vote]) -> SrParams {
        let mut sr = self.sr_lock();
        if sr.valid_after() == valid_after {
            let mut changed = false;
            for v in votes.iter().filter(|v| v.header.v3ident != self.v3ident) {
                changed |= sr.handle_vote(v.header.v3ident, &v.header.shared_rand);
            }
            if changed {
                self.sr_save(&sr);
            }
        }
        SrParams {
            participate: self.cfg.shared_randomness,
            fresh: sr.is_fresh(),
        }
    }

    /// At `valid_after`, after publishing (or failing to): the latest
    /// consensus's SRVs are the truth; prepare for the next round (tor's
    /// `sr_act_post_consensus`).
    pub(super) fn sr_after_consensus(&self, valid_after: u64) {
        let srvs = {
            let st = self.lock();
            st.current.as_ref().map(|c| srv::scan_srv_lines(&c.body))
        };
        let next = valid_after.saturating_add(self.cfg.voting_interval_secs);
        let mut sr = self.sr_lock();
        let had = sr.current().copied();
        if sr.post_consensus(srvs, next, &mut rand::rngs::OsRng) {
            self.sr_save(&sr);
        }
        if sr.current().copied() != had
            && let Some(c) = sr.current()
        {
            info!(
                "SR: current shared random value {} ({} reveals)",
                c.encoded(),
                c.num_reveals
            );
        }
    }

    /// The protocol state (tests).
    #[cfg(test)]
    pub(super) fn sr_state(&self) -> SrState {
        self.sr_lock().clone()
    }
}
