#!/usr/bin/env bash
# Per-SASS-instruction execution counts of the warp-streaming decode kernel
# (ncu source page) on one Kimi T=1 layer of format FMT (default hot):
# where the instructions per weight go.  Report and CSV in $OUT/src.tar.gz.
#   source .device/setup.sh && bash experiments/kernels/src_device.sh
set -u
out=${OUT:-out}
d=$(mktemp -d)
mkdir -p "$out"
trap 'tar -czf "$out/src.tar.gz" -C "$d" .' EXIT
scons -Q -j16 mode=release build/release/bench/bench_kernels >"$d/build.log" 2>&1 || { tail -30 "$d/build.log"; exit 1; }
f=${FMT:-hot}
timeout 240 ncu --clock-control none --kernel-name regex:dec_kernel --launch-skip 3 --launch-count 1 \
	--section SourceCounters --section InstructionStats -o "$d/dec_$f" -f \
	./build/release/bench/bench_kernels --profile $f >"$d/ncu.log" 2>&1
echo "ncu exit $?"
ncu -i "$d/dec_$f.ncu-rep" --page source --print-source sass --csv >"$d/sass_$f.csv" 2>"$d/page.err"
echo "source page exit $? ($(wc -l <"$d/sass_$f.csv") lines)"; head -c 600 "$d/page.err"
head -3 "$d/sass_$f.csv" | cut -c1-400
