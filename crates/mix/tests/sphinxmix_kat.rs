//! Known-answer tests against vectors produced by PyPI sphinxmix 0.0.7
//! (Python 3.11, petlib 0.0.45, msgpack-python 0.5.6) with its randomness
//! fixed: `gensecret() -> x`, `urandom(n) -> bytes(i % 251 for i in range(n))`.
//! Regenerate with:
//!   .venv/bin/python scripts/sphinxmix/sphinxmix_tool.py \
//!       < crates/mix/tests/fixtures/sphinxmix_vecN.req.json > ...resp.json
//! These run without Python; `sphinxmix_interop.rs` repeats them live.

mod common;

use common::*;

#[test]
fn kat_vec1_default_params_three_hops() {
    check_vector(
        &fixture("sphinxmix_vec1.req.json"),
        &fixture("sphinxmix_vec1.resp.json"),
    );
}

#[test]
fn kat_vec2_loopix_six_hops() {
    check_vector(
        &fixture("sphinxmix_vec2.req.json"),
        &fixture("sphinxmix_vec2.resp.json"),
    );
}
