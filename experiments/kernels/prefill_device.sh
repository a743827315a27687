#!/usr/bin/env bash
# One device call for the tiled prefill path: build, then for each prefill CTA
# size (STRATA_MOE_PF_WARPS=8 and 16) test_kernels, test_kernels under
# compute-sanitizer memcheck, and bench_kernels --no-decode (ceilings, prefill
# vs the persistent kernel and cuBLAS, full layer).  Logs go into
# $OUT/prefill_logs.tar.gz, the CSVs to $OUT/bench_pfw{8,16}.csv.
#   source .device/setup.sh && cd .wt-kern3 && bash experiments/kernels/prefill_device.sh
set -u
out=${OUT:-out}
mkdir -p "$out/logs"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$out/logs/gpu.txt" 2>&1
scons -Q -j16 mode=release >"$out/logs/build.log" 2>&1 || { tail -40 "$out/logs/build.log"; exit 1; }
for w in ${PF_WARPS:-8 16}; do
	export STRATA_MOE_PF_WARPS=$w
	echo "== pf warps $w: tests"
	./build/release/tests/test_kernels >"$out/logs/test_kernels_pfw$w.log" 2>&1; echo "test_kernels exit $?"
	grep -E "pf-|prefill|FAILED|PASSED" "$out/logs/test_kernels_pfw$w.log" | head -20
	timeout 200 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
		./build/release/tests/test_kernels >"$out/logs/memcheck_pfw$w.log" 2>&1; echo "memcheck exit $?"
	grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/logs/memcheck_pfw$w.log" | tail -3
	echo "== pf warps $w: bench"
	./build/release/bench/bench_kernels --no-decode --csv "$out/bench_pfw$w.csv" ${BENCH_ARGS:-} 2>&1 |
		tee "$out/logs/bench_pfw$w.log" | grep -E "ceiling|prefill|layer"
done
tar -C "$out" -czf "$out/prefill_logs.tar.gz" logs && rm -rf "$out/logs"
