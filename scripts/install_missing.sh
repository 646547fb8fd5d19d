#!/usr/bin/env bash
# Installs the Debian packages given as arguments that are not installed yet (run as root);
# one apt-get call, nothing when all are present. Used by setup.sh, test.sh and sanitize.sh.
set -euo pipefail
missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep "install ok installed" > /dev/null || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "$(basename "$0"): installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # No Recommends: on a fresh Debian 12 they add ~60 packages tide does not use (libgd3 and its
  # image codecs via libc-devtools, gnupg, manpages, ...), a large part of the first command.
  # force-unsafe-io: dpkg without an fsync per file (as container image builds do); on a
  # fresh machine the fsyncs, not the download, are most of the install's time.
  apt-get install -y -qq --no-install-recommends -o Dpkg::Options::=--force-unsafe-io \
    "${missing[@]}"
fi
