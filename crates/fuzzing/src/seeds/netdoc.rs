//! Seeds for the directory-document targets (crates/netdoc): descriptors, votes, consensuses.

use std::net::Ipv4Addr;

use onionmix_netdoc::routerdesc::{DescriptorParams, build};
use onionmix_netdoc::vote::{RouterEntry, build_detached, build_vote, sign_consensus};

use super::{Seed, cat};
use crate::fixtures::{self, NOW};
use crate::netdoc::{DETACHED_BODY, vote_header};

/// A descriptor of the fixture relay with both signatures replaced by
/// markers.
pub fn descriptor_template(policy: &[&str], family: &[&str]) -> String {
    let k = &fixtures::relay().keys;
    let p = DescriptorParams {
        nickname: "fuzzrelay".into(),
        address: Ipv4Addr::new(127, 0, 0, 1),
        or_port: 5000,
        dir_port: 0,
        platform: "Tor 0.4.9.11 on Linux".into(),
        protocols: "Cons=1-2 Desc=1-2 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4-5 HSRend=1-2 Link=1-5 LinkAuth=1,3 Microdesc=1-2 Padding=2 Relay=1-4".into(),
        published: NOW - 60,
        uptime: 3600,
        bandwidth: (1 << 20, 2 << 20, 500_000),
        exit_policy: policy.iter().map(|s| s.to_string()).collect(),
        family: family.iter().map(|s| s.to_string()).collect(),
        contact: Some("fuzz@example.invalid".into()),
        tunnelled_dir_server: true,
        hidden_service_dir: false,
        ntor_crosscert_lifetime: 7 * 86_400,
        quic_port: None,
    };
    let d = build(k, &p).expect("descriptor");
    let ed_at = d.find("router-sig-ed25519 ").expect("ed sig") + "router-sig-ed25519 ".len();
    format!("{}@EDSIG@\nrouter-signature\n@RSASIG@\n", &d[..ed_at])
}

fn vote_template() -> String {
    let a = fixtures::authority();
    let relays: Vec<RouterEntry> = (0..3u8)
        .map(|i| RouterEntry {
            nickname: format!("relay{i}"),
            rsa_id: [i + 1; 20],
            ed_id: [i + 7; 32],
            desc_digest: [i + 3; 20],
            published: NOW - 100,
            address: Ipv4Addr::new(127, 0, 0, i + 1),
            or_port: 5000 + u16::from(i),
            dir_port: 0,
            flags: [
                "Fast", "Running", "Valid", "V2Dir", "Stable", "Guard", "Exit",
            ]
            .iter()
            .take(3 + usize::from(i) * 2)
            .map(|s| s.to_string())
            .collect(),
            version: Some("Tor 0.4.9.11".into()),
            protocols: "Cons=2 Desc=2 Link=4-5 Microdesc=2 Relay=2-4".into(),
            bandwidth_kb: 1000 * u64::from(i + 1),
            policy_summary: if i == 2 {
                "accept 80,443".into()
            } else {
                "reject 1-65535".into()
            },
            md_digest: [i + 9; 32],
        })
        .collect();
    let h = vote_header(a, "fuzz@example.invalid".into(), 10000);
    let v = build_vote(&h, &relays, &a.keys.certificate, &a.keys.signing).expect("vote");
    let sig_at = v.rfind("-----BEGIN SIGNATURE-----").expect("signature");
    let v = format!("{}@SIG@\n", &v[..sig_at]);
    v.replacen(&a.keys.certificate, "@CERT@\n", 1)
        .replace(&hex::encode_upper(a.cert.id_fingerprint()), "@V3@")
        .replace(
            &hex::encode_upper(a.cert.signing_key_fingerprint()),
            "@SKFP@",
        )
}

pub(super) fn netdoc(out: &mut Vec<Seed>) {
    let consensus = fixtures::STOCK_CONSENSUS.as_bytes();
    out.push(("consensus", "stock-assumed".into(), cat(&[&[0], consensus])));
    out.push((
        "consensus",
        "stock-verified".into(),
        cat(&[&[1], consensus]),
    ));
    out.push((
        "microdesc",
        "stock".into(),
        fixtures::STOCK_MICRODESCS.as_bytes().to_vec(),
    ));
    let first_md = fixtures::STOCK_MICRODESCS
        .split("onion-key\n")
        .nth(1)
        .map(|s| format!("onion-key\n{s}"))
        .unwrap_or_default();
    out.push(("microdesc", "stock-one".into(), first_md.into_bytes()));
    out.push((
        "authcert",
        "stock-keys".into(),
        fixtures::STOCK_KEYS.as_bytes().to_vec(),
    ));
    out.push((
        "authcert",
        "stock-gencert".into(),
        fixtures::STOCK_GENCERT.as_bytes().to_vec(),
    ));
    out.push((
        "authcert",
        "fixture".into(),
        fixtures::authority().keys.certificate.as_bytes().to_vec(),
    ));
    out.push((
        "routerdesc",
        "exit".into(),
        descriptor_template(
            &[
                "accept 127.0.0.0/8:*",
                "accept *:80",
                "accept *:443",
                "reject *:*",
            ],
            &["$0123456789ABCDEF0123456789ABCDEF01234567"],
        )
        .into_bytes(),
    ));
    out.push((
        "routerdesc",
        "non-exit".into(),
        descriptor_template(&["reject *:*"], &[]).into_bytes(),
    ));
    out.push((
        "vote",
        "template".into(),
        cat(&[&[0], vote_template().as_bytes()]),
    ));
    let mut own = vec![1u8, 3];
    for i in 0..3u8 {
        own.extend([5, b'r', b'e', b'l', b'a', i, 0x01, 0xff]);
        own.extend([12]);
        own.extend(b"Tor 0.4.9.11");
        own.extend([2, 0, 80, 0, 80, 0]);
        own.extend([i; 20 + 32 + 20]);
        own.extend([0, 100, 127, 0, 0, 1, 0x13, 0x88, 0, 0, 0, 0, 0x10, 0]);
        own.extend([i + 1; 32]);
    }
    out.push(("vote", "own".into(), own));
    let a = fixtures::authority();
    let sig = sign_consensus(DETACHED_BODY, a.cert.id_fingerprint(), &a.keys.signing).expect("sig");
    let det = build_detached(NOW, NOW + 300, NOW + 900, DETACHED_BODY, &sig);
    let sig_at = det.rfind("-----BEGIN SIGNATURE-----").expect("signature");
    let det = format!("{}@SIG@\n", &det[..sig_at])
        .replace(
            &hex::encode_upper(onionmix_netdoc::vote::consensus_digest(DETACHED_BODY)),
            "@DIGEST@",
        )
        .replace(&hex::encode_upper(a.cert.id_fingerprint()), "@V3@")
        .replace(
            &hex::encode_upper(a.cert.signing_key_fingerprint()),
            "@SKFP@",
        );
    out.push(("detached_sig", "fixture".into(), det.into_bytes()));
    for f in [
        "raw-consensus-deflate.http",
        "raw-consensus-identity.http",
        "raw-keys-deflate.http",
        "raw-micro-deflate.http",
        "raw-micro-404.http",
    ] {
        let path = format!("{}/../netdoc/tests/data/{f}", env!("CARGO_MANIFEST_DIR"));
        if let Ok(b) = std::fs::read(path) {
            out.push((
                "dir_response",
                f.trim_end_matches(".http").into(),
                cat(&[&[3], &b]),
            ));
            out.push((
                "http_response",
                f.trim_end_matches(".http").into(),
                cat(&[&[0], &b]),
            ));
        }
    }
    out.push((
        "dir_response",
        "close-delimited".into(),
        cat(&[
            &[0x21],
            b"HTTP/1.0 200 OK\r\nContent-Type: text/plain\r\n\r\naccept 80\n",
        ]),
    ));
    for (sel, s) in [
        (0u8, "accept 80,443"),
        (
            0,
            "reject 25,119,135-139,445,563,1214,4661-4666,6346-6429,6699,6881-6999",
        ),
        (
            1,
            "Cons=1-2 Desc=1-2 DirCache=2 FlowCtrl=1-2 Link=1-5 Relay=1-4",
        ),
        (
            2,
            "Authority Exit Fast Guard HSDir Running Stable V2Dir Valid",
        ),
        (3, "$73EB8750A9DB5F6931BD2734F577C69D33FC92EC"),
    ] {
        out.push((
            "netdoc_types",
            format!("sel{sel}"),
            cat(&[&[sel], s.as_bytes()]),
        ));
    }
}
