#!/usr/bin/env bash
# One device call for decode of a stack of layers (strata_gpu_moe_stack,
# issue 21 at the Qwen3-30B-A3B shape): the steps in STEPS (default "tests
# memcheck qwen kimi racecheck"), in this order:
#   tests      test_kernels' TESTS (default test_moe_stack,test_moe_scalar_gv):
#              every layer of every stack against the CPU reference; CASES=name,...:
#              only the cases whose names hold one of these
#   memcheck   compute-sanitizer --tool memcheck on test_moe_stack's cases
#              whose names hold one of MC_CASES (default stack-mix,stack-qwen-q4)
#   qwen, kimi bench_kernels --decode --layers LAYERS (default 16) for FORMATS
#              (default q4,q3,hot) at that shape: the single-layer decode rows
#              and the stack rows (chained, chained without L2 prefetch, plain
#              launches) with the read ceiling of the same run
#   ab         per "name:formats:key=value,..." of AB (default none) the qwen
#              stack rows again under that kernel configuration (kernels.h)
#   ncu        ncu on one Qwen3-30B-A3B-shaped q4 T=1 layer (the row-streaming
#              kernel's gate|up and down launches): duration, speed of light,
#              warp states, scheduler
#   racecheck  compute-sanitizer racecheck and synccheck on MC_CASES, while
#              BUDGET allows
# Time limits: T_TESTS, T_MC, T_QWEN, T_KIMI (seconds); every step is skipped
# when fewer than its limit's seconds are left of BUDGET (default 165, seconds
# since the start).  Binaries from $BUILD (default build/cuda, made by
# `scons -Q -j2 cuda=1 mode=release builddir=build/cuda`).  Logs in $OUT (or ./out).
#   bash experiments/kernels/stack_device.sh
#   STEPS="qwen" FORMATS=q4 LAYERS=8 bash experiments/kernels/stack_device.sh
set -u
. "$(dirname "$0")/device_common.sh"
dev_begin stack
B=${BUILD:-build/cuda}
STEPS=" ${STEPS:-tests memcheck qwen kimi ab ncu racecheck} "
has() { case "$STEPS" in *" $1 "*) return 0 ;; esac; return 1; }
left() { echo $(( ${BUDGET:-165} - SECONDS )); }
# the step's limit, or what is left of the budget (at least 5 s)
lim() { local l; l=$(left); [ "$1" -lt "$l" ] && echo "$1" || echo $(( l > 5 ? l : 5 )); }
lb=; command -v stdbuf >/dev/null && lb="stdbuf -oL -eL"
if has tests; then
	echo "== test_kernels ${TESTS:-test_moe_stack,test_moe_scalar_gv}"
	STRATA_TESTS=${TESTS:-test_moe_stack,test_moe_scalar_gv} STRATA_CASES=${CASES:-} timeout $(lim ${T_TESTS:-60}) $lb \
		"$B/tests/test_kernels" >"$d/test_kernels.log" 2>&1; echo "test_kernels exit $?"
	grep -E "^stack\[|rel err .*bound|FAILED|PASSED|error|seed" "$d/test_kernels.log" | head -40
	cp "$d/test_kernels.log" "$out/"
fi
if has memcheck; then
	echo "== compute-sanitizer memcheck (test_moe_stack: ${MC_CASES:-stack-mix,stack-qwen-q4})"
	STRATA_TESTS=test_moe_stack STRATA_CASES=${MC_CASES:-stack-mix,stack-qwen-q4} timeout $(lim ${T_MC:-40}) $lb \
		compute-sanitizer --tool memcheck "$B/tests/test_kernels" >"$d/memcheck.log" 2>&1; echo "memcheck exit $?"
	grep -E "ERROR SUMMARY|PASSED|FAILED" "$d/memcheck.log" | tail -4
fi
for sh in qwen kimi; do
	has $sh || continue
	T=T_${sh^^}; T=${!T:-45}
	[ "$(left)" -ge 20 ] || { echo "== bench $sh: skipped (budget)"; continue; }
	echo "== bench $sh --layers ${LAYERS:-16}"
	timeout $(lim $T) $lb "$B/bench/bench_kernels" --decode --shape $sh --layers ${LAYERS:-16} --reps ${REPS:-7} \
		--formats ${FORMATS:-q4,q3,hot} --csv "$d/stack-$sh.csv" >"$d/stack-$sh.log" 2>&1; echo "bench $sh exit $?"
	cp "$d/stack-$sh.csv" "$out/" 2>/dev/null
done
if has ab; then
	for v in ${AB:-}; do
		n=${v%%:*}; r=${v#*:}; f=${r%%:*}; k=${r#*:}
		[ "$(left)" -ge 20 ] || { echo "== ab $n: skipped (budget)"; continue; }
		echo "== bench qwen --layers ${LAYERS:-16} --formats $f --kernel $k"
		timeout $(lim ${T_AB:-30}) $lb "$B/bench/bench_kernels" --decode --shape qwen --layers ${LAYERS:-16} \
			--reps ${REPS:-7} --formats $f --kernel "$k" --csv "$d/stack-qwen-$n.csv" >"$d/stack-qwen-$n.log" 2>&1
		echo "bench $n exit $?"; cp "$d/stack-qwen-$n.csv" "$out/" 2>/dev/null
	done
fi
if has ncu && [ "$(left)" -ge 20 ]; then
	echo "== ncu qwen q4 T=1 (gv_kernel: gate|up, down)"
	timeout $(lim ${T_NCU:-25}) ncu --target-processes all --clock-control none --kernel-name regex:gv_kernel \
		--launch-skip 2 --launch-count 2 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
		--section LaunchStats --section Occupancy --metrics gpu__time_duration.sum,smsp__inst_executed.sum \
		"$B/bench/bench_kernels" --shape qwen --profile q4 >"$d/ncu-qwen.txt" 2>&1
	echo "ncu exit $?"; cp "$d/ncu-qwen.txt" "$out/"
	grep -E "gv_kernel|Duration|DRAM Throughput|Issue Slots Busy|No Eligible|Warp Cycles Per Issued|inst_executed.sum|Grid Size|Registers Per" \
		"$d/ncu-qwen.txt" | sed 's/  */ /g' | cut -c1-120
	grep -E "^ *Stall" "$d/ncu-qwen.txt" | sed 's/  */ /g' | head -6
fi
if has racecheck; then
	for tool in racecheck synccheck; do
		[ "$(left)" -ge 25 ] || { echo "== $tool: skipped (budget)"; continue; }
		echo "== compute-sanitizer $tool (test_moe_stack: ${MC_CASES:-stack-mix,stack-qwen-q4})"
		STRATA_TESTS=test_moe_stack STRATA_CASES=${MC_CASES:-stack-mix,stack-qwen-q4} timeout $(lim 40) $lb \
			compute-sanitizer --tool $tool "$B/tests/test_kernels" >"$d/$tool.log" 2>&1; echo "$tool exit $?"
		grep -E "ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED" "$d/$tool.log" | tail -3
	done
fi
echo "== summary"
grep -hE "^\[  (PASSED|FAILED) |^test_kernels" "$d/test_kernels.log" 2>/dev/null | tail -3
for t in memcheck racecheck synccheck; do
	[ -f "$d/$t.log" ] && echo "$t: $(grep -hE "ERROR SUMMARY|RACECHECK SUMMARY" "$d/$t.log" | tail -1)"
done
for f in "$d"/stack-*.log; do
	[ -f "$f" ] || continue
	echo "-- $(basename "$f")"
	grep -E "^ceiling: (read|decode [a-z]+ +[0-9])" "$f" | head -2
	grep -E "^(decode|stack[a-z0-9_]*) .* T=1 " "$f" | sed 's/  */ /g'
done
