#!/bin/sh
# Print the first Python that can import every MODULE given, tried in order:
# $STRATA_PYTHON, /usr/bin/python3 (Debian's python3-* packages), python3 on
# the PATH.  The one way scripts and tests pick their interpreter.
#
#   scripts/find-python.sh torch transformers    # prints e.g. /usr/bin/python3
#   py=$(scripts/find-python.sh matplotlib) || exit 3
#
# Exit 0 with the interpreter on stdout; exit 3 when none has them all, with a
# line on stderr naming each interpreter tried and what it lacks.
if [ $# -eq 0 ]; then
	sed -n '2,10s/^# \{0,1\}//p' "$0" >&2
	exit 2
elif [ "$1" = "--help" ] || [ "$1" = "-h" ]; then
	sed -n '2,10s/^# \{0,1\}//p' "$0"
	exit 0
fi
tried=""
for py in ${STRATA_PYTHON:-} /usr/bin/python3 python3; do
	command -v "$py" >/dev/null 2>&1 || continue
	lacks=""
	for m in "$@"; do
		"$py" -c "import $m" >/dev/null 2>&1 || lacks="${lacks:+$lacks, }$m"
	done
	if [ -z "$lacks" ]; then
		echo "$py"
		exit 0
	fi
	tried="${tried:+$tried; }$py lacks $lacks"
done
echo "no Python with $(echo "$*" | sed 's/ /, /g') (tried: ${tried:-none found}); install them (Debian's" \
	"python3-<module> packages; bash scripts/install-deps.sh installs those the project uses) or set" \
	"STRATA_PYTHON to an interpreter that has them" >&2
exit 3
