//! Microdescriptors (dir-spec §3.3 "microdescriptor format" / §5.2).
//!
//! Parsing (and the SHA-256 digest over each microdescriptor's exact text)
//! is done by Arti's `tor-netdoc` `MicrodescReader`; results are converted
//! into [`Microdesc`].  Matching against the digests the consensus lists
//! happens in [`crate::NetDir::add_microdescs`], which discards any
//! microdescriptor nobody asked for (dir-spec §5.2: "MUST discard any
//! descriptors that it did not request").

use crate::types::PortPolicy;
use crate::{Ed25519Id, MdDigest, RsaId};

/// Largest microdescriptor response text accepted by [`parse_microdescs`].
pub const MAX_MICRODESC_TEXT_LEN: usize = 16 * 1024 * 1024;
/// Most microdescriptors accepted from one text.
pub const MAX_MICRODESCS_PER_TEXT: usize = 65_536;

/// Errors parsing microdescriptors.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MicrodescError {
    /// A microdescriptor could not be parsed.
    #[error("malformed microdescriptor: {0}")]
    Malformed(String),
    /// The input was longer than [`MAX_MICRODESC_TEXT_LEN`] or held more
    /// than [`MAX_MICRODESCS_PER_TEXT`] microdescriptors.
    #[error("microdescriptor input too large")]
    TooLarge,
}

/// One microdescriptor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Microdesc {
    /// SHA-256 of the microdescriptor text (what the consensus `m` line lists).
    pub digest: MdDigest,
    /// `ntor-onion-key` (curve25519).
    pub ntor_onion_key: [u8; 32],
    /// `id ed25519`: the relay's Ed25519 identity.
    pub ed25519_id: Ed25519Id,
    /// Declared family members (`family`, RSA fingerprints; nicknames are
    /// dropped as modern tor does).
    pub family: Vec<RsaId>,
    /// Family identifiers (`family-ids`, e.g. `ed25519:<base64>`).
    pub family_ids: Vec<String>,
    /// IPv4 exit policy summary (`p`; reject-all if absent).
    pub ipv4_policy: PortPolicy,
    /// IPv6 exit policy summary (`p6`; reject-all if absent).
    pub ipv6_policy: PortPolicy,
    /// The UDP port of onionmix QUIC links (`onionmix-quic`), when the
    /// relay offers them (see [`QUIC_KEYWORD`]).
    pub quic_port: Option<u16>,
}

/// The keyword of the line with which onionmix relays advertise QUIC
/// links (`docs/quic-links.md`): `onionmix-quic <udp port>` in the router
/// descriptor, copied into the microdescriptor by onionmix authorities.
/// Implementations that do not know it ignore it (dir-spec §1.2).
pub const QUIC_KEYWORD: &str = "onionmix-quic";

/// The port of the first well-formed `onionmix-quic` line of a document
/// (extra arguments are ignored, for later versions; port 0 or a bad
/// number is no port).
pub fn quic_port_in(text: &str) -> Option<u16> {
    text.lines().find_map(|l| {
        let mut f = l.split_ascii_whitespace();
        if f.next()? != QUIC_KEYWORD {
            return None;
        }
        f.next()?.parse::<u16>().ok().filter(|p| *p != 0)
    })
}

/// Result of parsing a text holding several microdescriptors.
#[derive(Debug, Clone, Default)]
pub struct MicrodescBatch {
    /// The microdescriptors that parsed.
    pub microdescs: Vec<Microdesc>,
    /// One error per microdescriptor that did not.
    pub errors: Vec<MicrodescError>,
}

impl Microdesc {
    /// Parse exactly one microdescriptor.
    pub fn parse(text: &str) -> Result<Microdesc, MicrodescError> {
        if text.len() > MAX_MICRODESC_TEXT_LEN {
            return Err(MicrodescError::TooLarge);
        }
        let md = tor_netdoc::doc::microdesc::MicrodescAndHash::parse(text)
            .map_err(|e| MicrodescError::Malformed(e.to_string()))?;
        Ok(convert(&md, text))
    }
}

/// Parse every microdescriptor in `text` (a `/tor/micro/d/...` body).
pub fn parse_microdescs(text: &str) -> MicrodescBatch {
    let mut batch = MicrodescBatch::default();
    if text.len() > MAX_MICRODESC_TEXT_LEN {
        batch.errors.push(MicrodescError::TooLarge);
        return batch;
    }
    let reader = match tor_netdoc::doc::microdesc::MicrodescReader::new(
        text,
        &tor_netdoc::AllowAnnotations::AnnotationsNotAllowed,
    ) {
        Ok(r) => r,
        Err(e) => {
            batch.errors.push(MicrodescError::Malformed(e.to_string()));
            return batch;
        }
    };
    for r in reader {
        if batch.microdescs.len() + batch.errors.len() >= MAX_MICRODESCS_PER_TEXT {
            batch.errors.push(MicrodescError::TooLarge);
            break;
        }
        match r {
            Ok(a) => batch
                .microdescs
                .push(convert(a.md(), a.within(text).unwrap_or_default())),
            Err(e) => batch.errors.push(MicrodescError::Malformed(e.to_string())),
        }
    }
    batch
}

fn convert_policy(p: &tor_netdoc::types::policy::PortPolicy) -> PortPolicy {
    // tor-netdoc keeps its ranges private; its Display form is the
    // canonical `accept|reject <ranges>` summary, which we re-parse.
    p.to_string().parse().unwrap_or_default()
}

/// `text`: the microdescriptor's own text (for the lines tor-netdoc does
/// not keep).
fn convert(md: &tor_netdoc::doc::microdesc::MicrodescAndHash, text: &str) -> Microdesc {
    Microdesc {
        digest: *md.digest(),
        ntor_onion_key: md.ntor_key().to_bytes(),
        ed25519_id: md.ed25519_id().as_bytes().try_into().unwrap_or([0; 32]),
        family: md.family().members().map(|m| m.to_bytes()).collect(),
        family_ids: md.family_ids().iter().map(|f| f.to_string()).collect(),
        ipv4_policy: convert_policy(md.ipv4_policy()),
        ipv6_policy: convert_policy(md.ipv6_policy()),
        quic_port: quic_port_in(text),
    }
}
