#!/usr/bin/env bash
# Rewrites the sample outputs in README.md and docs/*.md from the program as it is now (the
# `$ command` blocks and the `<!-- docs-test: output of: ... -->` ones; tests/docs/doc_test.py),
# after building build/tide. Check the diff, then commit it: the docs test (ctest -L docs) fails
# while a sample is stale.
#   scripts/regen_doc_samples.sh [FILE.md ...]     (default: README.md docs/*.md)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/CMakeCache.txt ] || bash scripts/setup.sh
cmake --build build -j "$(nproc)" --target tide
files=("$@")
[ ${#files[@]} -eq 0 ] && files=(README.md docs/*.md)
python3 tests/docs/doc_test.py regen --tide build/tide --work build/tests/docs/regen "${files[@]}"
