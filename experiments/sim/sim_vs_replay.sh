#!/usr/bin/env bash
# Simulated vs real decode speed on the same trace for several policies.
#
#   experiments/sim/sim_vs_replay.sh [BUILD] [PRESET] [OUT]
#     BUILD   build folder with bin/strata (default build/release)
#     PRESET  model shape for strata synth (default qwen3-30b-a3b:layers=8)
#     OUT     results folder (default experiments/sim/results)
#
# 1. synthesises a tiered model (random codes: throughput only) and a trace of its shape,
# 2. calibrates a cost model on this machine (GPU kernels when a GPU is usable),
# 3. replays the trace on the real engine and simulates it, for each policy below,
# 4. writes OUT/replay.csv, OUT/sim.csv and OUT/compare.csv (decode tok/s, ratio sim/real).
# Env: VRAM, RAM (budgets), TOKENS (decode tokens per request), REQUESTS, COMPUTE (auto|ref|gpu).
set -euo pipefail
B=${1:-build/release}
PRESET=${2:-qwen3-30b-a3b:layers=8}
OUT=${3:-experiments/sim/results}
S=$B/bin/strata
VRAM=${VRAM:-384M}
RAM=${RAM:-768M}
TOKENS=${TOKENS:-128}
REQUESTS=${REQUESTS:-2}
COMPUTE=${COMPUTE:-auto}
mkdir -p "$OUT"
MODEL=$OUT/model
[ -f "$MODEL/shard-00000.strata" ] || $S synth --preset "$PRESET" --out "$MODEL" --format tiered --codes random --threads 8 --force
$S trace gen -o "$OUT/trace.strace" --model "$PRESET" --requests "$REQUESTS" --prompt 32 --gen "$TOKENS" \
	--pred-depth 2 --pred-accuracy 0.8 --seed 1
$S calibrate --model "$MODEL" --bytes 2G -o "$OUT/cost.json" --compute "$COMPUTE"
rm -f "$OUT/replay.csv" "$OUT/sim.csv"
POLICIES=(
	"--place static --evict lru --prefetch none"
	"--place static:promote=all --evict lru --prefetch lookahead:depth=2"
	"--place cache --evict lfu --prefetch none"
	"--place cache --evict farthest --prefetch oracle"
)
for p in "${POLICIES[@]}"; do
	# shellcheck disable=SC2086
	$S replay -q --model "$MODEL" --trace "$OUT/trace.strace" --vram "$VRAM" --ram "$RAM" $p \
		--compute "$COMPUTE" --csv "$OUT/replay.csv" --append
	# shellcheck disable=SC2086
	$S sim -q --model "$MODEL" --trace "$OUT/trace.strace" --vram "$VRAM" --ram "$RAM" $p \
		--cost "$OUT/cost.json" --csv "$OUT/sim.csv" --append
done
python3 - "$OUT" <<'PY'
import csv, sys, os
out = sys.argv[1]
real = list(csv.DictReader(open(os.path.join(out, "replay.csv"))))
sim = list(csv.DictReader(open(os.path.join(out, "sim.csv"))))
rows = []
print("%-58s %12s %12s %8s %10s" % ("config", "real tok/s", "sim tok/s", "sim/real", "hits same"))
for r, s in zip(real, sim):
    a, b = float(r["decode_tok_s"]), float(s["decode_tok_s"])
    same = all(r[k] == s[k] for k in ("hits_vram", "hits_ram", "hits_nvme", "bytes_nvme_ram", "bytes_ram_vram"))
    rows.append({"config": r["config"], "real_decode_tok_s": a, "sim_decode_tok_s": b,
                 "ratio": b / a if a else 0, "same_counters": same})
    print("%-58s %12.2f %12.2f %8.3f %10s" % (r["config"], a, b, b / a if a else 0, same))
with open(os.path.join(out, "compare.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(rows[0].keys()))
    w.writeheader()
    w.writerows(rows)
PY
