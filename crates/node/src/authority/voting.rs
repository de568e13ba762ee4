//! Flags, votes, the consensus computation and its publication.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, info, warn};

use onionmix_netdoc::vote::{self, RouterEntry, Vote, VoteHeader};

use super::{Authority, PEER_TIMEOUT, Pending, consensus_md_digests, http};
use crate::clock::now_unix;

impl Authority {
    fn schedule(&self, valid_after: u64) -> (u64, u64, u64) {
        let i = self.cfg.voting_interval_secs;
        (valid_after, valid_after + i, valid_after + 3 * i)
    }

    pub(super) fn make_vote(&self, valid_after: u64) -> Result<String, String> {
        let (va, fu, vu) = self.schedule(valid_after);
        let st = self.lock();
        let relays: Vec<RouterEntry> = st
            .descs
            .values()
            .map(|s| RouterEntry {
                nickname: s.desc.nickname.clone(),
                rsa_id: s.desc.rsa_id,
                ed_id: s.desc.ed_id,
                desc_digest: s.desc.digest,
                published: s.desc.published,
                address: s.desc.address,
                or_port: s.desc.or_port,
                dir_port: s.desc.dir_port,
                flags: self.flags_for(s),
                version: vote::version_from_platform(&s.desc.platform),
                protocols: s.desc.protocols.clone(),
                bandwidth_kb: s.desc.bandwidth.0.min(s.desc.bandwidth.2) / 1000,
                policy_summary: s.policy_summary.clone(),
                md_digest: s.md_digest,
            })
            .collect();
        drop(st);
        let h = VoteHeader {
            nickname: self.cfg.nickname.clone(),
            v3ident: self.v3ident,
            address: self.cfg.address_v4(),
            dir_port: self.cfg.dir_listen.port(),
            or_port: self.cfg.or_listen.port(),
            contact: self.cfg.contact.clone(),
            published: now_unix(),
            valid_after: va,
            fresh_until: fu,
            valid_until: vu,
            voting_delay: (
                self.cfg.vote_delay_secs as u32,
                self.cfg.dist_delay_secs as u32,
            ),
            known_flags: [
                "Authority",
                "Exit",
                "Fast",
                "Guard",
                "HSDir",
                "Running",
                "Stable",
                "V2Dir",
                "Valid",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect(),
            protocols: vote::default_protocol_lines(),
            params: self.cfg.params.clone(),
            shared_rand: self.sr_vote_info(va),
        };
        vote::build_vote(&h, &relays, &self.keys.certificate, &self.keys.signing)
            .map_err(|e| e.to_string())
    }

    /// Take a vote (ours or a peer's) for the period being voted on.
    pub(super) fn accept_vote(&self, text: &str) -> Result<&'static str, String> {
        let v = vote::parse_vote(text, crate::clock::now()).map_err(|e| e.to_string())?;
        if !self.peers.iter().any(|p| p.0 == v.header.v3ident) {
            return Err("vote from an authority we do not know".into());
        }
        let mut st = self.lock();
        if v.header.valid_after < st.votes_for {
            return Err("vote for a past period".into());
        }
        if v.header.valid_after > st.votes_for {
            st.votes.clear();
            st.votes_for = v.header.valid_after;
        }
        st.certs.insert(
            v.header.v3ident,
            (v.certificate_text.clone(), v.certificate.clone()),
        );
        st.votes.insert(v.header.v3ident, (v, text.to_string()));
        Ok("Vote accepted")
    }

    pub(super) fn accept_signature(&self, text: &str) -> Result<&'static str, String> {
        let d = vote::parse_detached(text).map_err(|e| e.to_string())?;
        if !self.peers.iter().any(|p| p.0 == d.signature.identity) {
            return Err("signature from an authority we do not know".into());
        }
        let mut guard = self.lock();
        let st = &mut *guard;
        let cert = st.certs.get(&d.signature.identity).map(|c| c.1.clone());
        let mut changed_current = false;
        for slot in [&mut st.pending, &mut st.current] {
            if let Some(p) = slot.as_mut()
                && p.valid_after == d.valid_after
            {
                let Some(cert) = &cert else {
                    return Err("no key certificate for that authority yet".into());
                };
                if !d.verify(&p.body, cert) {
                    return Err("signature does not match our consensus".into());
                }
                if !p.sigs.iter().any(|s| s.identity == d.signature.identity) {
                    p.sigs.push(d.signature.clone());
                    changed_current = true;
                }
            }
        }
        let is_current = st
            .current
            .as_ref()
            .is_some_and(|c| c.valid_after == d.valid_after);
        if is_current && changed_current {
            let c = st.current.clone();
            if let Some(c) = c {
                let text = vote::assemble_consensus(&c.body, &c.sigs);
                st.current_text = Some(Arc::new(text.clone()));
                drop(guard);
                let _ = std::fs::write(self.consensus_path(), text);
            }
            return Ok("Signature accepted");
        }
        if st
            .pending
            .as_ref()
            .is_some_and(|p| p.valid_after == d.valid_after)
        {
            return Ok("Signature accepted");
        }
        if st.early_sigs.len() < 64 {
            st.early_sigs.push(d);
        }
        Ok("Signature queued")
    }

    async fn post_to_peers(self: &Arc<Self>, path: &str, body: String) {
        for (v3, _, addr) in self.peers.clone() {
            if v3 == self.v3ident {
                continue;
            }
            let path = path.to_string();
            let body = body.clone();
            tokio::spawn(async move {
                match tokio::time::timeout(PEER_TIMEOUT, http::post(addr, &path, &body)).await {
                    Ok(Ok((200, _))) => {}
                    Ok(Ok((code, why))) => debug!("{addr}{path}: {code} {why}"),
                    Ok(Err(e)) => debug!("{addr}{path}: {e}"),
                    Err(_) => debug!("{addr}{path}: timed out"),
                }
            });
        }
    }

    async fn fetch_missing_votes(self: &Arc<Self>) {
        let missing: Vec<SocketAddr> = {
            let st = self.lock();
            self.peers
                .iter()
                .filter(|p| !st.votes.contains_key(&p.0))
                .map(|p| p.2)
                .collect()
        };
        for addr in missing {
            if let Ok(Ok((200, body))) = tokio::time::timeout(
                PEER_TIMEOUT,
                http::get(addr, "/tor/status-vote/next/authority"),
            )
            .await
                && let Err(e) = self.accept_vote(&body)
            {
                debug!("vote fetched from {addr}: {e}");
            }
        }
    }

    pub(super) fn compute(&self, valid_after: u64) -> Result<String, String> {
        let mut st = self.lock();
        if st.votes_for != valid_after {
            return Err("no votes for this period".into());
        }
        let votes: Vec<Vote> = st.votes.values().map(|v| v.0.clone()).collect();
        let sr = self.sr_take_votes(valid_after, &votes);
        let body =
            vote::compute_consensus(&votes, self.n_authorities(), sr).map_err(|e| e.to_string())?;
        let sig = vote::sign_consensus(&body, self.v3ident, &self.keys.signing)
            .map_err(|e| e.to_string())?;
        let (va, fu, vu) = self.schedule(valid_after);
        let mut p = Pending {
            valid_after: va,
            valid_until: vu,
            body: body.clone(),
            sigs: vec![sig.clone()],
        };
        let early = std::mem::take(&mut st.early_sigs);
        for d in early {
            if d.valid_after != va {
                continue;
            }
            if let Some((_, cert)) = st.certs.get(&d.signature.identity)
                && d.verify(&body, cert)
                && !p.sigs.iter().any(|s| s.identity == d.signature.identity)
            {
                p.sigs.push(d.signature);
            }
        }
        st.pending = Some(p);
        Ok(vote::build_detached(va, fu, vu, &body, &sig))
    }

    pub(super) fn publish(&self, valid_after: u64) {
        let need = self.n_authorities() / 2 + 1;
        let mut st = self.lock();
        let Some(p) = st.pending.take() else {
            warn!(
                "no consensus computed for {}; still serving the previous one",
                onionmix_crypto::timefmt::format_utc(valid_after)
            );
            return;
        };
        if p.valid_after != valid_after {
            return;
        }
        if p.sigs.len() < need {
            warn!(
                "consensus for {} has {} of {need} signatures needed; keeping the previous one",
                onionmix_crypto::timefmt::format_utc(valid_after),
                p.sigs.len()
            );
            // Late signatures may still arrive for it.
            st.pending = Some(p);
            return;
        }
        let text = vote::assemble_consensus(&p.body, &p.sigs);
        // Keep the microdescriptors the new consensus needs; drop others
        // that no current descriptor uses.
        let needed: std::collections::HashSet<[u8; 32]> = st
            .descs
            .values()
            .map(|s| s.md_digest)
            .chain(consensus_md_digests(&p.body))
            .collect();
        st.mds.retain(|d, _| needed.contains(d));
        let n = p.body.lines().filter(|l| l.starts_with("r ")).count();
        info!(
            "published the consensus for {} ({n} relays, {} signatures)",
            onionmix_crypto::timefmt::format_utc(valid_after),
            p.sigs.len()
        );
        st.current = Some(p);
        st.current_text = Some(Arc::new(text.clone()));
        drop(st);
        if let Err(e) = onionmix_fsutil::write_atomic(&self.consensus_path(), &text) {
            warn!("could not save the consensus: {e}");
        }
    }

    /// Promote a pending consensus that gathered enough signatures late.
    fn publish_late(&self) {
        let need = self.n_authorities() / 2 + 1;
        let va = {
            let st = self.lock();
            match &st.pending {
                Some(p) if p.sigs.len() >= need && now_unix() >= p.valid_after => p.valid_after,
                _ => return,
            }
        };
        self.publish(va);
    }

    pub(super) async fn voting_loop(self: Arc<Self>) {
        let i = self.cfg.voting_interval_secs;
        let vd = self.cfg.vote_delay_secs;
        let dd = self.cfg.dist_delay_secs;
        let mut voted = 0u64;
        let mut computed = 0u64;
        let mut published = 0u64;
        // The shared-random state was prepared for the next round at
        // start-up; it advances at every round boundary after that.
        let mut sr_advanced = now_unix() / i * i;
        loop {
            tokio::time::sleep(Duration::from_millis(250)).await;
            let now = now_unix();
            let next = (now / i + 1) * i;
            if now + vd + dd >= next && voted != next {
                voted = next;
                match self.make_vote(next) {
                    Ok(v) => {
                        if let Err(e) = self.accept_vote(&v) {
                            warn!("our own vote was refused: {e}");
                        }
                        self.lock().own_vote = Some(v.clone());
                        self.post_to_peers("/tor/post/vote", v).await;
                    }
                    Err(e) => warn!("cannot build our vote: {e}"),
                }
            }
            if now + dd >= next && computed != next && voted == next {
                computed = next;
                self.fetch_missing_votes().await;
                match self.compute(next) {
                    Ok(detached) => {
                        self.post_to_peers("/tor/post/consensus-signature", detached)
                            .await
                    }
                    Err(e) => warn!("no consensus for the next period: {e}"),
                }
            }
            let this = now / i * i;
            if published != this && computed == this {
                published = this;
                self.publish(this);
            }
            if sr_advanced != this {
                sr_advanced = this;
                self.sr_after_consensus(this);
            }
            self.publish_late();
        }
    }
}
