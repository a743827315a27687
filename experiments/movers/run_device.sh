#!/usr/bin/env bash
# One GPU-machine call for the RAM -> VRAM figures (issue 4): build, the GPU
# mover/engine/tier suites (test_mover also under compute-sanitizer), then
# bench_movers' RAM -> VRAM part for every copy mode, then a real replay of a
# small Qwen3-30B-A3B-shaped model with each copy mode.  From the repo root:
#   bash experiments/movers/run_device.sh
# Logs and CSVs land in $OUT (or ./out/movers).
set -u
out=${OUT:-out/movers}
mkdir -p "$out"
B=build/release
S=$B/bin/strata
# the trace and model: in WORK if given (kept), else in a folder of this run's own (removed)
W=${WORK:-}
if [ -z "$W" ]; then W=$(mktemp -d "${TMPDIR:-/tmp}/strata-movers.XXXXXX"); trap 'rm -rf "$W"' EXIT; fi
mkdir -p "$W"
step() { echo; echo "== $* ($(date +%T))"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,pcie.link.gen.current,pcie.link.width.current \
	--format=csv >"$out/gpu.txt" 2>&1
step build
scons -Q -j16 mode=release >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
step GPU test suites
for t in test_mover test_engine test_tier; do
	timeout 180 $B/tests/$t >"$out/$t.log" 2>&1
	echo "$t exit $? : $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/$t.log" | tr '\n' ' ') $(grep -c '^SKIP' "$out/$t.log") skipped"
done
timeout 240 compute-sanitizer --tool memcheck --error-exitcode 9 $B/tests/test_mover >"$out/memcheck_mover.log" 2>&1
echo "memcheck test_mover exit $? : $(grep -E 'ERROR SUMMARY' "$out/memcheck_mover.log")"
step "bench_movers RAM -> VRAM (${SECONDS_PER:-1} s per figure)"
$B/bench/bench_movers --no-nvme --seconds ${SECONDS_PER:-1} >"$out/bench_movers.csv" 2>"$out/bench_movers.log"
echo "exit $?"; cat "$out/bench_movers.log"
step "replay qwen3-30b-a3b:layers=8, VRAM 256M, RAM holds all: each copy mode"
M=qwen3-30b-a3b:layers=8
$S trace gen -o "$W/t.strace" --model $M --requests 2 --prompt 32 --gen 96 --alpha 0.8 --seed 3 >"$out/gen.log" 2>&1
$S synth --preset $M --out "$W/model" --format tiered --codes random --threads 16 --force >"$out/synth.log" 2>&1
echo "synth exit $?"
rm -f "$out/replay_copy.csv"
for c in each batch sm each batch sm; do
	timeout 120 $S replay -q --model "$W/model" --trace "$W/t.strace" --vram 256M --ram 4G --place cache \
		--evict lru --compute gpu --copy $c --csv "$out/replay_copy.csv" --append 2>>"$out/replay.err"
	echo "replay --copy $c exit $?"
done
python3 - "$out/replay_copy.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
if rows:
    keys = ["decode_tok_s", "prefill_tok_s", "stall_ms", "io_ms", "bytes_ram_vram", "bytes_nvme_vram",
            "hit_rate_vram", "wall_s"]
    print("mode  " + "  ".join(keys))
    for r, m in zip(rows, ["each", "batch", "sm"] * 2):
        print(m.ljust(6) + "  ".join(r[k] for k in keys))
PY
