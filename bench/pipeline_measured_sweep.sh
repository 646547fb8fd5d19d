#!/usr/bin/env bash
# bench_pipeline_measured over p = 2, 3, 4 and m = p, 2p on a machine with a core per rank
# (bench/RESULTS.md, "The same on a quiet machine"): one rank per core, 1 thread per rank.
#   BIN=build/bench/bench_pipeline_measured OUT=results/ bench/pipeline_measured_sweep.sh
# Appends every JSON line, tagged with its run's name, to $OUT/bench.jsonl (stderr to
# $OUT/stderr.log). Needs 4 idle cores.
set -uo pipefail
BIN="${BIN:-build/bench/bench_pipeline_measured}"
OUT="${OUT:?set OUT to a folder for the results}"
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
run() {  # name np args...
  local name=$1 np=$2
  shift 2
  echo "=== $name $(date +%T)"
  mpirun --allow-run-as-root --bind-to core --map-by core -np "$np" "$BIN" --threads 1 "$@" \
    2>>"$OUT/stderr.log" | sed "s/^{/{\"run\":\"$name\",/" >>"$OUT/bench.jsonl"
  echo "rc=${PIPESTATUS[0]}"
}
lscpu | grep -E "Model name|^CPU\(s\)|Thread"
run p2m4a 2 --steps 5 --microbatches 4
run p2m8a 2 --steps 5 --microbatches 8
run p4m4a 4 --steps 5 --microbatches 4
run p4m8a 4 --steps 5 --microbatches 8
run p3m6a 3 --steps 5 --microbatches 6 --layers 9
run p2m4b 2 --steps 5 --microbatches 4
