#!/usr/bin/env bash
# Study 1: run the sweep (synthetic trace; the Mixtral traces when present),
# then draw the plots and tables.  Usage: experiments/tier-budgets/make.sh
# (env: see experiments/common.sh; extra key=value arguments go to run.lua).
source "$(dirname "$0")/../common.sh"
here=experiments/tier-budgets
figs=${STUDY_OUT:-$here}   # plots; results/ under it
res=$figs/results
mkdir -p "$res"

"$STRATA" run $here/run.lua out=$res "$@" || rc=$?
# the best policy against the time bound on the GPU machine's calibrated clock, run.lua's traces
tb=()
for x in "$@"; do case $x in seeds=* | model=* | trace=*) tb+=("$x") ;; esac; done
"$STRATA" run $here/time_bound.lua out=$res "${tb[@]}" || rc=$?
read -r vmid rmid < $res/tier-budgets-slices.txt
plot $res/tier-budgets-plot.csv --filter vram_slice=1 --x vram_mib --logx --xlabel "VRAM budget (MiB), RAM $rmid" \
	--y hit_vram_pct,decode_tok_s --ylabel "VRAM hit rate (%),decode tok/s (virtual clock)" --logy decode_tok_s \
	--hue policy --ref-hue bound --title "Qwen3-30B-A3B scaled (8x64), synthetic traces" --out $figs/vram.png
plot $res/tier-budgets-plot.csv --filter ram_slice=1 --x ram_mib --logx --xlabel "RAM budget (MiB), VRAM $vmid" \
	--y hit_fast_pct,decode_tok_s --ylabel "VRAM+RAM hit rate (%),decode tok/s (virtual clock)" --logy decode_tok_s \
	--hue policy --ref-hue bound --title "Qwen3-30B-A3B scaled (8x64), synthetic traces" --out $figs/ram.png

# Mixtral-8x7B-Instruct routing (vLLM logs, 654 decode tokens), model spec mixtral-8x7b
# (32 layers x 8 experts, ~45 MB per expert at the tier mix, 11.45 GB in all).
if mixtral_trace $res/mixtral.strace; then
	"$STRATA" run $here/run.lua out=$res name=mixtral model=mixtral-8x7b trace=$res/mixtral.strace \
		vram=2G,4G,6G,8G ram=2G,4G,8G || rc=$?
	plot $res/mixtral-plot.csv --filter vram_slice=1 --x vram_mib --xlabel "VRAM budget (MiB), RAM 4G" \
		--y hit_vram_pct,decode_tok_s --ylabel "VRAM hit rate (%),decode tok/s (virtual clock)" --logy decode_tok_s \
		--hue policy --ref-hue bound --title "Mixtral-8x7B-Instruct routing (vLLM logs)" --out $figs/mixtral-vram.png
	plot $res/mixtral-plot.csv --filter ram_slice=1 --x ram_mib --logx --xlabel "RAM budget (MiB), VRAM 4G" \
		--y hit_fast_pct,decode_tok_s --ylabel "VRAM+RAM hit rate (%),decode tok/s (virtual clock)" --logy decode_tok_s \
		--hue policy --ref-hue bound --title "Mixtral-8x7B-Instruct routing (vLLM logs)" --out $figs/mixtral-ram.png
fi
# The trained model's own routing (experiments/real-model: 504 decode tokens of held-out
# prompts, 8 layers x 64 experts, top-6, ~0.1 MB per expert at the tier mix, 51 MB in all).
REAL_SPEC=custom:layers=8,experts=64,top_k=6,hidden=512,inter=256
"$STRATA" run $here/run.lua out=$res name=real model=$REAL_SPEC trace=experiments/real-model/run1/trace-decode.strace \
	vram=4M,8M,16M,32M ram=8M,16M,32M || rc=$?
plot $res/real-plot.csv --filter vram_slice=1 --x vram_mib --logx --xlabel "VRAM budget (MiB), RAM 16M" \
	--y hit_vram_pct,decode_tok_s --ylabel "VRAM hit rate (%),decode tok/s (virtual clock)" --logy decode_tok_s \
	--hue policy --ref-hue bound --title "trained byte-level MoE (8x64, top-6), its own routing" --out $figs/real-vram.png
plot $res/real-plot.csv --filter ram_slice=1 --x ram_mib --logx --xlabel "RAM budget (MiB), VRAM 8M" \
	--y hit_fast_pct,decode_tok_s --ylabel "VRAM+RAM hit rate (%),decode tok/s (virtual clock)" --logy decode_tok_s \
	--hue policy --ref-hue bound --title "trained byte-level MoE (8x64, top-6), its own routing" --out $figs/real-ram.png
exit ${rc:-0}   # strata run failed (a script error; a failing configuration only gets an error row)
