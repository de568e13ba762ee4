//! HSDir side: the outer descriptor document (rend-spec-v3 §2.4) parsed
//! and checked without the subcredential, and the store/replace rule.
//!
//! ```text
//! hs-descriptor 3
//! descriptor-lifetime <minutes>
//! descriptor-signing-key-cert
//! -----BEGIN ED25519 CERT----- ... -----END ED25519 CERT-----
//! revision-counter <u64>
//! superencrypted
//! -----BEGIN MESSAGE----- ... -----END MESSAGE-----
//! signature <base64 Ed25519 signature>
//! ```
//!
//! Checks, as stock tor's HSDir cache does: size ≤ 50 000 bytes, version 3
//! first, each keyword exactly once (unknown ones ignored), `signature` last, lifetime at most 12
//! hours, a type-08 certificate that the blinded key signed (its
//! signed-with-ed25519-key extension names the blinded key, which is the
//! descriptor's index) and that has not expired, and the signature by the
//! certified descriptor signing key over `"Tor onion service descriptor
//! sig v3" | document up to the "signature" line`. A descriptor
//! replaces a stored one only with a strictly higher revision counter.

use base64::Engine;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD};

use super::{DescError, MAX_DESC_LEN};
use crate::keys::verify_desc_signing_cert;
use crate::time::DESC_MAX_LIFETIME_MIN;

/// Prefix of the signed text.
pub const SIG_PREFIX: &[u8] = b"Tor onion service descriptor sig v3";

/// A verified outer document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OuterDescriptor {
    /// `KP_hs_blind_id`: the key the descriptor is stored and fetched under.
    pub blinded_key: [u8; 32],
    /// The descriptor signing key (certified by the blinded key).
    pub signing_key: [u8; 32],
    /// `descriptor-lifetime` in minutes.
    pub lifetime_min: u16,
    /// `revision-counter`.
    pub revision: u64,
    /// When the type-08 certificate expires.
    pub cert_expires: u64,
    /// The `superencrypted` blob (what a client decrypts).
    pub superencrypted: Vec<u8>,
}

impl OuterDescriptor {
    /// When an HSDir that received the descriptor at `received` should drop
    /// it: after its lifetime, and never after its certificate expires.
    pub fn expires_at(&self, received: u64) -> u64 {
        received
            .saturating_add(u64::from(self.lifetime_min) * 60)
            .min(self.cert_expires)
    }

    /// May this descriptor replace `stored` (same blinded key)? Only with a
    /// strictly higher revision counter.
    pub fn replaces(&self, stored: Option<&OuterDescriptor>) -> bool {
        stored.is_none_or(|s| self.revision > s.revision)
    }
}

/// Parse and verify the outer document at time `now`.
pub fn parse_outer(text: &str, now: u64) -> Result<OuterDescriptor, DescError> {
    if text.len() > MAX_DESC_LEN {
        return Err(DescError::TooLarge(text.len()));
    }
    let mal = |s: &str| DescError::Malformed(s.to_string());
    let mut lines = Lines { text, pos: 0 };
    let mut version = None;
    let mut lifetime = None;
    let mut cert = None;
    let mut revision = None;
    let mut superenc = None;
    let mut signature = None;
    let mut signed_len = 0usize;
    let mut first = true;
    while let Some((start, line)) = lines.next_line() {
        if signature.is_some() {
            return Err(mal("data after signature"));
        }
        let mut words = line.split(' ');
        let kw = words.next().unwrap_or("");
        let args: Vec<&str> = words.collect();
        if first && kw != "hs-descriptor" {
            return Err(mal("does not start with hs-descriptor"));
        }
        first = false;
        match kw {
            "hs-descriptor" => {
                once(&version, "hs-descriptor")?;
                if args != ["3"] {
                    return Err(mal("unsupported version"));
                }
                version = Some(3);
            }
            "descriptor-lifetime" => {
                once(&lifetime, kw)?;
                let v: u16 = one_arg(&args)?.parse().map_err(|_| mal("lifetime"))?;
                if v == 0 || v > DESC_MAX_LIFETIME_MIN {
                    return Err(mal("lifetime out of range"));
                }
                lifetime = Some(v);
            }
            "descriptor-signing-key-cert" => {
                once(&cert, kw)?;
                no_args(&args)?;
                cert = Some(lines.object("ED25519 CERT")?);
            }
            "revision-counter" => {
                once(&revision, kw)?;
                let v: u64 = one_arg(&args)?
                    .parse()
                    .map_err(|_| mal("revision-counter"))?;
                revision = Some(v);
            }
            "superencrypted" => {
                once(&superenc, kw)?;
                no_args(&args)?;
                superenc = Some(lines.object("MESSAGE")?);
            }
            "signature" => {
                let sig = one_arg(&args)?;
                let raw = STANDARD_NO_PAD
                    .decode(sig.trim_end_matches('='))
                    .map_err(|_| mal("signature base64"))?;
                let sig: [u8; 64] = raw.try_into().map_err(|_| mal("signature length"))?;
                signature = Some(sig);
                // Signed: everything before the `signature` line,
                // including the newline that ends the previous line.
                signed_len = start;
            }
            _ => {
                // Unknown items are ignored, as tor's tokenizer does (they
                // are covered by the signature all the same).
            }
        }
    }
    let (Some(_), Some(lifetime_min), Some(cert), Some(revision), Some(superencrypted), Some(sig)) =
        (version, lifetime, cert, revision, superenc, signature)
    else {
        return Err(mal("missing keyword"));
    };
    // The certificate: type 08, and it names the signer (the blinded key).
    let parsed = onionmix_crypto::certs::Ed25519Cert::parse(&cert)
        .map_err(|e| DescError::BadSignature(e.to_string()))?;
    let blinded_key = parsed
        .signing_key
        .ok_or_else(|| DescError::BadSignature("certificate names no signing key".into()))?;
    let (signing_key, c) = verify_desc_signing_cert(&cert, &blinded_key, now).map_err(|e| {
        if let crate::keys::KeyError::Cert(onionmix_crypto::CertError::Expired { .. }) = e {
            DescError::Expired
        } else {
            DescError::BadSignature(e.to_string())
        }
    })?;
    let signed = text
        .as_bytes()
        .get(..signed_len)
        .ok_or_else(|| mal("signature"))?;
    let mut msg = Vec::with_capacity(SIG_PREFIX.len() + signed.len());
    msg.extend_from_slice(SIG_PREFIX);
    msg.extend_from_slice(signed);
    if !onionmix_crypto::ed25519::verify(&signing_key, &msg, &sig) {
        return Err(DescError::BadSignature("document signature".into()));
    }
    Ok(OuterDescriptor {
        blinded_key,
        signing_key,
        lifetime_min,
        revision,
        cert_expires: c.expires_unix(),
        superencrypted,
    })
}

fn once<T>(slot: &Option<T>, kw: &str) -> Result<(), DescError> {
    if slot.is_some() {
        Err(DescError::Malformed(format!("{kw} repeated")))
    } else {
        Ok(())
    }
}

fn one_arg<'a>(args: &[&'a str]) -> Result<&'a str, DescError> {
    match args {
        [a] => Ok(a),
        _ => Err(DescError::Malformed("expected one argument".into())),
    }
}

fn no_args(args: &[&str]) -> Result<(), DescError> {
    if args.is_empty() {
        Ok(())
    } else {
        Err(DescError::Malformed("unexpected argument".into()))
    }
}

/// A line cursor that also reads `-----BEGIN X----- ... -----END X-----`.
struct Lines<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Lines<'a> {
    /// The next line and its byte offset; `None` at the end. Every line
    /// must end in `\n`.
    fn next_line(&mut self) -> Option<(usize, &'a str)> {
        let rest = self.text.get(self.pos..)?;
        if rest.is_empty() {
            return None;
        }
        let start = self.pos;
        let (line, adv) = match rest.find('\n') {
            Some(i) => (rest.get(..i)?, i + 1),
            None => (rest, rest.len()),
        };
        self.pos = self.pos.saturating_add(adv);
        Some((start, line))
    }

    fn object(&mut self, tag: &str) -> Result<Vec<u8>, DescError> {
        let mal = |s: &str| DescError::Malformed(format!("{tag} object: {s}"));
        let begin = format!("-----BEGIN {tag}-----");
        let end = format!("-----END {tag}-----");
        match self.next_line() {
            Some((_, l)) if l == begin => {}
            _ => return Err(mal("missing BEGIN")),
        }
        let mut b64 = String::new();
        loop {
            let Some((_, l)) = self.next_line() else {
                return Err(mal("missing END"));
            };
            if l == end {
                break;
            }
            if l.len() > 64
                || !l
                    .bytes()
                    .all(|c| c.is_ascii_alphanumeric() || b"+/=".contains(&c))
            {
                return Err(mal("bad base64 line"));
            }
            b64.push_str(l);
        }
        STANDARD.decode(&b64).map_err(|_| mal("base64"))
    }
}
