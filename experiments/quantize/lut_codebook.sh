#!/bin/sh
# lut_codebook.sh TERMS BITS L0,L1,... | mask MASK: bench_quant's cosines (hot
# and cold, Gaussian / Student-t(5) / 0.1% outliers, 32 x 7168) with the
# trellis codebook replaced by lut_codebook.py's additive byte table or fp16
# bit-mask codebook: the encoder built in a temporary directory against that
# table (the repository is not touched).  With no arguments: format version
# 2's own codebook, the baseline.
set -e
root=$(cd "$(dirname "$0")/../.." && pwd)
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
cp "$root"/kernels/quant*.c "$root"/kernels/quant*.h "$d"/
sed 's|"../testrand.h"|"'"$root"'/tests/testrand.h"|' "$root"/tests/bench/bench_quant.c > "$d"/bench_quant.c
case $# in
0) ;;
2 | 3) python3 "$root"/experiments/quantize/lut_codebook.py "$@" > "$d"/quant_tables.h ;;
*) echo "usage: lut_codebook.sh [TERMS BITS L0,L1,... | mask MASK]" >&2; exit 2 ;;
esac
cc -O2 -I"$d" -I"$root"/core/include -o "$d"/bq "$d"/bench_quant.c "$d"/quant_core.c "$d"/quant_tiers.c \
	"$d"/quant_scalar.c -lm -lpthread
"$d"/bq --rows 32 --fmt hot,cold --csv | awk -F, -v c="${*:-v2}" 'NR == 1 { print "codebook,fmt,dist,cosine" } NR > 1 { print "\"" c "\"," $1 "," $3 "," $6 }'
