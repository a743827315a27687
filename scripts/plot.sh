#!/bin/sh
# Run scripts/plot_results.py (or, with --script FILE, another plotting script)
# under a Python that has matplotlib.  Tried in order: $STRATA_PYTHON,
# /usr/bin/python3 (Debian's python3-matplotlib), python3 on the PATH.
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
tried=""
for py in ${STRATA_PYTHON:-} /usr/bin/python3 python3; do
	command -v "$py" >/dev/null 2>&1 || continue
	tried="$tried $py"
	if "$py" -c 'import matplotlib' >/dev/null 2>&1; then
		[ "$check" = 1 ] && exit 0
		exec "$py" "$script" "$@"
	fi
done
echo "plot.sh: no Python with matplotlib (tried:${tried:- none found}); install python3-matplotlib" \
	"(scripts/install-deps.sh) or set STRATA_PYTHON to an interpreter that has it" >&2
exit 3
