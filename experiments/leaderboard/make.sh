#!/usr/bin/env bash
# The leaderboard: every policy x the synthetic traces (and the Mixtral-8x7B-Instruct
# routing when present) x three VRAM budgets; tables and plots.  Usage:
# experiments/leaderboard/make.sh (env: see experiments/common.sh; extra key=value
# arguments go to run.lua).  Resumable: a rerun skips the runs already in the CSV.
source "$(dirname "$0")/../common.sh"
here=experiments/leaderboard
figs=${STUDY_OUT:-$here}
res=$figs/results
mkdir -p "$res"

traces="qwen-syn|qwen3-30b-a3b:layers=8,experts=64|gen|48M,96M,192M;olmoe-syn|olmoe:layers=16|gen|96M,192M,384M"
# Mixtral-8x7B-Instruct routing (vLLM logs, 654 decode tokens; 32 layers x 8 experts,
# ~45 MB per expert at the tier mix): 2, 4 and 8 GB of VRAM.
if mixtral_trace $res/mixtral.strace; then
	traces="$traces;mixtral|mixtral-8x7b|$res/mixtral.strace|2G,4G,8G"
fi
"$STRATA" run $here/run.lua out=$res ram=${RAM:-2G} traces="$traces" "$@" || rc=$?
for t in qwen-syn olmoe-syn mixtral; do
	grep -q "^$t," $res/leaderboard-plot.csv 2>/dev/null || continue
	plot $res/leaderboard-plot.csv --filter trace=$t --x vram_mib --logx --xlabel "VRAM budget (MiB)" \
		--y hit_vram_pct,decode_tok_s --ylabel "VRAM hit rate (%),decode tok/s (virtual clock)" \
		--hue policy --ref-hue farthest --title "leaderboard: $t" --out $figs/$t.png
done
exit ${rc:-0}
