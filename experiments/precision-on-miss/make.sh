#!/bin/bash
# experiments/precision-on-miss/make.sh [OUT]: precision on miss (HOBBIT-style, `--on-miss lowbit`).
#  1. speed: `strata sim` of Mixtral-8x7B (tiered as strata synth writes it, every hot/warm expert
#     with a cold-format copy) on the bundled Mixtral-8x7B-Instruct routing trace, VRAM 4 GiB,
#     RAM 0 or 6 GiB, place=cache evict=lru, on_miss full vs lowbit at gate 0.2 / 0.3 / 0.4;
#  2. quality: `python3 -m strata.eval --on-miss-gates` on the trained checkpoint in tests/data
#     (decoded token by token through the engine on the CPU), KLD / top-1 vs BF16 and vs full.
# Writes OUT (default out/precision-on-miss): sim.csv, eval/on_miss.csv, eval/on_miss.json.
source "$(dirname "$0")/../common.sh"
out=${1:-out/precision-on-miss}
mkdir -p "$out"
PY=$("$root/scripts/find-python.sh" torch) || exit 3
t=$out/mixtral.strace
mixtral_trace "$t"
rm -f "$out/sim.csv"
for ram in 0 6G; do
	for om in full lowbit:gate=0.2 lowbit:gate=0.3 lowbit:gate=0.4; do
		"$STRATA" sim -q --model mixtral-8x7b --trace "$t" --vram 4G --ram $ram --place cache --evict lru \
			--on-miss $om --csv "$out/sim.csv" $( [ -f "$out/sim.csv" ] && echo --append ) 2>/dev/null
	done
done
"$PY" - "$out/sim.csv" <<'PYEOF'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
print("| RAM GiB | on_miss | hit VRAM | hit RAM | hit NVMe | substituted | GB saved | decode tok/s | vs full | bound tok/s | violations |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
base = {}
for r in rows:
    om = r["config"].split(",on_miss=")[1] if ",on_miss=" in r["config"] else "full"
    if om == "full":
        base[r["ram_bytes"]] = float(r["decode_tok_s"])
    print("| %g | %s | %.3f | %.3f | %.3f | %s | %.1f | %.3f | %.3fx | %.3f | %s |" % (
        int(r["ram_bytes"]) / 2**30, om, float(r["hit_rate_vram"]), float(r["hit_rate_ram"]),
        float(r["hit_rate_nvme"]), r["substituted"], int(r["substitute_bytes_saved"]) / 1e9,
        float(r["decode_tok_s"]), float(r["decode_tok_s"]) / base[r["ram_bytes"]], float(r["bound_tok_s"]),
        r["bound_violations"]))
PYEOF
PYTHONPATH=python "$PY" -m strata.eval --model tests/data/moe-tiny --heldout-text tests/data/moe-tiny/heldout.txt \
	--strata "$STRATA" --on-miss-gates 0.1,0.2,0.3,1 --out "$out/eval"
