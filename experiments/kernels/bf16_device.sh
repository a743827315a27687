#!/usr/bin/env bash
# One device call for the bf16 decode kernel (kernels/moe_dec_bf16.cuh):
# test_kernels, the decode table of bench_kernels per variant, then memcheck
# (bench_kernels --kernel bf16dec=V: off = the persistent kernel's direct
# path, the old one; NWxD = warps x ring depth; bf16_kc=N).  Binaries: the
# ones carried in prebuilt/ (built on the CPU machine) when they start here,
# else a build (scons -j16).  Logs and CSVs go to $OUT/bf16.tar.gz; the bf16
# ratio lines are printed.
#   bash experiments/kernels/bf16_device.sh
# VARIANTS (default "off def"; "def" = the default configuration; "16x4@256" =
# 16x4 with K chunks of 256 weights),
# SANITIZE=0 skips memcheck, TESTS=0 skips test_kernels, ALL=1 prints
# every decode line (not only bf16).
set -u
source "$(dirname "$0")/device_common.sh"
dev_begin bf16
T=./build/release/tests/test_kernels B=./build/release/bench/bench_kernels
if [ -x prebuilt/test_kernels ] && prebuilt/bench_kernels --help >/dev/null 2>&1; then
	T=prebuilt/test_kernels B=prebuilt/bench_kernels
	echo "binaries: prebuilt"
else
	dev_build build/release/tests/test_kernels build/release/bench/bench_kernels
fi
if [ "${TESTS:-1}" = 1 ]; then
	t0=$(date +%s)
	$T >"$d/test_kernels.log" 2>&1
	echo "test_kernels exit $? ($(grep -c 'rel err' "$d/test_kernels.log") checks, $(( $(date +%s) - t0 )) s)"
	grep -E "FAILED|Error|error:|differ|\[  (PASSED|FAILED) \]" "$d/test_kernels.log" | head -20
	grep -E "moe\[(bf16dec|decode|dec-bf16)" "$d/test_kernels.log" | awk '{print $1, $(NF-2)}' | sort -k2 -g | tail -3
fi
for v in ${VARIANTS:-off def}; do
	vv=${v%@*} k=""
	[ "$vv" = def ] || k="bf16dec=$vv"
	case $v in *@*) k="${k:+$k,}bf16_kc=${v#*@}" ;; esac
	t0=$(date +%s)
	$B ${k:+--kernel $k} --decode --csv "$d/decode_$v.csv" >"$d/bench_$v.log" 2>&1
	echo "== decode $v (exit $?, $(( $(date +%s) - t0 )) s)"
	if [ "${ALL:-0}" = 1 ]; then
		grep -E "ceiling|decode" "$d/bench_$v.log" | sed 's/  */ /g'
	else
		grep -E "ceiling|decode.*bf16" "$d/bench_$v.log" | sed 's/  */ /g'
	fi
done
if [ "${SANITIZE:-1}" = 1 ]; then
	t0=$(date +%s)
	timeout ${SANITIZE_TIMEOUT:-150} compute-sanitizer --tool memcheck --leak-check no --error-exitcode 9 $T >"$d/memcheck.log" 2>&1
	echo "memcheck exit $? $(grep -E 'ERROR SUMMARY' "$d/memcheck.log") ($(( $(date +%s) - t0 )) s)"
	grep -E "FAILED|Invalid|out of bounds" "$d/memcheck.log" | head -5
fi
