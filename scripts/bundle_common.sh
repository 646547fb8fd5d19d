# Helpers of the scripts that pack programs for the lent GPU machines (gpu_bundle.sh,
# gpu_check.sh, cpu_bench_bundle.sh); sourced, from the repository root.

# Keeps the bundle $1 (a folder such as .gpu, or its archive) out of git: it is rebuilt, never
# committed.
git_ignore_path() {
  local exclude
  exclude=$(git rev-parse --git-path info/exclude)
  mkdir -p "$(dirname "$exclude")"
  grep -qx "/$1" "$exclude" 2>/dev/null || echo "/$1" >>"$exclude"
}

# Packs the bundle folder $1 into $1.tar.gz, what a run call carries (gzip takes the programs
# and libraries to about a third: .gpu is 62 MiB, its archive 21), and fails unless the archive
# and the working tree that travels with every call (tracked and untracked files git does not
# ignore) fit in the 64 MiB one call carries. There: tar xzf $1.tar.gz first.
pack_bundle() {
  local dir=$1 archive=$1.tar.gz limit=$((64 * 1024 * 1024)) tree bundle
  git_ignore_path "$dir"
  git_ignore_path "$archive"
  tar czf "$archive" "$dir"
  tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 stat -c %s 2>/dev/null |
    awk '{s += $1} END {print s + 0}')
  bundle=$(stat -c %s "$archive")
  echo "$archive: $((bundle >> 20)) MiB ($dir: $(du -sm "$dir" | cut -f1) MiB); with the" \
    "working tree ($((tree >> 20)) MiB) $(((tree + bundle) >> 20)) of the 64 MiB a run call carries"
  [ $((tree + bundle)) -lt $limit ] || {
    echo "FAILED: $archive and the working tree are $(((tree + bundle) >> 20)) MiB; a run call" \
      "carries at most 64 MiB: pack less into $dir"
    return 1
  }
}
