#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use onionmix_crypto::keys::RelayKeys;
use onionmix_netdoc::routerdesc::{DescriptorParams, build};
use onionmix_netdoc::{AuthorityConfig as ClientAuth, TimeTolerance, UnverifiedConsensus};
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::UNIX_EPOCH;

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
