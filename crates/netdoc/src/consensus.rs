//! The microdescriptor-flavoured consensus (dir-spec §3.4.1): parse,
//! verify against configured authorities, and expose as onionmix types.
//!
//! Parsing is done by Arti's `tor-netdoc` (its `MdConsensus` parser).  The
//! signature check is done here rather than with `tor-netdoc`'s
//! `check_signature`, because we need typed outcomes (how many good
//! signatures, which certificates are missing) and because we want the
//! trust decision tied to *our* authority list: a signature counts only if
//! it names a configured authority's `v3ident`, a certificate for exactly
//! that (identity, signing key) pair was verified and is unexpired at `now`,
//! and the RSA signature over the document digest that `tor-netdoc`
//! computed verifies with that certificate's signing key.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{SocketAddr, SocketAddrV4, SocketAddrV6};
use std::time::{Duration, SystemTime};

use rand::Rng;
use tor_checkable::Timebound;
use tor_netdoc::doc::netstatus::{DirectorySignatureHashAlgo, RelayWeight};
use tor_netdoc::types::KeywordOrString;
use tor_netdoc::types::relay_flags::RelayFlag;

use crate::authority::{AuthCertificate, AuthorityConfig};
use crate::types::{Protocols, RelayFlags};
use crate::{MdDigest, RsaId};

/// Largest consensus text accepted.
pub const MAX_CONSENSUS_LEN: usize = 16 * 1024 * 1024;
/// Most relays accepted in one consensus.
pub const MAX_CONSENSUS_RELAYS: usize = 65_536;
/// tor's `REASONABLY_LIVE_TIME`: a consensus up to a day past its
/// valid-until (or a day before its valid-after, for clock skew) is still
/// usable.
pub const REASONABLY_LIVE_TIME: Duration = Duration::from_secs(24 * 60 * 60);

/// Errors from parsing or verifying a consensus.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConsensusError {
    /// The document could not be parsed.
    #[error("malformed consensus: {0}")]
    Malformed(String),
    /// `now` is past `valid-until` plus the tolerance.
    #[error("consensus expired: valid until {valid_until:?}, now {now:?}")]
    Expired {
        /// The consensus `valid-until`.
        valid_until: SystemTime,
        /// The time checked.
        now: SystemTime,
    },
    /// `now` is before `valid-after` minus the tolerance.
    #[error("consensus not yet valid: valid after {valid_after:?}, now {now:?}")]
    NotYetValid {
        /// The consensus `valid-after`.
        valid_after: SystemTime,
        /// The time checked.
        now: SystemTime,
    },
    /// Fewer than a strict majority of configured authorities produced a
    /// valid signature.
    #[error("consensus has {good} valid authority signatures, needs {needed}")]
    InsufficientSignatures {
        /// Distinct configured authorities with a verified signature.
        good: usize,
        /// Strict majority of the configured authorities.
        needed: usize,
    },
    /// Not enough signatures verified yet, but fetching the key
    /// certificates of these authorities (v3 identity fingerprints) could
    /// make up the majority.
    #[error("missing key certificates for {} authorities", .0.len())]
    MissingCertificates(Vec<RsaId>),
}

/// The three lifetime timestamps of a consensus.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lifetime {
    /// `valid-after`.
    pub valid_after: SystemTime,
    /// `fresh-until`.
    pub fresh_until: SystemTime,
    /// `valid-until`.
    pub valid_until: SystemTime,
}

impl Lifetime {
    /// valid-after <= now <= valid-until.
    pub fn is_live(&self, now: SystemTime) -> bool {
        self.valid_after <= now && now <= self.valid_until
    }

    /// The window in which a client should fetch the next consensus
    /// (dir-spec §5.1): from 3/4 of the voting interval past fresh-until, to
    /// 7/8 of the remaining time before valid-until.
    pub fn refresh_window(&self) -> (SystemTime, SystemTime) {
        let interval = self
            .fresh_until
            .duration_since(self.valid_after)
            .unwrap_or_default();
        let mut start = self.fresh_until + interval.mul_f64(0.75);
        if start > self.valid_until {
            start = self.fresh_until;
        }
        let remaining = self.valid_until.duration_since(start).unwrap_or_default();
        let end = start + remaining.mul_f64(7.0 / 8.0);
        (start, end)
    }

    /// A uniformly random time in [`Lifetime::refresh_window`].
    pub fn pick_refresh_time<R: Rng + ?Sized>(&self, rng: &mut R) -> SystemTime {
        let (start, end) = self.refresh_window();
        let span = end.duration_since(start).unwrap_or_default();
        let ms = span.as_millis().min(u128::from(u64::MAX)) as u64;
        if ms == 0 {
            return start;
        }
        start + Duration::from_millis(rng.gen_range(0..=ms))
    }
}

/// How far outside [valid-after, valid-until] a consensus is still accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeTolerance {
    /// Accept when `now >= valid_after - pre_valid`.
    pub pre_valid: Duration,
    /// Accept when `now <= valid_until + post_valid`.
    pub post_valid: Duration,
}

impl Default for TimeTolerance {
    /// tor's "reasonably live": 24 hours either side.
    fn default() -> Self {
        TimeTolerance {
            pre_valid: REASONABLY_LIVE_TIME,
            post_valid: REASONABLY_LIVE_TIME,
        }
    }
}

impl TimeTolerance {
    /// No tolerance at all: valid-after <= now <= valid-until.
    pub const STRICT: TimeTolerance = TimeTolerance {
        pre_valid: Duration::ZERO,
        post_valid: Duration::ZERO,
    };
}

/// One router status entry of the consensus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsensusRelay {
    /// Nickname.
    pub nickname: String,
    /// RSA identity fingerprint.
    pub rsa_id: RsaId,
    /// SHA-256 digest of the relay's current microdescriptor.
    pub md_digest: MdDigest,
    /// IPv4 ORPort address.
    pub ipv4: SocketAddrV4,
    /// First IPv6 ORPort address (`a` line), if any.
    pub ipv6: Option<SocketAddrV6>,
    /// DirPort (0 if none).
    pub dir_port: u16,
    /// Consensus flags.
    pub flags: RelayFlags,
    /// Consensus bandwidth (`w Bandwidth=`), in kilobytes/s.
    pub bandwidth: u32,
    /// True if the bandwidth was measured by bandwidth authorities.
    pub measured: bool,
    /// Subprotocol versions (`pr`).
    pub protocols: Protocols,
    /// Software version (`v`), if listed.
    pub version: Option<String>,
}

/// A parsed consensus whose signatures and time have not been checked.
pub struct UnverifiedConsensus {
    inner: tor_netdoc::doc::netstatus::UnvalidatedMdConsensus,
    lifetime: Lifetime,
    /// DirPorts from the `r` lines (tor-netdoc 0.47 drops this field).
    dir_ports: HashMap<RsaId, u16>,
}

impl std::fmt::Debug for UnverifiedConsensus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UnverifiedConsensus")
            .field("lifetime", &self.lifetime)
            .field("relays", &self.inner.consensus.relays.len())
            .finish()
    }
}

fn to_rsa(id: &tor_llcrypto::pk::rsa::RsaIdentity) -> RsaId {
    id.to_bytes()
}

impl UnverifiedConsensus {
    /// Parse a microdesc-flavoured consensus document.
    pub fn parse(text: &str) -> Result<Self, ConsensusError> {
        if text.len() > MAX_CONSENSUS_LEN {
            return Err(ConsensusError::Malformed(format!(
                "document longer than {MAX_CONSENSUS_LEN} bytes"
            )));
        }
        if !text.starts_with("network-status-version 3 microdesc") {
            return Err(ConsensusError::Malformed(
                "not a microdesc-flavoured v3 consensus".into(),
            ));
        }
        // The parser consumes the whole text (anything after the signatures
        // that is not a signature is an error); the two strings it returns
        // are the signed part and the signature part.
        let (_signed, _sigs, unchecked) = tor_netdoc::doc::netstatus::MdConsensus::parse(text)
            .map_err(|e| ConsensusError::Malformed(e.to_string()))?;
        // Time is checked by `verify` with our own tolerance rules.
        let inner = unchecked.dangerously_assume_timely();
        let dir_ports = scan_dir_ports(text);
        if inner.consensus.relays.len() > MAX_CONSENSUS_RELAYS {
            return Err(ConsensusError::Malformed(format!(
                "more than {MAX_CONSENSUS_RELAYS} relays"
            )));
        }
        let lt = inner.consensus.lifetime();
        let lifetime = Lifetime {
            valid_after: lt.valid_after(),
            fresh_until: lt.fresh_until(),
            valid_until: lt.valid_until(),
        };
        Ok(UnverifiedConsensus {
            inner,
            lifetime,
            dir_ports,
        })
    }

    /// The lifetime the (unverified) document claims.
    pub fn lifetime(&self) -> Lifetime {
        self.lifetime
    }

    /// (identity fingerprint, signing-key fingerprint) of every signature.
    pub fn signing_keys(&self) -> Vec<(RsaId, RsaId)> {
        self.inner
            .siggroup
            .signatures
            .iter()
            .map(|s| {
                (
                    to_rsa(&s.key_ids.id_fingerprint),
                    to_rsa(&s.key_ids.sk_fingerprint),
                )
            })
            .collect()
    }

    /// v3 identities of configured authorities that signed this document
    /// but for whose signing key no certificate in `certs` is valid at
    /// `now`: fetch `/tor/keys/fp/<these>` before calling `verify`.
    pub fn missing_certificates(
        &self,
        authorities: &[AuthorityConfig],
        certs: &[AuthCertificate],
        now: SystemTime,
    ) -> Vec<RsaId> {
        let configured: BTreeSet<RsaId> = authorities.iter().map(|a| a.v3ident).collect();
        let mut missing = BTreeSet::new();
        let mut have = BTreeSet::new();
        for (id, sk) in self.signing_keys() {
            if !configured.contains(&id) {
                continue;
            }
            if find_cert(certs, &id, &sk, now).is_some() {
                have.insert(id);
            } else {
                missing.insert(id);
            }
        }
        missing.difference(&have).copied().collect()
    }

    /// Check time validity and authority signatures; on success return the
    /// verified [`Consensus`].
    ///
    /// `certs` may contain certificates of anyone: only those matching a
    /// configured authority's `v3ident` are used.  A strict majority of the
    /// distinct configured authorities must have signed.
    pub fn verify(
        self,
        authorities: &[AuthorityConfig],
        certs: &[AuthCertificate],
        now: SystemTime,
        tolerance: TimeTolerance,
    ) -> Result<Consensus, ConsensusError> {
        let lt = self.lifetime;
        if lt
            .valid_until
            .checked_add(tolerance.post_valid)
            .is_some_and(|t| now > t)
        {
            return Err(ConsensusError::Expired {
                valid_until: lt.valid_until,
                now,
            });
        }
        if lt
            .valid_after
            .checked_sub(tolerance.pre_valid)
            .is_some_and(|t| now < t)
        {
            return Err(ConsensusError::NotYetValid {
                valid_after: lt.valid_after,
                now,
            });
        }

        let configured: BTreeSet<RsaId> = authorities.iter().map(|a| a.v3ident).collect();
        let needed = configured.len() / 2 + 1;
        let sg = &self.inner.siggroup;
        let mut good: BTreeSet<RsaId> = BTreeSet::new();
        let mut missing: BTreeSet<RsaId> = BTreeSet::new();
        for sig in &sg.signatures {
            let id = to_rsa(&sig.key_ids.id_fingerprint);
            if !configured.contains(&id) || good.contains(&id) {
                continue;
            }
            let digest: Option<&[u8]> = match sig.digest_algo.algorithm() {
                KeywordOrString::Known(DirectorySignatureHashAlgo::Sha256) => {
                    sg.hashes.sha256.as_ref().map(|h| &h[..])
                }
                KeywordOrString::Known(DirectorySignatureHashAlgo::Sha1) => {
                    if sig.digest_algo.0.is_some() {
                        sg.hashes.sha1.as_ref().map(|h| &h[..])
                    } else {
                        sg.hashes.sha1_unnamed.as_ref().map(|h| &h[..])
                    }
                }
                _ => None,
            };
            let Some(digest) = digest else {
                continue;
            };
            let sk = to_rsa(&sig.key_ids.sk_fingerprint);
            match find_cert(certs, &id, &sk, now) {
                None => {
                    missing.insert(id);
                }
                Some(cert) => {
                    if cert.verify_digest(digest, &sig.signature) {
                        good.insert(id);
                    } else {
                        tracing::debug!(
                            authority = %hex::encode_upper(id),
                            "consensus signature does not verify"
                        );
                    }
                }
            }
        }
        let missing: Vec<RsaId> = missing.difference(&good).copied().collect();
        if good.len() < needed {
            if !missing.is_empty() && good.len() + missing.len() >= needed {
                return Err(ConsensusError::MissingCertificates(missing));
            }
            return Err(ConsensusError::InsufficientSignatures {
                good: good.len(),
                needed,
            });
        }
        Ok(self.into_consensus(good.into_iter().collect()))
    }

    /// Skip signature and time checks.  Only for documents that were
    /// verified before (e.g. reloaded from the caller's own cache) and for
    /// tests.
    pub fn dangerously_assume_verified(self) -> Consensus {
        self.into_consensus(Vec::new())
    }

    fn into_consensus(self, signed_by: Vec<RsaId>) -> Consensus {
        let c = self.inner.consensus;
        let dir_ports = self.dir_ports;
        let relays = c
            .relays()
            .iter()
            .map(|r| {
                let mut cr = convert_rs(r);
                cr.dir_port = dir_ports.get(&cr.rsa_id).copied().unwrap_or(0);
                cr
            })
            .collect();
        let params = c.params().iter().map(|(k, v)| (k.clone(), *v)).collect();
        let bandwidth_weights = c
            .bandwidth_weights()
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let conv = |p: &tor_netdoc::doc::netstatus::ProtoStatus, required: bool| -> Protocols {
            let s = if required {
                p.required_protocols().to_string()
            } else {
                p.recommended_protocols().to_string()
            };
            s.parse().unwrap_or_default()
        };
        Consensus {
            lifetime: self.lifetime,
            params,
            bandwidth_weights,
            required_client_protocols: conv(c.client_protocol_status(), true),
            recommended_client_protocols: conv(c.client_protocol_status(), false),
            required_relay_protocols: conv(c.relay_protocol_status(), true),
            recommended_relay_protocols: conv(c.relay_protocol_status(), false),
            relays,
            signed_by,
            hs_srvs: (
                c.shared_rand_prev().map(|s| (*s.value()).into()),
                c.shared_rand_cur().map(|s| (*s.value()).into()),
            ),
        }
    }
}

impl Consensus {
    /// The shared random values `(previous, current)` the consensus lists
    /// (`None` where it lists none: the onion-service hash ring then uses
    /// the disaster SRV). A minimal accessor for the onion-service client
    /// and service until the shared-randomness work exposes its richer one.
    pub fn hs_shared_rand(&self) -> (Option<[u8; 32]>, Option<[u8; 32]>) {
        self.hs_srvs
    }
}

/// DirPort of every `r` line: `r <nick> <b64 identity> <date> <time> <ip>
/// <orport> <dirport>`.  The document already parsed, so malformed lines
/// are simply skipped.
fn scan_dir_ports(text: &str) -> HashMap<RsaId, u16> {
    use base64::Engine as _;
    let mut out = HashMap::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("r ") else {
            continue;
        };
        let f: Vec<&str> = rest.split_ascii_whitespace().collect();
        if f.len() != 7 {
            continue;
        }
        let Ok(id) =
            base64::engine::general_purpose::STANDARD_NO_PAD.decode(f[1].trim_end_matches('='))
        else {
            continue;
        };
        let (Ok(id), Ok(port)) = (<RsaId>::try_from(id.as_slice()), f[6].parse::<u16>()) else {
            continue;
        };
        out.insert(id, port);
    }
    out
}

fn find_cert<'a>(
    certs: &'a [AuthCertificate],
    id: &RsaId,
    sk: &RsaId,
    now: SystemTime,
) -> Option<&'a AuthCertificate> {
    certs.iter().find(|c| {
        &c.id_fingerprint() == id && &c.signing_key_fingerprint() == sk && c.check_time(now).is_ok()
    })
}

fn convert_flags(f: &tor_netdoc::types::relay_flags::RelayFlags) -> RelayFlags {
    let mut out = RelayFlags::empty();
    for flag in f.iter() {
        let x = match flag {
            RelayFlag::Authority => RelayFlags::AUTHORITY,
            RelayFlag::BadExit => RelayFlags::BAD_EXIT,
            RelayFlag::Exit => RelayFlags::EXIT,
            RelayFlag::Fast => RelayFlags::FAST,
            RelayFlag::Guard => RelayFlags::GUARD,
            RelayFlag::HSDir => RelayFlags::HSDIR,
            RelayFlag::MiddleOnly => RelayFlags::MIDDLE_ONLY,
            RelayFlag::NoEdConsensus => RelayFlags::NO_ED_CONSENSUS,
            RelayFlag::Stable => RelayFlags::STABLE,
            RelayFlag::StaleDesc => RelayFlags::STALE_DESC,
            RelayFlag::Running => RelayFlags::RUNNING,
            RelayFlag::Valid => RelayFlags::VALID,
            RelayFlag::V2Dir => RelayFlags::V2DIR,
            _ => RelayFlags::empty(),
        };
        out.insert(x);
    }
    out
}

fn convert_rs(r: &tor_netdoc::doc::netstatus::MdRouterStatus) -> ConsensusRelay {
    let (bandwidth, measured) = match r.weight() {
        RelayWeight::Measured(b) => (*b, true),
        RelayWeight::Unmeasured(b) => (*b, false),
        _ => (0, false),
    };
    let ipv6 = r.a.iter().find_map(|a| match a {
        SocketAddr::V6(v6) => Some(*v6),
        SocketAddr::V4(_) => None,
    });
    ConsensusRelay {
        nickname: r.nickname().to_string(),
        rsa_id: to_rsa(r.rsa_identity()),
        md_digest: *r.md_digest(),
        ipv4: SocketAddrV4::new(r.r.ip, r.r.or_port),
        ipv6,
        dir_port: r.r.dir_port,
        flags: convert_flags(r.flags()),
        bandwidth,
        measured,
        protocols: r.protovers().to_string().parse().unwrap_or_default(),
        version: r.version().map(|v| v.to_string()),
    }
}

/// A verified microdesc consensus.
#[derive(Debug, Clone)]
pub struct Consensus {
    /// `shared-rand-previous-value` and `shared-rand-current-value`.
    hs_srvs: (Option<[u8; 32]>, Option<[u8; 32]>),
    lifetime: Lifetime,
    params: BTreeMap<String, i32>,
    bandwidth_weights: BTreeMap<String, i32>,
    required_client_protocols: Protocols,
    recommended_client_protocols: Protocols,
    required_relay_protocols: Protocols,
    recommended_relay_protocols: Protocols,
    relays: Vec<ConsensusRelay>,
    signed_by: Vec<RsaId>,
}

impl Consensus {
    /// Parse and verify in one step.
    pub fn parse_and_verify(
        text: &str,
        authorities: &[AuthorityConfig],
        certs: &[AuthCertificate],
        now: SystemTime,
        tolerance: TimeTolerance,
    ) -> Result<Consensus, ConsensusError> {
        UnverifiedConsensus::parse(text)?.verify(authorities, certs, now, tolerance)
    }

    /// Build a consensus from parts (tests, simulations, testbeds).
    pub fn from_parts(
        lifetime: Lifetime,
        params: BTreeMap<String, i32>,
        bandwidth_weights: BTreeMap<String, i32>,
        relays: Vec<ConsensusRelay>,
    ) -> Consensus {
        Consensus {
            hs_srvs: (None, None),
            lifetime,
            params,
            bandwidth_weights,
            required_client_protocols: Protocols::default(),
            recommended_client_protocols: Protocols::default(),
            required_relay_protocols: Protocols::default(),
            recommended_relay_protocols: Protocols::default(),
            relays,
            signed_by: Vec::new(),
        }
    }

    /// valid-after / fresh-until / valid-until.
    pub fn lifetime(&self) -> Lifetime {
        self.lifetime
    }
    /// `valid-until`.
    pub fn valid_until(&self) -> SystemTime {
        self.lifetime.valid_until
    }
    /// `fresh-until`.
    pub fn fresh_until(&self) -> SystemTime {
        self.lifetime.fresh_until
    }
    /// All router status entries, in document order.
    pub fn relays(&self) -> &[ConsensusRelay] {
        &self.relays
    }
    /// Network parameters (`params` line).
    pub fn params(&self) -> &BTreeMap<String, i32> {
        &self.params
    }
    /// A network parameter clamped to `[min, max]`, or `default` if absent.
    pub fn param(&self, name: &str, default: i32, min: i32, max: i32) -> i32 {
        self.params
            .get(name)
            .map(|v| (*v).clamp(min, max))
            .unwrap_or(default)
    }
    /// Raw `bandwidth-weights` entries.
    pub fn bandwidth_weights_raw(&self) -> &BTreeMap<String, i32> {
        &self.bandwidth_weights
    }
    /// Parsed bandwidth weights (missing entries default to the scale).
    pub fn bandwidth_weights(&self) -> crate::netdir::BandwidthWeights {
        crate::netdir::BandwidthWeights::from_map(
            &self.bandwidth_weights,
            self.param("bwweightscale", 10_000, 1, i32::MAX),
        )
    }
    /// `required-client-protocols`.
    pub fn required_client_protocols(&self) -> &Protocols {
        &self.required_client_protocols
    }
    /// `recommended-client-protocols`.
    pub fn recommended_client_protocols(&self) -> &Protocols {
        &self.recommended_client_protocols
    }
    /// `required-relay-protocols`.
    pub fn required_relay_protocols(&self) -> &Protocols {
        &self.required_relay_protocols
    }
    /// `recommended-relay-protocols`.
    pub fn recommended_relay_protocols(&self) -> &Protocols {
        &self.recommended_relay_protocols
    }
    /// v3 identities of the authorities whose signatures verified
    /// (empty for unverified/synthetic consensuses).
    pub fn signed_by(&self) -> &[RsaId] {
        &self.signed_by
    }
    /// Microdescriptor digests of all listed relays.
    pub fn md_digests(&self) -> impl Iterator<Item = &MdDigest> {
        self.relays.iter().map(|r| &r.md_digest)
    }
}
