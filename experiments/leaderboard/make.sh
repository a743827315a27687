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
# The trained models' own routing with their own lookahead predictions (depths 1-3):
# experiments/real-model run 1 (8 layers x 64 experts, top-6, 504 decode tokens of held-out
# prompts; ~0.1 MB per expert) and the tiny checkpoint of tests/data/moe-tiny (4 x 16, top-4,
# 4 prompts of 64 bytes + 32 generated; 24 KiB extents).
traces="$traces;trained-8x64|custom:layers=8,experts=64,top_k=6,hidden=512,inter=256|experiments/real-model/run1/trace-decode.strace|4M,8M,16M"
traces="$traces;trained-tiny|custom:layers=4,experts=16,top_k=4,hidden=128,inter=64|tests/data/moe-tiny/trace.strace|256K,512K,1M"
# Mixtral-8x7B-Instruct routing (vLLM logs, 654 decode tokens; 32 layers x 8 experts,
# ~45 MB per expert at the tier mix): 2, 4 and 8 GB of VRAM.
if mixtral_trace $res/mixtral.strace; then
	traces="$traces;mixtral|mixtral-8x7b|$res/mixtral.strace|2G,4G,8G"
fi
"$STRATA" run $here/run.lua out=$res ram=${RAM:-2G} traces="$traces" "$@" || rc=$?
# 17 policies do not read as lines: one ranked table figure per measure (policies ranked by
# the geometric mean over every trace and budget; each cell against the best policy of its
# column; the bound's row at the bottom).
if [ "${NO_PLOTS:-0}" != 1 ]; then
	"$root/scripts/plot.sh" --script $here/rank_plot.py $res/leaderboard-plot.csv --y decode_tok_s \
		--bound bound_tok_s --title "decode tok/s (virtual clock), % of the best policy per column" \
		--out $figs/rank-tok_s.png
	# no bound row here: bound_hit_vram_pct bounds demand fetching (the fewest moves into VRAM),
	# and a prefetched expert is a move that then counts as a hit
	"$root/scripts/plot.sh" --script $here/rank_plot.py $res/leaderboard-plot.csv --y hit_vram_pct \
		--title "VRAM hit rate (%)" --absolute --out $figs/rank-hit_vram.png
fi
exit ${rc:-0}
