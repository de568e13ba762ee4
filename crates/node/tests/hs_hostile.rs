//! Hostile input to the relay's onion-service roles: forged, replayed,
//! truncated and misplaced cells, unknown keys and cookies, full tables,
//! bad and oversized descriptors, and random bytes under every
//! onion-service command. Each gets a clear refusal (a NACK, a 400, or the
//! circuit closed), the matching counter moves, nothing panics, and the
//! relay keeps serving honest users afterwards.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod hs_support;

use std::sync::atomic::{AtomicUsize, Ordering};

use onionmix_cell::hs::{Introduce, intro_status};
use onionmix_cell::relay::RelayCmd;
use onionmix_crypto::Ed25519Keypair;
use onionmix_hs::intro::establish_intro;
use onionmix_node::relay::RelayCtx;
use rand::{Rng, RngCore};

use hs_support::{Got, RawCirc, start_relay};

static PANICS: AtomicUsize = AtomicUsize::new(0);

fn count_panics() {
    let prev = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        PANICS.fetch_add(1, Ordering::SeqCst);
        prev(info);
    }));
}

fn count(ctx: &RelayCtx, name: &str) -> u64 {
    ctx.hs
        .stats
        .snapshot()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .1
}

fn introduce1(auth_key: [u8; 32]) -> Vec<u8> {
    Introduce {
        legacy_key_id: [0; 20],
        auth_key,
        extensions: Vec::new(),
        encrypted: vec![7; 150],
    }
    .encode()
    .unwrap()
}

fn status(resp: &[u8]) -> u16 {
    onionmix_http::parse_response_head(resp, &onionmix_http::Limits::DEFAULT)
        .unwrap()
        .unwrap()
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_onion_service_cells_are_refused() {
    count_panics();
    let tmp = tempfile::tempdir().unwrap();
    let (_e, entry) = start_relay(tmp.path(), "entry", "").await;
    let (ctx, hs) = start_relay(
        tmp.path(),
        "victim",
        "hs_max_rend_cookies = 2\nhs_max_intro_circuits = 1",
    )
    .await;
    let auth = Ed25519Keypair::generate(&mut rand::rngs::OsRng);

    // ESTABLISH_INTRO with a MAC under another circuit's KH (a replay of
    // a valid cell, or a forgery): refused, circuit closed.
    let mut a = RawCirc::build(&[&entry, &hs]).await;
    let valid_for_a = establish_intro(&auth, &a.kh[1], None).unwrap();
    let mut b = RawCirc::build(&[&entry, &hs]).await;
    b.send(1, RelayCmd::ESTABLISH_INTRO, 0, &valid_for_a);
    b.expect_destroyed().await;
    assert_eq!(count(&ctx, "intro_bad_mac"), 1);
    // A bad signature.
    let mut forged = valid_for_a.clone();
    *forged.last_mut().unwrap() ^= 1;
    a.send(1, RelayCmd::ESTABLISH_INTRO, 0, &forged);
    a.expect_destroyed().await;
    assert_eq!(count(&ctx, "intro_bad_signature"), 1);
    // Truncated, empty, legacy key type, trailing garbage.
    let mut c = RawCirc::build(&[&entry, &hs]).await;
    let good = establish_intro(&auth, &c.kh[1], None).unwrap();
    let mut trailing = good.clone();
    trailing.push(0);
    for bad in [
        good[..good.len() - 10].to_vec(),
        Vec::new(),
        {
            let mut v = good.clone();
            v[0] = 0;
            v
        },
        trailing,
    ] {
        let mut c = RawCirc::build(&[&entry, &hs]).await;
        c.send(1, RelayCmd::ESTABLISH_INTRO, 0, &bad);
        c.expect_destroyed().await;
    }
    assert_eq!(count(&ctx, "intro_malformed"), 4);
    // The honest one works; a second ESTABLISH_INTRO on it closes it (an
    // introduction circuit takes no other role).
    c.send(1, RelayCmd::ESTABLISH_INTRO, 0, &good);
    assert_eq!(c.expect(RelayCmd::INTRO_ESTABLISHED).await, vec![0]);
    // The table holds one key: a second service is refused.
    let other = Ed25519Keypair::generate(&mut rand::rngs::OsRng);
    let mut d = RawCirc::build(&[&entry, &hs]).await;
    let cell = establish_intro(&other, &d.kh[1], None).unwrap();
    d.send(1, RelayCmd::ESTABLISH_INTRO, 0, &cell);
    d.expect_destroyed().await;
    assert_eq!(count(&ctx, "intro_table_full"), 1);
    let again = establish_intro(&auth, &c.kh[1], None).unwrap();
    c.send(1, RelayCmd::ESTABLISH_INTRO, 0, &again);
    c.expect_destroyed().await;
    assert_eq!(count(&ctx, "intro_unsuitable"), 1);

    // INTRODUCE1 for unknown keys: NACK each time, nothing relayed.
    for _ in 0..5 {
        let mut cl = RawCirc::build(&[&entry, &hs]).await;
        cl.send(1, RelayCmd::INTRODUCE1, 0, &introduce1(rand::random()));
        assert_eq!(
            cl.expect(RelayCmd::INTRODUCE_ACK).await,
            vec![0, intro_status::UNKNOWN_SERVICE as u8, 0]
        );
    }
    assert_eq!(count(&ctx, "introduce1_unknown_service"), 5);
    // Shorter than a digest: closed without an answer.
    let mut cl = RawCirc::build(&[&entry, &hs]).await;
    cl.send(1, RelayCmd::INTRODUCE1, 0, &[0; 19]);
    cl.expect_destroyed().await;
    // Legacy key id not zero: bad format.
    let mut cl = RawCirc::build(&[&entry, &hs]).await;
    let mut v = introduce1(auth.public());
    v[0] = 1;
    cl.send(1, RelayCmd::INTRODUCE1, 0, &v);
    assert_eq!(
        cl.expect(RelayCmd::INTRODUCE_ACK).await,
        vec![0, intro_status::BAD_FORMAT as u8, 0]
    );

    // Rendezvous: bad lengths, unknown cookies, roles mixed, a full table.
    for len in [0usize, 19, 21, 400] {
        let mut r = RawCirc::build(&[&entry, &hs]).await;
        r.send(1, RelayCmd::ESTABLISH_RENDEZVOUS, 0, &vec![1; len]);
        r.expect_destroyed().await;
    }
    for data in [vec![0u8; 5], {
        let mut v = vec![0u8; 84];
        rand::rngs::OsRng.fill_bytes(&mut v);
        v
    }] {
        let mut r = RawCirc::build(&[&entry, &hs]).await;
        r.send(1, RelayCmd::RENDEZVOUS1, 0, &data);
        r.expect_destroyed().await;
    }
    assert_eq!(count(&ctx, "rend1_refused"), 1);
    assert_eq!(count(&ctx, "rend1_unknown_cookie"), 1);
    let mut w1 = RawCirc::build(&[&entry, &hs]).await;
    w1.send(1, RelayCmd::ESTABLISH_RENDEZVOUS, 0, &[1; 20]);
    w1.expect(RelayCmd::RENDEZVOUS_ESTABLISHED).await;
    // A waiting circuit cannot also send RENDEZVOUS1 or INTRODUCE1.
    let mut w2 = RawCirc::build(&[&entry, &hs]).await;
    w2.send(1, RelayCmd::ESTABLISH_RENDEZVOUS, 0, &[2; 20]);
    w2.expect(RelayCmd::RENDEZVOUS_ESTABLISHED).await;
    let mut r1 = [2u8; 20].to_vec();
    r1.extend_from_slice(&[0; 64]);
    w2.send(1, RelayCmd::RENDEZVOUS1, 0, &r1);
    w2.expect_destroyed().await;
    let mut w3 = RawCirc::build(&[&entry, &hs]).await;
    w3.send(1, RelayCmd::ESTABLISH_RENDEZVOUS, 0, &[3; 20]);
    w3.expect(RelayCmd::RENDEZVOUS_ESTABLISHED).await;
    let mut w4 = RawCirc::build(&[&entry, &hs]).await;
    w4.send(1, RelayCmd::ESTABLISH_RENDEZVOUS, 0, &[4; 20]);
    w4.expect_destroyed().await;
    assert_eq!(count(&ctx, "rend_table_full"), 1);
    assert_eq!(ctx.hs.rend().len(), 2);

    // Cells meant for clients and services are dropped, the circuit
    // stays.
    let mut x = RawCirc::build(&[&entry, &hs]).await;
    for cmd in [35u8, 37, 38, 39, 40] {
        x.send(1, RelayCmd(cmd), 0, b"whatever");
    }
    let mut cl_ok = x;
    cl_ok.send(1, RelayCmd::INTRODUCE1, 0, &introduce1(rand::random()));
    assert_eq!(
        cl_ok.expect(RelayCmd::INTRODUCE_ACK).await,
        vec![0, intro_status::UNKNOWN_SERVICE as u8, 0]
    );
    assert_eq!(count(&ctx, "hs_cells_ignored"), 5);

    // Random bytes under every onion-service command, on fresh circuits.
    let mut rng = rand::thread_rng();
    for i in 0..60u32 {
        let mut r = RawCirc::build(&[&entry, &hs]).await;
        let cmd = RelayCmd(32 + (i % 9) as u8);
        let len = rng.gen_range(0..=hs_support::CELL_DATA);
        let mut data = vec![0u8; len];
        rng.fill_bytes(&mut data);
        r.send(1, cmd, 0, &data);
        // Whatever the answer, the relay must give one or close: ask for
        // a round trip that always answers (an unknown-key INTRODUCE1 on
        // a fresh circuit).
        drop(r);
    }
    let mut probe = RawCirc::build(&[&entry, &hs]).await;
    probe.send(1, RelayCmd::INTRODUCE1, 0, &introduce1([0xee; 32]));
    assert!(matches!(probe.recv().await, Got::Msg { cmd, .. } if cmd == RelayCmd::INTRODUCE_ACK));

    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a relay task panicked");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_descriptor_uploads_are_refused() {
    count_panics();
    let tmp = tempfile::tempdir().unwrap();
    let (_e, entry) = start_relay(tmp.path(), "entry", "").await;
    let (ctx, hsdir) = start_relay(tmp.path(), "hsdir", "").await;
    let mut c = RawCirc::build(&[&entry, &hsdir]).await;
    let post = |body: &[u8]| {
        let mut v = format!(
            "POST /tor/hs/3/publish HTTP/1.0\r\nContent-Length: {}\r\n\r\n",
            body.len()
        )
        .into_bytes();
        v.extend_from_slice(body);
        v
    };
    let mut sid = 1u16;
    let mut ask = async |c: &mut RawCirc, req: Vec<u8>| {
        sid += 2;
        c.dir_request(sid, &req).await
    };
    // Garbage, not UTF-8, oversized (60 000 bytes), a lying length.
    assert_eq!(status(&ask(&mut c, post(b"hello")).await), 400);
    assert_eq!(status(&ask(&mut c, post(&[0xff; 100])).await), 400);
    let mut big = b"hs-descriptor 3\n".to_vec();
    big.resize(60_000, b'a');
    assert_eq!(status(&ask(&mut c, post(&big)).await), 400);
    assert_eq!(count(&ctx, "hsdir_too_large"), 1);
    let huge_len = b"POST /tor/hs/3/publish HTTP/1.0\r\nContent-Length: 99999999\r\n\r\n".to_vec();
    assert_eq!(status(&ask(&mut c, huge_len).await), 400);
    // Wrong publish path and version.
    let bad_path = b"POST /tor/hs/2/publish HTTP/1.0\r\nContent-Length: 1\r\n\r\nx".to_vec();
    assert_eq!(status(&ask(&mut c, bad_path).await), 400);
    // A real descriptor with its signature broken, and one with a
    // changed revision counter (signed over, so also broken).
    let sched = onionmix_hs::time::HsSchedule::from_interval(1440, None, false).unwrap();
    let id = onionmix_hs::keys::ServiceIdentity::generate(&mut rand::rngs::OsRng);
    let blinded = id
        .blind(&sched, sched.period_num(hs_support::now()).unwrap())
        .unwrap();
    let signing = onionmix_hs::desc::service::DescSigningKey::generate(&mut rand::rngs::OsRng);
    let ipts = vec![onionmix_hs::desc::IntroPointInfo {
        link_specifiers: vec![onionmix_cell::relay::LinkSpec::LegacyId([1; 20])],
        onion_key: onionmix_crypto::NtorSecretKey::generate(&mut rand::rngs::OsRng).public(),
        auth_key: Ed25519Keypair::generate(&mut rand::rngs::OsRng).public(),
        enc_key: onionmix_crypto::NtorSecretKey::generate(&mut rand::rngs::OsRng).public(),
    }];
    let input = onionmix_hs::desc::service::DescriptorInput::new(
        &blinded,
        &signing,
        5,
        hs_support::now(),
        &ipts,
    );
    let desc =
        onionmix_hs::desc::service::build_descriptor(&input, &mut rand::rngs::OsRng).unwrap();
    let tampered = desc.replace("revision-counter 5", "revision-counter 6");
    assert_ne!(tampered, desc);
    assert_eq!(status(&ask(&mut c, post(tampered.as_bytes())).await), 400);
    let sig_at = desc.rfind("signature ").unwrap() + 12;
    let mut broken = desc.clone().into_bytes();
    broken[sig_at] = if broken[sig_at] == b'A' { b'B' } else { b'A' };
    assert_eq!(status(&ask(&mut c, post(&broken)).await), 400);
    assert!(count(&ctx, "hsdir_invalid") >= 3);
    // The honest one is stored; its replay is refused.
    assert_eq!(status(&ask(&mut c, post(desc.as_bytes())).await), 200);
    assert_eq!(status(&ask(&mut c, post(desc.as_bytes())).await), 400);
    assert_eq!(count(&ctx, "hsdir_not_newer"), 1);
    // Fetch paths that are not keys: 404, never a panic.
    for p in [
        "/tor/hs/3/",
        "/tor/hs/3/%%%",
        "/tor/hs/3/AAAA",
        "/tor/hs/2/x",
    ] {
        let r = ask(&mut c, format!("GET {p} HTTP/1.0\r\n\r\n").into_bytes()).await;
        assert_eq!(status(&r), 404, "{p}");
    }
    assert_eq!(count(&ctx, "hsdir_stored"), 1);
    assert_eq!(ctx.hs.hsdir_usage().0, 1);
    assert_eq!(PANICS.load(Ordering::SeqCst), 0, "a relay task panicked");
}
