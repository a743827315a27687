#!/usr/bin/env bash
# Issue 21 item 1 (the tier formats' decode ceiling and the fused decode
# against it), one device call on already-built binaries in $B (default
# build/release; build first with `scons -Q -j16 mode=release`, plus
# experiments/kernels/ceil_variants built by the nvcc line in its head):
#   test_kernels' ceiling tests, ceil_variants (exact decoders and the pipe
#   diagnostics, CEIL_FMTS), bench_kernels --decode --reps 7 --formats
#   hot,warm,cold (both shapes, the ceilings in the same run), then for each
#   SHAPE:VARIANT of VARIANTS that shape's decode table with --kernel VARIANT,
#   test_kernels' MoE decode cases (variants TEST_DEC), with SANITIZE=1
#   compute-sanitizer memcheck on the ceiling trace and the decode variants
#   MC_DEC, and with NCU=1 (default) ncu of the ceiling kernel for the
#   decoders in NCU_VARIANTS (ceil_variants numbering, default "0 1") and of
#   the decode kernel (Kimi hot T=1) for each dec= value in NCU_DEC.
#   TESTS=0 skips the tests.  Knobs of the tier row-streaming kernel's call
#   (dec_tr): BENCH_SHAPES="kimi qwen" runs the decode table once per shape
#   (--shape; default: both shapes in one run) with BENCH_REPS repetitions
#   (default 7); TK_TESTS / MC_TESTS the test_kernels tests of the MoE step /
#   of memcheck, MC_CASES its STRATA_CASES; CEIL_FMTS="" skips ceil_variants,
#   TK_CEIL=0 the ceiling tests; NCU_TR="2 3": ncu of the tier row-streaming
#   kernel under those dec_tr values.
#   Under $OUT (default out/): summary.txt, t21_csv.tar.gz (the CSVs),
#   t21_logs.tar.gz (everything); the summary is printed last.
#   bash experiments/kernels/t21_device.sh
set -u
B=${B:-build/release}
dest=${OUT:-out}
mkdir -p "$dest"
out=$(mktemp -d)
# $OUT gets the summary, the CSVs in one tarball and every log in another
trap 'cp "$out/summary.txt" "$dest/"; tar -czf "$dest/t21_csv.tar.gz" -C "$out" $(cd "$out" && ls *.csv 2>/dev/null); tar -czf "$dest/t21_logs.tar.gz" -C "$out" .' EXIT
s="$out/summary.txt"
: >"$s"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,clocks.mem,temperature.gpu,power.draw --format=csv >"$out/gpu.txt" 2>&1
# Every step ends by DEADLINE seconds after the start (default 140), so the
# summary is always printed: a step's timeout is cut to what is left, and a
# step with under 5 s left is skipped.
start=$(date +%s)
step() { # NAME TIMEOUT CMD... : run with a timeout, log to $out/NAME.log, note the exit status
	local n=$1 t=$2 t0 rc left
	shift 2
	t0=$(date +%s)
	left=$(( start + ${DEADLINE:-140} - t0 ))
	if [ "$left" -lt 5 ]; then
		echo "$n: skipped (deadline)" | tee -a "$s"
		return 124
	fi
	[ "$t" -gt "$left" ] && t=$left
	timeout "$t" "$@" >"$out/$n.log" 2>&1
	rc=$?
	echo "$n: exit $rc in $(( $(date +%s) - t0 )) s" | tee -a "$s"
	return $rc
}
# Quick checks and the benchmarks first, the long test runs last.
if [ "${TESTS:-1}" = 1 ] && [ "${TK_CEIL:-1}" = 1 ]; then
	step tk_ceiling 40 env STRATA_TESTS=test_moe_config,test_dequant_exact,test_decode_ceiling,test_decode_ceiling_rate \
		"$B/tests/test_kernels"
	grep -E "^\[  (PASSED|FAILED) |FAILED|decode ceiling" "$out/tk_ceiling.log" | head -20 >>"$s"
fi
for f in ${CEIL_FMTS-hot}; do
	step "ceil_variants_$f" 30 "$B/bench/ceil_variants" --fmt "$f"
	grep -E "^best|exact check" "$out/ceil_variants_$f.log" >>"$s"
done
if [ -z "${BENCH_SHAPES:-}" ]; then
	step bench "${BENCH_TIMEOUT:-40}" "$B/bench/bench_kernels" --decode --reps "${BENCH_REPS:-7}" --formats hot,warm,cold \
		--csv "$out/decode.csv"
	grep -E "ceiling: decode" "$out/bench.log" >>"$s"
fi
for sh in ${BENCH_SHAPES:-}; do
	step "bench_$sh" "${BENCH_TIMEOUT:-40}" "$B/bench/bench_kernels" --decode --reps "${BENCH_REPS:-7}" --shape "$sh" \
		--formats hot,warm,cold --csv "$out/decode-$sh.csv"
	grep -E "ceiling: (decode|read)" "$out/bench_$sh.log" >>"$s"
done
for sv in ${VARIANTS-kimi:dec=12x2t,split=3 kimi:dec=8x2t,split=3 kimi:dec=7x3t,split=3 qwen:dec=12x2t,split=3}; do
	sh=${sv%%:*} v=${sv#*:}
	step "bench_${sh}_$v" 30 "$B/bench/bench_kernels" --decode --reps 7 --shape "$sh" --formats hot,warm,cold \
		--kernel "$v" --csv "$out/decode_${sh}_$v.csv"
done
if [ "${TESTS:-1}" = 1 ]; then
	# the MoE cases on the decode kernel: its default, the table variants and
	# the scalar formats (which take the kernel with compute_sq)
	step tk_moe "${TK_TIMEOUT:-80}" env STRATA_TESTS="${TK_TESTS:-test_moe_layer,test_moe_decode_variants,test_moe_decode_autosplit,test_moe_outliers,test_moe_scalar}" \
		STRATA_TEST_DEC="${TEST_DEC:-off,12x4,12x4u,8x2t,12x2t,7x3t}" "$B/tests/test_kernels"
	grep -E "^\[  (PASSED|FAILED) |FAILED" "$out/tk_moe.log" | head -20 >>"$s"
fi
if [ "${SANITIZE:-0}" = 1 ]; then
	step memcheck "${MC_TIMEOUT:-60}" env STRATA_TESTS="${MC_TESTS:-test_decode_ceiling,test_moe_decode_variants}" \
		STRATA_TEST_DEC="${MC_DEC:-12x4,12x2t}" STRATA_CASES="${MC_CASES:-}" compute-sanitizer --tool memcheck \
		"$B/tests/test_kernels"
	grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) " "$out/memcheck.log" | head >>"$s"
fi
if [ "${NCU:-1}" = 1 ]; then
	for v in ${NCU_VARIANTS-0 1}; do
		w=48
		[ "$v" = 0 ] || [ "$v" = 3 ] || [ "$v" = 4 ] || [ "$v" = 5 ] || w=32
		step "ncu_ceil_$v" 40 ncu --clock-control none --kernel-name regex:var_kernel --launch-skip 1 \
			--launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
			--section InstructionStats --section WarpStateStats --print-details all \
			--metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum \
			"$B/bench/ceil_variants" --profile "$v" "$w"
		grep -iE "Issue Slots Busy|Executed Ipc Active|Pipe (Alu|Fma|Fmaheavy|Shared) Cycles|Inst Executed Pipe Lsu|inst_executed.sum" \
			"$out/ncu_ceil_$v.log" | sed 's/  */ /g' | head -12 >>"$s"
	done
	for kv in ${NCU_DEC-auto 12x2t}; do
		step "ncu_dec_$kv" 40 ncu --clock-control none --kernel-name regex:dec_kernel --launch-skip 3 \
			--launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
			--section InstructionStats --section WarpStateStats --section LaunchStats --print-details all \
			--metrics smsp__inst_executed.sum "$B/bench/bench_kernels" --profile hot --kernel "dec=$kv,split=3"
		grep -iE "Duration|Registers Per|Issue Slots Busy|Pipe (Alu|Fma|Fmaheavy|Shared) Cycles|Inst Executed Pipe Lsu|inst_executed.sum" \
			"$out/ncu_dec_$kv.log" | sed 's/  */ /g' | head -12 >>"$s"
	done
	# the tier row-streaming kernel (gate|up and down launch of one Kimi hot
	# T=1 layer) for each dec_tr value in NCU_TR
	for v in ${NCU_TR-}; do
		step "ncu_tr_$v" 60 ncu --clock-control none --kernel-name regex:gv_kernel --launch-skip 2 \
			--launch-count 2 --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
			--section InstructionStats --section WarpStateStats --section LaunchStats --section Occupancy \
			--print-details all --metrics smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts.sum,l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum,l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum \
			"$B/bench/bench_kernels" --profile hot --kernel "dec_tr=$v"
		grep -iE "Duration|Registers Per|Block Size|Grid Size|Issue Slots Busy|Pipe (Alu|Fma|Fmaheavy|Shared) Cycles|Inst Executed Pipe Lsu|inst_executed.sum|wavefronts|L1/TEX Hit|Mem Busy|Max Bandwidth|DRAM Throughput|Stall|Warp Cycles Per Issued" \
			"$out/ncu_tr_$v.log" | sed 's/  */ /g' | head -60 >>"$s"
	done
fi
[ -x "$B/bench/ceil_variants" ] && cuobjdump -sass "$B/bench/ceil_variants" 2>&1 | gzip >"$out/ceil_variants.sass.gz"
# (bench_kernels' CSV column "us": microseconds)
echo "== decode table (us, of read, of bound)" >>"$s"
for c in "$out"/decode*.csv; do
	echo "-- $(basename "$c")" >>"$s"
	grep -E "^decode" "$c" | awk -F, '$4 == 1 || $4 == 16 { printf "%s %s %s T=%s %.1f us %.3f %s\n", $1, $2, $3, $4, $5, $6, $10 }' >>"$s"
done
cat "$s"
