#!/usr/bin/env bash
# `strata synth` write throughput against the disk's sequential write speed,
# both measured in this run on the same filesystem with the same byte count.
#
#   tests/bench/bench_synth.sh [BDIR] [PRESET] [DIR] [-- extra synth flags]
#     BDIR    build folder (default build/release)
#     PRESET  model (default qwen3-30b-a3b:layers=4, 4.8 GB of BF16 experts)
#     DIR     scratch folder on the filesystem to measure (default /tmp); removed after
#
# Ceiling: dd if=/dev/zero bs=4M oflag=direct conv=fsync of the same bytes.
# Also reported: synth into /dev/shm (memory), the CPU-side generation ceiling.
# Prints one CSV line per run plus the ratio synth / dd.
set -euo pipefail
bdir=${1:-build/release}
preset=${2:-qwen3-30b-a3b:layers=4}
base=${3:-/tmp}
shift $(( $# > 3 ? 3 : $# )) || true
[ "${1:-}" = -- ] && shift
extra=("$@")
strata=$bdir/bin/strata
[ -x "$strata" ] || { echo "bench_synth: build first (scons mode=release)" >&2; exit 2; }
work=$(mktemp -d "$base/strata-bench-synth-XXXXXX")
trap 'rm -rf "$work" /dev/shm/strata-bench-synth-$$' EXIT
export STRATA_PROGRESS=0

field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }

echo "what,bytes,seconds,mb_per_s"
json=$("$strata" synth --preset "$preset" --out "$work/model" --json "${extra[@]}")
bytes=$(echo "$json" | field bytes)
secs=$(echo "$json" | field seconds)
synth_mbps=$(echo "$json" | field mb_per_s)
echo "synth,$bytes,$secs,$synth_mbps"
rm -rf "$work/model"
sync

count=$(( (bytes + 4194303) / 4194304 ))
start=$(date +%s.%N)
dd if=/dev/zero of="$work/dd.bin" bs=4M count=$count oflag=direct conv=fsync status=none
end=$(date +%s.%N)
dd_secs=$(echo "$end - $start" | bc -l)
dd_bytes=$((count * 4194304))
dd_mbps=$(echo "$dd_bytes / $dd_secs / 1000000" | bc -l)
printf 'dd_direct,%d,%.4f,%.1f\n' "$dd_bytes" "$dd_secs" "$dd_mbps"
rm -f "$work/dd.bin"

shm_mbps=
avail=$(df --output=avail -B1 /dev/shm 2>/dev/null | tail -1 || echo 0)
if [ "${avail:-0}" -gt $((bytes * 2)) ]; then
	json=$("$strata" synth --preset "$preset" --out "/dev/shm/strata-bench-synth-$$" --json "${extra[@]}")
	shm_mbps=$(echo "$json" | field mb_per_s)
	echo "synth_to_memory,$(echo "$json" | field bytes),$(echo "$json" | field seconds),$shm_mbps"
	rm -rf "/dev/shm/strata-bench-synth-$$"
fi
printf 'ratio synth/dd: %.3f' "$(echo "$synth_mbps / $dd_mbps" | bc -l)"
[ -n "$shm_mbps" ] && printf '   (synth to memory / dd: %.3f)' "$(echo "$shm_mbps / $dd_mbps" | bc -l)"
printf '\n'
