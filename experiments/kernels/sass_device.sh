#!/usr/bin/env bash
# Instruction anatomy of the decode kernels: the SASS of every dec_kernel
# instance (cuobjdump) and ncu's executed-instruction mix per opcode on one
# Kimi T=1 layer per format in PROFILE_FMTS (default "hot cold").  SRC=1 adds
# the ncu source page: executed count of every SASS instruction of dec_kernel
# (hot), i.e. where the instructions per weight go.  Files: $OUT/sass.tar.gz.
#   bash experiments/kernels/sass_device.sh
set -u
source "$(dirname "$0")/device_common.sh"
dev_begin sass
dev_build build/release/bench/bench_kernels
obj=$(find build/release -name 'moe_gpu*.o' | head -1)
cuobjdump -sass "$obj" >"$d/moe_gpu.sass" 2>&1
echo "sass: $(wc -l <"$d/moe_gpu.sass") lines from $obj"
for f in ${PROFILE_FMTS:-hot cold}; do
	timeout 200 ncu --clock-control none --kernel-name regex:dec_kernel --launch-skip 3 --launch-count 1 \
		--section InstructionStats --section WarpStateStats --section SpeedOfLight --print-details all \
		--metrics smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,sass__inst_executed_per_opcode \
		./build/release/bench/bench_kernels --profile $f >"$d/ncu_$f.txt" 2>&1
	echo "== ncu $f exit $?"
	grep -E "Duration|inst_executed.sum|issue_active" "$d/ncu_$f.txt" | sed 's/  */ /g'
done
[ "${SRC:-0}" = 1 ] || exit 0
timeout 240 ncu --clock-control none --kernel-name regex:dec_kernel --launch-skip 3 --launch-count 1 \
	--section SourceCounters -o "$d/dec_hot" -f ./build/release/bench/bench_kernels --profile hot >"$d/ncu_src.log" 2>&1
echo "ncu source counters exit $?"
ncu -i "$d/dec_hot.ncu-rep" --page source --print-source sass --csv >"$d/sass_hot.csv" 2>"$d/page.err"
echo "source page exit $? ($(wc -l <"$d/sass_hot.csv") lines)"
