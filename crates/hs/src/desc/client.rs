//! Client side: parse, verify and decrypt a descriptor fetched from an
//! HSDir.
//!
//! The outer document is first checked by our own [`super::hsdir`] parser
//! (precise errors: wrong blinded key, bad certificate or signature,
//! expired); then Arti's `HsDesc` (tor-netdoc 0.47, `hs-client`) decrypts
//! both layers with the subcredential and, if given, our client-auth
//! x25519 key, and checks the inner layer's certificates (types 09, 0B)
//! and times. A missing or wrong client-auth key is reported as such, so
//! the SOCKS front end can answer 0xF4 / 0xF5.

use tor_checkable::{SelfSigned, Timebound};
use tor_hscrypto::pk::{HsBlindId, HsClientDescEncKeypair, HsClientDescEncSecretKey};
#[cfg(feature = "pow")]
use tor_hscrypto::pow::v1::Seed;
use tor_llcrypto::pk::curve25519;
#[cfg(feature = "pow")]
use tor_netdoc::doc::hsdesc::pow::PowParams;
use tor_netdoc::doc::hsdesc::{HsDesc, HsDescError};

use onionmix_cell::Reader;
use onionmix_cell::relay::LinkSpec;

use super::{DescError, DescriptorContent, IntroPointInfo, MAX_DESC_LEN, chain, unix_to_system};
#[cfg(feature = "pow")]
use super::{PowParamsV1, system_to_unix};

/// Parse, verify and decrypt `text`, the descriptor of the service whose
/// blinded key for the period is `blinded` and subcredential
/// `subcredential`, at time `now`. `client_auth` is our x25519 secret key
/// for this service, if we have one.
pub fn decode_descriptor(
    text: &str,
    blinded: &[u8; 32],
    subcredential: &[u8; 32],
    client_auth: Option<&[u8; 32]>,
    now: u64,
) -> Result<DescriptorContent, DescError> {
    if text.len() > MAX_DESC_LEN {
        return Err(DescError::TooLarge(text.len()));
    }
    // Our own checks of the outer layer first, for precise errors.
    let outer = super::hsdir::parse_outer(text, now)?;
    if &outer.blinded_key != blinded {
        return Err(DescError::WrongBlindedKey);
    }
    let when = unix_to_system(now);
    let unchecked = HsDesc::parse(text, &HsBlindId::from(*blinded))
        .map_err(|e| DescError::Malformed(chain(&e)))?;
    let timely = unchecked
        .check_signature()
        .map_err(|e| DescError::BadSignature(chain(&e)))?
        .if_valid_at(&when)
        .map_err(|_| DescError::Expired)?;
    let keypair = client_auth.map(|sk| {
        let secret = curve25519::StaticSecret::from(*sk);
        let public = curve25519::PublicKey::from(&secret);
        HsClientDescEncKeypair::new(public.into(), HsClientDescEncSecretKey::from(secret))
    });
    let inner = timely
        .decrypt(&(*subcredential).into(), keypair.as_ref())
        .map_err(map_decrypt_error)?;
    let desc = inner
        .if_valid_at(&when)
        .map_err(|_| DescError::Expired)?
        .check_signature()
        .map_err(|e| DescError::Inner(chain(&e)))?;
    content(&desc)
}

fn map_decrypt_error(e: HsDescError) -> DescError {
    match e {
        HsDescError::MissingDecryptionKey => DescError::MissingClientAuth,
        HsDescError::WrongDecryptionKey => DescError::WrongClientAuth,
        HsDescError::DecryptionFailed => DescError::DecryptFailed,
        other => DescError::Inner(chain(&other)),
    }
}

fn content(desc: &HsDesc) -> Result<DescriptorContent, DescError> {
    let mut intro_points = Vec::with_capacity(desc.intro_points().len());
    for ipt in desc.intro_points() {
        let mut raw = Vec::new();
        for ls in ipt.link_specifiers() {
            tor_bytes::Writer::write(&mut raw, ls)
                .map_err(|e| DescError::BadIntroPoint(e.to_string()))?;
        }
        let mut r = Reader::new(&raw);
        let mut link_specifiers = Vec::new();
        while r.remaining() > 0 {
            link_specifiers
                .push(LinkSpec::read(&mut r).map_err(|e| DescError::BadIntroPoint(e.to_string()))?);
        }
        let sid: &tor_llcrypto::pk::ed25519::PublicKey = ipt.ipt_sid_key().as_ref();
        let enc: &curve25519::PublicKey = ipt.svc_ntor_key().as_ref();
        intro_points.push(IntroPointInfo {
            link_specifiers,
            onion_key: ipt.ipt_ntor_key().to_bytes(),
            auth_key: sid.to_bytes(),
            enc_key: enc.to_bytes(),
        });
    }
    #[cfg(not(feature = "pow"))]
    let pow_v1 = None;
    #[cfg(feature = "pow")]
    let pow_v1 = desc.pow_params().iter().find_map(|p| match p {
        PowParams::V1(v) => {
            let (seed, range): (&Seed, _) =
                (v.seed().dangerously_peek(), v.seed().bounds_start_end());
            Some(PowParamsV1 {
                seed: *seed.as_ref(),
                suggested_effort: u32::from(v.suggested_effort()),
                expires: range.1.map(system_to_unix).unwrap_or(u64::MAX),
            })
        }
        #[allow(unreachable_patterns)]
        _ => None,
    });
    Ok(DescriptorContent {
        revision: *desc.revision(),
        intro_points,
        single_onion_service: desc.is_single_onion_service(),
        intro_auth_required: desc.requires_intro_authentication(),
        pow_v1,
        flow_control_sendme_inc: desc.flow_control().map(|(_, inc)| inc.get()),
    })
}
