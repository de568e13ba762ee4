//! The stable part of fuzzing, run by `cargo test --workspace --release`:
//! for every target, replay its kept corpus (`fuzz/corpus/<target>/`) and
//! kept regressions (`fuzz/artifacts/<target>/`), then run a seeded,
//! deterministic mutation loop over the corpus. An input that panics is
//! written to `target/fuzz-failures/<target>-<n>` and the test fails
//! naming it (reproduce with `cargo +nightly fuzz run <target> <file>`).

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use onionmix_fuzzing::mutate::{Rng, mutate, seed_for};
use onionmix_fuzzing::{TARGETS, Target, target};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files of a directory, sorted by name (missing directory: none).
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut v: Vec<(PathBuf, Vec<u8>)> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .filter_map(|p| std::fs::read(&p).ok().map(|b| (p, b)))
        .collect();
    v.sort_by(|a, b| a.0.cmp(&b.0));
    v
}

fn save_failure(t: &Target, n: u64, input: &[u8]) -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/fuzz-failures");
    let _ = std::fs::create_dir_all(&dir);
    let p = dir.join(format!("{}-{n}", t.name));
    let _ = std::fs::write(&p, input);
    p
}

fn run_one(t: &Target, what: &str, n: u64, input: &[u8]) {
    if catch_unwind(AssertUnwindSafe(|| (t.run)(input))).is_err() {
        let p = save_failure(t, n, input);
        panic!(
            "target {} panicked on {what}; input saved to {}",
            t.name,
            p.display()
        );
    }
}

/// Longest mutated input: the longest corpus entry plus a little.
fn max_len(corpus: &[Vec<u8>]) -> usize {
    corpus.iter().map(Vec::len).max().unwrap_or(0) + 256
}

fn check(name: &str) {
    let t = target(name).unwrap_or_else(|| panic!("no target {name}"));
    let corpus_dir = fuzz_dir().join("corpus").join(name);
    let corpus = files(&corpus_dir);
    assert!(
        !corpus.is_empty(),
        "target {name} has no kept corpus in {}",
        corpus_dir.display()
    );
    for (i, (p, b)) in corpus.iter().enumerate() {
        run_one(t, &format!("corpus file {}", p.display()), i as u64, b);
    }
    for (i, (p, b)) in files(&fuzz_dir().join("artifacts").join(name))
        .iter()
        .enumerate()
    {
        run_one(t, &format!("regression {}", p.display()), i as u64, b);
    }
    let inputs: Vec<Vec<u8>> = corpus.into_iter().map(|(_, b)| b).collect();
    let max = max_len(&inputs);
    let mut rng = Rng::new(seed_for(name));
    for i in 0..t.ci_iterations {
        let base = &inputs[rng.below(inputs.len())];
        let m = mutate(&mut rng, base, &inputs, max);
        run_one(t, &format!("mutation {i}"), u64::from(i), &m);
    }
}

/// One test per target, so failures name the target and targets run in
/// parallel when the harness has threads.
macro_rules! targets {
    ($($name:ident),* $(,)?) => {
        $(
            #[test]
            fn $name() {
                check(stringify!($name));
            }
        )*

        #[test]
        fn every_target_is_tested_and_has_a_harness() {
            let tested = [$(stringify!($name)),*];
            for t in TARGETS {
                assert!(tested.contains(&t.name), "target {} has no test here", t.name);
                let harness = fuzz_dir().join("fuzz_targets").join(format!("{}.rs", t.name));
                let text = std::fs::read_to_string(&harness)
                    .unwrap_or_else(|_| panic!("no cargo-fuzz harness {}", harness.display()));
                assert!(
                    text.contains(&format!("onionmix_fuzzing::{}(", t.name)),
                    "{} does not call onionmix_fuzzing::{}",
                    harness.display(),
                    t.name
                );
            }
            assert_eq!(tested.len(), TARGETS.len());
        }
    };
}

targets!(
    cell_codec,
    relay_msg,
    chan_initiator,
    chan_responder,
    circ_client,
    circ_relay,
    conflux,
    ed25519_cert,
    x509_cert,
    link_certs,
    circuit_handshake,
    consensus,
    microdesc,
    authcert,
    routerdesc,
    vote,
    detached_sig,
    dir_response,
    netdoc_types,
    socks,
    onion_addr,
    control_port,
    http_request,
    http_response,
    http_chunked,
    exit_dns,
    dir_request,
    exit_policy,
    sphinxmix,
    sphinx_x25519,
    msgpack,
    loopix_control,
    loopix_nodes,
    emu_packet,
    sink_http,
    sink_dns,
    torctl_event,
    tunnel_packet,
    tunnel_dns,
);
