//! Configured loss p in {0.5%, 1%, 5%} gives a measured loss rate inside the
//! 99% binomial interval over 20,000 UDP packets; the same seed drops the
//! same packets, another seed other packets; every drop is the emulator's
//! own (its counters account for every packet sent). Needs root.

mod common_net;

use onionmix_emu::probe::{UdpSinkResult, UdpSourceResult};
use onionmix_emu::testkit::TestNet;
use onionmix_emu::{LinkProfile, NodeSpec, PairOverride, ProfileRef, Topology};
use std::path::Path;
use std::time::Duration;

const N: u32 = 20_000;
const LOSSES: [f64; 3] = [0.005, 0.01, 0.05];

fn exe() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_onionmix"))
}

fn topology(seed: u64) -> Topology {
    let mut t = Topology::uniform(&["src"], LinkProfile::delay(1.0), seed);
    t.subnet = "10.77.12.0/24".parse().expect("subnet");
    for (i, p) in LOSSES.iter().enumerate() {
        let name = format!("dst{i}");
        t.nodes.push(NodeSpec::new(name.clone()));
        t.pairs.push(PairOverride {
            from: "src".into(),
            to: name,
            profile: ProfileRef::Inline(LinkProfile {
                delay_ms: 1.0,
                loss: *p,
                ..Default::default()
            }),
            symmetric: false,
        });
    }
    t
}

/// Run one emulator with `seed`; return the missing sequence numbers per p.
fn run(seed: u64) -> Vec<Vec<u32>> {
    let dir = tempfile::tempdir().expect("tempdir");
    let net = TestNet::start(exe(), dir.path(), topology(seed)).expect("emulator starts");
    let mut all = Vec::new();
    for (i, p) in LOSSES.iter().enumerate() {
        let dst = format!("dst{i}");
        let listen = net.sock(&dst, 9000);
        let sink = net
            .server(
                &dst,
                &[
                    "udp-sink".into(),
                    format!("--listen={listen}"),
                    format!("--count={N}"),
                    "--idle-ms=3000".into(),
                    "--max-s=60".into(),
                ],
            )
            .expect("sink");
        let sent: UdpSourceResult = net
            .client(
                "src",
                &[
                    "udp-source".into(),
                    format!("--connect={listen}"),
                    format!("--count={N}"),
                    "--pps=10000".into(),
                    "--size=64".into(),
                ],
                Duration::from_secs(60),
            )
            .expect("source");
        assert_eq!(sent.sent, N);
        let out = sink.finish(Duration::from_secs(70)).expect("sink finishes");
        let r: UdpSinkResult = onionmix_emu::probe::last_json(&out).expect("sink json");
        let lost = r.missing.len() as u32;
        assert_eq!(r.received + lost, N);
        assert_eq!(r.duplicates, 0);
        assert_eq!(r.out_of_order, 0, "no reordering configured");
        // First the emulator's own record: every packet reached it, and
        // its loss decisions fall in the 99% interval of Binomial(N, p)
        // (normal approximation with continuity correction; N*p >= 100).
        // Its status file is rewritten periodically: wait until the
        // counters account for every packet.
        let label = format!("core/src/{dst}");
        let st = net
            .status_until(Duration::from_secs(20), |st| {
                st.link(&label).is_some_and(|l| {
                    l.counters.rx_packets == u64::from(N)
                        && l.counters.tx_packets + l.counters.drop_loss == u64::from(N)
                })
            })
            .expect("status");
        let l = st.link(&label).expect("link");
        let n = f64::from(N);
        let mean = n * p;
        let sd = (n * p * (1.0 - p)).sqrt();
        let (lo, hi) = (mean - 2.576 * sd - 0.5, mean + 2.576 * sd + 0.5);
        let decided = l.counters.drop_loss;
        eprintln!(
            "seed {seed} p={p}: emulator dropped {decided}/{N} = {:.3}% (99% interval {lo:.0}..{hi:.0}); receiver missed {lost}",
            100.0 * decided as f64 / n
        );
        assert_eq!(
            l.counters.rx_packets,
            u64::from(N),
            "the kernel dropped packets before the emulator"
        );
        assert!(
            decided as f64 >= lo && decided as f64 <= hi,
            "p={p}: the emulator dropped {decided}, outside {lo:.0}..{hi:.0}"
        );
        // End to end: the receiver missed exactly the packets the emulator
        // dropped (nothing lost after it either).
        assert_eq!(
            decided,
            u64::from(lost),
            "drops not all from the emulator (receiver missed {lost}, emulator dropped {decided})"
        );
        all.push(r.missing);
    }
    net.stop().expect("clean stop");
    all
}

#[test]
fn emu_loss_rate_in_binomial_interval_and_reproducible() {
    if !common_net::emulator_available("emu_loss_rate_in_binomial_interval_and_reproducible") {
        return;
    }
    let a = run(4242);
    let b = run(4242);
    assert_eq!(a, b, "same seed must give the same drops");
    let c = run(4243);
    for (x, y) in a.iter().zip(&c) {
        assert_ne!(x, y, "another seed must give other drops");
    }
}
