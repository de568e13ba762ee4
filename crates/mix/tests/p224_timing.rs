//! dudect-style timing test of P-224 scalar multiplication by secret
//! scalars (the mix's long-term key, the per-hop blinding factor).
//!
//! Two classes of scalars are timed against the same point: *sparse*
//! scalars (all but four nibbles zero, at random positions) and uniformly
//! random scalars. The old hand-written multiplication skipped the point
//! addition for every zero nibble, so sparse scalars ran faster; a
//! constant-time implementation shows no difference. Welch's t statistic
//! over thousands of samples decides: |t| < 10 passes (dudect's usual
//! "definitely leaks" line is 10; a leaking implementation scores in the
//! hundreds, see docs/reliability.md).
//!
//! Robust on a busy 2-core machine: classes are interleaved at random (so
//! load drifts hit both equally), each sample is the minimum of a small
//! batch of repetitions (preemptions inflate, never deflate, a time), and
//! both classes are cropped at the same pooled percentile before the test.
//! The second test runs the same harness on the variable-time code
//! ([`Point::mul_vartime`]) and requires it to be flagged, so the test shows
//! its own power every run.

use std::sync::Mutex;
use std::time::Instant;

use onionmix_mix::sphinx::p224::Point;
use rand::rngs::StdRng;
use rand::{Rng, RngCore, SeedableRng};

/// Timing tests must not overlap each other.
static SERIAL: Mutex<()> = Mutex::new(());

const SAMPLES: usize = 4000;
const BATCH: usize = 3;
const WARMUP: usize = 200;
const CROP_PERCENTILE: f64 = 0.90;
const THRESHOLD: f64 = 10.0;

fn random_scalar(rng: &mut StdRng) -> [u8; 28] {
    let mut k = [0u8; 28];
    rng.fill_bytes(&mut k);
    k[0] &= 0x7f; // below n, so both classes are used as given
    k[0] |= 0x40; // same bit length for both classes
    k
}

/// All nibbles zero except four at random positions (and the top one, so
/// the bit length matches the random class).
fn sparse_scalar(rng: &mut StdRng) -> [u8; 28] {
    let mut k = [0u8; 28];
    k[0] = 0x40;
    for _ in 0..4 {
        let nib = rng.gen_range(2..56);
        let v: u8 = rng.gen_range(1..16);
        let byte = nib / 2;
        if nib % 2 == 0 {
            k[byte] |= v << 4;
        } else {
            k[byte] |= v;
        }
    }
    k
}

struct Result {
    t: f64,
    mean_sparse_ns: f64,
    mean_random_ns: f64,
    n: (usize, usize),
}

fn mean_var(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let m = x.iter().sum::<f64>() / n;
    let v = x.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / (n - 1.0);
    (m, v)
}

/// Welch's t of two samples.
fn welch_t(a: &[f64], b: &[f64]) -> f64 {
    let (ma, va) = mean_var(a);
    let (mb, vb) = mean_var(b);
    (ma - mb) / (va / a.len() as f64 + vb / b.len() as f64).sqrt()
}

fn measure(mul: impl Fn(&Point, &[u8; 28]) -> Option<Point>, seed: u64) -> Result {
    let mut rng = StdRng::seed_from_u64(seed);
    let base = Point::generator()
        .mul(&random_scalar(&mut rng))
        .expect("nonzero scalar");
    for _ in 0..WARMUP {
        let k = random_scalar(&mut rng);
        std::hint::black_box(mul(&base, &k));
    }
    let mut sparse = Vec::with_capacity(SAMPLES);
    let mut random = Vec::with_capacity(SAMPLES);
    for _ in 0..2 * SAMPLES {
        let is_sparse = rng.r#gen::<bool>();
        let k = if is_sparse {
            sparse_scalar(&mut rng)
        } else {
            random_scalar(&mut rng)
        };
        let mut best = u128::MAX;
        for _ in 0..BATCH {
            let k = std::hint::black_box(k);
            let t0 = Instant::now();
            let r = mul(&base, &k);
            let dt = t0.elapsed().as_nanos();
            std::hint::black_box(r);
            best = best.min(dt);
        }
        if is_sparse {
            sparse.push(best as f64);
        } else {
            random.push(best as f64);
        }
    }
    let mut pooled: Vec<f64> = sparse.iter().chain(random.iter()).copied().collect();
    pooled.sort_by(f64::total_cmp);
    let cut = pooled[((pooled.len() as f64) * CROP_PERCENTILE) as usize];
    let sparse: Vec<f64> = sparse.into_iter().filter(|x| *x <= cut).collect();
    let random: Vec<f64> = random.into_iter().filter(|x| *x <= cut).collect();
    Result {
        t: welch_t(&sparse, &random),
        mean_sparse_ns: mean_var(&sparse).0,
        mean_random_ns: mean_var(&random).0,
        n: (sparse.len(), random.len()),
    }
}

fn report(what: &str, r: &Result) {
    eprintln!(
        "{what}: |t| = {:.1} (sparse mean {:.1} us over {}, random mean {:.1} us over {})",
        r.t.abs(),
        r.mean_sparse_ns / 1e3,
        r.n.0,
        r.mean_random_ns / 1e3,
        r.n.1
    );
}

#[test]
fn secret_scalar_mul_is_constant_time() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let r = measure(|p, k| p.mul(k), 1);
    report("Point::mul (constant time, RustCrypto p224)", &r);
    assert!(
        r.t.abs() < THRESHOLD,
        "secret-scalar multiplication time depends on the scalar: |t| = {:.1}",
        r.t.abs()
    );
}

#[test]
fn timing_harness_flags_variable_time_code() {
    let _g = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let r = measure(|p, k| p.mul_vartime(k), 2);
    report("Point::mul_vartime (the old code)", &r);
    assert!(
        r.t.abs() > THRESHOLD,
        "the harness did not detect the known leak of the variable-time code: |t| = {:.1}",
        r.t.abs()
    );
}
