#!/usr/bin/env bash
# Issue 21 item 1 (the tier formats' decode ceiling and the fused decode
# against it), one device call on already-built binaries in $B (default
# build/release; build first with `scons -Q -j16 mode=release`, plus
# experiments/kernels/ceil_variants built by the nvcc line in its head):
#   test_kernels (TESTS=0 skips; SANITIZE=1 adds compute-sanitizer memcheck),
#   ceil_variants (exact decoders and the pipe diagnostics, CEIL_FMTS),
#   bench_kernels --decode --reps 7 --formats hot,warm,cold (both shapes, the
#   ceilings in the same run), then for each SHAPE:VARIANT of VARIANTS
#   (default "kimi:dec=10x2t,split=3 kimi:dec=8x2t,split=3 qwen:dec=10x2t,split=3") that
#   shape's decode table with --kernel VARIANT, and
#   with NCU=1 ncu (pipe utilisation, instruction mix) of the ceiling kernel
#   for the decoders in NCU_VARIANTS (ceil_variants numbering, default "0 1").
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
if [ "${TESTS:-1}" = 1 ]; then
	step test_kernels "${TK_TIMEOUT:-60}" "$B/tests/test_kernels"
	grep -E "^\[  (PASSED|FAILED) |FAILED|decode ceiling" "$out/test_kernels.log" | head -20 >>"$s"
fi
if [ "${SANITIZE:-0}" = 1 ]; then
	step memcheck "${MC_TIMEOUT:-120}" compute-sanitizer --tool memcheck "$B/tests/test_kernels"
	grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED) " "$out/memcheck.log" | head >>"$s"
fi
for f in ${CEIL_FMTS:-hot}; do
	step "ceil_variants_$f" 30 "$B/bench/ceil_variants" --fmt "$f"
	grep -E "^best|exact check" "$out/ceil_variants_$f.log" >>"$s"
done
step bench "${BENCH_TIMEOUT:-70}" "$B/bench/bench_kernels" --decode --reps 7 --formats hot,warm,cold \
	--csv "$out/decode.csv"
grep -E "ceiling: decode" "$out/bench.log" >>"$s"
for sv in ${VARIANTS-kimi:dec=10x2t,split=3 kimi:dec=8x2t,split=3 qwen:dec=10x2t,split=3}; do
	sh=${sv%%:*} v=${sv#*:}
	step "bench_${sh}_$v" 30 "$B/bench/bench_kernels" --decode --reps 7 --shape "$sh" --formats hot,warm,cold \
		--kernel "$v" --csv "$out/decode_${sh}_$v.csv"
done
if [ "${NCU:-1}" = 1 ]; then
	for v in ${NCU_VARIANTS:-0 1}; do
		w=48
		[ "$v" = 1 ] || [ "$v" = 2 ] && w=32
		step "ncu_ceil_$v" 40 ncu --clock-control none --kernel-name regex:var_kernel --launch-skip 1 \
			--launch-count 1 --section SpeedOfLight --section ComputeWorkloadAnalysis \
			--section InstructionStats --section WarpStateStats --print-details all \
			--metrics sass__inst_executed_per_opcode,smsp__inst_executed.sum \
			"$B/bench/ceil_variants" --profile "$v" "$w"
		grep -iE "Issue Slots Busy|Executed Ipc Active|Pipe|inst_executed.sum" "$out/ncu_ceil_$v.log" |
			sed 's/  */ /g' | head -24 >>"$s"
	done
fi
cuobjdump -sass "$B/bench/ceil_variants" 2>&1 | gzip >"$out/ceil_variants.sass.gz"
echo "== decode table (us, of read, of bound)" >>"$s"
for c in "$out"/decode*.csv; do
	echo "-- $(basename "$c")" >>"$s"
	grep -E "^decode" "$c" | awk -F, '$4 == 1 || $4 == 16 { printf "%s %s T=%s %.1f us %.3f %s\n", $2, $3, $4, $5 * 1000, $6, $10 }' >>"$s"
done
cat "$s"
