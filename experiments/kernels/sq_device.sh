#!/usr/bin/env bash
# One device call for the fast-decode scalar formats (issue 21): GPU tests of
# the kernels (test_kernels: every case against the CPU reference, among them
# test_moe_scalar and test_dequant_exact for q4 and q3) and the quant tests,
# then bench_kernels' decode table for q4, q3 and the trellis formats at the
# Kimi and Qwen3-30B-A3B shapes (ratios to the read ceiling measured in the
# same run), prefill of q4 at 256 tokens (BF16 copies + the tiled path) vs
# cuBLAS, and the full Kimi layer with the hot tier in q4 vs hot.
# Uses the binaries under $BUILD (default build/dev) when they run, else
# builds them (cuda=1).  Logs go to $OUT (or ./out) as sq.tar.gz.
#   bash experiments/kernels/sq_device.sh
set -u
. "$(dirname "$0")/device_common.sh"
dev_begin sq
B=${BUILD:-build/dev}
if ! "$B/tests/test_quant" >/dev/null 2>&1 || ! "$B/bench/bench_kernels" --help >/dev/null 2>&1; then
	echo "carried binaries do not run here: building"
	dev_build cuda=1 builddir=build/dev
	B=build/dev
fi
echo "== test_quant"
timeout 30 "$B/tests/test_quant" >"$d/test_quant.log" 2>&1; echo "test_quant exit $?"
grep -E "^q4|^q3|PASSED|FAILED" "$d/test_quant.log"
echo "== test_kernels"
timeout 90 "$B/tests/test_kernels" >"$d/test_kernels.log" 2>&1; trc=$?
grep -E "moe\[(q4|q3|sq|big-q)|dequant|FAILED|PASSED|differ|error" "$d/test_kernels.log" | head -40
echo "test_kernels exit $trc"
echo "== bench decode"
timeout 100 "$B/bench/bench_kernels" --decode --reps 7 --formats q4,q3,hot,warm,cold \
	--csv "$d/decode.csv" >"$d/decode.log" 2>&1; echo "bench decode exit $?"
echo "== bench layer (hot tier q4 vs hot), prefill q4 at 256"
timeout 45 "$B/bench/bench_kernels" --no-decode --quick --shape kimi --reps 5 --formats q4 --tier-formats q4,warm,cold \
	--csv "$d/layer-q4.csv" >"$d/layer-q4.log" 2>&1; echo "bench layer q4 exit $?"
timeout 30 "$B/bench/bench_kernels" --no-decode --quick --shape kimi --reps 5 --formats hot \
	--csv "$d/layer-hot.csv" >"$d/layer-hot.log" 2>&1; echo "bench layer hot exit $?"
cp "$d/decode.csv" "$d/decode.log" "$d/layer-q4.log" "$d/layer-hot.log" "$out/" 2>/dev/null
echo "== summary"
grep -E "^ceiling" "$d/decode.log"
grep -E "^decode .* T=1 " "$d/decode.log"
grep -E "^prefill|^layer" "$d/layer-q4.log" "$d/layer-hot.log"
