#!/usr/bin/env bash
# Replay the hostile inputs and interruptions of issue 18 against the strata
# CLI and print the tally (tests/fuzz/README.md records it):
#   tried / clear error / crash / hang / silent wrong / lost
#
#   bash tests/fuzz/hostile.sh [build/release]
#
# A case is a command and what a user is owed: "fail" (exit 1 or 2 with a
# message naming the file or value), "ok" (exit 0), or "int" (an interrupted
# command: exit non-zero, no temp file left).  An optional check runs after
# it and must succeed (the old model still opens, the input file is
# unchanged, no worker is left running): when it fails, data was lost.
# Exit status 124 is a hang (60 s), >= 128 a crash.  Each case's output is in
# $OUT/NAME.log.  Takes about 10-20 s on two cores.
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
bdir=${1:-build/release}
case $bdir in /*) ;; *) bdir=$root/$bdir ;; esac
S=$bdir/bin/strata
[ -x "$S" ] || { echo "hostile.sh: no $S (build first)" >&2; exit 2; }
W=$(mktemp -d "${TMPDIR:-/tmp}/strata-hostile.XXXXXX")
OUT=${OUT:-$W/logs}
mkdir -p "$OUT"
trap 'rm -rf "$W"' EXIT
export STRATA_PROGRESS=0
cd "$W" || exit 2

tried=0 clear=0 crash=0 hang=0 silent=0 lost=0
bad=()
# hcase NAME EXPECT COMMAND [CHECK]
hcase() {
	local name=$1 expect=$2 cmd=$3 check=${4:-true} rc
	tried=$((tried + 1))
	timeout 60 bash -c "$cmd" >"$OUT/$name.log" 2>&1
	rc=$?
	local verdict
	if [ $rc = 124 ]; then
		verdict=hang
	elif [ $rc -ge 128 ] && [ "$expect" != int ]; then
		verdict=crash
	elif [ "$expect" = fail ] && [ $rc = 0 ]; then
		verdict=silent
	elif [ "$expect" = ok ] && [ $rc != 0 ]; then
		verdict=silent
	elif [ "$expect" = fail ] && ! [ -s "$OUT/$name.log" ]; then
		verdict=silent # failed without a word
	else
		verdict=clear
	fi
	if [ $verdict = clear ] && ! bash -c "$check" >>"$OUT/$name.log" 2>&1; then
		verdict=lost
	fi
	case $verdict in
	clear) clear=$((clear + 1)) ;;
	crash) crash=$((crash + 1)); bad+=("$name: crash (rc $rc)") ;;
	hang) hang=$((hang + 1)); bad+=("$name: hang") ;;
	silent) silent=$((silent + 1)); bad+=("$name: silent (rc $rc, expected $expect)") ;;
	lost) lost=$((lost + 1)); bad+=("$name: lost (check failed)") ;;
	esac
	printf '%-28s %-6s rc=%-3s %s\n' "$name" "$verdict" "$rc" "$(head -c 150 "$OUT/$name.log" | tr '\n' ' ')"
}

# ---- fixtures ----
$S synth --preset tiny --out m --format tiered --codes random >/dev/null
$S trace gen --layers 2 --experts 8 --top-k 2 --requests 1 --prompt 4 --gen 8 -o t.strace >/dev/null
$S trace gen --layers 2 --experts 8 --top-k 2 --requests 2 --prompt 8 --gen 200 -o tbig.strace >/dev/null
$S trace convert t.strace t.jsonl >/dev/null
$S quantize --make-test-model hf --spec custom:layers=2,experts=8,top_k=2,hidden=256,inter=128 >/dev/null
cp t.jsonl g.jsonl
md5() { md5sum "$1" | cut -d' ' -f1; }
R="--vram 1M --ram 1M --gpu 0 --compute ref -q"

# 1. corrupt experts (three experts' extents; hot ones preload into VRAM, the
#    rest are read on demand; each first read is checked by default)
for off in 1700000 2300000 2650000; do
	cp -r m "mc$off"
	printf '\132' | dd of="mc$off/shard-00000.strata" bs=1 seek=$off conv=notrunc 2>/dev/null
	hcase "corrupt-extent-$off" fail "$S replay --model mc$off --trace tbig.strace $R"
done
hcase corrupt-extent-noverify ok "$S replay --model mc1700000 --trace t.strace $R --no-verify --json nv.json" \
	"grep -q '\"verify\": \"off\"' nv.json"
# 2. sweep resume keyed on content
cat >sw.lua <<'EOF'
local d = strata.script_dir
strata.sweep{ configs = { { mode = 'sim', model = 'tiny', trace = d .. '/tr.strace', vram = '300K', ram = '600K',
  place = 'cache' } }, out = d .. '/sw.csv', jobs = 1 }
EOF
cp t.strace tr.strace
hcase sweep-first ok "$S run sw.lua"
cp tbig.strace tr.strace
hcase sweep-trace-changed ok "$S run sw.lua" "[ -s sw.csv.dropped.csv ] && grep -q ',ok,' sw.csv && \
	! grep -q \"\$(grep ',ok,' sw.csv.dropped.csv | cut -d, -f1)\" sw.csv"
# 3./4./5. writers: a second writer, --force, killed between renames
hcase synth-twice fail "$S synth --preset tiny --out m" "$S inspect m >/dev/null"
hcase quantize-over-model fail "$S quantize --in hf --out m" "$S inspect m >/dev/null"
hcase two-writers ok "($S synth --preset tiny --shard-size 1M --out cc --force & $S synth --preset tiny \
	--shard-size 1M --out cc --force & wait) ; true" "$S inspect cc >/dev/null"
if command -v strace >/dev/null && strace -e inject=rename:signal=SIGKILL:when=2 true 2>/dev/null; then
	cp -r m mk
	hcase synth-force-killed int "strace -f -o /dev/null -e inject=rename,renameat2:signal=SIGKILL:when=2 \
		$S synth --preset tiny --shard-size 1M --out mk --force" "$S inspect mk >/dev/null"
fi
# 6. Lua: a costly pattern in a hook; a sweep interrupted; runaway experiment script
cat >pat.lua <<'EOF'
return { on_insert = function() end, on_remove = function() end, victim = function() return nil end,
  on_access = function() local s = ('a'):rep(40); s:find(('a*'):rep(30) .. 'b') end }
EOF
hcase lua-pattern fail "$S sim --model m --trace t.strace --place cache --vram 300K --ram 600K --evict pat.lua -q"
echo 'while true do end' >spin.lua
hcase experiment-runaway fail "$S run --max-instructions 1000000 spin.lua"
# 7. a trace changed or cut while being read: the run uses what it validated
cp tbig.strace tlive.strace
hcase trace-cut-during-sim ok "$S sim --model m --trace tlive.strace --place cache --vram 300K --ram 600K -q & \
	sleep 0.05; truncate -s 300 tlive.strace; wait \$!"
# 8. plugins that crash: covered by test_policy (needs a C compiler); here a plugin that is not one
echo 'not an elf' >bad.so
hcase plugin-not-elf fail "$S sim --model m --trace t.strace --evict ./bad.so -q"
# 10. no silent clamping
hcase quantize-topk-0 fail "$S quantize --in hf --out q0 --top-k 0"
hcase quantize-topk-99 fail "$S quantize --in hf --out q0 --top-k 99"
hcase seed-overflow fail "$S synth --preset tiny --out x --seed 99999999999999999999999"
printf '{"layers":[[1,2],[3,0]],"weights":[[0.5,-1],[0.5,0.5]]}\n' >wneg.jsonl
printf '{"layers":[[1,2],[3,0]],"weights":[[0.5,1e6],[0.5,0.5]]}\n' >wbig.jsonl
hcase weight-negative fail "$S trace stats wneg.jsonl"
hcase weight-huge fail "$S trace stats wbig.jsonl"
hcase convert-roundtrip ok "$S trace convert t.strace rt.jsonl && $S trace convert rt.jsonl rt.strace && \
	$S trace convert rt.strace rt2.jsonl && cmp rt.jsonl rt2.jsonl"
# 11. trace gen: space first, temporaries on every signal
hcase gen-no-space fail "$S trace gen --gen 4000000000 --requests 1000 -o big.strace" "! ls big.strace*"
for sig in INT TERM HUP; do
	hcase "gen-sig$sig" int "$S trace gen --gen 99999999 -o s$sig.strace & sleep 0.5; kill -$sig \$!; wait \$!" \
		"! ls s$sig.strace* 2>/dev/null"
done
# 12. an output that is an input
h=$(md5 g.jsonl)
hcase import-over-input fail "$S trace import -o g.jsonl g.jsonl" "[ \$(md5sum g.jsonl | cut -d' ' -f1) = $h ]"
hcase convert-over-input fail "$S trace convert t.strace t.strace" "$S trace stats t.strace >/dev/null"
# 13. smaller ones
mkdir mfifo && mkfifo mfifo/shard-00000.strata && mkfifo tfifo.strace
hcase fifo-shard fail "$S inspect mfifo"
hcase fifo-trace fail "$S trace stats tfifo.strace"
printf '\100\0\0\0\0\0\0\0{"a":1}' >hlen.safetensors
hcase safetensors-hlen fail "$S quantize --in hlen.safetensors --out q1"
# bad files at rest
cp -r m mcut && truncate -s 100000 mcut/shard-00000.strata
hcase shard-truncated fail "$S inspect mcut"
cp t.strace tcut.strace && truncate -s -7 tcut.strace
hcase trace-truncated fail "$S trace stats tcut.strace"
head -c 3000 /dev/urandom >noise.strace
hcase trace-noise fail "$S trace stats noise.strace"
hcase import-noise fail "$S trace import -o n.strace noise.strace"

echo
echo "hostile: tried $tried, clear error $clear, crash $crash, hang $hang, silent wrong $silent, lost $lost"
for b in "${bad[@]}"; do echo "  $b"; done
[ $crash = 0 ] && [ $hang = 0 ] && [ $silent = 0 ] && [ $lost = 0 ]
