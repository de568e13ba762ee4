#!/usr/bin/env bash
# Seed 004 ("Adding QUIC support to the Tor network") on onionmix: the
# same topology with QUIC links (CUBIC, and BBR), TLS links and
# stock tor, side by side in one `onionmix compare` per condition, through
# the link emulator (needs root). Results go to $OUT (default
# /tmp/seed-004); docs/experiments/seed-004/README.md summarises every
# cell, and cells.md there has each recorded run.
#
# Parts:
#   s1     seed 004's scenario 1 and its lossy test: one client, 3-hop
#          circuits, 320 KiB and 5 MiB downloads, each on a new circuit,
#          for every delay in DELAYS (ms per link, one way) and loss in
#          LOSSES (per link); RUNS per series (the seed: 50)
#   s2 s3 s4
#          seed 004's scenarios 2-4: two clients at once, each pinned to
#          its own 3-hop circuit (built before each round, closed after):
#          s2 the circuits share only the exit; s3 the whole path; s4 the
#          middle and the exit, so one link (middle-exit). Each round both
#          fetch 320 KiB, then both 5 MiB. RUNS234 rounds (the seed: 25,
#          so 50 samples per series), every delay and loss
#   s5     seed 004's scenario 5: 8 relays, 16 clients fetching 320 KiB at
#          once on random paths, RUNS5 rounds, every delay and loss
#   stalls the stall table (a stall: 2 s or more without a received byte,
#          `max_gap_ms`) of everything under $OUT
#   fairness
#          not seed 004's: what a QUIC link's controller takes from a TCP
#          flow at one emulated bottleneck (`onionmix emulator fairness`
#          with $FAIRNESS_ARGS, e.g. "--loss 0.01 --repeats 5"; output in
#          $OUT/fairness.md; docs/quic-links.md §8). Not in the default
#          parts
#
#   nice -n 5 scripts/seed-004.sh                     # everything (hours)
#   RUNS=3 DELAYS=20 LOSSES=0 scripts/seed-004.sh s1  # a smoke run
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/seed-004}
RUNS=${RUNS:-50}
RUNS5=${RUNS5:-5}
RUNS234=${RUNS234:-25}
DELAYS=${DELAYS:-"20 40"}
LOSSES=${LOSSES:-"0 0.01"}
BIN=${BIN:-target/release/onionmix}
# Networks compared per condition, the first against each other one:
# quic-cubic, quic-bbr, tls, stock; also quic-cpc (QUIC with
# quic_congestion = 'cubic-per-circuit', docs/quic-links.md §8).
SERIES=${SERIES:-"quic-cubic quic-bbr tls stock"}
# The kernel's TCP congestion control for the run (TLS links, stock tor,
# the sink): set while the script runs (network namespaces copy it when
# they are made), restored after. Default cubic, Linux's and Debian's
# default, so quic-cubic against tls compares like with like; TCP_CC=bbr
# pairs tls with quic-bbr instead; TCP_CC= (empty) leaves the host alone.
TCP_CC=${TCP_CC-cubic}
CC_FILE=/proc/sys/net/ipv4/tcp_congestion_control
# What to put back when the script ends.
restore=()
trap 'for r in "${restore[@]}"; do eval "$r"; done' EXIT
if [ -n "$TCP_CC" ] && [ "$(cat "$CC_FILE")" != "$TCP_CC" ]; then
  restore+=("echo $(cat "$CC_FILE") >$CC_FILE")
  echo "$TCP_CC" >"$CC_FILE"
fi
echo "TCP congestion control: $(cat "$CC_FILE")"
# The kernel caps UDP socket buffers at net.core.rmem_max / wmem_max; QUIC
# endpoints ask for 1 MiB (docs/quic-links.md section 1), and with Linux's
# default 208 KiB busy relays drop datagrams that QUIC takes for
# congestion. Raised to UDP_BUF_MIN for the run where lower, restored after;
# UDP_BUF_MIN=0 leaves them alone.
UDP_BUF_MIN=${UDP_BUF_MIN:-1048576}
for k in rmem_max wmem_max; do
  f=/proc/sys/net/core/$k
  if [ "$UDP_BUF_MIN" -gt 0 ] && [ "$(cat "$f")" -lt "$UDP_BUF_MIN" ]; then
    restore+=("echo $(cat "$f") >$f")
    echo "$UDP_BUF_MIN" >"$f"
  fi
done
echo "UDP socket buffer caps: rmem_max $(cat /proc/sys/net/core/rmem_max), wmem_max $(cat /proc/sys/net/core/wmem_max)"
[ -x "$BIN" ] || cargo build --release -p onionmix
mkdir -p "$OUT/specs"
parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(s1 s2 s3 s4 s5 stalls)

# spec NAME IMPL LINKS CC DELAY LOSS RELAYS CLIENTS: write $OUT/specs/NAME.toml
spec() {
  local name=$1 impl=$2 links=$3 cc=$4 delay=$5 loss=$6 relays=$7 clients=$8 conf=""
  [ "$cc" = "" ] || conf="config = [\"quic_congestion = '$cc'\"]"
  {
    echo "name = \"$name\""
    echo "description = \"seed 004: $impl, $links links${cc:+ ($cc)}, $delay ms and loss $loss per link\""
    echo "bootstrap_timeout_secs = 240"
    [ "$impl" = onionmix ] && echo "links = \"$links\""
    echo
    echo "[emulation]"
    echo "seed = 4"
    echo "default = { delay_ms = $delay.0, loss = $loss }"
    for role in "authority 3" "relay $relays" "exit 2"; do
      set -- $role
      printf '\n[[nodes]]\nimpl = "%s"\nrole = "%s"\ncount = %s\n%s\n' "$impl" "$1" "$2" "$conf"
    done
    printf '\n[[nodes]]\nimpl = "%s"\nrole = "client"\ncount = %s\n%s\n' "$impl" "$clients" "$conf"
  } >"$OUT/specs/$name.toml"
}

# The four series of one condition, in compare order (ratios are the
# first against each other one).
series() {
  local tag=$1 delay=$2 loss=$3 relays=$4 clients=$5
  spec "quic-cubic-$tag" onionmix quic cubic "$delay" "$loss" "$relays" "$clients"
  spec "quic-bbr-$tag" onionmix quic bbr "$delay" "$loss" "$relays" "$clients"
  spec "quic-cpc-$tag" onionmix quic cubic-per-circuit "$delay" "$loss" "$relays" "$clients"
  spec "tls-$tag" onionmix tls "" "$delay" "$loss" "$relays" "$clients"
  spec "stock-$tag" tor tls "" "$delay" "$loss" "$relays" "$clients"
  for s in $SERIES; do printf -- '--spec %s ' "$OUT/specs/$s-$tag.toml"; done
}

for p in "${parts[@]}"; do
  case "$p" in
    s1)
      for d in $DELAYS; do
        for l in $LOSSES; do
          tag="${d}ms-loss${l}"
          printf 'workload = "bulk"\nsizes = [327680, 5242880]\nfresh_circuit = true\ntimeout_secs = 120\n' >"$OUT/specs/s1.toml"
          rm -rf "${OUT:?}/s1-$tag"
          # shellcheck disable=SC2046
          "$BIN" compare $(series "$tag" "$d" "$l" 3 1) \
            --workload "$OUT/specs/s1.toml" --runs "$RUNS" --out "$OUT/s1-$tag"
        done
      done
      ;;
    s2 | s3 | s4)
      case "$p" in
        s2) circuits='[["relay0", "relay1", "exit0"], ["relay2", "relay3", "exit0"]]' ;;
        s3) circuits='[["relay0", "relay1", "exit0"], ["relay0", "relay1", "exit0"]]' ;;
        s4) circuits='[["relay0", "relay1", "exit0"], ["relay2", "relay1", "exit0"]]' ;;
      esac
      # The pinned circuit is new each round; SOCKS isolation is moot.
      printf 'workload = "bulk"\nsizes = [327680, 5242880]\nfresh_circuit = false\ntimeout_secs = 120\ncircuits = %s\n' \
        "$circuits" >"$OUT/specs/$p.toml"
      for d in $DELAYS; do
        for l in $LOSSES; do
          tag="$p-${d}ms-loss${l}"
          rm -rf "${OUT:?}/$tag"
          # shellcheck disable=SC2046
          "$BIN" compare $(series "$tag" "$d" "$l" 4 2) \
            --workload "$OUT/specs/$p.toml" --runs "$RUNS234" --client all --concurrent --out "$OUT/$tag"
        done
      done
      ;;
    s5)
      printf 'workload = "bulk"\nsizes = [327680]\nfresh_circuit = true\ntimeout_secs = 120\n' >"$OUT/specs/s5.toml"
      for d in $DELAYS; do
        for l in $LOSSES; do
          tag="${d}ms-loss${l}"
          rm -rf "${OUT:?}/s5-$tag"
          # shellcheck disable=SC2046
          "$BIN" compare $(series "s5-$tag" "$d" "$l" 6 16) \
            --workload "$OUT/specs/s5.toml" --runs "$RUNS5" --client all --concurrent --out "$OUT/s5-$tag"
        done
      done
      ;;
    stalls)
      python3 - "$OUT" <<'PY'
import json, pathlib, sys, collections
out = pathlib.Path(sys.argv[1])
rows = []
for d in sorted(out.iterdir()):
    f = d / "results.jsonl"
    if not f.is_file():
        continue
    n = collections.Counter(); stalls = collections.Counter(); fails = collections.Counter()
    for line in f.open():
        r = json.loads(line)
        if r.get("kind") != "transfer":
            continue
        key = (r.get("label", "?"), r.get("size") or 0)
        n[key] += 1
        if r.get("error"):
            fails[key] += 1
        elif r.get("metrics", {}).get("max_gap_ms", 0) >= 2000:
            stalls[key] += 1
    for key in sorted(n):
        rows.append((d.name, key[0], key[1], n[key], stalls[key], fails[key]))
lines = ["| run | series | size | transfers | stalls (>= 2 s without progress) | errors/timeouts |",
         "|---|---|--:|--:|--:|--:|"]
lines += [f"| {a} | {b} | {c} | {d} | {e} | {f} |" for a, b, c, d, e, f in rows]
# Seed 004's Tables 8.1-8.3: rounds by how many of their transfers
# stalled (two-client scenarios: 0, 1 or 2 of 2).
rounds = collections.defaultdict(lambda: collections.Counter())
for d in sorted(out.iterdir()):
    f = d / "results.jsonl"
    if not f.is_file() or not d.name[:2] in ("s2", "s3", "s4"):
        continue
    per = collections.defaultdict(list)
    for line in f.open():
        r = json.loads(line)
        if r.get("kind") != "transfer":
            continue
        stalled = bool(r.get("error")) or r.get("metrics", {}).get("max_gap_ms", 0) >= 2000
        per[(r.get("label", "?"), r.get("size") or 0, r.get("run"))].append(stalled)
    for (label, size, _), v in per.items():
        rounds[(d.name, label, size)][sum(v)] += 1
if rounds:
    lines += ["", "| run | series | size | rounds with 0 / 1 / 2 clients stalled or failed |",
              "|---|---|--:|---|"]
    for (a, b, c), k in sorted(rounds.items()):
        lines.append(f"| {a} | {b} | {c} | {k[0]} / {k[1]} / {k[2]} |")
(out / "stalls.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
      ;;
    fairness)
      # shellcheck disable=SC2086
      "$BIN" emulator fairness ${FAIRNESS_ARGS:-} | tee "$OUT/fairness.md"
      ;;
    *)
      echo "unknown part: $p (s1, s2, s3, s4, s5, stalls, fairness)" >&2
      exit 2
      ;;
  esac
done
echo "results in $OUT"
