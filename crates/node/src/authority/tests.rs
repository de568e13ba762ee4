#![allow(clippy::unwrap_used, clippy::expect_used)]
use super::*;
use onionmix_crypto::keys::RelayKeys;
use onionmix_netdoc::routerdesc::{DescriptorParams, build};
use onionmix_netdoc::{AuthorityConfig as ClientAuth, TimeTolerance, UnverifiedConsensus};
use std::net::Ipv4Addr;
use std::path::Path;
use std::time::UNIX_EPOCH;

fn config(dir: &Path, v3: &str) -> AuthorityConfig {
    config_with(dir, v3, "testing_network = true\n")
}

fn config_with(dir: &Path, v3: &str, extra: &str) -> AuthorityConfig {
    AuthorityConfig::parse(&format!(
        "data_dir = {:?}\nnickname = \"a0\"\nor_listen = \"127.0.0.1:1\"\ndir_listen = \"127.0.0.1:2\"\n\
         {extra}voting_interval_secs = 20\nvote_delay_secs = 4\ndist_delay_secs = 4\n\
         [[authority]]\nnickname = \"a0\"\nv3ident = \"{v3}\"\nfingerprint = \"{}\"\n\
         dir_addr = \"127.0.0.1:2\"\nor_addr = \"127.0.0.1:1\"\n",
        dir.display().to_string(),
        "AB".repeat(20)
    ))
    .unwrap()
}

fn descriptor(k: &RelayKeys) -> String {
    build(k, &params()).unwrap()
}

fn params() -> DescriptorParams {
    DescriptorParams {
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
        hidden_service_dir: false,
        ntor_crosscert_lifetime: 7 * 86400,
        quic_port: None,
    }
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
        // No HSDir: the relay neither says hidden-service-dir nor HSDir=2.
        assert_eq!(
            f,
            [
                "Exit", "Fast", "Guard", "Running", "Stable", "V2Dir", "Valid"
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

fn authority_with(dir: &Path, extra: &str) -> (Arc<Authority>, AuthorityConfig, AuthorityKeys) {
    let keys = AuthorityKeys::generate(
        &mut rand::rngs::OsRng,
        2048,
        now_unix() - 60,
        CERT_LIFETIME,
        None,
    )
    .unwrap();
    keys.save(&dir.join("keys")).unwrap();
    let cfg = config_with(dir, &keys.v3ident(), extra);
    (
        Authority::new(cfg.clone(), keys.clone()).unwrap(),
        cfg,
        keys,
    )
}

/// What stock tor 0.4.9 relays advertise.
const STOCK_PROTO: &str = "Cons=1-2 Desc=1-4 DirCache=2 FlowCtrl=1-2 HSDir=2 HSIntro=4-5 \
     HSRend=1-2 Link=3-5 LinkAuth=3 Microdesc=1-3 Padding=2 Relay=2-6";

/// Store a descriptor with `p` and return what the authority holds,
/// reachable or not.
fn stored(auth: &Authority, rk: &RelayKeys, p: &DescriptorParams, reachable: bool) -> Stored {
    // Each descriptor newer than the last (they replace each other).
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let p = DescriptorParams {
        published: now_unix() - 1000 + n,
        ..p.clone()
    };
    let d = verify_upload(&build(rk, &p).unwrap(), now_unix()).unwrap();
    let id = d.rsa_id;
    auth.store_desc(d).unwrap();
    let mut st = auth.lock();
    let s = st.descs.get_mut(&id).unwrap();
    s.reachable_at = reachable.then(Instant::now);
    s.reachable_since = reachable.then(Instant::now);
    s.clone()
}

fn hsdir(auth: &Authority, s: &Stored) -> bool {
    auth.flags_for(s).contains("HSDir")
}

#[test]
fn hsdir_flag_follows_stock_tors_rules() {
    let rk = RelayKeys::generate(&mut rand::rngs::OsRng, now_unix()).unwrap();
    let stock = DescriptorParams {
        protocols: STOCK_PROTO.into(),
        hidden_service_dir: true,
        platform: "Tor 0.4.9.11 on Linux".into(),
        ..params()
    };
    // Testing network: Stable and Fast for all, no uptime needed.
    let tmp = tempfile::tempdir().unwrap();
    let (auth, _, _) = authority_with(tmp.path(), "testing_network = true\n");
    assert!(hsdir(&auth, &stored(&auth, &rk, &stock, true)));
    for (what, p, reachable) in [
        ("onionmix relay", params(), true),
        ("not running", stock.clone(), false),
        (
            "no hidden-service-dir",
            DescriptorParams {
                hidden_service_dir: false,
                ..stock.clone()
            },
            true,
        ),
        (
            "no HSDir=2",
            DescriptorParams {
                protocols: STOCK_PROTO.replace("HSDir=2", "HSDir=1"),
                ..stock.clone()
            },
            true,
        ),
        (
            "no BEGIN_DIR",
            DescriptorParams {
                tunnelled_dir_server: false,
                ..stock.clone()
            },
            true,
        ),
    ] {
        assert!(!hsdir(&auth, &stored(&auth, &rk, &p, reachable)), "{what}");
    }
    let mut hibernating = stored(&auth, &rk, &stock, true);
    hibernating.desc.hibernating = true;
    assert!(!hsdir(&auth, &hibernating));

    // A real network: Stable (5 days here) and 96 hours of uptime.
    let tmp = tempfile::tempdir().unwrap();
    let (real, _, _) = authority_with(tmp.path(), "");
    assert_eq!(real.min_uptime_hsdir(), 96 * 3600);
    assert!(
        !hsdir(&real, &stored(&real, &rk, &stock, true)),
        "uptime 5 s"
    );
    let old = DescriptorParams {
        uptime: 6 * 86400,
        ..stock.clone()
    };
    assert!(hsdir(&real, &stored(&real, &rk, &old, true)));
    let idle = DescriptorParams {
        bandwidth: (1 << 20, 1 << 20, 0),
        ..old.clone()
    };
    assert!(!hsdir(&real, &stored(&real, &rk, &idle, true)), "not Fast");
    let tmp = tempfile::tempdir().unwrap();
    let (week, _, _) = authority_with(tmp.path(), "min_uptime_hsdir_secs = 604800\n");
    assert!(!hsdir(&week, &stored(&week, &rk, &old, true)));

    // TestingDirAuthVoteHSDir and its IsStrict twin.
    let tmp = tempfile::tempdir().unwrap();
    let (all, _, _) = authority_with(
        tmp.path(),
        "testing_network = true\ntesting_vote_hsdir = [\"*\"]\n",
    );
    assert!(hsdir(&all, &stored(&all, &rk, &params(), true)));
    let tmp = tempfile::tempdir().unwrap();
    let fp = hex::encode_upper(rk.rsa_id());
    let (strict, _, _) = authority_with(
        tmp.path(),
        "testing_network = true\ntesting_vote_hsdir = [\"someone\"]\ntesting_vote_hsdir_is_strict = true\n",
    );
    assert!(!hsdir(&strict, &stored(&strict, &rk, &stock, true)));
    let tmp = tempfile::tempdir().unwrap();
    let (listed, _, _) = authority_with(
        tmp.path(),
        &format!(
            "testing_network = true\ntesting_vote_hsdir = [\"${fp}\"]\ntesting_vote_hsdir_is_strict = true\n"
        ),
    );
    assert!(hsdir(&listed, &stored(&listed, &rk, &params(), true)));
    // Outside testing networks the testing options do nothing.
    let tmp = tempfile::tempdir().unwrap();
    let (ignored, _, _) = authority_with(tmp.path(), "testing_vote_hsdir = [\"*\"]\n");
    assert!(!hsdir(&ignored, &stored(&ignored, &rk, &params(), true)));
}

/// One voting round of a lone authority: vote, compute, publish, advance
/// the shared-random state. Returns its vote and the consensus.
fn round(auth: &Arc<Authority>, va: u64) -> (String, String) {
    let v = auth.make_vote(va).unwrap();
    auth.accept_vote(&v).unwrap();
    auth.lock().own_vote = Some(v.clone());
    auth.compute(va).unwrap();
    auth.publish(va);
    auth.sr_after_consensus(va);
    let cons = auth
        .get("/tor/status-vote/current/consensus-microdesc")
        .unwrap();
    assert!(cons.contains(&format!(
        "valid-after {}\n",
        onionmix_crypto::timefmt::format_utc(va)
    )));
    (v, cons)
}

#[test]
fn shared_random_over_two_runs_and_a_restart() {
    use onionmix_netdoc::srv::{self, Phase};
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let (mut auth, cfg, keys) = authority_with(tmp.path(), "testing_network = true\n");
    let me = keys.v3ident();
    let mode = std::fs::metadata(tmp.path().join("sr-state"))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "the state holds our reveal");
    // The state is prepared for the next round at start-up.
    let sr = auth.sr_state();
    let mut va = sr.valid_after();
    assert_eq!(va % 20, 0);
    let booted_in_commit = sr.phase() == Phase::Commit;
    assert_eq!(sr.own_commit().is_some(), booted_in_commit);
    let first = srv::run_end(va, 20);
    let second = first + 480;
    // One reachable relay, so the consensus lists something.
    let rk = RelayKeys::generate(&mut rand::rngs::OsRng, now_unix()).unwrap();
    stored(&auth, &rk, &params(), true);
    auth.save_descs();

    let mut before_first = None;
    let mut before_second = None;
    let mut first_srv = None;
    while va <= second {
        let prepared = auth.sr_state();
        assert_eq!(prepared.valid_after(), va);
        if va + 20 == first {
            before_first = Some(prepared.clone());
        }
        if va + 20 == second {
            before_second = Some(prepared);
        }
        let (vote, cons) = round(&auth, va);
        assert!(vote.contains("\nshared-rand-participate\n"));
        let commit_line = vote
            .lines()
            .find(|l| l.starts_with(&format!("shared-rand-commit 1 sha3-256 {me} ")));
        let phase = srv::phase_of(va, 20);
        match (commit_line, phase) {
            (None, _) => assert!(va < first && !booted_in_commit, "no commit at {va}"),
            // Commitment only in the commit phase, with the reveal after.
            (Some(l), Phase::Commit) => assert_eq!(l.split(' ').count(), 5, "{l}"),
            (Some(l), Phase::Reveal) => assert_eq!(l.split(' ').count(), 6, "{l}"),
        }
        let state = auth.sr_state();
        if va == first {
            // The first SRV: from our one reveal if we committed in time,
            // from none if we booted in the reveal phase (as tor).
            let cur = *state.current().unwrap();
            assert_eq!(cur.num_reveals, u64::from(booted_in_commit));
            // (Booted in the last round of a run, the authority already made
            // an SRV, from no reveals, at start-up: that is the previous one.)
            let prev_run = before_first.as_ref().unwrap();
            let prev = prev_run.current();
            assert_eq!(cur, srv::compute_srv(prev_run.commits(), prev));
            assert!(cons.contains(&format!("\nshared-rand-current-value {}\n", cur.to_args())));
            assert_eq!(cons.contains("shared-rand-previous-value"), prev.is_some());
            first_srv = Some(cur);
        }
        if va == first + 60 {
            // Restart in the commit phase: the same commitment afterwards.
            let own = state.own_commit().cloned();
            drop(auth);
            auth = Authority::new(cfg.clone(), keys.clone()).unwrap();
            auth.lock()
                .descs
                .get_mut(&rk.rsa_id())
                .unwrap()
                .reachable_at = Some(Instant::now());
            assert_eq!(auth.sr_state().own_commit().cloned(), own);
            assert_eq!(auth.sr_state().current(), first_srv.as_ref());
        }
        va += 20;
    }
    // The second run: our reveal, the first value as previous, in the
    // consensus the client code reads.
    let cons = auth
        .get("/tor/status-vote/current/consensus-microdesc")
        .unwrap();
    let run = before_second.unwrap();
    assert!(run.commits().all(|c| c.reveal_matches()));
    let want = srv::compute_srv(run.commits(), first_srv.as_ref());
    assert_eq!(want.num_reveals, 1);
    let cert = AuthCertificate::parse(&keys.certificate, crate::clock::now()).unwrap();
    let c = UnverifiedConsensus::parse(&cons)
        .unwrap()
        .verify(
            &[ClientAuth::new("a0", keys.identity.public().fingerprint())],
            &[cert],
            UNIX_EPOCH + Duration::from_secs(second + 1),
            TimeTolerance::default(),
        )
        .unwrap();
    assert_eq!(c.shared_rand_current(), Some(&want));
    assert_eq!(c.shared_rand_previous(), first_srv.as_ref());
}
