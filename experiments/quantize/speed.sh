#!/usr/bin/env bash
# strata quantize speed on a checkpoint of the mid model's shape (issue 15: >= 50 MB/s of BF16
# input on the GPU machine's 16 cores), from the repo root after a release build:
#
#   bash experiments/quantize/speed.sh [OUT]        (default OUT: out/quantize-speed)
#
# 1. a BF16 test model with the trained mid checkpoint's routed shape (8 MoE layers x 64 experts,
#    hidden 512, inter 256, qwen3-moe names; weights N(0, 0.02) with outliers: the encoder's speed
#    hardly depends on the values), kept in WORK for the next run, unless MODEL=DIR names a
#    checkpoint (COUNTS=counts.csv then tiers it by popularity; else 15/30/55 in expert id order);
# 2. bench_quantize_pipeline 1 N 512 256 1,N/2,N (the encoder alone, the pipeline, and the
#    encoder on N threads at once: how the CPU itself scales), bench.txt (BENCH=0 skips it);
# 3. strata quantize --json at THREADS (default: half and all CPUs), REPS times each (default 3):
#    seconds, MB/s of input, the run's own busy share and where the threads' time went
#    (speed.csv; each run's JSON in json.tgz); BEFORE=path/to/another/strata adds its runs at the
#    largest of THREADS (an older build, same model) for a before/after;
# 4. the same codes at every thread count (and from BEFORE): the dequantized models compared
#    byte for byte (identical.txt); summary.txt is the table printed last.
# A full run on 16 cores takes ~90 s; on 2 cores about 10 minutes (THREADS=2 REPS=1: ~4 min).
set -u
B=${B:-build/release}
S=$B/bin/strata
out=${1:-out/quantize-speed}
mkdir -p "$out"
W=${WORK:-${TMPDIR:-/tmp}/strata-qspeed}
mkdir -p "$W"
N=$(nproc)
THREADS=${THREADS:-"$((N / 2 > 0 ? N / 2 : 1)) $N"}
REPS=${REPS:-3}
PY=$(scripts/find-python.sh json) || exit 3
if [ -z "${MODEL:-}" ]; then
	MODEL=$W/model
	if [ ! -f "$MODEL/model.safetensors" ]; then
		$S quantize --make-test-model "$MODEL" --naming qwen3-moe \
			--spec custom:layers=8,experts=64,top_k=6,hidden=512,inter=256,nonrouted=6825472 || exit 1
	fi
fi
mkdir -p "$W/json"
TIER=()
[ -n "${COUNTS:-}" ] && TIER=(--split 15,30,55 --counts "$COUNTS")
{ lscpu; nproc; } >"$out/lscpu.txt" 2>&1
echo "binary,threads,rep,seconds,input_mb_per_s,busy_share,encode,read,write,tensors,wait,tail,open,finish" >"$out/speed.csv"
run() { # binary label threads rep
	local j=$W/json/qspeed_$2_t$3_r$4.json
	timeout 300 "$1" quantize --in "$MODEL" --naming auto --out "$W/q-$2-$3" "${TIER[@]}" --threads "$3" \
		--json --no-progress --force >"$j" 2>"$W/qspeed.err" || { echo "$2 --threads $3 failed"; cat "$W/qspeed.err"; return 1; }
	$PY - "$j" "$2" "$3" "$4" >>"$out/speed.csv" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
t = d.get("time", {})
n = d.get("threads") or int(sys.argv[3])
share = lambda k: "%.4f" % (t[k] / (n * d["seconds"])) if k in t else ""
print(",".join([sys.argv[2], sys.argv[3], sys.argv[4], "%.3f" % d["seconds"], "%.2f" % (d["input_bytes"] / d["seconds"] / 1e6),
                "%.4f" % d["busy_share"] if "busy_share" in d else ""] + [share(k) for k in ("encode", "read", "write", "tensors", "wait", "tail")] +
               ["%.4f" % t["open"] if "open" in t else "", "%.4f" % t["finish"] if "finish" in t else ""]))
EOF
}
if [ "${BENCH:-1}" != 0 ]; then
	timeout 120 "$B/bench/bench_quantize_pipeline" 1 "$N" 512 256 "1,$((N / 2 > 0 ? N / 2 : 1)),$N" >"$out/bench.txt" 2>&1
	cat "$out/bench.txt"
	echo
fi
TOP=0
for t in $THREADS; do [ "$t" -gt "$TOP" ] && TOP=$t; done
for r in $(seq 1 "$REPS"); do
	for t in $THREADS; do
		run "$S" now "$t" "$r" || exit 1
		if [ -n "${BEFORE:-}" ] && [ "$t" = "$TOP" ]; then run "$BEFORE" before "$t" "$r" || exit 1; fi
	done
done
# the same codes at every thread count (the shard headers differ only in their id and time)
first=
same=1
for t in $THREADS; do
	$S dequantize --model "$W/q-now-$t" --out "$W/q-now-$t.st" --no-progress >/dev/null || exit 1
	if [ -z "$first" ]; then first=$W/q-now-$t.st; elif ! cmp -s "$first" "$W/q-now-$t.st"; then same=0; fi
done
if [ -n "${BEFORE:-}" ]; then
	$S dequantize --model "$W/q-before-$TOP" --out "$W/q-before.st" --no-progress >/dev/null &&
		cmp -s "$first" "$W/q-before.st" || same=0
fi
echo "dequantized weights identical across thread counts${BEFORE:+ and the BEFORE binary}: $([ $same = 1 ] && echo yes || echo NO)" | tee "$out/identical.txt"
rm -rf "$W"/q-*
tar czf "$out/json.tgz" -C "$W" json && rm -rf "$W/json"
$PY - "$out/speed.csv" <<'EOF' | tee "$out/summary.txt"
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("%-7s %7s %28s %22s %s" % ("binary", "threads", "MB/s of input (each rep)", "busy share (each rep)", "threads' time: encode/read/write/tensors/wait/tail (last rep)"))
for b in dict.fromkeys(r["binary"] for r in rows):
    for t in dict.fromkeys(r["threads"] for r in rows if r["binary"] == b):
        rs = [r for r in rows if r["binary"] == b and r["threads"] == t]
        last = rs[-1]
        print("%-7s %7s %28s %22s %s" % (b, t, " ".join(r["input_mb_per_s"] for r in rs), " ".join(r["busy_share"] or "-" for r in rs),
              "/".join(last[k] or "-" for k in ("encode", "read", "write", "tensors", "wait", "tail"))))
EOF
