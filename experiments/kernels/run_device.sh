#!/usr/bin/env bash
# One device call: build, GPU tests, compute-sanitizer memcheck on the test
# binary, then the benchmark.  Logs and the CSV go to $OUT (or ./out).
#   bash experiments/kernels/run_device.sh
set -u
out=${OUT:-out}
mkdir -p "$out"
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$out/gpu.txt" 2>&1
scons -Q -j16 mode=release >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
echo "== tests"
./build/release/tests/test_kernels >"$out/test_kernels.log" 2>&1; trc=$?
grep -E "rel err|FAILED|PASSED|OK \]|differ|error" "$out/test_kernels.log" | head -60
echo "test_kernels exit $trc"
if [ "${SANITIZE:-1}" = 1 ]; then
	echo "== memcheck"
	timeout 300 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
		./build/release/tests/test_kernels >"$out/memcheck.log" 2>&1; mrc=$?
	grep -E "ERROR SUMMARY|PASSED|FAILED" "$out/memcheck.log" | tail -5
	echo "memcheck exit $mrc"
fi
echo "== bench"
./build/release/bench/bench_kernels --csv "$out/bench_kernels.csv" ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.log"
if [ "${PROFILE:-0}" = 1 ]; then
	echo "== ncu (one kimi hot T=1 layer)"
	timeout 240 ncu --clock-control none --kernel-name regex:moe_kernel --launch-skip 3 --launch-count 1 \
		--section SpeedOfLight --section WarpStateStats --section SourceCounters --section Occupancy \
		--section MemoryWorkloadAnalysis ./build/release/bench/bench_kernels --profile >"$out/ncu.txt" 2>&1
	echo "ncu exit $?"
	timeout 200 ncu --clock-control none --kernel-name regex:moe_kernel --launch-skip 3 --launch-count 1 \
		--section SourceCounters --section WarpStateStats --import-source no --page source --print-source sass \
		--csv ./build/release/bench/bench_kernels --profile >"$out/ncu_sass.csv" 2>&1
	echo "ncu sass exit $?"
	grep -E "Duration|Memory Throughput|DRAM Throughput|Compute \(SM\)|Stall|stall|Warp Cycles|Issued Ipc|Achieved Occupancy" "$out/ncu.txt" | head -40
fi
