#!/usr/bin/env bash
# Study 3: bits against tiers.  Per-tier cosine (bench_quant on real-shape
# matrices), model size per split (strata inspect), decode speed per split
# (run.lua: strata sim), joined by combine.py; then the plots.
# Usage: experiments/bits-vs-tiers/make.sh [key=value ... for run.lua]
# env: BENCH_QUANT (default: bench_quant beside the strata binary), ROWS/COLS
# (matrix shape, default 768 x 2048: a Qwen3-30B-A3B gate/up projection),
# PYTHON (for combine.py, default python3), GPU / E2E (the frontier's GPU replays
# and end-to-end quality, default gpu/ beside this script and
# experiments/real-model/tiny-cpu/summary.csv), FORMATS (;-separated choices of the
# tiers' formats), COST (the cost model: default cost_qwen_sq.json beside this
# script, the GPU machine's calibration with the q4/q3 kernels' speed measured
# by strata calibrate); and experiments/common.sh's.
source "$(dirname "$0")/../common.sh"
here=experiments/bits-vs-tiers
figs=${STUDY_OUT:-$here}   # plots; results/ under it
res=$figs/results
mkdir -p "$res"
bq=${BENCH_QUANT:-$(dirname "$(dirname "$STRATA")")/bench/bench_quant}
[ -x "$bq" ] || { echo "no $bq: scons -Q -j2 mode=release (or set BENCH_QUANT)" >&2; exit 2; }
splits=${SPLITS:-0/0/100,5/20/75,15/30/55,30/40/30,50/30/20,0/100/0,100/0/0}
# the tiers' formats, ;-separated choices (hot first): the trellis formats, and
# the hot tier in the fast-decode q4 or q3 (kernels/FORMATS.md)
formats=${FORMATS:-hot,warm,cold;q4,warm,cold;q3,warm,cold}

# 1. cosine of each tier format, the actual quantizer on Gaussian and Student-t(5) matrices
if [ ! -s $res/cosine.csv ]; then
	"$bq" --rows "${ROWS:-768}" --cols "${COLS:-2048}" --dist gauss,t5 --csv > $res/cosine.csv.tmp
	mv $res/cosine.csv.tmp $res/cosine.csv
fi
# 2. sizes: the full Qwen3-30B-A3B and the scaled model of the simulation
: > $res/sizes.jsonl.tmp
for s in ${splits//,/ }; do
	IFS=/ read -r h w c <<< "$s"
	fr=$(awk -v h="$h" -v w="$w" -v c="$c" 'BEGIN { printf "%g,%g,%g", h/100, w/100, c/100 }')
	for fm in ${formats//;/ }; do
		for which in full scaled; do
			preset=qwen3-30b-a3b; [ $which = scaled ] && preset=qwen3-30b-a3b:layers=8,experts=64
			printf '{"split":"%s","formats":"%s","which":"%s","card":%s}\n' "$s" "$fm" $which \
				"$("$STRATA" inspect --preset $preset --tiers "$fr" --formats "$fm" --json)" >> $res/sizes.jsonl.tmp
		done
	done
done
mv $res/sizes.jsonl.tmp $res/sizes.jsonl
# 3. speed per split
# the fit variant's clocks: the calibrated one ($cost: the q4/q3 kernels at the
# speed per packed byte `strata calibrate` measured, kernel_speed_q4/q3), and two
# references: the q4/q3 kernels priced per packed MB like the trellis ones
# (kernel_speed 1) and 5.1x faster (issue 21's 0.85 of read over the trellis
# hot's 0.167)
cost=${COST:-$here/cost_qwen_sq.json}
for v in 1 5.1; do
	sed "s/\"kernel_speed_q4\": [0-9.]*/\"kernel_speed_q4\": $v/; s/\"kernel_speed_q3\": [0-9.]*/\"kernel_speed_q3\": $v/" \
		"$cost" > $res/cost-speed$v.json
done
"$STRATA" run $here/run.lua out=$res splits="$splits" formats="$formats" cost="$cost" \
	fit_costs="$cost;$res/cost-speed1.json;$res/cost-speed5.1.json" "$@" > /dev/null || rc=$?
# 4. join, tables, plots; the frontier adds the GPU machine's replays (run_device.sh's
# device.csv, GPU= another folder) and the trained tiny model's end-to-end quality
# (strata.eval --tier-formats, E2E= another summary.csv), committed beside this study
gpu=${GPU:-$here/gpu}
e2e=${E2E:-experiments/real-model/tiny-cpu/summary.csv}
"${PYTHON:-python3}" $here/combine.py $res $([ -s "$gpu/device.csv" ] && echo --gpu "$gpu") \
	$([ -s "$e2e" ] && head -1 "$e2e" | grep -q formats && echo --e2e "$e2e")
plot $res/quality.csv --x full_gb --xlabel "Qwen3-30B-A3B routed experts (GB)" --y cosine \
	--ylabel "model cosine (mean over experts)" --hue weighting --label split \
	--title "Size against quality per hot/warm/cold split (cosines: the quantizer on Gaussian 768x2048 matrices)" --out $figs/size-quality.png
plot $res/speed.csv --kind bar --x split --xlabel "hot/warm/cold split (% of experts)" --hue policy \
	--y decode_tok_s,fast_hit_pct --ylabel "decode tok/s (virtual clock),VRAM+RAM hits (%)" --logy decode_tok_s \
	--title "Scaled Qwen3-30B-A3B (8x64), VRAM 256 MiB, RAM 512 MiB" --out $figs/speed.png
[ "${NO_PLOTS:-0}" = 1 ] || scripts/plot.sh --script $here/frontier_plot.py $res/frontier.csv $figs/frontier.png
exit ${rc:-0}   # strata run failed (a script error; a failing configuration only gets an error row)
