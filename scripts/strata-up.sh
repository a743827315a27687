#!/usr/bin/env bash
# The README's two commands.
#   bash scripts/strata-up.sh          install what is missing, build, run the demo job
#   bash scripts/strata-up.sh --test   the same, then every test (what .ci/run calls)
# Options after those are passed to scons (e.g. mode=asan).
set -euo pipefail
cd "$(dirname "$0")/.."
run_tests=0
if [ "${1:-}" = "--test" ]; then run_tests=1; shift; fi
bash scripts/install-deps.sh
jobs=$(nproc 2>/dev/null || echo 2)
scons -Q -j"$jobs" "$@"
bdir=$(sed -n "s/^builddir = '\(.\+\)'$/\1/p" build/strata.conf)
mode=$(sed -n "s/^mode = '\(.*\)'$/\1/p" build/strata.conf)
bdir=${bdir:-build/${mode:-release}}
bash scripts/demo.sh "$bdir"
if [ $run_tests -eq 1 ]; then
	bash tests/run-tests.sh "$bdir"
fi
