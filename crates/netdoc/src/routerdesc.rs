//! Router descriptors (dir-spec §2.1.1): build and sign the descriptor a
//! relay uploads to the directory authorities, in the layout stock tor
//! 0.4.9 produces, and the HTTP upload request.
//!
//! Signatures: `router-sig-ed25519` is an Ed25519 signature (by the signing
//! key certified in `identity-ed25519`) of SHA-256("Tor router descriptor
//! signature v1" || document up to and including "router-sig-ed25519 ");
//! `router-signature` is the RSA identity key's PKCS#1 v1.5 signature (no
//! DigestInfo, tor's convention) of SHA-1(document up to and including
//! "router-signature\n").

use std::net::Ipv4Addr;

use base64::Engine;
use sha1::{Digest as _, Sha1};
use sha2::Sha256;

use onionmix_crypto::keys::{RelayKeys, verify_tap_onion_key_crosscert};
use onionmix_crypto::rsa_id::{RsaPublic, pem_unwrap, pem_wrap};
use onionmix_crypto::timefmt::format_utc;

/// What the descriptor says about the relay besides its keys.
#[derive(Debug, Clone)]
pub struct DescriptorParams {
    /// Nickname.
    pub nickname: String,
    /// IPv4 address.
    pub address: Ipv4Addr,
    /// ORPort.
    pub or_port: u16,
    /// DirPort (0: none).
    pub dir_port: u16,
    /// `platform` line value.
    pub platform: String,
    /// `proto` line value.
    pub protocols: String,
    /// Unix time of publication.
    pub published: u64,
    /// Seconds the relay has been up.
    pub uptime: u64,
    /// Bandwidth: average, burst, observed (bytes/s).
    pub bandwidth: (u64, u64, u64),
    /// Exit policy rules, in tor syntax, ending in a catch-all.
    pub exit_policy: Vec<String>,
    /// Family members (`$`-prefixed hex fingerprints).
    pub family: Vec<String>,
    /// Contact line.
    pub contact: Option<String>,
    /// Serves directory requests over BEGIN_DIR (`tunnelled-dir-server`).
    pub tunnelled_dir_server: bool,
    /// Wants to be an onion-service directory (`hidden-service-dir`; tor
    /// authorities give the HSDir flag only to relays that say so).
    pub hidden_service_dir: bool,
    /// Lifetime of the ntor cross-certificate, seconds.
    pub ntor_crosscert_lifetime: u64,
    /// UDP port of onionmix QUIC links (`onionmix-quic`), if offered.
    pub quic_port: Option<u16>,
}

/// Errors building a descriptor.
#[derive(Debug, thiserror::Error)]
pub enum DescriptorError {
    /// Signing failed.
    #[error("signing: {0}")]
    Sign(String),
    /// A parameter cannot be encoded.
    #[error("invalid parameter: {0}")]
    Invalid(String),
}

fn b64(d: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(d)
}
fn b64_nopad(d: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(d)
}

fn block(label: &str, data: &[u8]) -> String {
    let enc = b64(data);
    let mut s = format!("-----BEGIN {label}-----\n");
    for chunk in enc.as_bytes().chunks(64) {
        s.push_str(&String::from_utf8_lossy(chunk));
        s.push('\n');
    }
    s.push_str(&format!("-----END {label}-----\n"));
    s
}

fn valid_line_value(s: &str) -> bool {
    !s.contains('\n') && !s.contains('\r')
}

/// Build and sign a router descriptor.
pub fn build(keys: &RelayKeys, p: &DescriptorParams) -> Result<String, DescriptorError> {
    for (what, v) in [
        ("nickname", &p.nickname),
        ("platform", &p.platform),
        ("proto", &p.protocols),
    ] {
        if v.is_empty() || !valid_line_value(v) {
            return Err(DescriptorError::Invalid(what.into()));
        }
    }
    if let Some(c) = &p.contact
        && !valid_line_value(c)
    {
        return Err(DescriptorError::Invalid("contact".into()));
    }
    let mut d = String::with_capacity(4096);
    d.push_str(&format!(
        "router {} {} {} 0 {}\n",
        p.nickname, p.address, p.or_port, p.dir_port
    ));
    d.push_str("identity-ed25519\n");
    d.push_str(&block("ED25519 CERT", &keys.ed_signing_cert));
    d.push_str(&format!(
        "master-key-ed25519 {}\n",
        b64_nopad(&keys.ed_id())
    ));
    d.push_str(&format!("platform {}\n", p.platform));
    d.push_str(&format!("proto {}\n", p.protocols));
    d.push_str(&format!("published {}\n", format_utc(p.published)));
    d.push_str(&format!(
        "fingerprint {}\n",
        onionmix_crypto::rsa_id::spaced_fingerprint(&keys.rsa_id())
    ));
    d.push_str(&format!("uptime {}\n", p.uptime));
    d.push_str(&format!(
        "bandwidth {} {} {}\n",
        p.bandwidth.0, p.bandwidth.1, p.bandwidth.2
    ));
    d.push_str("onion-key\n");
    d.push_str(&keys.rsa_onion.public().to_pem());
    d.push_str("signing-key\n");
    d.push_str(&keys.rsa_identity.public().to_pem());
    let tap_cc = keys
        .tap_onion_key_crosscert()
        .map_err(|e| DescriptorError::Sign(e.to_string()))?;
    d.push_str("onion-key-crosscert\n");
    d.push_str(&pem_wrap("CROSSCERT", &tap_cc));
    let (ntor_cc, signbit) = keys.ntor_onion_key_crosscert(p.published, p.ntor_crosscert_lifetime);
    d.push_str(&format!("ntor-onion-key-crosscert {signbit}\n"));
    d.push_str(&block("ED25519 CERT", &ntor_cc));
    if !p.family.is_empty() {
        d.push_str(&format!("family {}\n", p.family.join(" ")));
    }
    if p.hidden_service_dir {
        d.push_str("hidden-service-dir\n");
    }
    if let Some(c) = &p.contact {
        d.push_str(&format!("contact {c}\n"));
    }
    d.push_str(&format!(
        "ntor-onion-key {}\n",
        b64_nopad(&keys.ntor.public())
    ));
    for rule in &p.exit_policy {
        if !valid_line_value(rule) {
            return Err(DescriptorError::Invalid("exit policy".into()));
        }
        d.push_str(rule);
        d.push('\n');
    }
    if p.tunnelled_dir_server {
        d.push_str("tunnelled-dir-server\n");
    }
    if let Some(port) = p.quic_port {
        d.push_str(&format!("{} {port}\n", crate::microdesc::QUIC_KEYWORD));
    }
    d.push_str("router-sig-ed25519 ");
    let mut h = Sha256::new();
    h.update(b"Tor router descriptor signature v1");
    h.update(d.as_bytes());
    let digest: [u8; 32] = h.finalize().into();
    let sig = keys.ed_signing.sign(&digest);
    d.push_str(&b64_nopad(&sig));
    d.push('\n');
    d.push_str("router-signature\n");
    let sha1: [u8; 20] = Sha1::digest(d.as_bytes()).into();
    let rsa_sig = keys
        .rsa_identity
        .sign_raw(&sha1)
        .map_err(|e| DescriptorError::Sign(e.to_string()))?;
    d.push_str(&pem_wrap("SIGNATURE", &rsa_sig));
    Ok(d)
}

/// The HTTP/1.0 request that uploads `desc` to an authority's DirPort.
pub fn upload_request(host: &str, desc: &str) -> Vec<u8> {
    format!(
        "POST /tor/ HTTP/1.0\r\nHost: {host}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{desc}",
        desc.len()
    )
    .into_bytes()
}

/// Largest descriptor upload accepted (tor's limit is similar).
pub const MAX_UPLOAD_LEN: usize = 64 * 1024;
/// How far in the future a descriptor's `published` may be.
pub const MAX_PUBLISHED_SKEW: u64 = 12 * 3600;
/// How old a descriptor may be when uploaded.
pub const MAX_UPLOAD_AGE: u64 = 48 * 3600;

/// A router descriptor received by an authority, signatures verified.
#[derive(Debug, Clone)]
pub struct UploadedDesc {
    /// The descriptor text (from `router ` through its RSA signature).
    pub text: String,
    /// SHA-1 of the signed part (the descriptor digest).
    pub digest: [u8; 20],
    /// Nickname.
    pub nickname: String,
    /// IPv4 address.
    pub address: Ipv4Addr,
    /// ORPort.
    pub or_port: u16,
    /// DirPort.
    pub dir_port: u16,
    /// RSA identity fingerprint.
    pub rsa_id: [u8; 20],
    /// Ed25519 identity.
    pub ed_id: [u8; 32],
    /// ntor onion key.
    pub ntor_onion_key: [u8; 32],
    /// `onion-key` object (PEM), if present.
    pub onion_key_pem: Option<String>,
    /// Publication time (unix).
    pub published: u64,
    /// Uptime in seconds.
    pub uptime: u64,
    /// Bandwidth average, burst, observed (bytes/s).
    pub bandwidth: (u64, u64, u64),
    /// `platform` line.
    pub platform: String,
    /// `proto` line.
    pub protocols: String,
    /// Family members as written.
    pub family: Vec<String>,
    /// IPv4 exit policy rules in order (`accept ...` / `reject ...`).
    pub policy: Vec<String>,
    /// Advertises `tunnelled-dir-server`.
    pub tunnelled_dir_server: bool,
    /// Advertises `hidden-service-dir` (wants to be an HSDir).
    pub hidden_service_dir: bool,
    /// Says `hibernating 1`.
    pub hibernating: bool,
    /// UDP port of onionmix QUIC links (`onionmix-quic`), if offered.
    pub quic_port: Option<u16>,
}

/// Check an uploaded descriptor (HTTP POST body: one descriptor, maybe
/// followed by an extra-info document, which is ignored): parse it,
/// verify every signature and cross-certificate, and check `published`
/// against `now_unix`.
pub fn verify_upload(body: &str, now_unix: u64) -> Result<UploadedDesc, String> {
    use tor_checkable::{SelfSigned, Timebound};
    if body.len() > MAX_UPLOAD_LEN {
        return Err("descriptor too large".into());
    }
    let start = if body.starts_with("router ") {
        0
    } else {
        body.find("\nrouter ").ok_or("no router descriptor")? + 1
    };
    let sig_kw = "\nrouter-signature\n";
    let s_at = body[start..].find(sig_kw).ok_or("no router-signature")? + start;
    let signed_end = s_at + sig_kw.len();
    let end_marker = "-----END SIGNATURE-----\n";
    let end = body[signed_end..]
        .find(end_marker)
        .ok_or("unterminated router-signature")?
        + signed_end
        + end_marker.len();
    let text = &body[start..end];
    let digest: [u8; 20] = Sha1::digest(&body.as_bytes()[start..signed_end]).into();
    let unchecked = tor_netdoc::doc::routerdesc::RouterDesc::parse(text)
        .map_err(|e| format!("malformed descriptor: {e}"))?;
    // Every signature and cross-certificate (accepted unchecked in fuzzing
    // builds only: see `FUZZING_ACCEPTS_SIGNATURES`).
    let rd = if crate::FUZZING_ACCEPTS_SIGNATURES {
        unchecked.dangerously_assume_wellsigned()
    } else {
        unchecked
            .check_signature()
            .map_err(|e| format!("bad signature: {e}"))?
    }
    .dangerously_assume_timely();
    let published = rd
        .published()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    if published > now_unix + MAX_PUBLISHED_SKEW {
        return Err("descriptor published too far in the future".into());
    }
    if published + MAX_UPLOAD_AGE < now_unix {
        return Err("descriptor too old".into());
    }
    let mut d = UploadedDesc {
        text: text.to_string(),
        digest,
        nickname: String::new(),
        address: Ipv4Addr::UNSPECIFIED,
        or_port: 0,
        dir_port: 0,
        rsa_id: rd
            .rsa_identity()
            .as_bytes()
            .try_into()
            .map_err(|_| "bad RSA identity")?,
        ed_id: rd
            .ed_identity()
            .as_bytes()
            .try_into()
            .map_err(|_| "bad Ed25519 identity")?,
        ntor_onion_key: rd.ntor_onion_key().to_bytes(),
        onion_key_pem: None,
        published,
        uptime: 0,
        bandwidth: (0, 0, 0),
        platform: String::new(),
        protocols: String::new(),
        family: Vec::new(),
        policy: Vec::new(),
        tunnelled_dir_server: false,
        hidden_service_dir: false,
        hibernating: false,
        quic_port: crate::microdesc::quic_port_in(text),
    };
    let mut tap_crosscert: Option<String> = None;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let (kw, rest) = line.split_once(' ').unwrap_or((line, ""));
        match kw {
            "router" => {
                let f: Vec<&str> = rest.split_whitespace().collect();
                if let [nick, addr, orp, _socks, dirp] = f[..] {
                    d.nickname = nick.to_string();
                    d.address = addr.parse().map_err(|_| "bad router address")?;
                    d.or_port = orp.parse().map_err(|_| "bad ORPort")?;
                    d.dir_port = dirp.parse().map_err(|_| "bad DirPort")?;
                } else {
                    return Err("bad router line".into());
                }
            }
            "uptime" => d.uptime = rest.trim().parse().unwrap_or(0),
            "bandwidth" => {
                let v: Vec<u64> = rest
                    .split_whitespace()
                    .map(|x| x.parse().unwrap_or(0))
                    .collect();
                if let [a, b, c] = v[..] {
                    d.bandwidth = (a, b, c);
                }
            }
            "platform" => d.platform = rest.to_string(),
            "proto" => d.protocols = rest.to_string(),
            "family" => d.family = rest.split_whitespace().map(str::to_string).collect(),
            "accept" | "reject" if d.policy.len() < 1024 => {
                d.policy.push(line.to_string());
            }
            "tunnelled-dir-server" => d.tunnelled_dir_server = true,
            "hidden-service-dir" => d.hidden_service_dir = true,
            "hibernating" => d.hibernating = rest.trim() == "1",
            "onion-key" | "onion-key-crosscert" => {
                let mut pem = String::new();
                for l in lines.by_ref() {
                    pem.push_str(l);
                    pem.push('\n');
                    if l.starts_with("-----END") {
                        break;
                    }
                }
                if kw == "onion-key" {
                    d.onion_key_pem = Some(pem);
                } else {
                    tap_crosscert = Some(pem);
                }
            }
            _ => {}
        }
    }
    if d.nickname.is_empty() {
        return Err("no router line".into());
    }
    // tor-netdoc ignores the TAP onion key; clients still parse it in the
    // microdescriptor built from this descriptor (tor-netdoc requires it
    // there, dir-spec says "exactly once" in both), so require it, check
    // it and its cross-certificate (as tor's authorities do) and keep it
    // canonical.
    let Some(pem) = &d.onion_key_pem else {
        return Err("no onion-key".into());
    };
    {
        let key = RsaPublic::from_pem(pem).map_err(|e| format!("bad onion-key: {e}"))?;
        if key.bits() != 1024 {
            return Err("onion-key is not a 1024-bit RSA key".into());
        }
        let cc = tap_crosscert
            .as_deref()
            .and_then(|t| pem_unwrap("CROSSCERT", t))
            .ok_or("onion-key without a valid onion-key-crosscert object")?;
        verify_tap_onion_key_crosscert(&key, &cc, &d.rsa_id, &d.ed_id)
            .map_err(|_| "bad onion-key-crosscert")?;
        d.onion_key_pem = Some(key.to_pem());
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> RelayKeys {
        RelayKeys::generate(&mut rand::rngs::OsRng, 1_795_000_000).unwrap()
    }

    fn params() -> DescriptorParams {
        DescriptorParams {
            nickname: "test0".into(),
            address: Ipv4Addr::LOCALHOST,
            or_port: 5000,
            dir_port: 0,
            platform: "Tor 0.4.9.11 on Linux".into(),
            protocols: "Link=4-5 Relay=2-4".into(),
            published: 1_795_000_100,
            uptime: 5,
            bandwidth: (1 << 30, 1 << 30, 1000),
            exit_policy: vec!["accept 127.0.0.0/8:*".into(), "reject *:*".into()],
            family: vec![],
            contact: Some("x@example.invalid".into()),
            tunnelled_dir_server: false,
            hidden_service_dir: false,
            ntor_crosscert_lifetime: 7 * 86400,
            quic_port: None,
        }
    }

    #[test]
    fn signatures_verify() {
        let k = keys();
        let d = build(&k, &params()).unwrap();
        assert!(d.starts_with("router test0 127.0.0.1 5000 0 0\nidentity-ed25519\n"));
        assert!(d.ends_with("-----END SIGNATURE-----\n"));
        // RSA signature over SHA-1 of everything up to "router-signature\n".
        let cut = d.find("router-signature\n").unwrap() + "router-signature\n".len();
        let sha1: [u8; 20] = Sha1::digest(&d.as_bytes()[..cut]).into();
        let pem = &d[cut..];
        let sig = onionmix_crypto::rsa_id::pem_unwrap("SIGNATURE", pem).unwrap();
        k.rsa_identity.public().verify_raw(&sha1, &sig).unwrap();
        // Ed25519 signature.
        let sig_at = d.find("router-sig-ed25519 ").unwrap() + "router-sig-ed25519 ".len();
        let mut h = Sha256::new();
        h.update(b"Tor router descriptor signature v1");
        h.update(&d.as_bytes()[..sig_at]);
        let digest: [u8; 32] = h.finalize().into();
        let line_end = d[sig_at..].find('\n').unwrap() + sig_at;
        let sig: [u8; 64] = base64::engine::general_purpose::STANDARD_NO_PAD
            .decode(&d[sig_at..line_end])
            .unwrap()
            .try_into()
            .unwrap();
        assert!(onionmix_crypto::ed25519::verify(
            &k.ed_signing.public(),
            &digest,
            &sig
        ));
    }

    #[test]
    fn arti_parser_accepts_and_verifies_our_descriptor() {
        use tor_checkable::{SelfSigned, Timebound};
        let k = keys();
        let d = build(&k, &params()).unwrap();
        let unchecked = tor_netdoc::doc::routerdesc::RouterDesc::parse(&d)
            .unwrap_or_else(|e| panic!("tor-netdoc rejected our descriptor: {e}\n{d}"));
        let timed = unchecked.check_signature().expect("signatures");
        let when = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_795_000_200);
        let rd = timed.if_valid_at(&when).expect("valid at publication");
        assert_eq!(rd.rsa_identity().as_bytes(), &k.rsa_id());
    }

    #[test]
    fn uploads_are_verified() {
        let k = keys();
        let mut p = params();
        let now = p.published;
        p.exit_policy = vec!["accept *:80".into(), "reject *:*".into()];
        let d = build(&k, &p).unwrap();
        let with_extra = format!("{d}extra-info x 0000\n");
        let u = verify_upload(&with_extra, now).unwrap();
        assert_eq!(u.text, d);
        assert_eq!(u.rsa_id, k.rsa_id());
        assert_eq!(u.ed_id, k.ed_id());
        assert_eq!(u.policy, ["accept *:80", "reject *:*"]);
        assert!(!u.hidden_service_dir && !u.hibernating);
        p.hidden_service_dir = true;
        let hs_text = build(&k, &p).unwrap();
        assert_eq!(hs_text.matches("\nhidden-service-dir\n").count(), 1);
        let hs = verify_upload(&hs_text, now).unwrap();
        assert!(hs.hidden_service_dir);
        p.hidden_service_dir = false;
        assert_eq!(u.quic_port, None);
        // The QUIC line: Arti's parser (and so the upload check) takes the
        // unknown keyword; the authority reads the port.
        p.quic_port = Some(5001);
        let q_text = build(&k, &p).unwrap();
        assert_eq!(q_text.matches("\nonionmix-quic 5001\n").count(), 1);
        assert_eq!(verify_upload(&q_text, now).unwrap().quic_port, Some(5001));
        p.quic_port = None;
        assert!(
            u.onion_key_pem
                .as_deref()
                .unwrap()
                .starts_with("-----BEGIN RSA PUBLIC KEY-----")
        );
        let signed = &d[..d.find("router-signature\n").unwrap() + "router-signature\n".len()];
        assert_eq!(u.digest, <[u8; 20]>::from(Sha1::digest(signed.as_bytes())));
        // Any change breaks a signature.
        let bad = d.replacen("uptime ", "uptime 1", 1);
        assert!(verify_upload(&bad, now).is_err());
        assert!(verify_upload(&d, now + MAX_UPLOAD_AGE + 10).is_err());
        assert!(verify_upload(&d, now - MAX_PUBLISHED_SKEW - 10).is_err());
        assert!(verify_upload("garbage", now).is_err());
        assert!(verify_upload("", now).is_err());
    }

    /// Sign a descriptor again after editing it (both signatures).
    fn resign(d: &str, k: &RelayKeys) -> String {
        let ed_at = d.find("router-sig-ed25519 ").unwrap() + "router-sig-ed25519 ".len();
        let mut h = Sha256::new();
        h.update(b"Tor router descriptor signature v1");
        h.update(&d.as_bytes()[..ed_at]);
        let digest: [u8; 32] = h.finalize().into();
        let mut t = format!(
            "{}{}\nrouter-signature\n",
            &d[..ed_at],
            b64_nopad(&k.ed_signing.sign(&digest))
        );
        let sha1: [u8; 20] = Sha1::digest(t.as_bytes()).into();
        t.push_str(&pem_wrap(
            "SIGNATURE",
            &k.rsa_identity.sign_raw(&sha1).unwrap(),
        ));
        t
    }

    #[test]
    fn tap_onion_key_and_crosscert_are_checked() {
        // tor-netdoc ignores the TAP key, but clients parse it in the
        // microdescriptor we build from the descriptor (the routerdesc fuzz
        // target found a mangled key accepted and served).
        let k = keys();
        let p = params();
        let now = p.published;
        let d = build(&k, &p).unwrap();
        assert!(verify_upload(&resign(&d, &k), now).is_ok());
        let key = k.rsa_onion.public().to_pem();
        // Another valid key: the cross-certificate no longer matches.
        let other = RelayKeys::generate(&mut rand::rngs::OsRng, now).unwrap();
        let swapped = d.replacen(&key, &other.rsa_onion.public().to_pem(), 1);
        let e = verify_upload(&resign(&swapped, &k), now).unwrap_err();
        assert!(e.contains("crosscert"), "{e}");
        // A mangled key (exponent bytes changed) is refused.
        let mangled = d.replacen("AgMBAAE=", "AgSBAAE=", 1);
        assert_ne!(mangled, d);
        let e = verify_upload(&resign(&mangled, &k), now).unwrap_err();
        assert!(e.contains("onion-key"), "{e}");
        // Without the cross-certificate.
        let cc = d.find("onion-key-crosscert\n").unwrap();
        let cc_end = cc
            + d[cc..].find("-----END CROSSCERT-----\n").unwrap()
            + "-----END CROSSCERT-----\n".len();
        let no_cc = format!("{}{}", &d[..cc], &d[cc_end..]);
        assert!(verify_upload(&resign(&no_cc, &k), now).is_err());
        // Without the key at all (tor-netdoc accepts that; dir-spec and the
        // microdescriptor parser do not).
        let ok_at = d.find("onion-key\n").unwrap();
        let ok_end = ok_at
            + d[ok_at..].find("-----END RSA PUBLIC KEY-----\n").unwrap()
            + "-----END RSA PUBLIC KEY-----\n".len();
        let no_key = format!("{}{}", &d[..ok_at], &d[ok_end..]);
        let e = verify_upload(&resign(&no_key, &k), now).unwrap_err();
        assert!(e.contains("onion-key"), "{e}");
    }

    #[test]
    fn rejects_newlines_in_fields() {
        let k = keys();
        let mut p = params();
        p.contact = Some("a\nrouter evil".into());
        assert!(build(&k, &p).is_err());
        let mut p = params();
        p.exit_policy = vec!["accept *:*\nreject *:*".into()];
        assert!(build(&k, &p).is_err());
    }
}
