#!/usr/bin/env bash
# Study 2 on the GPU machine: the same sweep replayed on the real engine
# (NVMe -> pinned RAM -> VRAM movers, CUDA kernels) on a synthetic scaled
# Qwen3-30B-A3B written as packed tiered shards, next to strata sim with a
# cost model calibrated on that machine.  Its tier table is the one a
# spec-only sim draws (strata synth --seed 1 = the run seed), so the rows
# compare like for like.  On a machine with a GPU (about 3-4 min on an H200),
# from a clone:
#   scons -Q -j16 mode=release && bash experiments/lookahead/gpu.sh
# Writes $OUT/lookahead-gpu/ (default out/lookahead-gpu: CSV rows of both modes,
# the cost model, a table).  The shards go to $WORK/strata-qwen-8x64 (kept and
# reused) or, without WORK, to a folder of this run's own (removed at the end).
set -eu
out=${OUT:-out}/lookahead-gpu
mkdir -p "$out"
S=build/release/bin/strata
if [ -n "${WORK:-}" ]; then
	model=$WORK/strata-qwen-8x64
else
	work=$(mktemp -d "${TMPDIR:-/tmp}/strata-lookahead-gpu.XXXXXX")
	trap 'rm -rf "$work"' EXIT
	model=$work/strata-qwen-8x64
fi
spec=qwen3-30b-a3b:layers=8,experts=64
[ -d $model ] || $S synth --preset $spec --format tiered --codes random \
	--seed 1 --out $model --threads 8
$S calibrate --model $model -o "$out/cost.json"
# sim with the measured cost model, then replay with the GPU kernels
$S run experiments/lookahead/run.lua out="$out" name=sim model=$model spec=$spec cost="$out/cost.json" > "$out/sim.md"
$S run -j 1 experiments/lookahead/run.lua out="$out" name=replay model=$model spec=$spec mode=replay compute=gpu gpu=1 \
	> "$out/replay.md"
cat "$out/sim.md" "$out/replay.md"
