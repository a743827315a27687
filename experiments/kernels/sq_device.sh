#!/usr/bin/env bash
# One device call for the fast-decode scalar formats (issue 21): GPU tests of
# the kernels (test_kernels: every case against the CPU reference, among them
# test_moe_scalar and test_dequant_exact for q4 and q3),
# then bench_kernels' decode table for q4, q3 and the trellis formats at the
# Kimi and Qwen3-30B-A3B shapes (ratios to the read ceiling measured in the
# same run), then `strata calibrate` on a one-layer Qwen3-30B-A3B-shaped store
# (its kernel_speed_q4 / kernel_speed_q3: the scalar formats' kernel time per
# packed MB against the trellis formats', same call); with LAYER=1 also the
# full Kimi layer with the hot tier in q4; while BUDGET (seconds since the
# start, default 170) allows, the q4/q3 decode rows again with --kernel
# sq_pf=0 and --kernel sqdec=off.  Time limits per step: T_TESTS, T_BENCH,
# T_CAL (seconds).
# STRATA_TESTS=name,... limits test_kernels to those tests.
# Uses the binaries under $BUILD (default build/dev) when they run, else
# builds them (cuda=1).  Logs go to $OUT (or ./out) as sq.tar.gz.
#   bash experiments/kernels/sq_device.sh
set -u
. "$(dirname "$0")/device_common.sh"
dev_begin sq
B=${BUILD:-build/dev}
if ! "$B/bench/bench_kernels" --help >/dev/null 2>&1; then
	echo "carried binaries do not run here: building"
	dev_build cuda=1 builddir=build/dev
	B=build/dev
fi
# line-buffered logs, so a step stopped by its time limit keeps what it printed
lb=; command -v stdbuf >/dev/null && lb="stdbuf -oL -eL"
echo "== test_kernels"
timeout ${T_TESTS:-90} $lb "$B/tests/test_kernels" >"$d/test_kernels.log" 2>&1; trc=$?
grep -E "moe\[(q4|q3|sq|big-q)|scalar decode kernel|dequant|FAILED|PASSED|differ|error" "$d/test_kernels.log" | head -60
echo "test_kernels exit $trc"
echo "== bench decode"
timeout ${T_BENCH:-100} $lb "$B/bench/bench_kernels" --decode --reps 7 --formats q4,q3,hot,warm,cold \
	--csv "$d/decode.csv" >"$d/decode.log" 2>&1; echo "bench decode exit $?"
echo "== calibrate (Qwen3-30B-A3B-shaped store: kernel_speed_q4/q3 in the same call)"
m=$(mktemp -d)
timeout ${T_CAL:-60} bash -c "'$B/bin/strata' synth --preset qwen3-30b-a3b:layers=1 --out '$m/model' \
	--format tiered --codes random --force >'$d/synth.log' 2>&1 &&
	'$B/bin/strata' calibrate --model '$m/model' --bytes 256M -o '$d/cost_qwen.json' >'$d/calibrate.log' 2>&1"
echo "calibrate exit $?"; rm -rf "$m"
# A/B in the same call while time is left (SECONDS: since the script started):
# q4/q3 without the L2 prefetch of the next task, then on the shared-memory
# decode kernel (compute_sq: sqdec=off)
for v in nopf:sq_pf=0 smem:sqdec=off; do
	[ $(( ${BUDGET:-170} - SECONDS )) -ge 35 ] || break
	echo "== bench decode q4,q3 --kernel ${v#*:}"
	timeout $(( ${BUDGET:-170} - SECONDS - 5 )) $lb "$B/bench/bench_kernels" --decode --reps 5 --formats q4,q3 \
		--kernel "${v#*:}" --csv "$d/decode-${v%%:*}.csv" >"$d/decode-${v%%:*}.log" 2>&1; echo "exit $?"
	cp "$d/decode-${v%%:*}.csv" "$out/" 2>/dev/null
done
if [ -n "${LAYER:-}" ]; then
	echo "== bench layer (hot tier q4 vs hot)"
	timeout 45 "$B/bench/bench_kernels" --no-decode --quick --shape kimi --reps 5 --formats q4 \
		--tier-formats q4,warm,cold --csv "$d/layer-q4.csv" >"$d/layer-q4.log" 2>&1; echo "bench layer q4 exit $?"
fi
cp "$d/decode.csv" "$d/decode.log" "$d/test_kernels.log" "$d/cost_qwen.json" "$d/calibrate.log" "$out/" 2>/dev/null
echo "== summary"
grep -E "^ceiling" "$d/decode.log"
grep -E "^decode " "$d/decode.log"
grep -hE "^decode .* T=1 " "$d"/decode-*.log 2>/dev/null
cat "$d/calibrate.log"
