//! Configured one-way delay D gives a TCP RTT of 2D (+ the emulator's own
//! baseline) within 10% + 1 ms (the fastest sample; never below 2D), for
//! D in {5, 20, 40, 100} ms; jitter stays inside
//! its bound; the host endpoint reaches nodes unimpaired. Needs root.

mod common_net;

use onionmix_emu::probe::RttResult;
use onionmix_emu::testkit::TestNet;
use onionmix_emu::{LinkProfile, PairOverride, ProfileRef, Topology};
use std::path::Path;
use std::time::Duration;

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_onionmix"))
}

fn rtt(net: &TestNet, from: &str, to: &str, count: u32) -> RttResult {
    let target = net.sock(to, 7000);
    net.client(
        from,
        &[
            "rtt".into(),
            format!("--connect={target}"),
            format!("--count={count}"),
            "--interval-ms=5".into(),
        ],
        Duration::from_secs(120),
    )
    .expect("rtt probe")
}

#[test]
fn emu_delay_gives_rtt_2d_within_10_percent() {
    let _serial = common_net::serial();
    if !common_net::emulator_available("emu_delay_gives_rtt_2d_within_10_percent") {
        return;
    }
    let delays = [0.0, 5.0, 20.0, 40.0, 100.0];
    let mut topo = Topology::uniform(&["c"], LinkProfile::default(), 1);
    topo.subnet = "10.77.11.0/24".parse().expect("subnet");
    for d in delays {
        let name = format!("d{}", d as u32);
        topo.nodes.push(onionmix_emu::NodeSpec::new(name.clone()));
        topo.pairs.push(PairOverride {
            from: "c".into(),
            to: name,
            profile: ProfileRef::Inline(LinkProfile::delay(d)),
            symmetric: true,
        });
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let net = TestNet::start(exe(), dir.path(), topo).expect("emulator starts");
    let mut servers = Vec::new();
    for d in delays {
        let name = format!("d{}", d as u32);
        let listen = net.sock(&name, 7000);
        servers.push(
            net.server(&name, &["echo-server".into(), format!("--listen={listen}")])
                .expect("echo server"),
        );
    }
    let base = rtt(&net, "c", "d0", 40);
    let base_med = base.median_us();
    eprintln!("baseline (D=0) median RTT {base_med:.0} us");
    for d in &delays[1..] {
        let name = format!("d{}", *d as u32);
        let count = if *d >= 100.0 { 20 } else { 30 };
        let r = rtt(&net, "c", &name, count);
        let med = r.median_us();
        let want = 2.0 * d * 1000.0;
        let err = (med - base_med - want) / want;
        let min = r.samples_us.iter().min().copied().unwrap_or(0);
        eprintln!(
            "D={d} ms: median RTT {med:.0} us, min {min} us, connect {} us, expected {want:.0} + {base_med:.0} us, error {:+.2}%",
            r.connect_us,
            err * 100.0
        );
        // End to end, the fastest round trip is 2D (+ the idle baseline's
        // fastest) within 10% + 1 ms: one undisturbed sample is enough, so
        // a busy machine's late wake-ups cannot fail it, while a wrong
        // delay (say, doubled) still does. The median only gets a gross
        // upper bound (10 ms of room for scheduling noise at the two probe
        // processes); the emulator's own record (below) is exact.
        let base_min = base.samples_us.iter().min().copied().unwrap_or(0) as f64;
        assert!(
            min as f64 - base_min <= 1.10 * want + 1000.0,
            "D={d}: fastest RTT {min} us vs 2D={want} us + baseline's fastest {base_min}"
        );
        assert!(
            med - base_med <= 1.10 * want + 10_000.0,
            "D={d}: median RTT {med} us vs 2D={want} us + baseline {base_med}"
        );
        // Nothing is faster than the emulator allows: a lower bound no busy
        // machine can break.
        assert!(min as f64 >= want, "D={d}: an RTT of {min} us is below 2D");
        // The handshake is one round trip too. It is a single sample, so
        // its upper bound only catches gross errors (a doubled delay), with
        // room for a late wake-up on a busy machine.
        assert!(
            r.connect_us as f64 >= 0.99 * want && (r.connect_us as f64) < 2.5 * want + 100_000.0,
            "D={d}: connect {} us",
            r.connect_us
        );
    }
    // What the emulator decided: exactly D each way on every delayed link.
    let st = net.status(Duration::from_millis(1100)).expect("status");
    for d in &delays[1..] {
        let us = (*d * 1000.0) as u64;
        for label in [
            format!("core/c/d{}", *d as u32),
            format!("core/d{}/c", *d as u32),
        ] {
            let c = st.link(&label).expect("link counters").counters;
            assert_eq!(
                (c.delay_min_us, c.delay_max_us),
                (Some(us), Some(us)),
                "{label}: decided delays"
            );
        }
    }
    // Host endpoint: the root namespace reaches a node through an unimpaired
    // path, even though the node's core links are delayed.
    let host = onionmix_emu::probe::rtt_client(
        net.sock("d100", 7000),
        10,
        Duration::from_millis(2),
        32,
        Duration::from_secs(10),
    )
    .expect("host endpoint reaches node");
    assert!(
        host.median_us() < 20_000.0,
        "host path is not delayed: {host:?}"
    );
    let st = net.status(Duration::from_millis(1100)).expect("status");
    let l = st.link("core/c/d100").expect("link counters");
    assert!(l.counters.rx_packets >= 20, "{l:?}");
    assert_eq!(l.counters.drop_loss + l.counters.drop_queue, 0);
    assert!(st.global.host_packets >= 20);
    eprintln!("{}", st.render_table(false));
    drop(servers);
    net.stop().expect("clean stop");
}

#[test]
fn emu_jitter_is_bounded_without_reordering() {
    let _serial = common_net::serial();
    if !common_net::emulator_available("emu_jitter_is_bounded_without_reordering") {
        return;
    }
    let prof = LinkProfile {
        delay_ms: 20.0,
        jitter_ms: 5.0,
        ..Default::default()
    };
    let mut topo = Topology::uniform(&["a", "b"], prof, 3);
    topo.subnet = "10.77.16.0/24".parse().expect("subnet");
    let dir = tempfile::tempdir().expect("tempdir");
    let net = TestNet::start(exe(), dir.path(), topo).expect("emulator starts");
    let listen = net.sock("b", 7000);
    let _srv = net
        .server("b", &["echo-server".into(), format!("--listen={listen}")])
        .expect("server");
    let r = rtt(&net, "a", "b", 60);
    let min = r.samples_us.iter().min().copied().unwrap_or(0);
    let max = r.samples_us.iter().max().copied().unwrap_or(0);
    let (p10, p90) = (r.percentile_us(0.10), r.percentile_us(0.90));
    eprintln!(
        "jitter: RTT min {min} p10 {p10} median {:.0} p90 {p90} max {max}",
        r.median_us()
    );
    // The emulator's own decisions: each direction 20 ± 5 ms, using most of
    // the range. This fails if jitter is absent, doubled or off-centre,
    // whatever the scheduler does to the probes.
    let st = net.status(Duration::from_millis(1100)).expect("status");
    for label in ["core/a/b", "core/b/a"] {
        let c = st.link(label).expect("link").counters;
        let (lo, hi) = (
            c.delay_min_us.expect("packets passed"),
            c.delay_max_us.expect("packets passed"),
        );
        eprintln!("{label}: decided one-way delay {lo}..{hi} us");
        assert!(lo >= 15_000 && hi <= 25_000, "{label}: {lo}..{hi} us");
        assert!(hi - lo >= 4_000, "{label}: jitter spread {lo}..{hi} us");
        assert_eq!(c.reordered, 0);
    }
    // End to end: nothing is faster than the emulator allows (a lower
    // bound, which no busy machine can break), and the jitter shows in the
    // round trips. The exact upper bound is the emulator's own record
    // above; round trips measured at the probes carry the scheduling
    // delays of a busy machine (CI saw a p90 of 54.7 ms against the two
    // 25 ms maxima), so their upper bound only catches gross errors, such
    // as a delay applied twice (80 ms and more).
    assert!(min >= 30_000, "{min}");
    assert!(p90 <= 75_000, "p90 {p90}");
    assert!(p90 - p10 >= 3_000, "jitter visible: p10 {p10} p90 {p90}");
    net.stop().expect("clean stop");
}
