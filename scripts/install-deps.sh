#!/usr/bin/env bash
# Install what Strata needs on Debian 12 (as root), skipping what is present.
set -euo pipefail
pkgs="build-essential scons pkg-config liburing-dev libnuma-dev libhwloc-dev liblua5.4-dev lua5.4
      libcmocka-dev libxxhash-dev bc python3 python3-matplotlib python3-numpy python3-pandas python3-torch
      python3-pytest python3-setuptools"
missing=()
for p in $pkgs; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "strata: installing ${missing[*]}"
	if [ "$(id -u)" -ne 0 ]; then
		echo "strata: need root to apt-get install: ${missing[*]}" >&2
		exit 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
echo "strata: dependencies present"
