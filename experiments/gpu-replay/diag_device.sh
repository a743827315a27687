#!/usr/bin/env bash
# Timeline diagnosis of the reference row of issue 16's goal (2) on the GPU
# machine: the Kimi model of run_device.sh (KIMI, KTOKENS), calibrate, one
# warm-up replay, then the reference row (place=future, evict=farthest:backed=1,
# prefetch=oracle:depth=1:stage=112) in strata sim and in strata replay with
# --move-log, and replay variants (DIAG_VARIANTS, ';'-separated extra options,
# e.g. "--no-verify;--prefetch-inflight 128M,32M").  Logs, CSVs and the move
# logs (gzipped) in $OUT; movelog.py's comparison printed last.
#   OUT=/tmp/diag KIMI=kimi-k3.1:layers=4,experts=224 KTOKENS=32 bash experiments/gpu-replay/diag_device.sh
set -u
out=${OUT:-out/gpu-diag}
mkdir -p "$out"
B=${B:-build/release}
S=$B/bin/strata
PY=${STRATA_PYTHON:-$(command -v /usr/bin/python3 || command -v python3)}
W=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/strata-diag.XXXXXX")}
mkdir -p "$W"
trap 'rm -rf "$W"' EXIT
KIMI=${KIMI:-kimi-k3.1:layers=4,experts=224}
K=$W/kimi
mkdir -p "$K"
echo "== model $KIMI ($(date +%T))"
$S trace gen -o "$K/trace.strace" --model "$KIMI" --requests 2 --prompt 0 --gen ${KTOKENS:-32} \
	--alpha 1.0 --pred-depth 2 --pred-accuracy 0.85 --seed 7 >"$W/gen.log" 2>&1 || { cat "$W/gen.log"; exit 1; }
$S synth --preset "$KIMI" --out "$K/model" --format tiered --codes random --popularity "$K/trace.strace" \
	--threads ${THREADS:-16} --force --json >"$W/synth.json" 2>"$W/synth.log" || { tail "$W/synth.log"; exit 1; }
$S inspect "$K/model" --json >"$W/inspect.json"
if [ -n "${COST:-}" ]; then cp "$COST" "$out/cost.json"; else
	$S calibrate --model "$K/model" --bytes ${CAL_BYTES:-4G} -o "$out/cost.json" >"$out/calibrate.log" 2>&1
	echo "calibrate exit $?"; head -3 "$out/calibrate.log"; fi
# the disk at shallower queues (whole extents, as the prefetch budget keeps them): DIAG_QD="4 8"
for qd in ${DIAG_QD-}; do
	$S calibrate --model "$K/model" --bytes ${CAL_BYTES:-4G} --queue-depth $qd --compute none -o "$W/cost_qd$qd.json" \
		>"$W/cal_qd$qd.log" 2>&1
	echo "calibrate --queue-depth $qd exit $?: $(head -1 "$W/cal_qd$qd.log")" | tee -a "$out/calibrate.log"
done
read -r HOT WARM < <($PY -c "import json;t=json.load(open('$W/inspect.json'))['tiers'];print(t[0]['extent_bytes'],t[1]['extent_bytes'])")
VR=$((HOT + ${EXTRA_MB:-512}*1024*1024)); RM=$((WARM + ${EXTRA_MB:-512}*1024*1024))
C=${COMPUTE:-gpu}
POL="--place future --evict farthest:backed=1 --prefetch oracle:depth=1:stage=${STAGE:-112}"
run() { # name, replay|sim, extra options
	local n=$1 m=$2; shift 2
	local x=""; [ "$m" = replay ] && x="--compute $C"
	# shellcheck disable=SC2086
	timeout 150 $S $m -q --model "$K/model" --trace "$K/trace.strace" --vram $VR --ram $RM $POL $x \
		--cost "$out/cost.json" --csv "$out/rows.csv" --append --move-log "$W/$n.csv" "$@" 2>>"$out/err.log"
	echo "$n exit $?"
}
timeout 150 $S replay -q --model "$K/model" --trace "$K/trace.strace" --vram $VR --ram $RM --place static \
	--evict lru --prefetch none --compute $C --csv "$out/warmup.csv" 2>>"$out/err.log"
echo "warm-up exit $?"
run sim sim
run replay replay
IFS=';' read -r -a VARS <<<"${DIAG_VARIANTS-}"
i=0
for v in "${VARS[@]}"; do
	i=$((i + 1))
	# shellcheck disable=SC2086
	run "variant$i" replay $v
done
$PY experiments/gpu-replay/movelog.py --csv "$out/rows.csv" "$W/sim.csv" "$W/replay.csv" "$W"/variant*.csv \
	>"$out/movelog.txt" 2>&1
echo "movelog exit $?"
tar -czf "$out/movelogs.tgz" -C "$W" $(cd "$W" && ls sim.csv replay.csv variant*.csv 2>/dev/null)
cat "$out/movelog.txt"
