#!/usr/bin/env bash
# One device call for the prefill range guard and the small token tile:
# build, test_kernels, test_kernels under compute-sanitizer memcheck, then
#   bench_kernels --no-decode --no-layer                      (prefill table at 256 / 64 tokens: the
#                                                              guard must not slow ordinary data)
#   bench_kernels --no-decode --no-layer --pf-tokens LIST     per tile variant (PF_VARIANTS):
#     auto  default tiles (64 x 64 under 64 tokens), 16 .. 96 tokens per expert
#     t128  STRATA_MOE_PF_TILE=128 (128 x 128, 16 warps for tier experts), 16 .. 63 tokens
#     t64   STRATA_MOE_PF_TILE=64 (64 x 64), 64 .. 128 tokens
# The tiled path is forced in the bench's "fused" column (strata_gpu_moe_set_prefill_min(1)),
# the persistent kernel and cuBLAS are timed in the same process.
# CSVs: $OUT/bench_<name>.csv; logs: $OUT/pf_logs.tar.gz.
#   source .device/setup.sh && cd .wt-pf && bash experiments/kernels/pf_small_device.sh
set -u
out=${OUT:-out}
mkdir -p "$out/logs"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$out/logs/gpu.txt" 2>&1
t0=$(date +%s)
scons -Q -j16 mode=release >"$out/logs/build.log" 2>&1 || { tail -40 "$out/logs/build.log"; exit 1; }
echo "build $(( $(date +%s) - t0 )) s"
./build/release/tests/test_kernels >"$out/logs/test_kernels.log" 2>&1; echo "test_kernels exit $?"
grep -E "range|pf|FAILED|PASSED|differ" "$out/logs/test_kernels.log" | head -40
if [ "${SANITIZE:-1}" = 1 ]; then
	timeout 200 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
		./build/release/tests/test_kernels >"$out/logs/memcheck.log" 2>&1; echo "memcheck exit $?"
	grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/logs/memcheck.log" | tail -3
fi
echo "tests done $(( $(date +%s) - t0 )) s"
b=./build/release/bench/bench_kernels
$b --no-decode --no-layer --reps 7 --csv "$out/bench_default.csv" >"$out/logs/bench_default.log" 2>&1
grep -E "ceiling|prefill" "$out/logs/bench_default.log" | sed -E 's/ +/ /g; s/ TFLOP\/s//g; s/persistent kernel/pers/; s/cuBLAS bf16/blas/; s/fused\/cuBLAS speed/f\/b/; s/fused\/persistent/f\/p/'
for v in ${PF_VARIANTS:-auto t128 t64}; do
	case $v in
	auto) export STRATA_MOE_PF_TILE=0; toks=16,24,32,48,63,64,96 ;;
	t128) export STRATA_MOE_PF_TILE=128; toks=16,24,32,48,63 ;;
	t64) export STRATA_MOE_PF_TILE=64; toks=64,96,128 ;;
	esac
	echo "== $v"
	$b --no-decode --no-layer --reps 7 --pf-tokens "$toks" --csv "$out/bench_$v.csv" \
		>"$out/logs/bench_$v.log" 2>&1
	grep -E "prefill" "$out/logs/bench_$v.log" | sed -E 's/ +/ /g; s/ TFLOP\/s//g; s/persistent kernel/pers/; s/cuBLAS bf16/blas/; s/fused\/cuBLAS speed/f\/b/; s/fused\/persistent/f\/p/'
	echo "$v done $(( $(date +%s) - t0 )) s"
done
tar -C "$out" -czf "$out/pf_logs.tar.gz" logs
rm -rf "$out/logs"
