#!/usr/bin/env bash
# Study 2: run the sweep (synthetic traces with recorded predictions; the
# Mixtral traces with the oracle predictor when present), then the plots.
# Usage: experiments/lookahead/make.sh [key=value ...]  (env: experiments/common.sh)
source "$(dirname "$0")/../common.sh"
here=experiments/lookahead
figs=${STUDY_OUT:-$here}   # plots; results/ under it
res=$figs/results
mkdir -p "$res"

"$STRATA" run $here/run.lua out=$res "$@" || rc=$?
plot $res/lookahead-plot.csv --x depth --xlabel "lookahead depth (layers; 0: no prefetch)" \
	--y stall_ms_per_token,decode_tok_s --ylabel "stall per token (ms),decode tok/s (virtual clock)" \
	--hue accuracy --ref-hue "bound 50%" --ref-hue "bound 75%" --ref-hue "bound 90%" --ref-hue "bound 100%" --logy decode_tok_s --ylim decode_tok_s=runs \
	--title "Qwen3-30B-A3B scaled (8x64), VRAM 256 MiB, RAM 512 MiB, recorded predictions (dashed: bounds)" \
	--out $figs/lookahead.png

if mixtral_trace $res/mixtral.strace; then
	"$STRATA" run $here/run.lua out=$res name=mixtral model=mixtral-8x7b trace=$res/mixtral.strace vram=4G ram=4G || rc=$?
	plot $res/mixtral-plot.csv --x depth --xlabel "oracle prefetch depth (layers; 0: no prefetch)" \
		--y stall_ms_per_token,decode_tok_s --ylabel "stall per token (ms),decode tok/s (virtual clock)" \
		--hue accuracy --ref-hue "bound 50%" --ref-hue "bound 75%" --ref-hue "bound 90%" --ref-hue "bound 100%" --logy decode_tok_s --ylim decode_tok_s=runs \
		--title "Mixtral-8x7B-Instruct routing, VRAM 4 GiB, RAM 4 GiB, oracle predictor (dashed: bounds)" \
		--out $figs/mixtral.png
	# The same routing with predictions drawn from it (right with probability P per
	# slot, three seeds): the default lookahead on real routing, at the study's RAM
	# (4G, full with placement's warm set: nothing lands in RAM) and at 6G (room to spare).
	for s in 11 12 13; do
		for p in 50 75 90 100; do
			f=$res/mixtral-drawn-p$p-s$s.strace
			[ -s "$f" ] || "$STRATA" trace convert --no-progress --pred-depth 3 --pred-accuracy "$(awk "BEGIN { print $p / 100 }")" \
				--pred-seed $s $res/mixtral.strace "$f" >/dev/null || rc=$?
		done
	done
	for ram in 4G 6G; do
		n=mixtral-drawn-ram${ram}
		"$STRATA" run $here/run.lua out=$res name=$n model=mixtral-8x7b drawn=$res/mixtral-drawn-p%d-s%s.strace \
			vram=4G ram=$ram || rc=$?
		plot $res/$n-plot.csv --x depth --xlabel "lookahead depth (layers; 0: no prefetch)" \
			--y stall_ms_per_token,decode_tok_s --ylabel "stall per token (ms),decode tok/s (virtual clock)" \
			--hue accuracy --ref-hue "bound 50%" --ref-hue "bound 75%" --ref-hue "bound 90%" --ref-hue "bound 100%" --logy decode_tok_s --ylim decode_tok_s=runs \
			--title "Mixtral-8x7B-Instruct routing, drawn predictions, VRAM 4 GiB, RAM ${ram%G} GiB (dashed: bounds)" \
			--out $figs/$n.png
	done
fi
# The trained model's own routing (experiments/real-model), the oracle predictor at each
# accuracy; its recorded lookahead predicts 68/56/45% at depths 1/2/3 (experiments/real-model).
"$STRATA" run $here/run.lua out=$res name=real model=custom:layers=8,experts=64,top_k=6,hidden=512,inter=256 \
	trace=experiments/real-model/run1/trace-decode.strace vram=16M ram=24M || rc=$?
plot $res/real-plot.csv --x depth --xlabel "oracle prefetch depth (layers; 0: no prefetch)" \
	--y stall_ms_per_token,decode_tok_s --ylabel "stall per token (ms),decode tok/s (virtual clock)" \
	--hue accuracy --ref-hue "bound 50%" --ref-hue "bound 75%" --ref-hue "bound 90%" --ref-hue "bound 100%" --logy decode_tok_s --ylim decode_tok_s=runs \
	--title "trained byte-level MoE (8x64, top-6), VRAM 16 MiB, RAM 24 MiB, oracle predictor (dashed: bounds)" \
	--out $figs/real.png
exit ${rc:-0}   # strata run failed (a script error; a failing configuration only gets an error row)
