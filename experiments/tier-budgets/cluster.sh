#!/usr/bin/env bash
# "Sweeps beyond one machine", round trip on this machine: run a small
# tier-budgets sweep locally; export the same sweep as a job list; run the
# jobs with GNU parallel (RUNNER=parallel, the default when it is installed),
# through the Slurm array template one task at a time (RUNNER=slurm), or with
# xargs -P (RUNNER=xargs, the fallback); merge the parts; check the script
# then finds every ok row (and retries only the failed ones) and that the merged rows equal
# the local ones in every counter (host-time columns aside).
# Usage: experiments/tier-budgets/cluster.sh [WORKDIR]   (env: RUNNER, JOBS=2)
source "$(dirname "$0")/../common.sh"
# WORKDIR is kept; without it, a folder of this run's own, removed at the end
work=${1:-}
if [ -z "$work" ]; then work=$(mktemp -d "${TMPDIR:-/tmp}/strata-cluster.XXXXXX"); trap 'rm -rf "$work"' EXIT; fi
mkdir -p "$work"
runner=${RUNNER:-$(command -v parallel >/dev/null 2>&1 && echo parallel || echo xargs)}
jobs=${JOBS:-2}
model=qwen3-30b-a3b:layers=8,experts=64
"$STRATA" trace gen -o "$work/trace.strace" --model $model --seed 7 --requests 2 --prompt 16 --gen 32 > /dev/null
args=(name=tb model=$model trace="$work/trace.strace" policies=lru,lfu,farthest,nosuch vram=64M,256M ram=256M)

"$STRATA" run -j "$jobs" experiments/tier-budgets/run.lua out="$work/local" "${args[@]}" > /dev/null 2>&1
rm -f "$work/jobs.txt"
"$STRATA" run --export-jobs "$work/jobs.txt" experiments/tier-budgets/run.lua out="$work/dist" "${args[@]}" \
	> /dev/null 2>&1
n=$(wc -l < "$work/jobs.txt")
echo "exported $n jobs to $work/jobs.txt; running them with $runner"
case $runner in
parallel) parallel --will-cite -j "$jobs" < "$work/jobs.txt" ;;
slurm) for i in $(seq 1 "$n"); do SLURM_ARRAY_TASK_ID=$i scripts/slurm-array.sh "$work/jobs.txt"; done ;;
xargs) tr '\n' '\0' < "$work/jobs.txt" | xargs -0 -P "$jobs" -n 1 sh -c ;;
*) echo "RUNNER=$runner: parallel, slurm or xargs" >&2; exit 2 ;;
esac
"$STRATA" run --merge "$work/dist/tb.csv" "$work/dist/tb.csv.parts"/*.csv
ok=$("${PYTHON:-python3}" - "$work/local/tb.csv" "$work/dist/tb.csv" <<'PY'
import csv, sys
host = {'bookkeeping_ms', 'wall_s', 'accesses_per_s', 'loop_s', 'loop_accesses_per_s'}
def load(p):
    with open(p, newline='') as f:
        return {r['run_id']: r for r in csv.DictReader(f)}
a, b = load(sys.argv[1]), load(sys.argv[2])
assert a.keys() == b.keys(), f'run_ids differ: {sorted(a.keys() ^ b.keys())}'
bad = [(k, c) for k in a for c in a[k] if c not in host and a[k][c] != b[k].get(c)]
ok = sum(r['status'] == 'ok' for r in b.values())
err = sum(r['status'] == 'error' for r in b.values())
if bad:
    sys.exit(f'merged rows differ from the local run: {bad[:5]}')
print(f'round trip: {len(a)} rows ({ok} ok, {err} error), identical to the local run in every counter', file=sys.stderr)
print(ok)
PY
)
resume=$("$STRATA" run -j "$jobs" experiments/tier-budgets/run.lua out="$work/dist" "${args[@]}" 2>&1 >/dev/null |
	grep "rows already in" || true)
echo "resume: $resume"
case $resume in
*": $ok of $n rows already in "*", $((n - ok)) to run") ;;
*) echo "the resumed run should find the $ok ok rows and retry the $((n - ok)) failed ones: $resume" >&2; exit 1 ;;
esac
echo "cluster round trip: ok"
