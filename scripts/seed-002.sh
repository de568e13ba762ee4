#!/usr/bin/env bash
# Seed 002 ("Transparent low-latency network anonymisation for mobile
# devices") on onionmix: goodput through the transparent tunnel over 2 and
# 3 relays and through the SOCKS port over 3 (seed 002's table), the
# tunnel against SOCKS on one circuit (goodput with 1 and 3 flows, CPU per
# MiB), and the tunnel's added round-trip time, on one all-onionmix
# network on loopback. Needs root (the tunnel's namespace). Results go to
# $OUT (default /tmp/seed-002); docs/experiments/seed-002/README.md has
# the recorded tables.
#
#   nice -n 19 scripts/seed-002.sh       # everything (about 20 minutes on 2 cores)
#   RUNS=3 scripts/seed-002.sh rtt       # one part, fewer runs
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/seed-002}
RUNS=${RUNS:-10}
BIN=${BIN:-target/release/onionmix}
W=docs/experiments/seed-002/workloads
[ -x "$BIN" ] || cargo build --release -p onionmix
mkdir -p "$OUT"
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(goodput3 goodput2 rtt)

net="$OUT/net"
rm -rf "$net"
"$BIN" testnet start --spec onionmix-basic --dir "$net"
trap '"$BIN" testnet stop --dir "$net" || true' EXIT
for p in "${parts[@]}"; do
  case "$p" in
    goodput3) w="$W/goodput-3hops.toml" ;;
    goodput2) w="$W/goodput-2hops.toml" ;;
    rtt) w="$W/rtt-3hops.toml" ;;
    *)
      echo "unknown part: $p (goodput3, goodput2, rtt)" >&2
      exit 2
      ;;
  esac
  rm -rf "${OUT:?}/$p"
  "$BIN" measure --dir "$net" --workload "$w" --runs "$RUNS" --out "$OUT/$p"
done
"$BIN" testnet stop --dir "$net"
trap - EXIT
# Seed 002's table: the three goodput runs together.
if [ -d "$OUT/goodput3" ] && [ -d "$OUT/goodput2" ]; then
  "$BIN" report "$OUT/goodput3" "$OUT/goodput2" --out "$OUT/table"
fi
echo "results in $OUT"
