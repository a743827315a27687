#!/usr/bin/env bash
# One GPU-machine call for the trained-model study (experiments/real-model/README.md).
# From the repo root on the device machine (the .device packages carried, see
# shared/device/README.md):
#   source .device/setup.sh && bash experiments/real-model/run_device.sh
# Results land in $OUT (or out/real-model): at most 8 files (the plots, summary.json,
# results.csv, train.json, trace-decode.strace, run.log), everything also in all.tgz.
# Parameters (environment): TRAIN_S (training seconds, default 170), AUX (load-balancing loss
# coefficient, default 0.01), SEEDS (random rankings, default 3), RANK_BY (count or mass),
# PRESET, SEQ, WINDOWS, PROFILE_WINDOWS, COMPUTE, STEPS.
# Steps (STEPS="build train eval qspeed hf record replay runner" picks some; each step goes on
# when an earlier one failed where it can):
#  build   scons (release, CUDA), in the background while the model trains
#  train   python3 -m strata.train on the machine's standard library and site-packages
#          (preset mid, TRAIN_S seconds of training)
#  eval    python3 -m strata.eval: popularity from training text, strata quantize (all hot,
#          all warm, all cold, 15/30/55 by popularity), strata dequantize, quality of every
#          configuration and of random 15/30/55 (3 seeds) on 3 held-out shards; the
#          popularity shards also through the runner's Strata backend
#  qspeed  strata quantize speed: the CPU (lscpu), the encoder alone and the whole pipeline at
#          1..all threads on mid-shaped experts (bench_quantize_pipeline), and strata quantize
#          of the trained checkpoint (15/30/55 by popularity) at half and (QREPS times, default
#          2) all CPUs, with each run's busy share
#  hf      transformers (Qwen3MoeForCausalLM) against the runner on the checkpoint
#  record  routing traces of held-out prompts (prefill + greedy decode) with lookahead
#          predictions at depths 1-3, predictor accuracy
#  replay  strata calibrate, then strata replay / strata sim of the recorded decode tokens on
#          the tiered shards under budgets that force all three tiers and with every expert in
#          VRAM, GPU kernels; the link bound (experiments/gpu-replay/summarize.py); TTFT from
#          the full trace
#  runner  decode tok/s and TTFT of the runner, Strata backend (same budgets and policies) and
#          its BF16 backend
set -u
out=${OUT:-out/real-model}
mkdir -p "$out"
W=${WORK:-${TMPDIR:-/tmp}/strata-real}
R=$W/res
want() { case " ${STEPS:-build train eval qspeed hf record replay runner} " in *" $1 "*) return 0;; esac; return 1; }
# a run that trains starts afresh; one that does not (STEPS without train) reuses $W's checkpoint
# kept between runs on purpose, so two runs at once must not share it
mkdir -p "$(dirname "$W")"
exec 9>"$W.lock"
flock -n 9 || { echo "run_device.sh: another run is using $W (set WORK to another folder)" >&2; exit 2; }
if want train; then rm -rf "$W"; fi
mkdir -p "$R"
B=build/release
S=$B/bin/strata
PY=${STRATA_PYTHON:-python3}
export PYTHONPATH=$PWD/python${PYTHONPATH:+:$PYTHONPATH}
export PYTHONUNBUFFERED=1 STRATA_PROGRESS=0 STRATA_LIB=$PWD/$B/lib/libstrata.so
T0=$(date +%s)
exec > >(tee "$out/run.log") 2>&1
# a dry run on a machine without a GPU: PRESET=tiny TRAIN_S=20 SEQ=128 WINDOWS=2 COMPUTE=ref ...
SEQ=${SEQ:-512}
COMPUTE=${COMPUTE:-gpu}
step() { echo; echo "== $* ($(date +%T), +$(( $(date +%s) - T0 ))s)"; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$R/gpu.txt" 2>&1
nproc >>"$R/gpu.txt"

if want build; then
	step "build (background)"
	# -k: a test that fails to compile (another compiler's warning) does not stop the binaries
	( scons -Q -k -j"${BUILD_JOBS:-12}" mode=release >"$R/build.log" 2>&1; echo $? >"$W/build.rc" ) &
	BPID=$!
fi

CK=$W/ckpt
if want train; then
	# the standard library and every existing site-packages directory of this Python
	mapfile -t CORPUS < <($PY -c '
import os, site, sysconfig
ds = [sysconfig.get_paths()["stdlib"]] + list(site.getsitepackages())
seen = []
for d in ds:
    d = os.path.realpath(d)
    if os.path.isdir(d) and not any(d == s or d.startswith(s + "/") for s in seen):
        seen.append(d)
for d in seen:
    print("--corpus"); print(d)')
	step "train on ${CORPUS[*]}"
	$PY -m strata.train "${CORPUS[@]}" --out "$CK" --preset "${PRESET:-mid}" \
		--time-budget "${TRAIN_S:-170}" --aux "${AUX:-0.01}" --batch "${BATCH:-64}" --seq "$SEQ" --max-bytes "${MAX_BYTES:-200000000}" \
		--log-every 20 --json "$R/train.json" 2>&1 | tee "$R/train.log" | grep -v '^step' ; \
		grep '^step' "$R/train.log" | tail -3
	cp "$CK/config.json" "$CK/train_log.csv" "$R/" 2>/dev/null
fi

if want build; then
	wait "$BPID"
	echo "build exit $(cat "$W/build.rc") (+$(( $(date +%s) - T0 ))s)"
	if [ "$(cat "$W/build.rc")" != 0 ]; then
		tail -30 "$R/build.log"
		echo "CUDA build failed: building without CUDA, expert computation on the CPU reference"
		scons -Q -k -j16 mode=release cuda=0 >"$R/build_nocuda.log" 2>&1 || tail -20 "$R/build_nocuda.log"
		COMPUTE=ref
	fi
fi

EV=$W/eval
if want eval; then
	step eval
	timeout "${EVAL_TIMEOUT:-200}" $PY -m strata.eval --model "$CK" --strata "$S" --out "$EV" --seq "$SEQ" \
		--windows "${WINDOWS:-24}" --batch 8 --profile-windows "${PROFILE_WINDOWS:-256}" --engine-windows 4 \
		--random-seeds "${SEEDS:-3}" --rank-by "${RANK_BY:-count}" \
		--title "trained byte-level MoE (8 x 64 experts, top-6, aux ${AUX:-0.01}), H200" 2>&1 | tee "$R/eval.log"
	cp "$EV"/results.csv "$EV"/summary.csv "$EV"/summary.json "$EV"/goals.json "$EV"/counts.csv "$EV"/mass.csv "$EV"/experts.csv \
		"$EV"/quality.pdf "$EV"/quality.png "$R/" 2>/dev/null
	# back in $OUT at once: they return even if a later step runs past the call's limit
	cp "$R"/quality.png "$R"/quality.pdf "$R"/summary.json "$R"/results.csv "$R"/train.json "$out/" 2>/dev/null
fi

if want qspeed; then
	step "quantize speed"
	{ lscpu; nproc; } >"$R/lscpu.txt" 2>&1
	grep -E '^(Model name|CPU\(s\)|Thread|Core|Socket|L2|L3)' "$R/lscpu.txt"
	grep -o 'avx512f' "$R/lscpu.txt" | head -1
	N=$(nproc)
	# mid-shaped experts (hidden 512, inter 256), 1 layer x N experts: the encoder alone (one
	# thread, matrices in memory), the whole pipeline at 1, N/2 and N threads, and the encoder on
	# 1, N/2 and N threads at once (how the CPU itself scales)
	timeout 60 $B/bench/bench_quantize_pipeline 1 $N 512 256 "1,$((N / 2)),$N" 2>&1 | tee "$R/qspeed_bench.txt"
	if [ -f "$EV/counts.csv" ]; then
		# N threads QREPS times (default 2: is it reliably above the goal?), N/2 once
		for tr in $((N / 2)):1 $(seq -f "$N:%g" 1 "${QREPS:-2}"); do
			t=${tr%:*} r=${tr#*:}
			j=$R/qspeed_t$t.json
			[ "$r" -gt 1 ] && j=$R/qspeed_t${t}_r$r.json
			timeout 60 $S quantize --in "$CK" --naming auto --out "$W/qs-$t" --split 15,30,55 --counts "$EV/counts.csv" \
				--threads $t --json --no-progress --force >"$j" 2>>"$R/qspeed.err"
			$PY -c "import json; d=json.load(open('$j')); print('strata quantize --threads $t (run $r): %.2f s, %.1f MB/s of BF16 input, cores busy %.3f' % (d['seconds'], d['input_bytes'] / d['seconds'] / 1e6, d.get('busy_share', float('nan'))))" 2>&1 | tee -a "$R/qspeed.txt"
			# the same codes at every thread count (the shard headers differ only in their id and time)
			$S dequantize --model "$W/qs-$t" --out "$W/qs-$t.st" --no-progress >/dev/null 2>>"$R/qspeed.err" &&
				cmp -s "$W/qs-$t.st" "$EV/q-popularity.safetensors" &&
				echo "  the same weights as the evaluation's shards (dequantized, bit for bit)" | tee -a "$R/qspeed.txt"
			rm -rf "$W/qs-$t" "$W/qs-$t.st"
		done
	fi
fi

if want hf; then
	step "transformers vs the runner"
	timeout 120 $PY experiments/real-model/check_hf.py "$CK" "$EV/heldout-sample.txt" --json "$R/hf_check.json" 2>&1 |
		tail -3
fi

if want record; then
	step "record traces"
	timeout 120 $PY -m strata.record --model "$CK" --text "$EV/heldout-sample.txt" --prompts "${PROMPTS:-8}" --prompt-bytes "${PROMPT_BYTES:-256}" \
		--max-new-tokens "${NEW_TOKENS:-64}" --pred-depth 3 --strata "$S" -o "$R/trace.strace" --json "$R/record.json" 2>&1 | tail -4
	$S trace stats "$R/trace.strace" >"$R/trace_stats.txt" 2>&1
	cp "$R/trace-decode.strace" "$out/" 2>/dev/null  # back even if a later step runs past the limit
	rm -f "$R/trace.jsonl" "$R/trace-decode.jsonl"
fi

Q=$EV/q-popularity
if want replay; then
	step "replay on the tiered shards"
	$S inspect "$Q" --json >"$R/real_inspect.json"
	cp "$R/real_inspect.json" "$R/realvram_inspect.json"
	timeout 90 $S calibrate --model "$Q" --bytes 1G -o "$R/cost_real.json" >"$R/calibrate.log" 2>&1
	echo "calibrate exit $?"
	cp "$R/cost_real.json" "$R/cost_realvram.json"
	read -r HOT WARM COLD < <($PY -c "import json;t=json.load(open('$R/real_inspect.json'))['tiers'];print(*[x['extent_bytes'] for x in t])")
	M=$((16 << 20))
	echo "tiers: hot $HOT warm $WARM cold $COLD bytes; budgets vram $((HOT + M)) ram $((WARM + M)) (+16 MiB each)"
	POL=(
		"--place static --evict lru --prefetch lookahead:depth=2"
		"--place static --evict lru --prefetch none"
		"--place cache --evict lru --prefetch none"
		"--place cache --evict lfu --prefetch none"
		"--place cache --evict farthest --prefetch oracle"
	)
	for p in "${POL[@]}"; do
		# shellcheck disable=SC2086
		timeout 60 $S replay -q --model "$Q" --trace "$R/trace-decode.strace" --vram $((HOT + M)) --ram $((WARM + M)) \
			$p --compute "$COMPUTE" --csv "$R/real_replay.csv" --append 2>>"$R/replay.err"
		echo "replay tiers [$p] exit $?"
		# shellcheck disable=SC2086
		$S sim -q --model "$Q" --trace "$R/trace-decode.strace" --vram $((HOT + M)) --ram $((WARM + M)) $p \
			--cost "$R/cost_real.json" --csv "$R/real_sim.csv" --append 2>>"$R/replay.err"
		# shellcheck disable=SC2086
		timeout 60 $S replay -q --model "$Q" --trace "$R/trace.strace" --vram $((HOT + M)) --ram $((WARM + M)) \
			$p --compute "$COMPUTE" --csv "$R/real_full.csv" --append 2>>"$R/replay.err"
	done
	# every expert fits the VRAM budget: static tiers preloaded, everything fetched from below
	# stays in VRAM (promote=all), or an LRU cache of all of them
	VPOL=(
		"--place static:promote=all --evict lru --prefetch none"
		"--place static:promote=all --evict lru --prefetch lookahead:depth=2"
		"--place cache --evict lru --prefetch none"
	)
	for p in "${VPOL[@]}"; do
		# shellcheck disable=SC2086
		timeout 60 $S replay -q --model "$Q" --trace "$R/trace-decode.strace" --vram $((HOT + WARM + COLD + M)) \
			--ram $M $p --compute "$COMPUTE" --csv "$R/realvram_replay.csv" --append 2>>"$R/replay.err"
		echo "replay all-vram [$p] exit $?"
		# shellcheck disable=SC2086
		$S sim -q --model "$Q" --trace "$R/trace-decode.strace" --vram $((HOT + WARM + COLD + M)) --ram $M $p \
			--cost "$R/cost_real.json" --csv "$R/realvram_sim.csv" --append 2>>"$R/replay.err"
		# shellcheck disable=SC2086
		timeout 60 $S replay -q --model "$Q" --trace "$R/trace.strace" --vram $((HOT + WARM + COLD + M)) \
			--ram $M $p --compute "$COMPUTE" --csv "$R/realvram_full.csv" --append 2>>"$R/replay.err"
	done
	tail -5 "$R/replay.err"
	echo "-- tiers forced (decode tokens only):"
	$PY experiments/gpu-replay/summarize.py "$R" real
	echo "-- all experts in VRAM:"
	$PY experiments/gpu-replay/summarize.py "$R" realvram
	echo "-- TTFT (ms) and decode tok/s, full trace (prefill + decode):"
	$PY -c "
import csv
for f in ('$R/real_full.csv', '$R/realvram_full.csv'):
    for r in csv.DictReader(open(f)):
        print('%-60s vram %10s  ttft_ms %9s  decode_tok_s %9s' % (r['config'], r['vram_bytes'], r['ttft_ms'], r['decode_tok_s']))
" 2>&1
fi

if want runner; then
	step "runner end to end"
	timeout "${RUNNER_TIMEOUT:-120}" $PY experiments/real-model/e2e_runner.py --model "$CK" --shards "$Q" \
		--text "$EV/heldout-sample.txt" --prompts 3 --prompt-bytes "${PROMPT_BYTES:-256}" --max-new-tokens "${NEW_TOKENS:-64}" --strata "$S" \
		--csv "$R/runner.csv" >"$R/runner.log" 2>&1
	echo "exit $?"; tail -3 "$R/runner.log"
	$PY -c "
import csv, collections
d = collections.OrderedDict()
for r in csv.DictReader(open('$R/runner.csv')):
    d.setdefault((r['config'], r['budget']), []).append(r)
for (c, b), rs in d.items():
    tt = sorted(float(r['ttft_ms']) for r in rs); ds = sorted(float(r['decode_tok_s']) for r in rs)
    print('%-58s %-8s ttft_ms %8.2f  decode_tok_s %8.2f  (median of %d prompts)' % (c, b, tt[len(tt)//2], ds[len(ds)//2], len(rs)))
" 2>&1 | tee "$R/runner_summary.txt"
fi

step summary
[ -f "$R/summary.json" ] && $PY experiments/real-model/tables.py "$R" 2>&1 | tail -25
cat "$R/qspeed.txt" 2>/dev/null
step pack
cp "$R"/quality.png "$R"/quality.pdf "$R"/summary.json "$R"/results.csv "$R"/train.json "$out/" 2>/dev/null
tar -czf "$W/all.tgz" -C "$R" . && mv "$W/all.tgz" "$out/all.tgz"
echo "done in $(( $(date +%s) - T0 )) s"
