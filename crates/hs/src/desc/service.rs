//! Service side: build, sign and encrypt a descriptor.
//!
//! The document is produced by Arti's `HsDescBuilder` (tor-netdoc 0.47,
//! feature `hs-service`): outer document signed by the descriptor signing
//! key, type-08 certificate from the blinded key, both encryption layers,
//! `auth-client` lines (fake ones when client authorization is off, as
//! tor does), introduction points with their type-09 `auth-key` and
//! type-0B `enc-key-cert` certificates. We supply the keys in our types,
//! the revision counter from [`crate::keys::BlindedService::revision_counter`]
//! and enforce the 50 KB limit.

use rand_core::CryptoRngCore;
use tor_cell::chancell::msg::HandshakeType;
#[cfg(feature = "pow")]
use tor_checkable::timed::TimeRangeBound;
use tor_hscrypto::pk::{HsIntroPtSessionIdKey, HsSvcNtorKey};
#[cfg(feature = "pow")]
use tor_hscrypto::pow::v1::{Effort, Seed};
use tor_linkspec::{EncodedLinkSpec, LinkSpecType};
use tor_llcrypto::pk::{curve25519, ed25519};
use tor_netdoc::NetdocBuilder;
#[cfg(feature = "pow")]
use tor_netdoc::doc::hsdesc::pow::PowParams;
use tor_netdoc::doc::hsdesc::{HsDescBuilder, IntroPointDesc, create_desc_sign_key_cert};
use tor_units::IntegerMinutes;
use zeroize::Zeroizing;

use super::{
    DescError, IntroPointInfo, MAX_AUTH_CLIENTS, MAX_DESC_LEN, MAX_INTRO_POINTS, chain,
    unix_to_system,
};
use crate::keys::BlindedService;
use crate::time::{DESC_CERT_LIFETIME_S, DESC_LIFETIME_MIN, DESC_MAX_LIFETIME_MIN};

/// The short-term descriptor signing key (`KP_hs_desc_sign`), one per
/// descriptor (tor makes a new one for each time period's descriptor).
pub struct DescSigningKey {
    kp: ed25519::Keypair,
}

impl std::fmt::Debug for DescSigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DescSigningKey { .. }")
    }
}

impl DescSigningKey {
    /// A fresh key.
    pub fn generate(rng: &mut dyn CryptoRngCore) -> Self {
        let mut seed = Zeroizing::new([0u8; 32]);
        rng.fill_bytes(&mut seed[..]);
        Self::from_seed(&seed)
    }

    /// The key for a 32-byte Ed25519 seed.
    pub fn from_seed(seed: &[u8; 32]) -> Self {
        Self {
            kp: ed25519::Keypair::from_bytes(seed),
        }
    }

    /// The public key.
    pub fn public(&self) -> [u8; 32] {
        self.kp.verifying_key().to_bytes()
    }
}

/// What goes into one descriptor.
#[derive(Debug)]
pub struct DescriptorInput<'a> {
    /// The blinded key of the descriptor's time period.
    pub blinded: &'a BlindedService,
    /// The descriptor signing key.
    pub signing_key: &'a DescSigningKey,
    /// `revision-counter`.
    pub revision: u64,
    /// The time of building (certificate lifetimes count from it).
    pub now: u64,
    /// `descriptor-lifetime` in minutes (tor: 180; at most 720).
    pub lifetime_min: u16,
    /// Introduction points (1..=20).
    pub intro_points: &'a [IntroPointInfo],
    /// `single-onion-service`.
    pub single_onion_service: bool,
    /// Authorized clients' x25519 public keys; `None` disables client
    /// authorization.
    pub auth_clients: Option<&'a [[u8; 32]]>,
    /// `pow-params v1` to advertise (needs the `pow` feature).
    pub pow_v1: Option<super::PowParamsV1>,
    /// `flow-control 1-2 <sendme_inc>` (proposal 324 §9.1): set to the
    /// consensus's `cc_sendme_inc` when congestion control is enabled,
    /// `None` (no line) when it is not.
    pub flow_control_sendme_inc: Option<u8>,
}

impl<'a> DescriptorInput<'a> {
    /// An input with tor's defaults (180-minute lifetime, no client auth,
    /// no PoW, not a single onion service).
    pub fn new(
        blinded: &'a BlindedService,
        signing_key: &'a DescSigningKey,
        revision: u64,
        now: u64,
        intro_points: &'a [IntroPointInfo],
    ) -> Self {
        Self {
            blinded,
            signing_key,
            revision,
            now,
            lifetime_min: DESC_LIFETIME_MIN,
            intro_points,
            single_onion_service: false,
            auth_clients: None,
            pow_v1: None,
            flow_control_sendme_inc: None,
        }
    }
}

/// Build, sign and encrypt a descriptor.
pub fn build_descriptor(
    input: &DescriptorInput<'_>,
    rng: &mut dyn CryptoRngCore,
) -> Result<String, DescError> {
    let n = input.intro_points.len();
    if n == 0 || n > MAX_INTRO_POINTS {
        return Err(DescError::Build(format!("{n} introduction points")));
    }
    if input.lifetime_min == 0 || input.lifetime_min > DESC_MAX_LIFETIME_MIN {
        return Err(DescError::Build(format!(
            "lifetime {} minutes",
            input.lifetime_min
        )));
    }
    let ipts = input
        .intro_points
        .iter()
        .map(to_arti_ipt)
        .collect::<Result<Vec<_>, _>>()?;
    let auth_clients: Option<Vec<curve25519::PublicKey>> = match input.auth_clients {
        Some(keys) if keys.len() > MAX_AUTH_CLIENTS => {
            return Err(DescError::Build(format!(
                "{} authorized clients",
                keys.len()
            )));
        }
        Some(keys) => Some(
            keys.iter()
                .map(|k| curve25519::PublicKey::from(*k))
                .collect(),
        ),
        None => None,
    };
    let flow_control = match input.flow_control_sendme_inc {
        Some(0) => return Err(DescError::Build("flow-control sendme_inc 0".into())),
        Some(inc) => {
            let protos: tor_protover::Protocols = "FlowCtrl=1-2"
                .parse()
                .map_err(|_| DescError::Build("FlowCtrl protocols".into()))?;
            Some((protos, inc))
        }
        None => None,
    };
    #[cfg(not(feature = "pow"))]
    if input.pow_v1.is_some() {
        return Err(DescError::Build("built without the `pow` feature".into()));
    }
    #[cfg(feature = "pow")]
    let pow = input.pow_v1.map(|p| {
        PowParams::V1(tor_netdoc::doc::hsdesc::pow::v1::PowParamsV1::new(
            TimeRangeBound::new(Seed::from(p.seed), ..unix_to_system(p.expires)),
            Effort::from(p.suggested_effort),
        ))
    });

    let now = input.now;
    let cert = create_desc_sign_key_cert(
        &input.signing_key.kp.verifying_key(),
        input.blinded.arti_keypair(),
        unix_to_system(now.saturating_add(DESC_CERT_LIFETIME_S)),
    )
    .map_err(|e| DescError::Build(chain(&e)))?;
    // tor dates intro-point certificates from the start of the hour.
    let ipt_expiry = unix_to_system((now - now % 3600).saturating_add(DESC_CERT_LIFETIME_S));
    let blinded_pk = tor_hscrypto::pk::HsBlindIdKey::from(
        ed25519::PublicKey::from_bytes(input.blinded.public())
            .map_err(|_| DescError::Build("blinded key".into()))?,
    );

    #[allow(unused_mut)]
    let mut b = HsDescBuilder::default()
        .blinded_id(&blinded_pk)
        .hs_desc_sign(&input.signing_key.kp)
        .hs_desc_sign_cert(cert)
        .create2_formats(&[HandshakeType::NTOR])
        .auth_required(None)
        .is_single_onion_service(input.single_onion_service)
        .intro_points(&ipts)
        .intro_auth_key_cert_expiry(ipt_expiry)
        .intro_enc_key_cert_expiry(ipt_expiry)
        .lifetime(IntegerMinutes::new(input.lifetime_min))
        .revision_counter(input.revision.into())
        .subcredential((*input.blinded.subcredential()).into())
        .auth_clients(auth_clients.as_deref())
        .flow_control(flow_control)
        .max_generated_len(MAX_DESC_LEN);
    #[cfg(feature = "pow")]
    if let Some(p) = pow.as_ref() {
        b = b.pow_params(Some(p));
    }
    let mut compat = tor_llcrypto::util::rng::RngCompat::new(rng);
    let text = b
        .build_sign(&mut compat)
        .map_err(|e| DescError::Build(chain(&e)))?;
    if text.len() > MAX_DESC_LEN {
        return Err(DescError::TooLarge(text.len()));
    }
    Ok(text)
}

fn to_arti_ipt(ip: &IntroPointInfo) -> Result<IntroPointDesc, DescError> {
    let bad = |what: &str| DescError::BadIntroPoint(what.to_string());
    if ip.link_specifiers.is_empty() {
        return Err(bad("no link specifiers"));
    }
    let mut specs = Vec::with_capacity(ip.link_specifiers.len());
    for ls in &ip.link_specifiers {
        let mut raw = Vec::new();
        ls.write(&mut raw);
        let (t, body) = match raw.as_slice() {
            [t, _len, body @ ..] => (*t, body.to_vec()),
            _ => return Err(bad("link specifier")),
        };
        specs.push(EncodedLinkSpec::new(LinkSpecType::from(t), body));
    }
    let sid = ed25519::PublicKey::from_bytes(&ip.auth_key).map_err(|_| bad("auth key"))?;
    IntroPointDesc::builder()
        .link_specifiers(specs)
        .ipt_kp_ntor(curve25519::PublicKey::from(ip.onion_key))
        .kp_hs_ipt_sid(HsIntroPtSessionIdKey::from(sid))
        .kp_hss_ntor(HsSvcNtorKey::from(curve25519::PublicKey::from(ip.enc_key)))
        .build()
        .map_err(|e| DescError::BadIntroPoint(e.to_string()))
}
