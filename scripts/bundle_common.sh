# Helpers of the scripts that pack programs for the lent GPU machines (gpu_bundle.sh,
# gpu_check.sh, cpu_bench_bundle.sh); sourced, from the repository root.

# Keeps the bundle folder $1 (e.g. .gpu) out of git: it is rebuilt, never committed.
git_ignore_dir() {
  local exclude
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  grep -qx "/$1/" "$exclude" 2>/dev/null || echo "/$1/" >>"$exclude"
}

# Fails unless the bundle folder $1 fits the 64 MiB one run call carries.
check_carry_size() {
  du -sh "$1"
  local size
  size=$(du -sm "$1" | cut -f1)
  [ "$size" -lt 64 ] || { echo "FAILED: $1 is ${size} MiB; a run carries at most 64 MiB"; return 1; }
}
