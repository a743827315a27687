#!/bin/sh
# Run scripts/plot_results.py (or, with --script FILE, another plotting script)
# under a Python that has matplotlib, found by scripts/find-python.sh
# ($STRATA_PYTHON, /usr/bin/python3 (Debian's python3-matplotlib), python3).
#
#   scripts/plot.sh results.csv --x vram_mib --y hit_rate_vram --hue evict --out plot.png
#   scripts/plot.sh --check          # exit 0 if an interpreter with matplotlib exists
here=$(cd "$(dirname "$0")" && pwd)
script="$here/plot_results.py"
check=0
case "${1:-}" in
--script) script=$2; shift 2 ;;
--check) check=1 ;;
esac
py=$("$here/find-python.sh" matplotlib 2>&1) || {
	[ "$check" = 1 ] || echo "plot.sh: $py" >&2
	exit 3
}
[ "$check" = 1 ] && exit 0
exec "$py" "$script" "$@"
