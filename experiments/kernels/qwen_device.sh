#!/usr/bin/env bash
# One device call on the Qwen3-30B-A3B (or Kimi) decode shape (8 experts of 2048 x 768,
# a layer smaller than one wave of warp tasks): the Qwen decode table for each
# variant in VARIANTS (a kernel configuration for bench_kernels --kernel,
# KEY=VALUE[,KEY=VALUE...] as in kernels/kernels.h, "default" = none), then
# ncu of one Qwen hot T=1 layer per kernel in NCU_RUNS (same syntax, the kernel
# name regex first: "moe_kernel:default dec_kernel:split=4").
# SHAPE=kimi runs the same on the Kimi shape. Logs and CSVs go to $OUT/qwen.tar.gz (or
# $OUT/kimi.tar.gz); the T=1 and T=16 decode lines are printed.
#   bash experiments/kernels/qwen_device.sh
set -u
source "$(dirname "$0")/device_common.sh"
shape=${SHAPE:-qwen}
dev_begin $shape
dev_build build/release/bench/bench_kernels
kargs() { [ "$1" = default ] || echo "--kernel $1"; }
for v in ${VARIANTS:-default}; do
	./build/release/bench/bench_kernels $(kargs "$v") --decode --shape $shape --csv "$d/decode_$v.csv" \
		>"$d/bench_$v.log" 2>&1
	echo "== $v (exit $?)"
	sed "s/  */ /g" "$d/bench_$v.log" | grep -E "^decode $shape .* T=(1|16) "
done
for r in ${NCU_RUNS:-}; do
	k=${r%%:*} v=${r#*:}
	timeout 120 ncu --clock-control none --kernel-name regex:$k --launch-skip 3 --launch-count 1 \
		--section SpeedOfLight --section WarpStateStats --section Occupancy --section LaunchStats \
		--section InstructionStats --print-details all \
		./build/release/bench/bench_kernels $(kargs "$v") --shape $shape --profile hot >"$d/ncu_${k}_$v.txt" 2>&1
	echo "== ncu $k $v: $(grep -E 'Duration|DRAM Throughput|Executed Ipc A|Issue Slots Busy|Executed Instructions  |Grid Size|Block Size|Registers Per|Achieved Active|Warp Cycles Per Issued' "$d/ncu_${k}_$v.txt" | sed 's/  */ /g' | tr '\n' ';')"
	grep -E "^ *Stall|stall" "$d/ncu_${k}_$v.txt" | sed 's/  */ /g' | head -12
done
