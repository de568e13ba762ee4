//! Descriptor uploads and reachability tests.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{debug, info};

use onionmix_netdoc::routerdesc::{UploadedDesc, verify_upload};
use onionmix_netdoc::vote::{self, MicrodescParts};
use onionmix_proto::exitpolicy::ExitPolicy;

use super::{Authority, REACH_TIMEOUT, Stored};
use crate::clock::now_unix;

impl Authority {
    pub(super) fn store_desc(&self, d: UploadedDesc) -> Result<&'static str, String> {
        let summary = ExitPolicy::parse(&d.policy)
            .map(|p| p.summary(false).to_line_value())
            .unwrap_or_else(|_| "reject 1-65535".into());
        let (microdesc, md_digest) = vote::build_microdesc(&MicrodescParts {
            onion_key_pem: d.onion_key_pem.clone(),
            ntor_onion_key: d.ntor_onion_key,
            family: d.family.clone(),
            policy_summary: summary.clone(),
            ed_id: d.ed_id,
            quic_port: d.quic_port,
        });
        let mut st = self.lock();
        if let Some(old) = st.descs.get(&d.rsa_id) {
            if old.desc.published > d.published {
                return Err("an older descriptor than the one we have".into());
            }
            if old.desc.ed_id != d.ed_id {
                return Err("Ed25519 identity differs from this relay's earlier descriptor".into());
            }
            if old.desc.digest == d.digest {
                return Ok("Descriptor already known");
            }
        } else if st.descs.len() >= self.cfg.max_relays {
            return Err("too many relays".into());
        }
        let (reachable_at, reachable_since) = st
            .descs
            .get(&d.rsa_id)
            .filter(|o| o.desc.address == d.address && o.desc.or_port == d.or_port)
            .map_or((None, None), |o| (o.reachable_at, o.reachable_since));
        st.mds.insert(md_digest, microdesc);
        self.note_quic(&d);
        st.descs.insert(
            d.rsa_id,
            Stored {
                desc: d,
                md_digest,
                policy_summary: summary,
                reachable_at,
                reachable_since,
            },
        );
        Ok("Descriptor accepted")
    }

    /// Tell the embedded relay whether the relay of `d` takes QUIC links
    /// (its `onionmix-quic` line), so it picks QUIC when it extends to it.
    fn note_quic(&self, d: &UploadedDesc) {
        if let Some(ctx) = self.relay.get() {
            ctx.quic.note_directory(crate::relay::quic::DirRelay {
                id: d.rsa_id,
                ip: IpAddr::V4(d.address),
                described: true,
                quic_port: d.quic_port,
            });
        }
    }

    /// [`Self::note_quic`] for every stored descriptor (once the embedded
    /// relay exists).
    pub(super) fn sync_quic_directory(&self) {
        let st = self.lock();
        for s in st.descs.values() {
            self.note_quic(&s.desc);
        }
    }

    /// Handle an uploaded descriptor; test its reachability at once.
    pub(super) fn accept_upload(self: &Arc<Self>, body: &str) -> Result<&'static str, String> {
        let d = verify_upload(body, now_unix())?;
        if !self.cfg.testing_network && !is_public(d.address) {
            return Err("descriptor address is not public".into());
        }
        let id = d.rsa_id;
        let msg = self.store_desc(d)?;
        info!("accepted a descriptor for {}", hex::encode_upper(&id[..4]));
        self.save_descs();
        let me = self.clone();
        tokio::spawn(async move { me.test_reachability(id).await });
        Ok(msg)
    }

    async fn test_reachability(self: Arc<Self>, id: [u8; 20]) {
        let Some(ctx) = self.relay.get().cloned() else {
            return;
        };
        let target = {
            let st = self.lock();
            st.descs.get(&id).map(|s| {
                (
                    SocketAddr::new(IpAddr::V4(s.desc.address), s.desc.or_port),
                    s.desc.ed_id,
                    s.desc
                        .quic_port
                        .map(|p| SocketAddr::new(IpAddr::V4(s.desc.address), p)),
                )
            })
        };
        let Some((addr, ed, quic)) = target else {
            return;
        };
        let ok = if id == ctx.rsa_id {
            true
        } else {
            matches!(
                tokio::time::timeout(
                    REACH_TIMEOUT,
                    ctx.channels.get_or_connect(&ctx, id, Some(ed), addr, quic)
                )
                .await,
                Ok(Ok(_))
            )
        };
        let mut st = self.lock();
        if let Some(s) = st.descs.get_mut(&id) {
            if ok {
                s.reachable_at = Some(Instant::now());
                s.reachable_since.get_or_insert_with(Instant::now);
                self.dir_known
                    .learn(IpAddr::V4(s.desc.address), Instant::now());
            } else {
                s.reachable_since = None;
                debug!(
                    "reachability test of {} failed",
                    hex::encode_upper(&id[..4])
                );
            }
        }
    }

    pub(super) async fn reachability_loop(self: Arc<Self>) {
        let every = Duration::from_secs(self.cfg.reachability_interval_secs);
        loop {
            tokio::time::sleep(every).await;
            let ids: Vec<[u8; 20]> = self.lock().descs.keys().copied().collect();
            let now = now_unix();
            // Forget descriptors older than tor's 48 hours.
            {
                let mut st = self.lock();
                st.descs
                    .retain(|_, s| s.desc.published + vote_max_age() > now);
            }
            for id in ids {
                let me = self.clone();
                tokio::spawn(async move { me.test_reachability(id).await });
            }
        }
    }
}

fn vote_max_age() -> u64 {
    onionmix_netdoc::routerdesc::MAX_UPLOAD_AGE
}

fn is_public(a: Ipv4Addr) -> bool {
    !onionmix_proto::netaddr::is_internal_v4(a)
}
