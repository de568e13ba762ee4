//! crates/netdoc: directory documents (consensus, microdescriptors,
//! authority key certificates, router descriptors, votes, detached
//! signatures), the directory HTTP response codec, and the small value
//! types documents carry.
//!
//! Signed documents: an input may carry markers that the target replaces
//! before parsing, so the fuzzer mutates the document while the signature
//! stays good and the code after the signature check runs:
//!
//! | marker | replaced by |
//! | --- | --- |
//! | `@CERT@\n` | the fixture authority's key certificate |
//! | `@V3@` | its v3 identity (hex) |
//! | `@SKFP@` | its signing key's fingerprint (hex) |
//! | `@DIGEST@` | SHA-256 of [`DETACHED_BODY`] as a consensus digest (hex) |
//! | `@SIG@\n` | the authority's signature of the document (PEM) |
//! | `@EDSIG@` | the fixture relay's `router-sig-ed25519` value |
//! | `@RSASIG@\n` | the fixture relay's `router-signature` object |

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::sync::OnceLock;

use base64::Engine;
use sha1::Digest as _;

use onionmix_crypto::rsa_id::pem_wrap;
use onionmix_netdoc::dirclient::parse_response;
use onionmix_netdoc::routerdesc::verify_upload;
use onionmix_netdoc::vote::{
    self, MicrodescParts, RouterEntry, VoteHeader, assemble_consensus, build_microdesc, build_vote,
    compute_consensus, consensus_digest, parse_detached, parse_vote, sign_consensus,
};
use onionmix_netdoc::{
    AuthCertificate, AuthorityConfig, ExitTarget, GuardParams, GuardSet, Microdesc, NetDir,
    PathBuilder, PathConfig, PortPolicy, Protocols, RelayFlags, RelayId, ResponseParser,
    TimeTolerance, UnverifiedConsensus, parse_microdescs,
};
use onionmix_proto::exitpolicy::{ExitPolicy, PortSummary};

use crate::fixtures::{self, NOW};
use crate::input::{Input, chunks};

fn text(data: &[u8]) -> Option<&str> {
    std::str::from_utf8(data).ok()
}

fn b64_nopad(d: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD_NO_PAD.encode(d)
}

fn stock_microdescs() -> &'static [Microdesc] {
    static M: OnceLock<Vec<Microdesc>> = OnceLock::new();
    M.get_or_init(|| parse_microdescs(fixtures::STOCK_MICRODESCS).microdescs)
}

/// A NetDir of the stock consensus, without microdescriptors.
fn stock_netdir() -> Option<&'static NetDir> {
    static ND: OnceLock<Option<NetDir>> = OnceLock::new();
    ND.get_or_init(|| {
        let u = UnverifiedConsensus::parse(fixtures::STOCK_CONSENSUS).ok()?;
        Some(NetDir::new(u.dangerously_assume_verified()))
    })
    .as_ref()
}

/// Build this module's fixtures.
pub(crate) fn warm_up() {
    let _ = stock_microdescs();
    let _ = stock_netdir();
    let _ = authority_markers();
}

/// Use a consensus the way a client does once it is verified: a NetDir
/// with the stock microdescriptors, guard sampling and path selection.
fn use_netdir(mut nd: NetDir) {
    nd.add_microdescs(stock_microdescs().iter().cloned());
    let _ = nd.missing_microdescs();
    let _ = nd.usable_fraction();
    let _ = nd.has_enough_dir_info(None);
    let _ = nd.params();
    let _ = nd.weights();
    let mut rng = fixtures::rng(7);
    let config = PathConfig::testing_network();
    let mut guards = GuardSet::new(GuardParams::default());
    guards.update(&nd, fixtures::netdoc_now(), &mut rng);
    let pb = PathBuilder::new(&nd, &config);
    for target in [
        ExitTarget::Port(80),
        ExitTarget::AnyPort,
        ExitTarget::Internal,
    ] {
        let _ = pb.exit_path(&mut rng, target);
    }
    let _ = pb.one_hop_dir_path(&mut rng);
    let with_guards = PathBuilder::new(&nd, &config).with_guards(&guards, fixtures::netdoc_now());
    let _ = with_guards.exit_path(&mut rng, ExitTarget::Port(443));
    let _ = with_guards.one_hop_dir_path(&mut rng);
}

/// A microdesc-flavoured consensus (what clients fetch). First byte: bit 0
/// set checks signatures against the stock tor authorities (whose
/// certificates are fixtures); clear goes on as if a majority of
/// authorities had signed it: a NetDir, guards, paths.
pub fn consensus(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let Some(t) = text(rest) else { return };
    let Ok(u) = UnverifiedConsensus::parse(t) else {
        return;
    };
    let lt = u.lifetime();
    let _ = lt.is_live(fixtures::netdoc_now());
    let _ = lt.refresh_window();
    let _ = lt.pick_refresh_time(&mut fixtures::rng(1));
    let _ = u.signing_keys();
    let _ = u.missing_certificates(
        fixtures::stock_authorities(),
        fixtures::stock_certs(),
        fixtures::netdoc_now(),
    );
    let c = if sel & 1 == 1 {
        match u.verify(
            fixtures::stock_authorities(),
            fixtures::stock_certs(),
            fixtures::netdoc_now(),
            TimeTolerance::default(),
        ) {
            Ok(c) => c,
            Err(_) => return,
        }
    } else {
        u.dangerously_assume_verified()
    };
    let _ = c.bandwidth_weights();
    let _ = c.required_client_protocols();
    let _ = c.param("circwindow", 1000, 100, 1000);
    let _ = c.md_digests().count();
    use_netdir(NetDir::new(c));
}

/// Microdescriptors (a `/tor/micro/d/...` body). Each one parsed from a
/// batch must parse alone to the same result, and a NetDir of the stock
/// consensus takes those it lists.
pub fn microdesc(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let batch = parse_microdescs(t);
    if batch.errors.is_empty() && batch.microdescs.len() == 1 {
        let one = Microdesc::parse(t).expect("a batch of one parses alone");
        assert_eq!(one.digest, batch.microdescs[0].digest);
    }
    for md in &batch.microdescs {
        let _ = md.ipv4_policy.allows_port(80);
        let _ = md.ipv6_policy.allows_some_port();
    }
    // Only a batch with something in it changes the NetDir (cloning it is
    // most of an execution otherwise).
    if !batch.microdescs.is_empty()
        && let Some(nd) = stock_netdir()
    {
        let mut nd = nd.clone();
        nd.add_microdescs(batch.microdescs);
        let _ = nd.usable_fraction();
    }
    let _ = Microdesc::parse(t);
}

/// Authority key certificates (a `/tor/keys/...` body), checked at the
/// stock network's time, then merged into a client's store.
pub fn authcert(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let certs: Vec<AuthCertificate> = AuthCertificate::parse_all(t, fixtures::netdoc_now())
        .into_iter()
        .filter_map(Result::ok)
        .collect();
    for c in &certs {
        assert!(c.check_time(fixtures::netdoc_now()).is_ok());
        let _ = c.dir_address();
    }
    let mut store = fixtures::stock_certs().to_vec();
    onionmix_netdoc::merge_certificates(
        &mut store,
        certs,
        fixtures::stock_authorities(),
        fixtures::netdoc_now(),
        16,
    );
    assert!(store.len() <= 16);
    let _ = AuthCertificate::parse(t, fixtures::netdoc_now());
}

/// Replace the marker at `at` (`len` bytes) with `with`.
fn splice(t: &mut String, at: usize, len: usize, with: &str) {
    t.replace_range(at..at + len, with);
}

/// Whether the targets sign what the signing markers stand for. Fuzzing
/// builds (`cfg(fuzzing)`, set by cargo-fuzz) do not: there the vote and
/// router descriptor signature checks accept any well-formed signature
/// (`FUZZING_ACCEPTS_SIGNATURES` in onionmix-netdoc, as tor's fuzzing
/// harness does), so the markers get stand-ins and no RSA or Ed25519
/// signature is made per execution. Every other build, the stable corpus
/// test included, signs and checks for real.
const SIGN_INPUTS: bool = !cfg!(fuzzing);

/// A well-formed stand-in for a 1024-bit RSA signature (fuzzing builds).
fn stand_in_rsa_signature() -> Vec<u8> {
    vec![0; 128]
}

/// Sign a router descriptor template with the fixture relay's keys.
fn sign_descriptor(mut t: String) -> String {
    let keys = &fixtures::relay().keys;
    const ED: &str = "router-sig-ed25519 @EDSIG@";
    if let Some(i) = t.find(ED) {
        let upto = i + "router-sig-ed25519 ".len();
        let sig = if SIGN_INPUTS {
            let mut h = sha2::Sha256::new();
            h.update(b"Tor router descriptor signature v1");
            h.update(&t.as_bytes()[..upto]);
            let digest: [u8; 32] = h.finalize().into();
            keys.ed_signing.sign(&digest)
        } else {
            [0; 64]
        };
        splice(&mut t, upto, "@EDSIG@".len(), &b64_nopad(&sig));
    }
    const RSA: &str = "router-signature\n@RSASIG@\n";
    if let Some(i) = t.find(RSA) {
        let upto = i + "router-signature\n".len();
        let sig = if SIGN_INPUTS {
            let sha1: [u8; 20] = sha1::Sha1::digest(&t.as_bytes()[..upto]).into();
            keys.rsa_identity.sign_raw(&sha1).ok()
        } else {
            Some(stand_in_rsa_signature())
        };
        if let Some(sig) = sig {
            splice(
                &mut t,
                upto,
                "@RSASIG@\n".len(),
                &pem_wrap("SIGNATURE", &sig),
            );
        }
    }
    t
}

/// A router descriptor as a relay uploads it to an authority (signing
/// markers are filled in with the fixture relay's keys). A descriptor the
/// authority accepts must become a microdescriptor that clients parse,
/// with the policy summary the authority computed.
pub fn routerdesc(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let body = sign_descriptor(t.to_string());
    let Ok(d) = verify_upload(&body, NOW) else {
        return;
    };
    assert!(body.contains(&d.text));
    // What the authority does with an accepted descriptor.
    let summary = ExitPolicy::parse(&d.policy)
        .map(|p| p.summary(false).to_line_value())
        .unwrap_or_else(|_| "reject 1-65535".into());
    let parsed = PortSummary::parse(&summary).expect("our own summary parses");
    assert_eq!(parsed.to_line_value(), summary, "summary round trip");
    let parts = MicrodescParts {
        onion_key_pem: d.onion_key_pem.clone(),
        ntor_onion_key: d.ntor_onion_key,
        family: d.family.clone(),
        policy_summary: summary.clone(),
        ed_id: d.ed_id,
        quic_port: d.quic_port,
    };
    let (md_text, md_digest) = build_microdesc(&parts);
    let md = Microdesc::parse(&md_text).expect("clients parse the microdescriptor we build");
    assert_eq!(md.digest, md_digest);
    assert_eq!(md.ntor_onion_key, d.ntor_onion_key);
    assert_eq!(md.ed25519_id, d.ed_id);
    let _ = vote::version_from_platform(&d.platform);
}

/// What the authority markers stand for (see the module docs), and the
/// fixture authority's signature on [`DETACHED_BODY`]: the same for every
/// input, so made once rather than per execution.
struct AuthorityMarkers {
    v3: String,
    skfp: String,
    digest: [u8; 32],
    digest_hex: String,
    detached_sig_pem: String,
}

fn authority_markers() -> &'static AuthorityMarkers {
    static M: OnceLock<AuthorityMarkers> = OnceLock::new();
    M.get_or_init(|| {
        let a = fixtures::authority();
        let digest = consensus_digest(DETACHED_BODY);
        let sig = sign_consensus(DETACHED_BODY, a.cert.id_fingerprint(), &a.keys.signing)
            .expect("signing cannot fail");
        AuthorityMarkers {
            v3: hex::encode_upper(a.cert.id_fingerprint()),
            skfp: hex::encode_upper(a.cert.signing_key_fingerprint()),
            digest,
            digest_hex: hex::encode_upper(digest),
            detached_sig_pem: pem_wrap("SIGNATURE", &sig.signature),
        }
    })
}

/// Fill in a vote or detached-signature template (see the module docs).
fn fill_authority_markers(t: &str) -> String {
    let m = authority_markers();
    t.replacen("@CERT@\n", &fixtures::authority().keys.certificate, 1)
        .replace("@V3@", &m.v3)
        .replace("@SKFP@", &m.skfp)
        .replace("@DIGEST@", &m.digest_hex)
}

/// Sign a vote template: the last `@SIG@\n` after the last
/// `directory-signature ` line becomes the authority's signature.
fn sign_vote(mut t: String) -> String {
    let Some(sig_at) = t.rfind("\ndirectory-signature ") else {
        return t;
    };
    let signed_end = sig_at + 1 + "directory-signature ".len();
    let Some(m) = t.rfind("@SIG@\n").filter(|m| *m > signed_end) else {
        return t;
    };
    let sig = if SIGN_INPUTS {
        let digest: [u8; 20] = sha1::Sha1::digest(&t.as_bytes()[..signed_end]).into();
        fixtures::authority().keys.signing.sign_raw(&digest).ok()
    } else {
        Some(stand_in_rsa_signature())
    };
    if let Some(sig) = sig {
        splice(&mut t, m, "@SIG@\n".len(), &pem_wrap("SIGNATURE", &sig));
    }
    t
}

/// The fixture authority as a configured authority.
fn fixture_authority_config() -> AuthorityConfig {
    AuthorityConfig::new("fuzzauth", fixtures::authority().cert.id_fingerprint())
}

/// Compute, sign and re-parse a consensus from verified votes: what our
/// authority publishes, clients must parse and verify. (Fuzzing builds
/// sign it with a stand-in and skip the signature checks: see
/// [`SIGN_INPUTS`].)
fn consensus_from(votes: &[vote::Vote]) {
    let Ok(body) = compute_consensus(votes, 1, vote::SrParams::default()) else {
        return;
    };
    // tor-netdoc 0.47 cannot parse a consensus without router entries (its
    // voter section runs into `directory-footer`); there is nothing in one
    // for a client to use anyway.
    if !body.contains("\nr ") {
        return;
    }
    let a = fixtures::authority();
    let sig = if SIGN_INPUTS {
        let sig = sign_consensus(&body, a.cert.id_fingerprint(), &a.keys.signing)
            .expect("signing cannot fail");
        assert!(vote::check_consensus_signature(&body, &sig, &a.cert));
        sig
    } else {
        vote::ConsensusSignature {
            identity: a.cert.id_fingerprint(),
            signing_key: a.cert.signing_key_fingerprint(),
            signature: stand_in_rsa_signature(),
        }
    };
    let text = assemble_consensus(&body, &[sig]);
    let u = UnverifiedConsensus::parse(&text)
        .unwrap_or_else(|e| panic!("clients refuse our consensus: {e}\n{text}"));
    let c = if SIGN_INPUTS {
        let at = u.lifetime().valid_after;
        // The signature checks only while our key certificate is valid.
        if a.cert.check_time(at).is_err() {
            return;
        }
        u.verify(
            &[fixture_authority_config()],
            std::slice::from_ref(&a.cert),
            at,
            TimeTolerance::STRICT,
        )
        .unwrap_or_else(|e| panic!("our consensus does not verify: {e}\n{text}"))
    } else {
        u.dangerously_assume_verified()
    };
    use_netdir(NetDir::new(c));
}

/// A status vote from a peer authority. First byte selects: bit 0 clear,
/// the rest is vote text (with the signing markers); set, the rest
/// describes relays that an authority puts in its own vote. A vote that
/// parses must yield a consensus that clients accept.
pub fn vote(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if sel & 1 == 0 {
        let Some(t) = text(rest) else { return };
        let t = sign_vote(fill_authority_markers(t));
        let Ok(v) = parse_vote(&t, fixtures::now()) else {
            return;
        };
        assert_eq!(v.header.v3ident, v.certificate.id_fingerprint());
        consensus_from(std::slice::from_ref(&v));
    } else {
        own_vote(rest);
    }
}

/// The fixture authority's vote header at [`NOW`], with `contact` and the
/// `bwweightscale` parameter from the caller.
pub(crate) fn vote_header(
    a: &fixtures::AuthorityFixture,
    contact: String,
    bwweightscale: i32,
) -> VoteHeader {
    VoteHeader {
        nickname: "fuzzauth".into(),
        v3ident: a.cert.id_fingerprint(),
        address: Ipv4Addr::LOCALHOST,
        dir_port: 7000,
        or_port: 7001,
        contact,
        published: NOW,
        valid_after: NOW,
        fresh_until: NOW + 300,
        valid_until: NOW + 900,
        voting_delay: (20, 20),
        known_flags: FLAGS.iter().map(|f| f.to_string()).collect(),
        protocols: vote::default_protocol_lines(),
        params: [("bwweightscale".to_string(), bwweightscale)]
            .into_iter()
            .collect(),
        shared_rand: Default::default(),
    }
}

/// Flags an authority votes on.
const FLAGS: [&str; 9] = [
    "Authority",
    "Exit",
    "Fast",
    "Guard",
    "HSDir",
    "Running",
    "Stable",
    "V2Dir",
    "Valid",
];

/// A legal relay nickname made from input bytes (1-19 alphanumerics).
fn nickname(inp: &mut Input<'_>) -> String {
    let n = usize::from(inp.u8() % 19) + 1;
    let s: String = inp
        .bytes(n)
        .iter()
        .map(|b| {
            let c = b % 62;
            char::from(match c {
                0..=9 => b'0' + c,
                10..=35 => b'a' + c - 10,
                _ => b'A' + c - 36,
            })
        })
        .collect();
    if s.is_empty() { "x".into() } else { s }
}

/// Printable ASCII (what a descriptor's `platform` can hold).
fn printable(inp: &mut Input<'_>, max: usize) -> String {
    let n = usize::from(inp.u8()) % (max + 1);
    inp.bytes(n)
        .iter()
        .map(|b| char::from(0x20 + b % 0x5f))
        .collect()
}

/// Build our own vote from fuzzed relay entries (as an authority would
/// from accepted descriptors), then parse it back and compute the
/// consensus.
fn own_vote(data: &[u8]) {
    let mut inp = Input::new(data);
    let a = fixtures::authority();
    let mut relays = Vec::new();
    let n = inp.u8() % 8;
    for _ in 0..n {
        let nick = nickname(&mut inp);
        let flags_mask = inp.u16();
        let flags: BTreeSet<String> = FLAGS
            .iter()
            .enumerate()
            .filter(|(i, _)| flags_mask & (1 << i) != 0)
            .map(|(_, f)| f.to_string())
            .collect();
        let platform = printable(&mut inp, 60);
        let policy: Vec<String> = (0..inp.u8() % 4)
            .map(|_| {
                let (lo, hi) = (inp.u16(), inp.u16());
                let kw = if inp.u8() & 1 == 0 {
                    "accept"
                } else {
                    "reject"
                };
                format!("{kw} *:{}-{}", lo.min(hi).max(1), lo.max(hi).max(1))
            })
            .collect();
        let summary = ExitPolicy::parse(&policy)
            .map(|p| p.summary(false).to_line_value())
            .unwrap_or_else(|_| "reject 1-65535".into());
        relays.push(RouterEntry {
            nickname: nick,
            rsa_id: inp.array(),
            ed_id: inp.array(),
            desc_digest: inp.array(),
            published: NOW - u64::from(inp.u16()),
            address: Ipv4Addr::from(inp.u32()),
            or_port: inp.u16(),
            dir_port: inp.u16(),
            flags,
            version: vote::version_from_platform(&platform),
            protocols: "Cons=2 Desc=2 Link=4-5 Microdesc=2 Relay=2-4".into(),
            bandwidth_kb: u64::from(inp.u32()),
            policy_summary: summary,
            md_digest: {
                let mut d: [u8; 32] = inp.array();
                d[0] |= 1;
                d
            },
        });
    }
    let h = vote_header(a, printable(&mut inp, 40), i32::from(inp.u16()));
    let text = build_vote(&h, &relays, &a.keys.certificate, &a.keys.signing)
        .expect("building a vote cannot fail");
    let v = parse_vote(&text, fixtures::now())
        .unwrap_or_else(|e| panic!("our vote does not parse: {e}\n{text}"));
    relays.sort_by_key(|r| r.rsa_id);
    relays.dedup_by_key(|r| r.rsa_id);
    assert_eq!(v.relays, relays, "vote round trip");
    consensus_from(std::slice::from_ref(&v));
}

/// The consensus body detached signatures refer to in this target.
pub const DETACHED_BODY: &str = "network-status-version 3 microdesc\nvote-status consensus\n";

/// A detached signature document (a peer authority's signature on the
/// consensus), with the signing markers filled in.
pub fn detached_sig(data: &[u8]) {
    let Some(t) = text(data) else { return };
    let mut t = fill_authority_markers(t);
    if let Some(m) = t.find("@SIG@\n") {
        splice(
            &mut t,
            m,
            "@SIG@\n".len(),
            &authority_markers().detached_sig_pem,
        );
    }
    let Ok(d) = parse_detached(&t) else { return };
    let ok = d.verify(DETACHED_BODY, &fixtures::authority().cert);
    if ok {
        assert_eq!(d.digest, authority_markers().digest);
    }
}

/// Largest body accepted, by the selector's bits 0-1.
const MAX_BODY: [usize; 4] = [1 << 10, 64 << 10, 1 << 20, 16 << 20];

/// A directory server's HTTP answer read by a client (`ResponseParser`):
/// fed in pieces (selector bits 2-7 pick the chunk sizes) it must give
/// the same answer as parsed whole. A decoded body goes to the parser of
/// the document it looks like.
pub fn dir_response(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let max = MAX_BODY[usize::from(sel & 3)];
    let whole = parse_response(rest, max);
    let mut p = ResponseParser::new(max);
    let mut failed = false;
    for r in chunks(rest.len(), &[sel >> 2, sel.rotate_left(3), 255]) {
        if p.push(&rest[r]).is_err() {
            failed = true;
            break;
        }
        let _ = p.is_complete();
        let _ = p.status();
    }
    let pieces = if failed { None } else { p.finish().ok() };
    assert_eq!(
        whole.as_ref().ok(),
        pieces.as_ref(),
        "split response differs"
    );
    let Ok(resp) = whole else { return };
    let _ = resp.header("content-encoding");
    let Ok(body) = resp.body_text() else { return };
    if body.starts_with("network-status-version") {
        let _ = UnverifiedConsensus::parse(body);
    } else if body.contains("dir-key-certificate-version") {
        let _ = AuthCertificate::parse_all(body, fixtures::netdoc_now());
    } else {
        let _ = parse_microdescs(body);
    }
}

/// Values documents carry: port policy summaries, protocol lists, flag
/// lists, relay IDs. Each must print to a string that parses back to it.
pub fn netdoc_types(data: &[u8]) {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    let Some(t) = text(rest) else { return };
    match sel % 4 {
        0 => {
            if let Ok(p) = t.parse::<PortPolicy>() {
                let s = p.to_string();
                assert_eq!(s.parse::<PortPolicy>().as_ref(), Ok(&p), "{s}");
                let _ = p.allows_port(443);
            }
        }
        1 => {
            if let Ok(p) = t.parse::<Protocols>() {
                let s = p.to_string();
                assert_eq!(s.parse::<Protocols>().as_ref(), Ok(&p), "{s}");
                let _ = p.missing_from(&p);
            }
        }
        2 => {
            if let Ok(f) = t.parse::<RelayFlags>() {
                assert_eq!(f.to_string().parse::<RelayFlags>(), Ok(f));
            }
        }
        _ => {
            if let Ok(id) = t.parse::<RelayId>() {
                assert_eq!(id.to_string().parse::<RelayId>(), Ok(id));
            }
        }
    }
}
