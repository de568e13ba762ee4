//! The relay's view of the consensus parameters. An exit answers a
//! client's congestion-control request according to `cc_alg` and
//! `cc_sendme_inc` as its consensus says (proposal 324 §10.3), and runs
//! Vegas and XON/XOFF with the consensus's `cc_*` values. Relays here
//! keep no directory of their own, so this fetches the microdesc
//! consensus from an authority's DirPort, checks its signatures like a
//! client does, and keeps its `params` line (and the consensus itself for
//! the control port's `ns/*`). Until the first fetch succeeds, tor's
//! defaults apply (congestion control on).
//!
//! A relay with QUIC links also fetches the microdescriptors the
//! consensus lists and keeps which relays advertise QUIC
//! (`onionmix-quic`), so it picks QUIC for them when it extends a circuit
//! that carries no hint (a stock client's). It fetches again early (at
//! most every [`MIN_FETCH_GAP`]) when an extension meets a relay it does
//! not list.

use std::sync::Arc;
use std::time::Duration;

use rand::seq::SliceRandom;
use tracing::{debug, info};

use onionmix_netdoc::{
    AuthCertificate, AuthorityConfig, Consensus, DirRequest, NetDir, TimeTolerance,
    UnverifiedConsensus, merge_certificates, parse_microdescs,
};
use onionmix_proto::cc::CcParams;
use onionmix_proto::conflux::ConfluxParams;
use onionmix_proto::dos_cc::DosCcParams;
use onionmix_proto::dos_stream::DosStreamParams;
use onionmix_proto::queue_limits::QueueLimits;

use super::RelayCtx;
use crate::client::config::AuthorityEntry;
use crate::client::dir::DirMgr;

/// Most authority key certificates kept.
const MAX_CERTS: usize = 64;
/// Fetches asked for by extensions are at least this far apart.
pub const MIN_FETCH_GAP: Duration = Duration::from_secs(5);

/// The authorities as the directory code wants them.
pub fn authority_configs(entries: &[AuthorityEntry]) -> Vec<AuthorityConfig> {
    entries
        .iter()
        .filter_map(|a| {
            let v3: [u8; 20] = hex::decode(&a.v3ident).ok()?.try_into().ok()?;
            let mut ac = AuthorityConfig::new(a.nickname.clone(), v3);
            ac.dir_addr = Some(a.dir_addr);
            ac.or_addr = Some(a.or_addr);
            ac.rsa_id = hex::decode(&a.fingerprint)
                .ok()
                .and_then(|v| v.try_into().ok());
            Some(ac)
        })
        .collect()
}

async fn fetch_any(auths: &[AuthorityConfig], req: &DirRequest) -> Result<String, String> {
    let mut addrs: Vec<_> = auths.iter().filter_map(|a| a.dir_addr).collect();
    addrs.shuffle(&mut rand::thread_rng());
    let mut last = "no authority DirPorts configured".to_string();
    for a in addrs {
        match DirMgr::fetch_dirport(a, req).await {
            Ok(resp) => match resp.body_text() {
                Ok(t) => return Ok(t.to_string()),
                Err(e) => last = e.to_string(),
            },
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Fetch and verify the current microdesc consensus.
pub async fn fetch_consensus(
    auths: &[AuthorityConfig],
    certs: &mut Vec<AuthCertificate>,
) -> Result<Consensus, String> {
    let now = crate::clock::now();
    let text = fetch_any(auths, &DirRequest::microdesc_consensus()).await?;
    let unverified = UnverifiedConsensus::parse(&text).map_err(|e| e.to_string())?;
    let missing = unverified.missing_certificates(auths, certs, now);
    if !missing.is_empty() {
        let req = DirRequest::authority_certs(&missing).map_err(|e| e.to_string())?;
        let text = fetch_any(auths, &req).await?;
        let fetched: Vec<AuthCertificate> = AuthCertificate::parse_all(&text, now)
            .into_iter()
            .filter_map(Result::ok)
            .collect();
        merge_certificates(certs, fetched, auths, now, MAX_CERTS);
    }
    unverified
        .verify(auths, certs, now, TimeTolerance::default())
        .map_err(|e| format!("consensus refused: {e}"))
}

/// Bring `nd` to `consensus`, fetch the microdescriptors it lacks, and
/// hand `ctx` every listed relay's QUIC address. True when every listed
/// relay's microdescriptor is held.
async fn update_quic_directory(
    ctx: &RelayCtx,
    auths: &[AuthorityConfig],
    nd: &mut Option<NetDir>,
    consensus: Consensus,
) -> bool {
    let mut dir = match nd.take() {
        Some(old) => old.with_new_consensus(consensus),
        None => NetDir::new(consensus),
    };
    for req in DirRequest::microdesc_batches(&dir.missing_microdescs()) {
        match fetch_any(auths, &req).await {
            Ok(text) => {
                dir.add_microdescs(parse_microdescs(&text).microdescs);
            }
            Err(e) => debug!("fetching microdescriptors failed: {e}"),
        }
    }
    // Every relay the consensus lists, at its address; those whose
    // microdescriptor we hold are described (QUIC or not). One listed
    // without it (not fetched yet) is pending, not "no QUIC", so an
    // extension towards it waits for the directory loop instead of taking
    // TLS for good on a link that then stays open.
    let entries: Vec<super::quic::DirRelay> = dir
        .listed()
        .iter()
        .map(|c| {
            let described = dir.relay_by_rsa_id(&c.rsa_id);
            super::quic::DirRelay {
                id: c.rsa_id,
                ip: (*c.ipv4.ip()).into(),
                described: described.is_some(),
                quic_port: described.and_then(|r| r.quic_port),
            }
        })
        .collect();
    ctx.quic.set_directory(entries);
    let complete = dir.missing_microdescs().is_empty();
    *nd = Some(dir);
    complete
}

/// Keep `ctx`'s consensus parameters current.
pub async fn netparams_loop(ctx: Arc<RelayCtx>) {
    let auths = authority_configs(&ctx.cfg.authorities);
    if auths.is_empty() {
        return;
    }
    let (retry, refresh) = if ctx.cfg.testing_network {
        (Duration::from_secs(5), Duration::from_secs(120))
    } else {
        (Duration::from_secs(60), Duration::from_secs(1800))
    };
    let quic = ctx.quic.endpoint().is_some();
    let mut certs = Vec::new();
    let mut nd: Option<NetDir> = None;
    let mut first = true;
    loop {
        let started = tokio::time::Instant::now();
        let wait = match fetch_consensus(&auths, &mut certs).await {
            Ok(consensus) => {
                let cc = CcParams::from_consensus(consensus.params());
                ctx.set_cfx_params(ConfluxParams::from_consensus(consensus.params()));
                ctx.set_queue_limits(QueueLimits::from_consensus(consensus.params()));
                ctx.set_dos_cc_params(DosCcParams::from_consensus(consensus.params()));
                ctx.set_dos_stream_params(DosStreamParams::from_consensus(consensus.params()));
                let complete = if quic {
                    let complete = update_quic_directory(&ctx, &auths, &mut nd, consensus).await;
                    if let Some(d) = &nd {
                        ctx.control.set_netdir(d.clone());
                    }
                    complete
                } else {
                    ctx.control.set_netdir(NetDir::new(consensus));
                    true
                };
                if first {
                    info!(
                        "consensus parameters: congestion control {} (sendme_inc {})",
                        if cc.enabled() { "on" } else { "off" },
                        cc.sendme_inc
                    );
                    first = false;
                }
                ctx.set_cc_params(cc);
                if complete { refresh } else { retry }
            }
            Err(e) => {
                debug!("fetching the consensus parameters failed: {e}");
                retry
            }
        };
        if quic {
            // Early when an extension met a relay we do not list, but not
            // more often than MIN_FETCH_GAP.
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = ctx.quic.directory_wanted() => {
                    tokio::time::sleep_until(started + MIN_FETCH_GAP).await;
                }
            }
        } else {
            tokio::time::sleep(wait).await;
        }
    }
}
