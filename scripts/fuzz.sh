#!/usr/bin/env bash
# Fuzzes tide's parsers with libFuzzer: scripts/fuzz.sh [SECONDS] [TARGET...]
#   SECONDS  per target (default 600); TARGETs: config_json config_overrides shard tokenizer
#            checkpoint sharded_index hf_import nanogpt_bin (default: all). FUZZ_JOBS=N runs N
#            targets at a time (default 1).
# Builds the fuzzers into build-san (clang, -DTIDE_FUZZ=ON: ASan + UBSan + libFuzzer) unless
# FUZZ_NO_BUILD=1. Each target starts from its committed corpus (tests/fuzz/corpus/<target>)
# plus what earlier runs found (build-san/fuzz/corpus/<target>, not committed). A crash, a
# sanitizer report, a leak, an uncaught exception or an input slower than 10 s fails the
# target: its input is saved as build-san/fuzz/artifacts/<target>/crash-* (or leak-, timeout-,
# oom-); minimise it, fix the bug, and commit the input to the corpus as crash_<what>.
# Prints one line per target: seconds, executions, corpus size, result. Exit status: the
# number of failed targets.
set -uo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-600}"
shift || true
targets=("$@")
[ ${#targets[@]} -eq 0 ] &&
  targets=(config_json config_overrides shard tokenizer checkpoint sharded_index hf_import nanogpt_bin)
jobs="${FUZZ_JOBS:-1}"
build=build-san

if [ "${FUZZ_NO_BUILD:-0}" != 1 ]; then
  if [ ! -f "$build/CMakeCache.txt" ]; then
    CC=clang CXX=clang++ cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DTIDE_FUZZ=ON -DTIDE_BENCHMARKS=OFF >/dev/null || exit 1
  fi
  cmake --build "$build" -j "${FUZZ_BUILD_JOBS:-2}" --target fuzzers >/dev/null || {
    echo "fuzz: building the fuzzers failed (cmake --build $build --target fuzzers)"
    exit 1
  }
fi

export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:intercept_tls_get_addr=0"  # see sanitize.sh
export OMP_NUM_THREADS=1

run_one() {
  local t="$1" work="$build/fuzz/corpus/$1" art="$build/fuzz/artifacts/$1"
  local log="$build/fuzz/logs/$1.log"
  mkdir -p "$work" "$art" "$(dirname "$log")"
  local start=$SECONDS
  "$build/tests/fuzz/fuzz_$t" "$work" "tests/fuzz/corpus/$t" -max_total_time="$seconds" \
    -timeout=10 -rss_limit_mb=4096 -max_len=16384 -print_final_stats=1 \
    -artifact_prefix="$art/" >"$log" 2>&1
  local rc=$? took=$((SECONDS - start))
  local execs corpus
  execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
  corpus=$(ls "$work" | wc -l)
  if [ $rc -eq 0 ]; then
    echo "fuzz $t: ${took} s, ${execs:-?} executions, corpus ${corpus} files, no crash"
  else
    echo "fuzz $t: FAILED after ${took} s (exit $rc); see $log and $art/"
    grep -m3 -E 'ERROR|runtime error|deadly signal|uncaught|Timeout|leak' "$log" | sed 's/^/  /'
  fi
  return $rc
}

failed=0
pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=($!)
  while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
done
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
exit $failed
