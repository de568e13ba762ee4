#!/usr/bin/env bash
# Seed 001 ("Performance of hidden services in Tor", 2013) on today's v3
# onion services: the same questions (throughput, access time for its
# three use cases, VoIP-like round trips, reliability) asked of an
# all-onionmix and an all-stock-tor network with the same topology and
# 20 ms on every link, in one `onionmix compare` run per workload; then
# onion service vs exit path on loopback. Results go to $OUT (default
# /tmp/seed-001); docs/experiments/seed-001/README.md has the recorded
# tables.
#
#   scripts/seed-001.sh                # everything (about 45 minutes on 2 cores)
#   RUNS=5 scripts/seed-001.sh bulk    # one part, fewer runs
#   RUNS=12 scripts/seed-001.sh goal   # issue 12's goal: 5 MiB and fresh-client
#                                      # access in one compare run
#   scripts/seed-001.sh loopback-goodput   # onion vs exit throughput, loopback
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/seed-001}
RUNS=${RUNS:-8}
BIN=${BIN:-target/release/onionmix}
SPECS=(--spec onionmix-hs-20ms --spec stock-hs-20ms)
[ -x "$BIN" ] || cargo build --release -p onionmix
mkdir -p "$OUT"
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(bulk access voip reliability loopback)

for p in "${parts[@]}"; do
  case "$p" in
    bulk | access | voip)
      rm -rf "$OUT/$p"
      "$BIN" compare "${SPECS[@]}" --workload "docs/measure-hs/$p-onion.toml" \
        --runs "$RUNS" --out "$OUT/$p"
      ;;
    goal)
      # Both of issue 12's measures on the same two networks: bulk (5 MiB
      # time to last byte, on a new rendezvous circuit each) and access
      # (UC1, the fresh client process, with UC2 and UC3).
      rm -rf "$OUT/$p"
      "$BIN" compare "${SPECS[@]}" --workload docs/measure-hs/bulk-onion.toml \
        --workload docs/measure-hs/access-onion.toml --runs "$RUNS" --out "$OUT/$p"
      ;;
    loopback-goodput)
      # Throughput in steady state on loopback: one stream for
      # DURATION s, through the onion service and through an exit, in
      # turn, ROUNDS times (CPU-bound: the 2-core machine runs every node).
      net="$OUT/loopback-net"
      rm -rf "$net" "$OUT/loopback-goodput"
      mkdir -p "$OUT/loopback-goodput"
      "$BIN" testnet start --spec onionmix-hs --dir "$net"
      trap '"$BIN" testnet stop --dir "$net" || true' EXIT
      for t in onion sink; do
        printf 'workload = "goodput"\ntarget = "%s"\nstreams = [1]\nduration_secs = %s\nwarmup_secs = 2\nbaseline = false\n' \
          "$t" "${DURATION:-10}" > "$OUT/loopback-goodput/$t.toml"
      done
      for i in $(seq 1 "${ROUNDS:-5}"); do
        for t in onion sink; do
          "$BIN" measure --dir "$net" --workload "$OUT/loopback-goodput/$t.toml" \
            --runs 1 --out "$OUT/loopback-goodput/$t-$i"
        done
      done
      "$BIN" report "$OUT"/loopback-goodput/onion-* --out "$OUT/loopback-goodput/onion"
      "$BIN" report "$OUT"/loopback-goodput/sink-* --out "$OUT/loopback-goodput/exit"
      "$BIN" testnet stop --dir "$net"
      trap - EXIT
      ;;
    reliability)
      rm -rf "$OUT/$p"
      "$BIN" compare "${SPECS[@]}" --workload docs/measure-hs/reliability-onion.toml \
        --runs "${REL_RUNS:-100}" --out "$OUT/$p"
      ;;
    loopback)
      # One all-onionmix network on loopback: 5 MiB through the onion
      # service and through an exit, each fetch on a new circuit.
      net="$OUT/loopback-net"
      rm -rf "$net" "$OUT/loopback-onion" "$OUT/loopback-exit"
      "$BIN" testnet start --spec onionmix-hs --dir "$net"
      trap '"$BIN" testnet stop --dir "$net" || true' EXIT
      "$BIN" measure --dir "$net" --workload docs/measure-hs/bulk-onion.toml \
        --runs "$((RUNS + 2))" --out "$OUT/loopback-onion"
      "$BIN" measure --dir "$net" --workload bulk --runs "$((RUNS + 2))" \
        --out "$OUT/loopback-exit"
      "$BIN" testnet stop --dir "$net"
      trap - EXIT
      ;;
    *)
      echo "unknown part: $p (bulk, access, voip, reliability, loopback, goal, loopback-goodput)" >&2
      exit 2
      ;;
  esac
done
echo "results in $OUT"
