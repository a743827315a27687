#!/usr/bin/env bash
# One device call for the BF16-tile prefill of tier experts (issue 21 item 3,
# kernels/moe_prefill_sm90.cuh tile_p): test_kernels' prefill tests against
# the CPU reference while compute-sanitizer memcheck runs the sm_90a prefill
# test under the BF16-tile values alone (both at once: correctness only),
# then the prefill table of bench_kernels at the Kimi shape at several token
# counts for each kernel value (one run each: the value's rows, the mma.sync
# kernel and cuBLAS BF16 of the same run), then optionally one ncu profile
# of a gate|up launch with per-instruction stall samples.  Binaries:
# build/release (scons -j16 when missing).  Logs go to $OUT/pf21.tar.gz, the
# CSVs to $OUT; a short table is printed last.
#   bash experiments/kernels/pf21_device.sh
# TESTS (default "test_moe_config,test_moe_prefill_sm90,test_moe_range";
# "" skips them), LIMIT_TESTS (s, default 70), SAN (STRATA_TEST_PREFILL of the
# memcheck run, default "sm90p,auto"; "" skips memcheck), LIMIT_SAN (s,
# default 100), KERNELS (prefill values for the table, default "sm90p"),
# TOKENS (default 64,128,192,256), FORMATS (default hot,warm,cold,bf16),
# LIMIT_BENCH (s per run, default 40), TABLE=1 (also the standard prefill
# table under the default configuration, q4 included), NCU (a prefill value: profile its
# gate|up kernel on hot at 256 tokens; default none), LIMIT_NCU (s, default 40),
# TAG (CSV names h200-TAG-VALUE.csv, default pf21).
set -u
source "$(dirname "$0")/device_common.sh"
dev_begin pf21
T=./build/release/tests/test_kernels B=./build/release/bench/bench_kernels
[ -x "$T" ] && [ -x "$B" ] || dev_build build/release/tests/test_kernels build/release/bench/bench_kernels
tag=${TAG:-pf21}
t0=$(date +%s)
san=${SAN-sm90p,auto}
if [ -n "$san" ]; then
	STRATA_TESTS=test_moe_prefill_sm90 STRATA_TEST_PREFILL=$san timeout "${LIMIT_SAN:-100}" \
		compute-sanitizer --tool memcheck --error-exitcode 9 $T >"$d/memcheck.log" 2>&1 &
	san_pid=$!
fi
tests=${TESTS-test_moe_config,test_moe_prefill_sm90,test_moe_range}
if [ -n "$tests" ]; then
	STRATA_TESTS=$tests timeout "${LIMIT_TESTS:-70}" $T >"$d/test_kernels.log" 2>&1
	echo "test_kernels ($tests) exit $? ($(grep -c 'rel err' "$d/test_kernels.log") checks, $(( $(date +%s) - t0 )) s)"
	grep -E "FAILED|Error|error:|launches|note:|\[  (PASSED|FAILED) \]" "$d/test_kernels.log" | head -30
	grep -E "rel err" "$d/test_kernels.log" | awk '{for (i = 1; i < NF; i++) if ($i == "err") print $(i + 1)}' |
		sort -g | tail -1 | sed 's/^/largest rel err: /'
fi
if [ -n "$san" ]; then
	wait "$san_pid"
	echo "memcheck ($san) exit $? ($(( $(date +%s) - t0 )) s): $(grep -E 'ERROR SUMMARY' "$d/memcheck.log" | tail -1)" \
		"$(grep -c '^========= [A-Z]' "$d/memcheck.log") error lines; configurations finished:" \
		"$(grep -E "^prefill kernels '" "$d/memcheck.log" | cut -d"'" -f2 | tr '\n' ' ')"
fi
rows() { # the prefill rows of a CSV: value kind fmt tokens us ratio-to-cuBLAS
	awk -F, -v k="$2" '$1 == "prefill" || $1 == "prefill_mma" { printf "%s %s %s %s %.1f %.3f\n", k, $1, $3, $4, $5, $6 }' "$1"
}
for k in ${KERNELS:-sm90p}; do
	t1=$(date +%s)
	timeout "${LIMIT_BENCH:-40}" $B --no-decode --no-layer --shape kimi --formats "${FORMATS:-hot,warm,cold,bf16}" \
		--pf-tokens "${TOKENS:-64,128,192,256}" --kernel "prefill=$k" --csv "$out/h200-$tag-$k.csv" \
		>"$d/bench-$k.log" 2>&1
	echo "bench_kernels prefill=$k: exit $? ($(( $(date +%s) - t1 )) s)"
	rows "$out/h200-$tag-$k.csv" "$k" | grep -v "prefill_mma.*bf16" >"$d/rows-$k.txt"
done
if [ "${TABLE:-0}" = 1 ]; then
	# the standard prefill table (256 tokens per expert, and 64 for hot and bf16)
	# under the default kernel configuration, q4 included
	t1=$(date +%s)
	timeout "${LIMIT_BENCH:-40}" $B --no-decode --no-layer --shape kimi --formats hot,warm,cold,bf16,q4 \
		--csv "$out/h200-$tag-table.csv" >"$d/bench-table.log" 2>&1
	echo "bench_kernels table (default configuration): exit $? ($(( $(date +%s) - t1 )) s)"
	rows "$out/h200-$tag-table.csv" default >"$d/rows-zz-table.txt"
fi
if [ -n "${NCU:-}" ]; then
	t1=$(date +%s)
	kind=$(case $NCU in sm90p) echo 3 ;; sm90pc) echo 6 ;; sm90ph) echo 7 ;; sm90pp) echo 8 ;; sm90pp2) echo 9 ;; *) echo 3 ;; esac)
	timeout "${LIMIT_NCU:-40}" ncu --clock-control none --kernel-name-base mangled \
		--kernel-name "regex:gemmILb0ELi${kind}E" --launch-count 1 \
		--section SourceCounters --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis \
		--section MemoryWorkloadAnalysis --import-source no -o "$d/ncu" -f \
		$B --no-decode --no-layer --shape kimi --formats hot --pf-tokens 256 --kernel "prefill=$NCU" \
		>"$d/ncu_run.log" 2>&1
	echo "ncu prefill=$NCU: exit $? ($(( $(date +%s) - t1 )) s)"
	ncu -i "$d/ncu.ncu-rep" --page details >"$d/ncu_details.txt" 2>&1
	ncu -i "$d/ncu.ncu-rep" --page source --csv --print-source sass >"$out/ncu-$tag-$NCU-sass.csv" 2>&1
	grep -E "Duration|Executed Ipc A|Issue Slots Busy|Warp Cycles Per Issued|No Eligible|Shared Memory|L2 Cache Throughput|Stall" \
		"$d/ncu_details.txt" | sed 's/  */ /g' | head -20
fi
echo "== prefill rows (value kind fmt tokens us ratio-to-cuBLAS; prefill_mma: the mma.sync kernel)"
cat "$d"/rows-*.txt 2>/dev/null
