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

pub mod http;

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, UNIX_EPOCH};

use serde::Deserialize;
use tokio::net::TcpListener;
use tracing::{debug, info, warn};

use onionmix_crypto::keys::{AUTHORITY_IDENTITY_BITS, AuthorityKeys};
use onionmix_netdoc::AuthCertificate;
use onionmix_netdoc::routerdesc::{UploadedDesc, verify_upload};
use onionmix_netdoc::vote::{
    self, ConsensusSignature, MicrodescParts, RouterEntry, Vote, VoteHeader,
};
use onionmix_proto::exitpolicy::ExitPolicy;

use crate::admission::{Admission, AdmissionConfig, KnownAddrs};
use crate::client::config::AuthorityEntry;
use crate::relay::RelayCtx;
use crate::relay::config::RelayConfig;
use crate::relay::exit::DirServer;

/// Key certificate lifetime.
const CERT_LIFETIME: u64 = 365 * 86400;
/// Timeout for one peer exchange (vote, signature, fetch).
const PEER_TIMEOUT: Duration = Duration::from_secs(10);
/// Timeout for one reachability test.
const REACH_TIMEOUT: Duration = Duration::from_secs(10);

/// `onionmix authority` configuration (TOML; docs/authority.md).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthorityConfig {
    /// Keys and state.
    pub data_dir: PathBuf,
    /// Nickname (also the embedded relay's).
    pub nickname: String,
    /// ORPort listen address (the embedded relay).
    pub or_listen: SocketAddr,
    /// DirPort listen address (HTTP).
    pub dir_listen: SocketAddr,
    /// Advertised address (default: `or_listen`'s IP).
    #[serde(default)]
    pub address: Option<IpAddr>,
    /// Contact line in votes.
    #[serde(default = "default_contact")]
    pub contact: String,
    /// Private network: testing flag thresholds, private addresses.
    #[serde(default)]
    pub testing_network: bool,
    /// Voting interval (default 3600 s; 20 s suits test networks).
    #[serde(default = "default_interval")]
    pub voting_interval_secs: u64,
    /// Vote delay (default 300 s).
    #[serde(default = "default_delay")]
    pub vote_delay_secs: u64,
    /// Distribution delay (default 300 s).
    #[serde(default = "default_delay")]
    pub dist_delay_secs: u64,
    /// How often each relay's reachability is tested (default 60 s).
    #[serde(default = "default_reach")]
    pub reachability_interval_secs: u64,
    /// Most relays tracked.
    #[serde(default = "default_max_relays")]
    pub max_relays: usize,
    /// DirPort connections open at once (a quarter kept for other
    /// authorities and reachable relays; 8 at once per other address).
    #[serde(default = "default_dirport_conns")]
    pub dirport_max_conns: usize,
    /// Every authority of the network, this one included.
    #[serde(rename = "authority", default)]
    pub authorities: Vec<AuthorityEntry>,
    /// Consensus parameters this authority votes for.
    #[serde(default)]
    pub params: BTreeMap<String, i32>,
}

fn default_contact() -> String {
    "onionmix authority".into()
}
fn default_interval() -> u64 {
    3600
}
fn default_delay() -> u64 {
    300
}
fn default_reach() -> u64 {
    60
}
fn default_dirport_conns() -> usize {
    1024
}
fn default_max_relays() -> usize {
    8192
}

impl AuthorityConfig {
    /// Load and validate.
    pub fn load(path: &Path) -> Result<Self, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// Parse and validate.
    pub fn parse(text: &str) -> Result<Self, String> {
        let c: AuthorityConfig = toml::from_str(text).map_err(|e| e.to_string())?;
        if c.nickname.is_empty()
            || c.nickname.len() > 19
            || !c.nickname.chars().all(|ch| ch.is_ascii_alphanumeric())
        {
            return Err(format!(
                "nickname {:?}: 1 to 19 letters and digits",
                c.nickname
            ));
        }
        let i = c.voting_interval_secs;
        if !(10..=86400).contains(&i) || 86400 % i != 0 {
            return Err(format!(
                "voting_interval_secs {i}: between 10 and 86400, dividing a day"
            ));
        }
        if c.vote_delay_secs == 0
            || c.dist_delay_secs == 0
            || c.vote_delay_secs + c.dist_delay_secs >= i
        {
            return Err("vote_delay_secs and dist_delay_secs must be > 0 and together shorter than the voting interval".into());
        }
        if c.reachability_interval_secs == 0 {
            return Err("reachability_interval_secs must be > 0".into());
        }
        Ok(c)
    }

    fn address_v4(&self) -> Ipv4Addr {
        match self.address.unwrap_or(self.or_listen.ip()) {
            IpAddr::V4(a) => a,
            IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
        }
    }

    /// The embedded relay's configuration.
    pub fn relay_config(&self) -> Result<RelayConfig, String> {
        let mut s = format!(
            "data_dir = {:?}\nnickname = {:?}\nor_listen = \"{}\"\ntesting_network = {}\n",
            self.data_dir.display().to_string(),
            self.nickname,
            self.or_listen,
            self.testing_network
        );
        if let Some(a) = self.address {
            s.push_str(&format!("address = \"{a}\"\n"));
        }
        for a in &self.authorities {
            s.push_str(&format!(
                "\n[[authority]]\nnickname = {:?}\nv3ident = {:?}\nfingerprint = {:?}\ndir_addr = \"{}\"\nor_addr = \"{}\"\n",
                a.nickname, a.v3ident, a.fingerprint, a.dir_addr, a.or_addr
            ));
        }
        RelayConfig::parse(&s)
    }
}

use crate::clock::now_unix;

/// A stored descriptor and what the authority derived from it.
#[derive(Debug, Clone)]
struct Stored {
    desc: UploadedDesc,
    md_digest: [u8; 32],
    policy_summary: String,
    /// Last successful reachability test.
    reachable_at: Option<Instant>,
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
}

fn hex20(s: &str) -> Option<[u8; 20]> {
    hex::decode(s.trim()).ok()?.try_into().ok()
}

/// Load the authority keys from `<data_dir>/keys`, generating them (and
/// the certificate) on first start.
pub fn load_or_generate_keys(cfg: &AuthorityConfig) -> Result<AuthorityKeys, String> {
    let dir = cfg.data_dir.join("keys");
    if dir.join("authority_identity_key").exists() {
        let k = AuthorityKeys::load(&dir).map_err(|e| e.to_string())?;
        let now = now_unix();
        let cert = AuthCertificate::parse(&k.certificate, crate::clock::now());
        let expiring = match &cert {
            Ok(c) => {
                c.expires()
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0)
                    < now + 30 * 86400
            }
            Err(_) => true,
        };
        if expiring {
            let mut k = k;
            k.rotate_signing_key(
                &mut rand::rngs::OsRng,
                now,
                CERT_LIFETIME,
                Some(&format!("{}:{}", cfg.address_v4(), cfg.dir_listen.port())),
            )
            .map_err(|e| e.to_string())?;
            k.save(&dir).map_err(|e| e.to_string())?;
            info!("rotated the authority signing key");
            return Ok(k);
        }
        Ok(k)
    } else {
        let k = AuthorityKeys::generate(
            &mut rand::rngs::OsRng,
            AUTHORITY_IDENTITY_BITS,
            now_unix(),
            CERT_LIFETIME,
            Some(&format!("{}:{}", cfg.address_v4(), cfg.dir_listen.port())),
        )
        .map_err(|e| e.to_string())?;
        k.save(&dir).map_err(|e| e.to_string())?;
        info!("generated new authority keys");
        Ok(k)
    }
}

/// Generate (or load) keys and return `(relay fingerprint, v3ident)`.
pub fn list_fingerprint(cfg: &AuthorityConfig) -> Result<(String, String), String> {
    std::fs::create_dir_all(&cfg.data_dir)
        .map_err(|e| format!("cannot create {}: {e}", cfg.data_dir.display()))?;
    let ak = load_or_generate_keys(cfg)?;
    let rk = crate::relay::load_or_generate_keys(&cfg.data_dir)?;
    Ok((hex::encode_upper(rk.rsa_id()), ak.v3ident()))
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
        let me = Arc::new(Authority {
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

    // ---- descriptors ----

    fn store_desc(&self, d: UploadedDesc) -> Result<&'static str, String> {
        let summary = ExitPolicy::parse(&d.policy)
            .map(|p| p.summary(false).to_line_value())
            .unwrap_or_else(|_| "reject 1-65535".into());
        let (microdesc, md_digest) = vote::build_microdesc(&MicrodescParts {
            onion_key_pem: d.onion_key_pem.clone(),
            ntor_onion_key: d.ntor_onion_key,
            family: d.family.clone(),
            policy_summary: summary.clone(),
            ed_id: d.ed_id,
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
        let reachable_at = st.descs.get(&d.rsa_id).and_then(|o| {
            if o.desc.address == d.address && o.desc.or_port == d.or_port {
                o.reachable_at
            } else {
                None
            }
        });
        st.mds.insert(md_digest, microdesc);
        st.descs.insert(
            d.rsa_id,
            Stored {
                desc: d,
                md_digest,
                policy_summary: summary,
                reachable_at,
            },
        );
        Ok("Descriptor accepted")
    }

    /// Handle an uploaded descriptor; test its reachability at once.
    fn accept_upload(self: &Arc<Self>, body: &str) -> Result<&'static str, String> {
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
                )
            })
        };
        let Some((addr, ed)) = target else { return };
        let ok = if id == ctx.rsa_id {
            true
        } else {
            matches!(
                tokio::time::timeout(
                    REACH_TIMEOUT,
                    ctx.channels.get_or_connect(&ctx, id, Some(ed), addr)
                )
                .await,
                Ok(Ok(_))
            )
        };
        let mut st = self.lock();
        if let Some(s) = st.descs.get_mut(&id) {
            if ok {
                s.reachable_at = Some(Instant::now());
                self.dir_known
                    .learn(IpAddr::V4(s.desc.address), Instant::now());
            } else {
                debug!(
                    "reachability test of {} failed",
                    hex::encode_upper(&id[..4])
                );
            }
        }
    }

    async fn reachability_loop(self: Arc<Self>) {
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

    // ---- voting ----

    fn running_window(&self) -> Duration {
        Duration::from_secs(self.cfg.reachability_interval_secs * 3 + 10)
    }

    fn flags_for(&self, s: &Stored) -> std::collections::BTreeSet<String> {
        let mut f = std::collections::BTreeSet::new();
        let running = s
            .reachable_at
            .is_some_and(|t| t.elapsed() <= self.running_window());
        let testing = self.cfg.testing_network;
        let bw = s.desc.bandwidth.0.min(s.desc.bandwidth.2);
        let fast = testing || bw >= 100 * 1000;
        let stable = testing || s.desc.uptime >= 5 * 86400;
        let v2dir = s.desc.tunnelled_dir_server;
        let summary = onionmix_proto::exitpolicy::PortSummary::parse(&s.policy_summary).ok();
        let exit = summary.is_some_and(|p| p.allows(80) && p.allows(443));
        let mut add = |c: bool, n: &str| {
            if c {
                f.insert(n.to_string());
            }
        };
        add(running, "Running");
        add(true, "Valid");
        add(fast, "Fast");
        add(stable, "Stable");
        add(v2dir, "V2Dir");
        add(fast && stable && v2dir, "Guard");
        add(exit, "Exit");
        // tor also requires Fast and the `hidden-service-dir` line.
        add(
            v2dir && stable && fast && s.desc.hidden_service_dir,
            "HSDir",
        );
        add(self.is_authority_relay(&s.desc.rsa_id), "Authority");
        f
    }

    fn schedule(&self, valid_after: u64) -> (u64, u64, u64) {
        let i = self.cfg.voting_interval_secs;
        (valid_after, valid_after + i, valid_after + 3 * i)
    }

    fn make_vote(&self, valid_after: u64) -> Result<String, String> {
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
        };
        vote::build_vote(&h, &relays, &self.keys.certificate, &self.keys.signing)
            .map_err(|e| e.to_string())
    }

    /// Take a vote (ours or a peer's) for the period being voted on.
    fn accept_vote(&self, text: &str) -> Result<&'static str, String> {
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

    fn accept_signature(&self, text: &str) -> Result<&'static str, String> {
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

    fn compute(&self, valid_after: u64) -> Result<String, String> {
        let mut st = self.lock();
        if st.votes_for != valid_after {
            return Err("no votes for this period".into());
        }
        let votes: Vec<Vote> = st.votes.values().map(|v| v.0.clone()).collect();
        let body =
            vote::compute_consensus(&votes, self.n_authorities()).map_err(|e| e.to_string())?;
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

    fn publish(&self, valid_after: u64) {
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

    async fn voting_loop(self: Arc<Self>) {
        let i = self.cfg.voting_interval_secs;
        let vd = self.cfg.vote_delay_secs;
        let dd = self.cfg.dist_delay_secs;
        let mut voted = 0u64;
        let mut computed = 0u64;
        let mut published = 0u64;
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
            self.publish_late();
        }
    }

    // ---- serving ----

    /// Answer one GET path (without compression suffix); `None` is 404.
    fn get(&self, path: &str) -> Option<String> {
        let st = self.lock();
        if path == "/tor/status-vote/current/consensus-microdesc"
            || path.starts_with("/tor/status-vote/current/consensus-microdesc/")
        {
            return st.current_text.as_ref().map(|t| t.as_str().to_string());
        }
        if path == "/tor/status-vote/next/authority" || path == "/tor/status-vote/current/authority"
        {
            return st.own_vote.clone();
        }
        if path == "/tor/keys/all" || path == "/tor/keys/authority" {
            let all: String = if path.ends_with("all") {
                st.certs.values().map(|c| c.0.clone()).collect()
            } else {
                st.certs.get(&self.v3ident).map(|c| c.0.clone())?
            };
            return Some(all);
        }
        if let Some(list) = path.strip_prefix("/tor/keys/fp/") {
            let out: String = list
                .split('+')
                .filter_map(hex20)
                .filter_map(|id| st.certs.get(&id).map(|c| c.0.clone()))
                .collect();
            return (!out.is_empty()).then_some(out);
        }
        if let Some(list) = path.strip_prefix("/tor/keys/fp-sk/") {
            let out: String = list
                .split('+')
                .filter_map(|pair| {
                    let (id, sk) = pair.split_once('-')?;
                    let (id, sk) = (hex20(id)?, hex20(sk)?);
                    let c = st.certs.get(&id)?;
                    (c.1.signing_key_fingerprint() == sk).then(|| c.0.clone())
                })
                .collect();
            return (!out.is_empty()).then_some(out);
        }
        if let Some(list) = path.strip_prefix("/tor/micro/d/") {
            let out: String = list
                .split('-')
                .take(1024)
                .filter_map(|d| {
                    let v = base64::Engine::decode(
                        &base64::engine::general_purpose::STANDARD_NO_PAD,
                        d.trim_end_matches('='),
                    )
                    .ok()?;
                    let d: [u8; 32] = v.try_into().ok()?;
                    st.mds.get(&d).cloned()
                })
                .collect();
            return (!out.is_empty()).then_some(out);
        }
        if path == "/tor/server/all" {
            return Some(st.descs.values().map(|s| s.desc.text.clone()).collect());
        }
        if path == "/tor/server/authority" {
            let ctx = self.relay.get()?;
            return st.descs.get(&ctx.rsa_id).map(|s| s.desc.text.clone());
        }
        if let Some(list) = path.strip_prefix("/tor/server/fp/") {
            let out: String = list
                .split('+')
                .filter_map(hex20)
                .filter_map(|id| st.descs.get(&id).map(|s| s.desc.text.clone()))
                .collect();
            return (!out.is_empty()).then_some(out);
        }
        if let Some(list) = path.strip_prefix("/tor/server/d/") {
            let want: Vec<[u8; 20]> = list.split('+').filter_map(hex20).collect();
            let out: String = st
                .descs
                .values()
                .filter(|s| want.contains(&s.desc.digest))
                .map(|s| s.desc.text.clone())
                .collect();
            return (!out.is_empty()).then_some(out);
        }
        None
    }

    /// Answer one raw HTTP request (DirPort or BEGIN_DIR).
    pub fn answer(self: &Arc<Self>, req: &http::Request) -> Vec<u8> {
        match req.method() {
            "GET" => {
                let (path, z) = match req.path().strip_suffix(".z") {
                    Some(p) => (p, true),
                    None => (req.path(), false),
                };
                let deflate = z
                    || req
                        .header("accept-encoding")
                        .is_some_and(|v| v.split(',').any(|e| e.trim() == "deflate"));
                match self.get(path) {
                    Some(body) => http::response(200, "OK", body.as_bytes(), deflate),
                    None => http::response(404, "Not found", b"", false),
                }
            }
            "POST" => {
                let body = String::from_utf8_lossy(&req.body);
                let r = match req.path() {
                    "/tor/" => self.accept_upload(&body),
                    "/tor/post/vote" => self.accept_vote(&body),
                    "/tor/post/consensus-signature" => self.accept_signature(&body),
                    _ => Err("unknown POST target".into()),
                };
                match r {
                    Ok(msg) => http::response(200, msg, b"", false),
                    Err(e) => {
                        info!("{} refused: {e}", req.path());
                        http::response(400, &e, b"", false)
                    }
                }
            }
            _ => http::response(405, "Method not allowed", b"", false),
        }
    }
}

fn vote_max_age() -> u64 {
    onionmix_netdoc::routerdesc::MAX_UPLOAD_AGE
}

fn is_public(a: Ipv4Addr) -> bool {
    !(a.is_private() || a.is_loopback() || a.is_link_local() || a.is_unspecified())
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

struct AuthDir(Arc<Authority>);

impl DirServer for AuthDir {
    fn handle_request<'a>(
        &'a self,
        req: &'a [u8],
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Vec<u8>> + Send + 'a>> {
        Box::pin(async move {
            match http::parse_request(req) {
                // GETs and descriptor uploads (tor relays upload over
                // BEGIN_DIR); votes and signatures come to the DirPort.
                Ok(Some(r)) if r.method() == "GET" || r.path() == "/tor/" => self.0.answer(&r),
                Ok(Some(_)) => http::response(400, "POST it to the DirPort", b"", false),
                Ok(None) => http::response(400, "incomplete request", b"", false),
                Err(e) => http::response(400, &e.to_string(), b"", false),
            }
        })
    }
}

async fn serve_dirport(auth: Arc<Authority>, listener: TcpListener) {
    loop {
        let (sock, peer) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                warn!("DirPort accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let known = auth.dir_known.contains(peer.ip());
        let permit = match auth.dir_admission.admit(peer.ip(), known, Instant::now()) {
            Ok(p) => p,
            Err(why) => {
                debug!("refused a DirPort connection: {why}");
                continue;
            }
        };
        let auth = auth.clone();
        tokio::spawn(async move {
            let _permit = permit;
            http::serve_one(sock, |req| auth.answer(&req)).await;
        });
    }
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
    crate::client::wait_for_shutdown().await;
    info!("shutting down");
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use onionmix_crypto::keys::RelayKeys;
    use onionmix_netdoc::routerdesc::{DescriptorParams, build};
    use onionmix_netdoc::{AuthorityConfig as ClientAuth, TimeTolerance, UnverifiedConsensus};

    fn config(dir: &Path, v3: &str) -> AuthorityConfig {
        AuthorityConfig::parse(&format!(
            "data_dir = {:?}\nnickname = \"a0\"\nor_listen = \"127.0.0.1:1\"\ndir_listen = \"127.0.0.1:2\"\n\
             testing_network = true\nvoting_interval_secs = 20\nvote_delay_secs = 4\ndist_delay_secs = 4\n\
             [[authority]]\nnickname = \"a0\"\nv3ident = \"{v3}\"\nfingerprint = \"{}\"\n\
             dir_addr = \"127.0.0.1:2\"\nor_addr = \"127.0.0.1:1\"\n",
            dir.display().to_string(),
            "AB".repeat(20)
        ))
        .unwrap()
    }

    fn descriptor(k: &RelayKeys) -> String {
        build(
            k,
            &DescriptorParams {
                nickname: "r1".into(),
                address: Ipv4Addr::LOCALHOST,
                or_port: 5001,
                dir_port: 0,
                platform: "onionmix 0.1.0 on Linux".into(),
                protocols: "Link=4-5 Relay=2-4".into(),
                published: now_unix() - 10,
                uptime: 5,
                bandwidth: (1 << 20, 1 << 20, 1 << 20),
                exit_policy: vec![
                    "accept *:80".into(),
                    "accept *:443".into(),
                    "reject *:*".into(),
                ],
                family: vec![],
                contact: None,
                tunnelled_dir_server: true,
                hidden_service_dir: true,
                ntor_crosscert_lifetime: 7 * 86400,
            },
        )
        .unwrap()
    }

    #[test]
    fn config_is_validated() {
        let tmp = tempfile::tempdir().unwrap();
        let good = config(tmp.path(), &"CD".repeat(20));
        assert_eq!(good.voting_interval_secs, 20);
        let base = "data_dir = \"/x\"\nor_listen = \"127.0.0.1:1\"\ndir_listen = \"127.0.0.1:2\"\n";
        for (bad, why) in [
            ("nickname = \"bad name\"\n", "nickname"),
            (
                "nickname = \"a\"\nvoting_interval_secs = 7\n",
                "voting_interval",
            ),
            (
                "nickname = \"a\"\nvoting_interval_secs = 11\n",
                "dividing a day",
            ),
            (
                "nickname = \"a\"\nvoting_interval_secs = 20\nvote_delay_secs = 10\ndist_delay_secs = 10\n",
                "shorter",
            ),
            ("nickname = \"a\"\nunknown = 1\n", "unknown"),
        ] {
            let e = AuthorityConfig::parse(&format!("{base}{bad}")).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[tokio::test]
    async fn uploads_votes_consensus_and_restart() {
        let tmp = tempfile::tempdir().unwrap();
        let keys = AuthorityKeys::generate(
            &mut rand::rngs::OsRng,
            2048,
            now_unix() - 60,
            CERT_LIFETIME,
            None,
        )
        .unwrap();
        keys.save(&tmp.path().join("keys")).unwrap();
        let cfg = config(tmp.path(), &keys.v3ident());
        let auth = Authority::new(cfg.clone(), keys.clone()).unwrap();
        // Not in its own list: refused.
        let other = config(tmp.path(), &"CD".repeat(20));
        assert!(Authority::new(other, keys.clone()).is_err());

        // Uploads: good, duplicate, tampered, garbage.
        let rk = RelayKeys::generate(&mut rand::rngs::OsRng, now_unix()).unwrap();
        let d = descriptor(&rk);
        assert_eq!(auth.accept_upload(&d), Ok("Descriptor accepted"));
        assert_eq!(auth.accept_upload(&d), Ok("Descriptor already known"));
        assert!(
            auth.accept_upload(&d.replacen("uptime 5", "uptime 6", 1))
                .is_err()
        );
        assert!(auth.accept_upload("router x").is_err());
        let fp = hex::encode_upper(rk.rsa_id());
        assert_eq!(
            auth.get(&format!("/tor/server/fp/{fp}")).as_deref(),
            Some(d.as_str())
        );
        assert!(auth.get("/tor/server/fp/00").is_none());

        // Flags once reachable (testing thresholds).
        {
            let mut st = auth.lock();
            st.descs.get_mut(&rk.rsa_id()).unwrap().reachable_at = Some(Instant::now());
            let s = st.descs.get(&rk.rsa_id()).unwrap().clone();
            drop(st);
            let f: Vec<String> = auth.flags_for(&s).into_iter().collect();
            assert_eq!(
                f,
                [
                    "Exit", "Fast", "Guard", "HSDir", "Running", "Stable", "V2Dir", "Valid"
                ]
            );
        }

        // One authority: vote, compute, publish; the consensus verifies.
        let va = (now_unix() / 20 + 1) * 20;
        let v = auth.make_vote(va).unwrap();
        auth.accept_vote(&v).unwrap();
        auth.lock().own_vote = Some(v.clone());
        assert!(auth.accept_vote(&v.replace("r1 ", "r2 ")).is_err());
        auth.compute(va).unwrap();
        auth.publish(va);
        let cons = auth
            .get("/tor/status-vote/current/consensus-microdesc")
            .unwrap();
        let cert = AuthCertificate::parse(&keys.certificate, crate::clock::now()).unwrap();
        let c = UnverifiedConsensus::parse(&cons)
            .unwrap()
            .verify(
                &[ClientAuth::new("a0", keys.identity.public().fingerprint())],
                &[cert],
                UNIX_EPOCH + Duration::from_secs(va + 1),
                TimeTolerance::default(),
            )
            .unwrap();
        assert_eq!(c.relays().len(), 1);
        let md = cons.lines().find_map(|l| l.strip_prefix("m ")).unwrap();
        assert!(
            auth.get(&format!("/tor/micro/d/{md}"))
                .unwrap()
                .contains("p accept 80,443\n")
        );
        assert!(
            auth.get("/tor/keys/all")
                .unwrap()
                .starts_with("dir-key-certificate-version 3")
        );
        let fpsk = format!(
            "/tor/keys/fp-sk/{}-{}",
            keys.v3ident(),
            keys.signing.public().fingerprint_hex()
        );
        assert!(auth.get(&fpsk).is_some());

        // A restart serves the saved consensus and descriptors.
        drop(auth);
        let again = Authority::new(cfg, keys).unwrap();
        assert_eq!(
            again
                .get("/tor/status-vote/current/consensus-microdesc")
                .as_deref(),
            Some(cons.as_str())
        );
        assert_eq!(
            again.get(&format!("/tor/server/fp/{fp}")).as_deref(),
            Some(d.as_str())
        );
    }
}
