# Sourced by experiments/<study>/make.sh: the strata binary, the plotter and
# the Mixtral traces.
#   STRATA       strata binary (default: build/release/bin/strata, else build/debug/bin/strata)
#   STRATA_TRACES  folder with mixtral-8x7b-instruct/*_routing.jsonl (default: the first of
#                ../shared/traces beside the checkout and /work/shared/traces that exists);
#                set it to an empty or missing folder to skip the Mixtral parts
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
if [ -z "${STRATA_TRACES+set}" ]; then
	STRATA_TRACES=
	for d in "$root/../shared/traces" /work/shared/traces; do
		[ -d "$d/mixtral-8x7b-instruct" ] && STRATA_TRACES=$d && break
	done
fi

# plot ARGS...: scripts/plot.sh unless NO_PLOTS=1
plot() {
	[ "${NO_PLOTS:-0}" = 1 ] && return 0
	"$root/scripts/plot.sh" "$@"
}

# mixtral_trace OUT: import the Mixtral-8x7B-Instruct routing logs into OUT
# (once); returns 1 (and says so) when they are absent.
mixtral_trace() {
	local out=$1 src=${STRATA_TRACES:+$STRATA_TRACES/mixtral-8x7b-instruct}
	if [ -z "$src" ] || ! ls "$src"/*_routing.jsonl >/dev/null 2>&1; then
		echo "Mixtral traces not found (STRATA_TRACES=${STRATA_TRACES:-unset}): skipping the Mixtral part" >&2
		return 1
	fi
	[ -s "$out" ] && return 0
	mkdir -p "$(dirname "$out")"
	"$STRATA" trace import --model mixtral-8x7b -o "$out" "$src"/*_routing.jsonl 2>&1 | tail -1 >&2
}
