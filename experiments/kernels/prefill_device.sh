#!/usr/bin/env bash
# One device call for the tiled prefill path: build, then for each variant
#   auto   default: 64 x 256 tiles for experts with >= 192 tokens, else 128 x 128 (8 warps)
#   t128   STRATA_MOE_PF_TILE=128: 128 x 128 tiles (8 warps) for every expert
#   t128w16  the same with 16 warps per CTA (STRATA_MOE_PF_WARPS=16)
# test_kernels, test_kernels under compute-sanitizer memcheck, and
# bench_kernels --no-decode (ceilings, prefill vs the persistent kernel and
# cuBLAS; the full-layer table only in the first variant: it never reaches the
# prefill path).  CSVs: $OUT/bench_<variant>.csv; logs: $OUT/prefill_logs.tar.gz.
#   source .device/setup.sh && cd .wt-kern3 && bash experiments/kernels/prefill_device.sh
set -u
out=${OUT:-out}
mkdir -p "$out/logs"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$out/logs/gpu.txt" 2>&1
scons -Q -j16 mode=release >"$out/logs/build.log" 2>&1 || { tail -40 "$out/logs/build.log"; exit 1; }
layer=""
for v in ${PF_VARIANTS:-auto t128 t128w16}; do
	case $v in
	auto) export STRATA_MOE_PF_TILE=0 STRATA_MOE_PF_WARPS=8 ;;
	t128) export STRATA_MOE_PF_TILE=128 STRATA_MOE_PF_WARPS=8 ;;
	t128w16) export STRATA_MOE_PF_TILE=128 STRATA_MOE_PF_WARPS=16 ;;
	esac
	echo "== $v: tests"
	./build/release/tests/test_kernels >"$out/logs/test_kernels_$v.log" 2>&1; echo "test_kernels exit $?"
	grep -E "pf|prefill|FAILED|PASSED" "$out/logs/test_kernels_$v.log" | head -30
	if [ "$v" != t128 ]; then # t128 runs the kernels auto runs (Cfg128), on other shapes
		timeout 150 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
			./build/release/tests/test_kernels >"$out/logs/memcheck_$v.log" 2>&1; echo "memcheck exit $?"
		grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/logs/memcheck_$v.log" | tail -3
	fi
	echo "== $v: bench"
	./build/release/bench/bench_kernels --no-decode $layer --csv "$out/bench_$v.csv" ${BENCH_ARGS:-} 2>&1 |
		tee "$out/logs/bench_$v.log" | grep -E "ceiling|prefill|layer"
	layer="--no-layer"
	tar -C "$out" -czf "$out/prefill_logs.tar.gz" logs
done
rm -rf "$out/logs"
