#!/usr/bin/env bash
# Run every cmocka suite built under BDIR/tests and print one closing line:
#   "tests: N passed, N failed, N skipped"
# Suites print "SKIP <name>: <reason>" for tests they cannot run here (no GPU).
set -u
bdir=${1:-build/release}
export CMOCKA_MESSAGE_OUTPUT=stdout
export STRATA_PROGRESS=0
export ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0}
pass=0 fail=0 skip=0 suites=0 failed_suites=()
log=$(mktemp)
for t in "$bdir"/tests/test_*; do
	[ -x "$t" ] || continue
	name=$(basename "$t")
	suites=$((suites + 1))
	start=$(date +%s.%N)
	timeout 600 "$t" >"$log" 2>&1
	rc=$?
	secs=$(echo "$(date +%s.%N) - $start" | bc 2>/dev/null || echo "?")
	p=$(grep -Eo '^\[  PASSED  \] [0-9]+' "$log" | awk '{s+=$NF} END {print s+0}')
	f=$(grep -Eo '^\[  FAILED  \] [0-9]+' "$log" | awk '{s+=$NF} END {print s+0}')
	s=$(grep -c '^SKIP ' "$log")
	pass=$((pass + p - s)); fail=$((fail + f)); skip=$((skip + s))
	if [ $rc -ne 0 ] || [ "$f" -ne 0 ]; then
		[ "$f" -eq 0 ] && fail=$((fail + 1))
		failed_suites+=("$name")
		echo "---- $name FAILED (exit $rc) ----"; cat "$log"
	else
		printf '%-28s %3d passed %3d skipped  %ss\n' "$name" $((p - s)) "$s" "$secs"
		grep '^SKIP ' "$log" | sed 's/^/    /'
	fi
done
# The Python package and runner (tests/python, pytest) under a Python that has torch and pytest,
# found by scripts/find-python.sh ($STRATA_PYTHON, /usr/bin/python3, python3).
here=$(cd "$(dirname "$0")" && pwd)
py=
if pymsg=$("$here/../scripts/find-python.sh" torch pytest 2>&1); then py=$pymsg; fi
if [ -z "$py" ]; then
	echo "SKIP python: $pymsg"
	skip=$((skip + 1))
elif [ ! -e "$bdir/lib/libstrata.so" ]; then
	echo "SKIP python: $bdir/lib/libstrata.so not built"
	skip=$((skip + 1))
else
	start=$(date +%s.%N)
	pyenv=(STRATA_LIB="$bdir/lib/libstrata.so" STRATA_BIN="$bdir/bin/strata")
	pysel=()
	if nm -D "$bdir/lib/libstrata.so" 2>/dev/null | grep -q __asan_init; then
		# a sanitizer build: the runtime must come first; CPython's own allocations are not ours.
		# Only the cases on a synthesized store: the others quantize a checkpoint first, which
		# takes minutes under ASan (they run in the release suite).
		pyenv+=(LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
			ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0")
		pysel=(-k "engine_bf16 or safetensors")
		echo "SKIP python runner cases: not under ASan (strata quantize of their fixture takes minutes; the release suite runs them)"
		skip=$((skip + 1))
	fi
	env "${pyenv[@]}" timeout 900 "$py" -m pytest -q -rs -s -p no:cacheprovider tests/python "${pysel[@]}" >"$log" 2>&1
	rc=$?
	secs=$(echo "$(date +%s.%N) - $start" | bc 2>/dev/null || echo "?")
	last=$(grep -E '[0-9]+ (passed|failed|skipped|error)' "$log" | tail -1)
	p=$(echo "$last" | grep -Eo '[0-9]+ passed' | grep -Eo '[0-9]+'); p=${p:-0}
	f=$(echo "$last" | grep -Eo '[0-9]+ (failed|error)' | grep -Eo '[0-9]+' | awk '{s+=$1} END {print s+0}')
	s=$(echo "$last" | grep -Eo '[0-9]+ skipped' | grep -Eo '[0-9]+'); s=${s:-0}
	pass=$((pass + p)); fail=$((fail + f)); skip=$((skip + s))
	if [ $rc -ne 0 ] || [ "$f" -ne 0 ]; then
		[ "$f" -eq 0 ] && fail=$((fail + 1))
		failed_suites+=("python")
		echo "---- python ($py) FAILED (exit $rc) ----"; cat "$log"
	else
		printf '%-28s %3d passed %3d skipped  %ss\n' "python ($(basename "$py"))" "$p" "$s" "$secs"
		grep '^SKIP ' "$log" | sed 's/^/    /'
	fi
fi
rm -f "$log"
if [ $suites -eq 0 ]; then
	# a run that finds nothing is a failure, not a pass (a wrong BDIR, an
	# absolute builddir that went astray, cmocka missing)
	echo "run-tests.sh: no test suites ran under $bdir/tests (built? see scons builddir=)" >&2
	fail=1
fi
[ ${#failed_suites[@]} -gt 0 ] && echo "failed suites: ${failed_suites[*]}"
echo "tests: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
