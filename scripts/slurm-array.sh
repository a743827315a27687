#!/bin/bash
# Slurm job-array template: task i runs line i of a job list written by
#   strata run --export-jobs jobs.txt experiments/<study>/run.lua [key=value ...]
# Submit from the folder the export ran in (relative paths in the jobs
# resolve against it), one array task per line:
#   sbatch --array=1-$(wc -l < jobs.txt)%64 --chdir="$PWD" scripts/slurm-array.sh jobs.txt
# then, when the array has finished:
#   strata run --merge OUT.csv OUT.csv.parts/*.csv && strata run experiments/<study>/run.lua ...
# Each task writes one row CSV (OUT.csv.parts/HASH.csv); a task that fails
# writes an error row, so --merge still sees it and the next run retries it.
# By hand (or to test): SLURM_ARRAY_TASK_ID=3 scripts/slurm-array.sh jobs.txt
#SBATCH --job-name=strata-sweep
#SBATCH --cpus-per-task=1
#SBATCH --mem=4G
#SBATCH --time=01:00:00
#SBATCH --output=strata-sweep-%A_%a.log
set -euo pipefail
jobs=${1:-jobs.txt}
i=${SLURM_ARRAY_TASK_ID:?not a Slurm array task (set SLURM_ARRAY_TASK_ID=N to run line N by hand)}
[ -r "$jobs" ] || { echo "slurm-array.sh: cannot read job list $jobs" >&2; exit 2; }
line=$(sed -n "${i}p" "$jobs")
[ -n "$line" ] || { echo "slurm-array.sh: $jobs has no line $i ($(wc -l < "$jobs") lines)" >&2; exit 2; }
# the lines are shell commands written by strata (arguments single-quoted)
eval "$line"
