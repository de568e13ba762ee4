//! Consensus signatures and detached signatures (dir-spec §3.10).

use sha2::{Digest as _, Sha256};

use onionmix_crypto::rsa_id::{RsaKeypair, pem_wrap};
use onionmix_crypto::timefmt::format_utc;

use super::document::{hex20, object_bytes, take_object, time_of};
use super::{VoteError, malformed};
use crate::authority::AuthCertificate;

/// The digest a consensus signature covers: SHA-256 of the unsigned body
/// followed by `directory-signature `.
pub fn consensus_digest(body: &str) -> [u8; 32] {
    let mut h = Sha256::new();
    h.update(body.as_bytes());
    h.update(b"directory-signature ");
    h.finalize().into()
}

/// One authority's signature on a consensus.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsensusSignature {
    /// Authority v3 identity.
    pub identity: [u8; 20],
    /// Signing key fingerprint.
    pub signing_key: [u8; 20],
    /// The RSA signature.
    pub signature: Vec<u8>,
}

/// Sign a consensus body.
pub fn sign_consensus(
    body: &str,
    identity: [u8; 20],
    signing: &RsaKeypair,
) -> Result<ConsensusSignature, VoteError> {
    let digest = consensus_digest(body);
    let signature = signing
        .sign_raw(&digest)
        .map_err(|e| VoteError::Sign(e.to_string()))?;
    Ok(ConsensusSignature {
        identity,
        signing_key: signing.public().fingerprint(),
        signature,
    })
}

/// Whether `sig` is a good signature on `body` by `cert`'s key.
pub fn check_consensus_signature(
    body: &str,
    sig: &ConsensusSignature,
    cert: &AuthCertificate,
) -> bool {
    cert.id_fingerprint() == sig.identity
        && cert.signing_key_fingerprint() == sig.signing_key
        && cert.verify_digest(&consensus_digest(body), &sig.signature)
}

/// The signed consensus: body plus signatures (sorted by identity).
pub fn assemble_consensus(body: &str, sigs: &[ConsensusSignature]) -> String {
    let mut sigs: Vec<&ConsensusSignature> = sigs.iter().collect();
    sigs.sort_by_key(|s| s.identity);
    sigs.dedup_by_key(|s| s.identity);
    let mut out = body.to_string();
    for s in sigs {
        out.push_str(&format!(
            "directory-signature sha256 {} {}\n",
            hex::encode_upper(s.identity),
            hex::encode_upper(s.signing_key)
        ));
        out.push_str(&pem_wrap("SIGNATURE", &s.signature));
    }
    out
}

/// A detached signature document (dir-spec §3.10, microdesc flavour only)
/// carrying one authority's signature.
pub fn build_detached(
    valid_after: u64,
    fresh_until: u64,
    valid_until: u64,
    body: &str,
    sig: &ConsensusSignature,
) -> String {
    let mut d = String::new();
    d.push_str(&format!("valid-after {}\n", format_utc(valid_after)));
    d.push_str(&format!("fresh-until {}\n", format_utc(fresh_until)));
    d.push_str(&format!("valid-until {}\n", format_utc(valid_until)));
    d.push_str(&format!(
        "additional-digest microdesc sha256 {}\n",
        hex::encode_upper(consensus_digest(body))
    ));
    d.push_str(&format!(
        "additional-signature microdesc sha256 {} {}\n",
        hex::encode_upper(sig.identity),
        hex::encode_upper(sig.signing_key)
    ));
    d.push_str(&pem_wrap("SIGNATURE", &sig.signature));
    d
}

/// A parsed detached signature: valid-after, the digest it signs, the
/// signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Detached {
    /// `valid-after` of the consensus signed.
    pub valid_after: u64,
    /// The signed digest.
    pub digest: [u8; 32],
    /// The signature.
    pub signature: ConsensusSignature,
}

/// Parse a detached signature document written by [`build_detached`].
pub fn parse_detached(text: &str) -> Result<Detached, VoteError> {
    const W: &str = "detached signature";
    if text.len() > 64 * 1024 {
        return Err(malformed(W, "too long"));
    }
    let mut valid_after = None;
    let mut digest = None;
    let mut ids = None;
    let mut rest = text;
    while let Some((line, tail)) = rest.split_once('\n') {
        let (kw, args) = line.split_once(' ').unwrap_or((line, ""));
        match kw {
            "valid-after" => valid_after = Some(time_of(args, W)?),
            "additional-digest" => {
                let f: Vec<&str> = args.split_whitespace().collect();
                if let ["microdesc", "sha256", hexd] = f[..] {
                    let v = hex::decode(hexd).map_err(|_| malformed(W, "bad digest"))?;
                    digest = Some(
                        <[u8; 32]>::try_from(v).map_err(|_| malformed(W, "bad digest length"))?,
                    );
                }
            }
            "additional-signature" => {
                let f: Vec<&str> = args.split_whitespace().collect();
                let ["microdesc", "sha256", id, sk] = f[..] else {
                    return Err(malformed(W, "bad additional-signature"));
                };
                let (obj, _) = take_object(tail, "SIGNATURE")
                    .ok_or_else(|| malformed(W, "no signature object"))?;
                let sig = object_bytes(obj).ok_or_else(|| malformed(W, "bad signature object"))?;
                ids = Some(ConsensusSignature {
                    identity: hex20(id, W)?,
                    signing_key: hex20(sk, W)?,
                    signature: sig,
                });
                break;
            }
            _ => {}
        }
        rest = tail;
    }
    match (valid_after, digest, ids) {
        (Some(valid_after), Some(digest), Some(signature)) => Ok(Detached {
            valid_after,
            digest,
            signature,
        }),
        _ => Err(malformed(W, "missing valid-after, digest or signature")),
    }
}

impl Detached {
    /// Whether the signature is good for `body` under `cert`.
    pub fn verify(&self, body: &str, cert: &AuthCertificate) -> bool {
        self.digest == consensus_digest(body)
            && check_consensus_signature(body, &self.signature, cert)
    }
}
