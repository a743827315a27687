#!/usr/bin/env bash
# One device call for the warp-streaming decode kernel (moe_decode.cuh): build,
# test_kernels, optional memcheck, then the decode table of bench_kernels for
# each variant (bench_kernels --kernel dec=V: off = the persistent kernel,
# NWxNS = warps x stages, auto = the default rule), optional ncu of one Kimi T=1 layer.  Logs and CSVs go to
# $OUT/dec.tar.gz; the ratio lines are printed.
#   bash experiments/kernels/dec_device.sh
# VARIANTS (default "off 12x4 12x4u 12x3 16x3"), SANITIZE=1, PROFILE_FMTS ("" = none),
# TESTS=0 skips test_kernels; PREFILL=0 skips the prefill + layer tables (bench_kernels --no-decode).
set -u
source "$(dirname "$0")/device_common.sh"
dev_begin dec
dev_build build/release/tests/test_kernels build/release/bench/bench_kernels
if [ "${TESTS:-1}" = 1 ]; then
	./build/release/tests/test_kernels >"$d/test_kernels.log" 2>&1
	echo "test_kernels exit $? ($(grep -c 'rel err' "$d/test_kernels.log") checks)"
	grep -E "FAILED|Error|error:|differ" "$d/test_kernels.log" | head -20
	grep -E "moe\[(dec|var|big)" "$d/test_kernels.log" | sed 's/  */ /g' | awk '{print $1, $(NF-2), $(NF-1), $NF}' | sort | uniq -c | sort -rn | head -5
fi
if [ "${SANITIZE:-0}" = 1 ]; then
	timeout 300 compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 \
		./build/release/tests/test_kernels >"$d/memcheck.log" 2>&1
	echo "memcheck exit $? $(grep -E 'ERROR SUMMARY' "$d/memcheck.log")"
fi
for v in ${VARIANTS:-off 12x4 12x4u 12x3 16x3}; do
	./build/release/bench/bench_kernels --kernel dec=$v --decode --csv "$d/decode_$v.csv" >"$d/bench_$v.log" 2>&1
	echo "== decode $v (exit $?)"
	grep -E "ceiling|T=1 |T=4 |T=8 |T=16 " "$d/bench_$v.log" | sed 's/  */ /g'
done
if [ "${PREFILL:-1}" = 1 ]; then
	./build/release/bench/bench_kernels --no-decode --csv "$d/prefill_layer.csv" >"$d/bench_prefill.log" 2>&1
	echo "== prefill + layer, defaults (exit $?)"
	grep -E "ceiling|prefill|layer" "$d/bench_prefill.log" | sed 's/  */ /g' | head -40
fi
for f in ${PROFILE_FMTS:-}; do
	timeout 200 ncu --clock-control none --kernel-name regex:dec_kernel --launch-skip 3 --launch-count 1 \
		--section SpeedOfLight --section WarpStateStats --section Occupancy --section InstructionStats \
		./build/release/bench/bench_kernels --profile $f >"$d/ncu_$f.txt" 2>&1
	echo "== ncu $f: $(grep -E 'Duration|DRAM Throughput|Compute \(SM\)|Executed Ipc|Issue Slots|Warp Cycles Per Issued|Stall' "$d/ncu_$f.txt" | sed 's/  */ /g' | tr '\n' ';')"
done
