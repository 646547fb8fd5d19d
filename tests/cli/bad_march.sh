#!/usr/bin/env bash
# CMake's TIDE_MARCH (the -march the C++ code is compiled for): a value the compiler does not
# take stops the configure with one message naming it and the choices, before anything is
# built. Args: the source tree and a scratch directory (the first argument of the other CLI
# tests, the tide binary, is not needed).
set -uo pipefail
src=$1 dir=$2
rm -rf "$dir" && mkdir -p "$dir" || exit 1
out=$(cmake -S "$src" -B "$dir/build" -G Ninja -DTIDE_MARCH=bogus 2>&1)
rc=$?
if [ "$rc" -eq 0 ]; then echo "FAILED: TIDE_MARCH=bogus configured"; exit 1; fi
if ! grep -q "TIDE_MARCH=bogus: .* does not take -march=bogus; use native" <<<"$out"; then
  echo "FAILED: no clear message for TIDE_MARCH=bogus:"; echo "$out"; exit 1
fi
echo "ok: TIDE_MARCH=bogus -> $(grep -m1 'TIDE_MARCH=bogus' <<<"$out" | sed 's/^ *//')"
