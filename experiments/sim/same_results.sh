#!/bin/bash
# experiments/sim/same_results.sh NEW_STRATA BASE_STRATA
# Same `strata sim` results (every counter and virtual time; wall-clock fields dropped)
# from two builds, over 24 configurations: a check that a speed change changed no decision.
N=$1; B=$2
for x in "$N" "$B"; do [ -x "$x" ] || { echo "same_results.sh: $x is not an executable strata" >&2; exit 2; }; done
# a folder of this run's own: two runs at once do not share traces or results
D=$(mktemp -d "${TMPDIR:-/tmp}/strata-same-results.XXXXXX") || exit 2
trap 'rm -rf "$D"' EXIT
$B trace gen --model qwen3-30b-a3b --requests 4 --prompt 32 --gen 128 --interleave --pred-depth 2 --alpha 0.8 -o $D/q.strace >/dev/null
$B trace gen --model qwen3-30b-a3b:layers=4,experts=32,top_k=4 --requests 2 --prompt 16 --gen 200 --pred-depth 2 -o $D/s.strace >/dev/null
fail=0
run() { # model trace args...
  m=$1; t=$2; shift 2
  $N sim -q --model $m --trace $t "$@" --json $D/n.json >/dev/null
  $B sim -q --model $m --trace $t "$@" --json $D/b.json >/dev/null
  f='del(.. | .wall_s?, .loop_s?, .accesses_per_s?, .loop_accesses_per_s?, .bookkeeping_ms?, .open_ms?, .open_s?)'
  if diff <(jq -S "$f" $D/n.json) <(jq -S "$f" $D/b.json) >$D/diff.txt; then echo "same: $m $*"; else echo "DIFF: $m $*"; head -20 $D/diff.txt; fail=1; fi
}
for ev in lru lfu farthest lfu-decay random; do
  for pf in none lookahead history oracle; do
    run qwen3-30b-a3b $D/q.strace --place cache --vram 1400M --ram 2800M --evict $ev --prefetch $pf
  done
done
run qwen3-30b-a3b $D/q.strace --place static --vram 1G --ram 3G --evict lru --prefetch lookahead
run qwen3-30b-a3b $D/q.strace --place static:promote=all --vram 1G --ram 2G --evict lfu --prefetch lookahead:depth=2
run qwen3-30b-a3b:layers=4,experts=32,top_k=4 $D/s.strace --place cache --vram 40M --ram 60M --evict lru --prefetch lookahead
run qwen3-30b-a3b:layers=4,experts=32,top_k=4 $D/s.strace --place cache --vram 40M --ram 0 --evict farthest --prefetch oracle
# precision on miss (when both builds have it): substitutions decided the same
if $B sim --help 2>&1 | grep -q -- --on-miss; then
  run qwen3-30b-a3b:layers=4,experts=32,top_k=4 $D/s.strace --place cache --vram 40M --ram 0 --evict lru --on-miss lowbit:gate=0.3
  run qwen3-30b-a3b:layers=4,experts=32,top_k=4 $D/s.strace --place static --vram 40M --ram 60M --on-miss lowbit:gate=0.5,from=ram
fi
exit $fail
