# Sourced by experiments/<study>/make.sh: the strata binary, the plotter and
# the Mixtral traces.
#   STRATA       strata binary (default: build/release/bin/strata, else build/debug/bin/strata)
#   STRATA_TRACES  folder with mixtral-8x7b-instruct/*_routing.jsonl to import (default: the
#                bundled traces/mixtral-8x7b-instruct/mixtral-8x7b-instruct.strace, the same
#                logs converted); set it empty to skip the Mixtral parts
#   NO_PLOTS=1   skip the plots (tables only)
set -eu
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
if [ -z "${STRATA:-}" ]; then
	for b in build/release/bin/strata build/debug/bin/strata; do
		[ -x "$b" ] && STRATA=$root/$b && break
	done
fi
[ -n "${STRATA:-}" ] && [ -x "$STRATA" ] || { echo "no strata binary: scons -Q -j2 mode=release (or set STRATA)" >&2; exit 2; }
export STRATA_EXE=$STRATA

# plot ARGS...: scripts/plot.sh unless NO_PLOTS=1
plot() {
	[ "${NO_PLOTS:-0}" = 1 ] && return 0
	"$root/scripts/plot.sh" "$@"
}

# mixtral_trace OUT: the Mixtral-8x7B-Instruct routing trace at OUT (once):
# imported from $STRATA_TRACES/mixtral-8x7b-instruct/*_routing.jsonl when
# STRATA_TRACES names a folder that has them, else copied from the bundled
# traces/mixtral-8x7b-instruct/mixtral-8x7b-instruct.strace (the same logs,
# converted; traces/README.md).  STRATA_TRACES set but empty: returns 1 (and
# says so), skipping the Mixtral part.
mixtral_trace() {
	local out=$1 src=${STRATA_TRACES:+$STRATA_TRACES/mixtral-8x7b-instruct}
	local bundled=$root/traces/mixtral-8x7b-instruct/mixtral-8x7b-instruct.strace
	if [ -n "${STRATA_TRACES+set}" ] && [ -z "$STRATA_TRACES" ]; then
		echo "STRATA_TRACES is empty: skipping the Mixtral part" >&2
		return 1
	fi
	[ -s "$out" ] && return 0
	mkdir -p "$(dirname "$out")"
	if [ -n "$src" ] && ls "$src"/*_routing.jsonl >/dev/null 2>&1; then
		"$STRATA" trace import --model mixtral-8x7b -q -o "$out" "$src"/*_routing.jsonl
		echo "Mixtral trace: imported from $src" >&2
	elif [ -s "$bundled" ]; then
		cp "$bundled" "$out"
		echo "Mixtral trace: the bundled ${bundled#$root/}" >&2
	else
		echo "Mixtral trace: none (no $bundled, STRATA_TRACES=${STRATA_TRACES:-unset}): skipping the Mixtral part" >&2
		return 1
	fi
}
