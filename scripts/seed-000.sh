#!/usr/bin/env bash
# Seed 000 ("IRMA and Network Anonymity with Tor", 2021): the app's
# sessions (new session, get commitments, get proof, respond permission)
# over HTTP and HTTPS, with a NEWNYM before every session after the first
# and the seed's 13 s pause, from a client behind emulated 4G, home WiFi,
# unstable WiFi and office WiFi access links; per profile and protocol
# one `onionmix compare` of an all-onionmix and an all-stock-tor network
# (same topology, 20 ms core links), which also measures the sessions
# straight to the sink from the client's namespace (no Tor). Then Tables
# 3-6 in the seed's shape: $OUT/seed-000.md. Needs root (link emulator).
# docs/experiments/seed-000/README.md has the profiles and the results.
#
#   scripts/seed-000.sh                         # all 8 cells, 50 sessions each (about 6 h)
#   SESSIONS=3 scripts/seed-000.sh              # smoke run
#   PROFILES="4g" PROTOCOLS="http https" scripts/seed-000.sh
#   scripts/seed-000.sh report                  # tables again from $OUT
#   OPTIMISTIC_REPLY=1 scripts/seed-000.sh      # the onionmix client with
#       socks_optimistic_reply = true (prop 309: SOCKS success at once, the
#       request travels with BEGIN); write to another OUT
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/seed-000}
SESSIONS=${SESSIONS:-50}
PAUSE_MS=${PAUSE_MS:-13000}
PROFILES=${PROFILES:-4g homewifi unstablewifi officewifi}
PROTOCOLS=${PROTOCOLS:-http https}
BIN=${BIN:-target/release/onionmix}
SPECS=docs/experiments/seed-000/specs
[ -x "$BIN" ] || cargo build --release -p onionmix
mkdir -p "$OUT"
if [ "${OPTIMISTIC_REPLY:-0}" = 1 ]; then
  # The same networks, the onionmix client answering SOCKS CONNECT at once.
  mkdir -p "$OUT/specs"
  cp "$SPECS"/tor-seed000-*.toml "$OUT/specs/"
  for f in "$SPECS"/onionmix-seed000-*.toml; do
    sed '/^role = "client"$/a config = ["socks_optimistic_reply = true"]' "$f" >"$OUT/specs/$(basename "$f")"
  done
  SPECS="$OUT/specs"
fi

if [ "${1:-}" != report ]; then
  for proto in $PROTOCOLS; do
    case "$proto" in
      http) https=false ;;
      https) https=true ;;
      *) echo "unknown protocol: $proto (http, https)" >&2; exit 2 ;;
    esac
    # The session workload: the built-in script (seed000_script), a
    # NEWNYM and a pause before every session after the first, and an
    # untimed warm-up fetch on the new circuit (the seed's Tor check).
    cat >"$OUT/session-$proto.toml" <<TOML
workload = "session"
runs = $SESSIONS
https = $https
newnym = true
pause_ms = $PAUSE_MS
warm_circuit = true
baseline = true
timeout_secs = 60
TOML
    for p in $PROFILES; do
      [ -f "$SPECS/onionmix-seed000-$p.toml" ] || { echo "unknown profile: $p" >&2; exit 2; }
      cell="$OUT/$p-$proto"
      rm -rf "$cell"
      echo "== $p $proto: $SESSIONS sessions per client" >&2
      # compare stops both networks when it ends, also on failure.
      "$BIN" compare --spec "$SPECS/onionmix-seed000-$p.toml" \
        --spec "$SPECS/tor-seed000-$p.toml" \
        --workload "$OUT/session-$proto.toml" --runs "$SESSIONS" --out "$cell" >/dev/null
      rm -rf "$cell/nets"
    done
  done
fi

dirs=()
for d in "$OUT"/*-http "$OUT"/*-https; do
  [ -f "$d/results.jsonl" ] && dirs+=("$d")
done
[ ${#dirs[@]} -gt 0 ] || { echo "no results in $OUT" >&2; exit 1; }
"$BIN" report --seed000 "${dirs[@]}" --out "$OUT" >/dev/null
echo "tables in $OUT/seed-000.md"
