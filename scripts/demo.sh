#!/usr/bin/env bash
# The main job on the small bundled default: synthesize a small model, write
# its shards, and show it.  Output lands in out/demo/.
set -euo pipefail
bdir=${1:-build/release}
strata=$bdir/bin/strata
out=out/demo
mkdir -p "$out"
echo "== strata synth (small Qwen3-30B-A3B-shaped model) =="
"$strata" synth --preset qwen3-30b-a3b:layers=2,experts=16 --seed 1 --out "$out/model" --force
echo "== strata inspect (re-reading and checksumming every extent) =="
"$strata" inspect "$out/model" --verify
echo "== strata inspect --preset kimi-k3.1 (full-size card from the spec, tiered formats) =="
"$strata" inspect --preset kimi-k3.1
