#!/usr/bin/env bash
# Installs the Debian packages given as arguments that are not installed yet (run as root);
# one apt-get call, nothing when all are present. Used by setup.sh and sanitize.sh.
set -euo pipefail
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "$(basename "$0"): installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${missing[@]}"
fi
