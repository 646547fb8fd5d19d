#!/usr/bin/env bash
# The README's test command: bash scripts/test.sh [extra ctest arguments]
# Runs scripts/setup.sh first when ./build is not configured yet, then builds everything there
# (tests, benchmarks; the tide program itself is usually built already), installs the Python
# packages the tests use (tools/requirements-test.txt) into ./.venv (pip, once; again only when
# that file changes), and runs the whole suite:
#   ctest --test-dir build --output-on-failure -j 2 --timeout 600 [extra ctest arguments]
# with TIDE_PYTHON=<repo>/.venv/bin/python for the tests that run Python. CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."

[ -f build/CMakeCache.txt ] || bash scripts/setup.sh
cmake --build build -j "$(nproc)"

# pip runs when the venv is new or tools/requirements-test.txt changed (its hash is kept there).
req=tools/requirements-test.txt
stamp=.venv/tide-requirements.sha256
want=$(sha256sum "$req" | cut -d' ' -f1)
if [ ! -x .venv/bin/python ]; then
  bash scripts/install_missing.sh python3 python3-venv  # nothing when both are there
  python3 -m venv .venv
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  # PyTorch's CPU-only index, only when it answers: pip retries an unreachable index, with
  # back-off, for every package (minutes in all where only PyPI is reachable).
  index=()
  torch_cpu=https://download.pytorch.org/whl/cpu
  if .venv/bin/python -c "import sys, urllib.request as u; u.urlopen(sys.argv[1], timeout=10)" \
    "$torch_cpu/torch/" 2>/dev/null; then
    index=(--extra-index-url "$torch_cpu")
  fi
  .venv/bin/python -m pip install --quiet --disable-pip-version-check "${index[@]}" -r "$req"
  echo "$want" >"$stamp"
fi
export TIDE_PYTHON="$PWD/.venv/bin/python"

ctest --test-dir build --output-on-failure -j 2 --timeout 600 "$@"
