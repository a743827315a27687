#!/usr/bin/env bash
# Format per tier on the GPU machine: the real engine's decode tok/s of each
# split x choice of the tiers' formats (the trellis hot,warm,cold against the
# hot tier in the fast-decode q4 or q3), under the study's VRAM/RAM budgets,
# beside the simulator's prediction of the same run, and a fresh `strata
# calibrate` (the q4/q3 kernels' speed per packed byte) in the same call.
#
#   bash experiments/bits-vs-tiers/run_device.sh [BUILD]     # BUILD: folder with bin/strata (default build/release)
#
# Per split and choice: `strata synth --format tiered --codes random` (a
# throughput-only store of the scaled Qwen3-30B-A3B, experts ranked by the
# trace: the most used go hot), then per policy one `strata replay --compute
# gpu` and one `strata sim` with the same options on the same store and trace,
# priced by this call's calibration and by the study's committed clock
# (cost_qwen_sq.json).  Policies: static and cache at the study's budgets (VRAM
# 256 MiB, RAM 512 MiB), fit (every expert in VRAM after its first read).
# Output in $OUT (default out/bits-vs-tiers-gpu): cost_gpu.json, calibrate.log,
# replay.csv, sim_gpu.csv, sim_study.csv, synth.jsonl, device.csv (the
# side-by-side table: combine.py reads it), gpu.txt, run.log; all.tgz holds
# every file.  74 s on the H200 (6 synths of 0.6-0.8 GB, a calibrate, 18 replays
# of 1-9 s, 36 sims).
# Env: MODEL (default qwen3-30b-a3b:layers=8,experts=64), SPLITS (default
# 15/30/55,50/30/20), FORMATS (;-separated, default hot,warm,cold;q4,warm,cold;q3,warm,cold),
# VRAM/RAM (256M/512M), FIT_VRAM/FIT_RAM (2G/256M), REQUESTS/PROMPT/GEN (trace:
# 4 x (32 + 64) tokens, seed 7), COMPUTE (gpu), STEP_TIMEOUT (s per replay, 40),
# SIM_ONLY=1: on any machine, the simulator's columns again for an $OUT that holds
# a call's results (its cost_gpu.json, replay.csv and synth.jsonl are kept; the
# same stores are synthesised again; log in sim-only.log), e.g. after a change of the cost
# model: OUT=experiments/bits-vs-tiers/gpu SIM_ONLY=1 bash ... build/release
# (about 3 minutes on 2 cores).
set -u
here=$(cd "$(dirname "$0")" && pwd)
B=${1:-build/release}
S=$B/bin/strata
out=${OUT:-out/bits-vs-tiers-gpu}
mkdir -p "$out"
W=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/strata-bvt.XXXXXX")}
mkdir -p "$W"
trap 'rm -rf "$W"' EXIT
model=${MODEL:-qwen3-30b-a3b:layers=8,experts=64}
splits=${SPLITS:-15/30/55,50/30/20}
formats=${FORMATS:-hot,warm,cold;q4,warm,cold;q3,warm,cold}
compute=${COMPUTE:-gpu}
tmo=${STEP_TIMEOUT:-40}
sim_only=${SIM_ONLY:-0}
log=$out/run.log sj=$out/synth.jsonl
if [ "$sim_only" = 1 ]; then
	log=$out/sim-only.log sj=$W/synth.jsonl
	[ -s "$out/cost_gpu.json" ] && [ -s "$out/replay.csv" ] ||
		{ echo "SIM_ONLY=1: $out has no cost_gpu.json and replay.csv of a GPU call" >&2; exit 2; }
	: >"$log"
fi
step() { echo "== $* ($(date +%T))"; }
# add_row ONE.csv ALL.csv TAGS: ONE's row appended to ALL with split,formats,policy in front
add_row() {
	[ -s "$1" ] || return 0
	[ -s "$2" ] || sed -n '1s/^/split,formats,policy,/p' "$1" >"$2"
	sed -n "2s|^|$3,|p" "$1" >>"$2"
}
[ "$sim_only" = 1 ] || nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$out/gpu.txt" 2>&1
T=$W/trace.strace
$S trace gen -o "$T" --model "$model" --requests "${REQUESTS:-4}" --prompt "${PROMPT:-32}" --gen "${GEN:-64}" \
	--seed 7 --no-progress >>"$log" 2>&1 || { echo "trace gen failed"; exit 1; }
: >"$sj"
rm -f "$out/sim_gpu.csv" "$out/sim_study.csv"
[ "$sim_only" = 1 ] || rm -f "$out/replay.csv"
first=$((1 - sim_only))
for s in ${splits//,/ }; do
	for fm in ${formats//;/ }; do
		d=$W/m-${s//\//-}-${fm//,/-}
		step "synth $s $fm"
		$S synth --preset "$model" --out "$d" --format tiered --codes random --formats "$fm" \
			--tiers "${s//\//,}" --popularity "$T" --threads "$(nproc)" --force --json --no-progress \
			>"$W/synth.json" 2>>"$log" || { echo "synth $s $fm failed"; continue; }
		printf '{"split":"%s","formats":"%s","synth":%s}\n' "$s" "$fm" "$(cat "$W/synth.json")" >>"$sj"
		sync
		if [ $first = 1 ]; then
			# this call's cost model: links and the kernels (trellis per packed MB, q4/q3 speed)
			step calibrate
			timeout 90 $S calibrate --model "$d" --bytes 2G --compute "$compute" --no-progress \
				-o "$out/cost_gpu.json" >"$out/calibrate.log" 2>&1
			echo "calibrate exit $?"
			first=0
		fi
		cost=$out/cost_gpu.json
		[ -s "$cost" ] || cost=$here/cost_qwen_sq.json
		for pol in static cache fit; do
			case $pol in
			static) o=(--place static --evict lru --vram "${VRAM:-256M}" --ram "${RAM:-512M}") ;;
			cache) o=(--place static:promote=all --evict lru --vram "${VRAM:-256M}" --ram "${RAM:-512M}") ;;
			fit) o=(--place static:promote=all --evict lru --vram "${FIT_VRAM:-2G}" --ram "${FIT_RAM:-256M}") ;;
			esac
			rm -f "$W"/row-*.csv
			[ "$sim_only" = 1 ] || timeout "$tmo" $S replay -q --no-progress --model "$d" --trace "$T" "${o[@]}" --prefetch none \
				--compute "$compute" --cost "$cost" --csv "$W/row-replay.csv" 2>>"$log"
			[ "$sim_only" = 1 ] || echo "replay $s $fm $pol exit $?"
			$S sim -q --no-progress --model "$d" --trace "$T" "${o[@]}" --prefetch none --cost "$cost" \
				--csv "$W/row-sim_gpu.csv" 2>>"$log"
			$S sim -q --no-progress --model "$d" --trace "$T" "${o[@]}" --prefetch none \
				--cost "$here/cost_qwen_sq.json" --csv "$W/row-sim_study.csv" 2>>"$log"
			for k in replay sim_gpu sim_study; do add_row "$W/row-$k.csv" "$out/$k.csv" "$s,\"$fm\",$pol"; done
		done
		rm -rf "$d"
	done
done
python3 "$here/combine.py" --device "$out" | tee "$out/device.md"
[ "$sim_only" = 1 ] || { tar -czf "$W/all.tgz" -C "$out" . && mv "$W/all.tgz" "$out/all.tgz"; }
