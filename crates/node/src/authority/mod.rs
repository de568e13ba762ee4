//! `onionmix authority`: a v3 directory authority (dir-spec §3).
//!
//! An authority is also a relay (like tor's): it embeds an onionmix relay
//! (non-exit) whose ORPort answers `BEGIN_DIR` from this authority's own
//! documents, and which publishes its descriptor to every authority.
//!
//! The authority
//! - accepts descriptor uploads (`POST /tor/`), verifying every signature
//!   and cross-certificate ([`onionmix_netdoc::routerdesc::verify_upload`]);
//! - tests reachability: a link handshake with each relay's ORPort that
//!   proves the relay's RSA and Ed25519 identities;
//! - assigns flags (testing-network thresholds when `testing_network`);
//! - every voting interval: votes at `valid-after - vote_delay -
//!   dist_delay` and posts its vote to the other authorities
//!   (`POST /tor/post/vote`), fetches votes it is missing at `valid-after -
//!   dist_delay`, computes the consensus, signs it and posts a detached
//!   signature (`POST /tor/post/consensus-signature`); at `valid-after` it
//!   publishes the consensus if more than half of the authorities signed;
//! - serves consensus, key certificates, microdescriptors, descriptors
//!   and votes over its DirPort and `BEGIN_DIR`, deflate-compressed when
//!   asked (`.z` or `Accept-Encoding: deflate`);
//! - keeps descriptors and the consensus on disk, so a restart serves the
//!   same network at once.

mod config;
mod descs;
mod flags;
pub mod http;
mod serve;
mod srv;
mod voting;

#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use onionmix_crypto::keys::AuthorityKeys;
use onionmix_netdoc::AuthCertificate;
use onionmix_netdoc::routerdesc::{UploadedDesc, verify_upload};
use onionmix_netdoc::vote::{self, ConsensusSignature, Vote};

use crate::admission::{Admission, AdmissionConfig, KnownAddrs};
use crate::relay::RelayCtx;
use crate::relay::exit::DirServer;

use serve::{AuthDir, serve_dirport};

pub use config::{AuthorityConfig, list_fingerprint, load_or_generate_keys};

/// Key certificate lifetime.
const CERT_LIFETIME: u64 = 365 * 86400;
/// Timeout for one peer exchange (vote, signature, fetch).
const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout for one reachability test.
const REACH_TIMEOUT: Duration = Duration::from_secs(10);

use crate::clock::now_unix;

/// A stored descriptor and what the authority derived from it.
#[derive(Debug, Clone)]
struct Stored {
    desc: UploadedDesc,
    md_digest: [u8; 32],
    policy_summary: String,
    /// Last successful reachability test.
    reachable_at: Option<Instant>,
    /// Since when every reachability test succeeded (tor's rephist
    /// uptime, for the HSDir flag).
    reachable_since: Option<Instant>,
}

/// The consensus being assembled for one `valid-after`.
#[derive(Debug, Clone)]
struct Pending {
    valid_after: u64,
    valid_until: u64,
    body: String,
    sigs: Vec<ConsensusSignature>,
}

#[derive(Default)]
struct State {
    descs: HashMap<[u8; 20], Stored>,
    /// Microdescriptors by digest (current descriptors and those of the
    /// published consensus).
    mds: HashMap<[u8; 32], String>,
    /// Votes for `votes_for` by authority identity (ours included).
    votes: BTreeMap<[u8; 20], (Vote, String)>,
    votes_for: u64,
    /// Our own vote text for `votes_for`.
    own_vote: Option<String>,
    /// Detached signatures that arrived before our consensus was computed.
    early_sigs: Vec<vote::Detached>,
    pending: Option<Pending>,
    /// The published consensus.
    current: Option<Pending>,
    current_text: Option<Arc<String>>,
    /// Key certificates by v3 identity.
    certs: BTreeMap<[u8; 20], (String, AuthCertificate)>,
}

/// A running authority.
pub struct Authority {
    cfg: AuthorityConfig,
    keys: AuthorityKeys,
    v3ident: [u8; 20],
    /// Configured authorities' v3 identities and relay fingerprints.
    peers: Vec<([u8; 20], [u8; 20], SocketAddr)>,
    state: Mutex<State>,
    relay: OnceLock<Arc<RelayCtx>>,
    /// Who may connect to the DirPort.
    dir_admission: Arc<Admission>,
    /// Addresses of the other authorities and of relays that passed a
    /// reachability test: they may use the DirPort's reserved slots.
    dir_known: KnownAddrs,
    /// Shared-random protocol state (`sr-state` in the data directory).
    sr: Mutex<onionmix_netdoc::srv::SrState>,
    /// When this authority started.
    started: Instant,
}

fn hex20(s: &str) -> Option<[u8; 20]> {
    hex::decode(s.trim()).ok()?.try_into().ok()
}

impl Authority {
    /// Create from config and keys (loads saved state).
    pub fn new(cfg: AuthorityConfig, keys: AuthorityKeys) -> Result<Arc<Self>, String> {
        let v3ident = keys.identity.public().fingerprint();
        let mut peers = Vec::new();
        for a in &cfg.authorities {
            let v3 = hex20(&a.v3ident)
                .ok_or_else(|| format!("authority {}: bad v3ident", a.nickname))?;
            let fp = hex20(&a.fingerprint)
                .ok_or_else(|| format!("authority {}: bad fingerprint", a.nickname))?;
            peers.push((v3, fp, a.dir_addr));
        }
        if !peers.iter().any(|p| p.0 == v3ident) {
            return Err(format!(
                "this authority (v3ident {}) is not in its own [[authority]] list",
                hex::encode_upper(v3ident)
            ));
        }
        let fixed = cfg
            .authorities
            .iter()
            .flat_map(|a| [a.dir_addr.ip(), a.or_addr.ip()])
            .collect();
        let dir_known = KnownAddrs::new(fixed, cfg.max_relays.saturating_mul(2));
        let dir_admission = Admission::new(AdmissionConfig::dirport(cfg.dirport_max_conns));
        let ids: Vec<[u8; 20]> = peers.iter().map(|p| p.0).collect();
        let sr = Mutex::new(srv::load(&cfg, v3ident, &ids));
        let me = Arc::new(Authority {
            sr,
            started: Instant::now(),
            cfg,
            v3ident,
            peers,
            state: Mutex::new(State::default()),
            relay: OnceLock::new(),
            keys,
            dir_admission,
            dir_known,
        });
        {
            let cert = AuthCertificate::parse(&me.keys.certificate, crate::clock::now())
                .map_err(|e| format!("our key certificate: {e}"))?;
            me.lock()
                .certs
                .insert(v3ident, (me.keys.certificate.clone(), cert));
        }
        me.load_state();
        Ok(me)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn n_authorities(&self) -> usize {
        self.peers.len()
    }

    fn is_authority_relay(&self, rsa_id: &[u8; 20]) -> bool {
        self.peers.iter().any(|p| &p.1 == rsa_id)
    }

    // ---- persistence ----

    fn descs_path(&self) -> PathBuf {
        self.cfg.data_dir.join("cached-descriptors")
    }
    fn consensus_path(&self) -> PathBuf {
        self.cfg.data_dir.join("cached-consensus-microdesc")
    }

    fn load_state(&self) {
        let now = now_unix();
        if let Ok(text) = std::fs::read_to_string(self.descs_path()) {
            let mut n = 0;
            for part in text.split("\n\u{1e}\n") {
                if part.trim().is_empty() {
                    continue;
                }
                match verify_upload(part, now) {
                    Ok(d) => {
                        if self.store_desc(d).is_ok() {
                            n += 1;
                        }
                    }
                    Err(e) => debug!("dropping a cached descriptor: {e}"),
                }
            }
            info!("loaded {n} cached descriptors");
        }
        if let Ok(text) = std::fs::read_to_string(self.consensus_path())
            && let Some((body, p)) = parse_own_consensus(&text)
            && p.valid_until > now
        {
            let mut st = self.lock();
            st.current = Some(Pending { body, ..p });
            st.current_text = Some(Arc::new(text));
            info!("serving the cached consensus until it expires or a new one is made");
        }
    }

    fn save_descs(&self) {
        let text: String = {
            let st = self.lock();
            st.descs
                .values()
                .map(|s| format!("{}\n\u{1e}\n", s.desc.text))
                .collect()
        };
        if let Err(e) = onionmix_fsutil::write_atomic(&self.descs_path(), text) {
            warn!("could not save descriptors: {e}");
        }
    }
}

fn consensus_md_digests(body: &str) -> Vec<[u8; 32]> {
    body.lines()
        .filter_map(|l| l.strip_prefix("m "))
        .filter_map(|d| {
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD_NO_PAD, d.trim())
                .ok()?
                .try_into()
                .ok()
        })
        .collect()
}

/// Split a consensus we wrote into body and signatures.
fn parse_own_consensus(text: &str) -> Option<(String, Pending)> {
    let at = text.find("\ndirectory-signature ")? + 1;
    let body = text[..at].to_string();
    let time = |kw: &str| -> Option<u64> {
        let l = body.lines().find(|l| l.starts_with(kw))?;
        onionmix_crypto::timefmt::parse_utc(l[kw.len()..].trim())
    };
    let p = Pending {
        valid_after: time("valid-after ")?,
        valid_until: time("valid-until ")?,
        body: String::new(),
        sigs: Vec::new(),
    };
    Some((body, p))
}
/// Run an authority until SIGINT/SIGTERM.
pub async fn run(cfg: AuthorityConfig) -> Result<(), String> {
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| format!("cannot create {}: {e}", cfg.data_dir.display()))?;
    let keys = load_or_generate_keys(&cfg)?;
    let relay_cfg = cfg.relay_config()?;
    let relay_keys = crate::relay::load_or_generate_keys(&cfg.data_dir)?;
    let auth = Authority::new(cfg, keys)?;
    let dir: Arc<dyn DirServer> = Arc::new(AuthDir(auth.clone()));
    let ctx = crate::relay::make_ctx(relay_cfg, relay_keys, Some(dir))?;
    let _ = auth.relay.set(ctx.clone());
    auth.sync_quic_directory();
    let listener = TcpListener::bind(auth.cfg.dir_listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", auth.cfg.dir_listen))?;
    let or_addr = crate::relay::start(ctx.clone()).await?;
    info!(
        "authority {} DirPort {} ORPort {or_addr} (v3ident {}, fingerprint {})",
        auth.cfg.nickname,
        auth.cfg.dir_listen,
        hex::encode_upper(auth.v3ident),
        hex::encode_upper(ctx.rsa_id)
    );
    tokio::spawn(serve_dirport(auth.clone(), listener));
    tokio::spawn(auth.clone().voting_loop());
    tokio::spawn(auth.clone().reachability_loop());
    tokio::spawn(crate::relay::publish::publish_loop(ctx.clone()));
    // The consensus as relays fetch it (parameters, and `ns/*` on the
    // control port), and the embedded relay's counters and links, as a
    // relay writes them.
    tokio::spawn(crate::relay::netparams::netparams_loop(ctx.clone()));
    tokio::spawn(crate::relay::write_status_forever(ctx.clone()));
    crate::relay::control::wait_for_shutdown(&ctx).await;
    info!("shutting down");
    Ok(())
}
