#!/usr/bin/env bash
# One device call for the sm_90a prefill kernel (kernels/moe_prefill_sm90.cuh):
# test_kernels' prefill tests (the sm90 kernel forced and the mma.sync kernel,
# against the CPU reference), the prefill table of bench_kernels at the Kimi
# shape (256 tokens per expert: the configured kernel, the mma.sync kernel and
# cuBLAS BF16 in the same run), then compute-sanitizer memcheck on the prefill
# tests.  Binaries: build/release (scons -j16 when missing).  Logs and the CSV
# go to $OUT/sm90.tar.gz; the prefill lines are printed last.
#   bash experiments/kernels/sm90_device.sh
# TESTS (default "test_moe_config,test_moe_prefill_sm90,test_moe_range,test_moe_layer";
# "" skips them), FORMATS (default hot,warm,cold,bf16,q4), KERNEL (bench_kernels
# --kernel value, default none), SANITIZE=0 skips memcheck, LIMIT (seconds per
# step, default 150; LIMIT_TESTS and LIMIT_SAN for the test and memcheck steps,
# default LIMIT: memcheck cut short still prints the errors it found and the
# kernel configurations it finished), MORE (extra bench_kernels runs of the prefill table,
# separated by ';', each a list of its arguments, e.g. "--kernel prefill=sm90ws
# --formats hot;--kernel prefill=sm90 --pf-tokens 64,128,192": their lines
# are printed too, their CSVs are more1.csv, more2.csv, ...).
set -u
source "$(dirname "$0")/device_common.sh"
dev_begin sm90
T=./build/release/tests/test_kernels B=./build/release/bench/bench_kernels
[ -x "$T" ] && [ -x "$B" ] || dev_build build/release/tests/test_kernels build/release/bench/bench_kernels
L=${LIMIT:-150}
tests=${TESTS-test_moe_config,test_moe_prefill_sm90,test_moe_range,test_moe_layer}
if [ -n "$tests" ]; then
	t0=$(date +%s)
	STRATA_TESTS=$tests timeout "${LIMIT_TESTS:-$L}" $T >"$d/test_kernels.log" 2>&1
	echo "test_kernels ($tests) exit $? ($(grep -c 'rel err' "$d/test_kernels.log") checks, $(( $(date +%s) - t0 )) s)"
	grep -E "FAILED|Error|error:|sm90 launches|note:|\[  (PASSED|FAILED) \]" "$d/test_kernels.log" | head -20
	grep -E "rel err" "$d/test_kernels.log" | awk '{for (i = 1; i < NF; i++) if ($i == "err") print $(i + 1)}' |
		sort -g | tail -1 | sed 's/^/largest rel err: /'
fi
t0=$(date +%s)
timeout "$L" $B --no-decode --no-layer --shape kimi --formats "${FORMATS:-hot,warm,cold,bf16,q4}" \
	${KERNEL:+--kernel $KERNEL} --csv "$d/prefill.csv" >"$d/bench.log" 2>&1
echo "bench_kernels exit $? ($(( $(date +%s) - t0 )) s)"
n=0
IFS=';' read -ra more <<<"${MORE:-}"
for args in "${more[@]}"; do
	n=$((n + 1))
	t0=$(date +%s)
	# shellcheck disable=SC2086
	timeout "$L" $B --no-decode --no-layer --shape kimi $args --csv "$d/more$n.csv" >"$d/more$n.log" 2>&1
	echo "bench_kernels $args: exit $? ($(( $(date +%s) - t0 )) s)"
done
if [ "${SANITIZE:-1}" = 1 ]; then
	t0=$(date +%s)
	STRATA_TESTS=test_moe_prefill_sm90 timeout "${LIMIT_SAN:-$L}" compute-sanitizer --tool memcheck \
		--error-exitcode 9 $T >"$d/memcheck.log" 2>&1
	echo "memcheck exit $? ($(( $(date +%s) - t0 )) s): $(grep -E 'ERROR SUMMARY' "$d/memcheck.log" | tail -1)" \
		"$(grep -c '^========= [A-Z]' "$d/memcheck.log") error lines; configurations finished:" \
		"$(grep -E "^prefill kernels '" "$d/memcheck.log" | cut -d"'" -f2 | tr '\n' ' ')"
fi
cp "$d/prefill.csv" "$out/" 2>/dev/null
grep -E "^prefill|ceiling" "$d/bench.log" | sed 's/  */ /g'
for i in $(seq 1 $n); do
	echo "== more$i: ${more[$((i - 1))]}"
	grep -E "^prefill" "$d/more$i.log" | sed 's/  */ /g'
done
