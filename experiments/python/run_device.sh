#!/usr/bin/env bash
# The Python-path figures and the GPU tests of the C ABI and the Python package, in one call on
# the GPU machine (about 5 minutes on an H200).  From the repository root:
#   bash experiments/python/run_device.sh
# (on the lent device machine: `source .device/setup.sh &&` first, for liburing, Lua, cmocka
# and SCons).  Logs, results.json and cost.json land in $OUT (default out/python).
#  1. build (release, CUDA): libstrata.so, the CLI, test_api, bench_api
#  2. test_api (the C ABI suite)
#  3. experiments/python/bench.py: Python vs C per layer call, Strata vs batched BF16 decode,
#     three tiers vs the link bound
#  4. tests/python's GPU cases (CPU vs GPU per format, the model on the GPU, transformers parity
#     on every family's tiny checkpoint and the DeepSeek variants where transformers is
#     installed), then scripts/test_record_hf.py (skips without transformers)
# Steps share BUDGET seconds (default 290): each gets what is left, capped.  STEPS picks
# steps (default "build tests bench"); BENCH_ARGS goes to bench.py, e.g. BENCH_ARGS="--only tiers"
# for the three-tier figure alone.
set -u
T0=$SECONDS
BUDGET=${BUDGET:-290}   # seconds for the whole script; each step gets what is left, capped
left() { local l=$((BUDGET - (SECONDS - T0))); [ $l -lt $1 ] && echo $((l > 5 ? l : 5)) || echo $1; }
out=${OUT:-out/python}
mkdir -p "$out"
B=build/release
# the shards (removed at the end); a folder of this run's own unless WORK names one
W=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/strata-py.XXXXXX")}
mkdir -p "$W"
trap 'rm -rf "$W"' EXIT
step() { echo; echo "== $* ($(date +%T))"; }
want() { case " ${STEPS:-build tests bench} " in *" $1 "*) return 0;; esac; return 1; }
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$out/gpu.txt" 2>&1
PY=${STRATA_PYTHON:-python3}
want build && { step build
targets="$B/lib $B/bin/strata $B/tests/test_api $B/bench/bench_api"
# shellcheck disable=SC2086
scons -Q -j16 mode=release builddir=$B $targets >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }; }

if want tests; then
step C ABI tests
timeout $(left 60) $B/tests/test_api >"$out/test_api.log" 2>&1
echo "test_api exit $? : $(grep -E '^\[  (PASSED|FAILED)  \]' "$out/test_api.log" | tr '\n' ' ') $(grep -c '^SKIP' "$out/test_api.log") skipped"
fi

if want bench; then
step benchmark
STRATA_LIB=$B/lib/libstrata.so timeout $(left 170) "$PY" experiments/python/bench.py --strata $B/bin/strata \
	--bench-api $B/bench/bench_api --work "$W" --out "$out" ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.log"
echo "bench exit ${PIPESTATUS[0]}"
fi
if want tests; then
step Python GPU tests
sel="gpu or transformers or strata_layer or errors or deepseek"
if "$PY" -c 'import pytest' 2>/dev/null; then
	STRATA_LIB=$B/lib/libstrata.so STRATA_BIN=$B/bin/strata timeout $(left 180) "$PY" -m pytest -q -rs -s -p no:cacheprovider \
		tests/python -k "$sel" >"$out/test_python.log" 2>&1
else	# no pytest here: the module runs itself through tests/python/minitest.py
	STRATA_LIB=$B/lib/libstrata.so STRATA_BIN=$B/bin/strata timeout $(left 180) "$PY" tests/python/test_strata.py -k "$sel" \
		>"$out/test_python.log" 2>&1
fi
echo "python tests exit $?: $(tail -1 "$out/test_python.log")"
grep -E "^transformers|^SKIP|^FAILED|^PASSED|Error" "$out/test_python.log" | head -40
step record_hf.py on tiny transformers models
timeout $(left 90) "$PY" scripts/test_record_hf.py --strata $B/bin/strata >"$out/test_record_hf.log" 2>&1
echo "test_record_hf exit $?: $(tail -1 "$out/test_record_hf.log")"
fi

