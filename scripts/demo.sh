#!/usr/bin/env bash
# The main job on the small bundled default: synthesize a small model whose
# tiers follow the bundled trace's popularity (random valid codes: a
# throughput model; `strata quantize` and bench_quant show quality), write its shards, show its
# model card, then replay the trace on the real engine (io_uring + O_DIRECT
# reads, CPU reference expert computation, or the GPU kernels when a GPU is
# there) with two policies, and simulate the same runs.  Output: out/demo/.
set -euo pipefail
bdir=${1:-build/release}
strata=$bdir/bin/strata
out=out/demo
trace=tests/data/demo_qwen3_2x16.strace
mkdir -p "$out"
echo "== strata synth (Qwen3-30B-A3B expert shape, 2 MoE layers x 16 experts, 15/30/55 tiers) =="
"$strata" synth --preset qwen3-30b-a3b:layers=2,experts=16 --seed 1 --format tiered --codes random \
	--popularity "$trace" --out "$out/model" --force
echo "== strata inspect (re-reading and checksumming every extent) =="
"$strata" inspect "$out/model" --verify
echo "== strata trace stats =="
"$strata" trace stats "$trace" | head -20
rm -f "$out/replay.csv" "$out/sim.csv"
for policy in "--place static --prefetch lookahead:depth=1" "--place cache --evict farthest --prefetch none"; do
	echo "== strata replay $policy =="
	# shellcheck disable=SC2086
	"$strata" replay --model "$out/model" --trace "$trace" --vram 24M --ram 24M $policy \
		--csv "$out/replay.csv" --append
	# shellcheck disable=SC2086
	"$strata" sim -q --model "$out/model" --trace "$trace" --vram 24M --ram 24M $policy \
		--csv "$out/sim.csv" --append
done
echo "== results: $out/replay.csv (real), $out/sim.csv (virtual clock, default cost model) =="
echo "== strata inspect --preset kimi-k3.1 (full-size card from the spec, tiered formats) =="
"$strata" inspect --preset kimi-k3.1
