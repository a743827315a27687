#!/usr/bin/env bash
# One device call comparing kernel variants (decode table only) after the
# usual build + tests + memcheck; everything packed into $OUT/sweep.tar.gz.
#   source .device/setup.sh && cd .wt-kern2 && bash experiments/kernels/sweep_device.sh
# VARIANTS: "WARPS:COPY:DIRECT ..." (default "0:bulk:1 8:bulk:1 0:bulk:0"; warps 0 = per tile);
# PROFILE_FMTS: formats profiled with ncu at T=1 (default "hot bf16").
set -u
out=${OUT:-out}
d=$(mktemp -d)
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$d/gpu.txt" 2>&1
scons -Q -j16 mode=release >"$d/build.log" 2>&1 || { tail -40 "$d/build.log"; tar -czf "$out/sweep.tar.gz" -C "$d" .; exit 1; }
echo "== tests"
for v in ${VARIANTS:-0:bulk:1 8:bulk:1 0:bulk:0}; do
	STRATA_MOE_WARPS=$(echo $v | cut -d: -f1) STRATA_MOE_COPY=$(echo $v | cut -d: -f2) STRATA_MOE_DIRECT=$(echo $v | cut -d: -f3) ./build/release/tests/test_kernels >"$d/test_${v//:/_}.log" 2>&1
	echo "test_kernels $v exit $? $(grep -c 'rel err' "$d/test_${v//:/_}.log") checks"
done
echo "== memcheck (default variant)"
timeout 300 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
	./build/release/tests/test_kernels >"$d/memcheck.log" 2>&1
echo "memcheck exit $? $(grep -E 'ERROR SUMMARY' "$d/memcheck.log")"
for v in ${VARIANTS:-0:bulk:1 8:bulk:1 0:bulk:0}; do
	echo "== bench decode $v"
	STRATA_MOE_WARPS=$(echo $v | cut -d: -f1) STRATA_MOE_COPY=$(echo $v | cut -d: -f2) STRATA_MOE_DIRECT=$(echo $v | cut -d: -f3) ./build/release/bench/bench_kernels --decode \
		--csv "$d/decode_${v//:/_}.csv" >"$d/bench_${v//:/_}.log" 2>&1
	grep -E "ceiling|T=1 |T=16" "$d/bench_${v//:/_}.log" | sed 's/  */ /g'
done
if [ "${FULL:-1}" = 1 ]; then
	echo "== full bench (default variant)"
	./build/release/bench/bench_kernels --csv "$d/bench_kernels.csv" >"$d/bench.log" 2>&1
	grep -E "prefill|layer" "$d/bench.log" | sed 's/  */ /g'
fi
for f in ${PROFILE_FMTS:-hot bf16}; do
	timeout 200 ncu --clock-control none --kernel-name regex:moe_kernel --launch-skip 3 --launch-count 1 \
		--section SpeedOfLight --section WarpStateStats --section SourceCounters --section Occupancy \
		--section MemoryWorkloadAnalysis ./build/release/bench/bench_kernels --profile $f >"$d/ncu_$f.txt" 2>&1
	timeout 200 ncu --clock-control none --kernel-name regex:moe_kernel --launch-skip 3 --launch-count 1 \
		--section SourceCounters --section WarpStateStats --import-source no --page source --print-source sass \
		--csv ./build/release/bench/bench_kernels --profile $f >"$d/ncu_sass_$f.csv" 2>&1
	echo "== ncu $f: $(grep -E 'Duration|DRAM Throughput|Compute \(SM\)|Warp Cycles Per Issued' "$d/ncu_$f.txt" | sed 's/  */ /g' | tr '\n' ';')"
done
tar -czf "$out/sweep.tar.gz" -C "$d" .
