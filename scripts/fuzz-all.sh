#!/usr/bin/env bash
# Run cargo-fuzz targets one after another (one job at a time), each until
# RUNS executions or MAX_TIME seconds, then merge what it found into the
# kept corpus (minimised with libFuzzer's -merge=1; seed-* files are kept
# as they are). Writes one log per target and a summary line per target
# (tab-separated) to $LOG_DIR/summary.tsv.
#
#   scripts/fuzz-all.sh                 # every target
#   scripts/fuzz-all.sh vote socks      # some
#   RUNS=100000 MAX_TIME=60 scripts/fuzz-all.sh cell_codec
#
# Builds and runs under `nice -n $NICE` (19 by default: the machines it
# runs on are shared). TIMEOUT is libFuzzer's -timeout (seconds of wall
# time after which an input counts as a hang); raise it on a busy machine.
# BUILD=0 runs the binaries already built.
#
# Needs nightly Rust and cargo-fuzz (`cargo install cargo-fuzz --locked`).
#
# Two builds: the default one (SanitizerCoverage with trace-compares, so
# libFuzzer solves comparisons against magic values) for the parsers, and
# one without trace-compares (fuzz/target-nocmp) for the targets that do
# public-key work on every input: trace-compares instruments every
# comparison in the bignum and curve arithmetic and makes them about ten
# times slower.
set -uo pipefail
cd "$(dirname "$0")/.."

RUNS=${RUNS:-10000000}
MAX_TIME=${MAX_TIME:-2400}
TIMEOUT=${TIMEOUT:-1}
LOG_DIR=${LOG_DIR:-/tmp/onionmix-fuzz-logs}
WORK_DIR=${WORK_DIR:-/tmp/onionmix-fuzz-work}
MERGE=${MERGE:-1}
NICE=${NICE:-19}
mkdir -p "$LOG_DIR" "$WORK_DIR"

if [ "$#" -gt 0 ]; then
  targets=("$@")
else
  mapfile -t targets < <(ls fuzz/fuzz_targets | sed 's/\.rs$//')
fi

NOCMP_TARGETS=${NOCMP_TARGETS:-"authcert chan_initiator chan_responder circuit_handshake consensus
  detached_sig dir_response exit_policy link_certs loopix_nodes microdesc routerdesc sphinx_x25519
  sphinxmix vote"}

if [ "${BUILD:-1}" = 1 ]; then
  {
    nice -n "$NICE" cargo +nightly fuzz build --sanitizer none &&
      nice -n "$NICE" cargo +nightly fuzz build --sanitizer none --no-trace-compares --target-dir fuzz/target-nocmp
  } >"$LOG_DIR/build.log" 2>&1 || {
    echo "build failed, see $LOG_DIR/build.log" >&2
    exit 1
  }
fi

[ -f "$LOG_DIR/summary.tsv" ] ||
  printf 'target\tbuild\texecs\tseconds\texec_per_s\tcorpus_files\tcorpus_bytes\tresult\tdate\n' >"$LOG_DIR/summary.tsv"

for t in "${targets[@]}"; do
  bin_dir=fuzz/target/x86_64-unknown-linux-gnu/release
  build=cmp
  if [[ " $(echo $NOCMP_TARGETS) " == *" $t "* ]]; then
    bin_dir=fuzz/target-nocmp/x86_64-unknown-linux-gnu/release
    build=nocmp
  fi
  work="$WORK_DIR/$t"
  mkdir -p "$work" "fuzz/artifacts/$t"
  log="$LOG_DIR/$t.log"
  echo "==> $t, $build build ($(date -u +%H:%M:%S))"
  start=$(date +%s)
  nice -n "$NICE" "$bin_dir/$t" "$work" "fuzz/corpus/$t" \
    -runs="$RUNS" -max_total_time="$MAX_TIME" -rss_limit_mb=2048 \
    -timeout="$TIMEOUT" -print_final_stats=1 \
    -artifact_prefix="fuzz/artifacts/$t/" >"$log" 2>&1
  rc=$?
  secs=$(($(date +%s) - start))
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$log" | tail -n1)
  execs=${execs:-0}
  result=ok
  [ "$rc" -ne 0 ] && result="exit-$rc"
  grep -q 'ERROR: libFuzzer\|==ERROR\|panicked at' "$log" && result="CRASH(rc=$rc)"
  if [ "$MERGE" = 1 ] && [ "$result" = ok ]; then
    merged="$WORK_DIR/$t.merged"
    rm -rf "$merged"
    mkdir -p "$merged"
    nice -n "$NICE" "$bin_dir/$t" -merge=1 -rss_limit_mb=2048 -timeout=10 "$merged" \
      "fuzz/corpus/$t" "$work" >"$LOG_DIR/$t.merge.log" 2>&1
    if [ "$(ls "$merged" | wc -l)" -gt 0 ]; then
      find "fuzz/corpus/$t" -type f ! -name 'seed-*' -delete
      # Drop merged copies of seed files, keep the rest.
      for f in "$merged"/*; do
        dup=0
        for s in "fuzz/corpus/$t"/seed-*; do
          cmp -s "$f" "$s" && dup=1 && break
        done
        [ "$dup" = 0 ] && cp "$f" "fuzz/corpus/$t/"
      done
    fi
  fi
  files=$(find "fuzz/corpus/$t" -type f | wc -l)
  bytes=$(du -sb "fuzz/corpus/$t" | cut -f1)
  rate=$((execs / (secs > 0 ? secs : 1)))
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$t" "$build" "$execs" "$secs" "$rate" "$files" \
    "$bytes" "$result" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >>"$LOG_DIR/summary.tsv"
  echo "    $result: $execs execs in ${secs}s ($rate/s), corpus $files files, $bytes bytes"
done
