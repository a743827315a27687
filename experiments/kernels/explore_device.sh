#!/usr/bin/env bash
# Exploration call (numbers recorded in README.md, "Warp-streaming decode"):
#  (a) ncu stall reasons per issued instruction of the warp-streaming decode
#      kernel on one Kimi hot T=1 layer;
#  (b) bf16 direct path with two units per warp in registers
#      (STRATA_DIRECT_SETS=2, a second build) at 8 and 16 warps against the
#      default build.
#   source .device/setup.sh && bash experiments/kernels/explore_device.sh   (NCU=0: skip (a))
set -u
out=${OUT:-out}
d=$(mktemp -d)
mkdir -p "$out"
trap 'tar -czf "$out/explore.tar.gz" -C "$d" .' EXIT
rm -rf /tmp/sets2 && mkdir /tmp/sets2 && git ls-files -co --exclude-standard | grep -v '^\.device' | tar cf - -T - | tar xf - -C /tmp/sets2
sed -i 's/^#define STRATA_DIRECT_SETS 1$/#define STRATA_DIRECT_SETS 2/' /tmp/sets2/kernels/moe_gpu.cu
grep -c "define STRATA_DIRECT_SETS 2" /tmp/sets2/kernels/moe_gpu.cu
(scons -Q -j8 mode=release build/release/bench/bench_kernels >"$d/build.log" 2>&1; echo "main build $?") &
(cd /tmp/sets2 && scons -Q -j8 mode=release build/release/bench/bench_kernels >"$d/build_sets2.log" 2>&1; echo "sets2 build $?") &
wait
for w in 16 8; do
	for b in . /tmp/sets2; do
		STRATA_MOE_WARPS=$w $b/build/release/bench/bench_kernels --decode >"$d/bench_${w}_$(basename $b).log" 2>&1
		echo "== warps $w build $b: $(grep -E 'bf16 +T=(1|4) ' "$d/bench_${w}_$(basename $b).log" | sed 's/  */ /g' | tr '\n' ';')"
	done
done
[ "${NCU:-1}" = 1 ] || exit 0
timeout 200 ncu --clock-control none --kernel-name regex:dec_kernel --launch-skip 3 --launch-count 1 \
	--metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio,smsp__inst_executed.sum,sm__cycles_elapsed.avg,smsp__issue_active.avg.pct_of_peak_sustained_active \
	./build/release/bench/bench_kernels --profile hot >"$d/ncu_stalls.txt" 2>&1
echo "ncu exit $?"
grep -E "stalled|inst_executed|cycles_elapsed|issue_active" "$d/ncu_stalls.txt" | awk '$NF+0 > 0.05 || /inst|cycles|issue_active/' | sed 's/  */ /g' | sort -t' ' -k4 -rn | head -30
