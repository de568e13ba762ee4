#!/usr/bin/env bash
# CPU per MiB of QUIC links against TLS links on loopback (issue 15's
# goal: within 1.3x). For each spec (default onionmix-basic-quic and
# onionmix-basic, the same topology), ROUNDS times in turn: start the
# network, read the CPU time (user + system) of every relay, exit and
# client process, download through the client for DURATION seconds
# (`goodput`, one stream, RUNS runs), read the CPU time again, stop the
# network. Prints and writes $OUT/cpu.md: CPU ms per MiB carried, per
# round and the median per spec, and the ratio of the first spec to the
# second: of the medians, and per round (the two networks ran one after
# the other, so a round's ratio is the least touched by the drift of a
# VM's speed) with the median of those and a 95% bootstrap interval.
#
#   scripts/quic-cpu.sh                      # ~10 minutes on 2 cores
#   ROUNDS=1 RUNS=1 scripts/quic-cpu.sh      # a smoke run
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/quic-cpu}
ROUNDS=${ROUNDS:-3}
RUNS=${RUNS:-3}
DURATION=${DURATION:-15}
SPECS=${SPECS:-"onionmix-basic-quic onionmix-basic"}
BIN=${BIN:-target/release/onionmix}
[ -x "$BIN" ] || cargo build --release -p onionmix
rm -rf "$OUT"
mkdir -p "$OUT"
printf 'workload = "goodput"\nstreams = 1\nbaseline = false\nwarmup_secs = 2\nduration_secs = %s\nruns = %s\n' \
  "$DURATION" "$RUNS" >"$OUT/goodput.toml"

# cpu_ms DIR: total CPU ms of the network's relays, exits and clients.
cpu_ms() {
  python3 - "$1/network.json" <<'PY'
import json, os, sys
info = json.load(open(sys.argv[1]))
tick = os.sysconf("SC_CLK_TCK")
total = 0
for n in info["nodes"]:
    if not set(n.get("roles", [])) & {"relay", "exit", "client"}:
        continue
    with open(f"/proc/{n['pid']}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    total += int(fields[11]) + int(fields[12])  # utime, stime
print(total * 1000 // tick)
PY
}

for round in $(seq 1 "$ROUNDS"); do
  for spec in $SPECS; do
    dir="$OUT/nets/$spec-$round"
    "$BIN" testnet start --spec "$spec" --dir "$dir" >"$OUT/$spec-$round.start.log" 2>&1
    before=$(cpu_ms "$dir")
    "$BIN" measure --dir "$dir" --workload "$OUT/goodput.toml" --out "$OUT/$spec-$round" \
      >"$OUT/$spec-$round.measure.log" 2>&1 || true
    after=$(cpu_ms "$dir")
    "$BIN" testnet stop --dir "$dir" >/dev/null 2>&1 || true
    python3 - "$OUT/$spec-$round/results.jsonl" "$before" "$after" "$spec" "$round" >>"$OUT/rows.tsv" <<'PY'
import json, sys
path, before, after, spec, rnd = sys.argv[1:]
mib = sum(json.loads(l).get("metrics", {}).get("bytes", 0) for l in open(path)) / 2**20
cpu = int(after) - int(before)
print(f"{spec}\t{rnd}\t{mib:.1f}\t{cpu}\t{cpu / mib if mib else float('nan'):.2f}")
PY
    tail -n1 "$OUT/rows.tsv"
  done
done

python3 - "$OUT" <<'PY'
import collections, random, statistics, sys, pathlib
out = pathlib.Path(sys.argv[1])
rows = [l.split("\t") for l in (out / "rows.tsv").read_text().splitlines()]
lines = ["| spec | round | MiB carried | CPU ms (relays, exits, client) | CPU ms per MiB |",
         "|---|--:|--:|--:|--:|"]
per = collections.defaultdict(list)
for spec, rnd, mib, cpu, per_mib in rows:
    lines.append(f"| {spec} | {rnd} | {mib} | {cpu} | {per_mib} |")
    per[spec].append(float(per_mib))
lines += ["", "| spec | median CPU ms per MiB |", "|---|--:|"]
for spec, v in per.items():
    lines.append(f"| {spec} | {statistics.median(v):.2f} |")
specs = list(per)
if len(specs) >= 2:
    a, b = (statistics.median(per[s]) for s in specs[:2])
    lines.append(f"\nratio {specs[0]} / {specs[1]}: {a / b:.3f} (of the medians)")
    # Per round: the two specs ran back to back.
    by_round = collections.defaultdict(dict)
    for spec, rnd, _mib, _cpu, per_mib in rows:
        by_round[rnd][spec] = float(per_mib)
    ratios = [r[specs[0]] / r[specs[1]] for r in by_round.values()
              if specs[0] in r and specs[1] in r and r[specs[1]] > 0]
    if ratios:
        rng = random.Random(4)
        boot = sorted(statistics.median(rng.choices(ratios, k=len(ratios)))
                      for _ in range(2000))
        lo, hi = boot[50], boot[1949]
        lines.append("per round: " + ", ".join(f"{r:.3f}" for r in ratios))
        lines.append(f"median of the per-round ratios: {statistics.median(ratios):.3f} "
                     f"[95% bootstrap {lo:.3f}, {hi:.3f}] over {len(ratios)} rounds")
(out / "cpu.md").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
PY
