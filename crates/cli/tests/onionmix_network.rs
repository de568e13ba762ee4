//! Networks run by onionmix directory authorities.
//!
//! - `onionmix-basic` (all onionmix): the authorities' consensus verifies
//!   with the client code and lists every relay; the client carries a
//!   verified download; malformed or tampered descriptor uploads are
//!   refused without disturbing the stored descriptor; 1 MiB and 20 MiB
//!   downloads, 50 parallel streams and a download by hostname (resolved
//!   at the exit) are verified; a relay killed mid-transfer gives the
//!   client a clean error, the next request succeeds, and the relay leaves
//!   the consensus; a restarted authority serves its saved consensus at
//!   once and goes on voting, with the same shared-random commitment if
//!   the protocol run is still the same.
//! - `tor-client-onionmix-network`: stock tor relays upload to onionmix
//!   authorities and are listed; the stock tor client bootstraps from the
//!   onionmix consensus and carries a verified download. With 10 s voting
//!   rounds (a shared-random run is 240 s) the authorities complete a
//!   shared-random protocol run: the consensus gets an SRV from all three
//!   reveals, every authority serves the same value, and the stock tor
//!   client, which took that consensus, reports the same current and
//!   previous SRV (`GETINFO sr/current`, `sr/previous`) and still carries
//!   a download; stock and onionmix relays (hidden-service-dir, HSDir=2)
//!   get the HSDir flag.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common_net;

use std::net::SocketAddr;
use std::process::{Child, Command};
use std::time::{Duration, Instant, SystemTime};

use common_net::{start, tor_available};
use onionmix_netdoc::srv;
use onionmix_netdoc::{
    AuthCertificate, AuthorityConfig, SharedRandom, TimeTolerance, UnverifiedConsensus,
};
use onionmix_testbed::launcher::http_get_plain;
use onionmix_testbed::netinfo::{NetworkInfo, NodeInfo};
use onionmix_testbed::proc;
use onionmix_testbed::spec::Spec;

struct Extra(Child);
impl Drop for Extra {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn node<'a>(info: &'a NetworkInfo, name: &str) -> &'a NodeInfo {
    info.nodes
        .iter()
        .find(|n| n.name == name)
        .unwrap_or_else(|| panic!("no node {name}"))
}

fn consensus(auth: SocketAddr) -> Option<String> {
    http_get_plain(auth, "/tor/status-vote/current/consensus-microdesc")
}

fn listed(cons: &str) -> Vec<String> {
    cons.lines()
        .filter_map(|l| l.strip_prefix("r "))
        .filter_map(|l| l.split(' ').next())
        .map(str::to_string)
        .collect()
}

fn valid_after(cons: &str) -> String {
    cons.lines()
        .find(|l| l.starts_with("valid-after "))
        .unwrap_or("")
        .to_string()
}

/// Verify `cons` with the client's code against the network's authorities.
fn verify(info: &NetworkInfo, auth: SocketAddr, cons: &str) -> usize {
    let auths: Vec<AuthorityConfig> = info
        .nodes
        .iter()
        .filter_map(|n| {
            let v3 = n.v3ident.as_ref()?;
            let id: [u8; 20] = hex::decode(v3).ok()?.try_into().ok()?;
            Some(AuthorityConfig::new(n.name.clone(), id))
        })
        .collect();
    assert_eq!(auths.len(), 3);
    let keys = common_net::dir_get(auth, "/tor/keys/all");
    let certs: Vec<AuthCertificate> = AuthCertificate::parse_all(&keys, SystemTime::now())
        .into_iter()
        .map(|c| c.expect("certificate"))
        .collect();
    let c = UnverifiedConsensus::parse(cons)
        .expect("consensus parses")
        .verify(&auths, &certs, SystemTime::now(), TimeTolerance::default())
        .expect("consensus verifies");
    c.signed_by().len()
}

fn post(addr: SocketAddr, path: &str, body: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.0\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.lines().next().unwrap_or("").to_string()
}

fn wait_for<T>(what: &str, secs: u64, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out: {what}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

fn download(info: &NetworkInfo, socks: SocketAddr, what: &str) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sink = info.sink.as_ref().unwrap();
    let host = sink.http.ip().to_string();
    let (r, t) = rt
        .block_on(common_net::download(
            socks,
            &host,
            sink.http.port(),
            1 << 20,
            None,
        ))
        .unwrap_or_else(|e| panic!("{what}: download failed: {e}"));
    assert_eq!(r.body.len(), 1 << 20, "{what}: body length");
    assert!(r.sha256_ok(), "{what}: SHA-256 mismatch");
    eprintln!("{what}: 1 MiB verified in {t:?}");
}

/// Our client entering at omrelay0 with omrelay1 or omrelay2 as middle.
fn pinned_client(
    info: &NetworkInfo,
    dir: &std::path::Path,
) -> (Extra, SocketAddr, SocketAddr, std::path::PathBuf) {
    let base =
        std::fs::read_to_string(node(info, "omclient0").data_dir.join("client.toml")).unwrap();
    let data = dir.join("pinned-client");
    std::fs::create_dir_all(&data).unwrap();
    let port = proc::free_port("127.0.0.1").unwrap();
    let cport = proc::free_port("127.0.0.1").unwrap();
    let fp = |n: &str| node(info, n).fingerprint.clone().unwrap();
    // Its own control port (cookie authentication, from the base config):
    // the test asks it which circuit carries its stream.
    let mut cfg = format!(
        "data_dir = {:?}\nsocks_listen = \"127.0.0.1:{port}\"\ncontrol_port = \"127.0.0.1:{cport}\"\n\
         entry_nodes = [\"{}\"]\nmiddle_nodes = [\"{}\", \"{}\"]\n",
        data.display().to_string(),
        fp("omrelay0"),
        fp("omrelay1"),
        fp("omrelay2"),
    );
    cfg.extend(
        base.lines()
            .filter(|l| {
                // The running client holds the control port.
                !l.starts_with("data_dir")
                    && !l.starts_with("socks_listen")
                    && !l.starts_with("control_port")
            })
            .map(|l| format!("{l}\n")),
    );
    std::fs::write(data.join("client.toml"), cfg).unwrap();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_onionmix"));
    cmd.arg("client")
        .arg("--config")
        .arg(data.join("client.toml"));
    let child = proc::spawn(cmd, &data.join("client.log")).unwrap();
    (
        Extra(child),
        SocketAddr::from(([127, 0, 0, 1], port)),
        SocketAddr::from(([127, 0, 0, 1], cport)),
        data,
    )
}

/// A SOCKS connection through `proxy`, retried while the client starts.
async fn wait_for_socks(
    proxy: SocketAddr,
    target: &onionmix_testbed::socks::Target,
) -> tokio::net::TcpStream {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        match onionmix_testbed::socks::connect(proxy, target, None, Duration::from_secs(30)).await {
            Ok(s) => return s,
            Err(e) => {
                assert!(Instant::now() < deadline, "no SOCKS connection: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        }
    }
}

#[test]
fn onionmix_basic_network() {
    let _serial = common_net::serial();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    let net = start("onionmix-basic", &dir);
    let info = net.info().clone();
    let auth0 = node(&info, "omauth0").dir_addr().unwrap();

    // Every authority serves a consensus listing all 8 relays (the three
    // authorities' relays included), signed by a majority.
    for a in ["omauth0", "omauth1", "omauth2"] {
        let addr = node(&info, a).dir_addr().unwrap();
        let cons = wait_for(&format!("{a}: consensus with 8 relays"), 60, || {
            consensus(addr).filter(|c| listed(c).len() == 8)
        });
        let signers = verify(&info, addr, &cons);
        assert!(signers >= 2, "{a}: {signers} signatures");
        assert!(cons.contains("\nbandwidth-weights Wbd="));
    }
    let cons = common_net::dir_get(auth0, "/tor/status-vote/current/consensus-microdesc");
    for line in cons.lines().filter(|l| l.starts_with("s ")) {
        for f in ["Running", "Valid", "V2Dir"] {
            assert!(line.split(' ').any(|x| x == f), "{line}");
        }
    }
    assert_eq!(
        cons.lines()
            .filter(|l| l.starts_with("s Authority "))
            .count(),
        3,
        "{cons}"
    );
    assert_eq!(cons.lines().filter(|l| l.starts_with("s Exit ")).count(), 2);

    // The client carries verified downloads: 1 MiB, 20 MiB, 50 streams
    // at once, and one by hostname (resolved by the exit).
    let socks = node(&info, "omclient0").socks_addr().unwrap();
    download(&info, socks, "onionmix client over onionmix-basic");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let sink = info.sink.clone().unwrap();
    let host = sink.http.ip().to_string();
    let (r, t) = rt
        .block_on(common_net::download(
            socks,
            &host,
            sink.http.port(),
            20 << 20,
            None,
        ))
        .expect("20 MiB");
    assert!(r.body.len() == 20 << 20 && r.sha256_ok(), "20 MiB verified");
    eprintln!("20 MiB verified in {t:?}");
    let results = rt.block_on(async {
        let mut set = tokio::task::JoinSet::new();
        for i in 0..50u64 {
            let host = host.clone();
            set.spawn(async move {
                common_net::download(socks, &host, sink.http.port(), 65_536 + i, None).await
            });
        }
        set.join_all().await
    });
    for (i, r) in results.into_iter().enumerate() {
        let (resp, _) = r.unwrap_or_else(|e| panic!("parallel stream {i}: {e}"));
        assert!(resp.sha256_ok(), "parallel stream {i} verified");
    }
    let (r, _) = rt
        .block_on(common_net::download(
            socks,
            &sink.hostname,
            sink.http.port(),
            100_000,
            None,
        ))
        .expect("download by hostname");
    assert!(r.sha256_ok() && r.body.len() == 100_000);

    // Bad uploads are refused and do not replace what was accepted.
    let fp = node(&info, "omrelay0").fingerprint.clone().unwrap();
    let desc = common_net::dir_get(auth0, &format!("/tor/server/fp/{fp}"));
    assert!(desc.starts_with("router omrelay0 "));
    assert!(post(auth0, "/tor/", "garbage").starts_with("HTTP/1.0 400"));
    let tampered = desc.replacen("\nuptime ", "\nuptime 9", 1);
    let answer = post(auth0, "/tor/", &tampered);
    assert!(answer.starts_with("HTTP/1.0 400"), "{answer}");
    assert!(
        post(auth0, "/tor/post/vote", "network-status-version 3\n").starts_with("HTTP/1.0 400")
    );
    assert!(post(auth0, "/tor/post/consensus-signature", "x").starts_with("HTTP/1.0 400"));
    let again = common_net::dir_get(auth0, &format!("/tor/server/fp/{fp}"));
    assert_eq!(again, desc);
    // Microdescriptors named by the consensus are served.
    let md = cons
        .lines()
        .find_map(|l| l.strip_prefix("m "))
        .unwrap()
        .to_string();
    let body = common_net::dir_get(auth0, &format!("/tor/micro/d/{md}"));
    assert!(body.starts_with("onion-key\n"), "{body}");

    // A relay killed mid-transfer: a client pinned to enter at omrelay0
    // and use omrelay1 or omrelay2 as middle starts a large download; the
    // middle it uses is killed; the stream ends promptly (no hang), the
    // next request succeeds over the other middle, and the killed relay
    // leaves the consensus.
    let (pinned, psocks, pcontrol, pdir) = pinned_client(&info, &dir);
    let (victim, got) = rt.block_on(async {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let target = onionmix_testbed::socks::Target::Addr(sink.http);
        let mut s = wait_for_socks(psocks, &target).await;
        s.write_all(
            format!(
                "GET /bytes/{} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                512u64 << 20
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        let mut buf = vec![0u8; 65536];
        let mut got = 0usize;
        while got < 1 << 20 {
            let n = tokio::time::timeout(Duration::from_secs(30), s.read(&mut buf))
                .await
                .expect("first MiB")
                .unwrap();
            assert!(n > 0, "stream ended early");
            got += n;
        }
        // The middle of the circuit this stream is on (the client may
        // hold others for the same isolation, through the other middle).
        // While we ask, nothing is read: flow control stalls the stream,
        // so the transfer cannot finish before the kill.
        let cookie = pdir.join("control_auth_cookie");
        let deadline = Instant::now() + Duration::from_secs(30);
        let middle = loop {
            if let Some(m) = common_net::path_of_stream(pcontrol, &cookie, sink.http)
                .await
                .and_then(|p| p.get(1).map(|h| h.1.clone()))
            {
                break m;
            }
            assert!(
                Instant::now() < deadline,
                "the pinned client reports no circuit for its stream"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        assert!(
            middle == "omrelay1" || middle == "omrelay2",
            "the stream's middle is {middle}, not a pinned one"
        );
        let v = node(&info, &middle).clone();
        assert!(proc::stop(v.pid, v.start_time, Duration::from_secs(1)));
        let t0 = Instant::now();
        loop {
            match tokio::time::timeout(Duration::from_secs(60), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => got += n,
                Err(_) => panic!("stream still open 60 s after its middle relay died"),
            }
        }
        eprintln!(
            "stream through killed {middle} ended {:?} after the kill ({got} bytes)",
            t0.elapsed()
        );
        (middle, got)
    });
    assert!(got < 512 << 20, "the transfer cannot have completed");
    download(&info, psocks, "pinned client after its middle was killed");
    drop(pinned);
    let t0 = Instant::now();
    wait_for("the killed relay leaves the consensus", 300, || {
        consensus(auth0).filter(|c| !listed(c).contains(&victim))
    });
    eprintln!("killed relay left the consensus after {:?}", t0.elapsed());

    // A restarted authority serves its saved consensus at once and goes on
    // voting with the others.
    let a0 = node(&info, "omauth0").clone();
    let before = common_net::dir_get(auth0, "/tor/status-vote/current/consensus-microdesc");
    let commit_before = own_commit(&a0, auth0);
    assert!(proc::stop(a0.pid, a0.start_time, Duration::from_secs(5)));
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_onionmix"));
    cmd.arg("authority")
        .arg("--config")
        .arg(a0.data_dir.join("authority.toml"));
    let _restarted = Extra(proc::spawn(cmd, &a0.data_dir.join("restarted.log")).unwrap());
    let served = wait_for("restarted authority serves a consensus", 60, || {
        consensus(auth0)
    });
    assert!(valid_after(&served) >= valid_after(&before));
    let newer = wait_for(
        "restarted authority publishes a newer consensus",
        180,
        || {
            consensus(auth0)
                .filter(|c| valid_after(c) > valid_after(&before) && listed(c).len() == 7)
        },
    );
    assert!(verify(&info, auth0, &newer) >= 2);
    // Shared randomness survived the restart: within the same protocol
    // run the restarted authority votes the commitment it made before.
    let (vote_va, commit_after) = own_commit(&a0, auth0);
    if let (_, Some(b)) = &commit_before
        && srv::run_start(b.timestamp(), 20) == srv::run_start(vote_va, 20)
    {
        let a = commit_after.expect("the restarted authority's commitment");
        assert!(a.same_commitment(b), "a second commitment in one run");
        eprintln!(
            "restarted authority kept its commitment of {}",
            b.timestamp()
        );
    } else {
        eprintln!("the restart crossed into a new shared-random run");
    }
    download(&info, socks, "onionmix client after the authority restart");
}

/// The valid-after of the vote the authority serves and its own
/// `shared-rand-commit` in it (the vote verified and parsed).
fn own_commit(a: &NodeInfo, addr: SocketAddr) -> (u64, Option<srv::Commit>) {
    let text = common_net::dir_get(addr, "/tor/status-vote/current/authority");
    let v = onionmix_netdoc::vote::parse_vote(&text, SystemTime::now()).expect("vote");
    assert!(v.header.shared_rand.participate);
    let me = a.v3ident.clone().unwrap();
    let own = v
        .header
        .shared_rand
        .commits
        .into_iter()
        .find(|c| hex::encode_upper(c.identity()) == me);
    (v.header.valid_after, own)
}

#[test]
fn stock_tor_client_on_onionmix_authorities() {
    let _serial = common_net::serial();
    if !tor_available("stock_tor_client_on_onionmix_authorities") {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("net");
    // The launcher waits until the consensus lists every relay (the stock
    // relay and exit included) and every client, stock tor's too, has
    // carried a round trip to the sink. 10 s voting rounds: a
    // shared-random protocol run takes 240 s.
    let mut spec = Spec::load("tor-client-onionmix-network").unwrap();
    spec.voting_interval_secs = Some(10);
    let t0 = Instant::now();
    let net = common_net::start_spec(&spec, &dir);
    let info = net.info().clone();
    let auth0 = node(&info, "omauth0").dir_addr().unwrap();
    let cons = common_net::dir_get(auth0, "/tor/status-vote/current/consensus-microdesc");
    for name in ["relay0", "exit0", "omrelay0", "omexit0"] {
        assert!(listed(&cons).contains(&name.to_string()), "{name} missing");
    }
    verify(&info, auth0, &cons);
    let log = std::fs::read_to_string(&node(&info, "client0").log).unwrap();
    assert!(log.contains("Bootstrapped 100%"));
    let socks = node(&info, "client0").socks_addr().unwrap();
    download(&info, socks, "stock tor client over onionmix authorities");
    let socks = node(&info, "omclient0").socks_addr().unwrap();
    download(&info, socks, "onionmix client over the same network");
    hsdir_flags(&info, &cons);
    shared_random(&info, t0);
}

fn has_flag(cons: &str, name: &str, flag: &str) -> bool {
    let Some(at) = cons.find(&format!("\nr {name} ")) else {
        return false;
    };
    cons[at + 1..]
        .lines()
        .find(|l| l.starts_with("s "))
        .is_some_and(|s| s.split(' ').any(|f| f == flag))
}

/// Stock relays say `hidden-service-dir` and `HSDir=2`, and so do onionmix
/// relays with a directory cache (they store onion-service descriptors):
/// all get HSDir.
fn hsdir_flags(info: &NetworkInfo, cons: &str) {
    let auth0 = node(info, "omauth0").dir_addr().unwrap();
    for stock in ["relay0", "exit0"] {
        let fp = node(info, stock).fingerprint.clone().unwrap();
        let desc = common_net::dir_get(auth0, &format!("/tor/server/fp/{fp}"));
        assert!(desc.contains("\nhidden-service-dir\n"), "{stock}: {desc}");
        assert!(has_flag(cons, stock, "HSDir"), "{stock} without HSDir");
    }
    for ours in ["omrelay0", "omrelay1", "omexit0"] {
        let fp = node(info, ours).fingerprint.clone().unwrap();
        let desc = common_net::dir_get(auth0, &format!("/tor/server/fp/{fp}"));
        assert!(desc.contains("\nhidden-service-dir\n"), "{ours}: {desc}");
        assert!(has_flag(cons, ours, "Running"), "{ours} not running");
        assert!(
            has_flag(cons, ours, "HSDir"),
            "{ours} without HSDir in\n{cons}\ndescriptor:\n{desc}"
        );
    }
}

/// The (previous, current) SRVs of a consensus, read by the client code.
fn srvs(info: &NetworkInfo, auth: SocketAddr, cons: &str) -> (Option<SharedRandom>, SharedRandom) {
    verify(info, auth, cons);
    let c = UnverifiedConsensus::parse(cons)
        .unwrap()
        .dangerously_assume_verified();
    let cur = *c.shared_rand_current().expect("a current SRV");
    assert!(cons.contains(&format!("\nshared-rand-current-value {}\n", cur.to_args())));
    (c.shared_rand_previous().copied(), cur)
}

fn shared_random(info: &NetworkInfo, t0: Instant) {
    let auths: Vec<SocketAddr> = ["omauth0", "omauth1", "omauth2"]
        .iter()
        .map(|a| node(info, a).dir_addr().unwrap())
        .collect();
    // Every authority takes part.
    for a in &auths {
        let vote = common_net::dir_get(*a, "/tor/status-vote/current/authority");
        assert!(vote.contains("\nshared-rand-participate\n"), "{vote}");
    }
    // A protocol run in which all three committed and revealed: at most
    // the rest of the run the network started in plus a whole run (2 x
    // 240 s), with room for a loaded machine.
    let full = wait_for("a consensus with an SRV from 3 reveals", 600, || {
        consensus(auths[0]).filter(|c| c.contains("\nshared-rand-current-value 3 "))
    });
    eprintln!(
        "shared-rand-current-value from 3 reveals {:?} after the network started ({})",
        t0.elapsed(),
        valid_after(&full)
    );
    let (prev, cur) = srvs(info, auths[0], &full);
    assert_eq!(cur.num_reveals, 3);
    // Every authority computed and serves the same value.
    for a in &auths[1..] {
        let c = wait_for("every authority serves the same SRV", 60, || {
            consensus(*a)
                .filter(|c| c.contains(&format!("shared-rand-current-value {}", cur.to_args())))
        });
        assert_eq!(srvs(info, *a, &c), (prev, cur));
    }
    // Stock tor took that consensus and reports the same values.
    let client = node(info, "client0");
    let control = SocketAddr::new(
        client.address.parse().unwrap(),
        client.control_port.unwrap(),
    );
    let cookie = client.data_dir.join("control_auth_cookie");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let ask = |key: &str| {
        rt.block_on(onionmix_testbed::torctl::getinfo(
            control,
            &cookie,
            key,
            Duration::from_secs(10),
        ))
        .unwrap_or_else(|e| panic!("GETINFO {key}: {e}"))
    };
    wait_for("stock tor reports our current SRV", 120, || {
        (ask("sr/current") == cur.encoded()).then_some(())
    });
    assert_eq!(
        ask("sr/previous"),
        prev.map(|p| p.encoded()).unwrap_or_default(),
        "sr/previous"
    );
    eprintln!(
        "stock tor: sr/current {} sr/previous {:?}",
        cur.encoded(),
        prev.map(|p| p.encoded())
    );
    let socks = client.socks_addr().unwrap();
    download(info, socks, "stock tor client after the SRV consensus");
}
