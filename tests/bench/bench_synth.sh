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
# Also reported: synth's CPU seconds
# (user + sys) per GB, from which "cpu_ceiling" = the rate its threads could
# reach with every core to itself (the bench machine may be shared: the load
# average is printed).  Prints CSV lines plus the ratio synth / dd.
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
trap 'rm -rf "$work"' EXIT
export STRATA_PROGRESS=0

field() { sed -n "s/.*\"$1\":\([0-9.]*\).*/\1/p"; }

echo "# $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg), $(df --output=fstype "$base" | tail -1) at $base"
calc() { awk "BEGIN { printf \"%.6f\", $1 }"; }  # no bc on the GPU machine
echo "what,bytes,seconds,mb_per_s"
TIMEFORMAT='%U %S'
{ time "$strata" synth --preset "$preset" --out "$work/model" --json "${extra[@]}" >"$work/json"; } 2>"$work/time"
json=$(cat "$work/json")
bytes=$(echo "$json" | field bytes)
secs=$(echo "$json" | field seconds)
synth_mbps=$(echo "$json" | field mb_per_s)
echo "synth,$bytes,$secs,$synth_mbps"
cpu=$(tail -1 "$work/time" | awk '{print $1 + $2}')
threads=2
for ((i = 0; i < ${#extra[@]}; i++)); do [ "${extra[$i]}" = --threads ] && threads=${extra[$((i + 1))]}; done
printf 'cpu_ceiling,%s,%.4f,%.1f\n' "$bytes" "$cpu" "$(calc "$bytes / $cpu * $threads / 1000000")"
rm -rf "$work/model"
sync

count=$(( (bytes + 4194303) / 4194304 ))
start=$(date +%s.%N)
dd if=/dev/zero of="$work/dd.bin" bs=4M count=$count oflag=direct conv=fsync status=none
end=$(date +%s.%N)
dd_secs=$(calc "$end - $start")
dd_bytes=$((count * 4194304))
dd_mbps=$(calc "$dd_bytes / $dd_secs / 1000000")
printf 'dd_direct,%d,%.4f,%.1f\n' "$dd_bytes" "$dd_secs" "$dd_mbps"
rm -f "$work/dd.bin"

printf 'ratio synth/dd: %.3f   (cpu_ceiling / dd: %.3f)' "$(calc "$synth_mbps / $dd_mbps")" \
	"$(calc "$bytes / $cpu * $threads / 1000000 / $dd_mbps")"
printf '\n'
