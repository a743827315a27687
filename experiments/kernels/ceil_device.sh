#!/usr/bin/env bash
# One device call for the decode ceiling of the tier formats
# (kernels/gpu_ceiling.cu): build, test_kernels (test_decode_ceiling checks the
# ceiling kernel's decoded weights and MMA sums against the C reference), then
# bench_kernels --decode (read / copy / cuBLAS ceilings, the decode ceilings,
# the decode table with "of read" and "of bound"), then ncu (pipe utilisation)
# of one launch of the hot ceiling kernel at 48 warps/SM and of the fused
# decode kernel at Kimi hot T=1, and the ceiling kernel's SASS.  Logs and the CSV go to $OUT/ceil.tar.gz.
#   bash experiments/kernels/ceil_device.sh
# TESTS=0 skips test_kernels, BENCH=0 the benchmark, NCU=0 the profiles.
set -u
source "$(dirname "$0")/device_common.sh"
dev_begin ceil
dev_build build/release/tests/test_kernels build/release/bench/bench_kernels
if [ "${TESTS:-1}" = 1 ]; then
	t0=$(date +%s)
	./build/release/tests/test_kernels >"$d/test_kernels.log" 2>&1
	echo "test_kernels exit $? in $(( $(date +%s) - t0 )) s"
	grep -E "PASSED|FAILED|decode ceiling|differ" "$d/test_kernels.log" | head -20
fi
if [ "${BENCH:-1}" = 1 ]; then
	t0=$(date +%s)
	./build/release/bench/bench_kernels --decode --csv "$d/decode.csv" >"$d/bench.log" 2>&1
	echo "== bench_kernels --decode (exit $?, $(( $(date +%s) - t0 )) s)"
	grep -E "ceiling|decode" "$d/bench.log" | sed 's/  */ /g'
fi
nvidia-smi --query-gpu=clocks.sm,temperature.gpu,power.draw --format=csv >>"$d/gpu.txt" 2>&1
# ncu: the ceiling kernel at 48 warps per SM (launches 28-36 of the hot
# ceiling; 8 / 16 / 32 warps come first, 9 launches each) and the fused decode
# kernel (Kimi hot T=1), with pipe utilisation.
if [ "${NCU:-1}" = 1 ]; then
	for k in "ceil_kernel ${CEIL_SKIP:-29}" "dec_kernel 3"; do
		set -- $k
		timeout 60 ncu --clock-control none --kernel-name regex:$1 --launch-skip $2 --launch-count 1 \
			--section SpeedOfLight --section WarpStateStats --section Occupancy --section InstructionStats \
			--section LaunchStats --section ComputeWorkloadAnalysis --print-details all \
			./build/release/bench/bench_kernels --profile hot >"$d/ncu_$1_hot.txt" 2>&1
		echo "== ncu $1 hot: $(grep -E 'Duration|SM Frequency|Executed Ipc A|Issue Slots Busy|Executed Instructions  |Grid Size|Warp Cycles Per Issued|Achieved Active' "$d/ncu_$1_hot.txt" | sed 's/  */ /g' | tr '\n' ';')"
		grep -iE "pipe|fma|alu" "$d/ncu_$1_hot.txt" | sed 's/  */ /g' | head -30
	done
	cuobjdump -sass build/release/kernels/gpu_ceiling.o >"$d/gpu_ceiling.sass" 2>&1
fi
