//! Descriptor publishing: build and sign our router descriptor and upload
//! it (HTTP POST /tor/) to every configured authority, at start and then
//! periodically; the authorities' answers are logged.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tracing::{info, warn};

use onionmix_netdoc::routerdesc::{self, DescriptorParams};

use super::RelayCtx;

/// What the descriptor's `proto` line says, true to what this relay
/// serves: congestion control (FlowCtrl=2, proposal 324) as an exit;
/// introduction point with and without proposal 305's DoS extension,
/// rendezvous point; `Conflux=1` (proposal 329) while conflux is on;
/// `Datagram=1` only for an exit that carries UDP streams
/// (docs/udp-over-tor.md), so no client ever sends CONNECT_UDP elsewhere;
/// and `DirCache=2` and `HSDir=2` for a relay that answers `BEGIN_DIR`
/// (clients, Arti's among them, take only directory caches with
/// `DirCache=2` as guards; onion-service descriptors are published and
/// fetched over `BEGIN_DIR`, so only a directory cache is an HSDir).
pub fn protocols(dir_cache: bool, conflux: bool, datagram: bool) -> String {
    let mut parts = Vec::new();
    if conflux {
        parts.push("Conflux=1");
    }
    parts.push("Cons=1-2");
    if datagram {
        parts.push("Datagram=1");
    }
    parts.push("Desc=1-2");
    if dir_cache {
        parts.push("DirCache=2");
    }
    parts.push("FlowCtrl=1-2");
    if dir_cache {
        parts.push("HSDir=2");
    }
    parts.extend([
        "HSIntro=4-5",
        "HSRend=2",
        "Link=4-5",
        "LinkAuth=3",
        "Microdesc=1-2",
        "Relay=2-4",
    ]);
    parts.join(" ")
}
/// The `platform` line.
pub const PLATFORM: &str = concat!("onionmix ", env!("CARGO_PKG_VERSION"), " on Linux");
/// Time allowed for one upload.
pub const UPLOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Lifetime of the ntor cross-certificate in our descriptors.
pub const NTOR_CROSSCERT_LIFETIME: u64 = 14 * 24 * 3600;

use crate::clock::now_unix;

/// Build our current descriptor.
pub fn descriptor(ctx: &RelayCtx) -> Result<String, String> {
    let keys = ctx.keys();
    let address = match ctx.cfg.advertised_ip() {
        std::net::IpAddr::V4(a) => a,
        std::net::IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
    };
    let family = ctx
        .cfg
        .family
        .iter()
        .map(|f| format!("${}", f.trim_start_matches('$').to_ascii_uppercase()))
        .collect();
    let p = DescriptorParams {
        nickname: ctx.cfg.nickname.clone(),
        address,
        or_port: ctx.or_port(),
        dir_port: 0,
        platform: PLATFORM.into(),
        protocols: protocols(
            ctx.dir.is_some(),
            ctx.cfg.conflux,
            ctx.cfg.exit && ctx.cfg.exit_udp,
        ),
        published: now_unix(),
        uptime: ctx.started.elapsed().as_secs(),
        bandwidth: (
            ctx.cfg.bandwidth,
            ctx.cfg.bandwidth,
            ctx.observed_bandwidth(),
        ),
        exit_policy: ctx
            .exit_policy
            .rules
            .iter()
            .map(|r| r.to_string())
            .collect(),
        family,
        contact: ctx.cfg.contact.clone(),
        tunnelled_dir_server: ctx.dir.is_some(),
        hidden_service_dir: ctx.dir.is_some(),
        ntor_crosscert_lifetime: NTOR_CROSSCERT_LIFETIME,
        quic_port: ctx.quic.port(),
    };
    routerdesc::build(&keys, &p).map_err(|e| e.to_string())
}

/// The outcome of one upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadResult {
    /// Authority nickname.
    pub authority: String,
    /// HTTP status (0: no answer).
    pub status: u16,
    /// Reason phrase or error.
    pub reason: String,
}

async fn upload_one(addr: std::net::SocketAddr, desc: &str) -> Result<(u16, String), String> {
    let fut = async {
        let mut s = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
        s.write_all(&routerdesc::upload_request(&addr.to_string(), desc))
            .await
            .map_err(|e| e.to_string())?;
        let mut buf = Vec::new();
        let head = onionmix_http::io::read_response_head(
            &mut s,
            &mut buf,
            &onionmix_http::Limits::DEFAULT,
            UPLOAD_TIMEOUT,
        )
        .await
        .map_err(|e| format!("bad HTTP answer: {e}"))?;
        Ok((head.status, head.reason))
    };
    tokio::time::timeout(UPLOAD_TIMEOUT, fut)
        .await
        .map_err(|_| "upload timed out".to_string())?
}

/// Build the descriptor and upload it to every authority once.
pub async fn publish_once(ctx: &RelayCtx) -> Vec<UploadResult> {
    let desc = match descriptor(ctx) {
        Ok(d) => d,
        Err(e) => {
            warn!("cannot build our descriptor: {e}");
            return Vec::new();
        }
    };
    // Served at /tor/server/authority (dir-spec: the server's own
    // descriptor).
    if let Some(dir) = &ctx.dir {
        dir.set_own_descriptor(&desc);
    }
    let mut out = Vec::new();
    for a in &ctx.cfg.authorities {
        let r = match upload_one(a.dir_addr, &desc).await {
            Ok((code, reason)) => {
                if code == 200 {
                    info!("descriptor accepted by authority {}", a.nickname);
                    ctx.control.descriptor_accepted_by(a.dir_addr);
                } else {
                    warn!(
                        "authority {} rejected our descriptor: {code} {reason}",
                        a.nickname
                    );
                }
                UploadResult {
                    authority: a.nickname.clone(),
                    status: code,
                    reason,
                }
            }
            Err(e) => {
                warn!("uploading our descriptor to {} failed: {e}", a.nickname);
                UploadResult {
                    authority: a.nickname.clone(),
                    status: 0,
                    reason: e,
                }
            }
        };
        out.push(r);
    }
    out
}

/// Publish at start and then periodically (every minute in testing
/// networks until the relay has been up an hour, like tor's fast early
/// schedule; otherwise every `publish_interval_secs`).
pub async fn publish_loop(ctx: Arc<RelayCtx>) {
    if ctx.cfg.authorities.is_empty() {
        return;
    }
    loop {
        let results = publish_once(&ctx).await;
        let accepted = results.iter().filter(|r| r.status == 200).count();
        // An authority that did not take the descriptor (not up yet, say)
        // is retried soon: a relay missing from a majority of the votes is
        // missing from the consensus.
        let every = if ctx.cfg.testing_network {
            if accepted < results.len() {
                Duration::from_secs(5)
            } else {
                Duration::from_secs(60)
            }
        } else if accepted == 0 {
            Duration::from_secs(60)
        } else {
            Duration::from_secs(ctx.cfg.publish_interval_secs.max(60))
        };
        wait_for_next_publish(now_unix(), every).await;
    }
}

/// Wait `every` from a publication at wall time `published`, or less if the
/// wall clock says the descriptor has aged that much (the clock jumped
/// forward, or back before the publication): authorities judge a
/// descriptor's age by its `published` line, not by our monotonic timers.
async fn wait_for_next_publish(published: u64, every: Duration) {
    let deadline = tokio::time::Instant::now() + every;
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return;
        }
        tokio::time::sleep(left.min(crate::clock::WALL_CLOCK_RECHECK)).await;
        let w = now_unix();
        if w >= published.saturating_add(every.as_secs()) || w.saturating_add(60) < published {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onionmix_netdoc::types::Protocols;

    #[test]
    fn proto_line_meets_what_authorities_require_and_recommend() {
        let lines = onionmix_netdoc::vote::default_protocol_lines();
        let ours: Protocols = protocols(true, true, false).parse().unwrap();
        for line in [&lines[1], &lines[3]] {
            let want: Protocols = line.parse().unwrap();
            assert!(ours.missing_from(&want).is_empty(), "{line}");
        }
        // Without a directory cache the relay does not claim one.
        let no_cache: Protocols = protocols(false, true, false).parse().unwrap();
        let want: Protocols = lines[3].parse().unwrap();
        assert_eq!(
            no_cache.missing_from(&want),
            vec![("DirCache".to_string(), 2), ("HSDir".to_string(), 2)]
        );
        // Conflux=1 exactly while conflux is on (stock tor lists it first).
        assert_eq!(
            protocols(true, true, false),
            "Conflux=1 Cons=1-2 Desc=1-2 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4-5 HSRend=2 Link=4-5 LinkAuth=3 Microdesc=1-2 Relay=2-4"
        );
        let off: Protocols = protocols(true, false, false).parse().unwrap();
        assert_eq!(off.missing_from(&ours), vec![("Conflux".to_string(), 1)]);
        // A UDP exit says so, in order.
        let udp = protocols(false, false, true);
        assert!(udp.starts_with("Cons=1-2 Datagram=1 Desc=1-2"), "{udp}");
        let p: Protocols = udp.parse().unwrap();
        assert!(p.supports("Datagram", 1));
        assert!(!protocols(true, true, false).contains("Datagram"));
    }
}
