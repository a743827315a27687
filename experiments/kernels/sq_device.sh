#!/usr/bin/env bash
# One device call for the fast-decode scalar formats (issue 21): the steps in
# STEPS (default "tests bench cal ab memcheck"), in this order:
#   tests     test_kernels (every case against the CPU reference, among them
#             test_moe_scalar and test_dequant_exact for q4 and q3);
#             STRATA_TESTS=name,... limits it to those tests ("a,b;c": a and b,
#             then c, each group under its own limit, T_TESTS="90;60": the
#             groups' limits in order (the first for the rest); "c:x,y": c with
#             STRATA_CASES=x,y, the cases whose names hold x or y)
#   memcheck  compute-sanitizer --tool memcheck on test_kernels' scalar cases
#             (MC_TESTS, default test_moe_scalar,test_dequant_exact; MC_CASES:
#             test_moe_scalar_gv's cases whose names hold one of these)
#   bench     bench_kernels' decode table for FORMATS (default
#             q4,q3,hot,warm,cold) at the Kimi and Qwen3-30B-A3B shapes, ratios
#             to the read ceiling measured in the same run
#   cal       `strata calibrate` on a one-layer Qwen3-30B-A3B-shaped store (its
#             kernel_speed_q4 / kernel_speed_q3: the scalar formats' kernel time
#             per packed MB against the trellis formats', same call)
#   ab        while BUDGET (seconds since the start, default 170) allows, the
#             q4/q3 decode rows again under each kernel configuration of
#             VARIANTS ("name:key=value[,key=value]" ..., default x through L1
#             (sq_xs=0), then the shared-memory decode kernel (sqdec=off));
#             AB_ARGS: more bench_kernels arguments (e.g. "--shape kimi")
#   ncu       per shape in NCU_SHAPES (default "kimi qwen") ncu's sections
#             (speed of light, warp states, scheduler, occupancy, memory
#             workload, instruction mix, duration) on one NCU_FMT (default q4)
#             T=1 layer call of the scalar decode kernel (NCU_KERNEL, default
#             sq_kernel; gv_kernel: the row-streaming kernel, NCU_COUNT=2 for its
#             gate|up and down launches), and for
#             the first shape the per-SASS-instruction source counters (stall
#             reasons by instruction) as CSV (NCU_OUT=0: only in sq.tar.gz)
#   layer     the full Kimi layer with the hot tier in q4
#   sass      cuobjdump's SASS of the row-streaming kernels (every gv_kernel
#             instance of bench_kernels, or of the cubin or binary SASS_BIN)
#             into sass-gv.txt.gz, and per instance its instruction count by
#             opcode (sass-gv-ops.txt)
# Time limits per step: T_TESTS (per test group), T_BENCH, T_CAL, T_NCU, T_MC (seconds; memcheck
# also stops 8 s before LIMIT, seconds since the start, default 600).
# Uses the binaries under $BUILD (default build/dev) when they run, else
# builds them (cuda=1).  Logs go to $OUT (or ./out) and sq.tar.gz there.
#   bash experiments/kernels/sq_device.sh
#   STEPS="bench ncu" FORMATS=q4 bash experiments/kernels/sq_device.sh
set -u
. "$(dirname "$0")/device_common.sh"
dev_begin sq
B=${BUILD:-build/dev}
if ! "$B/bench/bench_kernels" --help >/dev/null 2>&1; then
	echo "carried binaries do not run here: building"
	dev_build cuda=1 builddir=build/dev
	B=build/dev
fi
STEPS=" ${STEPS:-tests bench cal ab memcheck} "
has() { case "$STEPS" in *" $1 "*) return 0 ;; esac; return 1; }
# line-buffered logs, so a step stopped by its time limit keeps what it printed
lb=; command -v stdbuf >/dev/null && lb="stdbuf -oL -eL"
if has tests; then
	# STRATA_TESTS: groups separated by ';' run one after the other, each
	# under its own T_TESTS limit
	IFS=';' read -ra groups <<<"${STRATA_TESTS:-}"
	[ ${#groups[@]} -gt 0 ] || groups=("")
	: >"$d/test_kernels.log"
	IFS=';' read -ra tlim <<<"${T_TESTS:-90}"
	for i in "${!groups[@]}"; do
		g=${groups[$i]} c=; case "$g" in *:*) c=${g#*:}; g=${g%%:*} ;; esac
		echo "== test_kernels ${g:-(all)} ${c:+(cases $c)}"
		STRATA_TESTS=$g STRATA_CASES=$c timeout ${tlim[$i]:-${tlim[0]}} $lb "$B/tests/test_kernels" >"$d/tk.log" 2>&1; trc=$?
		grep -E "moe\[(q4|q3|sq|big-q|gv-)|stack|scalar decode kernel|dequant|FAILED|PASSED|differ|error" "$d/tk.log" | head -60
		echo "test_kernels ${g:-(all)} exit $trc" | tee -a "$d/tk.log"; cat "$d/tk.log" >>"$d/test_kernels.log"
	done
	cp "$d/test_kernels.log" "$out/"
fi
if has bench; then
	echo "== bench decode"
	timeout ${T_BENCH:-100} $lb "$B/bench/bench_kernels" --decode --reps 7 --formats ${FORMATS:-q4,q3,hot,warm,cold} \
		--csv "$d/decode.csv" >"$d/decode.log" 2>&1; echo "bench decode exit $?"
	cp "$d/decode.csv" "$d/decode.log" "$out/" 2>/dev/null
fi
if has cal; then
	echo "== calibrate (Qwen3-30B-A3B-shaped store: kernel_speed_q4/q3 in the same call)"
	m=$(mktemp -d)
	timeout ${T_CAL:-60} bash -c "'$B/bin/strata' synth --preset qwen3-30b-a3b:layers=1 --out '$m/model' \
		--format tiered --codes random --force >'$d/synth.log' 2>&1 &&
		'$B/bin/strata' calibrate --model '$m/model' --bytes 256M -o '$d/cost_qwen.json' >'$d/calibrate.log' 2>&1"
	echo "calibrate exit $?"; rm -rf "$m"
	cp "$d/cost_qwen.json" "$d/calibrate.log" "$out/" 2>/dev/null
fi
if has ab; then
	for v in ${VARIANTS:-noxs:sq_xs=0 smem:sqdec=off}; do
		[ $(( ${BUDGET:-170} - SECONDS )) -ge 35 ] || break
		echo "== bench decode q4,q3 --kernel ${v#*:}"
		timeout $(( ${BUDGET:-170} - SECONDS - 5 )) $lb "$B/bench/bench_kernels" --decode --reps 5 --formats q4,q3 \
			${AB_ARGS:-} --kernel "${v#*:}" --csv "$d/decode-${v%%:*}.csv" >"$d/decode-${v%%:*}.log" 2>&1; echo "exit $?"
	done
	tar -czf "$out/decode-ab.tar.gz" -C "$d" $(cd "$d" && ls decode-*.csv decode-*.log 2>/dev/null) 2>/dev/null
fi
if has ncu; then
	src=1
	for sh in ${NCU_SHAPES:-kimi qwen}; do
		timeout ${T_NCU:-90} ncu --target-processes all --clock-control none --kernel-name regex:${NCU_KERNEL:-sq_kernel} \
			--launch-skip ${NCU_SKIP:-3} --launch-count ${NCU_COUNT:-1} --section SpeedOfLight --section WarpStateStats \
			--section SchedulerStats --section Occupancy --section LaunchStats --section InstructionStats \
			--section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables --print-details all \
			--metrics gpu__time_duration.sum,smsp__inst_executed.sum,sass__inst_executed_per_opcode \
			"$B/bench/bench_kernels" --shape $sh --profile ${NCU_FMT:-q4} >"$d/ncu-$sh.txt" 2>&1
		echo "== ncu $sh exit $?"; [ "${NCU_OUT:-1}" = 0 ] || cp "$d/ncu-$sh.txt" "$out/"
		grep -E "Duration|DRAM Throughput|Compute \(SM\) Throughput|Issue Slots Busy|No Eligible|Eligible Warps|inst_executed.sum|Registers Per|L1/TEX Hit|L2 Hit Rate  |Warp Cycles Per Issued" \
			"$d/ncu-$sh.txt" | sed 's/  */ /g' | sort -u
		grep -E "^ *Stall" "$d/ncu-$sh.txt" | sed 's/  */ /g' | head -8
		[ $src = 1 ] || continue
		src=0
		timeout ${T_NCU:-90} ncu --target-processes all --clock-control none --kernel-name regex:${NCU_KERNEL:-sq_kernel} \
			--launch-skip ${NCU_SKIP:-3} --launch-count 1 --section SourceCounters --section WarpStateStats \
			-o "$d/sq-$sh" -f "$B/bench/bench_kernels" --shape $sh --profile ${NCU_FMT:-q4} >"$d/ncu-src.log" 2>&1
		echo "== ncu source counters exit $?"
		ncu -i "$d/sq-$sh.ncu-rep" --page source --print-source sass --csv >"$d/sass-$sh.csv" 2>"$d/page.err"
		echo "source page exit $? ($(wc -l <"$d/sass-$sh.csv") lines)"; [ "${NCU_OUT:-1}" = 0 ] || gzip -c "$d/sass-$sh.csv" >"$out/sass-$sh.csv.gz"; rm -f "$d/sq-$sh.ncu-rep"
	done
fi
if has memcheck; then
	echo "== compute-sanitizer memcheck (${MC_TESTS:-test_moe_scalar,test_dequant_exact})"
	STRATA_TESTS=${MC_TESTS:-test_moe_scalar,test_dequant_exact} STRATA_CASES=${MC_CASES:-} timeout $(( ${T_MC:-90} < ${LIMIT:-600} - SECONDS - 8 ? ${T_MC:-90} : ${LIMIT:-600} - SECONDS - 8 )) $lb compute-sanitizer \
		--tool memcheck "$B/tests/test_kernels" >"$d/memcheck.log" 2>&1; echo "memcheck exit $?"
	grep -E "ERROR SUMMARY|PASSED|FAILED" "$d/memcheck.log" | tail -5; cp "$d/memcheck.log" "$out/"
fi
if has layer; then
	echo "== bench layer (hot tier q4 vs hot)"
	timeout 45 "$B/bench/bench_kernels" --no-decode --quick --shape kimi --reps 5 --formats q4 \
		--tier-formats q4,warm,cold --csv "$d/layer-q4.csv" >"$d/layer-q4.log" 2>&1; echo "bench layer q4 exit $?"
	cp "$d/layer-q4.csv" "$out/" 2>/dev/null
fi
if has sass; then
	echo "== sass of the row-streaming kernels"
	timeout ${T_SASS:-30} cuobjdump -sass "${SASS_BIN:-$B/bench/bench_kernels}" 2>"$d/sass.err" |
		awk '/Function : /{p = $0 ~ /gv_kernel/} p' >"$d/sass-gv.txt"
	echo "cuobjdump exit $? ($(wc -l <"$d/sass-gv.txt") lines)"
	awk '/Function : /{f=$3} /^ +\/\*[0-9a-f]+\*\/ /{op=$2; if (op ~ /^@/) op=$3; sub(/\..*/, "", op); sub(/;$/, "", op); n[f" "op]++; t[f]++}
		END {for (k in n) print k, n[k]; for (f in t) print f, "TOTAL", t[f]}' "$d/sass-gv.txt" | sort >"$out/sass-gv-ops.txt"
	gzip -c "$d/sass-gv.txt" >"$out/sass-gv.txt.gz"
fi
echo "== summary"
grep -hE "^test_kernels|PASSED|FAILED" "$d/test_kernels.log" 2>/dev/null | tail -6
grep -hE "ERROR SUMMARY" "$d/memcheck.log" 2>/dev/null
grep -E "^ceiling: read" "$d/decode.log" 2>/dev/null
grep -E "^decode(_ring)? .* T=[14] " "$d/decode.log" 2>/dev/null
for f in "$d"/decode-*.log; do [ -f "$f" ] && { echo "-- $(basename "$f")"; grep -E "^decode .* T=1 " "$f"; }; done
cat "$d/calibrate.log" 2>/dev/null | tail -6
