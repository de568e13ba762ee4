//! The relay's onion-service roles, in-process, driven at the cell level:
//! introduction point (ESTABLISH_INTRO, INTRODUCE1 -> INTRODUCE2 and ACK,
//! one circuit per auth key, DoS bucket), rendezvous point (cookies,
//! RENDEZVOUS1 -> RENDEZVOUS2, the splice both ways with a bulk transfer,
//! teardown, expiry) and HSDir (publish and fetch over BEGIN_DIR).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod hs_support;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use onionmix_cell::PAYLOAD_LEN;
use onionmix_cell::chan::destroy_reason;
use onionmix_cell::hs::{DosParams, Introduce, intro_status};
use onionmix_cell::relay::{self, RelayCmd, RelayMsg};
use onionmix_crypto::{CircuitKeys, Ed25519Keypair, Tor1Layer};
use onionmix_hs::intro::establish_intro;
use onionmix_node::relay::RelayCtx;

use hs_support::{Got, RawCirc, start_relay};

fn count(ctx: &RelayCtx, name: &str) -> u64 {
    ctx.hs
        .stats
        .snapshot()
        .into_iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no counter {name}"))
        .1
}

/// Wait (generously) until `f` holds; the relay's own state is the clock.
async fn until(what: &str, f: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// An INTRODUCE1 body for `auth_key` (the encrypted part is opaque to the
/// introduction point).
fn introduce1(auth_key: [u8; 32], tag: u8) -> Vec<u8> {
    Introduce {
        legacy_key_id: [0; 20],
        auth_key,
        extensions: Vec::new(),
        encrypted: vec![tag; 200],
    }
    .encode()
    .unwrap()
}

/// A service's introduction circuit through `path` for `auth`.
async fn intro_circuit(
    path: &[&onionmix_node::client::circuit::HopTarget],
    auth: &Ed25519Keypair,
    dos: Option<DosParams>,
) -> RawCirc {
    let mut s = RawCirc::build(path).await;
    let last = s.len() - 1;
    let cell = establish_intro(auth, &s.kh[last], dos).unwrap();
    s.send(last, RelayCmd::ESTABLISH_INTRO, 0, &cell);
    assert_eq!(s.expect(RelayCmd::INTRO_ESTABLISHED).await, vec![0]);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn introduction_point() {
    let tmp = tempfile::tempdir().unwrap();
    let (_e, entry) = start_relay(tmp.path(), "entry", "").await;
    let (ip_ctx, ip) = start_relay(tmp.path(), "intro", "").await;
    let auth = Ed25519Keypair::generate(&mut rand::rngs::OsRng);
    let key = auth.public();

    let mut svc = intro_circuit(&[&entry, &ip], &auth, None).await;
    assert_eq!(count(&ip_ctx, "intro_established"), 1);

    // A client introduces itself: the service gets the same bytes as
    // INTRODUCE2, the client a success ACK.
    let mut cli = RawCirc::build(&[&entry, &ip]).await;
    let intro1 = introduce1(key, 1);
    cli.send(1, RelayCmd::INTRODUCE1, 0, &intro1);
    assert_eq!(
        cli.expect(RelayCmd::INTRODUCE_ACK).await,
        vec![0, intro_status::SUCCESS as u8, 0]
    );
    assert_eq!(svc.expect(RelayCmd::INTRODUCE2).await, intro1);
    assert_eq!(count(&ip_ctx, "introduce1_relayed"), 1);

    // A second INTRODUCE1 on the same circuit closes it (tor: one per
    // circuit).
    cli.send(1, RelayCmd::INTRODUCE1, 0, &intro1);
    cli.expect_destroyed().await;
    assert_eq!(count(&ip_ctx, "introduce1_unsuitable"), 1);

    // Unknown service: NACK "unknown service", circuit stays usable for
    // nothing else but is not closed.
    let mut cli = RawCirc::build(&[&entry, &ip]).await;
    cli.send(1, RelayCmd::INTRODUCE1, 0, &introduce1([9; 32], 2));
    assert_eq!(
        cli.expect(RelayCmd::INTRODUCE_ACK).await,
        vec![0, intro_status::UNKNOWN_SERVICE as u8, 0]
    );
    assert_eq!(count(&ip_ctx, "introduce1_unknown_service"), 1);

    // Malformed (auth key type 1): NACK "bad format".
    let mut cli = RawCirc::build(&[&entry, &ip]).await;
    let mut bad = introduce1(key, 3);
    bad[20] = 1;
    cli.send(1, RelayCmd::INTRODUCE1, 0, &bad);
    assert_eq!(
        cli.expect(RelayCmd::INTRODUCE_ACK).await,
        vec![0, intro_status::BAD_FORMAT as u8, 0]
    );
    assert_eq!(count(&ip_ctx, "introduce1_malformed"), 1);

    // INTRODUCE1 on the service's own introduction circuit: closed.
    svc.send(1, RelayCmd::INTRODUCE1, 0, &intro1);
    svc.expect_destroyed().await;
    until("the closed intro circuit leaves the table", || {
        ip_ctx.hs.intro().is_empty()
    })
    .await;

    // One circuit per key: a new ESTABLISH_INTRO takes the key over, and
    // the old circuit (still open) gets no more introductions.
    let old = intro_circuit(&[&entry, &ip], &auth, None).await;
    let mut new = intro_circuit(&[&entry, &ip], &auth, None).await;
    assert_eq!(count(&ip_ctx, "intro_replaced"), 1);
    let mut cli = RawCirc::build(&[&entry, &ip]).await;
    let intro1 = introduce1(key, 4);
    cli.send(1, RelayCmd::INTRODUCE1, 0, &intro1);
    assert_eq!(
        cli.expect(RelayCmd::INTRODUCE_ACK).await,
        vec![0, intro_status::SUCCESS as u8, 0]
    );
    assert_eq!(new.expect(RelayCmd::INTRODUCE2).await, intro1);
    // The old circuit closing does not unregister the new one.
    let before = ip_ctx.stats.circuits.load(Ordering::Relaxed);
    old.destroy();
    until("the old circuit is gone", || {
        ip_ctx.stats.circuits.load(Ordering::Relaxed) < before
    })
    .await;
    assert_eq!(ip_ctx.hs.intro().len(), 1);
    new.destroy();
    until("the table empties", || ip_ctx.hs.intro().is_empty()).await;
    // An introduction circuit on a one-hop circuit of a client is allowed
    // (single onion services do that), INTRODUCE1 from one is not.
    let mut single = RawCirc::build(&[&ip]).await;
    single.send(0, RelayCmd::INTRODUCE1, 0, &introduce1(key, 5));
    assert_eq!(single.expect_destroyed().await, destroy_reason::PROTOCOL);
    let _sos = intro_circuit(&[&ip], &auth, None).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn introduce2_rate_limit_per_intro_circuit() {
    let tmp = tempfile::tempdir().unwrap();
    let (_e, entry) = start_relay(tmp.path(), "entry", "").await;
    let (ip_ctx, ip) = start_relay(tmp.path(), "intro", "").await;
    let auth = Ed25519Keypair::generate(&mut rand::rngs::OsRng);
    // Proposal 305 extension: rate 1/s, burst 3 (tor lets burst-1 through
    // at once). A long pause in the middle could refill a token, so the
    // check tolerates one extra success but needs at least one refusal.
    let dos = DosParams {
        rate_per_sec: Some(1),
        burst_per_sec: Some(3),
    };
    let mut svc = intro_circuit(&[&entry, &ip], &auth, Some(dos)).await;
    assert_eq!(count(&ip_ctx, "intro_dos_from_extension"), 1);
    let mut ok = 0;
    for i in 0..4u8 {
        let mut cli = RawCirc::build(&[&entry, &ip]).await;
        cli.send(1, RelayCmd::INTRODUCE1, 0, &introduce1(auth.public(), i));
        let ack = cli.expect(RelayCmd::INTRODUCE_ACK).await;
        if ack == vec![0, 0, 0] {
            ok += 1;
            svc.expect(RelayCmd::INTRODUCE2).await;
        } else {
            assert_eq!(ack, vec![0, intro_status::UNKNOWN_SERVICE as u8, 0]);
        }
    }
    let limited = count(&ip_ctx, "introduce1_rate_limited");
    assert!((2..=3).contains(&ok), "{ok} introductions passed");
    assert_eq!(limited, 4 - ok);
    // Without an extension the consensus default applies: off.
    let auth2 = Ed25519Keypair::generate(&mut rand::rngs::OsRng);
    let mut svc2 = intro_circuit(&[&entry, &ip], &auth2, None).await;
    for i in 0..5u8 {
        let mut cli = RawCirc::build(&[&entry, &ip]).await;
        cli.send(1, RelayCmd::INTRODUCE1, 0, &introduce1(auth2.public(), i));
        assert_eq!(cli.expect(RelayCmd::INTRODUCE_ACK).await, vec![0, 0, 0]);
        svc2.expect(RelayCmd::INTRODUCE2).await;
    }
}

/// The end-to-end layer of a joined rendezvous circuit, as the client
/// (`Tor1Layer` in the client role) and the service (relay role) use it.
fn e2e_pair() -> (Tor1Layer, Tor1Layer) {
    let x: [u8; 20] = rand::random();
    let y: [u8; 20] = rand::random();
    let k = CircuitKeys::from_create_fast(&x, &y);
    (Tor1Layer::new(&k), Tor1Layer::new(&k))
}

fn client_seal(e2e: &mut Tor1Layer, cmd: RelayCmd, sid: u16, data: &[u8]) -> [u8; PAYLOAD_LEN] {
    let mut b = hs_support::body(cmd, sid, data);
    e2e.originate_forward(&mut b);
    e2e.encrypt_forward(&mut b);
    b
}

fn service_seal(e2e: &mut Tor1Layer, cmd: RelayCmd, sid: u16, data: &[u8]) -> [u8; PAYLOAD_LEN] {
    let mut b = hs_support::body(cmd, sid, data);
    e2e.originate_backward(&mut b);
    b
}

fn pattern(n: usize, seed: u8) -> Vec<u8> {
    (0..n).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// Receive `n` bytes of DATA through the end-to-end layer.
async fn recv_e2e(c: &mut RawCirc, e2e: &mut Tor1Layer, service_side: bool, n: usize) -> Vec<u8> {
    let mut got = Vec::with_capacity(n);
    while got.len() < n {
        match c.recv().await {
            Got::Opaque(mut b) => {
                let ok = if service_side {
                    e2e.decrypt_forward(&mut b).is_some()
                } else {
                    e2e.decrypt_backward(&mut b).is_some()
                };
                assert!(ok, "end-to-end layer did not recognize a spliced cell");
                let (_, msg) = RelayMsg::decode(&b).unwrap();
                match msg {
                    RelayMsg::Data(d) => got.extend_from_slice(d),
                    other => panic!("unexpected {:?}", other.cmd()),
                }
            }
            other => panic!("expected spliced traffic, got {other:?}"),
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendezvous_point_joins_and_splices() {
    let tmp = tempfile::tempdir().unwrap();
    let (_a, entry_a) = start_relay(tmp.path(), "entrya", "").await;
    let (_b, entry_b) = start_relay(tmp.path(), "entryb", "").await;
    let (rp_ctx, rp) = start_relay(tmp.path(), "rendezvous", "").await;

    let cookie: [u8; 20] = rand::random();
    let mut cli = RawCirc::build(&[&entry_a, &rp]).await;
    cli.send(1, RelayCmd::ESTABLISH_RENDEZVOUS, 0, &cookie);
    assert!(
        cli.expect(RelayCmd::RENDEZVOUS_ESTABLISHED)
            .await
            .is_empty()
    );

    // A second circuit with the same cookie is refused.
    let mut dup = RawCirc::build(&[&entry_b, &rp]).await;
    dup.send(1, RelayCmd::ESTABLISH_RENDEZVOUS, 0, &cookie);
    dup.expect_destroyed().await;

    // The service answers with RENDEZVOUS1: the client gets the handshake
    // in RENDEZVOUS2 from the rendezvous point.
    let info: Vec<u8> = (0..64).map(|i| i as u8).collect();
    let mut svc = RawCirc::build(&[&entry_b, &rp]).await;
    let mut r1 = cookie.to_vec();
    r1.extend_from_slice(&info);
    svc.send(1, RelayCmd::RENDEZVOUS1, 0, &r1);
    assert_eq!(cli.expect(RelayCmd::RENDEZVOUS2).await, info);
    assert_eq!(count(&rp_ctx, "rend_joined"), 1);
    assert!(rp_ctx.hs.rend().is_empty(), "the cookie is used up");

    // End-to-end traffic both ways through the splice: 2 MiB each way,
    // concurrently (the rendezvous point does no flow control of its
    // own for spliced cells).
    let (mut c_e2e, mut s_e2e) = e2e_pair();
    const N: usize = 2 << 20;
    let up = pattern(N, 1);
    let down = pattern(N, 2);
    let t0 = Instant::now();
    let up_chunks: Vec<[u8; PAYLOAD_LEN]> = up
        .chunks(hs_support::CELL_DATA)
        .map(|c| client_seal(&mut c_e2e, RelayCmd::DATA, 1, c))
        .collect();
    let down_chunks: Vec<[u8; PAYLOAD_LEN]> = down
        .chunks(hs_support::CELL_DATA)
        .map(|c| service_seal(&mut s_e2e, RelayCmd::DATA, 1, c))
        .collect();
    let n_cells = (up_chunks.len() + down_chunks.len()) as u64;
    for b in up_chunks {
        cli.send_sealed(1, b);
    }
    for b in down_chunks {
        svc.send_sealed(1, b);
    }
    let service_side = tokio::spawn(async move {
        let got = recv_e2e(&mut svc, &mut s_e2e, true, N).await;
        (svc, got)
    });
    let got_down = recv_e2e(&mut cli, &mut c_e2e, false, N).await;
    let (mut svc, got_up) = service_side.await.unwrap();
    let dt = t0.elapsed();
    assert!(got_up == up, "client -> service bytes differ");
    assert!(got_down == down, "service -> client bytes differ");
    assert_eq!(count(&rp_ctx, "rend_cells_spliced"), n_cells);
    eprintln!(
        "spliced {n_cells} cells ({} MiB) through the rendezvous point in {dt:?}: {:.0} cells/s",
        (2 * N) >> 20,
        n_cells as f64 / dt.as_secs_f64()
    );

    // Either side closing tears the other down.
    cli.destroy();
    assert_eq!(svc.expect_destroyed().await, destroy_reason::DESTROYED);
    until("both rendezvous circuits are gone", || {
        rp_ctx.stats.circuits.load(Ordering::Relaxed) == 0
    })
    .await;

    // A second join, torn down from the service side.
    let cookie: [u8; 20] = rand::random();
    let mut cli = RawCirc::build(&[&entry_a, &rp]).await;
    cli.send(1, RelayCmd::ESTABLISH_RENDEZVOUS, 0, &cookie);
    cli.expect(RelayCmd::RENDEZVOUS_ESTABLISHED).await;
    let mut svc = RawCirc::build(&[&entry_b, &rp]).await;
    let mut r1 = cookie.to_vec();
    r1.extend_from_slice(&info);
    svc.send(1, RelayCmd::RENDEZVOUS1, 0, &r1);
    cli.expect(RelayCmd::RENDEZVOUS2).await;
    // The service speaks first this time (the client's side of the join
    // is installed when its reactor next looks).
    let (mut c_e2e, mut s_e2e) = e2e_pair();
    svc.send_sealed(1, service_seal(&mut s_e2e, RelayCmd::DATA, 1, b"hello"));
    assert_eq!(recv_e2e(&mut cli, &mut c_e2e, false, 5).await, b"hello");
    cli.send_sealed(1, client_seal(&mut c_e2e, RelayCmd::DATA, 1, b"world"));
    assert_eq!(recv_e2e(&mut svc, &mut s_e2e, true, 5).await, b"world");
    svc.destroy();
    assert_eq!(cli.expect_destroyed().await, destroy_reason::DESTROYED);
    until("the second pair is gone", || {
        rp_ctx.stats.circuits.load(Ordering::Relaxed) == 0
    })
    .await;

    // A used cookie cannot be joined again.
    let mut late = RawCirc::build(&[&entry_b, &rp]).await;
    late.send(1, RelayCmd::RENDEZVOUS1, 0, &r1);
    late.expect_destroyed().await;
    assert_eq!(count(&rp_ctx, "rend1_unknown_cookie"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendezvous_cookies_expire() {
    let tmp = tempfile::tempdir().unwrap();
    let (_a, entry) = start_relay(tmp.path(), "entry", "").await;
    let (rp_ctx, rp) =
        start_relay(tmp.path(), "rendezvous", "hs_rend_cookie_lifetime_secs = 1").await;
    let mut cli = RawCirc::build(&[&entry, &rp]).await;
    let cookie: [u8; 20] = rand::random();
    cli.send(1, RelayCmd::ESTABLISH_RENDEZVOUS, 0, &cookie);
    cli.expect(RelayCmd::RENDEZVOUS_ESTABLISHED).await;
    // Past the lifetime the sweep closes the waiting circuit.
    until("the cookie is past its lifetime", || {
        rp_ctx.hs.mono_secs() >= 2
    })
    .await;
    rp_ctx.hs.maintain(hs_support::now());
    cli.expect_destroyed().await;
    assert_eq!(count(&rp_ctx, "rend_expired"), 1);
    assert!(rp_ctx.hs.rend().is_empty());
    // ... and the service finds no cookie.
    let mut svc = RawCirc::build(&[&entry, &rp]).await;
    let mut r1 = cookie.to_vec();
    r1.extend_from_slice(&[0; 64]);
    svc.send(1, RelayCmd::RENDEZVOUS1, 0, &r1);
    svc.expect_destroyed().await;
}

fn post(desc: &str) -> Vec<u8> {
    format!(
        "POST /tor/hs/3/publish HTTP/1.0\r\nContent-Length: {}\r\n\r\n{desc}",
        desc.len()
    )
    .into_bytes()
}

fn get(blinded: &[u8; 32]) -> Vec<u8> {
    format!(
        "GET {} HTTP/1.0\r\n\r\n",
        onionmix_hs::desc::cache::fetch_path(blinded)
    )
    .into_bytes()
}

fn status(resp: &[u8]) -> u16 {
    let head = onionmix_http::parse_response_head(resp, &onionmix_http::Limits::DEFAULT)
        .unwrap()
        .unwrap();
    head.status
}

fn body_of(resp: &[u8]) -> &[u8] {
    let i = resp.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    &resp[i + 4..]
}

/// A descriptor for a fresh service (time period of `now`).
pub fn descriptor(
    blinded: &onionmix_hs::keys::BlindedService,
    signing: &onionmix_hs::desc::service::DescSigningKey,
    revision: u64,
) -> String {
    use onionmix_hs::desc::IntroPointInfo;
    use onionmix_hs::desc::service::{DescriptorInput, build_descriptor};
    let ipts = vec![IntroPointInfo {
        link_specifiers: vec![
            relay::LinkSpec::Ipv4("127.0.0.1:9001".parse().unwrap()),
            relay::LinkSpec::LegacyId([1; 20]),
        ],
        onion_key: onionmix_crypto::NtorSecretKey::generate(&mut rand::rngs::OsRng).public(),
        auth_key: Ed25519Keypair::generate(&mut rand::rngs::OsRng).public(),
        enc_key: onionmix_crypto::NtorSecretKey::generate(&mut rand::rngs::OsRng).public(),
    }];
    let input = DescriptorInput::new(blinded, signing, revision, hs_support::now(), &ipts);
    build_descriptor(&input, &mut rand::rngs::OsRng).unwrap()
}

pub fn service_keys() -> (
    onionmix_hs::keys::BlindedService,
    onionmix_hs::desc::service::DescSigningKey,
) {
    let sched = onionmix_hs::time::HsSchedule::from_interval(1440, None, false).unwrap();
    let id = onionmix_hs::keys::ServiceIdentity::generate(&mut rand::rngs::OsRng);
    let period = sched.period_num(hs_support::now()).unwrap();
    (
        id.blind(&sched, period).unwrap(),
        onionmix_hs::desc::service::DescSigningKey::generate(&mut rand::rngs::OsRng),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hsdir_publish_and_fetch_over_begin_dir() {
    let tmp = tempfile::tempdir().unwrap();
    let (_e, entry) = start_relay(tmp.path(), "entry", "").await;
    let (h_ctx, hsdir) = start_relay(tmp.path(), "hsdir", "").await;
    let (blinded, signing) = service_keys();
    let key = *blinded.public();
    let d10 = descriptor(&blinded, &signing, 10);
    let mut c = RawCirc::build(&[&entry, &hsdir]).await;

    let r = c.dir_request(1, &get(&key)).await;
    assert_eq!(status(&r), 404);
    let r = c.dir_request(3, &post(&d10)).await;
    assert_eq!(status(&r), 200, "{}", String::from_utf8_lossy(&r));
    let r = c.dir_request(5, &get(&key)).await;
    assert_eq!(status(&r), 200);
    assert_eq!(body_of(&r), d10.as_bytes());
    // tor also accepts the key with base64 padding.
    let padded = format!(
        "GET {}= HTTP/1.0\r\n\r\n",
        onionmix_hs::desc::cache::fetch_path(&key)
    );
    assert_eq!(status(&c.dir_request(7, padded.as_bytes()).await), 200);

    // Same revision again: refused; a higher one replaces it.
    assert_eq!(status(&c.dir_request(9, &post(&d10)).await), 400);
    let d11 = descriptor(&blinded, &signing, 11);
    assert_eq!(status(&c.dir_request(11, &post(&d11)).await), 200);
    let d9 = descriptor(&blinded, &signing, 9);
    assert_eq!(status(&c.dir_request(13, &post(&d9)).await), 400);
    let r = c.dir_request(15, &get(&key)).await;
    assert_eq!(body_of(&r), d11.as_bytes());

    assert_eq!(count(&h_ctx, "hsdir_stored"), 2);
    assert_eq!(count(&h_ctx, "hsdir_not_newer"), 2);
    assert_eq!(count(&h_ctx, "hsdir_fetch_served"), 3);
    assert_eq!(count(&h_ctx, "hsdir_fetch_not_found"), 1);
    assert_eq!(h_ctx.hs.hsdir_usage().0, 1);

    // One-hop circuits are refused (not anonymous), as by tor.
    let mut one = RawCirc::build(&[&hsdir]).await;
    assert_eq!(status(&one.dir_request(1, &get(&key)).await), 503);
    assert_eq!(status(&one.dir_request(3, &post(&d11)).await), 503);
    assert_eq!(count(&h_ctx, "hsdir_single_hop_refused"), 2);

    // Expiry: past the descriptor's lifetime (180 min) it is dropped.
    h_ctx.hs.maintain(hs_support::now() + 4 * 3600);
    assert_eq!(count(&h_ctx, "hsdir_expired"), 1);
    assert_eq!(status(&c.dir_request(17, &get(&key)).await), 404);

    // The counters reach the stats file's JSON.
    let j = onionmix_node::relay::statsfile::stats_json(&h_ctx);
    assert_eq!(j["hs"]["hsdir_stored"], 2);
    assert_eq!(j["hs"]["hsdir_descriptors"], 0);
}
