#!/usr/bin/env bash
# Build a libFuzzer target with clang (-fsanitize=fuzzer,address,undefined)
# and run it for a bounded time over its committed seed corpus.
#
#   scripts/fuzz.sh [TARGET] [SECONDS] [extra libFuzzer flags...]
#   scripts/fuzz.sh --driver TARGET [SECONDS]
#   scripts/fuzz.sh list
#
# --driver builds the same target with gcc and ASan+UBSan against Strata's own
# mutation driver (tests/fuzz/driver.c) instead of libFuzzer: no clang needed.
# The test suite (test_fuzz) runs every target this way for a few seconds;
# libFuzzer (coverage-guided) is for the longer runs by hand.  A crash or hang
# saves the input as build/fuzz/crash-fuzz_TARGET-driver-PID; replay it with
# build/fuzz/fuzz_TARGET-driver FILE.
#
# TARGET names tests/fuzz/fuzz_TARGET.c (default: store_header); SECONDS
# defaults to 60.  A target lists the library sources and libraries it needs
# in "fuzz-sources:" and "fuzz-libs:" comment lines ("fuzz-plain-sources:" are
# built by gcc without instrumentation: code the target needs but does not
# fuzz, e.g. gcc-only vector code), so adding a target is one
# file plus a seed corpus in tests/fuzz/corpus/TARGET/.  New inputs go to
# build/fuzz/corpus-TARGET (the committed corpus is only read); crashes are
# saved as build/fuzz/crash-TARGET-* and make the script exit non-zero.
# Not part of `scons check`: run it by hand or in a nightly job (test_store
# does check that the store_header seeds still parse; how they were made is
# in experiments/foundation/README.md).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = list ]; then
	ls "$root"/tests/fuzz/fuzz_*.c | sed 's/.*fuzz_\(.*\)\.c/\1/'
	exit 0
fi
driver=0
if [ "${1:-}" = --driver ]; then
	driver=1
	shift
fi
target=${1:-store_header}
secs=${2:-60}
shift $(( $# > 2 ? 2 : $# )) || true
src=$root/tests/fuzz/fuzz_$target.c
seeds=$root/tests/fuzz/corpus/$target
out=$root/build/fuzz
[ -f "$src" ] || { echo "fuzz.sh: no target $src (scripts/fuzz.sh list)" >&2; exit 2; }
sources=$(sed -n 's/.*fuzz-sources:\(.*\)/\1/p' "$src")
libs=$(sed -n 's/.*fuzz-libs:\(.*\)/\1/p' "$src")
plain=$(sed -n 's/.*fuzz-plain-sources:\(.*\)/\1/p' "$src")
if [ $driver = 1 ]; then
	CC=${FUZZ_CC:-gcc}
	mkdir -p "$out"
	bin=$out/fuzz_$target-driver
	# rebuild only when a source is newer than the binary
	need=1
	if [ -x "$bin" ]; then
		need=0
		for f in "tests/fuzz/fuzz_$target.c" tests/fuzz/driver.c $sources $plain; do
			[ "$root/$f" -nt "$bin" ] && need=1
		done
		for f in "$root"/core/include/strata/*.h "$root"/tests/fuzz/*.h; do
			[ "$f" -nt "$bin" ] && need=1
		done
	fi
	if [ $need = 1 ]; then
		echo "fuzz.sh: building $bin (gcc, ASan+UBSan, mutation driver)"
		(cd "$root" && "$CC" -g -O1 -std=gnu11 -D_GNU_SOURCE -DSTRATA_HAVE_CUDA=0 -march=x86-64-v3 \
			-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer \
			-Icore/include -Ikernels -Itests/fuzz "$src" tests/fuzz/driver.c $sources $plain \
			-o "$bin.tmp" $libs) && mv "$bin.tmp" "$bin"
	fi
	corp=()
	[ -d "$out/corpus-$target" ] && corp+=("$out/corpus-$target")
	echo "fuzz.sh: running $target for ${secs}s over $seeds (driver)"
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} "$bin" -t "$secs" -o "$out" "$seeds" "${corp[@]}"
	exit $?
fi
CC=${FUZZ_CC:-clang}
command -v "$CC" >/dev/null || { echo "fuzz.sh: $CC not found (apt-get install clang)" >&2; exit 2; }

# libFuzzer's runtime ships separately from clang on Debian (libclang-rt-N-dev).
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'int LLVMFuzzerTestOneInput(const char *d, unsigned long n) { return 0; }' >"$probe/p.c"
if ! "$CC" -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" 2>/dev/null; then
	ver=$("$CC" --version | sed -n 's/.*clang version \([0-9]*\).*/\1/p' | head -1)
	echo "fuzz.sh: clang's libFuzzer runtime is missing; trying libclang-rt-$ver-dev" >&2
	if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
		apt-get install -y "libclang-rt-$ver-dev" >&2 || true
	fi
	"$CC" -fsanitize=fuzzer "$probe/p.c" -o "$probe/p" 2>/dev/null || {
		echo "fuzz.sh: no libFuzzer runtime: install libclang-rt-$ver-dev (as root)" >&2
		exit 2
	}
fi

mkdir -p "$out" "$out/corpus-$target"
bin=$out/fuzz_$target
objs=()
for p in $plain; do
	o=$out/plain-$(basename "$p" .c).o
	(cd "$root" && ${FUZZ_PLAIN_CC:-gcc} -c -O2 -g -std=gnu11 -D_GNU_SOURCE -DSTRATA_HAVE_CUDA=0 -fPIC \
		-Icore/include -Ikernels "$p" -o "$o")
	objs+=("$o")
done
echo "fuzz.sh: building $bin"
(cd "$root" && "$CC" -g -O1 -std=gnu11 -D_GNU_SOURCE -DSTRATA_HAVE_CUDA=0 \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
	-Icore/include -Ikernels -Itests/fuzz "$src" $sources "${objs[@]}" -o "$bin" $libs)
echo "fuzz.sh: running $target for ${secs}s over $seeds"
set +e
"$bin" -max_total_time="$secs" -print_final_stats=1 -timeout=10 -rss_limit_mb=2048 \
	-artifact_prefix="$out/crash-$target-" "$@" "$out/corpus-$target" "$seeds"
rc=$?
set -e
if ls "$out"/crash-"$target"-* >/dev/null 2>&1; then
	echo "fuzz.sh: $target: crashes saved in $out/crash-$target-*" >&2
	exit 1
fi
[ $rc -eq 0 ] && echo "fuzz.sh: $target: no crash in ${secs}s"
exit $rc
