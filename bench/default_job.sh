#!/usr/bin/env bash
# The README's first job, timed: `tide` (the embedded default: prepare the fortunes corpus once,
# then 600 steps) side by side with other thread settings, in one run, so that the machine's
# load is the same for all. Prints one JSON line per setting.
#
#   bench/default_job.sh [TIDE_BINARY] [SETTING ...]
#
# A SETTING is extra `tide train` arguments in one word, e.g. threads=1; "default" is `tide`
# with nothing added. Default settings: default threads=1. Each runs in its own fresh directory
# (the corpus is prepared again every time, as on a first run).
set -euo pipefail
tide=$(realpath "${1:-build/tide}")
shift || true
settings=("$@")
[ ${#settings[@]} -eq 0 ] && settings=(default threads=1)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for s in "${settings[@]}"; do
  dir="$work/$s"
  mkdir -p "$dir"
  args=()
  [ "$s" != default ] && args=(train "$s")
  load=$(cut -d' ' -f1 /proc/loadavg)
  start=$(date +%s.%N)
  (cd "$dir" && "$tide" "${args[@]}" > out.txt 2>&1)
  end=$(date +%s.%N)
  val=$(grep -o 'val loss [0-9.]*' "$dir/out.txt" | tail -1 | cut -d' ' -f3)
  toks=$(grep -o '[0-9]* tok/s' "$dir/out.txt" | tail -1 | cut -d' ' -f1)
  printf '{"bench":"default_job","setting":"%s","wall_s":%.1f,"loadavg_start":%s,"final_val_loss":%s,"last_tok_per_s":%s,"nproc":%s}\n' \
    "$s" "$(awk "BEGIN{print $end - $start}")" "$load" "${val:-null}" "${toks:-null}" "$(nproc)"
done
