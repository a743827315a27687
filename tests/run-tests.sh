#!/usr/bin/env bash
# Run every cmocka suite built under BDIR/tests and print one closing line:
#   "tests: N passed, N failed, N skipped"
# Suites print "SKIP <name>: <reason>" for tests they cannot run here (no GPU).
set -u
bdir=${1:-build/release}
export CMOCKA_MESSAGE_OUTPUT=stdout
export STRATA_PROGRESS=0
export ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0}
pass=0 fail=0 skip=0 failed_suites=()
log=$(mktemp)
for t in "$bdir"/tests/test_*; do
	[ -x "$t" ] || continue
	name=$(basename "$t")
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
rm -f "$log"
if [ $((pass + fail + skip)) -eq 0 ]; then
	# a run that finds nothing is a failure, not a pass (a wrong BDIR, an
	# absolute builddir that went astray, cmocka missing)
	echo "run-tests.sh: no test suites ran under $bdir/tests (built? see scons builddir=)" >&2
	fail=1
fi
[ ${#failed_suites[@]} -gt 0 ] && echo "failed suites: ${failed_suites[*]}"
echo "tests: $pass passed, $fail failed, $skip skipped"
[ $fail -eq 0 ]
